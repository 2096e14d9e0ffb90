"""The host CPU's features, named as ggml's CPU variants name the features they are built for.

Read once per process: Linux's /proc/cpuinfo (x86 `flags`, ARM `Features`; a feature counts only when every
processor lists it, and Linux lists AVX and AVX-512 only where the OS enables their state), else on macOS a
cheap sysctl. What cannot be read or recognised is an UNKNOWN host (every variant stays possible).
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Callable
from functools import cache

from memfit.estimator.machine import UNKNOWN_CPU, CpuArch, CpuFeatures

CPUINFO = "/proc/cpuinfo"
_X86 = {"x86_64", "amd64", "x64"}
_ARM = {"aarch64", "arm64"}
_MAX_CPUINFO = 4 << 20  # /proc/cpuinfo of a large machine is well under this


# ggml's feature names (ggml_add_cpu_backend_variant) and the cpuinfo flags each needs; x86 from
# ggml_backend_cpu_x86_score (AVX512 needs F, CD, VL, DQ and BW), ARM from ggml_backend_cpu_aarch64_score
X86_FLAGS: dict[str, frozenset[str]] = {
    "SSE42": frozenset({"sse4_2"}),
    "AVX": frozenset({"avx"}),
    "F16C": frozenset({"f16c"}),
    "FMA": frozenset({"fma"}),
    "AVX2": frozenset({"avx2"}),
    "BMI2": frozenset({"bmi2"}),
    "AVX_VNNI": frozenset({"avx_vnni"}),
    "AVX512": frozenset({"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}),
    "AVX512_VBMI": frozenset({"avx512vbmi"}),
    "AVX512_VNNI": frozenset({"avx512_vnni"}),
    "AVX512_BF16": frozenset({"avx512_bf16"}),
    "AMX_TILE": frozenset({"amx_tile"}),
    "AMX_INT8": frozenset({"amx_int8"}),
}
ARM_FLAGS: dict[str, frozenset[str]] = {
    "DOTPROD": frozenset({"asimddp"}),
    "FP16_VECTOR_ARITHMETIC": frozenset({"asimdhp"}),
    "SVE": frozenset({"sve"}),
    "MATMUL_INT8": frozenset({"i8mm"}),
    "SVE2": frozenset({"sve2"}),
    "SME": frozenset({"sme"}),
}


def named_features(flags: set[str], table: dict[str, frozenset[str]]) -> frozenset[str]:
    """The ggml features whose every flag the host lists."""
    return frozenset(name for name, needs in table.items() if needs <= flags)


def parse_cpuinfo(text: str, machine: str) -> CpuFeatures:
    """The features /proc/cpuinfo states for an x86-64 or ARM `machine`; UNKNOWN when it lists none."""
    kind = machine.lower()
    if kind not in _X86 and kind not in _ARM:
        return _other(machine)
    key = "flags" if kind in _X86 else "features"
    common: set[str] | None = None
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == key:
            found = set(value.split())
            common = found if common is None else common & found
    if not common:
        return UNKNOWN_CPU
    if kind in _X86:
        return CpuFeatures(CpuArch.X86_64, named_features(common, X86_FLAGS), CPUINFO)
    return CpuFeatures(CpuArch.ARM64, named_features(common, ARM_FLAGS), CPUINFO)


def _other(machine: str) -> CpuFeatures:
    """Neither x86-64 nor 64-bit ARM: no ggml CPU variant is built for it (unnamed: unknown)."""
    return CpuFeatures(CpuArch.OTHER, source=f"machine {machine}") if machine else UNKNOWN_CPU


def _sysctl(name: str) -> str | None:
    try:
        done = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


# Apple silicon's sysctl hw.optional.arm.FEAT_* flags, by ggml feature name
_DARWIN_ARM = {
    "DOTPROD": "FEAT_DotProd",
    "FP16_VECTOR_ARITHMETIC": "FEAT_FP16",
    "MATMUL_INT8": "FEAT_I8MM",
    "SME": "FEAT_SME",
}


def darwin_features(machine: str, sysctl: Callable[[str], str | None] = _sysctl) -> CpuFeatures:
    """macOS: Apple silicon's FEAT_* flags, an Intel Mac's CPUID feature words."""
    kind = machine.lower()
    if kind in _ARM:
        if sysctl("hw.optional.arm.FEAT_DotProd") is None:
            return UNKNOWN_CPU
        found = frozenset(f for f, flag in _DARWIN_ARM.items() if sysctl(f"hw.optional.arm.{flag}") == "1")
        return CpuFeatures(CpuArch.ARM64, found, "sysctl")
    if kind in _X86:
        words = [sysctl(f"machdep.cpu.{k}") for k in ("features", "leaf7_features")]
        if words[1] is None:
            return UNKNOWN_CPU
        flags = {w.lower().replace(".", "_") for text in words if text for w in text.split()}
        return CpuFeatures(CpuArch.X86_64, named_features(_darwin_x86(flags), X86_FLAGS), "sysctl")
    return _other(machine)


def _darwin_x86(flags: set[str]) -> set[str]:
    """An Intel Mac's CPUID words (AVX1_0, AVX2, AVX512F, AVX512VNNI...) spelt as Linux's cpuinfo flags."""
    renamed = {"avx1_0": "avx", "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16"}
    return {renamed.get(f, f) for f in flags}


@cache
def read_cpu_features() -> CpuFeatures:
    """The host's CPU features, read once; UNKNOWN where they cannot be read."""
    machine = platform.machine()
    system = platform.system()
    if system == "Darwin":
        return darwin_features(machine)
    if system != "Linux":
        return UNKNOWN_CPU
    try:
        with open(CPUINFO, encoding="utf-8", errors="replace") as f:
            text = f.read(_MAX_CPUINFO)
    except OSError:
        return UNKNOWN_CPU
    return parse_cpuinfo(text, machine)
