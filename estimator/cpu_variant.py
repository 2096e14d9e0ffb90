"""Which of ggml's CPU variants a workload runs on: `auto` (the one ggml's loader picks on this host), `any`
(every variant the host runs) or one named, as the loader names its libggml-cpu-<name> libraries.

The variants are ggml/src/CMakeLists.txt's ggml_add_cpu_backend_variant lists (GGML_CPU_ALL_VARIANTS, what
llama.cpp's release builds and node-llama-cpp ship); each scores as its cpu-feats.cpp does (0 when the host
lacks a feature it was built for) and ggml_backend_load_best loads the highest score.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimator.machine import CpuArch, CpuFeatures

AUTO = "auto"
ANY = "any"

# ggml_backend_cpu_x86_score's and ggml_backend_cpu_aarch64_score's weight of each feature (AMX_TILE: none)
_SCORE_BITS = {
    "FMA": 1 << 0,
    "F16C": 1 << 1,
    "SSE42": 1 << 2,
    "BMI2": 1 << 3,
    "AVX": 1 << 4,
    "AVX2": 1 << 5,
    "AVX_VNNI": 1 << 6,
    "AVX512": 1 << 7,
    "AVX512_VBMI": 1 << 8,
    "AVX512_BF16": 1 << 9,
    "AVX512_VNNI": 1 << 10,
    "AMX_INT8": 1 << 11,
    "AMX_TILE": 0,
    "DOTPROD": 1 << 1,
    "FP16_VECTOR_ARITHMETIC": 1 << 2,
    "SVE": 1 << 3,
    "MATMUL_INT8": 1 << 4,
    "SVE2": 1 << 5,
    "SME": 1 << 6,
}


@dataclass(frozen=True)
class CpuVariant:
    name: str
    arch: CpuArch
    features: frozenset[str]  # what it was built for

    @property
    def score(self) -> int:
        return 1 + sum(_SCORE_BITS[f] for f in self.features)

    def runs_on(self, host: CpuFeatures) -> bool:
        """Its score is not 0 there; an unreadable host runs every variant as far as memfit knows."""
        return host.arch is CpuArch.UNKNOWN or (host.arch is self.arch and self.features <= host.features)


def _variant(name: str, arch: CpuArch, features: str = "") -> CpuVariant:
    return CpuVariant(name, arch, frozenset(features.split()))


_HASWELL = "SSE42 AVX F16C FMA AVX2 BMI2"
_AVX512 = _HASWELL + " AVX512"
VARIANTS: tuple[CpuVariant, ...] = (
    _variant("x64", CpuArch.X86_64),
    _variant("sse42", CpuArch.X86_64, "SSE42"),
    _variant("sandybridge", CpuArch.X86_64, "SSE42 AVX"),
    _variant("ivybridge", CpuArch.X86_64, "SSE42 AVX F16C"),
    _variant("piledriver", CpuArch.X86_64, "SSE42 AVX F16C FMA"),
    _variant("haswell", CpuArch.X86_64, _HASWELL),
    _variant("skylakex", CpuArch.X86_64, _AVX512),
    _variant("cannonlake", CpuArch.X86_64, _AVX512 + " AVX512_VBMI"),
    _variant("cascadelake", CpuArch.X86_64, _AVX512 + " AVX512_VNNI"),
    _variant("icelake", CpuArch.X86_64, _AVX512 + " AVX512_VBMI AVX512_VNNI"),
    _variant("cooperlake", CpuArch.X86_64, _AVX512 + " AVX512_VNNI AVX512_BF16"),
    _variant("zen4", CpuArch.X86_64, _AVX512 + " AVX512_VBMI AVX512_VNNI AVX512_BF16"),
    _variant("alderlake", CpuArch.X86_64, _HASWELL + " AVX_VNNI"),
    _variant("sapphirerapids", CpuArch.X86_64, _AVX512 + " AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8"),
    _variant("armv8.0_1", CpuArch.ARM64),
    _variant("armv8.2_1", CpuArch.ARM64, "DOTPROD"),
    _variant("armv8.2_2", CpuArch.ARM64, "DOTPROD FP16_VECTOR_ARITHMETIC"),
    _variant("armv8.2_3", CpuArch.ARM64, "DOTPROD FP16_VECTOR_ARITHMETIC SVE"),
    _variant("armv8.6_1", CpuArch.ARM64, "DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8"),
    _variant("armv8.6_2", CpuArch.ARM64, "DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8 SVE2"),
    _variant("armv9.2_1", CpuArch.ARM64, "DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8 SME"),
    _variant("armv9.2_2", CpuArch.ARM64, "DOTPROD FP16_VECTOR_ARITHMETIC SVE MATMUL_INT8 SVE2 SME"),
)
BY_NAME = {v.name: v for v in VARIANTS}
# The CPU backend of an architecture no variant is built for (a native build): no extra buffer type of ggml's
# x86 or ARM kernels
PLAIN = CpuVariant("native", CpuArch.OTHER, frozenset())


@dataclass(frozen=True)
class VariantChoice:
    """What a workload's `cpuVariant` resolved to: the name echoed and the variants both bounds hold for (none:
    the host cannot run the one named, or it is not a variant ggml ships)."""

    name: str
    variants: tuple[CpuVariant, ...]


def resolve_variant(requested: str, host: CpuFeatures) -> VariantChoice:
    """`auto`: the variant ggml_backend_load_best loads on `host` (on a host memfit cannot read: every variant,
    echoed `any`; on an architecture no variant is built for: its native build); `any`: every variant `host`
    runs; a name: that variant when `host` runs it."""
    if host.arch is CpuArch.OTHER:
        return VariantChoice(PLAIN.name, (PLAIN,) if requested in (AUTO, ANY, PLAIN.name) else ())
    runnable = tuple(v for v in VARIANTS if v.runs_on(host))
    if requested == ANY or (requested == AUTO and host.arch is CpuArch.UNKNOWN):
        return VariantChoice(ANY, runnable)
    if requested == AUTO:
        best = max(runnable, key=lambda v: v.score, default=None)
        return VariantChoice(best.name if best else AUTO, (best,) if best else ())
    named = BY_NAME.get(requested)
    return VariantChoice(requested, (named,) if named is not None and named in runnable else ())
