"""One reading of the visible NVIDIA GPUs' memory, from NVML (the nvidia-ml-py package).

Tests pass a stand-in module with the same functions; everything else uses `pynvml`.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

from memfit.estimator.machine import GpuMemory

__all__ = ["NvmlReader", "visible"]


def _nvml_library_present() -> bool:
    """Whether NVML's library can be loaded, as pynvml loads it on Linux (a dlopen of libnvidia-ml.so.1): where it
    cannot, pynvml (a hundredth of a second to import) would only fail. NVML has no macOS build; elsewhere pynvml
    looks for itself."""
    if sys.platform == "darwin":
        return False
    if not sys.platform.startswith("linux"):
        return True
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _load_pynvml() -> ModuleType | None:
    if not _nvml_library_present():
        return None
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def visible(index: int, uuid: str, selector: str | None) -> bool:
    """CUDA_VISIBLE_DEVICES semantics: unset shows all; otherwise a list of indices or UUID prefixes."""
    if selector is None:
        return True
    for item in (s.strip() for s in selector.split(",")):
        if not item:
            return False  # CUDA stops at the first empty or invalid entry
        if item.isdigit():
            if int(item) == index:
                return True
        elif uuid.startswith(item) or uuid.startswith("GPU-" + item):
            return True
    return False


class NvmlReader:
    """Reads GPU memory through NVML, initialising it once; a failed start means no GPU answers."""

    def __init__(self, nvml: ModuleType | None = None, environ: dict[str, str] | None = None) -> None:
        self._nvml = nvml
        self._environ = environ
        self._started: bool | None = None  # None until the first reading tries to start NVML

    def _start(self) -> bool:
        if self._started is None:
            self._nvml = self._nvml or _load_pynvml()
            try:
                self._started = self._nvml is not None and self._nvml.nvmlInit() is None
            except (getattr(self._nvml, "NVMLError", OSError), OSError):
                self._started = False
        return self._started

    def read(self) -> list[GpuMemory] | None:
        """The visible GPUs and their free/total memory; None when NVML is missing or fails."""
        if not self._start():
            return None
        nvml = self._nvml
        if nvml is None:
            return None
        selector = (os.environ if self._environ is None else self._environ).get("CUDA_VISIBLE_DEVICES")
        try:
            gpus = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                if visible(index, uuid, selector):
                    info = nvml.nvmlDeviceGetMemoryInfo(handle)
                    gpus.append(GpuMemory(index, uuid, int(info.free), int(info.total)))
            return gpus
        except nvml.NVMLError:
            return None
