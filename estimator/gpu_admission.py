"""Whether the visible GPUs could take the estimate's floor now (advice only; nothing is reserved).

llama.cpp splits a model's layers across every visible GPU (its default `--split-mode layer`), so
the free memory of the visible GPUs is pooled. A Metal device (a Mac) is one GPU whose free memory is what
llama.cpp's Metal backend plans against: its recommended working set less what is allocated on it. On unified
memory that working set is a share of the host's memory, so the host budget (the verdict) and the working set
(gpuAdmits) are two limits on one pool: a model must pass both to run on the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from memfit.estimator.bounds import Part
from memfit.estimator.machine import GpuMemory
from memfit.estimator.vocabulary import Component, Mode

# What each mode keeps on the GPU: everything, or (weights in host memory) the KV cache and workspace.
ON_GPU = {
    Mode.FULL_GPU: None,
    Mode.CPU_OFFLOAD: (Component.KV_CACHE, Component.WORKSPACE),
}


def gpu_admits(mode: str, parts: Sequence[Part], gpus: Sequence[GpuMemory] | None) -> bool | None:
    """True when the floor of what `mode` keeps on the GPUs fits their pooled free memory; None when unknowable."""
    if gpus is None or mode not in ON_GPU or not parts:
        return None
    kept = ON_GPU[Mode(mode)]
    need = sum(p.bytes or 0 for p in parts if kept is None or p.component in kept)
    return need <= sum(g.free for g in gpus)
