"""One reading of the host's memory, from psutil."""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostMemory:
    available: int | None  # what a new allocation could claim now
    total: int | None  # the physical ceiling


def read_host_memory() -> HostMemory:
    try:
        vm = psutil.virtual_memory()
    except (OSError, RuntimeError, psutil.Error):
        return HostMemory(None, None)
    return HostMemory(available=int(vm.available), total=int(vm.total))
