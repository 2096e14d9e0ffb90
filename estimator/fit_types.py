"""What the fit service takes and gives: the domain's requests and answers (the wire adapter maps them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from memfit.estimator.bounds import Bounds, Part
from memfit.estimator.budget import Budget
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import ModelSource, Refusal, Verdict
from memfit.estimator.workload import Workload, WorkloadRequest

if TYPE_CHECKING:
    from memfit.estimator.device_forecast import DeviceShare


@dataclass(frozen=True)
class FitRequest:
    model_id: str
    workload: WorkloadRequest = field(default_factory=WorkloadRequest)


@dataclass(frozen=True)
class FitResult:
    """One model's answer, judged against the environment of its request."""

    model_id: str  # as the request named it
    subject: Subject  # the model it resolved to: identity and evidence
    workload: Workload
    refusal: Refusal
    parts: tuple[Part, ...]  # sharedKey set where another answer of the batch uses the same files
    bounds: Bounds
    verdict: Verdict
    budget: Budget
    gpu_admits: bool | None
    limits: tuple[str, ...]  # in the contract's order
    devices: tuple[DeviceShare, ...] = ()  # the host's share and each GPU's (none for a refusal)
    device_verdicts: tuple[Verdict, ...] = ()  # one per device, each against its own budget
    decided_by: str | None = None  # the device whose verdict is the answer's
    host_total: int | None = None  # the host's physical memory, as read for the request


@dataclass(frozen=True)
class ModelEntry:
    """A model the server knows: a local artifact or a catalog entry (GET /v1/models)."""

    model_id: str
    source: ModelSource
    root: str
    architecture: str
    quant: str
    revision: str
    artifact_bytes: int | None
    context_limit: int | None
    has_projector: bool
    unreadable: str | None = None  # why a local artifact could not be read
    weights_bytes: int | None = None  # a catalog entry's weights floor on this host (it has no file)
    reading: bool | None = None  # True while a local artifact's header waits to be read (its facts empty)
    loaded_by: tuple[tuple[int, int | None], ...] = ()  # (pid, port) of each running llama-server that loaded it


@dataclass(frozen=True)
class ObservedParts:
    weights: int | None = None
    kv_cache: int | None = None
    recurrent_state: int | None = None
    workspace: int | None = None
    companions: int | None = None


@dataclass(frozen=True)
class Observation:
    """What a runtime reports it allocated for a model under a workload."""

    model_id: str
    revision: str
    quant: str
    artifact_bytes: int | None
    workload: WorkloadRequest
    parts: ObservedParts
    runtime: str
    observed_at: datetime | None = None


@dataclass(frozen=True)
class ObservationReceipt:
    observation_id: int | None  # None: checked as it would be stored, not stored (a dry run)
    model_id: str
    known: bool
    flags: tuple[str, ...]


@dataclass(frozen=True)
class ObservedWorkload:
    """The workload an observation was stored under, resolved (no defaults left to fill)."""

    allocated_tokens: int
    streams: int
    key_element_bytes: int
    value_element_bytes: int
    mode: str


@dataclass(frozen=True)
class StoredObservation:
    """An observation as the history keeps it (GET /v1/models/observations)."""

    observation_id: int
    model_id: str
    revision: str
    quant: str
    artifact_bytes: int | None
    workload: ObservedWorkload
    parts: ObservedParts
    runtime: str
    observed_at: str
    note: str


@dataclass(frozen=True)
class QuantPlan:
    """One quant of a plan: the largest allocatedTokens each verdict holds at, and the fit at the asked context."""

    model_id: str  # the full id of this quant
    quant: str
    max_good: int | None
    max_tight: int | None
    max_possible: int | None
    fit: FitResult
    gpu_layers: LayerMaxima | None = None  # on GPUs (read or declared): the layers each verdict allows there


@dataclass(frozen=True)
class LayerMaxima:
    """At the context a plan's fit is about: the largest gpuLayers whose verdict is good and at least tight (None:
    none is), the gpuLayers llama.cpp's fitter chooses (None: memfit does not predict it there), and for a model
    with experts, with every layer on the GPUs, the fewest layers whose experts stay on the host (--n-cpu-moe) at
    which the verdict is good and at least tight (None: none, or no experts)."""

    good: int | None
    tight: int | None
    fitter: int | None
    n_cpu_moe_good: int | None = None
    n_cpu_moe_tight: int | None = None


@dataclass(frozen=True)
class PlanResult:
    """One plan request's answer: every quant considered, highest precision first."""

    model_id: str  # as the request named it
    quants: tuple[QuantPlan, ...]
    best_quant: str | None  # a repository's highest-precision quant whose verdict is good; None otherwise


@dataclass(frozen=True)
class ObservationRow:
    model_id: str
    revision: str
    quant: str
    artifact_bytes: int | None
    allocated_tokens: int
    streams: int
    key_element_bytes: int
    value_element_bytes: int
    mode: str
    weights_bytes: int | None
    kv_cache_bytes: int | None
    recurrent_state_bytes: int | None
    workspace_bytes: int | None
    companions_bytes: int | None
    runtime: str
    observed_at: str
    note: str = ""
    id: int | None = None
