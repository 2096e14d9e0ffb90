"""What an answer is about: one model's identity and the evidence memfit holds for it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from memfit.estimator.artifact_cache import ArtifactCache
from memfit.estimator.errors import EvidenceError
from memfit.estimator.estimate import Part
from memfit.estimator.layout import Layout
from memfit.estimator.vocabulary import Basis, Component, Limit
from memfit.readers.model_roots import LocalArtifact


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


def allocation_key(kind: str, paths: tuple[str, ...]) -> str:
    """A stable opaque id of a file set: the same files give the same key, in any batch."""
    digest = hashlib.sha256("\0".join(os.path.realpath(p) for p in paths).encode()).hexdigest()[:16]
    return f"{kind}-{digest}"


def _artifact_bytes(paths: tuple[str, ...]) -> int | None:
    try:
        return sum(os.stat(p).st_size for p in paths)
    except OSError:
        return None


def _companions(artifact: LocalArtifact, cache: ArtifactCache) -> tuple[Part, list[Limit]]:
    if artifact.projector is None:
        return Part.not_applicable(Component.COMPANIONS, "no multimodal projector beside the model"), []
    name = os.path.basename(artifact.projector)
    try:
        facts = cache.facts((artifact.projector,))
    except EvidenceError as exc:
        return Part.unknown(Component.COMPANIONS, f"projector {name}: {exc}"), [exc.limit]
    return Part(Component.COMPANIONS, facts.weights_bytes, Basis.MEASURED_ARTIFACT,
                f"projector {name}: tensor bytes as llama.cpp allocates them"), []


def local_subject(artifact: LocalArtifact, cache: ArtifactCache) -> Subject:
    """A subject for a GGUF file set on disk: measured weights, the layout its metadata states."""
    companions, limits = _companions(artifact, cache)
    common = dict(model_id=artifact.model_id, revision=artifact.revision, artifact_bytes=_artifact_bytes(artifact.paths),
                  companions=companions, weights_key=allocation_key("weights", artifact.paths),
                  companions_key=allocation_key("projector", (artifact.projector,)) if artifact.projector else "")
    try:
        facts = cache.facts(artifact.paths)
    except EvidenceError as exc:
        return Subject(quant="", context_limit=None, n_vocab=None, layout=None, layout_problem=exc,
                       weights=Part.unknown(Component.WEIGHTS, str(exc)), limits=(exc.limit, *limits), **common)
    weights = Part(Component.WEIGHTS, facts.weights_bytes, Basis.MEASURED_ARTIFACT, facts.weights_note,
                   slack=facts.weights_slack)
    layout_limits = [facts.layout_error.limit] if facts.layout_error else []
    return Subject(quant=facts.quant, context_limit=facts.context_limit, n_vocab=facts.n_vocab, layout=facts.layout,
                   layout_problem=facts.layout_error, weights=weights, limits=(*layout_limits, *limits),
                   architecture=facts.architecture, **common)
