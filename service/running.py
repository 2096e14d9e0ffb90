"""The llama-servers running on this host, as the service uses them: which local model each has loaded (GET
/v1/models' `loadedBy`) and the one a fit under the `running` profile takes its settings from."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace

from memfit.estimator.fit_types import ModelEntry
from memfit.estimator.server_args import RunningServer, running_for
from memfit.estimator.vocabulary import ModelSource
from memfit.service.index import ModelIndex

ReadRunning = Callable[[], Sequence[RunningServer]]


def model_file(index: ModelIndex, model_id: str) -> tuple[int, int] | None:
    """The (device, inode) of a local model's first file: as the index last saw it, else as it is now."""
    artifact = index.get(model_id)
    if artifact is None:
        return None
    seen = index.file_identities(artifact)
    if seen and seen[0] is not None:
        return seen[0][0], seen[0][1]
    try:
        st = os.stat(artifact.paths[0])
    except OSError:
        return None
    return st.st_dev, st.st_ino


def server_for(index: ModelIndex, servers: Sequence[RunningServer], model_id: str) -> RunningServer | None:
    """The running llama-server that has the local model `model_id` loaded, if one does."""
    return running_for(servers, model_file(index, model_id)) if servers else None


class LoadedMarks:
    """The listing with each local model a running llama-server has loaded marked (`loaded_by`); the marked
    listing is kept while neither the listing nor the servers moved."""

    def __init__(self, index: ModelIndex, read_running: ReadRunning) -> None:
        self.index = index
        self.read_running = read_running
        self._kept: tuple[tuple[ModelEntry, ...], tuple, tuple[ModelEntry, ...]] | None = None

    def marked(self, entries: tuple[ModelEntry, ...]) -> tuple[ModelEntry, ...]:
        servers = tuple(self.read_running())
        key = tuple((s.pid, s.port, s.model_file) for s in servers if s.model_file is not None)
        if not key:
            return entries
        kept = self._kept
        if kept is not None and kept[0] is entries and kept[1] == key:
            return kept[2]
        marked = tuple(self._mark(e, servers) for e in entries)
        self._kept = (entries, key, marked)
        return marked

    def _mark(self, entry: ModelEntry, servers: Sequence[RunningServer]) -> ModelEntry:
        if entry.source is not ModelSource.LOCAL:
            return entry
        identity = model_file(self.index, entry.model_id)
        if identity is None:
            return entry
        holding = sorted((s for s in servers if s.loaded(identity)), key=lambda s: (s.port or 0, s.pid))
        return replace(entry, loaded_by=tuple((s.pid, s.port) for s in holding)) if holding else entry
