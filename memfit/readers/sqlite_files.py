"""What the state directory's SQLite files (the header cache, the measurement history) share: they are private to
their owner, their connections are pooled, and a probe for GET /health tells at once whether a file can be used.

A pooled connection serves any thread, one caller at a time, and at most IDLE wait between uses: a connection
per thread stays open (two descriptors: the file and its WAL) after its thread exits, until the garbage collector
finds it, and a server's worker threads come and go. (SQLite keeps the descriptor of a connection closed while
others of the process have the file open, and reuses it for the next one: the descriptors stay bounded by the
most connections open at once.)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator

PRIVATE = 0o600  # the files hold which models a user runs: theirs alone
SIDE_FILES = ("", "-wal", "-shm")  # the database file, its WAL and its shared memory
IDLE = 4  # connections kept open between uses; more are closed when given back


def make_private(path: str) -> None:
    """Create the database file owner-only where it is missing (SQLite would make it 0644, and its WAL and
    shared-memory files after it: SQLite gives them the database file's mode), and take group's and others'
    access off it and its side files where an earlier memfit made them so. An existing file is never opened here:
    closing a descriptor of a file drops every POSIX lock this process holds on it, SQLite's included."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE))
    for suffix in SIDE_FILES:
        with contextlib.suppress(OSError):  # missing, or another user's file: left as it is
            mode = os.stat(path + suffix).st_mode
            if stat.S_ISREG(mode) and mode & 0o077:
                os.chmod(path + suffix, stat.S_IMODE(mode) & 0o700)


class ConnectionPool:
    """Connections made by `connect` (with check_same_thread off), handed out one caller at a time."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._watch: sqlite3.Connection | None = None  # never writes: data_version's reader
        self._watch_lock = threading.Lock()

    @contextlib.contextmanager
    def use(self) -> Iterator[sqlite3.Connection]:
        """An idle connection (the one given back last), or a new one. One that raised is closed, not kept: the
        next use opens afresh."""
        with self._lock:
            db = self._idle.pop() if self._idle else None
        if db is None:
            db = self._connect()
        try:
            yield db
        except BaseException:
            db.close()
            raise
        with self._lock:
            if len(self._idle) < IDLE:
                self._idle.append(db)
                return
        db.close()

    def data_version(self) -> int:
        """A number that moves whenever a connection other than the pool's watch, of this process or another,
        commits to the file (SQLite's PRAGMA data_version, read on one connection kept for it that never writes)."""
        with self._watch_lock:
            if self._watch is None:
                self._watch = self._connect()
            try:
                return self._watch.execute("PRAGMA data_version").fetchone()[0]
            except BaseException:
                self._watch.close()
                self._watch = None
                raise

    def close(self) -> None:
        """Close the idle connections and the watch (the pool stays usable: the next use opens a new one)."""
        with self._lock:
            idle, self._idle = self._idle, []
        with self._watch_lock:
            watch, self._watch = self._watch, None
        for db in [*idle, *([watch] if watch is not None else [])]:
            db.close()


@contextlib.contextmanager
def without_waiting(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """The connection with its busy timeout off for a while: another process's lock is an error at once (a
    probe for GET /health must not wait for it)."""
    waits = int(db.execute("PRAGMA busy_timeout").fetchone()[0])
    db.execute("PRAGMA busy_timeout = 0")
    try:
        yield db
    finally:
        db.execute(f"PRAGMA busy_timeout = {waits}")


@contextlib.contextmanager
def write_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """The statements inside as one write transaction (the write lock taken first): committed together, or rolled
    back and the error raised."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


def rewrite_header(db: sqlite3.Connection) -> None:
    """A write that changes nothing, in its own transaction: the header's user_version set to its own value. It
    takes the write lock and writes a page to the WAL, as any write does, so it fails where a write would
    (locked, read-only, full)."""
    with write_transaction(db):
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        db.execute(f"PRAGMA user_version = {version}")
