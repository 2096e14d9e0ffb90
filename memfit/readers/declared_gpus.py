"""What-if GPUs: `--gpu cuda:24GiB[:FREE]` (repeatable) or MEMFIT_GPUS (the same, comma-separated) declares the GPUs
a request is judged against, in place of those NVML or Metal report, so a user can plan for a card they do not
have. Each is a device of its llama.cpp backend (`cuda`: ggml-cuda's buffer rules; `metal`: ggml-metal's, on the
host's memory), free memory its total unless a free size follows.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence

from memfit.estimator.machine import GpuBackend, GpuMemory

ENVIRONMENT = "MEMFIT_GPUS"
BACKENDS = {"cuda": GpuBackend.CUDA, "metal": GpuBackend.METAL}
UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
MAX_BYTES = 1 << 56  # 64 PiB: far past any device, well inside int64
MAX_GPUS = 16  # ggml-cuda.h: GGML_CUDA_MAX_DEVICES, the most devices a backend registers


def byte_size(text: str) -> int:
    """24GiB, 24G (binary), 24GB (decimal), 512MiB, 1.5TiB or plain bytes; ValueError in words."""
    match = _SIZE.fullmatch(text)
    unit = UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ValueError(f"expected a size such as 24GiB, 512MiB or 80GB, got {text!r}")
    value = int(float(match.group(1)) * unit) if "." in match.group(1) else int(match.group(1)) * unit
    if not 0 < value <= MAX_BYTES:
        raise ValueError(f"a GPU's memory must be more than 0 and at most {MAX_BYTES:,} bytes, got {text!r}")
    return value


def declared_gpu(text: str, index: int) -> GpuMemory:
    """One `BACKEND:TOTAL[:FREE]`; ValueError in words."""
    backend, _, sizes = text.strip().partition(":")
    if backend.lower() not in BACKENDS or not sizes:
        raise ValueError(f"expected BACKEND:TOTAL[:FREE] with BACKEND one of {', '.join(BACKENDS)}, got {text!r}")
    total_text, _, free_text = sizes.partition(":")
    total = byte_size(total_text)
    free = byte_size(free_text) if free_text else total
    if free > total:
        raise ValueError(f"free memory above the total in {text!r}")
    kind = BACKENDS[backend.lower()]
    return GpuMemory(index, f"declared:{index}", free, total, kind is GpuBackend.METAL, kind, declared=True)


def declared_gpus(flags: Sequence[str] | None, environ: Mapping[str, str]) -> tuple[GpuMemory, ...] | None:
    """The GPUs `--gpu` declares, else MEMFIT_GPUS's; None when neither declares any (the GPUs are read)."""
    items = list(flags or []) or [s for s in environ.get(ENVIRONMENT, "").split(",") if s.strip()]
    if not items:
        return None
    if len(items) > MAX_GPUS:
        raise ValueError(f"at most {MAX_GPUS} GPUs (ggml-cuda's GGML_CUDA_MAX_DEVICES), got {len(items)}")
    return tuple(declared_gpu(text, i) for i, text in enumerate(items))


def gpu_spec(gpu: GpuMemory) -> str:
    """A declared GPU written back as `--gpu` takes it, in bytes (the server record keeps it so)."""
    backend = next(name for name, kind in BACKENDS.items() if kind is gpu.backend)
    return f"{backend}:{gpu.total}:{gpu.free}"


def gpu_flag(text: str) -> str:
    """`--gpu`'s type: the text, once it reads as a GPU (argparse.ArgumentTypeError in words otherwise)."""
    try:
        declared_gpu(text, 0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text
