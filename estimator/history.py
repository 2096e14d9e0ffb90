"""Measurement history: what a runtime really allocated, used only for the identical model and workload."""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimator.fit_types import ObservationRow
from memfit.estimator.subject import Subject
from memfit.estimator.workload import Workload
from memfit.readers.history_db import HistoryDB

KV_ROUNDING = 10_486  # llama.cpp logs buffers in MiB with two decimals: 0.01 MiB


@dataclass(frozen=True)
class HistoryMatch:
    observation: ObservationRow | None  # the latest one of this identity and workload with a workspace
    identity_insufficient: bool = False  # a record exists, but the identity is too weak to trust it


NO_MATCH = HistoryMatch(None)


def workload_key(workload: Workload) -> tuple | None:
    """The workload as observations record it; None when its runtime settings are not llama.cpp's defaults, which
    is all an observation can have been made with (observations do not record those settings)."""
    if not workload.knobs_at_defaults:
        return None
    return (
        workload.allocated_tokens,
        workload.streams,
        workload.key_element_bytes,
        workload.value_element_bytes,
        workload.mode,
    )


def weak_identity(revision: str, artifact_bytes: int | None) -> bool:
    """No revision and no artifact bytes: a different artifact with the same id would look the same."""
    return not revision and artifact_bytes is None


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


def kv_contradiction(observed: int | None, derived: int | None) -> str:
    """A note when an observed KV cache disagrees with the derived one by more than the log's rounding."""
    if observed is None or derived is None or abs(observed - derived) <= KV_ROUNDING:
        return ""
    return f"; its KV cache ({observed} bytes) contradicts the derived {derived} bytes"
