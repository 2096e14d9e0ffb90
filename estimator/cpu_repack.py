"""Where llama.cpp's CPU backend puts each matrix weight under one of ggml's CPU variants, and what it takes.

llama_model_loader::create_tensor gives a weight the first buffer type of the CPU list whose supports_op
accepts the op llama.cpp runs it with (select_weight_buft): ggml-cpu.cpp lists the extra buffer types AMX, then
CPU_REPACK, before the plain CPU buffer. Only MUL_MAT weights go to AMX (its supports_op takes 2-D MUL_MAT
only: MoE experts, MUL_MAT_ID, stay in CPU_REPACK or CPU); CPU_REPACK keeps a tensor's size (its
get_alloc_size is ggml_nbytes), AMX packs some types larger (amx/mmq.cpp get_row_size). A tied output
(no output.weight) is token_embd again: token_embd (GET_ROWS) stays in the plain CPU buffer, so an extra
buffer type that accepts the output holds a second copy.

What each extra buffer type accepts is decided by the features the variant was built for (ggml_cpu_has_avx2()
and friends are #if tests in ggml-cpu.c).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memfit import gguf_constants as gguf
from memfit.estimator.cpu_variant import CpuVariant
from memfit.estimator.machine import CpuArch
from memfit.gguf_constants import GGMLQuantizationType as QT
from memfit.integers import round_up

TENSOR_ALIGNMENT = 32  # every CPU buffer type (CPU, CPU_REPACK, AMX) aligns each tensor to 32 bytes


@dataclass(frozen=True)
class Accepts:
    """One buffer type's condition on a 2-D weight of a type: ne[1] (rows) and ne[0] multiples, and the bytes
    its packed copy adds per block (AMX keeps per-block sums and scales beside the packed data)."""

    rows: int
    cols: int = 1
    extra_per_block: int = 0


@dataclass(frozen=True)
class BufferType:
    name: str  # as ggml names it (ggml_backend_buft_name)
    accepts: dict[QT, Accepts]


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
AMX = BufferType("AMX", _AMX)
REPACK = "CPU_REPACK"
CPU = "CPU"


def extra_buffer_types(variant: CpuVariant) -> tuple[BufferType, ...]:
    """ggml_backend_cpu_get_extra_buffer_types of a variant's build, in the order they are tried."""
    f = variant.features
    if variant.arch is CpuArch.X86_64:
        amx = (AMX,) if {"AMX_INT8", "AVX512_VNNI"} <= f else ()
        if "AVX512" in f:
            return (*amx, BufferType(REPACK, _REPACK_AVX512))
        return (BufferType(REPACK, _REPACK_AVX2),) if "AVX2" in f else ()
    if variant.arch is CpuArch.ARM64 and f & {"DOTPROD", "MATMUL_INT8"}:
        return (BufferType(REPACK, _REPACK_ARM),)
    return ()


@dataclass(frozen=True)
class Matrix:
    """Weights llama.cpp multiplies with MUL_MAT: `count` 2-D tensors of one type and shape (ne[0], ne[1])."""

    ggml_type: int
    shape: tuple[int, int]
    count: int = 1

    @property
    def nbytes(self) -> int:
        block, type_size = gguf.GGML_QUANT_SIZES[QT(self.ggml_type)]
        return self.shape[0] // block * type_size * self.shape[1]


def padded(n: int) -> int:
    return round_up(n, TENSOR_ALIGNMENT)


def placement(variant: CpuVariant, m: Matrix) -> tuple[str, int]:
    """The buffer type that takes one tensor of `m` under `variant`, and the bytes it allocates there
    (unpadded; ggml_backend_buft_get_alloc_size). Its type is one ggml knows: summarize refused the others."""
    qtype = QT(m.ggml_type)
    for buft in extra_buffer_types(variant):
        accepts = takes(buft, m)
        if accepts is None:
            continue
        blocks = m.nbytes // gguf.GGML_QUANT_SIZES[qtype][1]
        return buft.name, m.nbytes + blocks * accepts.extra_per_block
    return CPU, m.nbytes


def takes(buft: BufferType, m: Matrix) -> Accepts | None:
    """How `buft` takes a matrix of `m`'s type and shape (its supports_op: the type packed, the rows and columns
    whole multiples of its interleave), or None when it does not."""
    accepts = buft.accepts.get(QT(m.ggml_type))
    if accepts is None or m.shape[1] % accepts.rows or m.shape[0] % accepts.cols:
        return None
    return accepts


def packing_bytes(variant: CpuVariant, matrices: Iterable[Matrix]) -> int:
    """What the matrix weights take under `variant` beyond their padded file bytes (AMX's packing)."""
    return sum(m.count * (padded(placement(variant, m)[1]) - padded(m.nbytes)) for m in matrices)


def tied_copy_bytes(variant: CpuVariant, tied: Matrix) -> tuple[str, int]:
    """The buffer type of a tied embedding's output copy and the padded bytes of that second copy (0 when the
    plain CPU buffer takes it: the output is token_embd itself)."""
    where, nbytes = placement(variant, tied)
    return where, 0 if where == CPU else padded(nbytes)
