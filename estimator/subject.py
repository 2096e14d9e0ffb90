"""What an answer is about: one model's identity and the evidence memfit holds for it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from memfit.estimator.artifact import ArtifactFacts, HubArtifact, RemoteHeader, weights_on
from memfit.estimator.artifact_cache import ArtifactCache
from memfit.estimator.bounds import Part
from memfit.estimator.cpu_variant import CpuVariant
from memfit.estimator.errors import EvidenceError, NotAModel
from memfit.estimator.layout import Layout
from memfit.estimator.vocabulary import Basis, Component, Limit
from memfit.gguf_constants import GGUFType
from memfit.readers.model_roots import LocalArtifact

NO_VARIANT = "the workload's CPU variant is not one this host's llama.cpp can load"


@dataclass(frozen=True)
class Subject:
    model_id: str
    revision: str
    quant: str
    artifact_bytes: int | None
    context_limit: int | None
    n_vocab: int | None
    layout: Layout | None
    layout_problem: EvidenceError | None  # why there is no layout, when there is none
    weights: Part
    companions: Part
    limits: tuple[Limit, ...] = ()
    weights_key: str = ""  # identity of the weights file set, for sharedKey
    companions_key: str = ""
    architecture: str = ""
    unreadable: str = ""  # why the artifact could not be read, when it could not

    @property
    def is_model(self) -> bool:
        """False for a GGUF of another kind (an adapter, a vocabulary): answered as unreadable, never listed."""
        return not isinstance(self.layout_problem, NotAModel)


def allocation_key(kind: str, identity: tuple) -> str:
    """A stable opaque id of a file set: the same files (device and inode) give the same key, in any batch."""
    digest = hashlib.sha256(repr([(dev, ino) for dev, ino, *_ in identity]).encode()).hexdigest()[:16]
    return f"{kind}-{digest}"


def _companions(artifact: LocalArtifact, cache: ArtifactCache) -> tuple[Part, list[Limit], str]:
    """The projector part, its limits, and its allocation key."""
    if artifact.projector is None:
        return Part.not_applicable(Component.COMPANIONS, "no multimodal projector beside the model"), [], ""
    name = os.path.basename(artifact.projector)
    try:
        identity = cache.identity((artifact.projector,))
        facts = cache.facts((artifact.projector,), identity)
    except EvidenceError as exc:
        return Part.unknown(Component.COMPANIONS, f"projector {name}: {exc}"), [exc.limit], ""
    return (
        Part(
            Component.COMPANIONS,
            facts.weights_bytes,
            Basis.MEASURED_ARTIFACT,
            f"projector {name}: tensor bytes as llama.cpp allocates them",
        ),
        [],
        allocation_key("projector", identity),
    )


def _adapters(artifact: LocalArtifact, cache: ArtifactCache) -> tuple[int, str, tuple]:
    """The LoRA adapters' tensor bytes (loaded with the weights), the note saying so, and their identities;
    EvidenceError when one cannot be read."""
    if not artifact.adapters:
        return 0, "", ()
    identity = cache.identity(artifact.adapters)
    nbytes = sum(
        cache.tensor_bytes(path, i, kind=GGUFType.ADAPTER) for path, i in zip(artifact.adapters, identity, strict=True)
    )
    count = len(artifact.adapters)
    return nbytes, f"; with the {nbytes} tensor bytes of {count} LoRA adapter{'s' * (count > 1)} it loads", identity


def local_subject(artifact: LocalArtifact, cache: ArtifactCache, variants: tuple[CpuVariant, ...]) -> Subject:
    """A subject for a GGUF file set on disk: measured weights (under each of the CPU `variants`; the cached
    facts hold for any), the layout its metadata states."""
    companions, limits, companions_key = _companions(artifact, cache)
    weights_key = ""
    identity = None
    try:
        identity = cache.identity(artifact.paths)
        weights_key = allocation_key("weights", identity)
        facts = cache.facts(artifact.paths, identity)
    except EvidenceError as exc:
        on_disk = sum(i.size for i in identity) if identity is not None else None  # on disk, unreadable
        keys = (weights_key, companions_key)
        return _unreadable(artifact.model_id, artifact.revision, on_disk, exc, companions, limits, keys)
    floor, slack, note = weights_on(facts, variants) if variants else (0, 0, "")
    try:
        adapter_bytes, adapter_note, adapter_identity = _adapters(artifact, cache)
    except EvidenceError as exc:  # the model is known; what its adapter adds is not
        weights = Part.unknown(Component.WEIGHTS, f"{note}; a LoRA adapter it loads: {exc}")
        limits.insert(0, exc.limit)
    else:
        weights = Part(
            Component.WEIGHTS, floor + adapter_bytes, Basis.MEASURED_ARTIFACT, note + adapter_note, slack=slack
        )
        weights_key = allocation_key("weights", identity + adapter_identity)
    return _read_subject(
        facts,
        artifact.model_id,
        artifact.revision,
        sum(i.size for i in identity),
        weights if variants else Part.unknown(Component.WEIGHTS, NO_VARIANT),
        companions,
        limits,
        (weights_key, companions_key),
    )


def _unreadable(
    model_id: str,
    revision: str,
    artifact_bytes: int | None,
    exc: EvidenceError,
    companions: Part,
    limits: list[Limit],
    keys: tuple[str, str],
) -> Subject:
    """The subject of a file set that cannot be read: nothing known of it but its size on disk and why."""
    return Subject(
        model_id=model_id,
        revision=revision,
        quant="",
        artifact_bytes=artifact_bytes,
        context_limit=None,
        n_vocab=None,
        layout=None,
        layout_problem=exc,
        weights=Part.unknown(Component.WEIGHTS, str(exc)),
        companions=companions,
        limits=tuple(dict.fromkeys((exc.limit, *limits))),
        weights_key=keys[0],
        companions_key=keys[1],
        unreadable=str(exc),
    )


def _read_subject(
    facts: ArtifactFacts,
    model_id: str,
    revision: str,
    artifact_bytes: int | None,
    weights: Part,
    companions: Part,
    limits: list[Limit],
    keys: tuple[str, str],
) -> Subject:
    """The subject of a file set whose headers were read: its weights, the layout its metadata states."""
    layout_limits = [facts.layout_error.limit] if facts.layout_error else []
    return Subject(
        model_id=model_id,
        revision=revision,
        quant=facts.quant,
        artifact_bytes=artifact_bytes,
        context_limit=facts.context_limit,
        n_vocab=facts.n_vocab,
        layout=facts.layout,
        layout_problem=facts.layout_error,
        weights=weights,
        companions=companions,
        limits=tuple(dict.fromkeys((*layout_limits, *limits))),
        weights_key=keys[0],
        companions_key=keys[1],
        architecture=facts.architecture,
    )


# --- a repository of the Hub, read by its headers ---------------------------------------------------------------


def hub_key(kind: str, files: tuple) -> str:
    """A stable opaque id of a file set on the Hub (its files' ETags at a commit), as allocation_key is of one on
    disk."""
    return f"{kind}-{hashlib.sha256(repr(files).encode()).hexdigest()[:16]}"


def _hub_files(found: HubArtifact, headers: tuple[RemoteHeader, ...]) -> tuple:
    return (found.repo.lower(), found.commit, tuple((h.path, h.etag) for h in headers))


def hub_source(found: HubArtifact) -> str:
    """Where a Hub answer's bytes came from, and what this answer fetched: for the weights' note."""
    shards = found.shards
    names = shards[0].path if len(shards) == 1 else f"{shards[0].path} and {len(shards) - 1} more splits"
    where = f"read from the header{'s' * (len(shards) > 1)} on the Hub ({found.endpoint}/{found.repo} at"
    where += f" {found.commit[:12]}: {names})"
    if found.tally.requests:
        return f"{where}: {found.tally.bytes} bytes fetched in {found.tally.requests} requests for this answer"
    first = sum(h.fetched_bytes for h in shards)
    return f"{where}, cached by memfit when first read ({first} bytes then): nothing fetched for this answer"


def _hub_companions(found: HubArtifact, cache: ArtifactCache) -> tuple[Part, list[Limit], str]:
    """The projector part of a Hub model, read from its header as the model's are."""
    if found.projector is None and not found.projector_problem:
        return Part.not_applicable(Component.COMPANIONS, "no multimodal projector in the repository"), [], ""
    if found.projector is None:
        return Part.unknown(Component.COMPANIONS, f"the repository's projector: {found.projector_problem}"), [], ""
    projector = found.projector
    name = projector.path.rpartition("/")[2]
    files = _hub_files(found, (projector,))
    try:
        facts = cache.header_facts(files, [projector.header or projector.unreadable], name)
    except EvidenceError as exc:
        return Part.unknown(Component.COMPANIONS, f"projector {name}: {exc}"), [exc.limit], ""
    note = f"projector {name} on the Hub: tensor bytes from its header, as llama.cpp allocates them"
    return Part(Component.COMPANIONS, facts.weights_bytes, Basis.DERIVED_LAYOUT, note), [], hub_key("projector", files)


def hub_subject(found: HubArtifact, cache: ArtifactCache, variants: tuple[CpuVariant, ...]) -> Subject:
    """A subject for a quant of a Hub repository, from its files' headers: the weights are exact (the tensor infos
    a file on disk would give), `derivedLayout` because the bytes were not measured on this machine (nothing is on
    disk: `artifactNotOnDisk`), the layout its metadata states."""
    companions, limits, companions_key = _hub_companions(found, cache)
    limits.insert(0, Limit.ARTIFACT_NOT_ON_DISK)
    files = _hub_files(found, found.shards)
    weights_key = hub_key("weights", files)
    name = found.shards[0].path.rpartition("/")[2]
    try:
        facts = cache.header_facts(files, [h.header or h.unreadable for h in found.shards], name)
    except EvidenceError as exc:
        return _unreadable(found.model_id, found.commit, None, exc, companions, limits, (weights_key, companions_key))
    floor, slack, note = weights_on(facts, variants) if variants else (0, 0, "")
    weights = Part(Component.WEIGHTS, floor, Basis.DERIVED_LAYOUT, f"{note}; {hub_source(found)}", slack=slack)
    return _read_subject(
        facts,
        found.model_id,
        found.commit,
        None,
        weights if variants else Part.unknown(Component.WEIGHTS, NO_VARIANT),
        companions,
        limits,
        (weights_key, companions_key),
    )
