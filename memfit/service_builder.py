"""The one place the fit service is put together: for the server, the CLI, the benchmarks and the tests."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import cache

from memfit.estimator.catalog import Catalog
from memfit.estimator.machine import CpuFeatures, HostMemory
from memfit.readers.catalog_file import load_catalog_file
from memfit.readers.cpu_features import read_cpu_features
from memfit.readers.engines import EngineScanner, ollama_environment
from memfit.readers.gpu_memory import FirstGpuReading, GpuReader
from memfit.readers.header_store import HeaderStore
from memfit.readers.history_db import HistoryDB, UnopenedHistoryDB
from memfit.readers.host_memory import read_host_memory
from memfit.readers.hub import HubModels, HubSettings
from memfit.readers.llama_servers import LlamaServers
from memfit.readers.metal import MetalReader
from memfit.readers.model_roots import Root
from memfit.readers.nvml import NvmlReader
from memfit.readers.state_health import StateFileError, StateHealth
from memfit.service.answers import Settings
from memfit.service.artifact_cache import ArtifactCache
from memfit.service.fit_service import FitService
from memfit.service.history import History
from memfit.service.index import FALLBACK_POLL_SECONDS, ModelIndex
from memfit.service.running import ReadRunning

HISTORY_FILE = "history.sqlite3"  # the measurement history, in the state directory
HEADERS_FILE = "headers.sqlite3"  # parsed header summaries, in the state directory


def build_service(
    roots: Sequence[Root] = (),
    *,
    state_dir: str | None = None,
    settings: Settings | None = None,
    read_host: Callable[[], HostMemory] = read_host_memory,
    read_cpu: Callable[[], CpuFeatures] = read_cpu_features,
    nvml: GpuReader | None = None,
    metal: GpuReader | None = None,
    read_committed: Callable[[], int | None] | None = None,
    read_ollama_env: Callable[[], Mapping[str, str] | None] | None = None,
    read_running: ReadRunning | None = None,
    poll_seconds: float = FALLBACK_POLL_SECONDS,
    index: ModelIndex | None = None,
    history_required: bool = True,
    hub: HubSettings | None = None,
) -> FitService:
    """A fit service over the model roots. With a state directory, header summaries persist across restarts and
    observations are recorded there; without one, nothing outlives the process and observations are refused.
    The host, CPU, GPU (NVML, then Metal), process-table and llama-server readers default to the real ones (the CPU
    is read once, here); the GPUs are those of the first GPU reader that answers;
    `index` replaces the index of `roots`. With `hub`, an id that names no local file is looked up on the Hugging Face
    Hub (its headers cached in the state directory's header cache); without, never.

    A header cache that cannot be read is moved aside and made anew (or, failing that, not used); a measurement
    history that cannot be opened raises state_health.StateFileError, which names the file and the fix, unless
    `history_required` is False (a `--workers` worker, which must serve): then the service is degraded without it
    (history_db.UnopenedHistoryDB)."""
    state = StateHealth()
    store = HeaderStore(os.path.join(state_dir, HEADERS_FILE), state) if state_dir is not None else None
    history_db = _history_db(os.path.join(state_dir, HISTORY_FILE), history_required) if state_dir is not None else None
    return FitService(
        index=index if index is not None else ModelIndex(roots, poll_seconds=poll_seconds),
        cache=ArtifactCache(store=store),
        settings=settings or Settings(),
        read_host=read_host,
        gpus=FirstGpuReading(
            [nvml if nvml is not None else NvmlReader(), metal if metal is not None else MetalReader()]
        ),
        catalog=bundled_catalog(),
        history=History(history_db),
        read_committed=read_committed or EngineScanner().committed_bytes,
        cpu=read_cpu(),
        read_ollama_env=read_ollama_env or ollama_environment,
        read_running=read_running or LlamaServers().read,
        state=state,
        hub=HubModels(hub, store) if hub is not None else None,
    )


@cache
def bundled_catalog() -> Catalog:
    """The bundled catalog, one per process: what it derives for an entry (its subjects) is kept for every
    service the process builds (the CLI's, each test's)."""
    return Catalog(load_catalog_file())


def _history_db(path: str, required: bool) -> HistoryDB:
    try:
        return HistoryDB(path)
    except StateFileError as exc:
        if required:
            raise
        return UnopenedHistoryDB(exc)
