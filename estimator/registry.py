"""The index of local model artifacts: built off the request path, refreshed when a directory changes."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

from memfit.quant_names import DEFAULT_QUANT
from memfit.readers.model_roots import LocalArtifact, Root, RootKind, scan

log = logging.getLogger("memfit.index")


def _directory_signature(roots: Sequence[Root]) -> tuple[tuple[str, int], ...]:
    """Every directory under the roots with its mtime: a file added, removed or renamed changes it."""
    seen = []
    for root in roots:
        for directory, dirs, _ in os.walk(root.path, followlinks=False):
            dirs.sort()
            try:
                seen.append((directory, os.stat(directory).st_mtime_ns))
            except OSError:
                continue
    return tuple(seen)


def _key(model_id: str) -> str:
    """Ids match case-insensitively in their `:QUANT` suffix, exactly elsewhere."""
    base, sep, quant = model_id.rpartition(":")
    return f"{base}:{quant.upper()}" if sep else model_id


def index_by_id(artifacts: Sequence[LocalArtifact]) -> dict[str, LocalArtifact]:
    """Ids to artifacts; an earlier root wins a shared id, and a repo named without a tag means its
    Q4_K_M, or its only artifact (an Ollama model's `latest` first, as Ollama reads a name without a tag)."""
    by_id: dict[str, LocalArtifact] = {}
    by_repo: dict[str, list[LocalArtifact]] = {}
    for artifact in artifacts:
        by_id.setdefault(_key(artifact.model_id), artifact)
        repo, sep, _ = artifact.model_id.rpartition(":")
        if sep:
            by_repo.setdefault(repo, []).append(artifact)
    for repo, tagged in by_repo.items():
        default = by_id.get(f"{repo}:LATEST") if tagged[0].kind is RootKind.OLLAMA else None
        default = default or by_id.get(f"{repo}:{DEFAULT_QUANT}")
        if default is None and len({a.model_id for a in tagged}) == 1:
            default = tagged[0]
        if default is not None:
            by_id.setdefault(repo, default)
    return by_id


def _file_identities(artifacts: Sequence[LocalArtifact]) -> tuple:
    """The stat identity of every file the index serves (model files and projectors): a file replaced, grown or
    touched in place (no directory changes) changes it."""
    seen = []
    for artifact in artifacts:
        for path in (*artifact.paths, artifact.projector or ""):
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            seen.append(None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(seen)


class ModelIndex:
    """Local artifacts by id. `refresh` rescans only when a directory under a root changed.

    `generation` moves whenever what the index serves changes: a rescan that found another set of artifacts, or
    (with `check_files`) a file of one replaced, grown or touched in place. Views derived from the index (the
    model listing) are rebuilt only when it moves. `warm`, when set, is called with the artifacts by the
    index's own thread after each change it saw (the facts are read there, off the request path)."""

    def __init__(self, roots: Sequence[Root], poll_seconds: float = 2.0) -> None:
        self.roots = tuple(Root(os.path.abspath(r.path), r.kind) for r in roots)  # a missing one may appear later
        self.poll_seconds = poll_seconds
        self.generation = 0
        self.scans = 0  # rescans done (work counted, for tests and benchmarks)
        self.warm: Callable[[tuple[LocalArtifact, ...]], None] | None = None
        self._signature: tuple = ()
        self._identities: tuple = ()
        self._by_id: dict[str, LocalArtifact] = {}
        self._ordered: tuple[LocalArtifact, ...] = ()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self, check_files: bool = False) -> bool:
        """Rescan when anything under the roots changed; True when the index was rebuilt. With `check_files`, a
        served file changed in place also moves `generation` (and returns True), without a rescan."""
        with self._lock:
            signature = _directory_signature(self.roots)
            if signature == self._signature:
                if not check_files:
                    return False
                identities = _file_identities(self._ordered)
                if identities == self._identities:
                    return False
                self._identities = identities
                self.generation += 1
                return True
            ordered = []
            for root in self.roots:
                try:
                    ordered.extend(sorted(scan(root), key=lambda a: a.model_id))
                except Exception:  # noqa: BLE001 - a root that cannot be scanned must not stop the others
                    log.exception("scanning %s failed", root.path)
            self._by_id, self._ordered, self._signature = index_by_id(ordered), tuple(ordered), signature
            self._identities = _file_identities(self._ordered) if check_files else ()
            self.generation += 1
            self.scans += 1
            log.info("indexed %d local artifacts under %d roots", len(ordered), len(self.roots))
            return True

    def get(self, model_id: str) -> LocalArtifact | None:
        return self._by_id.get(_key(model_id))

    def artifacts(self) -> tuple[LocalArtifact, ...]:
        return self._ordered

    def start(self) -> None:
        """Index now, then keep the index fresh (and the facts of new files read) from a background thread."""
        self.refresh(check_files=True)
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="memfit-index", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _warm(self) -> None:
        if self.warm is not None:
            try:
                self.warm(self._ordered)
            except Exception:  # noqa: BLE001 - warming is an optimisation: requests read what it missed
                log.exception("reading the headers of new files failed")

    def _run(self) -> None:
        self._warm()
        while not self._stop.wait(self.poll_seconds):
            try:
                changed = self.refresh(check_files=True)
            except Exception:  # noqa: BLE001 - the index must keep refreshing whatever one pass met
                log.exception("index refresh failed")
                continue
            if changed:
                self._warm()
