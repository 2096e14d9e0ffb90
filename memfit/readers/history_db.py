"""The measurement history: an embedded SQLite database of observed loads, in the state directory.

Every observation is one row, written in one transaction; the database runs in WAL mode so concurrent
writers (the server, `memfit measure`, another server) wait for each other instead of losing rows, and
readers never block them. A lock held longer than BUSY_TIMEOUT_S (another process's exclusive lock) is an
error, not a wait.

The file is the one opened at start-up, identified by (device, inode): before a write is acknowledged the
file at the path must still be that one (SQLite's open descriptors keep its inode alive, so no other file can
take its number). When it was deleted or replaced, writes are refused until memfit is restarted on the file
now at the path. (Reopening in place is unsafe: when the old file's last connection closes, SQLite checkpoints
and deletes `<path>-wal` by name, which would then be the new file's log.)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import urllib.parse
from dataclasses import dataclass

from memfit.readers.state_health import StateFileError, describe, fix_for

SCHEMA = """
CREATE TABLE IF NOT EXISTS observations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    model_id TEXT NOT NULL,
    revision TEXT NOT NULL,
    quant TEXT NOT NULL,
    artifact_bytes INTEGER,
    allocated_tokens INTEGER NOT NULL,
    streams INTEGER NOT NULL,
    key_element_bytes INTEGER NOT NULL,
    value_element_bytes INTEGER NOT NULL,
    mode TEXT NOT NULL,
    weights_bytes INTEGER,
    kv_cache_bytes INTEGER,
    recurrent_state_bytes INTEGER,
    workspace_bytes INTEGER,
    companions_bytes INTEGER,
    runtime TEXT NOT NULL,
    observed_at TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS observations_by_model ON observations (model_id, allocated_tokens, streams);
"""
COLUMNS = (
    "model_id",
    "revision",
    "quant",
    "artifact_bytes",
    "allocated_tokens",
    "streams",
    "key_element_bytes",
    "value_element_bytes",
    "mode",
    "weights_bytes",
    "kv_cache_bytes",
    "recurrent_state_bytes",
    "workspace_bytes",
    "companions_bytes",
    "runtime",
    "observed_at",
    "note",
)
BUSY_TIMEOUT_S = 2
REPLACED = "the file was deleted or replaced after memfit opened it; restart memfit to use the file at the path"


@dataclass(frozen=True)
class ObservationRow:
    model_id: str
    revision: str
    quant: str
    artifact_bytes: int | None
    allocated_tokens: int
    streams: int
    key_element_bytes: int
    value_element_bytes: int
    mode: str
    weights_bytes: int | None
    kv_cache_bytes: int | None
    recurrent_state_bytes: int | None
    workspace_bytes: int | None
    companions_bytes: int | None
    runtime: str
    observed_at: str
    note: str = ""
    id: int | None = None


class HistoryDB:
    """One connection per thread; every insert is its own transaction."""

    def __init__(self, path: str) -> None:
        """Opens and checks the database; StateFileError (naming the file and the fix) when it cannot be used."""
        self.path = path
        self._local = threading.local()
        self._identity: tuple[int, int] | None = None  # the file opened at start-up
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
            with self._connection() as db:
                check = db.execute("PRAGMA quick_check(1)").fetchone()[0]  # a truncated or damaged file fails here
                if check != "ok":
                    raise sqlite3.DatabaseError(f"database disk image is malformed ({check})")
        except (sqlite3.Error, OSError) as exc:
            self._close()
            raise StateFileError(
                path, f"cannot open the measurement history: {describe(exc)}", fix_for(exc, path)
            ) from exc

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection to the file opened at start-up (never to another one at the path)."""
        db = getattr(self._local, "db", None)
        if db is None:
            if self._identity is None:
                db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            else:  # mode=rw: a deleted file is not made anew here
                db = sqlite3.connect(_uri(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=True)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                if self._identity is None:
                    db.executescript(SCHEMA)
                    self._identity = _identity(self.path)
                elif not self.still_at_path():
                    raise sqlite3.OperationalError(REPLACED)
            except BaseException:
                db.close()
                raise
            self._local.db = db
        return db

    def still_at_path(self) -> bool:
        """Whether the file opened at start-up is still the file at the path."""
        try:
            return self._identity == _identity(self.path)
        except OSError:
            return False

    def _close(self) -> None:
        db = getattr(self._local, "db", None)
        self._local.db = None
        if db is not None:
            db.close()

    def insert(self, row: ObservationRow) -> int:
        """The new row's id, once it is committed to the file at the path; StateFileError when it cannot be."""
        try:
            db = self._connection()
            if not self.still_at_path():
                raise sqlite3.OperationalError(REPLACED)
            values = [getattr(row, c) for c in COLUMNS]
            db.execute("BEGIN IMMEDIATE")
            try:
                cursor = db.execute(
                    f"INSERT INTO observations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                    values,
                )
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            if not self.still_at_path():  # the row went to a file nobody will read: not acknowledged
                raise sqlite3.OperationalError(REPLACED)
        except (sqlite3.Error, OSError) as exc:
            self._close()
            raise StateFileError(self.path, f"cannot write the measurement history: {describe(exc)}") from exc
        if cursor.lastrowid is None:
            raise sqlite3.DatabaseError("the observation was stored without a row id")
        return cursor.lastrowid

    def version(self) -> int:
        """The last row's id: rows are only ever added (AUTOINCREMENT), so a new one changes it."""
        return int(self._connection().execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()[0])

    def all(self) -> list[ObservationRow]:
        rows = self._connection().execute(f"SELECT {', '.join(COLUMNS)}, id FROM observations ORDER BY id").fetchall()
        return [ObservationRow(*row) for row in rows]


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=rw"
