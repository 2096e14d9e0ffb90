"""What memfit knows of the machine it answers for, as the readers (memfit/readers) find it: the host's memory, its
CPU's features as ggml's CPU variants name them, and its GPUs' memory. The estimator reads these; it never reads
the machine itself."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum


@dataclass(frozen=True)
class HostMemory:
    available: int | None  # what a new allocation could claim now
    total: int | None  # the physical ceiling


class CpuArch(Enum):
    X86_64 = "x86-64"
    ARM64 = "arm64"
    OTHER = "other architecture"  # none of ggml's CPU variants is built for it
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class CpuFeatures:
    arch: CpuArch
    features: frozenset[str] = frozenset()  # ggml's names of the features the host has
    source: str = ""  # where the fact came from, for notes and logs


UNKNOWN_CPU = CpuFeatures(CpuArch.UNKNOWN)


class GpuBackend(StrEnum):
    """The llama.cpp backend a GPU is used through, by the name its devices take (CUDA0, MTL0)."""

    CUDA = "CUDA"
    METAL = "MTL"


@dataclass(frozen=True)
class GpuMemory:
    index: int
    uuid: str  # NVML's GPU UUID; `metal:<device name>` for a Metal device; `declared:<n>` for a declared one
    free: int  # what llama.cpp's backend reports free for the device
    total: int
    unified: bool = False  # the host's memory (Apple silicon): the same pool the host budget is read from
    backend: GpuBackend = GpuBackend.CUDA
    declared: bool = False  # assumed in place of the ones read (memfit serve --gpu, MEMFIT_GPUS), not read
