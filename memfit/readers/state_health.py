"""What is wrong with the state directory's files right now, for `GET /health` and one warning per fault.

The header cache is only an optimisation and the measurement history only refines answers: when either cannot
be read or written, answers come from memory and the derived numbers, the fault is logged once (when it starts)
and `/health` reports `degraded` with the reason until an operation on that file works again. A failing file
is left alone for RETRY_S before it is tried again, so a locked or broken file does not slow every request.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

log = logging.getLogger("memfit.state")

RETRY_S = 10.0
HEADERS = "header cache"
HISTORY = "measurement history"
HISTORY_WRITES = "measurement history writes"  # a writer's lock does not stop reads: a fault of its own


class StateFileError(Exception):
    """A state file that cannot be opened or written: names the file, why, and what fixes it."""

    def __init__(self, path: str, reason: str, fix: str = "") -> None:
        super().__init__(f"{path}: {reason}" + (f". {fix}" if fix else ""))
        self.path = path
        self.reason = reason
        self.fix = fix


def describe(exc: BaseException) -> str:
    """An sqlite or OS error as a short phrase (no traceback, no repr)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def is_damaged(exc: BaseException) -> bool:
    """The file is not an SQLite database or its pages are corrupt (as opposed to locked, full or unopenable)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    text = str(exc)
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or (
        "malformed" in text or "not a database" in text
    )


def fix_for(exc: BaseException, path: str) -> str:
    """What a person does about a state file that cannot be opened."""
    name = getattr(exc, "sqlite_errorname", "")
    text = str(exc).lower()
    if is_damaged(exc):
        return (
            f"It is damaged: move it aside (mv {path} {path}.broken) and start memfit again, which makes a new, "
            "empty one (sqlite3's .recover may save the rows of the old one)"
        )
    if name in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in text:
        return (
            "Another process holds a lock on it (another memfit serve or memfit measure with the same state "
            "directory?): stop that process, or give this one its own MEMFIT_STATE_DIR"
        )
    if name == "SQLITE_FULL" or "full" in text:
        return "The disk holding it is full: free some space there, or set MEMFIT_STATE_DIR to another directory"
    if name == "SQLITE_READONLY" or "readonly" in text or "read-only" in text:
        return "It is read-only: make it and its directory writable by this user, or set MEMFIT_STATE_DIR elsewhere"
    return (
        "It must be a regular SQLite file this user can read and write, in a writable directory: move whatever is "
        "there aside, or set MEMFIT_STATE_DIR to another directory"
    )


class StateHealth:
    """The current fault of each state file (by name: HEADERS, HISTORY), thread-safe."""

    def __init__(self) -> None:
        self._faults: dict[str, tuple[str, float]] = {}  # name -> (reason, when it last failed, monotonic)
        self._lock = threading.Lock()

    def fault(self, name: str, reason: str) -> None:
        with self._lock:
            started = name not in self._faults
            self._faults[name] = (reason, time.monotonic())
        if started:
            log.warning("degraded: %s", reason)

    def ok(self, name: str) -> None:
        if name not in self._faults:  # the usual case, without the lock
            return
        with self._lock:
            ended = self._faults.pop(name, None)
        if ended is not None:
            log.warning("recovered: the %s works again", name)

    def resting(self, name: str) -> bool:
        """Whether the file failed less than RETRY_S ago (then it is not tried: memory answers)."""
        fault = self._faults.get(name)
        return fault is not None and time.monotonic() - fault[1] < RETRY_S

    @property
    def reason(self) -> str | None:
        """Every current fault, or None when the state directory works."""
        with self._lock:
            reasons = [reason for _name, (reason, _at) in sorted(self._faults.items())]
        return "; ".join(reasons) or None
