"""Parsed GGUF header summaries kept across restarts (SQLite in the state directory), by file identity.

A file's identity is (device, inode, size, mtime_ns, ctime_ns): a replaced, grown or touched file has a new one and is
read again. Values are JSON: GGUF arrays are lists, and long arrays that were only counted are
`{"skipped": [item_type, count]}` (a skipped long string `{"skipped_string": length}`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading

from memfit.readers.gguf_header import SkippedArray, SkippedString

SCHEMA = "CREATE TABLE IF NOT EXISTS headers (identity TEXT PRIMARY KEY, summary TEXT NOT NULL)"
MAX_ROWS = 10_000


def _encode(value: object) -> object:
    if isinstance(value, SkippedArray):
        return {"skipped": [value.item_type, value.count]}
    if isinstance(value, SkippedString):
        return {"skipped_string": value.length}
    return list(value) if isinstance(value, tuple) else value


def _decode(value: object) -> object:
    if isinstance(value, dict) and "skipped" in value:
        return SkippedArray(*value["skipped"])
    if isinstance(value, dict) and "skipped_string" in value:
        return SkippedString(value["skipped_string"])
    return tuple(value) if isinstance(value, list) else value


def dumps(metadata: dict, tensors: tuple, head: str) -> str:
    """A summary, with `head`: the digest of the file's first bytes it was read from."""
    return json.dumps({"metadata": {k: _encode(v) for k, v in metadata.items()}, "tensors": tensors, "head": head})


def loads(text: str) -> tuple[dict, tuple, str]:
    data = json.loads(text)
    metadata = {k: _decode(v) for k, v in data["metadata"].items()}
    return metadata, tuple(tuple(t) for t in data["tensors"]), data.get("head", "")


class HeaderStore:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        self._local = threading.local()
        self._db().execute(SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            self._local.db = db
        return db

    def get(self, identity: str) -> str | None:
        row = self._db().execute("SELECT summary FROM headers WHERE identity = ?", (identity,)).fetchone()
        return row[0] if row else None

    def delete(self, identity: str) -> None:
        self._db().execute("DELETE FROM headers WHERE identity = ?", (identity,))

    def put(self, identity: str, summary: str) -> None:
        """Store a summary; past MAX_ROWS the oldest go (a file that changed leaves its old identity behind)."""
        db = self._db()
        db.execute("INSERT OR REPLACE INTO headers (identity, summary) VALUES (?, ?)", (identity, summary))
        db.execute("DELETE FROM headers WHERE rowid <= (SELECT MAX(rowid) FROM headers) - ?", (MAX_ROWS,))
