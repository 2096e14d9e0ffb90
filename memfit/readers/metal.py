"""One reading of a Mac's Metal device memory, through PyObjC's Metal framework (pyobjc-framework-Metal, a
dependency on macOS only). Tests pass a stand-in module with the same functions; elsewhere it is never imported.

What llama.cpp's Metal backend plans against (ggml-metal-device.m, `ggml_metal_device_get_memory`): total =
the system default device's `recommendedMaxWorkingSetSize`, free = total - `currentAllocatedSize` (what this
process holds on the device: nothing in memfit's, so a fresh llama.cpp's view). The kernel's cap on wired GPU
memory, `iogpu.wired_limit_mb` (0 until someone sets it, e.g. `sudo sysctl iogpu.wired_limit_mb=57344` to give
a 64 GiB Mac's GPU 56 GiB), is what that working set follows once set; it is read here too (at most every 10 s),
so that a limit raised while memfit runs counts at once, and when set it is the total.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from memfit.estimator.machine import GpuBackend, GpuMemory

SYSCTL = "/usr/sbin/sysctl"
WIRED_LIMIT = "iogpu.wired_limit_mb"
WIRED_LIMIT_TTL_S = 10.0  # the sysctl is a process to start: read at most this often


def _load_metal() -> ModuleType | None:
    if sys.platform != "darwin":
        return None
    try:
        import Metal  # pyobjc-framework-Metal, on macOS only (it loads AppKit and the framework itself)
    except Exception:  # noqa: BLE001  # not installed (ImportError), or a framework that fails to load: as absent
        return None
    return Metal


def read_wired_limit_mb() -> int | None:
    """`sysctl -n iogpu.wired_limit_mb`: 0 when nobody has set it; None where it cannot be read (not macOS, an
    older macOS without it)."""
    if sys.platform != "darwin":
        return None
    try:
        done = subprocess.run([SYSCTL, "-n", WIRED_LIMIT], capture_output=True, text=True, timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        return int(done.stdout.strip()) if done.returncode == 0 else None
    except ValueError:
        return None


class MetalReader:
    """Reads the system default Metal device, creating it once; a failed start means no GPU answers."""

    def __init__(
        self,
        metal: ModuleType | Any | None = None,
        wired_limit_mb: Callable[[], int | None] = read_wired_limit_mb,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metal = metal
        self._device: Any = None
        self._started: bool | None = None  # None until the first reading tries to start Metal
        self._wired_limit_mb = wired_limit_mb
        self._clock = clock
        self._wired: tuple[float, int | None] | None = None  # (when read, MiB)

    def _start(self) -> bool:
        if self._started is None:
            self._metal = self._metal or _load_metal()
            try:
                self._device = self._metal.MTLCreateSystemDefaultDevice() if self._metal is not None else None
                self._started = self._metal is not None
            except Exception:  # noqa: BLE001  # PyObjC raises objc.error (and bridge errors): no answer, as a failed nvmlInit
                self._started = False
        return self._started

    def wired_limit_bytes(self) -> int | None:
        """iogpu.wired_limit_mb in bytes when it is set (non-zero), else None; read at most every 10 s."""
        now = self._clock()
        if self._wired is None or now - self._wired[0] >= WIRED_LIMIT_TTL_S:
            self._wired = (now, self._wired_limit_mb())
        mb = self._wired[1]
        return mb << 20 if mb else None

    def read(self) -> list[GpuMemory] | None:
        """The Metal device and its working set; [] when Metal has no device (llama.cpp runs on the CPU alone);
        None when Metal is missing or fails."""
        if not self._start():
            return None
        device = self._device
        if device is None:
            return []
        try:
            name = str(device.name())
            working_set = int(device.recommendedMaxWorkingSetSize())
            allocated = int(device.currentAllocatedSize())
            unified = bool(device.hasUnifiedMemory())
        except Exception:  # noqa: BLE001  # as in _start
            return None
        total = self.wired_limit_bytes() or working_set
        return [GpuMemory(0, f"metal:{name}", max(0, total - allocated), total, unified, GpuBackend.METAL)]
