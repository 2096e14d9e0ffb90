"""The measurement history: an embedded SQLite database of observed loads, in the state directory.

Every observation is one row, written in one transaction; the database runs in WAL mode so concurrent
writers (the server, `memfit measure`, another server) wait for each other instead of losing rows, and
readers never block them. Answers look an observation up with one indexed query (nothing is loaded into
memory), and the history is bounded: each insert deletes, in its own transaction, what is beyond the newest
PER_WORKLOAD_CAP rows of its identity and workload and beyond the newest TOTAL_CAP rows overall.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass

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
BUSY_TIMEOUT_S = 30
PER_WORKLOAD_CAP = 16  # rows kept per identity and workload: answers use the newest, the rest are its record
TOTAL_CAP = 100_000  # rows kept overall (about 30 MB): the oldest go first
# The longest string each column takes (the contract's limits for what a request can set; the note is memfit's).
MAX_CHARS = {"model_id": 1024, "revision": 256, "quant": 64, "mode": 64, "runtime": 256, "observed_at": 64, "note": 512}
IDENTITY = ("model_id", "revision", "quant", "artifact_bytes")
WORKLOAD = ("allocated_tokens", "streams", "key_element_bytes", "value_element_bytes", "mode")
SELECT = f"SELECT {', '.join(COLUMNS)}, id FROM observations"
KEY_WHERE = " AND ".join(f"{c} IS ?" for c in (*IDENTITY, *WORKLOAD))  # IS: artifact_bytes may be NULL


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
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        self._local = threading.local()
        with self._connection() as db:
            db.executescript(SCHEMA)

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (a test counts the work done on it)."""
        return self._connection()

    def insert(self, row: ObservationRow) -> int:
        """Store one row and trim what is beyond the caps, in one transaction; ValueError for an overlong string."""
        for column, limit in MAX_CHARS.items():
            if len(getattr(row, column)) > limit:
                raise ValueError(f"{column} is longer than {limit} characters")
        db = self._connection()
        values = [getattr(row, c) for c in COLUMNS]
        key = [getattr(row, c) for c in (*IDENTITY, *WORKLOAD)]
        db.execute("BEGIN IMMEDIATE")
        try:
            cursor = db.execute(
                f"INSERT INTO observations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", values
            )
            db.execute(
                f"DELETE FROM observations WHERE {KEY_WHERE} AND id < (SELECT MIN(id) FROM (SELECT id FROM"
                f" observations WHERE {KEY_WHERE} ORDER BY id DESC LIMIT ?))",
                [*key, *key, PER_WORKLOAD_CAP],
            )
            db.execute(
                "DELETE FROM observations WHERE id <= (SELECT id FROM observations ORDER BY id DESC LIMIT 1 OFFSET ?)",
                [TOTAL_CAP],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if cursor.lastrowid is None:
            raise sqlite3.DatabaseError("the observation was stored without a row id")
        return cursor.lastrowid

    def latest(self, identity: tuple, workload: tuple) -> ObservationRow | None:
        """The newest row of this identity and workload that measured a workspace (one indexed lookup)."""
        found = (
            self._connection()
            .execute(
                f"{SELECT} INDEXED BY observations_by_key WHERE {KEY_WHERE} AND workspace_bytes IS NOT NULL"
                " ORDER BY id DESC LIMIT 1",
                [*identity, *workload],
            )
            .fetchone()
        )
        return ObservationRow(*found) if found else None

    def any_for_model(self, model_id: str, workload: tuple) -> bool:
        """Whether any row records this model id under this workload, whatever its identity."""
        where = " AND ".join(f"{c} = ?" for c in ("model_id", *WORKLOAD))
        query = f"SELECT 1 FROM observations INDEXED BY observations_by_workload WHERE {where} LIMIT 1"
        return self._connection().execute(query, [model_id, *workload]).fetchone() is not None

    def newest(self, limit: int, model_id: str | None = None) -> list[ObservationRow]:
        """Up to `limit` rows, newest first; only this model id's when given."""
        db = self._connection()
        if model_id is None:
            rows = db.execute(f"{SELECT} ORDER BY id DESC LIMIT ?", [limit]).fetchall()
        else:
            rows = db.execute(
                f"{SELECT} INDEXED BY observations_by_model_id WHERE model_id = ? ORDER BY id DESC LIMIT ?",
                [model_id, limit],
            ).fetchall()
        return [ObservationRow(*row) for row in rows]

    def delete(self, observation_id: int) -> bool:
        """Remove one row; False when no row has that id."""
        return self._connection().execute("DELETE FROM observations WHERE id = ?", [observation_id]).rowcount == 1

    def count(self) -> int:
        return int(self._connection().execute("SELECT COUNT(*) FROM observations").fetchone()[0])

    def all(self) -> list[ObservationRow]:
        rows = self._connection().execute(f"{SELECT} ORDER BY id").fetchall()
        return [ObservationRow(*row) for row in rows]
