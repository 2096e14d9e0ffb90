"""The host CPU's family, as far as it decides which kernels llama.cpp's CPU backend uses.

Read once per process: Linux's /proc/cpuinfo (x86 `flags`, ARM `Features`; a feature counts only when every
processor lists it), else on macOS a cheap sysctl. Anything that cannot be read or recognised is UNKNOWN.
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import cache

CPUINFO = "/proc/cpuinfo"
_X86 = {"x86_64", "amd64", "x64"}
_ARM = {"aarch64", "arm64"}
_RISCV = {"riscv64"}  # ggml repacks there with the zvfh extension at some vector lengths: not modelled
_MAX_CPUINFO = 4 << 20  # /proc/cpuinfo of a large machine is well under this
# The compile-time features ggml's x86 kernels test (__AVX2__, __AVX512F__, __AMX_INT8__ && __AVX512VNNI__).
_AMX = {"avx512f", "avx512_vnni", "amx_int8", "amx_tile"}


class CpuFamily(Enum):
    X86_BASIC = "x86-64 without AVX2"
    X86_AVX2 = "x86-64 AVX2"
    X86_AVX512 = "x86-64 AVX-512"
    X86_AMX = "x86-64 AMX"
    ARM_NEON = "ARM NEON without dotprod"
    ARM_DOTPROD = "ARM NEON dotprod"
    ARM_I8MM = "ARM NEON i8mm"
    OTHER = "other architecture"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class CpuFeatures:
    family: CpuFamily
    source: str = ""  # where the fact came from, for notes and logs


UNKNOWN_CPU = CpuFeatures(CpuFamily.UNKNOWN)


def x86_family(flags: set[str]) -> CpuFamily:
    if "avx2" not in flags:
        return CpuFamily.X86_BASIC
    if _AMX <= flags:
        return CpuFamily.X86_AMX
    return CpuFamily.X86_AVX512 if "avx512f" in flags else CpuFamily.X86_AVX2


def arm_family(features: set[str]) -> CpuFamily:
    if "asimd" not in features and "neon" not in features:
        return CpuFamily.OTHER  # no NEON: none of ggml's ARM kernels run
    if "asimddp" not in features:
        return CpuFamily.UNKNOWN if "i8mm" in features else CpuFamily.ARM_NEON  # i8mm alone: not modelled
    return CpuFamily.ARM_I8MM if "i8mm" in features else CpuFamily.ARM_DOTPROD


def parse_cpuinfo(text: str, machine: str) -> CpuFeatures:
    """The family /proc/cpuinfo states for an x86-64 or ARM `machine`; UNKNOWN when it lists no features."""
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
    family = x86_family(common) if kind in _X86 else arm_family(common)
    return CpuFeatures(family, CPUINFO)


def _other(machine: str) -> CpuFeatures:
    """Neither x86-64 nor 64-bit ARM: ggml's CPU backend repacks nothing, except where it is not modelled."""
    kind = machine.lower()
    if not kind or kind in _RISCV or kind.startswith(("i", "arm")):  # unnamed, RISC-V, 32-bit x86 or ARM
        return UNKNOWN_CPU
    return CpuFeatures(CpuFamily.OTHER, f"machine {machine}")


def _sysctl(name: str) -> str | None:
    try:
        done = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def darwin_features(machine: str, sysctl: Callable[[str], str | None] = _sysctl) -> CpuFeatures:
    """macOS: Apple silicon's FEAT_* flags, an Intel Mac's leaf-7 features."""
    kind = machine.lower()
    if kind in _ARM:
        dotprod = sysctl("hw.optional.arm.FEAT_DotProd")
        if dotprod is None:
            return UNKNOWN_CPU
        i8mm = sysctl("hw.optional.arm.FEAT_I8MM") == "1"
        features = {"asimd"} | ({"asimddp"} if dotprod == "1" else set()) | ({"i8mm"} if i8mm else set())
        return CpuFeatures(arm_family(features), "sysctl")
    if kind in _X86:
        leaf7 = sysctl("machdep.cpu.leaf7_features")
        if leaf7 is None:
            return UNKNOWN_CPU
        words = {w.lower().replace(".", "").replace("_", "") for w in leaf7.split()}
        flags = {f for f in ("avx2", *_AMX) if f.replace("_", "") in words}
        return CpuFeatures(x86_family(flags), "sysctl")
    return _other(machine)


@cache
def read_cpu_features() -> CpuFeatures:
    """The host's CPU family, read once; UNKNOWN where it cannot be read."""
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
