"""What the tables read of an answer (memfit.render), as Protocols.

Two kinds of object satisfy them, both generated from openapi.yaml with the same fields: the pydantic models
(memfit.generated.models: a running server's answer, read by memfit.remote) and the stdlib dataclasses
(memfit.generated.plain_models: an answer worked out in the CLI's own process, built by memfit.wire with
plain=True, so that a command printing a table never imports pydantic). mypy holds both to these shapes where the
CLI hands them to the renderer. A member that holds other shapes is a read-only property, so that either kind's
list of its own objects is a Sequence of the shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class RunningServer(Protocol):
    pid: int
    port: int | None


class ModelEntry(Protocol):
    model_id: str
    source: str
    root: str
    architecture: str
    quant: str
    revision: str
    artifact_bytes: int | None
    context_limit: int | None
    has_projector: bool
    weights_bytes: int | None
    reading: bool | None
    unreadable: str | None

    @property
    def loaded_by(self) -> Sequence[RunningServer] | None: ...


class ModelList(Protocol):
    @property
    def models(self) -> Sequence[ModelEntry]: ...


class MemoryPart(Protocol):
    component: str
    bytes: int | None
    upper_bytes: int | None
    basis: str
    shared_key: str
    note: str
    residency: str


class ResolvedSetting(Protocol):
    setting: str
    source: str
    detail: str


class Workload(Protocol):
    allocated_tokens: int
    context_source: str
    streams: int
    key_element_bytes: int
    value_element_bytes: int
    mode: str
    profile: str

    @property
    def settings(self) -> Sequence[ResolvedSetting]: ...


class Estimate(Protocol):
    lower_bound_bytes: int
    upper_bound_bytes: int | None
    weakest_basis: str
    refusal: str

    @property
    def parts(self) -> Sequence[MemoryPart]: ...

    @property
    def missing(self) -> Sequence[str]: ...

    @property
    def workload(self) -> Workload: ...


class Identity(Protocol):
    model_id: str
    revision: str
    quant: str
    artifact_bytes: int | None
    context_limit: int | None


class Budget(Protocol):
    basis: str
    bytes: int | None
    committed_bytes: int | None


class Device(Protocol):
    name: str
    kind: str
    declared: bool
    lower_bound_bytes: int
    upper_bound_bytes: int | None
    free_bytes: int | None
    verdict: str
    note: str

    @property
    def parts(self) -> Sequence[MemoryPart]: ...


class FitResult(Protocol):
    model_id: str
    verdict: str
    soft_bytes: int
    gpu_admits: bool | None
    decided_by: str | None

    @property
    def identity(self) -> Identity: ...

    @property
    def estimate(self) -> Estimate: ...

    @property
    def budget(self) -> Budget: ...

    @property
    def devices(self) -> Sequence[Device]: ...

    @property
    def limits(self) -> Sequence[str]: ...


class LeftOut(Protocol):
    model_id: str
    reason: str | None


class FitBatch(Protocol):
    @property
    def results(self) -> Sequence[FitResult]: ...

    @property
    def left_out(self) -> Sequence[LeftOut]: ...


class PlanMaxima(Protocol):
    good: int | None
    tight: int | None
    possible: int | None


class PlanGpuLayers(Protocol):
    good: int | None
    tight: int | None
    fitter: int | None
    n_cpu_moe_good: int | None
    n_cpu_moe_tight: int | None


class PlanQuant(Protocol):
    model_id: str
    quant: str

    @property
    def max_allocated_tokens(self) -> PlanMaxima: ...

    @property
    def max_gpu_layers(self) -> PlanGpuLayers | None: ...

    @property
    def fit(self) -> FitResult: ...


class PlanResult(Protocol):
    model_id: str
    best_quant: str | None

    @property
    def quants(self) -> Sequence[PlanQuant]: ...


class PlanBatch(Protocol):
    @property
    def results(self) -> Sequence[PlanResult]: ...

    @property
    def left_out(self) -> Sequence[LeftOut]: ...
