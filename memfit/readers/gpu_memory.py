"""One reading of GPU memory, whichever library feeds it: NVML on NVIDIA GPUs (memfit.readers.nvml), Metal on a
Mac (memfit.readers.metal), or the GPUs a user declared (memfit.readers.declared_gpus). The estimator places a model
on them (estimator/device_forecast.py); it never asks where they came from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memfit.estimator.machine import GpuMemory


class GpuReader(Protocol):
    def read(self) -> list[GpuMemory] | None:
        """The GPUs a llama.cpp started now would use, and their memory; None when it cannot be known."""
        ...


class FirstGpuReading:
    """The first reader that answers (a list, empty or not): NVML where its driver is, else Metal, else None."""

    def __init__(self, readers: Sequence[GpuReader]) -> None:
        self.readers = tuple(readers)

    def read(self) -> list[GpuMemory] | None:
        for reader in self.readers:
            gpus = reader.read()
            if gpus is not None:
                return gpus
        return None
