"""The bearer token in the state directory: MEMFIT_TOKEN, else one generated at first start into a 0600 file.

Light on purpose (no server stack): the server loads or creates the token here, and the CLI reads it here to ask
a running server. Checking a request's token is memfit.http.auth's job."""

from __future__ import annotations

import errno
import os
import re
import secrets
from dataclasses import dataclass

from memfit.readers.regular_files import NotARegularFile, open_regular

TOKEN_FILE = "token"
TOKEN_ENV = "MEMFIT_TOKEN"
MAX_TOKEN_CHARS = 1024  # a generated token is 43; a longer one would crowd the request headers
USABLE = re.compile(r"[\x21-\x7e]+")  # what `Authorization: Bearer <token>` carries: visible ASCII, no spaces


@dataclass(frozen=True)
class Token:
    value: str
    path: str | None  # the file it was read from or written to; None when it came from MEMFIT_TOKEN


def write_token_file(path: str, value: str) -> None:
    """Write atomically: a 0600 temporary file in the same directory, renamed over the old one."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    import tempfile  # here, when a file is written: with shutil, bz2 and lzma it is ~10 ms of every command's start

    fd, tmp = tempfile.mkstemp(prefix=".token-", dir=directory)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class UnusableTokenError(ValueError):
    """A token no client could present (empty, with spaces or characters outside visible ASCII, too long): the
    message says where it came from and what to do."""


def check_usable(token: Token) -> Token:
    """The token, unless it cannot be sent as `Authorization: Bearer <token>`: then UnusableTokenError."""
    value = token.value
    if USABLE.fullmatch(value) and len(value) <= MAX_TOKEN_CHARS:
        return token
    if not value.strip():
        problem = "is empty"
    elif len(value) > MAX_TOKEN_CHARS:
        problem = f"is over {MAX_TOKEN_CHARS} characters"
    else:
        problem = "has spaces, control characters or characters outside ASCII"
    where, fix = (
        (f"in {token.path}", f"remove {token.path} to have memfit make a new one")
        if token.path
        else (TOKEN_ENV, f"unset {TOKEN_ENV} to use the state directory's token file")
    )
    raise UnusableTokenError(
        f"the token {where} {problem}, so no client could send it: use letters, digits and punctuation, or {fix}"
    )


class UnsafeStateError(OSError):
    """The state directory or the token file could be read or replaced by someone else: memfit refuses to use it."""


def check_private(st: os.stat_result, what: str, path: str) -> None:
    if st.st_uid != os.geteuid():
        raise UnsafeStateError(f"{what} {path} belongs to another user (uid {st.st_uid}); memfit will not use it")
    if st.st_mode & 0o022:
        raise UnsafeStateError(f"{what} {path} is writable by its group or others; make it private: chmod go-w {path}")


def _read_token_file(path: str) -> str | None:
    """The token in the file at `path`, None when there is none. A symlink is refused (never followed: its target
    would be read as the token and made private), as is anything that is not a regular file of this user's."""
    try:
        with open_regular(path, follow_symlinks=False) as f:
            st = os.fstat(f.fileno())
            check_private(st, "the token file", path)
            if st.st_mode & 0o077:  # loosened by hand: private again, through the descriptor read
                os.fchmod(f.fileno(), 0o600)
            return f.read(4096).decode("utf-8", "replace").strip() or None
    except FileNotFoundError:
        return None
    except NotARegularFile:
        raise UnsafeStateError(f"the token file {path} is not a regular file; remove it") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeStateError(f"the token file {path} is a symbolic link; remove it") from None
        raise


def check_state_dir(state_dir: str) -> None:
    """UnsafeStateError when the state directory exists and is not this user's alone; nothing when it is absent."""
    try:
        check_private(os.stat(state_dir), "the state directory", state_dir)
    except FileNotFoundError:
        pass


def read_token(state_dir: str, environ: dict[str, str] | None = None) -> Token | None:
    """What a client presents: MEMFIT_TOKEN when set, else the token file's; None when there is neither. Never
    creates one. UnsafeStateError and UnusableTokenError as for load_token."""
    env = os.environ if environ is None else environ
    if env.get(TOKEN_ENV):
        return check_usable(Token(env[TOKEN_ENV], None))
    check_state_dir(state_dir)
    path = os.path.join(state_dir, TOKEN_FILE)
    value = _read_token_file(path)
    return check_usable(Token(value, path)) if value else None


def load_token(state_dir: str, environ: dict[str, str] | None = None) -> Token:
    """MEMFIT_TOKEN when set (set and empty is refused: nothing could present it); else the token file, created
    with a fresh random token when absent or empty. UnsafeStateError when the state directory or the token file is
    not this user's alone; UnusableTokenError when the token could not be sent in a request."""
    env = os.environ if environ is None else environ
    if TOKEN_ENV in env:
        return check_usable(Token(env[TOKEN_ENV], None))
    path = os.path.join(state_dir, TOKEN_FILE)
    check_state_dir(state_dir)  # made below, private, when absent
    value = _read_token_file(path)
    if value:
        return check_usable(Token(value, path))
    value = secrets.token_urlsafe(32)
    write_token_file(path, value)
    return Token(value, path)
