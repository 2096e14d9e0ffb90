"""What a GGUF file set says about a model: its quant, its weights as llama.cpp allocates them, its layout."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memfit import gguf_constants as gguf
from memfit.estimator.arch_rules import LLAMA_CPP_RELEASE, RULES
from memfit.estimator.architectures import derive_layout
from memfit.estimator.cpu_repack import CPU, Matrix, packing_bytes, padded, placement, tied_copy_bytes
from memfit.estimator.cpu_variant import CpuVariant
from memfit.estimator.errors import EvidenceError, NotAModel
from memfit.estimator.gguf_file import MAX_DIMS, GGUFHeader, SkippedArray
from memfit.estimator.hparams import HParams, file_value, refuse_mistyped_keys
from memfit.estimator.layout import Layout
from memfit.estimator.tensor_list import Shape
from memfit.estimator.vocabulary import INT64_MAX, Limit
from memfit.gguf_constants import GGMLQuantizationType as QT
from memfit.gguf_constants import Keys
from memfit.integers import is_int, round_up
from memfit.quant_names import QUANT_NAME

if TYPE_CHECKING:
    from memfit.estimator.placement import ModelTensors

TOKEN_EMBD = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.TOKEN_EMBD] + ".weight"
OUTPUT = gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.OUTPUT] + ".weight"
BLOCK_TENSOR = re.compile(r"^blk\.(\d{1,9})\.")
MAX_VOCAB = 1 << 31  # llama.cpp keeps token ids in int32
MODEL = gguf.GGUFType.MODEL
WEIGHTS_NOTE = "tensor bytes of the GGUF file set, each padded to 32 bytes as llama.cpp allocates them"
_QUANT_IN_NAME = re.compile(rf"(?<![A-Za-z0-9])({QUANT_NAME})(?![A-Za-z0-9])", re.I)


# Weights llama.cpp reads with GET_ROWS (llm_tensor_info_mapping): never in an extra buffer type
_ROW_TABLES = {
    gguf.TENSOR_NAMES[t] + ".weight"
    for t in (
        gguf.MODEL_TENSOR.TOKEN_EMBD,
        gguf.MODEL_TENSOR.POS_EMBD,
        gguf.MODEL_TENSOR.TOKEN_TYPES,
        gguf.MODEL_TENSOR.PER_LAYER_TOKEN_EMBD,
    )
}


@dataclass(frozen=True)
class ArtifactFacts:
    """What the file set says, whatever the host; weights_on() gives the weights under a set of CPU variants."""

    architecture: str
    quant: str
    context_limit: int | None
    n_vocab: int | None
    weights_bytes: int  # sum over tensors of their padded size (without the copy `tied` may add)
    weights_note: str
    layout: Layout | None
    layout_error: EvidenceError | None
    tied: Matrix | None = None  # a tied token embedding, whose output copy depends on the CPU variant
    matrices: tuple[Matrix, ...] = ()  # the 2-D MUL_MAT weights an extra buffer type may pack, by type and shape
    tensors: ModelTensors | None = None  # what placement needs (placement.model_tensors), where it is derived
    tensors_problem: str = ""  # why it is not
    duplicate_bytes: int = 0  # a tied embedding loaded twice: its copy, which a mapped load views in the file
    # the tensors of the NextN/MTP layers in the file, which llama.cpp loads only with load_mtp (llama-server's
    # --spec-type draft-mtp): their count, padded bytes, and MUL_MAT weights (an extra buffer type may pack them)
    mtp_count: int = 0
    mtp_bytes: int = 0
    mtp_matrices: tuple[Matrix, ...] = ()
    mtp_head: bool = False  # the first NextN layer's nextn.eh_proj is among them (nextn_head)


@dataclass(frozen=True)
class MtpWeights:
    """What loading a file's NextN/MTP layers adds to its weights under a set of CPU variants (mtp_weights)."""

    count: int  # tensors
    floor: int  # bytes, under the variant that packs least
    slack: int  # how far above it the variant that packs most is
    packed: tuple[int, int]  # (least, most) of those bytes an extra buffer type copies
    head: bool = True  # the first NextN layer's nextn.eh_proj is in the file (every graph_mtp asserts it)


# (block elements, block bytes) by ggml type number: looked up per tensor, without making the enum member
_QUANT_SIZES: dict[int, tuple[int, int]] = {int(t): size for t, size in gguf.GGML_QUANT_SIZES.items()}


def tensor_bytes(shape: tuple[int, ...], ggml_type: int) -> int:
    """ggml_nbytes: rows of ne[0] elements in blocks of the type's block size."""
    sizes = _QUANT_SIZES.get(ggml_type)
    if sizes is None:
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"unknown tensor type {ggml_type}")
    block, type_size = sizes
    if shape[0] % block:
        raise EvidenceError(
            Limit.ARTIFACT_UNREADABLE, f"row of {shape[0]} elements is not whole {block}-element blocks"
        )
    rows = 1
    for n in shape[1:]:
        rows *= n
    return shape[0] // block * type_size * rows


def first_nextn_layer(metadata: dict, arch: str) -> int | None:
    """The first NextN/MTP block (block_count less nextn_predict_layers: llama.cpp's n_layer()), or None where the
    file names none."""
    nextn = file_value(metadata, arch, Keys.LLM.NEXTN_PREDICT_LAYERS)
    blocks = file_value(metadata, arch, Keys.LLM.BLOCK_COUNT)
    if not isinstance(nextn, int) or not isinstance(blocks, int) or nextn <= 0:
        return None
    return blocks - nextn


def mtp_tensors(metadata: dict, arch: str, sizes: dict[str, int]) -> set[str]:
    """Tensors of the NextN/MTP blocks (the last nextn_predict_layers of block_count) that llama.cpp skips unless
    it is asked to load the MTP head for speculative decoding (TENSOR_SKIP without load_mtp): all of them but those
    the architecture's loader creates without TENSOR_SKIP (ArchRule.nextn_unskipped), loaded as any layer's."""
    first = first_nextn_layer(metadata, arch)
    if first is None:
        return set()
    rule = RULES.get(arch)
    unskipped = rule.nextn_unskipped if rule is not None else frozenset()
    return {
        name
        for name in sizes
        if (m := BLOCK_TENSOR.match(name)) and (il := int(m.group(1))) >= first and not is_kind(name, il, unskipped)
    }


def is_kind(name: str, il: int, kinds: frozenset[gguf.MODEL_TENSOR]) -> bool:
    """Whether block il's tensor `name` is one of `kinds` (LLM_TN_IMPL::str: the kind's name for the block, then its
    suffix, `weight` or `bias`, if any)."""
    base = name.removesuffix(".weight").removesuffix(".bias")
    return any(gguf.TENSOR_NAMES[k].format(bid=il) == base for k in kinds)


def loader_metadata(metadata: dict, arch: str, sizes: dict[str, int]) -> dict:
    """The metadata as the architecture's loader reads it: where the file lacks the first NextN layer's
    nextn.eh_proj, deepseek4's load_arch_hparams sets n_layer_nextn to 0 (ArchRule.nextn_needs_head), so every block
    is a trunk layer (its tensors loaded, its cache kept)."""
    rule = RULES.get(arch)
    if rule is None or not rule.nextn_needs_head or nextn_head(metadata, arch, sizes):
        return metadata
    if first_nextn_layer(metadata, arch) is None:
        return metadata
    return {**metadata, Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch=arch): 0}


def nextn_head(metadata: dict, arch: str, sizes: dict[str, int]) -> bool:
    """Whether the file holds the first NextN layer's nextn.eh_proj: every graph_mtp builds on it
    (GGML_ASSERT(layer.nextn.eh_proj)), and deepseek4's load_arch_hparams makes the NextN layers trunk layers
    without it (ArchRule.nextn_needs_head)."""
    first = first_nextn_layer(metadata, arch)
    return (
        first is not None and f"{gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.NEXTN_EH_PROJ].format(bid=first)}.weight" in sizes
    )


@dataclass(frozen=True)
class HeaderSummary:
    """What an estimate needs of one GGUF file: its metadata and each tensor's name, size and type."""

    metadata: dict
    # (name, bytes, ggml type, ne[0], ne[1], the product of the further dimensions)
    tensors: tuple[tuple[str, int, int, int, int, int], ...]


# The tensors whose shapes the hyperparameters plainly imply: the embedding, the output, attention's projections.
_SHAPE_CHECKED = re.compile(r"^(?:token_embd|output|blk\.\d{1,9}\.attn_(?:q|k|v|output))\.weight$")


def _ne(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape as ggml holds it: MAX_DIMS dimensions, the missing ones 1."""
    return shape + (1,) * (MAX_DIMS - len(shape))


def refuse_contradicted_shapes(metadata: dict, shapes: dict[str, tuple[int, ...]]) -> None:
    """EvidenceError (artifactUnreadable) for a tensor whose shape its model's hyperparameters contradict (an
    embedding width, a head count): llama_model_loader::create_tensor refuses it ("tensor ... has wrong shape").
    Checked where the architecture table mirrors its loader's tensors (tensor_list), for the tensors in
    _SHAPE_CHECKED and the optional ones it lists (ArchRule.optional) the file holds; any other architecture or
    tensor is not refused on its shape."""
    arch = metadata.get(Keys.General.ARCHITECTURE)
    rule = RULES.get(arch) if isinstance(arch, str) else None
    if not isinstance(arch, str) or rule is None or rule.tensors is None:
        return
    n_vocab = _token_count(metadata) or _ne(shapes.get(TOKEN_EMBD, ()))[1]  # llama.cpp: vocab.n_tokens()
    try:
        # HParams refuses a block_count llama.cpp refuses, before a list of that many layers is built
        shape = Shape(HParams(metadata, arch), n_vocab, tied=OUTPUT not in shapes)
        expected = [t for t in rule.tensors(shape) if _SHAPE_CHECKED.match(t.name)]
        expected += rule.optional(shape) if rule.optional else []
    except (EvidenceError, ArithmeticError, LookupError):
        return  # hyperparameters its tensor list cannot be built from: derive_layout reports them
    for t in expected:
        got = shapes.get(t.name)
        if got is not None and _ne(got) != _ne(t.ne):
            raise EvidenceError(
                Limit.ARTIFACT_UNREADABLE,
                f"tensor {t.name!r} has shape {list(got)}, but the model's hyperparameters make it {list(t.ne)}:"
                " llama.cpp refuses it",
            )


def refuse_uncreated_tensors(metadata: dict, names: set[str]) -> None:
    """EvidenceError (artifactUnreadable) for a file holding a tensor its loader never creates (ArchRule.uncreated):
    llama_model_loader::done_getting_tensors counts the tensors created against the file's ("wrong number of
    tensors") and refuses it."""
    arch = metadata.get(Keys.General.ARCHITECTURE)
    rule = RULES.get(arch) if isinstance(arch, str) else None
    if not isinstance(arch, str) or rule is None or rule.uncreated is None:
        return
    try:
        extra = sorted(rule.uncreated(HParams(metadata, arch)) & names)
    except EvidenceError:
        return  # hyperparameters llama.cpp refuses: derive_layout reports them
    if extra:
        raise EvidenceError(
            Limit.ARTIFACT_UNREADABLE,
            f"the file holds {', '.join(repr(n) for n in extra)}, which the {arch} loader of {LLAMA_CPP_RELEASE} never"
            " creates: done_getting_tensors refuses it (wrong number of tensors)",
        )


def summarize(header: GGUFHeader) -> HeaderSummary:
    """The summary of a header llama.cpp would load: its tensors laid out one after another (gguf_init_from_file)
    and all inside the file (a truncated download is not a model); for a model's first file, also its keys of the
    types llama.cpp reads and tensors of the shapes its hyperparameters imply."""
    tensors = []
    expected_offset = 0
    for t in header.tensors:
        nbytes = tensor_bytes(t.shape, t.ggml_type)
        if t.offset != expected_offset:  # gguf_init_from_file: "tensor has offset ..., expected ..."
            raise EvidenceError(
                Limit.ARTIFACT_UNREADABLE,
                f"tensor {t.name!r} has offset {t.offset}, expected {expected_offset}: its data does not follow the"
                " tensor before it",
            )
        if header.data_offset + t.offset + nbytes > header.file_size:
            raise EvidenceError(
                Limit.ARTIFACT_UNREADABLE, f"tensor {t.name!r} lies outside the file's data (truncated or corrupt)"
            )
        expected_offset += round_up(nbytes, header.alignment)
        ne = _ne(t.shape)
        tensors.append((t.name, nbytes, t.ggml_type, ne[0], ne[1], ne[2] * ne[3]))
    metadata = header.metadata
    # a model's first file: later splits carry no hyperparameters, adapters and projectors are loaded without them
    if Keys.General.ARCHITECTURE in metadata and metadata.get(Keys.General.TYPE, MODEL) == MODEL:
        refuse_mistyped_keys(metadata, header.key_types)
        refuse_contradicted_shapes(metadata, {t.name: t.shape for t in header.tensors})
        refuse_uncreated_tensors(metadata, {t.name for t in header.tensors})
    return HeaderSummary(metadata, tuple(tensors))


def quant_name(metadata: dict, file_name: str) -> str:
    """llama.cpp's name of `general.file_type` (MOSTLY_Q4_K_M -> Q4_K_M), else one in the file name, else ''."""
    file_type = metadata.get(Keys.General.FILE_TYPE)
    if is_int(file_type):
        try:
            name = gguf.LlamaFileType(file_type).name
        except ValueError:
            name = ""
        if name and name != "GUESSED":
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    match = _QUANT_IN_NAME.search(file_name)
    return match.group(1).upper() if match else ""


def _token_count(metadata: dict) -> int | None:
    """The tokenizer's token count, when its list is strings (as llama.cpp's vocab loader requires)."""
    tokens = metadata.get(Keys.Tokenizer.LIST)
    if isinstance(tokens, SkippedArray):
        return tokens.count if tokens.item_type == gguf.GGUFValueType.STRING else None
    if isinstance(tokens, tuple):
        return len(tokens) if all(isinstance(t, str) for t in tokens) else None
    return None


def _vocab_size(metadata: dict, arch: str) -> int | None:
    """The tokenizer's token count, else `<arch>.vocab_size` when there is no token list; None when neither is a
    count llama.cpp could load."""
    size = (
        _token_count(metadata) if Keys.Tokenizer.LIST in metadata else file_value(metadata, arch, Keys.LLM.VOCAB_SIZE)
    )
    return size if is_int(size) and 0 < size <= MAX_VOCAB else None


def weights_on(facts: ArtifactFacts, variants: tuple[CpuVariant, ...]) -> tuple[int, int, str]:
    """(floor bytes, slack, note) of the weights under every one of `variants` (at least one)."""
    return variant_weights(facts.weights_bytes, facts.weights_note, facts.matrices, facts.tied, variants)


def mtp_weights(facts: ArtifactFacts, variants: tuple[CpuVariant, ...]) -> MtpWeights:
    """What the NextN/MTP layers' tensors add to the weights under every one of `variants` (at least one) when
    llama.cpp loads them (load_mtp): their padded bytes, and what the variants' extra buffer types pack of them."""
    floor, slack, _ = variant_weights(facts.mtp_bytes, "", facts.mtp_matrices, None, variants)
    packed = packed_range(facts.mtp_matrices, None, variants)
    return MtpWeights(facts.mtp_count, floor, slack, packed, head=facts.mtp_head)


def variant_weights(
    weights_bytes: int,
    weights_note: str,
    matrices: tuple[Matrix, ...],
    tied: Matrix | None,
    variants: tuple[CpuVariant, ...],
) -> tuple[int, int, str]:
    """weights_on for weights of `weights_bytes` (a file's, or a catalog entry's as its recipe types them): each
    variant's exact bytes (AMX's packing of the matrix weights, the tied output's second copy), the floor the
    least of them, the ceiling the most."""
    packed = {v.name: packing_bytes(v, matrices) for v in variants}
    copies = {v.name: tied_copy_bytes(v, tied) if tied is not None else (CPU, 0) for v in variants}
    each = [weights_bytes + packed[name] + copies[name][1] for name in packed]
    low, high = min(each), max(each)
    names = ", ".join(packed) if len(packed) <= 3 else f"{len(packed)} CPU variants'"
    note = f"{weights_note}; on llama.cpp's {names} CPU backend"
    if any(packed.values()):
        note += f": its AMX buffer packs the matrix weights it takes ({max(packed.values())} bytes more)"
    if tied is not None:
        kept = sorted({where for where, _ in copies.values()} - {CPU})
        name = QT(tied.ggml_type).name
        loaded = f"loaded again for the output in {' or '.join(kept)}" if kept else "the output itself: no second copy"
        note += f"; the tied token embedding ({name}) is {loaded}"
    if high > low:
        note += f"; the variants span {low} to {high} bytes"
    return low, high - low, note


def extra_buffer_bytes(matrices: tuple[Matrix, ...], tied: Matrix | None, variant: CpuVariant) -> int:
    """The weights `variant`'s extra buffer types (CPU_REPACK, AMX) hold: anonymous copies, packed from the file at
    load, and not host buffer types (ggml_backend_buft_is_host is false for them), so llama.cpp's fitter does not
    count them; the tied embedding's output copy among them (llama_model_loader::create_tensor's buffer types)."""
    packed = 0
    for m in matrices:
        where, nbytes = placement(variant, m)
        packed += m.count * padded(nbytes) if where != CPU else 0
    return packed + (tied_copy_bytes(variant, tied)[1] if tied is not None else 0)


def packed_range(
    matrices: tuple[Matrix, ...], tied: Matrix | None, variants: tuple[CpuVariant, ...]
) -> tuple[int, int]:
    """(least, most) of extra_buffer_bytes over `variants`."""
    each = [extra_buffer_bytes(matrices, tied, v) for v in variants] or [0]
    return min(each), max(each)


def refuse_other_kinds(metadata: dict, summaries: list[HeaderSummary]) -> None:
    """NotAModel for a GGUF llama.cpp would not run as a model: one whose general.type is not `model` (an adapter,
    an importance matrix, a projector), or one without tensors (the vocabulary-only files of llama.cpp's
    tokenizer tests carry a real model's hyperparameters and no weights; llama_model_load fails on them)."""
    kind = metadata.get(Keys.General.TYPE, MODEL)
    if kind != MODEL:
        raise NotAModel(str(kind), f"a GGUF of {Keys.General.TYPE} {kind!r}, not a model llama.cpp runs on its own")
    if not any(s.tensors for s in summaries):
        raise NotAModel("vocabulary", "the file holds no tensors (a vocabulary-only GGUF): llama.cpp cannot run it")


def artifact_facts(summaries: list[HeaderSummary], file_name: str) -> ArtifactFacts:
    """Facts of one model from the summaries of its file set (the first split holds the metadata)."""
    metadata = summaries[0].metadata
    arch = metadata.get(Keys.General.ARCHITECTURE)
    if not isinstance(arch, str):
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{Keys.General.ARCHITECTURE} is missing")
    refuse_other_kinds(metadata, summaries)
    sizes = {t[0]: t[1] for s in summaries for t in s.tensors}
    rule = RULES.get(arch)
    head = nextn_head(metadata, arch, sizes)
    first = first_nextn_layer(metadata, arch)
    if rule is not None and rule.nextn_head_required and not head and first is not None:
        raise EvidenceError(
            Limit.ARTIFACT_UNREADABLE,
            f"the file names {arch}'s NextN layer {first} but lacks its nextn.eh_proj, which the {arch} loader"
            " requires: llama.cpp refuses it (tensor not found)",
        )
    if rule is not None and rule.nextn_needs_head and not head and first is not None:
        metadata = loader_metadata(metadata, arch, sizes)  # every block a trunk layer
        norm = f"{gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ATTN_NORM].format(bid=first)}.weight"
        if norm not in sizes:  # the trunk layer's tensors are required: create_tensor's "tensor ... not found"
            raise EvidenceError(
                Limit.ARTIFACT_UNREADABLE,
                f"block {first} is a trunk layer to the {arch} loader (no nextn.eh_proj), and the file lacks its"
                f" {norm!r}: llama.cpp refuses it (tensor not found)",
            )
    skipped = mtp_tensors(metadata, arch, sizes)
    mtp_bytes = sum(padded(n) for name, n in sizes.items() if name in skipped)
    sizes = {name: n for name, n in sizes.items() if name not in skipped}
    loaded = {t[0]: t for s in summaries for t in s.tensors if t[0] in sizes}
    weights = sum(padded(n) for n in sizes.values())
    tied = TOKEN_EMBD in sizes and OUTPUT not in sizes
    note = WEIGHTS_NOTE
    if skipped:
        note += f"; the {len(skipped)} tensors of its NextN/MTP layers are not loaded for generation"
    tied_embedding, duplicate = None, 0
    if tied and rule is not None and rule.tied_embedding_twice:
        duplicate = padded(sizes[TOKEN_EMBD])  # its loader makes the output copy before token_embd
        weights += duplicate
        note += f"; {arch} loads its tied token embedding twice"
    elif tied:
        _, _, ggml_type, ne0, ne1, _ = loaded[TOKEN_EMBD]
        tied_embedding = Matrix(ggml_type, (ne0, ne1))

    limit = file_value(metadata, arch, Keys.LLM.CONTEXT_LENGTH)
    context_limit = limit if is_int(limit) and 0 < limit <= INT64_MAX else None
    n_vocab = _vocab_size(metadata, arch)
    try:  # every tensor of the file, the NextN layers' too (their blocks are the MTP draft graph's: GraphShape.nextn)
        listed = {t[0]: t for s in summaries for t in s.tensors}
        shapes = {name: t[3:] for name, t in listed.items()}  # (ne0, ne1, the rest)
        types = {name: t[2] for name, t in listed.items()}
        layout, error = derive_layout(metadata, arch, shapes, n_vocab, types), None
    except EvidenceError as exc:
        layout, error = None, exc.with_traceback(None)  # kept in the cache: no frames with it
    return ArtifactFacts(
        arch,
        quant_name(metadata, file_name),
        context_limit,
        n_vocab,
        weights,
        note,
        layout,
        error,
        tied_embedding,
        matmul_weights(loaded.values()),
        duplicate_bytes=duplicate,
        mtp_count=len(skipped),
        mtp_bytes=mtp_bytes,
        mtp_matrices=matmul_weights(t for s in summaries for t in s.tensors if t[0] in skipped),
        mtp_head=head,
    )


def matmul_weights(tensors: Iterable[tuple[str, int, int, int, int, int]]) -> tuple[Matrix, ...]:
    """The 2-D weights llama.cpp multiplies with MUL_MAT (every `.weight` of two dimensions but the tables it
    reads rows of), counted by type and shape: the ones an extra buffer type of the CPU backend may take."""
    counts = Counter(
        (ggml_type, (ne0, ne1))
        for name, _, ggml_type, ne0, ne1, rest in tensors
        if rest == 1 and ne1 > 1 and name.endswith(".weight") and name not in _ROW_TABLES
    )
    return tuple(Matrix(t, shape, n) for (t, shape), n in sorted(counts.items()))


# --- file sets on the Hugging Face Hub (memfit.readers.hub reads them) -----------------------------------------------


@dataclass
class Tally:
    """What one lookup cost: the requests it made and the body bytes it received."""

    requests: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class RemoteHeader:
    """One file's header as read from the Hub (or memfit's cache of it); `unreadable` says why there is none."""

    path: str
    etag: str
    size: int
    header: GGUFHeader | None
    unreadable: str = ""
    fetched_bytes: int = 0  # what reading it took when it was read (this lookup, or an earlier one)
    requests: int = 0


@dataclass(frozen=True)
class HubArtifact:
    """One quant of a repository at a commit: its files' headers, first split first, and its projector's."""

    model_id: str  # `org/repo:QUANT` as the Hub spells the repository and the file names the quant
    repo: str
    commit: str
    endpoint: str
    shards: tuple[RemoteHeader, ...]
    projector: RemoteHeader | None = None
    projector_problem: str = ""  # why the projector the repository holds could not be read
    tally: Tally = field(default_factory=Tally)  # what this lookup fetched (nothing when all came from the cache)


@dataclass(frozen=True)
class HubMiss:
    """A lookup that found no model: why; whether the Hub said there is none (else it could not be read); whether
    it was not asked (offline, and memfit's cache did not hold it)."""

    reason: str
    absent: bool = False
    offline: bool = False


Lookup = HubArtifact | HubMiss
