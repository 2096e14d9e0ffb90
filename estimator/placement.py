"""Where llama.cpp puts each byte across devices: weights, KV cache, recurrent state and the output buffer.

The mirror of llama.cpp's placement for a launcher's request (-ngl, -sm, -mg, -ts, -ot, --n-cpu-moe, --cpu-moe,
--n-cpu-ffn, --no-kv-offload, --no-host, --no-repack, mmap) on a list of GPUs: which device each layer and the
output layer sit on (llama_model::load_tensors), each weight's buffer type (llama_model_loader::create_tensor's
buffer type lists, overrides and the no-host-buffer-with-mmap rule), each layer's KV and recurrent state
(llama_kv_cache, llama_memory_recurrent) and the output buffer (llama_context::output_reserve). Every byte count is
what the buffer type allocates: ggml_backend_alloc_ctx_tensors_from_buft's aligned alloc sizes, or the mapped span
of the file for the CPU buffer of an mmapped model. Compute buffers (the scheduler's splits) are not here.

Not mirrored: the split buffer types of -sm row and the meta device of -sm tensor (refused), a GPU's supports_op
refusing an op or type (every op is taken, as the mock GPUs do), ACCEL devices, RPC servers, integrated GPUs,
lazily read tensors over 4 GiB, rollback snapshots of recurrent state.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from memfit.estimator.arch_rules import RULES
from memfit.estimator.architectures import kv_layer_flags, layers_of, sliding_window
from memfit.estimator.artifact import HeaderSummary, loader_metadata, mtp_tensors
from memfit.estimator.context import ContextGeometry, output_rows
from memfit.estimator.cpu_repack import REPACK, Matrix, extra_buffer_types, takes
from memfit.estimator.cpu_variant import CpuVariant
from memfit.estimator.devices import CPU, CPU_MAPPED, HOST, Device, DeviceKind, alloc_size, padded
from memfit.estimator.hparams import HParams
from memfit.estimator.kv_cache import CacheType, layer_cells
from memfit.estimator.layout import Layout
from memfit.estimator.mtp import draft_context, draft_output_bytes, draft_types
from memfit.estimator.recurrent_state import STATE_ELEMENT_BYTES, state_rows
from memfit.gguf_constants import GGUF_DEFAULT_ALIGNMENT, Keys
from memfit.integers import round_up

BLOCK = re.compile(r"^blk\.(\d+)\.")
TOKEN_EMBD = "token_embd.weight"
OUTPUT = "output.weight"
# llm_tensor_info_mapping: the input layer's tables (GGML_OP_GET_ROWS), always on the CPU list
INPUT_TABLES = frozenset({"token_embd", "position_embd", "token_types", "per_layer_token_embd"})
# ROPE_FREQS / ROPE_FACTORS_*: loaded by every layer (TENSOR_DUPLICATED after layer 0), one copy per buffer type
EVERY_LAYER = frozenset({"rope_freqs", "rope_factors_long", "rope_factors_short"})
# the encoders whose load_arch_tensors create no output, nor token_embd again as a tied one (no LM head)
NO_OUTPUT = frozenset(
    {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert", "neo-bert", "eurobert"}
)
# llama_model_gemma4::load_arch_tensors: rope_freqs created by the full-attention layers alone (!is_swa(i))
ROPE_FULL_LAYERS = frozenset({"gemma4"})
# LLM_TENSOR_LAYER_REPEATING tensors without a block number, which the loaders create at layer 0
FIRST_LAYER = frozenset({"token_embd_norm", "per_layer_model_proj", "per_layer_proj_norm"})
# LLM_TENSOR_OUTPUT_NORM_LFM2 is named token_embd_norm: the output layer's norm in these architectures
OUTPUT_NAMED_TOKEN_EMBD_NORM = frozenset({"lfm2", "lfm2moe"})
# common/common.h: LLM_FFN_EXPS_REGEX, LLM_FFN_DENSE_REGEX, llm_ffn_block_regex
FFN_EXPS = "\\.ffn_(up|down|gate|gate_up)_(ch|)exps"
FFN_DENSE = "\\.ffn_(up|down|gate)\\."


class SplitMode(Enum):
    NONE = "none"  # the main GPU alone
    LAYER = "layer"  # layers across the GPUs (llama.cpp's default)
    ROW = "row"  # split buffer types (not mirrored)
    TENSOR = "tensor"  # a meta device over the GPUs (not mirrored)


class PlacementUnsupported(ValueError):
    """A request or model whose placement this mirror does not derive."""


@dataclass(frozen=True)
class Placement:
    """A launcher's placement flags, each with llama.cpp's default."""

    gpu_layers: int | None = None  # -ngl; None: all layers and the output layer (n_gpu_layers -1)
    split_mode: SplitMode = SplitMode.LAYER  # -sm
    main_gpu: int = 0  # -mg
    tensor_split: tuple[float, ...] = ()  # -ts; empty or all zero: by each device's free memory
    overrides: tuple[tuple[str, str], ...] = ()  # -ot pattern=buffer type, in order (the first match wins)
    cpu_moe: bool = False  # --cpu-moe
    n_cpu_moe: int = 0  # --n-cpu-moe N
    n_cpu_ffn: int = 0  # --n-cpu-ffn N
    kv_offload: bool = True  # --no-kv-offload: False
    op_offload: bool = True  # --no-op-offload: False (the scheduler's business, not placement's)
    no_host: bool = False  # --no-host: no pinned host buffer for CPU-side weights
    extra_buffers: bool = True  # --no-repack: False (no CPU_REPACK, no AMX)
    mmap: bool = False  # the file mapped (llama.cpp's default load mode); False: read into buffers


@dataclass(frozen=True, slots=True)
class Weight:
    """One tensor of the file set, as llama.cpp's loader sees it."""

    name: str
    ggml_type: int
    ne: tuple[int, int, int, int]
    nbytes: int
    file: int = 0  # which file of a split set
    offset: int = 0  # in that file's data section


@dataclass(frozen=True)
class ModelTensors:
    """What placement needs of a model: its tensors and which layers hold a cache."""

    architecture: str
    n_layer: int  # n_layer_all (block_count, NextN/MTP layers included): the layers assigned to devices
    n_vocab: int
    weights: tuple[Weight, ...]  # the tensors llama.cpp loads (NextN/MTP layers' left out)
    tied_twice: bool = False  # the loader creates the tied output before token_embd: always two copies
    kv_layers: tuple[int, ...] = ()  # the layer of each of layout.caches[0].layers (the others' KvCache.layer_ids)
    recurrent_layers: tuple[int, ...] = ()  # the layer of each of layout.recurrent (deepseek4's compressor states too)
    n_nextn: int = 0  # hparams.n_layer_nextn: the NextN/MTP layers at the end of n_layer (not loaded without MTP)
    mtp_weights: tuple[Weight, ...] = ()  # the NextN/MTP layers' tensors, which only load_mtp loads
    rope_layers: tuple[int, ...] | None = None  # the layers that load the rope tables (EVERY_LAYER; None: all)

    def with_mtp(self) -> ModelTensors:
        """The model as llama.cpp loads it with load_mtp (llama-server's --spec-type draft-mtp): the NextN/MTP
        layers' tensors loaded too (each architecture's load_arch_tensors drops TENSOR_SKIP from them)."""
        return replace(self, weights=self.weights + self.mtp_weights, mtp_weights=())

    @property
    def n_trunk(self) -> int:
        """hparams.n_layer(): the layers less the NextN/MTP ones (llama_model_n_layer)."""
        return self.n_layer - self.n_nextn

    @property
    def tied(self) -> bool:
        """No output.weight: the output is token_embd again, created as TENSOR_DUPLICATED."""
        names = {w.name for w in self.weights}
        return TOKEN_EMBD in names and OUTPUT not in names and self.architecture not in NO_OUTPUT


@dataclass(frozen=True)
class Buffers:
    """The bytes of one buffer type, by what they hold."""

    buffer_type: str
    pool: str  # the memory it is in: a device's name, HOST, or an extra CPU buffer type's own name
    weights: int = 0
    kv: int = 0
    recurrent: int = 0
    output: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.recurrent + self.output


@dataclass(frozen=True)
class PlacedTensor:
    name: str
    layer: int | None  # its block (None: the input or output layer, or a table every layer loads)
    buffer_types: tuple[str, ...]  # one per copy llama.cpp creates (a tied output or rope table may add one)


@dataclass(frozen=True)
class PlacementResult:
    devices: tuple[str, ...]  # the model's devices (llama_model::devices)
    layer_devices: tuple[str, ...]  # each layer's device (CPU: the host)
    output_device: str
    tensors: tuple[PlacedTensor, ...]
    buffers: tuple[Buffers, ...]
    output_buffer_type: str
    output_buffer_bytes: int
    notes: tuple[str, ...] = field(default=())

    def by_buffer_type(self, part: str) -> dict[str, int]:
        """One part (weights, kv, recurrent, output) per buffer type, where it is not zero."""
        return {b.buffer_type: getattr(b, part) for b in self.buffers if getattr(b, part)}

    def by_pool(self) -> dict[str, Buffers]:
        """The parts summed per pool (a device, the host, an extra CPU buffer type)."""
        pools: dict[str, Buffers] = {}
        for b in self.buffers:
            p = pools.get(b.pool, Buffers(b.pool, b.pool))
            pools[b.pool] = Buffers(
                b.pool,
                b.pool,
                p.weights + b.weights,
                p.kv + b.kv,
                p.recurrent + b.recurrent,
                p.output + b.output,
            )
        return pools


# --- the model's tensors ----------------------------------------------------------------------------------------


def _offsets(summary: HeaderSummary, alignment: int) -> list[int]:
    # gguf_init_from_file: each tensor's data at the previous one's end, padded to general.alignment
    out, at = [], 0
    for t in summary.tensors:
        out.append(at)
        at += round_up(t[1], alignment)
    return out


def model_tensors(summaries: Sequence[HeaderSummary], n_vocab: int) -> ModelTensors:
    """The placement input of a file set (the first file holds the metadata)."""
    arch = summaries[0].metadata[Keys.General.ARCHITECTURE]
    rule = RULES.get(arch)
    if rule is None:
        raise PlacementUnsupported(f"no layout rule for architecture {arch!r}")
    sizes = {t[0]: t[1] for s in summaries for t in s.tensors}
    metadata = loader_metadata(summaries[0].metadata, arch, sizes)  # a headless NextN layer a trunk layer
    alignment = metadata.get(Keys.General.ALIGNMENT, GGUF_DEFAULT_ALIGNMENT)
    weights = []
    shapes: dict[tuple[int, int, int, int], tuple[int, int, int, int]] = {}  # each shape held once
    for file, s in enumerate(summaries):
        for (name, nbytes, ggml_type, ne0, ne1, rest), offset in zip(s.tensors, _offsets(s, alignment), strict=True):
            ne = (ne0, ne1, rest, 1)
            weights.append(Weight(name, ggml_type, shapes.setdefault(ne, ne), nbytes, file, offset))
    skipped = mtp_tensors(metadata, arch, sizes)
    layers = layers_of(rule, HParams(metadata, arch), {w.name: w.ne[:3] for w in weights})  # (ne0, ne1, the rest)
    kv = tuple(il for il, keep in enumerate(kv_layer_flags(rule, layers)) if keep)
    recurrent = tuple(il for il in range(layers.n_trunk) if layers.recurrent[il])
    if rule.compression is not None:  # layout.recurrent's compressor states, after the recurrent layers' states
        recurrent += rule.compression.state_layers(layers)
    rope_layers = None
    if arch in ROPE_FULL_LAYERS:
        sliding = sliding_window(rule.window, layers)[1]
        rope_layers = tuple(il for il in range(layers.n_trunk) if not sliding[il])
    return ModelTensors(
        arch,
        layers.n_all,
        n_vocab,
        tuple(w for w in weights if w.name not in skipped),
        rule.tied_embedding_twice,
        kv,
        recurrent,
        layers.n_all - layers.n_trunk,
        tuple(w for w in weights if w.name in skipped),
        rope_layers,
    )


# --- devices and layers -----------------------------------------------------------------------------------------


def f32(x: float) -> float:
    """x rounded to a C float (llama.cpp computes the layer split in float)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def model_devices(devices: Sequence[Device], request: Placement) -> tuple[Device, ...]:
    # llama.cpp's llama_prepare_model_devices: the discrete GPUs in registry order, else the integrated ones of the
    # first integrated GPU's backend; -sm none keeps the main GPU alone (none at all for a negative -mg)
    if request.split_mode in (SplitMode.ROW, SplitMode.TENSOR):
        raise PlacementUnsupported(f"-sm {request.split_mode.value} is not mirrored")
    used = tuple(d for d in devices if d.kind is DeviceKind.GPU)
    if not used:
        igpus = [d for d in devices if d.kind is DeviceKind.IGPU]
        used = tuple(d for d in igpus if d.backend == igpus[0].backend)
    if request.split_mode is SplitMode.NONE and used:
        if request.main_gpu < 0:
            return ()
        if request.main_gpu >= len(used):
            raise PlacementUnsupported(f"-mg {request.main_gpu}: there are {len(used)} GPUs")
        return (used[request.main_gpu],)
    return used


def split_points(devices: Sequence[Device], tensor_split: Sequence[float]) -> list[float]:
    # llama_model::load_tensors: the -ts shares (the first n_devices() of them), or each device's free memory when
    # all are zero, summed cumulatively and normalized, in float
    shares = [float(tensor_split[i]) if i < len(tensor_split) else 0.0 for i in range(len(devices))]
    if all(x == 0.0 for x in shares):
        shares = [float(d.free) for d in devices]
    points, total = [], 0.0
    for x in shares:
        total = f32(total + f32(x))
        points.append(total)
    return [f32(p / total) for p in points]


def gpu_layer_count(n_layer: int, gpu_layers: int | None) -> int:
    # llama_model::n_gpu_layers: a negative -ngl (llama.cpp's default -1) is every layer and the output layer
    return n_layer + 1 if gpu_layers is None or gpu_layers < 0 else gpu_layers


def layer_devices(n_layer: int, gpu_layers: int | None, devices: Sequence[Device], splits: Sequence[float]) -> list:
    # load_tensors' get_layer_buft_list for il = 0..n_layer (n_layer: the output layer): the last -ngl of them on
    # the GPUs (i_gpu_start = n_layer + 1 - ngl), each on the first device whose split point is above its share
    # (std::upper_bound); the others on the CPU (None)
    ngl = gpu_layer_count(n_layer, gpu_layers)
    start = max(n_layer + 1 - ngl, 0)
    active = min(ngl, n_layer + 1) if devices else 0
    out: list[Device | None] = []
    for il in range(n_layer + 1):
        if il < start or il - start >= active:
            out.append(None)
            continue
        x = f32(f32(il - start) / f32(active))
        out.append(devices[next(i for i, p in enumerate(splits) if p > x)])
    return out


# --- buffer types of the weights --------------------------------------------------------------------------------


def overrides(request: Placement) -> list[tuple[str, str]]:
    # common/arg.cpp: -ot pairs, then --cpu-moe's and --n-cpu-moe's expert patterns and --n-cpu-ffn's dense FFN
    # patterns to the CPU (llama.cpp appends them in the order of the command line; this order is -ot first)
    out = list(request.overrides)
    if request.cpu_moe:
        out.append((FFN_EXPS, CPU))
    out += [(f"blk\\.{i}{FFN_EXPS}", CPU) for i in range(request.n_cpu_moe)]
    out += [(f"blk\\.{i}{FFN_DENSE}", CPU) for i in range(request.n_cpu_ffn)]
    return out


def tensor_layer(
    arch: str, name: str, n_layer: int, rope_layers: tuple[int, ...] | None = None
) -> tuple[int | None, tuple[int, ...]]:
    """(the layer whose buffer type list a tensor is created with, None for the input layer, n_layer for the output
    layer; the layers that create it, for a table every layer loads: `rope_layers`, where not all of them)."""
    m = BLOCK.match(name)
    if m:
        return int(m.group(1)), ()
    stem = name.rsplit(".", 1)[0]
    if stem in INPUT_TABLES:
        return None, ()
    if stem in EVERY_LAYER:
        every = tuple(range(n_layer)) if rope_layers is None else rope_layers
        return (every[0] if every else 0), every
    if stem in FIRST_LAYER and not (stem == "token_embd_norm" and arch in OUTPUT_NAMED_TOKEN_EMBD_NORM):
        return 0, ()
    return n_layer, ()


def matmul(weight: Weight, as_output: bool = False) -> str | None:
    """The matrix op llama.cpp tests a weight's buffer type with (weight_buft_supported), where an extra CPU buffer
    type could take it: MUL_MAT for a 2-D `.weight`, MUL_MAT_ID for a 3-D expert `.weight`; None for the row
    tables (GET_ROWS), biases, norms and vectors. A tied output is token_embd tested as the output's MUL_MAT."""
    stem, _, suffix = weight.name.rpartition(".")
    if suffix != "weight" or weight.ne[1] <= 1 or (stem in INPUT_TABLES and not as_output):
        return None
    if weight.ne[2] * weight.ne[3] == 1:
        return "MUL_MAT"
    return "MUL_MAT_ID" if stem.endswith("_exps") and weight.ne[3] == 1 else None


@dataclass(frozen=True)
class BufferTypes:
    """The buffer types a model's placement can use, by name: the devices', the pinned host one, the CPU's."""

    devices: tuple[Device, ...]  # every registered GPU (an override may name one the model does not use)
    cpu_list: tuple[str, ...]  # make_cpu_buft_list: the pinned host buffer, the extra ones, CPU
    variant: CpuVariant

    def device(self, buffer_type: str) -> Device | None:
        return next((d for d in self.devices if d.name == buffer_type), None)

    @property
    def host_buffer_types(self) -> frozenset[str]:
        return frozenset(d.host_buffer_type for d in self.devices if d.host_buffer_type)

    def pool(self, buffer_type: str) -> str:
        """Where the bytes live: a device, the host (CPU and the pinned host buffers: is_host), or an extra CPU
        buffer type (CPU_REPACK, AMX: not is_host, counted apart as llama.cpp's memory breakdown does)."""
        if buffer_type in (CPU, CPU_MAPPED) or buffer_type in self.host_buffer_types:
            return HOST
        return buffer_type


def cpu_buffer_list(devices: Sequence[Device], request: Placement, variant: CpuVariant) -> tuple[str, ...]:
    # make_cpu_buft_list: the host buffer type of the first model device that has one (unless --no-host), the
    # CPU backend's extra buffer types (unless --no-repack), then the CPU buffer type
    host = () if request.no_host else tuple(d.host_buffer_type for d in devices if d.host_buffer_type)[:1]
    extra = tuple(b.name for b in extra_buffer_types(variant)) if request.extra_buffers else ()
    return (*host, *extra, CPU)


def select_cpu(types: BufferTypes, weight: Weight, as_output: bool = False) -> str:
    # select_weight_buft over the CPU list: a pinned host buffer takes any weight (its GPU's supports_op), an
    # extra buffer type the matrices it packs (cpu_repack: MUL_MAT; CPU_REPACK also MUL_MAT_ID's 3-D experts,
    # repack.cpp's supports_op), the CPU buffer type everything
    op = matmul(weight, as_output)
    extra = {b.name: b for b in extra_buffer_types(types.variant)}
    for name in types.cpu_list:
        if name == CPU or name in types.host_buffer_types:
            return name
        packs = op == "MUL_MAT" or (op == "MUL_MAT_ID" and name == REPACK)
        if packs and takes(extra[name], Matrix(weight.ggml_type, weight.ne[:2])) is not None:
            return name
    return CPU


def buffer_type(
    types: BufferTypes,
    weight: Weight,
    layer_device: Device | None,
    rules: Sequence[tuple[str, str]],
    mmap: bool,
    as_output: bool = False,
) -> str:
    # llama_model_loader::create_tensor's buft_for_tensor: the first override whose pattern the name contains (to
    # the CPU: the CPU list; else that buffer type as named), else the first of the layer's list that takes the
    # weight (a GPU's own buffer type takes any); with mmap, a pinned host buffer is replaced by the CPU's, and the
    # CPU's is the mapped file (llama_model::load_tensors: ggml_backend_dev_buffer_from_host_ptr, CPU_Mapped)
    chosen = None
    for pattern, target in rules:
        if re.search(pattern, weight.name):
            chosen = select_cpu(types, weight, as_output) if target == CPU else target
            break
    if chosen is None:
        chosen = layer_device.name if layer_device is not None else select_cpu(types, weight, as_output)
    if mmap and (chosen in types.host_buffer_types or chosen == CPU):
        return CPU_MAPPED
    return chosen


@dataclass(frozen=True)
class _Copy:
    weight: Weight
    buffer_type: str


def _copies(
    model: ModelTensors,
    types: BufferTypes,
    layers: Sequence[Device | None],
    request: Placement,
) -> list[tuple[PlacedTensor, list[_Copy]]]:
    rules = overrides(request)
    out = []
    for w in model.weights:
        layer, every = tensor_layer(model.architecture, w.name, model.n_layer, model.rope_layers)
        device = layers[layer] if layer is not None else None
        bufts = [buffer_type(types, w, device, rules, request.mmap)]
        # TENSOR_DUPLICATED: a rope table once per buffer type of the layers loading it
        for il in every[1:]:
            b = buffer_type(types, w, layers[il], rules, request.mmap)
            if b not in bufts:
                bufts.append(b)
        if w.name == TOKEN_EMBD and model.tied:
            # the tied output: token_embd created again on the output layer's list (tested as its MUL_MAT), a copy
            # unless it lands in token_embd's own buffer type (or always, where the loader creates it first)
            b = buffer_type(types, w, layers[model.n_layer], rules, request.mmap, as_output=True)
            if model.tied_twice or b not in bufts:
                bufts.append(b)
        copies = [_Copy(w, b) for b in bufts]
        block = BLOCK.match(w.name)
        out.append((PlacedTensor(w.name, int(block.group(1)) if block else None, tuple(bufts)), copies))
    return out


def weights_bytes(types: BufferTypes, copies: Sequence[_Copy]) -> dict[str, int]:
    # llama_model::memory_breakdown: per buffer type, its context's tensors at their aligned alloc sizes
    # (ggml_backend_alloc_ctx_tensors_from_buft); an mmapped model's CPU buffer is the span of the file its CPU
    # tensors cover, per file (ggml_backend_dev_buffer_from_host_ptr over get_mapping_range)
    out: dict[str, int] = {}
    spans: dict[int, tuple[int, int]] = {}
    for c in copies:
        w = c.weight
        if c.buffer_type == CPU_MAPPED:
            first, last = spans.get(w.file, (w.offset, w.offset + w.nbytes))
            spans[w.file] = (min(first, w.offset), max(last, w.offset + w.nbytes))
            continue
        device = types.device(c.buffer_type)
        out[c.buffer_type] = out.get(c.buffer_type, 0) + padded(
            device, alloc_size(device, w.nbytes, w.ggml_type, w.ne[0])
        )
    if spans:
        out[CPU_MAPPED] = sum(last - first for first, last in spans.values())
    return out


# --- caches and the output buffer -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """The context's memory as llama.cpp sizes it: the cells, the streams and the cache types."""

    layout: Layout
    geometry: ContextGeometry
    k_type: CacheType
    v_type: CacheType


def _tensor_bytes(device: Device | None, ctype: CacheType, width: int, rows: int) -> int:
    # a cache tensor of `rows` rows of `width` elements in its buffer type: its alloc size, aligned
    nbytes = rows * ctype.row_bytes(width)
    size = alloc_size(device, nbytes, int(ctype.ggml_type), width) if ctype.ggml_type is not None else nbytes
    return padded(device, size)


def cache_buffer(request: Placement, layer_device: Device | None) -> Device | None:
    # llama_kv_cache / llama_memory_recurrent: a layer's cache in its layer's device buffer type when offload_kqv,
    # else (and for a CPU layer) in the CPU buffer type
    return layer_device if request.kv_offload else None


def kv_bytes(model: ModelTensors, memory: Memory, request: Placement, layers: Sequence[Device | None]) -> dict:
    # llama_kv_cache's constructor: per layer a K tensor [n_embd_k_gqa, kv_size, n_stream] and (but for MLA) a V
    # tensor [n_embd_v_gqa, kv_size, n_stream], V as wide as the widest layer's when transposed (no flash attention),
    # in its layer's buffer type; the same for each cache beside the main one (llama_kv_cache_dsa's and
    # llama_memory_hybrid_idx's indexer cache, llama_kv_cache_dsv4's compressed caches: llama_kv_caches of their own
    # over the layers their filters keep)
    out: dict[str, int] = {}
    g = memory.geometry
    for i, cache in enumerate(memory.layout.caches):
        ids = model.kv_layers if i == 0 else cache.layer_ids
        if len(cache.layers) != len(ids):
            raise PlacementUnsupported("the KV layers do not match the layout's")
        for layer, il in zip(cache.layers, ids, strict=True):
            device = cache_buffer(request, layers[il])
            rows = layer_cells(layer, g) * g.n_stream
            n = _tensor_bytes(device, memory.k_type, layer.k_width, rows)
            if layer.has_v:
                width = cache.v_width_max if g.v_trans else layer.v_width  # llama_kv_cache: n_embd_v_gqa_max
                n += _tensor_bytes(device, memory.v_type, width, rows)
            name = device.name if device is not None else CPU
            out[name] = out.get(name, 0) + n
    return out


def draft_kv_placed(model: ModelTensors, memory: Memory, request: Placement, layers: Sequence[Device | None]) -> dict:
    # llama-server's MTP draft context (estimator/mtp.py) under draft-mtp (the geometry's nextn rows): its
    # llama_kv_cache's K and V tensors of each layer it holds (the NextN ones, or every layer: mtp.ALL_LAYERS_CACHE,
    # ALL_LAYERS_ISWA_CACHE with each layer's own cells) in that layer's buffer type, as the target's caches are
    draft = draft_context(model.architecture, memory.layout) if memory.geometry.nextn_width else None
    if draft is None:
        return {}
    g, out = memory.geometry, dict[str, int]()
    k_type, v_type = draft_types(g.draft.key_element_bytes, g.draft.value_element_bytes)
    for il, cells in zip(range(model.n_layer - draft.layers, model.n_layer), draft.layer_cells(g), strict=True):
        rows = cells * g.n_stream
        device = cache_buffer(request, layers[il])
        n = _tensor_bytes(device, k_type, draft.k_width, rows)
        if draft.v_width:
            n += _tensor_bytes(device, v_type, draft.v_row(g), rows)
        name = device.name if device is not None else CPU
        out[name] = out.get(name, 0) + n
    return out


def recurrent_bytes(model: ModelTensors, memory: Memory, request: Placement, layers: Sequence[Device | None]) -> dict:
    # llama_memory_recurrent's constructor: per recurrent layer an R [n_embd_r, n_rows] and an S [n_embd_s, n_rows]
    # F32 tensor, n_rows = max(1, n_seq_max) * (1 + n_rs_seq)
    out: dict[str, int] = {}
    rows = state_rows(memory.layout, memory.geometry)
    for state, il in zip(memory.layout.recurrent, model.recurrent_layers, strict=True):
        device = cache_buffer(request, layers[il])
        n = padded(device, state.r_elements * STATE_ELEMENT_BYTES * rows)
        n += padded(device, state.s_elements * STATE_ELEMENT_BYTES * rows)
        if state.p_elements:  # qwen4exp: a PLE layer's cache_ple_r tensor
            n += padded(device, state.p_elements * STATE_ELEMENT_BYTES * rows)
        name = device.name if device is not None else CPU
        out[name] = out.get(name, 0) + n
    return out


def output_buffer(row_floats: int, rows: int, output_device: Device | None, nextn_floats: int = 0) -> tuple[str, int]:
    # llama_context::output_reserve: `rows` outputs of `row_floats` floats (n_vocab logits, and n_embd_out embeddings
    # under cparams.embeddings; n_seq_max rows, or more while llama-server verifies drafts or every token is an
    # output: workspace.output_rows), and the nextn embeddings' `nextn_floats` under llama-server's draft-mtp
    # (workspace.output_floats), in the pinned host buffer type of the output layer's device (whatever --no-host
    # says), else the CPU's
    host = output_device.host_buffer_type if output_device is not None else None
    return host or CPU, (row_floats * rows + nextn_floats) * 4


# --- the whole placement ----------------------------------------------------------------------------------------


def place(
    model: ModelTensors,
    memory: Memory,
    devices: Sequence[Device],
    request: Placement,
    variant: CpuVariant,
) -> PlacementResult:
    """Where llama.cpp puts `model`'s weights, caches and output buffer on `devices` (every GPU registered, in
    order) for `request`, with the CPU backend of `variant`."""
    used = model_devices(devices, request)
    layers = layer_devices(model.n_layer, request.gpu_layers, used, split_points(used, request.tensor_split))
    types = BufferTypes(tuple(devices), cpu_buffer_list(used, request, variant), variant)
    known = {CPU, *(d.name for d in devices), *types.host_buffer_types}
    unknown = sorted({target for _, target in request.overrides} - known)
    if unknown:  # common/arg.cpp's parse_tensor_buffer_overrides: "unknown buffer type"
        raise PlacementUnsupported(f"-ot names unknown buffer types {', '.join(unknown)} (known: {', '.join(known)})")
    placed = _copies(model, types, layers, request)
    kv = kv_bytes(model, memory, request, layers)
    for name, n in draft_kv_placed(model, memory, request, layers).items():
        kv[name] = kv.get(name, 0) + n
    parts: dict[str, dict[str, int]] = {
        "weights": weights_bytes(types, [c for _, cs in placed for c in cs]),
        "kv": kv,
        "recurrent": recurrent_bytes(model, memory, request, layers),
    }
    g = memory.geometry
    out_type, out_bytes = output_buffer(
        model.n_vocab + g.embd_width, output_rows(g), layers[model.n_layer], g.nextn_width * g.n_batch
    )
    if draft_context(model.architecture, memory.layout) is not None and g.nextn_width:
        # the MTP draft context's output buffer, in the same buffer type (output_reserve: dev_output's host type)
        out_bytes += draft_output_bytes(model.n_vocab, g.nextn_width, g)
    parts["output"] = {out_type: out_bytes}
    names = sorted({b for part in parts.values() for b in part})
    buffers = tuple(
        Buffers(b, types.pool(b), *(parts[k].get(b, 0) for k in ("weights", "kv", "recurrent", "output")))
        for b in names
    )
    return PlacementResult(
        tuple(d.name for d in used),
        tuple(d.name if d is not None else CPU for d in layers[: model.n_layer]),
        layers[model.n_layer].name if layers[model.n_layer] is not None else CPU,
        tuple(t for t, _ in placed),
        buffers,
        out_type,
        out_bytes,
    )
