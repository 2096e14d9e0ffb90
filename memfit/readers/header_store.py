"""Parsed GGUF header summaries kept across restarts (SQLite in the state directory), by file identity.

A file's identity is (device, inode, size, mtime_ns, ctime_ns): a replaced, grown or touched file has a new one and is
read again. Values are JSON: GGUF arrays are lists, and long arrays that were only counted are
`{"skipped": [item_type, count]}` (a skipped long string `{"skipped_string": length}`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import stat
import sys
import threading
import time

from memfit.estimator.gguf_file import SkippedArray, SkippedString
from memfit.readers.sqlite_files import (
    ConnectionPool,
    make_private,
    rewrite_header,
    without_waiting,
    write_transaction,
)
from memfit.readers.state_health import HEADERS, StateHealth, describe, is_damaged

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS headers (identity TEXT PRIMARY KEY, summary TEXT NOT NULL,"
    " bytes INTEGER NOT NULL DEFAULT 0, used INTEGER NOT NULL DEFAULT 0)"
)
# The listing's entries derived from the summaries (service/listing.py), by a key naming the file set, its
# identities and the code that derived them: a restart lists every model from here at once.
LISTING_SCHEMA = "CREATE TABLE IF NOT EXISTS listing (key TEXT PRIMARY KEY, entry TEXT NOT NULL)"
MAX_LISTED = 1 << 18  # entries kept (a few hundred bytes each); past it the oldest go
SQL_VARIABLES = 900  # keys per SELECT (SQLite's limit on a statement's variables was 999 before 3.32)
# The store's budget: the summaries' bytes, not their count (a 262k-vocabulary model's summary is ~100x a tiny
# one's). Past it, the least recently used summaries go until it holds EVICT_TO of it.
MAX_BYTES = 256 << 20
EVICT_TO = 0.9
# Other processes on the same file (`memfit serve --workers N`, a `memfit fit` beside a server) add rows this one's
# running count does not see: it reads the exact total again once its own writes since the last reading pass this
# part of the budget, so that together they overshoot the budget by at most this part each.
RECOUNT_EVERY = 1 / 16
BUSY_TIMEOUT_S = 1.0  # another process's lock makes a miss, not a wait
# A read marks its summary used (the eviction order) in memory; the marks are written together, in one transaction,
# once this many are pending or this long after the last write, and before anything that reads the order. One
# UPDATE per read, each its own commit, was half of a restart's reading of its summaries from the store.
TOUCH_BATCH = 512
TOUCH_SECONDS = 1.0

log = logging.getLogger("memfit.state")


def encode_value(value: object) -> object:
    """A metadata value as JSON holds it."""
    if isinstance(value, SkippedArray):
        return {"skipped": [value.item_type, value.count]}
    if isinstance(value, SkippedString):
        return {"skipped_string": value.length}
    return list(value) if isinstance(value, tuple) else value


def decode_value(value: object) -> object:
    """A metadata value from its JSON (encode_value's inverse)."""
    if isinstance(value, dict) and "skipped" in value:
        return SkippedArray(*value["skipped"])
    if isinstance(value, dict) and "skipped_string" in value:
        return SkippedString(value["skipped_string"])
    return tuple(value) if isinstance(value, list) else value


def dumps(metadata: dict, tensors: tuple, head: str) -> str:
    """A summary, with `head`: the digest of the file's first bytes it was read from."""
    return json.dumps({"metadata": {k: encode_value(v) for k, v in metadata.items()}, "tensors": tensors, "head": head})


def loads(text: str) -> tuple[dict, tuple, str]:
    data = json.loads(text)
    metadata = {k: decode_value(v) for k, v in data["metadata"].items()}
    tensors = tuple((sys.intern(t[0]), *t[1:]) for t in data["tensors"])  # names shared by every model holding them
    return metadata, tensors, data.get("head", "")


class HeaderStore:
    """The store never fails a caller: a read or write it cannot make is a miss or a no-op, reported to `health`
    (the file is then left alone for state_health.RETRY_S). At start-up a file that is not a readable database is
    moved aside (to `<path>.broken-<time>`) and a new one made."""

    def __init__(self, path: str, health: StateHealth | None = None, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._total: int | None = None  # the stored bytes: exact when read, then this process's writes added
        self._unread = 0  # bytes this process wrote since it last read the exact total
        self._touched: dict[str, int] = {}  # identity -> when it was last read, not written yet
        self._touch_lock = threading.Lock()
        self._touches_written = time.monotonic()
        self.health = health if health is not None else StateHealth()
        self._pool = ConnectionPool(self._connect)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
            self._open_checked()
        except (sqlite3.Error, OSError) as exc:
            if not (is_damaged(exc) or _not_a_file(path)):
                self._failed(exc)
                return
            self._move_aside()
            try:
                self._open_checked()
            except (sqlite3.Error, OSError) as again:
                self._failed(again)

    def _open_checked(self) -> None:
        make_private(self.path)
        with self._pool.use() as db:
            db.execute(SCHEMA)
            db.execute(LISTING_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(headers)")}
            if "used" not in columns:  # a store an earlier memfit wrote: rows counted, not sized
                db.execute("ALTER TABLE headers ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0")
                db.execute("ALTER TABLE headers ADD COLUMN used INTEGER NOT NULL DEFAULT 0")
                db.execute("UPDATE headers SET bytes = length(summary)")
            db.execute("CREATE INDEX IF NOT EXISTS headers_used ON headers (used)")
            # Reads every leaf of the table (the index on `used` lacks `bytes`): a truncated file fails here.
            self._total = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM headers").fetchone()[0]

    def _move_aside(self) -> None:
        """Rename the unreadable file (and its WAL) out of the way; the next connection makes a new one."""
        self.close()
        aside = f"{self.path}.broken-{time.strftime('%Y%m%dT%H%M%S')}"
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                os.rename(self.path + suffix, aside + suffix)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path + "-shm")
        log.warning("the header cache %s could not be read: moved it aside to %s and made a new one", self.path, aside)

    def close(self) -> None:
        """Close the connections not in use."""
        self._pool.close()

    def _failed(self, exc: BaseException) -> None:
        self.close()  # the next try opens afresh
        self.health.fault(
            HEADERS,
            f"the header cache {self.path} cannot be used ({describe(exc)}); headers are read from the files",
            exc,
        )

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":  # set once; asking again takes no lock
                db.execute("PRAGMA journal_mode=WAL")
        except BaseException:
            db.close()
            raise
        return db

    def connection(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A pooled connection, for one use."""
        return self._pool.use()

    def get(self, identity: str) -> str | None:
        if self.health.resting(HEADERS):
            return None
        try:
            with self._pool.use() as db:
                row = db.execute("SELECT summary FROM headers WHERE identity = ?", (identity,)).fetchone()
                if row:
                    self._touch(db, identity)
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)
            return None
        self.health.ok(HEADERS)
        return row[0] if row else None

    def _touch(self, db: sqlite3.Connection, identity: str) -> None:
        """Mark a summary used now, for the eviction order: kept in memory, written with the others pending when
        they are many or the last write is old."""
        with self._touch_lock:
            self._touched[identity] = time.time_ns()
            due = len(self._touched) >= TOUCH_BATCH or time.monotonic() - self._touches_written >= TOUCH_SECONDS
        if due:
            self._write_touches(db)

    def _write_touches(self, db: sqlite3.Connection) -> None:
        """Write the pending marks in one transaction. Only a hint: when other writers hold the database past the
        busy timeout (many threads reading at once), they are dropped, and nothing is faulted."""
        with self._touch_lock:
            touched, self._touched, self._touches_written = self._touched, {}, time.monotonic()
        if not touched:
            return
        with contextlib.suppress(sqlite3.OperationalError), write_transaction(db):
            db.executemany("UPDATE headers SET used = ? WHERE identity = ?", [(t, i) for i, t in touched.items()])

    def delete(self, identity: str) -> None:
        if self.health.resting(HEADERS):
            return
        try:
            with self._pool.use() as db:
                db.execute("DELETE FROM headers WHERE identity = ?", (identity,))
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)

    def put(self, identity: str, summary: str) -> None:
        """Store a summary; past `max_bytes` the least recently used go (a file that changed leaves its old
        identity behind). A summary larger than the whole budget is not stored."""
        if self.health.resting(HEADERS) or len(summary) > self.max_bytes:
            return
        try:
            with self._pool.use() as db:
                if self._total is None or self._unread > self.max_bytes * RECOUNT_EVERY:
                    self._total = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM headers").fetchone()[0]
                    self._unread = 0
                db.execute(
                    "INSERT OR REPLACE INTO headers (identity, summary, bytes, used) VALUES (?, ?, ?, ?)",
                    (identity, summary, len(summary), time.time_ns()),
                )
                self._total += len(summary)
                self._unread += len(summary)
                if self._total > self.max_bytes:
                    self._write_touches(db)
                    self._evict(db)
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)
            return
        self.health.ok(HEADERS)

    def _evict(self, db: sqlite3.Connection) -> None:
        """Drop the least recently used summaries until the rest hold EVICT_TO of the budget."""
        keep = int(self.max_bytes * EVICT_TO)
        db.execute(
            "DELETE FROM headers WHERE identity IN (SELECT identity FROM (SELECT identity,"
            " SUM(bytes) OVER (ORDER BY used DESC, rowid DESC) AS kept FROM headers) WHERE kept > ?)",
            (keep,),
        )
        self._total, self._unread = db.execute("SELECT COALESCE(SUM(bytes), 0) FROM headers").fetchone()[0], 0

    def listed(self, keys: list[str]) -> dict[str, str]:
        """The stored listing entries of `keys` (those stored); none when the store cannot be read."""
        if self.health.resting(HEADERS) or not keys:
            return {}
        found: dict[str, str] = {}
        try:
            with self._pool.use() as db:
                for at in range(0, len(keys), SQL_VARIABLES):
                    chunk = keys[at : at + SQL_VARIABLES]
                    rows = db.execute(
                        f"SELECT key, entry FROM listing WHERE key IN ({', '.join('?' * len(chunk))})", chunk
                    )
                    found.update(rows.fetchall())
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)
            return {}
        self.health.ok(HEADERS)
        return found

    def put_listed(self, entries: dict[str, str], keep_prefix: str) -> None:
        """Store listing entries in one transaction, dropping those whose key does not start with `keep_prefix`
        (derived by other code) and, past MAX_LISTED, the oldest."""
        if self.health.resting(HEADERS) or not entries:
            return
        try:
            with self._pool.use() as db, write_transaction(db):
                db.execute("DELETE FROM listing WHERE substr(key, 1, ?) != ?", (len(keep_prefix), keep_prefix))
                db.executemany("INSERT OR REPLACE INTO listing (key, entry) VALUES (?, ?)", entries.items())
                db.execute(
                    "DELETE FROM listing WHERE rowid <= (SELECT rowid FROM listing ORDER BY rowid DESC LIMIT 1"
                    " OFFSET ?)",
                    (MAX_LISTED,),
                )
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)
            return
        self.health.ok(HEADERS)

    def with_prefix(self, prefix: str, limit: int) -> list[tuple[str, str]]:
        """The rows whose identity starts with `prefix` (at most `limit`, the most recently used first); none when
        the store cannot be read."""
        if self.health.resting(HEADERS):
            return []
        try:
            with self._pool.use() as db:
                self._write_touches(db)
                rows = db.execute(
                    "SELECT identity, summary FROM headers WHERE identity >= ? AND identity < ?"
                    " ORDER BY used DESC LIMIT ?",
                    (prefix, prefix + "\U0010ffff", limit),
                ).fetchall()
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)
            return []
        self.health.ok(HEADERS)
        return [(identity, summary) for identity, summary in rows]

    def stored_bytes(self) -> int:
        with self._pool.use() as db:
            return db.execute("SELECT COALESCE(SUM(bytes), 0) FROM headers").fetchone()[0]

    def probe(self) -> None:
        """For GET /health after a lock made the store fail: one read and one write, without waiting for another
        process's lock; the fault ends when both work."""
        try:
            with self._pool.use() as db, without_waiting(db):
                db.execute("SELECT 1 FROM headers LIMIT 1").fetchone()
                rewrite_header(db)
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)
            return
        self.health.ok(HEADERS)


def _not_a_file(path: str) -> bool:
    """Something other than a regular file (a directory, a socket) is where the cache belongs."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False
