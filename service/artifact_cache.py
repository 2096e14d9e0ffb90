"""Facts of GGUF file sets, read once per file identity (device, inode, size, mtime_ns).

A file replaced, grown or touched has a new identity and is read again; an unchanged one is never re-read
while it is cached: in memory (a bounded LRU of facts), and, with a store, across restarts (header summaries
in the state directory). The facts of the FACTS_KEPT file sets used last are held in memory; an older one's are
derived again from its stored summary (or its header) when asked.
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import BinaryIO, NamedTuple

from memfit.estimator.artifact import ArtifactFacts, HeaderSummary, artifact_facts, padded, summarize
from memfit.estimator.errors import EvidenceError, NotAModel
from memfit.estimator.placement import PlacementUnsupported, model_tensors
from memfit.estimator.vocabulary import Limit
from memfit.gguf_constants import GGUFType, Keys
from memfit.readers.gguf_header import GGUFError, GGUFHeader, read_header
from memfit.readers.header_store import HeaderStore, dumps, loads
from memfit.readers.regular_files import open_regular


class FileIdentity(NamedTuple):
    """What makes a file the same file: a replaced, grown, touched or rewritten one (ctime moves even when the
    mtime is restored) has a new identity."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


# The facts (layout, tensor list) held in memory, least recently used dropped first: a small header's take about
# 15 KiB, a 32-layer model's several times that; every model held was most of a server's memory at 50,000 models
# (868-930 MiB). The listing keeps its own entries, so it never needs the facts of a model it has listed.
FACTS_KEPT = 1024
HEAD_BYTES = 4096  # a stored summary is checked against the digest of its file's first bytes before it is used
# The checks a stored summary passed (summarize's) and its tensor fields (3: each tensor's shape): a row stored
# by a release that checked or kept less is read again.
SUMMARY_CHECKS = "checks-3"


class FileChanged(OSError):
    """The file at a path is no longer the one whose identity was taken (renamed or replaced meanwhile)."""


@dataclass(frozen=True)
class Unreadable:
    """Why a file set could not be read: cached as plain values, raised as a fresh error each time (a cached
    exception would collect a traceback per raise)."""

    limit: Limit
    message: str
    kind: str = ""  # for a GGUF that is not a model (NotAModel): what it is


def identity_of(st: os.stat_result) -> FileIdentity:
    return FileIdentity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_identity(path: str) -> FileIdentity:
    return identity_of(os.stat(path))


def _head_digest(f: BinaryIO) -> str:
    f.seek(0)
    return f"{SUMMARY_CHECKS}:{hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()}"


class ArtifactCache:
    """A bounded LRU of ArtifactFacts keyed by the identities of a file set (and of the tensor bytes of single
    files of any kind, such as LoRA adapters).

    The facts themselves are bounded by `facts_kept`, the least recently used dropped first (read again, from the
    store when it has their summary, when asked again). The small answers (why a file set cannot be read, a file's
    tensor bytes) are bounded by `capacity`, which grows with what the index serves (`reserve`, called when it
    changes), so a listing never reads an unreadable file again to say why. A file set is read once however many
    threads ask for it at once (single flight per identity: the others wait for the one read). `version` moves
    whenever new facts are cached (not when dropped ones are read again: a listing kept needs none of them);
    `reads` counts the reads (work done, for tests and benchmarks); `hits` and `misses` count the lookups
    answered from memory and those that were not, for /metrics."""

    def __init__(self, capacity: int = 4096, store: HeaderStore | None = None, facts_kept: int = FACTS_KEPT) -> None:
        self.capacity = capacity
        self.facts_kept = facts_kept
        self.store = store
        self.version = 0
        self.cleared = 0  # moves with each `clear`: what was derived from the facts is forgotten with them
        self.reads = 0
        self.hits = 0
        self.misses = 0
        self._facts: OrderedDict[tuple, ArtifactFacts] = OrderedDict()  # bounded by facts_kept
        self._entries: OrderedDict[tuple, Unreadable | int] = OrderedDict()  # bounded by capacity
        self._dropped: set[int] = set()  # the hashes of the keys whose facts were dropped (at most `capacity`)
        self._inflight: dict[tuple, threading.Event] = {}
        self._lock = threading.Lock()

    def reserve(self, file_sets: int) -> None:
        """Hold at least twice `file_sets` small answers (the served ones and as many replaced since): never
        fewer."""
        with self._lock:
            self.capacity = max(self.capacity, 2 * file_sets)

    def clear(self) -> None:
        """Forget every fact held in memory (the store, if any, keeps its summaries)."""
        with self._lock:
            self._facts.clear()
            self._entries.clear()
            self._dropped.clear()
            self.cleared += 1

    def identity(self, paths: Sequence[str]) -> tuple[FileIdentity, ...]:
        try:
            return tuple(file_identity(p) for p in paths)
        except OSError as exc:
            raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"cannot stat the artifact: {exc.strerror}") from exc

    def holds(self, paths: Sequence[str], seen: Sequence[tuple | None] | None = None) -> bool:
        """Whether the facts of the file set at `paths` are answered from memory: a stat per file, never a header
        read (a file that cannot be stat'ed is answered at once too, as unreadable). `seen`: the files'
        identities as a scan just took them (identity_of's fields, None for a file it could not stat), used
        instead of a stat each: equal to FileIdentity's, they find the same entries."""
        if seen is None:
            try:
                key: tuple = self.identity(paths)
            except EvidenceError:
                return True
        elif None in seen:
            return True
        else:
            key = tuple(seen)
        with self._lock:
            return key in self._facts or key in self._entries

    def facts(self, paths: Sequence[str], identity: tuple[FileIdentity, ...] | None = None) -> ArtifactFacts:
        """The facts of the file set at `paths`; EvidenceError (artifactUnreadable) when it cannot be read."""
        key = identity or self.identity(paths)
        cached = self._cached(key, lambda: self._read(paths, key))
        assert not isinstance(cached, int)
        return cached

    def tensor_bytes(self, path: str, identity: FileIdentity | None = None, kind: str | None = None) -> int:
        """The tensor bytes of one GGUF, each padded as llama.cpp allocates it (a LoRA adapter's, loaded beside a
        model's weights); EvidenceError (artifactUnreadable) when it cannot be read, or when `kind` is given and
        its `general.type` is another (a model's weights named as an adapter)."""
        identity = identity or self.identity((path,))[0]
        cached = self._cached(("tensors", identity, kind), lambda: self._read_tensor_bytes(path, identity, kind))
        assert isinstance(cached, int)
        return cached

    def _cached(self, key: tuple, read: Callable[[], ArtifactFacts | Unreadable | int]) -> ArtifactFacts | int:
        reading: threading.Event | None = None
        counted = False
        while True:
            with self._lock:
                held: OrderedDict = self._facts
                cached = held.get(key)
                if cached is None:
                    held = self._entries
                    cached = held.get(key)
                if cached is not None:
                    held.move_to_end(key)
                    self.hits += 0 if counted else 1
                    break
                if not counted:
                    self.misses += 1
                    counted = True
                reading = self._inflight.get(key)
                if reading is None:
                    reading = self._inflight[key] = threading.Event()
                    self.reads += 1
                    break
            reading.wait()  # another thread reads this file: its result is cached when it is done
            reading = None
        if cached is None:
            try:
                cached = read()
            except OSError as exc:  # not cached: a permission or I/O failure may pass
                raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"cannot read the artifact: {exc.strerror}") from exc
            else:
                with self._lock:
                    if isinstance(cached, ArtifactFacts):
                        self._keep_facts(key, cached)
                    else:
                        self.version += 1
                        self._entries[key] = cached
                        while len(self._entries) > self.capacity:
                            self._entries.popitem(last=False)
            finally:
                with self._lock:
                    self._inflight.pop(key, None)
                if reading is not None:
                    reading.set()
        if isinstance(cached, Unreadable):
            if cached.kind:
                raise NotAModel(cached.kind, cached.message)
            raise EvidenceError(cached.limit, cached.message)
        return cached

    def _keep_facts(self, key: tuple, facts: ArtifactFacts) -> None:
        """Hold facts just read, dropping the least recently used past `facts_kept` (under the lock). Facts read
        again after they were dropped do not move `version`: what was derived from them (a listing's entries) holds.
        """
        self._facts[key] = facts
        dropped = self._dropped
        if hash(key) in dropped:
            dropped.discard(hash(key))
        else:
            self.version += 1
        while len(self._facts) > self.facts_kept:
            if len(dropped) >= self.capacity:  # files replaced many times over: forget (re-reads move `version`)
                dropped.clear()
            dropped.add(hash(self._facts.popitem(last=False)[0]))

    def _summary(self, path: str, identity: FileIdentity) -> HeaderSummary:
        """The header summary of the file whose identity was taken: read through one descriptor whose fstat must
        still be that identity (a file renamed or replaced meanwhile is never cached under another's identity),
        from the store when a row there matches the file's first bytes (a row that does not is dropped)."""
        stored_key, store = "/".join(map(str, identity)), self.store
        with open_regular(path) as f:
            if identity_of(os.fstat(f.fileno())) != identity:
                raise FileChanged(errno.ESTALE, "the file changed while it was read")
            head = _head_digest(f)
            stored = store.get(stored_key) if store is not None else None
            if store is not None and stored is not None:
                metadata, tensors, stored_head = loads(stored)
                if stored_head == head:
                    return HeaderSummary(metadata, tensors)
                store.delete(stored_key)
            summary = summarize(read_header(f))
        if store is not None:
            store.put(stored_key, dumps(summary.metadata, summary.tensors, head))
        return summary

    def _read_tensor_bytes(self, path: str, identity: FileIdentity, kind: str | None) -> int | Unreadable:
        try:
            summary = self._summary(path, identity)
            found = summary.metadata.get(Keys.General.TYPE, GGUFType.MODEL)  # llama.cpp's default
            if kind is not None and found != kind:
                return Unreadable(
                    Limit.ARTIFACT_UNREADABLE,
                    f"a GGUF of {Keys.General.TYPE} {found!r}, not {kind!r}: not loaded as one",
                )
            return sum(padded(t[1]) for t in summary.tensors)
        except GGUFError as exc:
            return Unreadable(Limit.ARTIFACT_UNREADABLE, f"not a readable GGUF file: {exc}")
        except EvidenceError as exc:
            return Unreadable(exc.limit, str(exc))

    def header_facts(self, key: tuple, headers: Sequence[GGUFHeader | str], file_name: str) -> ArtifactFacts:
        """The facts of a file set read elsewhere (a repository of the Hub): `headers` its files' headers, first
        split first (a string says why a file's could not be read), cached by `key`, which names the file set (its
        files' ETags at a commit); EvidenceError (artifactUnreadable) as for a file on disk."""
        cached = self._cached(("headers", key), lambda: _facts(lambda: [_summarized(h) for h in headers], file_name))
        assert not isinstance(cached, int)
        return cached

    def _read(self, paths: Sequence[str], key: tuple[FileIdentity, ...]) -> ArtifactFacts | Unreadable:
        def summaries() -> list[HeaderSummary]:
            return [self._summary(p, identity) for p, identity in zip(paths, key, strict=True)]

        return _facts(summaries, os.path.basename(paths[0]))


def _summarized(header: GGUFHeader | str) -> HeaderSummary:
    if isinstance(header, str):
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, header)
    return summarize(header)


def _facts(summaries: Callable[[], list[HeaderSummary]], file_name: str) -> ArtifactFacts | Unreadable:
    """The facts of a file set from its files' summaries, or why it cannot be read (cached as plain values)."""
    try:
        read = summaries()
        return with_tensors(artifact_facts(read, file_name), read)
    except GGUFError as exc:
        return Unreadable(Limit.ARTIFACT_UNREADABLE, f"not a readable GGUF file: {exc}")
    except NotAModel as exc:
        return Unreadable(exc.limit, str(exc), exc.kind)
    except EvidenceError as exc:
        return Unreadable(exc.limit, str(exc))


def with_tensors(facts: ArtifactFacts, summaries: list[HeaderSummary]) -> ArtifactFacts:
    """The facts with the tensors placement reads (estimator/placement.py), or why they are not derived."""
    if facts.layout is None or facts.n_vocab is None:
        return replace(facts, tensors_problem="the model's layout is unknown")
    try:
        return replace(facts, tensors=model_tensors(summaries, facts.n_vocab))
    except (PlacementUnsupported, EvidenceError) as exc:
        return replace(facts, tensors_problem=str(exc))
