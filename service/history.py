"""The measurement history: observations in the state directory's SQLite database (memfit/readers/history_db.py),
looked up for the identical model and workload (History), and used with the state directory's faults reported
(memfit/readers/state_health.py) instead of failing an answer (HistoryAccess)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from typing import TypeVar

from memfit.estimator.fit_types import ObservationRow
from memfit.estimator.observations import NO_MATCH, HistoryMatch, weak_identity, workload_key
from memfit.estimator.subject import Subject
from memfit.estimator.workload import Workload
from memfit.readers.header_store import HeaderStore
from memfit.readers.history_db import REPLACED, HistoryDB
from memfit.readers.state_health import HEADERS, HISTORY, HISTORY_WRITES, StateFileError, StateHealth, describe

T = TypeVar("T")


class History:
    """Observations looked up in the database per answer, by one indexed query: nothing is loaded into memory,
    so a new observation costs the next answer nothing, and no answer waits for another (SQLite's WAL lets
    readers run while a writer writes)."""

    def __init__(self, db: HistoryDB | None) -> None:
        self.db = db

    def match(self, subject: Subject, workload: Workload) -> HistoryMatch:
        work = workload_key(workload)
        if work is None or self.db is None:
            return NO_MATCH
        if weak_identity(subject.revision, subject.artifact_bytes):
            return HistoryMatch(None, self.db.any_for_model(subject.model_id, work))
        row = self.db.latest((subject.model_id, subject.revision, subject.quant, subject.artifact_bytes), work)
        return HistoryMatch(row) if row else NO_MATCH

    def record(self, row: ObservationRow) -> int:
        return self._db().insert(row)

    def newest(self, limit: int, model_id: str | None = None) -> list[ObservationRow]:
        return [] if self.db is None else self.db.newest(limit, model_id)

    def delete(self, observation_id: int) -> bool:
        return self.db is not None and self.db.delete(observation_id)

    def _db(self) -> HistoryDB:
        if self.db is None:
            raise RuntimeError("this server keeps no measurement history")
        return self.db


class HistoryAccess:
    """Answers read the history (a fault: the derived numbers answer); observation requests read and write it (a
    fault: a StateFileError, answered 503); GET /health probes it and the header store."""

    def __init__(self, history: History, state: StateHealth, store: HeaderStore | None) -> None:
        self.history = history
        self.state = state
        self.store = store

    def read(self, read: Callable[[HistoryDB], T], otherwise: T, probing: bool = False) -> T:
        """A read of the measurement history; when it cannot be read, `otherwise` (answers use the derived numbers)
        and the fault is reported (state_health) and left to rest before it is tried again (by a probe of GET
        /health, `probing`, sooner after a lock)."""
        db = self.history.db
        if db is None or (self.state.resting(HISTORY) and not (probing and self.state.due(HISTORY))):
            return otherwise
        try:
            if not db.still_at_path():
                raise sqlite3.OperationalError(REPLACED)
            value = read(db)
        except (sqlite3.Error, OSError) as exc:
            self.state.fault(
                HISTORY,
                f"the measurement history {db.path} cannot be read ({describe(exc)}); answers use the derived numbers",
                exc,
            )
            return otherwise
        self.state.ok(HISTORY)
        return value

    def match(self, subject: Subject, workload: Workload) -> HistoryMatch:
        """The measurement history's observation for this answer (one indexed query), or none."""
        return self.read(lambda _: self.history.match(subject, workload), NO_MATCH)

    def version(self) -> int:
        """What the history's matches depend on: the database's version (HistoryDB.version, SQLite's data_version:
        positive), or -1 where there is no history or it cannot be read (every match is then NO_MATCH)."""
        return self.read(HistoryDB.version, -1)

    def rows(self) -> int | None:
        """How many observations the measurement history holds; None without one, or when it cannot be read."""
        return self.read(HistoryDB.count, None)

    def request(self, name: str, use: Callable[[], T]) -> T:
        """An operation a request asked of the history: a StateFileError is reported as the fault `name`
        (HISTORY for a read, HISTORY_WRITES for a write) and raised again (a 503); a success ends that fault."""
        try:
            value = use()
        except StateFileError as exc:
            done = "read" if name == HISTORY else "written"
            self.state.fault(name, f"the measurement history {exc.path} cannot be {done} ({exc.reason})", exc.__cause__)
            raise
        self.state.ok(name)
        return value

    def check(self) -> None:
        """For GET /health: read the history once, so that a fault since the last request shows, and try each
        state file a lock made fail again once the fault is state_health.PROBE_S old, so that `degraded` ends soon
        after the lock is let go, although no request may have used the file since. No probe waits for a lock."""
        self.read(HistoryDB.probe, None, probing=True)
        db = self.history.db
        if db is not None and self.state.due(HISTORY_WRITES):
            with contextlib.suppress(StateFileError):  # reported as a fault by `request`
                self.request(HISTORY_WRITES, db.probe_write)
        if self.store is not None and self.state.due(HEADERS):
            self.store.probe()
