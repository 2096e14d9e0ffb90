"""A model's subject (what an answer is about) from the files memfit reads: a GGUF file set on disk, its projector
and adapters, or a Hub repository's headers, through the artifact cache."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from memfit.estimator.artifact import HubArtifact, HubMiss, mtp_weights, packed_range, weights_on
from memfit.estimator.bounds import Part
from memfit.estimator.catalog import Catalog
from memfit.estimator.cpu_variant import AUTO, CpuVariant, VariantChoice, resolve_variant
from memfit.estimator.errors import EvidenceError
from memfit.estimator.fit_types import FitRequest
from memfit.estimator.machine import CpuFeatures
from memfit.estimator.model_ids import typed_id
from memfit.estimator.plan import is_quant_tag, precision_key
from memfit.estimator.subject import (
    NO_VARIANT,
    Subject,
    allocation_key,
    hub_files,
    hub_key,
    hub_source,
    read_subject,
    unreadable_subject,
)
from memfit.estimator.vocabulary import Basis, Component, Limit
from memfit.gguf_constants import GGUFType
from memfit.readers.model_roots import LocalArtifact
from memfit.service.artifact_cache import ArtifactCache
from memfit.service.index import ModelIndex
from memfit.service.memo import Memo

SUBJECTS_KEPT = 256  # local subjects kept (each shares its facts, the bulk of it, with the artifact cache)


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
        return unreadable_subject(artifact.model_id, artifact.revision, on_disk, exc, companions, limits, keys)
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
    return read_subject(
        facts,
        artifact.model_id,
        artifact.revision,
        sum(i.size for i in identity),
        weights if variants else Part.unknown(Component.WEIGHTS, NO_VARIANT),
        companions,
        limits,
        (weights_key, companions_key),
        packed_range(facts.matrices, facts.tied, variants) if variants else None,
        mtp_weights(facts, variants) if variants else None,
    )


def _hub_companions(found: HubArtifact, cache: ArtifactCache) -> tuple[Part, list[Limit], str]:
    """The projector part of a Hub model, read from its header as the model's are."""
    if found.projector is None and not found.projector_problem:
        return Part.not_applicable(Component.COMPANIONS, "no multimodal projector in the repository"), [], ""
    if found.projector is None:
        return Part.unknown(Component.COMPANIONS, f"the repository's projector: {found.projector_problem}"), [], ""
    projector = found.projector
    name = projector.path.rpartition("/")[2]
    files = hub_files(found, (projector,))
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
    files = hub_files(found, found.shards)
    weights_key = hub_key("weights", files)
    name = found.shards[0].path.rpartition("/")[2]
    try:
        facts = cache.header_facts(files, [h.header or h.unreadable for h in found.shards], name)
    except EvidenceError as exc:
        return unreadable_subject(
            found.model_id, found.commit, None, exc, companions, limits, (weights_key, companions_key)
        )
    floor, slack, note = weights_on(facts, variants) if variants else (0, 0, "")
    weights = Part(Component.WEIGHTS, floor, Basis.DERIVED_LAYOUT, f"{note}; {hub_source(found)}", slack=slack)
    return read_subject(
        facts,
        found.model_id,
        found.commit,
        None,
        weights if variants else Part.unknown(Component.WEIGHTS, NO_VARIANT),
        companions,
        limits,
        (weights_key, companions_key),
        packed_range(facts.matrices, facts.tied, variants) if variants else None,
        mtp_weights(facts, variants) if variants else None,
    )


# --- an id, resolved ---------------------------------------------------------------------------------------------


class HubLookups(Protocol):
    """The Hugging Face Hub as the service asks it (memfit.readers.hub.HubModels): models and repositories' quants
    by id, at once within a deadline, each a HubArtifact (or a tuple of quant tags) or a HubMiss; the models
    answered before, for GET /v1/models; `version` moves when one is recorded."""

    version: int

    def lookup(self, model_ids: Sequence[str], cancelled: Callable[[], bool] = ...) -> Mapping[str, object]: ...

    def quants(self, repos: Sequence[str], cancelled: Callable[[], bool] = ...) -> Mapping[str, object]: ...

    def remember_model(self, entry: dict) -> None: ...

    def models(self) -> list[dict]: ...


class Subjects:
    """What a model id names: a file set on disk beats the Hub's header of its repository, which beats a catalog
    entry with the same id (measured beats exact beats proxy); a repository id names its quants."""

    def __init__(
        self, index: ModelIndex, cache: ArtifactCache, catalog: Catalog, cpu: CpuFeatures, hub: HubLookups | None
    ) -> None:
        self.index = index
        self.cache = cache
        self.catalog = catalog
        self.hub = hub  # the Hugging Face Hub, for ids that name no local file (None: not asked)
        self.cpu = cpu  # fixed per process: the cached artifact facts do not depend on it
        self.auto = resolve_variant(AUTO, cpu)  # the variant ggml's loader picks here
        self._local: Memo[tuple, Subject] = Memo(SUBJECTS_KEPT)

    def variant_choice(self, request: FitRequest) -> VariantChoice:
        """The CPU variants a request's `cpuVariant` names on this host."""
        requested = request.workload.cpu_variant
        return self.auto if requested in (None, AUTO) else resolve_variant(requested, self.cpu)

    def subject(
        self, model_id: str, choice: VariantChoice | None = None, looked_up: Mapping[str, object] | None = None
    ) -> Subject | None:
        """The model an id names, its weights under the CPU variants `choice` names (by default the one ggml's
        loader picks on this host). A catalog answer for an id the Hub could not answer says why. `looked_up`: what
        this request's lookups found on the Hub (hub_lookup's answer), so that each answer says what its own
        request fetched; an id not in it is looked up now."""
        variants = (choice or self.auto).variants
        model_id = typed_id(model_id)
        artifact = self.local(model_id)
        if artifact is not None:
            return self._local_subject(artifact, variants)
        found = (looked_up if looked_up and model_id in looked_up else self.hub_lookup([model_id])).get(model_id)
        if isinstance(found, HubArtifact):
            remote = hub_subject(found, self.cache, variants)
            self._listed_from_hub(remote, found)
            return remote
        subject = self.catalog.subject(model_id.partition("@")[0], variants)
        if subject is not None and isinstance(found, HubMiss) and not found.offline:
            note = f"{subject.weights.note}; the Hub was not used ({found.reason}): the bundled catalog answers"
            subject = replace(subject, weights=replace(subject.weights, note=note))
        return subject

    def _local_subject(self, artifact: LocalArtifact, variants: tuple[CpuVariant, ...]) -> Subject:
        """local_subject's answer, kept per (artifact, the identities of its files, variants): an unchanged file set
        is weighed once, and the same Subject answers for it (the answers built on it are kept by it)."""
        files = (*artifact.paths, *(() if artifact.projector is None else (artifact.projector,)), *artifact.adapters)
        try:
            identity = self.cache.identity(files)
        except EvidenceError:  # a file that cannot be stat'ed: local_subject says which
            return local_subject(artifact, self.cache, variants)
        key = (artifact, identity, variants, self.cache.cleared)
        return self._local.get(key) or self._local.put(key, local_subject(artifact, self.cache, variants))

    def local(self, model_id: str) -> LocalArtifact | None:
        """The local artifact an id names; `org/repo:QUANT@revision` names one of a hub cache's snapshot when the
        revision is its commit or `main`."""
        artifact = self.index.get(model_id)
        if artifact is None and "@" in model_id:
            base, _, revision = model_id.partition("@")
            artifact = self.index.get(base)
            if artifact is not None and revision not in ("main", artifact.revision):
                return None
        return artifact

    def hub_lookup(
        self, model_ids: Sequence[str], cancelled: Callable[[], bool] = lambda: False
    ) -> Mapping[str, object]:
        """What the Hub holds for each of these ids that names no local file (all looked up at once, within the
        Hub's deadline; each answered from memfit's cache when it was asked before): a HubArtifact, or a HubMiss
        that says why not. Empty without a Hub."""
        if self.hub is None:
            return {}
        wanted = [m for m in (typed_id(i) for i in model_ids) if self.local(m) is None]
        return self.hub.lookup(wanted, cancelled) if wanted else {}

    def hub_quants(
        self, repositories: Sequence[str], cancelled: Callable[[], bool] = lambda: False
    ) -> Mapping[str, object]:
        """Each Hub repository's quant tags from its file list (or a HubMiss), at once; empty without a Hub."""
        if self.hub is None:
            return {}
        return self.hub.quants([typed_id(r) for r in repositories], cancelled)

    def _listed_from_hub(self, subject: Subject, found: HubArtifact) -> None:
        """Record a model answered from the Hub, for GET /v1/models (a file that is not a model is not listed)."""
        if self.hub is not None and subject.is_model and not subject.unreadable:
            self.hub.remember_model(
                {
                    "model_id": subject.model_id,
                    "revision": found.commit,
                    "architecture": subject.architecture,
                    "quant": subject.quant,
                    "context_limit": subject.context_limit,
                    "has_projector": found.projector is not None,
                }
            )

    def plan_subjects(
        self, model_id: str, choice: VariantChoice | None = None, looked_up: Mapping[str, object] | None = None
    ) -> tuple[list[Subject], bool]:
        """The models a plan request names, highest precision first, and whether it named a repository: a
        repository id without a tag means every quant its file list on the Hub holds (else, the Hub not asked or
        not answering, every quant the catalog lists for it), and every quant-tagged artifact of it on this machine
        (a file beats the Hub's header, which beats the catalog entry with the same id)."""
        model_id = typed_id(model_id)
        tags = self.quant_tags(model_id)
        subjects = [s for tag in tags if (s := self.subject(tagged(model_id, tag), choice, looked_up)) is not None]
        if subjects:
            return sorted(subjects, key=lambda s: precision_key(s.model_id.rpartition(":")[2])), True
        subject = self.subject(model_id, choice, looked_up)
        return ([subject] if subject is not None else []), False

    def quant_tags(self, repository: str) -> list[str]:
        """The quants a repository id without a tag names: its files' on the Hub (else the catalog's), then those
        of its quant-tagged artifacts on this machine; none for an id with a tag."""
        if ":" in repository:
            return []
        base = repository.partition("@")[0]
        listed = self.hub_quants([repository]).get(repository)
        tags = dict.fromkeys(listed if isinstance(listed, tuple) else self.catalog.quants(base))
        for artifact in self.index.artifacts():
            repo, sep, tag = artifact.model_id.rpartition(":")
            if sep and repo == base and is_quant_tag(tag):
                tags.setdefault(tag.upper())
        return list(tags)

    def why_left_out(self, model_id: str, repositories: bool) -> str | None:
        """None when `subject` (and with `repositories`, `plan_subjects`) finds a model, without building one; else
        why it finds none (the Hub's answer; '' where nothing more is known than that no model has the id)."""
        model_id = typed_id(model_id)
        if self._names_a_model(model_id):
            return None
        if repositories and any(self._names_a_model(tagged(model_id, t)) for t in self.quant_tags(model_id)):
            return None
        found = self.hub_lookup([model_id]).get(model_id)
        return found.reason if isinstance(found, HubMiss) else ""

    def _names_a_model(self, model_id: str) -> bool:
        if self.local(model_id) is not None or self.catalog.find(model_id.partition("@")[0]) is not None:
            return True
        return isinstance(self.hub_lookup([model_id]).get(model_id), HubArtifact)


def tagged(repository: str, tag: str) -> str:
    """The id of one quant of a repository id (`org/repo@revision` -> `org/repo:TAG@revision`)."""
    base, at, revision = repository.partition("@")
    return f"{base}:{tag}{at}{revision}"
