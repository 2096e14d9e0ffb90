"""Models memfit knows from the bundled catalog: their published layouts, and what a download would need.

A catalog answer rests on published facts, not a file. `weights` is `derivedLayout` where the architecture's
tensor list is mirrored (estimator/tensor_list.py) and llama.cpp's quantization recipe covers the quant
(estimator/quant_recipe.py): every tensor in the type llama-quantize gives it, its bytes padded as llama.cpp
allocates them; a range only where the recipe depends on an importance matrix. For a quant the recipe does not
cover it is a `parameterProxy` (the tensor list's parameters, times the bits per weight of the quant's lowest
tensor type; its ceiling uses the highest type the recipe may choose); without a tensor list, unknown
(`layoutUnpublished`: memfit counts no parameters but a list's). `kvCache` and `recurrentState` go
through the same layout rules as a file, and the answer says `artifactNotOnDisk`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from memfit import gguf_constants as gguf
from memfit.estimator.arch_rules import LLAMA_CPP_RELEASE, RULES
from memfit.estimator.architectures import derive_layout
from memfit.estimator.artifact import (
    OUTPUT,
    TOKEN_EMBD,
    HeaderSummary,
    matmul_weights,
    packed_range,
    padded,
    tensor_bytes,
    variant_weights,
)
from memfit.estimator.bounds import Part
from memfit.estimator.cpu_repack import Matrix, packing_bytes
from memfit.estimator.cpu_variant import VARIANTS, CpuVariant
from memfit.estimator.errors import EvidenceError
from memfit.estimator.hparams import HParams
from memfit.estimator.placement import ModelTensors, PlacementUnsupported, model_tensors
from memfit.estimator.quant_recipe import DEFAULT_TYPE, ModelFacts, tensor_types
from memfit.estimator.subject import NO_VARIANT, Subject
from memfit.estimator.tensor_list import ParameterCount, Shape, Tensor, count_parameters
from memfit.estimator.vocabulary import Basis, Component, Limit
from memfit.quant_names import DEFAULT_QUANT

F32_BYTES = 4  # norms, biases and routers stay F32 in every quant
TENSOR_PADDING = 32  # every tensor is padded to 32 bytes; a block has at most this many tensors
TENSORS_PER_BLOCK = 32


def bits_per_weight(ggml_type: str) -> float:
    block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[ggml_type]]
    return type_size * 8 / block


@dataclass(frozen=True)
class QuantSpread:
    """A llama.cpp quant recipe's lowest and highest tensor types (llama-quant.cpp)."""

    floor_type: str
    ceiling_type: str


@dataclass(frozen=True)
class CatalogEntry:
    model_id: str  # the GGUF repository, as llama.cpp's -hf names it
    name: str
    architecture: str
    parameters: int | None  # as published
    context_length: int | None
    metadata: Mapping  # the memory-relevant GGUF keys llama.cpp's converter writes for this model
    n_vocab: int
    tied_embeddings: bool
    quants: tuple[str, ...]
    source: str
    quants_note: str = ""  # what is known of the files the repository publishes, where it differs from `quants`

    @property
    def default_quant(self) -> str:
        return DEFAULT_QUANT if DEFAULT_QUANT in self.quants else self.quants[0]


def _frozen(value: object) -> object:
    """JSON lists as the tuples the GGUF reader gives for arrays."""
    return tuple(value) if isinstance(value, list) else value


class Catalog:
    def __init__(self, document: Mapping) -> None:
        """`document`: the catalog's data (memfit/data/catalog.json, read by memfit.readers.catalog_file)."""
        self.spreads = {name: QuantSpread(**spec) for name, spec in document["quant_spreads"].items()}
        self.entries = tuple(
            CatalogEntry(
                model_id=m["id"],
                name=m["name"],
                architecture=m["architecture"],
                parameters=m.get("parameters"),
                context_length=m.get("context_length"),
                metadata={k: _frozen(v) for k, v in m["metadata"].items()},
                n_vocab=m["n_vocab"],
                tied_embeddings=m["tied_embeddings"],
                quants=tuple(m["quants"]),
                source=m["source"],
                quants_note=m.get("quants_note", ""),
            )
            for m in document["models"]
        )
        self._by_repo = {e.model_id.lower(): e for e in self.entries}  # the Hub's repository ids ignore case
        # built once per variant set: an entry never changes
        self._subjects: dict[tuple[str, str, tuple[CpuVariant, ...]], Subject] = {}

    def find(self, model_id: str) -> tuple[CatalogEntry, str] | None:
        """`org/repo` (its default quant) or `org/repo:QUANT` of a catalog entry, case-insensitive: a quant the
        repository publishes, or one llama-quantize's recipe makes for the entry's tensors (`computable`)."""
        repo, sep, quant = model_id.rpartition(":")
        if not sep:
            repo, quant = model_id, ""
        entry = self._by_repo.get(repo.lower())
        if entry is None:
            return None
        quant = quant.upper() or entry.default_quant
        return (entry, quant) if quant in entry.quants or computable(entry, quant) else None

    def quants(self, repo: str) -> tuple[str, ...]:
        """The quants the catalog lists for repository `repo` (any case), as the catalog spells them; none when it
        has no such repository."""
        entry = self._by_repo.get(repo.lower())
        return entry.quants if entry is not None else ()

    def subject(self, model_id: str, variants: tuple[CpuVariant, ...] = VARIANTS) -> Subject | None:
        """The subject for a catalog id under each of the CPU `variants` (by default every one ggml ships), or
        None when the catalog has no such model and quant."""
        found = self.find(model_id)
        if found is None:
            return None
        key = (found[0].model_id, found[1], variants)
        if key not in self._subjects:
            self._subjects[key] = catalog_subject(*found, self.spreads, variants)
        return self._subjects[key]

    def weights(self, model_id: str, variants: tuple[CpuVariant, ...] = VARIANTS) -> Part | None:
        """The weights part of the subject for a catalog id, without building (or keeping) the rest of it: its
        layout and the tensors placement needs (a listing weighs every entry)."""
        found = self.find(model_id)
        if found is None:
            return None
        kept = self._subjects.get((found[0].model_id, found[1], variants))
        return kept.weights if kept is not None else catalog_weights(*found, self.spreads, variants)[0]

    def ids(self) -> Iterator[tuple[CatalogEntry, str]]:
        for entry in sorted(self.entries, key=lambda e: e.model_id):
            for quant in entry.quants:
                yield entry, quant


def proxy_weights(
    entry: CatalogEntry, count: ParameterCount, spread: QuantSpread, variants: tuple[CpuVariant, ...]
) -> Part:
    """The tensor list's parameters x bits per weight of the recipe's lowest type (a floor), its F32 tensors at 4
    bytes; the highest type gives the ceiling, with 32-byte padding, AMX's packing where a variant packs the
    ceiling type, and, for a tied embedding, the second copy llama.cpp's CPU backend may keep."""
    low, high = bits_per_weight(spread.floor_type), bits_per_weight(spread.ceiling_type)
    hp = HParams(entry.metadata, entry.architecture)
    fixed = count.f32 * F32_BYTES
    floor = int(count.quantized * low / 8) + fixed
    qtype = gguf.GGMLQuantizationType[spread.ceiling_type]
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    one_block = Matrix(int(qtype), (block * 32, 32))  # 32 rows of 32 blocks: a shape AMX takes
    extra = max(packing_bytes(v, (one_block,)) for v in variants) / (32 * 32 * type_size)
    ceiling = (
        math.ceil(count.quantized * high / 8 * (1 + extra))
        + fixed
        + (hp.n_layer + 1) * TENSORS_PER_BLOCK * TENSOR_PADDING
    )
    if entry.tied_embeddings:
        n_embd = hp.n_embd
        embedding = math.ceil(entry.n_vocab * n_embd * high / 8 * (1 + extra))
        ceiling += embedding
    stated = f" (published: {entry.parameters:,})" if entry.parameters else ""
    note = (
        f"{count.total:,} parameters counted from the published layout{stated} x {low:g} to {high:g} bits"
        f" per weight ({spread.floor_type} to {spread.ceiling_type}); not measured"
    )
    return Part(Component.WEIGHTS, floor, Basis.PARAMETER_PROXY, note, slack=int(ceiling) - floor)


def entry_shape(entry: CatalogEntry) -> Shape:
    return Shape(HParams(entry.metadata, entry.architecture), entry.n_vocab, entry.tied_embeddings)


def computable(entry: CatalogEntry, quant: str) -> bool:
    """Whether memfit types every tensor of `quant` as llama-quantize would for the entry (a quant the repository
    need not publish)."""
    rule = RULES.get(entry.architecture)
    return quant in DEFAULT_TYPE and rule is not None and rule.tensors is not None  # as entry_tensors finds a list


def entry_tensors(entry: CatalogEntry) -> list[Tensor] | None:
    """The tensors llama.cpp's loader requires for the entry, where its architecture's list is mirrored."""
    rule = RULES.get(entry.architecture)
    return rule.tensors(entry_shape(entry)) if rule is not None and rule.tensors is not None else None


def recipe_facts(entry: CatalogEntry) -> ModelFacts:
    """What llama.cpp's quantizer reads of the model besides its tensors (llama_hparams, llama_model::type)."""
    hp = entry_shape(entry)
    kv_heads = hp.n_head_kv(0)
    return ModelFacts(
        arch=entry.architecture,
        n_layer=hp.n_layer,
        n_expert=hp.n_expert,
        n_gqa=hp.n_head(0) // kv_heads if kv_heads else 0,
        is_70b=RULES[entry.architecture].llm_type_70b(hp),
    )


def recipe_weights(
    entry: CatalogEntry, quant: str, tensors: list[Tensor], variants: tuple[CpuVariant, ...]
) -> tuple[Part, tuple[int, int], int]:
    """Every tensor in the type llama.cpp's quantizer gives it for `quant`, padded as llama.cpp allocates it; a
    tensor whose type depends on an importance matrix spans both types. Under the CPU `variants` as for a file
    (estimator/artifact.py: AMX's packing, a tied token embedding's second copy). With the (floor, ceiling) of
    what the CPU's extra buffer types hold of them (estimator/artifact.py's packed_range), and the bytes of a
    tied embedding's second copy."""
    facts = recipe_facts(entry)
    plain, with_imatrix = (tensor_types(tensors, quant, facts, imatrix) for imatrix in (False, True))
    floor = ceiling = 0
    varies = []
    for t in tensors:
        low, high = sorted(padded(tensor_bytes(t.ne, qt)) for qt in (plain[t.name], with_imatrix[t.name]))
        floor, ceiling = floor + low, ceiling + high
        if plain[t.name] != with_imatrix[t.name]:
            varies.append(t.name)
    stated = f" (published: {entry.parameters:,} parameters)" if entry.parameters else ""
    note = (
        f"{len(tensors)} tensors from the published layout{stated}, each typed by llama-quantize's {quant} recipe"
        f" (src/llama-quant.cpp of {LLAMA_CPP_RELEASE}) and padded as llama.cpp allocates it; not measured"
    )
    if varies:
        note += f"; {len(varies)} tensors' types depend on whether an importance matrix was used (a range)"
    by_name = {t.name: t for t in tensors}
    embd = by_name.get(TOKEN_EMBD)
    tied = embd is not None and OUTPUT not in by_name  # as artifact_facts reads a file
    duplicate = 0
    if embd is not None and tied and RULES[entry.architecture].tied_embedding_twice:
        duplicate = padded(tensor_bytes(embd.ne, plain[embd.name]))
        floor, ceiling = floor + duplicate, ceiling + duplicate
        note += f"; {entry.architecture} loads its tied token embedding twice"
        tied = False
    extras, packed = [], []
    for typed in (plain, with_imatrix):  # each typing's packing and copy under each variant
        ne = {t.name: (*t.ne, 1, 1, 1)[:4] for t in tensors}
        matrices = matmul_weights((name, 0, int(typed[name]), n[0], n[1], n[2] * n[3]) for name, n in ne.items())
        copy = Matrix(int(typed[TOKEN_EMBD]), (embd.ne[0], embd.ne[1])) if embd is not None and tied else None
        low, slack, variant_note = variant_weights(0, note, matrices, copy, variants)
        extras.append((low, low + slack, variant_note))
        packed.append(packed_range(matrices, copy, variants))
    low, high = min(e[0] for e in extras), max(e[1] for e in extras)
    weights = Part(
        Component.WEIGHTS, floor + low, Basis.DERIVED_LAYOUT, extras[0][2], slack=ceiling + high - floor - low
    )
    return weights, (min(p[0] for p in packed), max(p[1] for p in packed)), duplicate


def catalog_tensors(entry: CatalogEntry, quant: str, tensors: list[Tensor]) -> tuple[ModelTensors, ...]:
    """What placement needs of the entry under `quant`'s recipe: one model per typing (without and with an
    importance matrix, where they differ), each as a file of those tensors would read."""
    metadata = {**entry.metadata, gguf.Keys.General.ARCHITECTURE: entry.architecture}
    facts = recipe_facts(entry)
    typings = {tuple(tensor_types(tensors, quant, facts, imatrix).items()) for imatrix in (False, True)}
    out = []
    for typing in sorted(typings):
        typed = dict(typing)
        rows = tuple(_summary_row(t, typed[t.name]) for t in tensors)
        out.append(model_tensors([HeaderSummary(metadata, rows)], entry.n_vocab or 0))
    return tuple(out)


def _summary_row(t: Tensor, qt: gguf.GGMLQuantizationType) -> tuple[str, int, int, int, int, int]:
    """A tensor as a file's header summary lists it: name, bytes, type, ne[0], ne[1], the further dimensions."""
    ne = (*t.ne, 1, 1)
    return t.name, tensor_bytes(t.ne, qt), int(qt), ne[0], ne[1], math.prod(t.ne[2:])


def catalog_weights(
    entry: CatalogEntry, quant: str, spreads: Mapping[str, QuantSpread], variants: tuple[CpuVariant, ...]
) -> tuple[Part, tuple[int, int] | None, int, bool]:
    """A catalog model's weights: its recipe's (else proxy weights); with the range the CPU's extra buffer types
    pack, the bytes of a second copy, and whether the layout's count failed (no parameter proxy)."""
    packed, duplicate, unpublished = None, 0, False
    try:
        if not variants:
            weights = Part.unknown(Component.WEIGHTS, NO_VARIANT)
        elif (tensors := entry_tensors(entry)) is None:
            raise EvidenceError(
                Limit.LAYOUT_UNPUBLISHED, f"memfit does not count {entry.architecture} parameters from a layout"
            )
        elif quant in DEFAULT_TYPE:
            weights, packed, duplicate = recipe_weights(entry, quant, tensors, variants)
        else:
            weights = proxy_weights(entry, count_parameters(tensors), spreads[quant], variants)
    except (EvidenceError, KeyError) as exc:
        weights, unpublished = Part.unknown(Component.WEIGHTS, f"no parameter proxy for {quant}: {exc}"), True
    if quant not in entry.quants:
        weights = replace(
            weights, note=f"{weights.note}; the repository does not list {quant}: a file it may not publish"
        )
    if entry.quants_note:
        weights = replace(weights, note=f"{weights.note}; {entry.quants_note}")
    return weights, packed, duplicate, unpublished


def catalog_subject(
    entry: CatalogEntry, quant: str, spreads: Mapping[str, QuantSpread], variants: tuple[CpuVariant, ...]
) -> Subject:
    """A subject for a model that is not on disk: its recipe's weights (else proxy weights), the published
    layout."""
    limits = [Limit.ARTIFACT_NOT_ON_DISK]
    tensors = entry_tensors(entry)
    weights, packed, duplicate, unpublished = catalog_weights(entry, quant, spreads, variants)
    if unpublished:
        limits.append(Limit.LAYOUT_UNPUBLISHED)
    try:
        layout, problem = derive_layout(entry.metadata, entry.architecture, n_vocab=entry.n_vocab), None
    except EvidenceError as exc:
        layout, problem = None, exc.with_traceback(None)
        limits.append(exc.limit)
    placed: tuple[ModelTensors, ...] = ()
    why = f"memfit does not mirror llama-quantize's {quant} recipe for the catalog's layout of this model"
    if layout is not None and tensors is not None and quant in DEFAULT_TYPE and entry.n_vocab is not None:
        try:
            placed = catalog_tensors(entry, quant, tensors)
        except (PlacementUnsupported, EvidenceError, KeyError) as exc:
            why = f"the catalog's tensors cannot be placed: {exc}"
    return Subject(
        model_id=f"{entry.model_id}:{quant}",
        revision="",
        quant=quant,
        artifact_bytes=None,
        context_limit=entry.context_length,
        n_vocab=entry.n_vocab,
        layout=layout,
        layout_problem=problem,
        weights=weights,
        companions=Part.not_applicable(Component.COMPANIONS, "the catalog lists no projector for this model"),
        limits=tuple(dict.fromkeys(limits)),
        architecture=entry.architecture,
        tensors=placed,
        tensors_problem="" if placed else why,
        packed=packed,
        duplicate=duplicate,
    )
