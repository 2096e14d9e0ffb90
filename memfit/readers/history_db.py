"""The measurement history: an embedded SQLite database of observed loads, in the state directory.

Every observation is one row, written in one transaction; the database runs in WAL mode so concurrent
writers (the server, `memfit measure`, another server) wait for each other instead of losing rows, and
readers never block them.
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
BUSY_TIMEOUT_S = 30


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

    def insert(self, row: ObservationRow) -> int:
        db = self._connection()
        values = [getattr(row, c) for c in COLUMNS]
        db.execute("BEGIN IMMEDIATE")
        try:
            cursor = db.execute(
                f"INSERT INTO observations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", values
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if cursor.lastrowid is None:
            raise sqlite3.DatabaseError("the observation was stored without a row id")
        return cursor.lastrowid

    def version(self) -> int:
        """The last row's id: rows are only ever added (AUTOINCREMENT), so a new one changes it."""
        return int(self._connection().execute("SELECT COALESCE(MAX(id), 0) FROM observations").fetchone()[0])

    def all(self) -> list[ObservationRow]:
        rows = self._connection().execute(f"SELECT {', '.join(COLUMNS)}, id FROM observations ORDER BY id").fetchall()
        return [ObservationRow(*row) for row in rows]
