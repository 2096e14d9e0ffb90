"""Whether llama.cpp's CPU backend keeps a second copy of a tied token embedding on this host.

A tied output (no output.weight) is token_embd again. llama_model_loader::create_tensor puts token_embd
(GET_ROWS, input layer) in the plain CPU buffer, and the output (MUL_MAT) in the first buffer type of the CPU
list whose supports_op accepts it: ggml-cpu.cpp lists the extra buffer types AMX, then CPU_REPACK, before the
plain CPU buffer. When an extra one accepts it, the output is a second tensor, loaded (and repacked) again.

What each extra buffer type accepts is decided by the features the CPU backend was compiled for
(ggml_cpu_has_avx2() and friends are #if tests in ggml-cpu.c); ggml's per-CPU variants and native builds
use what the host has. One host family may still run several builds (an AVX-512 host runs AVX2-only
builds too: the one memfit's measurements came from), so a copy is `certain` only when every build it may
run keeps it, `never` when none does, else `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memfit import gguf_constants as gguf
from memfit.gguf_constants import GGMLQuantizationType as QT
from memfit.readers.cpu_features import CpuFamily


class TiedCopy(Enum):
    CERTAIN = "certain"  # in the floor
    NEVER = "never"  # in neither bound
    UNKNOWN = "unknown"  # in the ceiling only


@dataclass(frozen=True)
class Accepts:
    """One buffer type's condition on a 2-D weight of a type: ne[1] (rows) and ne[0] multiples, and the bytes
    its packed copy adds per block (AMX keeps per-block sums and scales beside the packed data)."""

    rows: int
    cols: int = 1
    extra_per_block: int = 0


Build = tuple[dict[QT, Accepts], ...]  # a CPU backend build: its extra buffer types, in the order they are tried

# repack.cpp, ggml_repack_get_optimal_repack_type: x86 kernels under ggml_cpu_has_avx2 (8-row interleaves)
# and ggml_cpu_has_avx512 (Q2_K)
_REPACK_AVX2 = {t: Accepts(8) for t in (QT.Q4_0, QT.Q4_K, QT.IQ4_NL, QT.MXFP4)}
_REPACK_AVX512 = {**_REPACK_AVX2, QT.Q2_K: Accepts(8)}
# ... and ARM kernels under ggml_cpu_has_neon() && (dotprod or matmul_int8): 4- or 8-row interleaves (the SVE
# 8x8 Q4_0 path falls back to the 4-row NEON one when ne[1] % 8 != 0, so 4 rows suffice either way)
_REPACK_ARM = {
    QT.Q4_0: Accepts(4),
    QT.IQ4_NL: Accepts(4),
    QT.MXFP4: Accepts(4),
    QT.Q8_0: Accepts(4),
    QT.Q4_K: Accepts(8),
    QT.Q5_K: Accepts(8),
    QT.Q6_K: Accepts(8),
}
# amx/amx.cpp extra_buffer_type::supports_op: MUL_MAT with ne[1] % (TILE_N * 2) == 0 and ne[0] a multiple of
# the type's alignment; amx/mmq.cpp get_row_size: the packed row adds 4 bytes per block for Q8_0 (its
# compensation), Q4_K and Q5_K, 2 for IQ4_XS; F16 is copied as it is. Built only for __AMX_INT8__ && __AVX512VNNI__.
_AMX = {
    QT.Q4_0: Accepts(32, 32),
    QT.Q4_1: Accepts(32, 32),
    QT.Q8_0: Accepts(32, 32, 4),
    QT.Q4_K: Accepts(32, 256, 4),
    QT.Q5_K: Accepts(32, 256, 4),
    QT.Q6_K: Accepts(32, 256),
    QT.IQ4_XS: Accepts(32, 256, 2),
    QT.F16: Accepts(32, 16),
}
_NONE: Build = ()
_AVX2: Build = (_REPACK_AVX2,)
_AVX512: Build = (_REPACK_AVX512,)
_AMX_BUILD: Build = (_AMX, _REPACK_AVX512)
_ARM: Build = (_REPACK_ARM,)

# The builds a host of each family may run (a build needs the features it was compiled for).
BUILDS: dict[CpuFamily, tuple[Build, ...]] = {
    CpuFamily.X86_BASIC: (_NONE,),
    CpuFamily.X86_AVX2: (_AVX2,),
    CpuFamily.X86_AVX512: (_AVX2, _AVX512),
    CpuFamily.X86_AMX: (_AVX2, _AVX512, _AMX_BUILD),
    CpuFamily.ARM_NEON: (_NONE,),
    CpuFamily.ARM_DOTPROD: (_ARM,),
    CpuFamily.ARM_I8MM: (_ARM,),
    CpuFamily.OTHER: (_NONE,),
    CpuFamily.UNKNOWN: (_NONE, _AVX2, _AVX512, _AMX_BUILD, _ARM),
}


@dataclass(frozen=True)
class TiedCopyBytes:
    outcome: TiedCopy
    floor: int  # bytes of the second copy in the floor
    ceiling: int  # bytes of the second copy in the ceiling


def _copy_bytes(build: Build, ggml_type: QT, shape: tuple[int, int] | None, nbytes: int) -> int | None:
    """The bytes of the copy this build keeps, None when it keeps none. An unknown shape passes every shape
    condition (the caller makes such an answer unknown)."""
    for accepts_by_type in build:
        accepts = accepts_by_type.get(ggml_type)
        if accepts is None:
            continue
        if shape is not None and (shape[1] % accepts.rows or shape[0] % accepts.cols):
            continue
        blocks = nbytes // gguf.GGML_QUANT_SIZES[ggml_type][1]
        return nbytes + blocks * accepts.extra_per_block
    return None


def tied_output_copy(family: CpuFamily, ggml_type: int, shape: tuple[int, int] | None, nbytes: int) -> TiedCopyBytes:
    """The second copy (unpadded bytes) of a tied token embedding of `ggml_type`, `shape` (ne[0], ne[1]; None
    when unknown) and `nbytes` that llama.cpp's CPU backend keeps on a host of `family`."""
    try:
        qtype = QT(ggml_type)
    except ValueError:
        return TiedCopyBytes(TiedCopy.NEVER, 0, 0)  # not a type ggml knows: llama.cpp refuses the file
    copies = [_copy_bytes(build, qtype, shape, nbytes) for build in BUILDS[family]]
    kept = [c for c in copies if c is not None]
    if not kept:
        return TiedCopyBytes(TiedCopy.NEVER, 0, 0)
    if len(kept) == len(copies) and shape is not None:
        return TiedCopyBytes(TiedCopy.CERTAIN, min(kept), max(kept))
    return TiedCopyBytes(TiedCopy.UNKNOWN, 0, max(kept))
