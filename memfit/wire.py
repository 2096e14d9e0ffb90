"""The one adapter between the generated wire models and the estimator's domain types.

The handlers and the CLI both speak to the fit service through these functions, so an HTTP answer and a
terminal answer are the same document. The answers are built with the generated pydantic models, or, with
plain=True, with the same models generated as stdlib dataclasses (memfit.generated.plain_models: the CLI's tables,
no pydantic at start-up). The converters fill either from the same code; `models` names the one they build with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from memfit.estimator.bounds import Part, soft_bytes
from memfit.estimator.budget import Budget
from memfit.estimator.device_forecast import DeviceShare
from memfit.estimator.fit_types import (
    FitRequest,
    FitResult,
    ModelEntry,
    Observation,
    ObservationReceipt,
    ObservedParts,
    PlanResult,
    QuantPlan,
    StoredObservation,
)
from memfit.estimator.machine import GpuBackend
from memfit.estimator.model_ids import Suggestions
from memfit.estimator.plan import PlanBudget
from memfit.estimator.vocabulary import Verdict
from memfit.estimator.workload import WorkloadRequest
from memfit.service.fit_service import FitService

if TYPE_CHECKING:
    from types import ModuleType

    from memfit.generated import models as wire
    from memfit.generated import plain_models

    Request: TypeAlias = wire.WireFitVerdictRequest | plain_models.WireFitVerdictRequest

MAX_SUGGESTIONS = 16  # the contract's Suggestions.maxItems


def generated() -> Any:
    """The generated pydantic models (imported on first use: pydantic builds them at import)."""
    from memfit.generated import models

    return models


def _models(plain: bool) -> ModuleType:
    """The models an answer is built with: the generated dataclasses where `plain`, else pydantic's."""
    if plain:
        from memfit.generated import plain_models

        return plain_models
    return generated()


# --- wire -> domain -------------------------------------------------------------------------------


def fit_request(request: Request) -> FitRequest:
    return FitRequest(
        request.model_id,
        WorkloadRequest(
            request.allocated_tokens,
            request.streams,
            request.key_element_bytes,
            request.value_element_bytes,
            request.mode,
            request.flash_attention,
            request.ubatch_tokens,
            request.kv_unified,
            request.cpu_variant,
            _gpu_layers(request.gpu_layers),
            request.n_cpu_moe,
            _items(request.tensor_overrides),
            _items(request.tensor_split),
            request.split_mode,
            request.main_gpu,
            request.kv_offload,
            request.profile,
            request.swa_full,
            request.load_mode,
            request.cache_ram_mib,
            request.context_checkpoints,
            request.rollback_snapshots,
            request.multi_token_prediction,
            request.draft_tokens,
            request.embeddings,
            request.pooling,
            request.draft_key_element_bytes,
            request.draft_value_element_bytes,
            request.draft_backend_sampling,
        ),
    )


def _items(values: Sequence[Any] | None) -> tuple[Any, ...] | None:
    """A list field's plain values (the generated model wraps each constrained item in a type of its own)."""
    return None if values is None else tuple(getattr(v, "root", v) for v in values)


def _gpu_layers(value: Any) -> int | str | None:
    """-ngl as the request gave it: a count or `all` (the generated model wraps each in a type of its own)."""
    value = getattr(value, "root", value)
    return value if value is None or isinstance(value, int) else str(value.value if hasattr(value, "value") else value)


def observation(body: wire.WireObservation) -> Observation:
    w, p = body.workload, body.parts
    return Observation(
        model_id=body.model_id,
        revision=body.revision,
        quant=body.quant,
        artifact_bytes=body.artifact_bytes,
        # observations record no runtime settings: llama.cpp's defaults, the only ones history matches
        workload=WorkloadRequest(w.allocated_tokens, w.streams, w.key_element_bytes, w.value_element_bytes, w.mode),
        parts=ObservedParts(p.weights, p.kv_cache, p.recurrent_state, p.workspace, p.companions),
        runtime=body.runtime,
        observed_at=body.observed_at,
    )


# --- domain -> wire -------------------------------------------------------------------------------
# Each converter builds with `models`: the generated pydantic models (the types named here) by default, or, where
# fit_batch, fit_plan and model_list are asked for plain=True, the dataclasses of the same names and fields.


def fit_result(r: FitResult, models: Any = None) -> wire.WireFitVerdictResult:
    m, w, s = models or generated(), r.workload, r.subject
    return m.WireFitVerdictResult(
        model_id=r.model_id,
        identity=m.WireFitEvidenceIdentity(
            model_id=s.model_id,
            revision=s.revision,
            quant=s.quant,
            artifact_bytes=s.artifact_bytes,
            context_limit=s.context_limit,
        ),
        estimate=m.WireFitMemoryEstimate(
            parts=[memory_part(p, m) for p in r.parts],
            lower_bound_bytes=r.bounds.lower,
            upper_bound_bytes=r.bounds.upper,
            weakest_basis=r.bounds.weakest,
            missing=list(r.bounds.missing),
            workload=m.WireFitWorkload(
                allocated_tokens=w.allocated_tokens,
                context_source=w.context_source,
                streams=w.streams,
                key_element_bytes=w.key_element_bytes,
                value_element_bytes=w.value_element_bytes,
                mode=w.mode,
                prepared_tokens=None,
                flash_attention=w.flash_attention,
                ubatch_tokens=w.ubatch_tokens,
                kv_unified=w.kv_unified,
                cpu_variant=w.cpu_variant,
                gpu_layers=w.placement.gpu_layers,
                n_cpu_moe=w.placement.n_cpu_moe,
                tensor_overrides=list(w.placement.tensor_overrides),
                tensor_split=list(w.placement.tensor_split),
                split_mode=w.placement.split_mode,
                main_gpu=w.placement.main_gpu,
                kv_offload=w.placement.kv_offload,
                profile=w.profile,
                swa_full=w.swa_full,
                load_mode=w.load_mode,
                cache_ram_mib=w.cache_ram_mib,
                context_checkpoints=w.context_checkpoints,
                rollback_snapshots=w.rollback_snapshots,
                multi_token_prediction=w.multi_token_prediction,
                draft_tokens=w.draft_tokens,
                embeddings=w.embeddings,
                pooling=w.pooling,
                draft_key_element_bytes=w.draft_key_element_bytes,
                draft_value_element_bytes=w.draft_value_element_bytes,
                draft_backend_sampling=w.draft_backend_sampling,
                slot_tokens=w.slot_tokens,
                settings=[
                    m.WireResolvedSetting(setting=x.setting, source=x.source, detail=x.detail) for x in w.sources
                ],
            ),
            refusal=r.refusal,
        ),
        verdict=r.verdict,
        soft_bytes=soft_bytes(r.parts),
        budget=fit_budget(r.budget, m),
        gpu_admits=r.gpu_admits,
        limits=list(r.limits),
        devices=[device(r, s, v, m) for s, v in zip(r.devices, r.device_verdicts, strict=True)],
        decided_by=r.decided_by,
    )


def fit_budget(b: Budget, models: Any) -> wire.WireFitBudget:
    return models.WireFitBudget(basis=b.basis, bytes=b.bytes, committed_bytes=b.committed_bytes)


def memory_part(p: Part, models: Any) -> wire.WireFitMemoryPart:
    return models.WireFitMemoryPart(
        component=p.component,
        bytes=p.bytes,
        upper_bytes=None if p.bytes is None else p.bytes + p.slack,
        basis=p.basis,
        shared_key=p.shared_key,
        note=p.note,
        residency=p.residency,
    )


def device(r: FitResult, share: DeviceShare, verdict: Verdict, models: Any) -> wire.WireFitDevice:
    """One pool of an answer: the host (its free memory the budget) or a GPU (NVML's, Metal's or a declared one)."""
    gpu, b = share.gpu, share.bounds
    source, free, total = pool_memory(r, share)
    return models.WireFitDevice(
        name=share.name,
        kind="host" if gpu is None else "gpu",
        source=source,
        declared=gpu is not None and gpu.declared,
        unified=gpu is not None and gpu.unified,
        parts=[memory_part(p, models) for p in share.parts],
        lower_bound_bytes=b.lower,
        upper_bound_bytes=b.upper,
        free_bytes=free,
        total_bytes=total,
        verdict=verdict,
        note=share.note,
    )


def pool_memory(r: FitResult, share: DeviceShare) -> tuple[str, int | None, int | None]:
    """A pool's memory as read for the request: (where it was read, free bytes, total bytes)."""
    gpu = share.gpu
    if gpu is None:
        return str(r.budget.basis), r.budget.bytes, r.host_total
    return ("declared" if gpu.declared else "metal" if gpu.backend is GpuBackend.METAL else "nvml"), gpu.free, gpu.total


def plan_quant(q: QuantPlan, models: Any = None) -> wire.WireFitPlanQuant:
    m = models or generated()
    return m.WireFitPlanQuant(
        model_id=q.model_id,
        quant=q.quant,
        max_allocated_tokens=m.WireFitPlanMaxima(good=q.max_good, tight=q.max_tight, possible=q.max_possible),
        max_gpu_layers=None
        if q.gpu_layers is None
        else m.WireFitPlanGpuLayers(
            good=q.gpu_layers.good,
            tight=q.gpu_layers.tight,
            fitter=q.gpu_layers.fitter,
            n_cpu_moe_good=q.gpu_layers.n_cpu_moe_good,
            n_cpu_moe_tight=q.gpu_layers.n_cpu_moe_tight,
        ),
        fit=fit_result(q.fit, m),
    )


def plan_result(p: PlanResult, models: Any = None) -> wire.WireFitPlanResult:
    m = models or generated()
    return m.WireFitPlanResult(
        model_id=p.model_id, quants=[plan_quant(q, m) for q in p.quants], best_quant=p.best_quant
    )


def model_entry(e: ModelEntry, models: Any = None) -> wire.WireModelEntry:
    m = models or generated()
    return m.WireModelEntry(
        model_id=e.model_id,
        source=e.source,
        root=e.root,
        architecture=e.architecture,
        quant=e.quant,
        revision=e.revision,
        artifact_bytes=e.artifact_bytes,
        context_limit=e.context_limit,
        has_projector=e.has_projector,
        unreadable=e.unreadable,
        weights_bytes=e.weights_bytes,
        reading=e.reading,
        loaded_by=[m.WireRunningServer(pid=pid, port=port) for pid, port in e.loaded_by] or None,
    )


def receipt(r: ObservationReceipt) -> wire.WireObservationReceipt | wire.WireObservationCheck:
    """A stored observation's receipt, or a dry run's check (no observation id)."""
    m = generated()
    if r.observation_id is None:
        return m.WireObservationCheck(model_id=r.model_id, known=r.known, flags=list(r.flags))
    return m.WireObservationReceipt(
        observation_id=r.observation_id, model_id=r.model_id, known=r.known, flags=list(r.flags)
    )


def stored_observation(o: StoredObservation) -> wire.WireStoredObservation:
    m, w, p = generated(), o.workload, o.parts
    return m.WireStoredObservation(
        observation_id=o.observation_id,
        model_id=o.model_id,
        revision=o.revision,
        quant=o.quant,
        artifact_bytes=o.artifact_bytes,
        workload=m.WireObservedWorkload(
            allocated_tokens=w.allocated_tokens,
            streams=w.streams,
            key_element_bytes=w.key_element_bytes,
            value_element_bytes=w.value_element_bytes,
            mode=w.mode,
        ),
        parts=m.WireObservedParts(
            weights=p.weights,
            kv_cache=p.kv_cache,
            recurrent_state=p.recurrent_state,
            workspace=p.workspace,
            companions=p.companions,
        ),
        runtime=o.runtime,
        observed_at=o.observed_at,
        note=o.note,
    )


# --- the service, spoken in wire models ------------------------------------------------------------


@overload
def fit_batch(
    service: FitService,
    requests: Sequence[Request],
    cancelled: Callable[[], bool] = ...,
) -> wire.WireFitVerdictBatch: ...
@overload
def fit_batch(
    service: FitService, requests: Sequence[Request], *, plain: Literal[True]
) -> plain_models.WireFitVerdictBatch: ...
def fit_batch(
    service: FitService, requests: Sequence[Request], cancelled: Callable[[], bool] = lambda: False, plain: bool = False
) -> wire.WireFitVerdictBatch | plain_models.WireFitVerdictBatch:
    m = _models(plain)
    results = service.fit_batch([fit_request(r) for r in requests], cancelled)
    left_out = left_out_entries(service, requests, False, m)
    return m.WireFitVerdictBatch(results=[fit_result(r, m) for r in results], left_out=left_out)


@overload
def fit_plan(
    service: FitService,
    requests: Sequence[Request],
    cancelled: Callable[[], bool] = ...,
    budget: PlanBudget | None = ...,
) -> wire.WireFitPlanBatch: ...
@overload
def fit_plan(
    service: FitService, requests: Sequence[Request], *, plain: Literal[True]
) -> plain_models.WireFitPlanBatch: ...
def fit_plan(
    service: FitService,
    requests: Sequence[Request],
    cancelled: Callable[[], bool] = lambda: False,
    budget: PlanBudget | None = None,
    plain: bool = False,
) -> wire.WireFitPlanBatch | plain_models.WireFitPlanBatch:
    m = _models(plain)
    results = service.plan_batch([fit_request(r) for r in requests], cancelled, budget)
    left_out = left_out_entries(service, requests, True, m)
    return m.WireFitPlanBatch(results=[plan_result(p, m) for p in results], left_out=left_out)


def left_out_entries(
    service: FitService, requests: Sequence[Request], repositories: bool, models: Any = None
) -> list[wire.WireLeftOut]:
    """A batch's `leftOut`: the ids it names that no model answers to, with the ids to suggest instead."""
    m = models or generated()
    missing = service.left_out([r.model_id for r in requests], repositories)
    return [m.WireLeftOut(model_id=i, suggestions=list(_capped(s)), reason=why or None) for i, s, why in missing]


def suggested_ids(service: FitService, model_id: str) -> tuple[tuple[str, ...], str]:
    """The ids to suggest for one that no model answers to (a single fit's 404), and why it names none where more
    is known than that ('' otherwise)."""
    missing = service.left_out([model_id])
    return (_capped(missing[0][1]), missing[0][2]) if missing else ((), "")


def _capped(found: Suggestions) -> tuple[str, ...]:
    return tuple(found.ids[:MAX_SUGGESTIONS])


def fit_plan_json(
    service: FitService, requests: Sequence[wire.WireFitVerdictRequest], cancelled: Callable[[], bool] = lambda: False
) -> bytes:
    """A plan request's answer as the JSON the server sends, within the request's work budget (PlanBudget)."""
    return fit_plan(service, requests, cancelled, budget=PlanBudget()).model_dump_json(by_alias=True).encode()


def fit_one(service: FitService, request: wire.WireFitVerdictRequest) -> wire.WireFitVerdictResult | None:
    result = service.fit_one(fit_request(request))
    return None if result is None else fit_result(result)


@overload
def model_list(service: FitService) -> wire.WireModelList: ...
@overload
def model_list(service: FitService, *, plain: Literal[True]) -> plain_models.WireModelList: ...
def model_list(service: FitService, plain: bool = False) -> wire.WireModelList | plain_models.WireModelList:
    """The listing as a model (GET /v1/models' body is memfit.wire_json's, kept per change of the listing)."""
    m = _models(plain)
    return m.WireModelList(models=[model_entry(e, m) for e in service.model_list()])


def record_observation(
    service: FitService, body: wire.WireObservation, store: bool = True
) -> wire.WireObservationReceipt | wire.WireObservationCheck:
    return receipt(service.record_observation(observation(body), store))


def observation_list(service: FitService, limit: int, model_id: str | None) -> wire.WireObservationList:
    return generated().WireObservationList(
        observations=[stored_observation(o) for o in service.observations.newest(limit, model_id)]
    )


def delete_observation(service: FitService, observation_id: int) -> bool:
    return service.delete_observation(observation_id)
