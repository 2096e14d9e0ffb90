"""The workload a request asks about: defaults, the context cap, and the refusals that stop an estimate."""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimator.vocabulary import INT64_MAX, ContextSource, Mode, Refusal

DEFAULT_ALLOCATED_TOKENS = 4096
DEFAULT_STREAMS = 1
DEFAULT_ELEMENT_BYTES = 2  # f16
DEFAULT_MODE = Mode.FULL_GPU


@dataclass(frozen=True)
class WorkloadRequest:
    """What a caller asked for; None means "the documented default"."""

    allocated_tokens: int | None = None
    streams: int | None = None
    key_element_bytes: int | None = None
    value_element_bytes: int | None = None
    mode: str | None = None


@dataclass(frozen=True)
class Workload:
    allocated_tokens: int  # KV capacity per stream
    context_source: ContextSource
    streams: int
    key_element_bytes: int
    value_element_bytes: int
    mode: str

    def clamped(self) -> Workload:
        """The same workload with every number held inside int64, for echoing a refused request."""
        clamp = lambda v: max(-INT64_MAX - 1, min(INT64_MAX, v))  # noqa: E731
        return Workload(
            clamp(self.allocated_tokens),
            self.context_source,
            clamp(self.streams),
            clamp(self.key_element_bytes),
            clamp(self.value_element_bytes),
            self.mode,
        )


def resolve_workload(request: WorkloadRequest, context_limit: int | None) -> Workload:
    """Fill in the documented defaults; the default capacity (never a requested one) is capped to the model's limit."""
    if request.allocated_tokens is None:
        tokens = DEFAULT_ALLOCATED_TOKENS
        if context_limit is not None and context_limit > 0:
            tokens = min(tokens, context_limit)
        source = ContextSource.DOCUMENTED_DEFAULT
    else:
        tokens, source = request.allocated_tokens, ContextSource.REQUESTED
    return Workload(
        allocated_tokens=tokens,
        context_source=source,
        streams=DEFAULT_STREAMS if request.streams is None else request.streams,
        key_element_bytes=DEFAULT_ELEMENT_BYTES if request.key_element_bytes is None else request.key_element_bytes,
        value_element_bytes=DEFAULT_ELEMENT_BYTES
        if request.value_element_bytes is None
        else request.value_element_bytes,
        mode=DEFAULT_MODE if request.mode is None else request.mode,
    )


def input_refusal(workload: Workload) -> Refusal | None:
    """The refusals the inputs alone decide, in the documented order.

    `nonFiniteInput` for a derived byte count and `contextExceedsModelLimit` need the model; the
    estimate checks those around this one, keeping the order nonFinite, nonPositive*, exceeds.
    """
    numbers = (workload.allocated_tokens, workload.streams, workload.key_element_bytes, workload.value_element_bytes)
    if any(not -INT64_MAX - 1 <= n <= INT64_MAX for n in numbers):
        return Refusal.NON_FINITE_INPUT
    if workload.allocated_tokens <= 0:
        return Refusal.NON_POSITIVE_CONTEXT
    if workload.streams <= 0:
        return Refusal.NON_POSITIVE_STREAMS
    return None


def exceeds_limit(workload: Workload, context_limit: int | None) -> bool:
    return context_limit is not None and workload.allocated_tokens > context_limit
