"""One reading of the host's memory, from psutil."""

from __future__ import annotations

import psutil

from memfit.estimator.machine import HostMemory


def read_host_memory() -> HostMemory:
    try:
        vm = psutil.virtual_memory()
    except (OSError, RuntimeError, psutil.Error):
        return HostMemory(None, None)
    return HostMemory(available=int(vm.available), total=int(vm.total))
