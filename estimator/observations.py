"""What an observation (a runtime's report of what it allocated) is worth to an answer: the rules that decide
whether one applies to a model and workload, and whether it contradicts the derived numbers."""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimator.fit_types import ObservationRow
from memfit.estimator.workload import Workload

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


def kv_contradiction(observed: int | None, derived: int | None) -> str:
    """A note when an observed KV cache disagrees with the derived one by more than the log's rounding."""
    if observed is None or derived is None or abs(observed - derived) <= KV_ROUNDING:
        return ""
    return f"; its KV cache ({observed} bytes) contradicts the derived {derived} bytes"
