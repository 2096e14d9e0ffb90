"""POST, GET and DELETE /v1/models/observations: what a runtime really allocated, checked against what memfit
derives exactly, stored in the measurement history, listed and removed."""

from __future__ import annotations

from datetime import UTC, datetime

from memfit.estimator.bounds import Part
from memfit.estimator.context import context_geometry
from memfit.estimator.errors import ObservationRefused
from memfit.estimator.fit_types import (
    Observation,
    ObservationReceipt,
    ObservationRow,
    ObservedParts,
    ObservedWorkload,
    StoredObservation,
)
from memfit.estimator.forecast import forecast_parts, workspace_ceiling, workspace_floor
from memfit.estimator.kv_cache import is_llama_cpp_type
from memfit.estimator.observations import KV_ROUNDING, kv_contradiction, weak_identity
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, Component, ObservationFlag
from memfit.estimator.workload import Workload, resolve_workload
from memfit.readers.state_health import HISTORY, HISTORY_WRITES
from memfit.service.history import HistoryAccess
from memfit.service.subjects import Subjects


class Observations:
    def __init__(self, subjects: Subjects, history: HistoryAccess) -> None:
        self.subjects = subjects
        self.history = history

    def record(self, observation: Observation, store: bool = True) -> ObservationReceipt:
        """Store what a runtime allocated. An observation answers would use (a known model, under exactly the
        strong identity memfit derives from) is refused when a part contradicts what memfit derives exactly: a
        workspace below its floor or above its derived ceiling, or a KV cache off the derived one by more than
        llama.cpp's log rounding.
        Any other observation about a known model is stored, its contradicting KV cache flagged. With `store`
        false it is checked the same way and not stored (a dry run: no observation id)."""
        subject = self.subjects.subject(observation.model_id)
        p = observation.parts
        w = resolve_workload(observation.workload, subject.context_limit if subject is not None else None)
        observed_at = (observation.observed_at or datetime.now(UTC)).isoformat(timespec="seconds")
        flags: list[str] = []
        note = ""
        if subject is not None:
            parts, _ = forecast_parts(subject, w)
            kv, workspace = parts[1], parts[3]
            derived_kv = kv.bytes if kv.basis is Basis.DERIVED_LAYOUT else None
            note = kv_contradiction(p.kv_cache, derived_kv)
            if _checked(observation, subject):
                _refuse_contradictions(p, note, derived_kv, subject, w, workspace)
            if note:
                flags.append(ObservationFlag.KV_CONTRADICTS_DERIVED)
        model_id = subject.model_id if subject is not None else observation.model_id
        row = ObservationRow(
            model_id=model_id,
            revision=observation.revision,
            quant=observation.quant,
            artifact_bytes=observation.artifact_bytes,
            allocated_tokens=w.allocated_tokens,
            streams=w.streams,
            key_element_bytes=w.key_element_bytes,
            value_element_bytes=w.value_element_bytes,
            mode=w.mode,
            weights_bytes=p.weights,
            kv_cache_bytes=p.kv_cache,
            recurrent_state_bytes=p.recurrent_state,
            workspace_bytes=p.workspace,
            companions_bytes=p.companions,
            runtime=observation.runtime,
            observed_at=observed_at,
            note=note.lstrip("; "),
        )
        history = self.history
        observation_id = history.request(HISTORY_WRITES, lambda: history.history.record(row)) if store else None
        return ObservationReceipt(
            observation_id=observation_id, model_id=model_id, known=subject is not None, flags=tuple(flags)
        )

    def newest(self, limit: int, model_id: str | None = None) -> list[StoredObservation]:
        """The newest `limit` observations, newest first; only those stored under `model_id` (an alias is
        resolved to the full id observations are stored under) when given."""
        if model_id is not None:
            subject = self.subjects.subject(model_id)
            model_id = subject.model_id if subject is not None else model_id
        history = self.history
        return [
            StoredObservation(
                observation_id=r.id or 0,
                model_id=r.model_id,
                revision=r.revision,
                quant=r.quant,
                artifact_bytes=r.artifact_bytes,
                workload=ObservedWorkload(
                    r.allocated_tokens, r.streams, r.key_element_bytes, r.value_element_bytes, r.mode
                ),
                parts=ObservedParts(
                    r.weights_bytes, r.kv_cache_bytes, r.recurrent_state_bytes, r.workspace_bytes, r.companions_bytes
                ),
                runtime=r.runtime,
                observed_at=r.observed_at,
                note=r.note,
            )
            for r in history.request(HISTORY, lambda: history.history.newest(limit, model_id))
        ]

    def delete(self, observation_id: int) -> bool:
        """Remove one observation; False when none has that id. Answers stop using it at once."""
        history = self.history
        return history.request(HISTORY_WRITES, lambda: history.history.delete(observation_id))


def _checked(observation: Observation, subject: Subject) -> bool:
    """Whether answers would use this observation: the identity is the subject's, and strong."""
    identity = (observation.revision, observation.quant, observation.artifact_bytes)
    return identity == (subject.revision, subject.quant, subject.artifact_bytes) and not weak_identity(
        subject.revision, subject.artifact_bytes
    )


def _refuse_contradictions(
    p: ObservedParts, kv_note: str, derived_kv: int | None, subject: Subject, w: Workload, workspace: Part
) -> None:
    if kv_note and is_llama_cpp_type(w.key_element_bytes) and is_llama_cpp_type(w.value_element_bytes):
        raise ObservationRefused(
            Component.KV_CACHE,
            f"parts.kvCache: {p.kv_cache} bytes contradicts the {derived_kv} bytes memfit derives exactly for"
            f" this model and workload (llama.cpp's log rounds to {KV_ROUNDING} bytes); was it loaded with"
            " another workload?",
        )
    geometry = (
        context_geometry(w.allocated_tokens, w.streams, causal=subject.layout.causal)
        if subject.layout is not None
        else None
    )
    floor, ceiling = workspace_floor(subject, geometry, workspace), workspace_ceiling(workspace)
    if p.workspace is not None and floor is not None and p.workspace < floor[0]:
        raise ObservationRefused(
            Component.WORKSPACE,
            f"parts.workspace: {p.workspace} bytes is below {floor[1]}, the least llama.cpp allocates for"
            " this model and workload",
        )
    if p.workspace is not None and ceiling is not None and p.workspace > ceiling:
        raise ObservationRefused(
            Component.WORKSPACE,
            f"parts.workspace: {p.workspace} bytes is above the derived workspace ceiling ({ceiling} bytes), the"
            " most llama.cpp allocates for this model and workload",
        )
