"""GET /v1/models' listing: local artifacts in index order, the models answered from the Hub before, then catalog
entries not on disk; a maintained view, derived again only when what it shows moved."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from importlib import resources

from memfit.estimator.errors import EvidenceError
from memfit.estimator.fit_types import ModelEntry
from memfit.estimator.model_ids import hub_id
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import ModelSource
from memfit.readers.model_roots import LocalArtifact
from memfit.service.subjects import Subjects, local_subject

READ_SECONDS = 1.0  # how long a request's listing reads headers the index's thread has not read yet,
READ_AT_MOST = 256  # when there are at most this many (a second's reading); more are all listed as being read
STORED_AT_ONCE = 4096  # listing entries the index's thread derives before it stores them, in one transaction
REQUEST_FIRST_S = 10.0  # the most the index's thread waits for a request's listing before it reads on
DERIVED_BY = ("memfit.estimator", "memfit.readers", "memfit.service")  # the code a stored entry was derived by,
DERIVED_WITH = ("gguf_constants.py", "integers.py", "quant_names.py")  # and memfit's own modules that code imports


class Listing:
    """The known models, and the index's warming of the facts they are listed with."""

    def __init__(self, subjects: Subjects) -> None:
        self.subjects = subjects
        self._listing: tuple[tuple[int, int, int, bool], tuple[ModelEntry, ...]] | None = None
        self._lock = threading.Lock()
        self.built = 0  # work counted: how often the listing was derived
        self._local_entries: dict[tuple, ModelEntry] = {}  # (artifact, file identities) -> its listing entry
        self._catalog_weights: dict[str, int] | None = None  # catalog id -> its weights' floor, once weighed
        self._no_request = threading.Event()  # clear while a request derives the listing: warming waits
        self._no_request.set()

    def warm(self, artifacts: Sequence[LocalArtifact]) -> None:
        """Read the facts of these artifacts and their projectors, where not yet cached (called by the index's
        thread with what a change made new), and derive each one's listing entry while its facts are in memory
        (the facts cache holds the last FACTS_KEPT only: a listing derived after would read the others again),
        then build the listing, so that requests find both ready."""
        s = self.subjects
        self._reserve(s.index.artifacts())
        derived: dict[str, str] = {}
        for artifact in artifacts:
            for paths in (artifact.paths, (artifact.projector,) if artifact.projector else ()):
                if paths:
                    # a request's listing first: the two shared the GIL, and the first listing of 50,000 took twice
                    # its own time while this thread read on
                    self._no_request.wait(REQUEST_FIRST_S)
                    try:
                        s.cache.facts(paths)
                    except EvidenceError:  # answered (and cached) as unreadable; a request says why
                        pass
            self._keep_entry(artifact, derived)
            if len(derived) >= STORED_AT_ONCE:
                self._store(derived)
        self._store(derived)
        self.weigh_catalog(rest=time.sleep)
        self.models(read_for=None)

    def _keep_entry(self, artifact: LocalArtifact, derived: dict[str, str]) -> None:
        """Derive and keep the listing entry of an artifact the index serves (its facts just read), unless one is
        kept for its files as the index saw them; one derived is added to `derived` for the store."""
        seen = self.subjects.index.file_identities(artifact)
        if seen is None:  # not served (any more)
            return
        key = (artifact, seen)
        if key in self._local_entries:
            return
        self._no_request.wait(REQUEST_FIRST_S)
        entry = self._read_entry(artifact, key, derived)
        if entry is not None and entry.unreadable is None:
            with self._lock:
                self._local_entries[key] = entry

    def _store(self, derived: dict[str, str]) -> None:
        """Store the entries derived (and forget them here)."""
        store = self.subjects.cache.store
        if store is not None and derived:
            store.put_listed(derived, _derivation())
        derived.clear()

    def weigh_catalog(self, rest: Callable[[float], object] | None = None) -> None:
        """The weights' floor of every catalog id on this host's CPU variants, computed once (a few ms an id: the
        index's thread does it, so a request never waits for it; an in-process listing calls it first). Only the
        numbers are kept, not the subjects (their layouts and tensor lists: about 60 MiB for the catalog).

        `rest(seconds)` is called after each id with the time it took: the index's thread sleeps as long, so that
        for the second or so this pure Python takes at start-up, the event loop's thread finds the GIL free half
        the time (in the first seconds of a server, `/health` took up to 164 ms while it ran at full speed; paced,
        at memfit.serving's switch interval, up to 43 ms)."""
        if self._catalog_weights is not None:
            return
        s, weights = self.subjects, {}
        for entry, quant in s.catalog.ids():
            started = time.perf_counter()
            model_id = f"{entry.model_id}:{quant}"
            part = s.catalog.weights(model_id, s.auto.variants)
            if part is not None and part.bytes is not None:
                weights[model_id] = part.bytes
            if rest is not None:
                rest(time.perf_counter() - started)
        self._catalog_weights = weights

    def _reserve(self, artifacts: Sequence[LocalArtifact]) -> None:
        self.subjects.cache.reserve(len(artifacts) + len({a.projector for a in artifacts if a.projector}))

    def models(self, read_for: float | None = READ_SECONDS) -> tuple[ModelEntry, ...]:
        """Local artifacts in index order (roots in order, then by id), then the models answered from the Hub
        before, then catalog entries not on disk, by id. GGUFs that are not models (adapters, vocabulary-only
        files) are left out.

        Headers not read yet (just after start-up, the index's thread reading thousands) are read for at most
        `read_for` seconds (None: all of them), and only when there are at most READ_AT_MOST; the artifacts left
        are listed as still being read, and such a listing is not kept: the next one reads on, and the index's
        thread's own is whole.

        A maintained view: derived again only when the index moved (a rescan, a file changed in place), new facts
        were cached or a Hub model recorded; otherwise the same tuple is returned, at no cost per model."""
        key = self._key()
        listing = self._listing
        if listing is not None and listing[0] == key:
            return listing[1]
        with self._lock:
            listing = self._listing
            key = self._key()
            if listing is not None and listing[0] == key:
                return listing[1]
            if read_for is not None:  # a request's
                self._no_request.clear()
            try:
                entries = self._derive(None if read_for is None else time.monotonic() + read_for)
            finally:
                self._no_request.set()
            self.built += 1
            if not any(e.reading for e in entries):
                self._listing = (key, entries)  # the key taken before deriving: facts read meanwhile move it again
            return entries

    def _key(self) -> tuple[int, int, int, bool]:
        s = self.subjects
        weighed = self._catalog_weights is not None
        return s.index.generation, s.cache.version, s.hub.version if s.hub is not None else 0, weighed

    def _derive(self, deadline: float | None) -> tuple[ModelEntry, ...]:
        """The listing; a local artifact's entry is taken from the last listing while the index saw its files
        unchanged, so a change costs what it changed (an unreadable one is always read again). Past `deadline`,
        an artifact whose facts are not in memory is listed as being read, not read."""
        s = self.subjects
        artifacts = s.index.artifacts()
        self._reserve(artifacts)
        known, self._local_entries = self._local_entries, {}
        keys = {a: None if (seen := s.index.file_identities(a)) is None else (a, seen) for a in artifacts}
        unheld = {a for a, key in keys.items() if key not in known and not self._held(a, key)}
        store_keys = {a: _store_key(key) for a, key in keys.items() if a in unheld and key is not None}
        store = s.cache.store
        stored = store.listed(list(store_keys.values())) if store is not None else {}
        if deadline is not None and sum(store_keys.get(a, "") not in stored for a in unheld) > READ_AT_MOST:
            deadline = 0.0  # too many to read in the request's time: it reads none (50,000 took it 2.3 s)
        derived: dict[str, str] = {}
        entries = []
        for artifact in artifacts:
            key = keys[artifact]
            found = stored.get(store_keys.get(artifact, ""))
            before = known.get(key) if key is not None else None
            local = self._local(artifact, key, before, artifact not in unheld, deadline, found, derived)
            if local is not None:
                entries.append(local)
        self._store(derived)
        listed = {e.model_id.lower() for e in entries}
        for remote in self._hub_entries():
            if remote.model_id.lower() not in listed:
                listed.add(remote.model_id.lower())
                entries.append(remote)
        weighed = self._catalog_weights or {}
        for entry, quant in s.catalog.ids():
            model_id = f"{entry.model_id}:{quant}"
            if model_id.lower() not in listed and s.index.get(model_id) is None:
                entries.append(
                    ModelEntry(
                        model_id=model_id,
                        source=ModelSource.CATALOG,
                        root="",
                        architecture=entry.architecture,
                        quant=quant,
                        revision="",
                        artifact_bytes=None,
                        context_limit=entry.context_length,
                        has_projector=False,
                        weights_bytes=weighed.get(model_id),
                    )
                )
        return tuple(entries)

    def _local(
        self,
        artifact: LocalArtifact,
        key: tuple | None,
        known: ModelEntry | None,
        held: bool,
        deadline: float | None,
        stored: str | None,
        derived: dict[str, str],
    ) -> ModelEntry | None:
        """A local artifact's entry (None: not a model): the last listing's while the index saw its files unchanged,
        else, when its facts are not in memory, the one stored for those files (a restart), else read now, unless
        `deadline` has passed (then listed as being read). One derived now is added to `derived` for the store.
        `held`: whether it was listed before or its facts are in memory; `stored`: the store's entry for its files."""
        local: ModelEntry | bool | None = known
        if not held and key is not None:
            local = _stored_entry(artifact, stored)
            if local is False:  # stored as not a model
                return None
        if local is None and not held and deadline is not None and time.monotonic() >= deadline:
            return _being_read(artifact)
        if local is None:
            local = self._read_entry(artifact, key, derived)
            if local is None:
                return None
        assert isinstance(local, ModelEntry)
        if key is not None and local.unreadable is None:
            self._local_entries[key] = local
        return local

    def _read_entry(self, artifact: LocalArtifact, key: tuple | None, derived: dict[str, str]) -> ModelEntry | None:
        """A local artifact's entry from its facts, read where they are not in memory (None: not a model); added to
        `derived` for the store under `key`, the artifact and its files' identities as the index saw them."""
        s = self.subjects
        subject = local_subject(artifact, s.cache, s.auto.variants)
        if key is not None and (not subject.is_model or not subject.unreadable):  # what the header says
            derived[_store_key(key)] = _stored_text(subject if subject.is_model else False)
        if not subject.is_model:
            return None
        return ModelEntry(
            model_id=artifact.model_id,
            source=ModelSource.LOCAL,
            root=artifact.root,
            architecture=subject.architecture,
            quant=subject.quant,
            revision=artifact.revision,
            artifact_bytes=subject.artifact_bytes,
            context_limit=subject.context_limit,
            has_projector=artifact.projector is not None,
            unreadable=subject.unreadable or None,
        )

    def _held(self, artifact: LocalArtifact, key: tuple[LocalArtifact, tuple] | None) -> bool:
        """Whether the artifact's facts are in memory, judged by the identities the index took of its files (no
        stat of its own: a restart's listing of 10,000 files stat'ed each again)."""
        cache = self.subjects.cache
        # the index's identities: the model files', then the projector's (None without one)
        files, projector = (None, None) if key is None else (key[1][:-1], key[1][-1:])
        return cache.holds(artifact.paths, files) and (
            artifact.projector is None or cache.holds((artifact.projector,), projector)
        )

    def _hub_entries(self) -> list[ModelEntry]:
        """The models answered from the Hub before (by any process of this state directory), newest first."""
        hub = self.subjects.hub
        entries = []
        for e in hub.models() if hub is not None else ():
            limit = e.get("context_limit")
            entries.append(
                ModelEntry(
                    model_id=str(e.get("model_id", "")),
                    source=ModelSource.HUB,
                    root="",
                    architecture=str(e.get("architecture", "")),
                    quant=str(e.get("quant", "")),
                    revision=str(e.get("revision", "")),
                    artifact_bytes=None,
                    context_limit=limit if isinstance(limit, int) and limit >= 0 else None,
                    has_projector=e.get("has_projector") is True,
                )
            )
        return [e for e in entries if hub_id(e.model_id) is not None]


def _being_read(artifact: LocalArtifact) -> ModelEntry:
    """A local artifact whose header is still to be read: its id and where it is, nothing read from it."""
    return ModelEntry(
        model_id=artifact.model_id,
        source=ModelSource.LOCAL,
        root=artifact.root,
        architecture="",
        quant="",
        revision=artifact.revision,
        artifact_bytes=None,
        context_limit=None,
        has_projector=artifact.projector is not None,
        reading=True,
    )


@functools.cache
def _derivation() -> str:
    """A digest of the code that derives a listing entry from a file's header (its reader and the estimator): an
    entry stored by other code is derived again."""
    digest = hashlib.sha256()
    sources = [s for p in DERIVED_BY for s in sorted(resources.files(p).iterdir(), key=lambda s: s.name)]
    for source in [*sources, *(resources.files("memfit").joinpath(name) for name in DERIVED_WITH)]:
        if source.name.endswith(".py"):
            digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:16] + ":"


def _store_key(key: tuple) -> str:
    """The store's key of a listing entry: the code that derives it, the artifact and its files' identities as
    the index last saw them (what the in-memory entries are kept by)."""
    return _derivation() + hashlib.sha256(repr(key).encode()).hexdigest()


def _stored_text(subject: Subject | bool) -> str:
    """A listing entry's derived fields as the store keeps them (false: not a model)."""
    if isinstance(subject, bool):
        return "false"
    return json.dumps([subject.architecture, subject.quant, subject.artifact_bytes, subject.context_limit])


def _stored_entry(artifact: LocalArtifact, text: str | None) -> ModelEntry | bool | None:
    """The listing entry stored for `artifact` (False: stored as not a model; None: none stored, or unusable)."""
    try:
        stored = json.loads(text) if text is not None else None
    except ValueError:
        return None
    if stored is False:
        return False
    if not (isinstance(stored, list) and len(stored) == 4):
        return None
    architecture, quant, artifact_bytes, context_limit = stored
    return ModelEntry(
        model_id=artifact.model_id,
        source=ModelSource.LOCAL,
        root=artifact.root,
        architecture=str(architecture),
        quant=str(quant),
        revision=artifact.revision,
        artifact_bytes=artifact_bytes if isinstance(artifact_bytes, int) else None,
        context_limit=context_limit if isinstance(context_limit, int) else None,
        has_projector=artifact.projector is not None,
    )
