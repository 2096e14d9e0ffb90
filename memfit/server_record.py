"""The running server's record in the state directory (`server.json`): where `memfit serve` listens and what it
answers with, so that `memfit fit`, `memfit plan` and `memfit models` ask it instead of answering from flags of
their own.

`memfit serve` writes it (0600, atomically: a temporary file renamed over the old one) once its socket listens,
and removes it however it stops (a Ctrl-C, SIGTERM, SIGHUP, a failed start; only while it still names its own
process). A record whose process is gone is stale: the CLI then answers in its own process with the recorded
model directories and settings; one whose process lives is asked only once it proves it holds the token
(memfit.remote). It is read as the token file is: a regular file of this user's, never through a symlink, not
writable by its group or others, since it says where the CLI sends the bearer token. Light on purpose: no server stack.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Any
from urllib.parse import urlsplit

from memfit.estimator.budget import BudgetSetting
from memfit.estimator.machine import GpuMemory
from memfit.readers.declared_gpus import declared_gpu, gpu_spec
from memfit.readers.model_roots import Root, RootKind
from memfit.readers.regular_files import NotARegularFile, open_regular
from memfit.token_file import UnsafeStateError, check_private, check_state_dir

RECORD_FILE = "server.json"
MAX_RECORD_BYTES = 1 << 16  # a record is a few hundred bytes (a kilobyte per dozen model directories)
FORMAT = 1  # bumped when a field changes meaning; a record of another format is not used


class RecordError(Exception):
    """The record exists but cannot be used (unreadable, not this user's, corrupt): the message says which."""


@dataclass(frozen=True)
class ServerRecord:
    url: str  # where a client on this machine reaches it: http://address:port, the numeric address and port bound
    pid: int
    roots: tuple[Root, ...]  # the model directories it indexes, in order (the usual places resolved at start)
    margin: Fraction
    budget: BudgetSetting
    token_from_env: bool  # started with MEMFIT_TOKEN (else the state directory's token file)
    path: str = ""  # the file it was read from
    hub_offline: bool = False  # started with --offline or HF_HUB_OFFLINE: it never asks the Hugging Face Hub
    gpus: tuple[GpuMemory, ...] | None = None  # the GPUs it was told to assume (--gpu, MEMFIT_GPUS)


def record_path(state_dir: str) -> str:
    return os.path.join(state_dir, RECORD_FILE)


def client_url(host: str, port: int) -> str:
    """The address a client on this machine connects to, given the one bound: a wildcard means the loopback one."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _document(record: ServerRecord) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "url": record.url,
        "pid": record.pid,
        "roots": [{"path": r.path, "kind": r.kind.value} for r in record.roots],
        "margin": str(record.margin),
        "budget": record.budget.value,
        "tokenFromEnvironment": record.token_from_env,
        "hubOffline": record.hub_offline,
        "gpus": None if record.gpus is None else [gpu_spec(g) for g in record.gpus],
    }


def write_record(state_dir: str, record: ServerRecord) -> str:
    """Write the record atomically, readable only by its owner; the path written."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    path = record_path(state_dir)
    import tempfile  # here, when a file is written: with shutil, bz2 and lzma it is ~10 ms of every command's start

    fd, tmp = tempfile.mkstemp(prefix=".server-", suffix=".json", dir=state_dir)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(_document(record), f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def remove_record(state_dir: str, pid: int) -> None:
    """Remove the record if it still names process `pid` (a server started since in the same state directory
    keeps its own); never raises."""
    path = record_path(state_dir)
    try:
        with open_regular(path, follow_symlinks=False) as f:
            named = json.loads(f.read(MAX_RECORD_BYTES)).get("pid")
        if named == pid:
            os.unlink(path)
    except (OSError, ValueError, AttributeError):
        pass


def read_record(state_dir: str) -> ServerRecord | None:
    """The record of the server using this state directory; None when there is none. RecordError (with the path
    and the reason) when there is one that cannot be used."""
    path = record_path(state_dir)
    try:
        check_state_dir(state_dir)  # whoever can write the record says where the token goes
        with open_regular(path, follow_symlinks=False) as f:
            check_private(os.fstat(f.fileno()), "the server record", path)
            data = f.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return None
    except UnsafeStateError as exc:
        raise RecordError(str(exc)) from None
    except NotARegularFile:
        raise RecordError(f"the server record {path} is not a regular file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RecordError(f"the server record {path} is a symbolic link") from None
        raise RecordError(f"the server record {path} cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"the server record {path} is over {MAX_RECORD_BYTES} bytes")
    try:
        return _parse(json.loads(data), path)
    except (ValueError, TypeError, KeyError, AttributeError, ZeroDivisionError) as exc:
        raise RecordError(f"the server record {path} is corrupt ({exc.__class__.__name__}: {exc})") from None


def _parse(doc: Any, path: str) -> ServerRecord:
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("format") != FORMAT:
        raise ValueError(f"format {doc.get('format')!r}, this memfit reads {FORMAT}")
    url, pid = doc["url"], doc["pid"]
    if not isinstance(url, str):
        raise TypeError("url is not a string")
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None or parts.username or parts.path.strip("/"):
        raise ValueError(f"url {url!r} is not http://host:port")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise ValueError(f"pid {pid!r} is not a process id")
    roots = tuple(Root(_string(r["path"]), RootKind(r["kind"])) for r in doc["roots"])
    margin = Fraction(_string(doc["margin"]))
    if not 0 <= margin <= 10:
        raise ValueError(f"margin {margin} is outside 0-10")
    token_from_env = doc["tokenFromEnvironment"]
    if not isinstance(token_from_env, bool):
        raise TypeError("tokenFromEnvironment is not a boolean")
    hub_offline = doc.get("hubOffline", False)  # a record of a memfit before the Hub lookups has none
    if not isinstance(hub_offline, bool):
        raise TypeError("hubOffline is not a boolean")
    gpus = doc.get("gpus")  # a record of a memfit before declared GPUs has none
    declared = None if gpus is None else tuple(declared_gpu(_string(g), i) for i, g in enumerate(gpus))
    budget = BudgetSetting(doc["budget"])
    return ServerRecord(url, pid, roots, margin, budget, token_from_env, path, hub_offline, declared)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists as one of this user's (signal 0 checks without sending anything): another
    user's process (EPERM) is never this state directory's server, whose record only its user can write. A live
    pid proves nothing more (pids are reused): the server's proof (memfit.server_proof) is what the CLI trusts.
    Windows has no signal 0 (os.kill would end the process): there the connection alone says."""
    if sys.platform == "win32":
        return True
    try:
        os.kill(pid, 0)
    except OSError:  # ESRCH: gone; EPERM: another user's
        return False
    return True
