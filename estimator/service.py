"""Answers fit requests: one environment reading per request, one forecast and verdict per model."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from fractions import Fraction

from memfit.estimator.artifact_cache import ArtifactCache
from memfit.estimator.catalog import Catalog
from memfit.estimator.errors import Cancelled
from memfit.estimator.budget import Budget, BudgetSetting, budget_from
from memfit.estimator.estimate import REFUSED, Bounds, Part, bounds
from memfit.estimator.forecast import forecast_parts
from memfit.estimator.gpu_admission import gpu_admits
from memfit.estimator.history import History, kv_contradiction
from memfit.estimator.registry import ModelIndex
from memfit.estimator.subject import Subject, local_subject
from memfit.estimator.verdict import DEFAULT_MARGIN, verdict
from memfit.estimator.vocabulary import Basis, BudgetBasis, Component, Limit, Refusal
from memfit.estimator.workload import Workload, WorkloadRequest, exceeds_limit, input_refusal, resolve_workload
from memfit.generated import models as wire
from memfit.readers.engines import EngineScanner
from memfit.readers.history_db import ObservationRow
from memfit.readers.host_memory import HostMemory, read_host_memory
from memfit.readers.nvml import GpuMemory, NvmlReader


@dataclass(frozen=True)
class Settings:
    margin: Fraction = DEFAULT_MARGIN
    budget: BudgetSetting = BudgetSetting.AVAILABLE


@dataclass(frozen=True)
class Environment:
    """What one request is judged against, read once and shared by every answer in it."""

    budget: Budget
    gpus: list[GpuMemory] | None


@dataclass(frozen=True)
class Answer:
    model_id: str  # as the request named it
    subject: Subject
    workload: Workload
    refusal: Refusal
    parts: list[Part]
    bounds: Bounds
    limits: list[Limit]


def _ordered_limits(limits: Sequence[Limit]) -> list[str]:
    present = set(limits)
    return [limit.value for limit in Limit if limit in present]


class FitService:
    def __init__(self, index: ModelIndex, cache: ArtifactCache | None = None, settings: Settings = Settings(),
                 read_host: Callable[[], HostMemory] = read_host_memory, nvml: NvmlReader | None = None,
                 catalog: Catalog | None = None, history: History | None = None,
                 read_committed: Callable[[], int | None] | None = None) -> None:
        self.index = index
        self.cache = cache or ArtifactCache()
        self.catalog = catalog or Catalog()
        self.history = history or History(None)
        self.read_committed = read_committed or EngineScanner().committed_bytes
        self.settings = settings
        self.read_host = read_host
        self.nvml = nvml or NvmlReader()

    # --- one request ------------------------------------------------------------------------------

    def read_environment(self) -> Environment:
        return Environment(budget=budget_from(self.read_host(), self.settings.budget, self.read_committed()),
                           gpus=self.nvml.read())

    def subject(self, model_id: str) -> Subject | None:
        """A model on disk beats a catalog entry with the same id (measured beats proxy)."""
        artifact = self.index.get(model_id)
        if artifact is not None:
            return local_subject(artifact, self.cache)
        return self.catalog.subject(model_id)

    def fit_batch(self, requests: Sequence[wire.WireFitVerdictRequest],
                  cancelled: Callable[[], bool] = lambda: False) -> wire.WireFitVerdictBatch:
        """Answers in request order; a request naming no known model is left out. Raises Cancelled as soon as
        `cancelled()` says so, between two models."""
        environment = self.read_environment()
        self.history.refresh()
        answers = []
        for request in requests:
            if cancelled():
                raise Cancelled(f"cancelled after {len(answers)} of {len(requests)} models")
            answer = self.answer(request)
            if answer is not None:
                answers.append(answer)
        return wire.WireFitVerdictBatch(results=self.to_wire(answers, environment))

    def fit_one(self, request: wire.WireFitVerdictRequest) -> wire.WireFitVerdictResult | None:
        self.history.refresh()
        answer = self.answer(request)
        if answer is None:
            return None
        return self.to_wire([answer], self.read_environment())[0]

    def model_list(self) -> wire.WireModelList:
        """Local artifacts in index order (roots in order, then by id), then catalog entries not on disk, by id."""
        entries = []
        for artifact in self.index.artifacts():
            subject = local_subject(artifact, self.cache)
            entries.append(wire.WireModelEntry(
                model_id=artifact.model_id, source="local", root=artifact.root, architecture=subject.architecture,
                quant=subject.quant, revision=artifact.revision, artifact_bytes=subject.artifact_bytes,
                context_limit=subject.context_limit, has_projector=artifact.projector is not None))
        for entry, quant in self.catalog.ids():
            model_id = f"{entry.model_id}:{quant}"
            if self.index.get(model_id) is None:
                entries.append(wire.WireModelEntry(
                    model_id=model_id, source="catalog", root="", architecture=entry.architecture, quant=quant,
                    revision="", artifact_bytes=None, context_limit=entry.context_length, has_projector=False))
        return wire.WireModelList(models=entries)

    def record_observation(self, observation: wire.WireObservation) -> wire.WireObservationReceipt:
        """Store what a runtime allocated; flag a KV cache that contradicts the derived one."""
        subject = self.subject(observation.model_id)
        w, p = observation.workload, observation.parts
        observed_at = (observation.observed_at or datetime.now(timezone.utc)).isoformat(timespec="seconds")
        flags, note = [], ""
        if subject is not None:
            workload = resolve_workload(WorkloadRequest(w.allocated_tokens, w.streams, w.key_element_bytes,
                                                        w.value_element_bytes, w.mode), subject.context_limit)
            derived = forecast_parts(subject, workload)[0][1]
            note = kv_contradiction(p.kv_cache, derived.bytes if derived.basis is Basis.DERIVED_LAYOUT else None)
            if note:
                flags.append("kvContradictsDerived")
        model_id = subject.model_id if subject is not None else observation.model_id
        row = ObservationRow(
            model_id=model_id, revision=observation.revision, quant=observation.quant,
            artifact_bytes=observation.artifact_bytes, allocated_tokens=w.allocated_tokens, streams=w.streams,
            key_element_bytes=w.key_element_bytes, value_element_bytes=w.value_element_bytes, mode=w.mode,
            weights_bytes=p.weights, kv_cache_bytes=p.kv_cache, recurrent_state_bytes=p.recurrent_state,
            workspace_bytes=p.workspace, companions_bytes=p.companions, runtime=observation.runtime,
            observed_at=observed_at, note=note.lstrip("; "))
        return wire.WireObservationReceipt(observation_id=self.history.record(row), model_id=model_id,
                                           known=subject is not None, flags=flags)

    # --- one model --------------------------------------------------------------------------------

    def answer(self, request: wire.WireFitVerdictRequest) -> Answer | None:
        subject = self.subject(request.model_id)
        if subject is None:
            return None
        asked = WorkloadRequest(request.allocated_tokens, request.streams, request.key_element_bytes,
                                request.value_element_bytes, request.mode)
        workload = resolve_workload(asked, subject.context_limit)
        refusal = input_refusal(workload)
        parts: list[Part] = []
        limits = list(subject.limits)
        estimate = REFUSED
        if refusal is None:
            parts, more_limits = forecast_parts(subject, workload, self.history.match(subject, workload))
            estimate = bounds(parts)
            if estimate.overflows:
                refusal = Refusal.NON_FINITE_INPUT
            elif exceeds_limit(workload, subject.context_limit):
                refusal = Refusal.CONTEXT_EXCEEDS_MODEL_LIMIT
            else:
                limits.extend(more_limits)
        if refusal is not None:
            return Answer(request.model_id, subject, workload.clamped(), refusal, [], REFUSED, limits)
        return Answer(request.model_id, subject, workload, Refusal.NONE, parts, estimate, limits)

    # --- to the wire ------------------------------------------------------------------------------

    def to_wire(self, answers: Sequence[Answer], environment: Environment) -> list[wire.WireFitVerdictResult]:
        """Wire results for answers judged against one environment; sharedKey marks file sets used twice."""
        uses = Counter()
        for a in answers:
            if a.parts:
                uses.update({a.subject.weights_key, a.subject.companions_key} - {""})
        budget = environment.budget
        wire_budget = wire.WireFitBudget(basis=budget.basis, bytes=budget.bytes, committed_bytes=budget.committed_bytes)
        results = []
        for a in answers:
            keys = {Component.WEIGHTS: a.subject.weights_key, Component.COMPANIONS: a.subject.companions_key}
            parts = [replace(p, shared_key=keys[p.component]) if uses[keys.get(p.component, "")] > 1 else p
                     for p in a.parts]
            admits = None if a.refusal is not Refusal.NONE else gpu_admits(a.workload.mode, parts, environment.gpus)
            limits = list(a.limits)
            if budget.basis is BudgetBasis.UNKNOWN:
                limits.append(Limit.HOST_TELEMETRY_UNAVAILABLE)
            if environment.gpus is None:
                limits.append(Limit.GPU_TELEMETRY_UNAVAILABLE)
            results.append(wire.WireFitVerdictResult(
                model_id=a.model_id,
                identity=wire.WireFitEvidenceIdentity(model_id=a.subject.model_id, revision=a.subject.revision,
                                                      quant=a.subject.quant, artifact_bytes=a.subject.artifact_bytes),
                estimate=wire.WireFitMemoryEstimate(
                    parts=[wire.WireFitMemoryPart(component=p.component, bytes=p.bytes, basis=p.basis,
                                                  shared_key=p.shared_key, note=p.note) for p in parts],
                    lower_bound_bytes=a.bounds.lower, upper_bound_bytes=a.bounds.upper,
                    weakest_basis=a.bounds.weakest, missing=list(a.bounds.missing),
                    workload=wire.WireFitWorkload(
                        allocated_tokens=a.workload.allocated_tokens, context_source=a.workload.context_source,
                        streams=a.workload.streams, key_element_bytes=a.workload.key_element_bytes,
                        value_element_bytes=a.workload.value_element_bytes, mode=a.workload.mode,
                        prepared_tokens=None),
                    refusal=a.refusal),
                verdict=verdict(a.bounds, budget.bytes, self.settings.margin, a.refusal is not Refusal.NONE),
                budget=wire_budget,
                gpu_admits=admits,
                limits=_ordered_limits(limits),
            ))
        return results
