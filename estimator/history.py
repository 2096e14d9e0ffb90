"""Measurement history: what a runtime really allocated, used only for the identical model and workload."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from memfit.estimator.subject import Subject
from memfit.estimator.workload import Workload
from memfit.readers.history_db import HistoryDB, ObservationRow

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
    """Observations indexed in memory, reloaded when the database changed (checked once per request)."""

    def __init__(self, db: HistoryDB | None) -> None:
        self.db = db
        self._version: int | None = None
        self._exact: dict[tuple, ObservationRow] = {}
        self._by_model: set[tuple] = set()
        self._lock = threading.Lock()

    def refresh(self) -> None:
        if self.db is None:
            return
        with self._lock:
            version = self.db.version()
            if version == self._version:
                return
            exact, by_model = {}, set()
            for row in self.db.all():  # in id order: a later measured workspace replaces an earlier one
                work = (row.allocated_tokens, row.streams, row.key_element_bytes, row.value_element_bytes, row.mode)
                if row.workspace_bytes is not None:  # the part answers use; one without it leaves it standing
                    exact[(row.model_id, row.revision, row.quant, row.artifact_bytes, *work)] = row
                by_model.add((row.model_id, *work))
            self._exact, self._by_model, self._version = exact, by_model, version

    def match(self, subject: Subject, workload: Workload) -> HistoryMatch:
        work = workload_key(workload)
        if work is None:
            return NO_MATCH
        if weak_identity(subject.revision, subject.artifact_bytes):
            return HistoryMatch(None, (subject.model_id, *work) in self._by_model)
        row = self._exact.get((subject.model_id, subject.revision, subject.quant, subject.artifact_bytes, *work))
        return HistoryMatch(row) if row else NO_MATCH

    def record(self, row: ObservationRow) -> int:
        if self.db is None:
            raise RuntimeError("this server keeps no measurement history")
        return self.db.insert(row)


def kv_contradiction(observed: int | None, derived: int | None) -> str:
    """A note when an observed KV cache disagrees with the derived one by more than the log's rounding."""
    if observed is None or derived is None or abs(observed - derived) <= KV_ROUNDING:
        return ""
    return f"; its KV cache ({observed} bytes) contradicts the derived {derived} bytes"
