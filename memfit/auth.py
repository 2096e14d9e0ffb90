"""Bearer tokens: MEMFIT_TOKEN, else one generated at first start into a 0600 file in the state directory.

Checking a request's token is memfit.http.auth's job; openapi.yaml's x-bearerInfoFunc names it here."""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass

from memfit.http.auth import bearer_info  # noqa: F401  (openapi.yaml: x-bearerInfoFunc: memfit.auth.bearer_info)

TOKEN_FILE = "token"


@dataclass(frozen=True)
class Token:
    value: str
    path: str | None  # the file it was read from or written to; None when it came from MEMFIT_TOKEN


def write_token_file(path: str, value: str) -> None:
    """Write atomically: a 0600 temporary file in the same directory, renamed over the old one."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".token-", dir=directory)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load_token(state_dir: str, environ: dict[str, str] | None = None) -> Token:
    """MEMFIT_TOKEN when set; else the token file, created with a fresh random token when absent or empty."""
    env = os.environ if environ is None else environ
    if env.get("MEMFIT_TOKEN"):
        return Token(env["MEMFIT_TOKEN"], None)
    path = os.path.join(state_dir, TOKEN_FILE)
    try:
        with open(path) as f:
            value = f.read().strip()
        if value:
            os.chmod(path, 0o600)
            return Token(value, path)
    except FileNotFoundError:
        pass
    value = secrets.token_urlsafe(32)
    write_token_file(path, value)
    return Token(value, path)
