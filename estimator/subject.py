"""What an answer is about: one model's identity and the evidence memfit holds for it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memfit.estimator.artifact import ArtifactFacts, HubArtifact, MtpWeights, RemoteHeader
from memfit.estimator.bounds import Part
from memfit.estimator.errors import EvidenceError, NotAModel
from memfit.estimator.layout import Layout
from memfit.estimator.vocabulary import Component, Limit

if TYPE_CHECKING:
    from memfit.estimator.placement import ModelTensors

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
    # its tensors, for placement across devices: one model, or one per typing a catalog recipe allows (none: not
    # derived)
    tensors: tuple[ModelTensors, ...] = ()
    tensors_problem: str = "the model's tensors are not known (no file header was read)"  # why not, when not
    packed: tuple[int, int] | None = None  # (floor, ceiling) of the weights the CPU's extra buffer types copy
    duplicate: int = 0  # a tensor's second copy in the weights, which a mapped load views in the file instead
    # what its NextN/MTP layers' tensors add to the weights when llama-server loads them (--spec-type draft-mtp);
    # None: not known (a catalog entry's published layout lists no NextN tensors)
    mtp: MtpWeights | None = None
    mtp_loaded: bool = False  # `weights`, `packed` and `tensors` hold them (estimator/mtp.py with_mtp)

    @property
    def is_model(self) -> bool:
        """False for a GGUF of another kind (an adapter, a vocabulary): answered as unreadable, never listed."""
        return not isinstance(self.layout_problem, NotAModel)


def allocation_key(kind: str, identity: tuple) -> str:
    """A stable opaque id of a file set: the same files (device and inode) give the same key, in any batch."""
    digest = hashlib.sha256(repr([(dev, ino) for dev, ino, *_ in identity]).encode()).hexdigest()[:16]
    return f"{kind}-{digest}"


def unreadable_subject(
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


def read_subject(
    facts: ArtifactFacts,
    model_id: str,
    revision: str,
    artifact_bytes: int | None,
    weights: Part,
    companions: Part,
    limits: list[Limit],
    keys: tuple[str, str],
    packed: tuple[int, int] | None = None,
    mtp: MtpWeights | None = None,
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
        tensors=(facts.tensors,) if facts.tensors is not None else (),
        tensors_problem=facts.tensors_problem,
        packed=packed,
        duplicate=facts.duplicate_bytes,
        mtp=mtp,
    )


# --- a repository of the Hub, read by its headers ---------------------------------------------------------------


def hub_key(kind: str, files: tuple) -> str:
    """A stable opaque id of a file set on the Hub (its files' ETags at a commit), as allocation_key is of one on
    disk."""
    return f"{kind}-{hashlib.sha256(repr(files).encode()).hexdigest()[:16]}"


def hub_files(found: HubArtifact, headers: tuple[RemoteHeader, ...]) -> tuple:
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
