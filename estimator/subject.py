"""What an answer is about: one model's identity and the evidence memfit holds for it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from memfit.estimator.artifact import weights_on
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
        return Subject(
            model_id=artifact.model_id,
            revision=artifact.revision,
            quant="",
            artifact_bytes=sum(i.size for i in identity) if identity is not None else None,  # on disk, unreadable
            context_limit=None,
            n_vocab=None,
            layout=None,
            layout_problem=exc,
            weights=Part.unknown(Component.WEIGHTS, str(exc)),
            companions=companions,
            limits=(exc.limit, *limits),
            weights_key=weights_key,
            companions_key=companions_key,
            unreadable=str(exc),
        )
    layout_limits = [facts.layout_error.limit] if facts.layout_error else []
    floor, slack, note = weights_on(facts, variants) if variants else (0, 0, "")
    try:
        adapter_bytes, adapter_note, adapter_identity = _adapters(artifact, cache)
    except EvidenceError as exc:  # the model is known; what its adapter adds is not
        weights = Part.unknown(Component.WEIGHTS, f"{note}; a LoRA adapter it loads: {exc}")
        layout_limits.append(exc.limit)
    else:
        weights = Part(
            Component.WEIGHTS, floor + adapter_bytes, Basis.MEASURED_ARTIFACT, note + adapter_note, slack=slack
        )
        weights_key = allocation_key("weights", identity + adapter_identity)
    if not variants:
        weights = Part.unknown(Component.WEIGHTS, NO_VARIANT)
    return Subject(
        model_id=artifact.model_id,
        revision=artifact.revision,
        quant=facts.quant,
        artifact_bytes=sum(i.size for i in identity),
        context_limit=facts.context_limit,
        n_vocab=facts.n_vocab,
        layout=facts.layout,
        layout_problem=facts.layout_error,
        weights=weights,
        companions=companions,
        limits=(*layout_limits, *limits),
        weights_key=weights_key,
        companions_key=companions_key,
        architecture=facts.architecture,
    )
