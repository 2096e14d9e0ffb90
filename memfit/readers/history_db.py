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

Answers look an observation up with one indexed query (nothing is loaded into
memory), and the history is bounded: each insert deletes, in its own transaction, what is beyond the newest
PER_WORKLOAD_CAP rows of its identity and workload and beyond the newest TOTAL_CAP rows overall.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator

from memfit.estimator.fit_types import ObservationRow
from memfit.readers.sqlite_files import ConnectionPool, make_private, rewrite_header, without_waiting
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
DROP INDEX IF EXISTS observations_by_model;
CREATE INDEX IF NOT EXISTS observations_by_model_id ON observations (model_id);
CREATE INDEX IF NOT EXISTS observations_by_workload ON observations (
    model_id, allocated_tokens, streams, key_element_bytes, value_element_bytes, mode
);
CREATE INDEX IF NOT EXISTS observations_by_key ON observations (
    model_id, revision, quant, artifact_bytes, allocated_tokens, streams, key_element_bytes, value_element_bytes, mode
);
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
LOCKED_RETRY_S = 0.01  # between tries of the WAL switch while another connection holds the file
REPLACED = "the file was deleted or replaced after memfit opened it; restart memfit to use the file at the path"
PER_WORKLOAD_CAP = 16  # rows kept per identity and workload: answers use the newest, the rest are its record
TOTAL_CAP = 100_000  # rows kept overall (about 30 MB): the oldest go first
# The longest string each column takes (the contract's limits for what a request can set; the note is memfit's).
MAX_CHARS = {"model_id": 1024, "revision": 256, "quant": 64, "mode": 64, "runtime": 256, "observed_at": 64, "note": 512}
IDENTITY = ("model_id", "revision", "quant", "artifact_bytes")
WORKLOAD = ("allocated_tokens", "streams", "key_element_bytes", "value_element_bytes", "mode")
SELECT = f"SELECT {', '.join(COLUMNS)}, id FROM observations"
KEY_WHERE = " AND ".join(f"{c} IS ?" for c in (*IDENTITY, *WORKLOAD))  # IS: artifact_bytes may be NULL


class HistoryDB:
    """Connections from a pool (sqlite_files.ConnectionPool); every insert is its own transaction."""

    def __init__(self, path: str) -> None:
        """Opens and checks the database; StateFileError (naming the file and the fix) when it cannot be used."""
        self.path = path
        self._identity: tuple[int, int] | None = None  # the file opened at start-up
        self._pool = ConnectionPool(self._connect)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
            make_private(path)
            with self._pool.use() as db:
                check = db.execute("PRAGMA quick_check(1)").fetchone()[0]  # a truncated or damaged file fails here
                if check != "ok":
                    raise sqlite3.DatabaseError(f"database disk image is malformed ({check})")
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise StateFileError(
                path, f"cannot open the measurement history: {describe(exc)}", fix_for(exc, path)
            ) from exc

    def _connect(self) -> sqlite3.Connection:
        """A new connection to the file opened at start-up (never to another one at the path)."""
        if self._identity is None:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        else:  # mode=rw: a deleted file is not made anew here
            db = sqlite3.connect(
                _uri(self.path), timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=True, check_same_thread=False
            )
        try:
            deadline = time.monotonic() + BUSY_TIMEOUT_S
            while True:  # SQLite answers "locked" at once, without its busy handler, where waiting could deadlock:
                try:  # another connection making the file WAL or its schema at the same moment
                    db.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(LOCKED_RETRY_S)
            db.execute("PRAGMA synchronous=NORMAL")
            if self._identity is None:
                db.executescript(SCHEMA)
                self._identity = _identity(self.path)
            elif not self.still_at_path():
                raise sqlite3.OperationalError(REPLACED)
        except BaseException:
            db.close()
            raise
        return db

    def still_at_path(self) -> bool:
        """Whether the file opened at start-up is still the file at the path."""
        try:
            return self._identity == _identity(self.path)
        except OSError:
            return False

    def close(self) -> None:
        """Close the connections not in use."""
        self._pool.close()

    def connection(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A pooled connection, for one use (a test counts the work done on it; the next use of the pool gets it)."""
        return self._pool.use()

    @contextlib.contextmanager
    def _request(self, verb: str) -> Iterator[sqlite3.Connection]:
        """A connection to the file opened at start-up, for an operation a request asked for; StateFileError
        ("cannot <verb> the measurement history: <why>") when the file cannot be used, deleted or replaced."""
        try:
            if not self.still_at_path():
                raise sqlite3.OperationalError(REPLACED)
            with self._pool.use() as db:
                yield db
        except (sqlite3.Error, OSError) as exc:
            raise StateFileError(self.path, f"cannot {verb} the measurement history: {describe(exc)}") from exc

    def insert(self, row: ObservationRow) -> int:
        """Store one row and trim what is beyond the caps, in one transaction, and return its id once it is committed
        to the file at the path; ValueError for an overlong string, StateFileError when it cannot be stored."""
        for column, limit in MAX_CHARS.items():
            if len(getattr(row, column)) > limit:
                raise ValueError(f"{column} is longer than {limit} characters")
        values = [getattr(row, c) for c in COLUMNS]
        key = [getattr(row, c) for c in (*IDENTITY, *WORKLOAD)]
        with self._request("write") as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                cursor = db.execute(
                    f"INSERT INTO observations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                    values,
                )
                db.execute(
                    f"DELETE FROM observations WHERE {KEY_WHERE} AND id < (SELECT MIN(id) FROM (SELECT id FROM"
                    f" observations WHERE {KEY_WHERE} ORDER BY id DESC LIMIT ?))",
                    [*key, *key, PER_WORKLOAD_CAP],
                )
                db.execute(
                    "DELETE FROM observations WHERE id <= (SELECT id FROM observations ORDER BY id DESC LIMIT 1"
                    " OFFSET ?)",
                    [TOTAL_CAP],
                )
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            if not self.still_at_path():  # the row went to a file nobody will read: not acknowledged
                raise sqlite3.OperationalError(REPLACED)
        if cursor.lastrowid is None:
            raise sqlite3.DatabaseError("the observation was stored without a row id")
        return cursor.lastrowid

    def version(self) -> int:
        """Moves whenever an observation is stored or deleted, by this process or another (answers built from the
        history are kept while it stays)."""
        return self._pool.data_version()

    def latest(self, identity: tuple, workload: tuple) -> ObservationRow | None:
        """The newest row of this identity and workload that measured a workspace (one indexed lookup)."""
        with self._pool.use() as db:
            found = db.execute(
                f"{SELECT} INDEXED BY observations_by_key WHERE {KEY_WHERE} AND workspace_bytes IS NOT NULL"
                " ORDER BY id DESC LIMIT 1",
                [*identity, *workload],
            ).fetchone()
        return ObservationRow(*found) if found else None

    def any_for_model(self, model_id: str, workload: tuple) -> bool:
        """Whether any row records this model id under this workload, whatever its identity."""
        where = " AND ".join(f"{c} = ?" for c in ("model_id", *WORKLOAD))
        query = f"SELECT 1 FROM observations INDEXED BY observations_by_workload WHERE {where} LIMIT 1"
        with self._pool.use() as db:
            return db.execute(query, [model_id, *workload]).fetchone() is not None

    def newest(self, limit: int, model_id: str | None = None) -> list[ObservationRow]:
        """Up to `limit` rows, newest first; only this model id's when given. StateFileError when the file
        cannot be read."""
        with self._request("read") as db:
            if model_id is None:
                rows = db.execute(f"{SELECT} ORDER BY id DESC LIMIT ?", [limit]).fetchall()
            else:
                rows = db.execute(
                    f"{SELECT} INDEXED BY observations_by_model_id WHERE model_id = ? ORDER BY id DESC LIMIT ?",
                    [model_id, limit],
                ).fetchall()
        return [ObservationRow(*row) for row in rows]

    def delete(self, observation_id: int) -> bool:
        """Remove one row; False when no row has that id, StateFileError when the file cannot be written."""
        with self._request("write") as db:
            return db.execute("DELETE FROM observations WHERE id = ?", [observation_id]).rowcount == 1

    def probe(self) -> None:
        """One read of the file, without waiting for another process's lock (raises when it cannot be read)."""
        with self._pool.use() as db, without_waiting(db):
            db.execute("SELECT 1 FROM observations LIMIT 1").fetchone()

    def probe_write(self) -> None:
        """One write that changes nothing, without waiting for another process's lock; StateFileError when the
        file cannot be written now."""
        with self._request("write") as db, without_waiting(db):
            rewrite_header(db)

    def count(self) -> int:
        with self._pool.use() as db:
            return int(db.execute("SELECT COUNT(*) FROM observations").fetchone()[0])

    def all(self) -> list[ObservationRow]:
        with self._pool.use() as db:
            rows = db.execute(f"{SELECT} ORDER BY id").fetchall()
        return [ObservationRow(*row) for row in rows]


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=rw"


class UnopenedHistoryDB(HistoryDB):
    """A measurement history that could not be opened, in a process that serves without it (a `--workers` worker:
    its supervisor opened the file, so it was damaged since). Every use raises why it could not be opened, so this
    process is degraded as a server is when its history breaks under it: answers use the derived numbers, /health
    says why and the fix, observations are refused with a 503, until memfit is restarted on a usable file."""

    def __init__(self, error: StateFileError) -> None:  # not HistoryDB's: that is the open that failed
        self.path = error.path
        self.error = error
        self._identity = None
        self._pool = ConnectionPool(self._connect)

    def _connect(self) -> sqlite3.Connection:
        raise sqlite3.OperationalError(". ".join(part for part in (self.error.reason, self.error.fix) if part))

    def still_at_path(self) -> bool:
        return True  # no file was opened, so none was replaced: each use says why none was (_connect)
