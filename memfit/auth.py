"""Bearer tokens: MEMFIT_TOKEN, else one generated at first start into a 0600 file in the state directory."""

from __future__ import annotations

import hmac
import os
import secrets
import tempfile
from dataclasses import dataclass

from connexion.lifecycle import ConnexionRequest

from memfit.handlers.context import STATE_KEY

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


def bearer_info(token: str, request: ConnexionRequest) -> dict | None:
    """connexion's x-bearerInfoFunc: the presented token against the server's, in constant time."""
    expected: str = request.scope[STATE_KEY].token
    if hmac.compare_digest(token.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")):
        return {"sub": "memfit-client"}
    return None
