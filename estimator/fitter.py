"""The context llama.cpp's fitter chooses (`--fit on`, llama-server's and llama-cli's default): common/fit.cpp's
common_params_fit_impl, on a host without GPU devices.

With no -c (n_ctx 0) the fitter starts from the trained context times the streams, projects what the host buffers
would hold there (common_get_device_memory_data: the model, context and compute bytes of every host buffer type of a
dry run; the CPU's extra buffer types, which repack weights, are not host buffer types and are not counted, and
neither is the output buffer), and keeps it when the host's total memory (ggml's CPU device reports its physical
pages as free and total) leaves the margin (`--fit-target`, 1 GiB). Otherwise it projects the minimum context
(`--fit-ctx`, 4096, times the streams) and interpolates linearly between the two, rounded down to 256 cells per
stream (at least the minimum); when even the minimum does not leave the margin it gives up, having set the minimum.
With GPU devices the fitter works per device: estimator/fit_placement.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memfit.estimator.compute_buffer import compute_bounds, replayed
from memfit.estimator.context_kernel import ContextKernel
from memfit.estimator.mtp import draft_compute
from memfit.estimator.subject import Subject
from memfit.estimator.workload import Workload

MIB = 1 << 20
DEFAULT_MARGIN = 1024 * MIB  # common_params::fit_params_target: 1024 MiB per device
DEFAULT_MIN_CTX = 4096  # common_params::fit_params_min_ctx
FULL_CONTEXT = 0xFFFFFFFF  # -c 0: fit_params_min_ctx = UINT32_MAX, the fitter keeps the full context
CELL_ALIGN = 256  # "round down context for CUDA backend, keep it divisible by the number of streams"


@dataclass(frozen=True)
class FitOutcome:
    n_ctx: int  # the context llama.cpp is created with
    fitted: bool  # common_fit_params' status: the projection leaves the margin (else it gave up: FAILURE)
    why: str  # what the fitter did, in its own log's terms


def fitted_context(
    n_ctx_train: int,
    n_seq: int,
    unified: bool,
    projected: Callable[[int], int],
    host_total: int,
    margin: int = DEFAULT_MARGIN,
    n_ctx_min: int = DEFAULT_MIN_CTX,
) -> FitOutcome:
    """common_params_fit_impl with n_ctx 0 and no device (nd == 0): `projected(n_ctx)` is the bytes the host buffers
    hold at a total context n_ctx."""
    n_streams = 1 if unified else max(1, n_seq)  # "with non-unified kv, we need to take into account n_streams"
    n_ctx_max = min(n_ctx_train * n_streams, FULL_CONTEXT)
    n_ctx_min_total = min(n_ctx_min * n_streams, FULL_CONTEXT)
    used = projected(n_ctx_max)
    if host_total - used >= margin:
        return FitOutcome(n_ctx_max, True, f"the trained context {n_ctx_max} leaves the {margin // MIB} MiB margin")
    if n_ctx_max <= n_ctx_min_total:
        return FitOutcome(n_ctx_max, False, f"the context {n_ctx_max} is not above the minimum {n_ctx_min_total}")
    n_ctx = interpolated_context(
        n_ctx_max, n_ctx_min_total, n_streams, used, projected(n_ctx_min_total), host_total - margin
    )
    if n_ctx is None:
        return FitOutcome(
            n_ctx_min_total, False, f"even the minimum context {n_ctx_min_total} does not leave the margin"
        )
    return FitOutcome(n_ctx, True, f"reduced from {n_ctx_max} to leave the {margin // MIB} MiB margin")


def interpolated_context(
    n_ctx_max: int, n_ctx_min: int, n_streams: int, used_max: int, used_min: int, used_target: int
) -> int | None:
    """common_params_fit_impl's step 2: the context whose projected use meets `used_target`, interpolated linearly
    between the minimum and the maximum context (int64 arithmetic, truncated) and rounded down to 256 cells per
    stream (at least the minimum); None where even the minimum's use does not meet it."""
    if used_target <= used_min:
        return None
    n_ctx = n_ctx_min + (n_ctx_max - n_ctx_min) * (used_target - used_min) // (used_max - used_min)
    align = CELL_ALIGN * n_streams  # "round down context for CUDA backend, keep it divisible by the number of streams"
    return max(n_ctx - n_ctx % align, n_ctx_min)


def host_projection(subject: Subject, workload: Workload, host_weights: int) -> Callable[[int], int] | None:
    """The bytes common_get_device_memory_data counts in host buffers at a total context n_ctx: the weights in host
    buffer types (`host_weights`), the KV cache, the recurrent state and the compute buffer of a dry run with
    the workload's streams, unified cache, ubatch, flash attention and cache types (the replayed buffer where the
    graph is rebuilt node for node, else its floor; not the output buffer: llama_context::memory_breakdown leaves
    it out), and under draft-mtp the MTP draft context's cache and compute buffer beside them (common_init_result
    fits it with the model: common_fit_extra_model); None where the compute buffer or the draft is not derived."""
    layout, n_vocab = subject.layout, subject.n_vocab
    if layout is None or layout.graph is None or n_vocab is None or workload.flash_attention_on is None:
        return None
    graph = layout.graph
    kernel = ContextKernel(layout, n_vocab, subject.architecture, workload)
    if kernel.draft_unknown:
        return None
    draft = kernel.draft

    def projected(n_ctx: int) -> int:
        geometry = kernel.geometry_total(n_ctx)
        compute = replayed(graph, n_vocab, geometry).size if compute_bounds(graph, n_vocab, geometry) else 0
        if draft is not None:  # its KV cache is in kv_bytes
            compute += draft_compute(draft, n_vocab, geometry)
        return host_weights + sum(kernel.kv_bytes(geometry)) + sum(kernel.recurrent_bytes(geometry)) + compute

    # the compute buffer is derived at every context or none (its graph, flash attention, the K cache's type)
    if compute_bounds(graph, n_vocab, kernel.geometry_total(DEFAULT_MIN_CTX)) is None:
        return None
    return projected
