"""What is wrong with the state directory's files right now, for `GET /health` and one warning per fault.

The header cache is only an optimisation and the measurement history only refines answers: when either cannot
be read or written, answers come from memory and the derived numbers, the fault is logged once (when it starts)
and `/health` reports `degraded` with the reason until an operation on that file works again. A failing file
is left alone for RETRY_S before a request tries it again, so a locked or broken file does not slow every request.
A lock another process holds passes by itself, and no request may use the file for long after (the header cache
is read only for files not yet in memory; the history is written only by observations): `/health` tries a file
locked that way again, without waiting for the lock, once the fault is PROBE_S old, so that `degraded` ends within
seconds of the lock being let go. Other faults (damaged, full, read-only) end when a request's operation works.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass

log = logging.getLogger("memfit.state")

RETRY_S = 10.0
PROBE_S = 1.0  # how old a lock's fault is before GET /health tries the file again
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


def is_locked(exc: BaseException | None) -> bool:
    """The file is locked by another connection (another process's transaction): it passes by itself."""
    name = getattr(exc, "sqlite_errorname", "")
    return name in ("SQLITE_BUSY", "SQLITE_LOCKED") or "locked" in str(exc).lower()


def fix_for(exc: BaseException, path: str) -> str:
    """What a person does about a state file that cannot be opened."""
    name = getattr(exc, "sqlite_errorname", "")
    text = str(exc).lower()
    if is_damaged(exc):
        return (
            f"It is damaged: move it aside (mv {path} {path}.broken) and start memfit again, which makes a new, "
            "empty one (sqlite3's .recover may save the rows of the old one)"
        )
    if is_locked(exc):
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


@dataclass(frozen=True)
class Fault:
    reason: str
    at: float  # when it last failed (monotonic)
    locked: bool  # by another connection's lock (is_locked)


class StateHealth:
    """The current fault of each state file (by name: HEADERS, HISTORY, HISTORY_WRITES), thread-safe."""

    def __init__(self) -> None:
        self._faults: dict[str, Fault] = {}
        self._lock = threading.Lock()

    def fault(self, name: str, reason: str, cause: BaseException | None = None) -> None:
        """The file `name` failed, for `reason`; `cause` (the error) tells whether it was locked."""
        with self._lock:
            started = name not in self._faults
            self._faults[name] = Fault(reason, time.monotonic(), is_locked(cause))
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
        """Whether the file failed less than RETRY_S ago (then a request does not try it: memory answers)."""
        fault = self._faults.get(name)
        return fault is not None and time.monotonic() - fault.at < RETRY_S

    def due(self, name: str) -> bool:
        """Whether GET /health tries the file again now: a lock made it fail, PROBE_S ago or more."""
        fault = self._faults.get(name)
        return fault is not None and fault.locked and time.monotonic() - fault.at >= PROBE_S

    @property
    def reason(self) -> str | None:
        """Every current fault, or None when the state directory works."""
        with self._lock:
            reasons = [fault.reason for _name, fault in sorted(self._faults.items())]
        return "; ".join(reasons) or None
