"""llama.cpp's compute buffer on every backend: the backend scheduler's split graph, allocated.

llama.cpp reserves one compute buffer per backend (llama_context::sched_reserve): ggml_backend_sched_split_graph
(ggml/src/ggml-backend.cpp) assigns each node of the reserved graph to a backend (the model's GPUs in order, the CPU
last), cuts the graph into splits of one backend each, and copies every input a split reads from another backend's
memory into its own; ggml_gallocr_reserve_n (ggml-alloc.c, estimator/graph_alloc.py) then places each backend's
tensors in that backend's buffer. This module mirrors both over the rebuilt graph (estimator/compute_graph.py),
whose nodes name the layer they were made in, where their weights sit among their sources, and the pins llama.cpp's
callbacks put on them; the weights' and caches' buffer types come from the placement (estimator/placement.py).

Two modes, as llama.cpp sizes its buffers:
- DRY: a dry run (no_alloc: common_fit_params, llama-server's dry sizing) takes the sizes of the first
  prompt-processing graph from ggml_backend_sched_reserve_size, which resets the scheduler after the graph was built:
  the pins are lost (the mock-GPU README's section 6.1).
- REAL: a loading context reserves the prompt-processing graph, the token-generation graph (n_seq tokens), then the
  prompt-processing graph again with ggml_backend_sched_reserve, pins kept; a buffer only grows, so each is the
  largest of the two graphs'.

The device's rules: each GPU buffer's alignment and get_alloc_size (ggml-cuda pads a quantized matrix's rows: a
weight copied in), and ggml-cuda's graph_optimize, which keeps a fused MoE weighted sum's experts and weights
allocated until its last ADD (add_alloc_dep; Device.moe_alloc_dep). The floor (`bytes`) leaves out, the ceiling
(`ceilings`) holds, the F16 copies of a quantized K and V that ggml-cuda's alloc size gives a prompt's flash
attention when its TILE or MMA kernel runs (ggml_cuda_flash_attn_ext_get_alloc_size, ggml-cuda/fattn.cu): the kernel
follows the GPU's compute capability, which no CPU run shows.

Not in any compute buffer, so not here (the device's own ceiling terms, named for the caller): the CUDA context
(the runtime's per-device state), cuBLAS's handles and workspace (ggml-cuda/common.cuh ggml_cuda_get_cublas_handle),
ggml-cuda's memory pool for temporaries (ggml_cuda_pool_leg / ggml_cuda_pool_vmm in ggml-cuda.cu: dequantized
weights for cuBLAS, quantized activations for MMQ, the MoE sorted rows of ggml_cuda_mul_mat_id) and CUDA graphs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from memfit.estimator.compute_graph import build_graph, ubatch_tokens
from memfit.estimator.context import ContextGeometry
from memfit.estimator.cpu_repack import AMX, REPACK
from memfit.estimator.devices import CPU, CPU_MAPPED, HOST, AllocRule, Device, cuda_alloc_size
from memfit.estimator.ggml_graph import CACHE_TYPES, F32, KQV_PIN, NORM_PIN, VIEWED, VIEWED_ROW, Graph, Tensor
from memfit.estimator.graph_alloc import ALIGNMENT, AllocGraph, Buffer, replay_n
from memfit.estimator.graph_minimax import MinimaxGraph, reserved_sequences
from memfit.estimator.layout import Mixer
from memfit.estimator.placement import (
    EVERY_LAYER,
    INPUT_TABLES,
    TOKEN_EMBD,
    Memory,
    ModelTensors,
    Placement,
    PlacementResult,
    PlacementUnsupported,
    SplitMode,
    Weight,
    gpu_layer_count,
    overrides,
)
from memfit.gguf_constants import GGMLQuantizationType as QT

# ggml-backend.cpp: GGML_SCHED_MAX_COPIES (the input copies with pipeline parallelism), GGML_SCHED_MAX_SPLIT_INPUTS
MAX_COPIES = 4
SPLIT_INPUTS = 30
# ggml-cuda.cu: GGML_OP_OFFLOAD_MIN_BATCH, the batch from which ggml-cuda's offload_op takes an op whose weights
# are in host memory
OFFLOAD_MIN_BATCH = 32
# ggml.c ggml_is_view_op: the ops that only view their source
VIEW_OPS = frozenset({"RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE"})
# ggml_backend_sched_backend_id_from_cur: ops never placed by their weights (rope freqs, attention sinks are small)
NOT_BY_WEIGHT = frozenset({"ROPE", "FLASH_ATTN_EXT"})
EXTRA_CPU = frozenset({REPACK, AMX.name})  # the CPU backend's extra buffer types (not host memory)
Sources = Callable[[Tensor], Sequence[Tensor]]  # a node's sources as the split graph has them (copies in place)
MOE_REDUCTION_MAX_EXPERTS = 15  # ggml-cuda.cu: MOE_WEIGHTED_REDUCTION_MAX_EXPERTS, the fused sum's limit
FATTN_VEC_ROWS = 2  # ggml_cuda_get_best_fattn_kernel: the VEC kernel (no F16 copies) for Q of up to 2 rows
TOKEN_GENERATION_MAX = 32  # graph_get_cb: the pins apply to a ubatch of fewer tokens (or a full offload)


class Mode(Enum):
    DRY = "dry"  # llama.cpp's dry run (no_alloc): the first prompt-processing graph, its pins reset
    REAL = "real"  # a loading context: the prompt-processing and token-generation graphs, pins kept


@dataclass(frozen=True)
class Backend:
    """One backend of the scheduler, in its priority order (llama_context: the model's devices, then the CPU)."""

    name: str  # ggml_backend_name: the device's name, or CPU
    buffer_type: str  # its compute buffer's type (llama_context's backend_buft)
    device: Device | None = None  # None: the CPU backend

    def buffer(self, ceiling: bool = False) -> Buffer:
        """ggml_gallocr's rules for this buffer type: the device's alignment and alloc size (`ceiling`: with the
        flash-attention kernels' F16 copies), or the host's."""
        if self.device is None:
            return Buffer(ALIGNMENT)
        return Buffer(self.device.alignment, _alloc_size(self.device, ceiling))


@dataclass(frozen=True)
class Split:
    backend: str
    inputs: tuple[int, ...]  # bytes of each tensor copied in from another backend (one copy of n_copies)


@dataclass(frozen=True)
class Schedule:
    """The scheduler's answer for one graph: its splits, the input copies, each backend's compute buffer."""

    splits: tuple[Split, ...]
    n_copies: int
    buffers: dict[str, int]  # backend -> bytes of its compute buffer
    ceilings: dict[str, int]  # backend -> bytes with ggml-cuda's flash-attention F16 copies of a quantized K and V


@dataclass(frozen=True)
class ComputeBuffers:
    """Each backend's compute buffer as llama.cpp reserves it in one mode, with the prompt-processing graph's
    schedule (and the token-generation graph's, in REAL mode)."""

    backends: tuple[Backend, ...]
    bytes: dict[str, int]  # backend -> bytes
    ceilings: dict[str, int]  # backend -> bytes if ggml-cuda's TILE or MMA flash-attention kernel runs (CEILING)
    pp: Schedule
    tg: Schedule | None = None
    flash_attention: bool = True  # flash attention as the context runs it (`auto` resolved)

    def by_pool(self, ceiling: bool = False) -> dict[str, int]:
        """The buffers per pool, as placement's `by_pool` names them: each GPU's own, and HOST (the CPU backend's,
        in the first GPU's pinned host buffer type or the CPU's); `ceiling`: the ceilings'."""
        sizes = self.ceilings if ceiling else self.bytes
        out: dict[str, int] = {}
        for b in self.backends:
            pool = HOST if b.device is None else b.name
            out[pool] = out.get(pool, 0) + sizes[b.name]
        return out

    def bounds_by_pool(self) -> dict[str, tuple[int, int]]:
        """Per pool, the least and the most of the two allocations a build may make, without and with ggml-cuda's
        flash-attention F16 copies (ggml_backend_cuda_buffer_type_get_alloc_size): ggml-alloc can pack the one with
        the copies tighter than the one without."""
        plain, copies = self.by_pool(), self.by_pool(ceiling=True)
        return {pool: (min(size, copies[pool]), max(size, copies[pool])) for pool, size in plain.items()}


# --- backends ----------------------------------------------------------------------------------------------------


def scheduler_backends(result: PlacementResult, devices: Sequence[Device]) -> tuple[Backend, ...]:
    """llama_context's backends: one per model device in order, then the CPU, whose compute buffer is the first
    model device's host buffer type where it has one (for faster copies), else the CPU's."""
    by_name = {d.name: d for d in devices}
    gpus = tuple(Backend(name, name, by_name[name]) for name in result.devices)
    host = by_name[result.devices[0]].host_buffer_type if result.devices else None
    return (*gpus, Backend(CPU, host or CPU))


def pipeline_parallel(
    model: ModelTensors, result: PlacementResult, devices: Sequence[Device], request: Placement
) -> bool:
    """llama_context's constructor: pipeline parallelism (n_copies = GGML_SCHED_MAX_COPIES) only with several model
    devices, every layer and the output offloaded, -sm layer, the KV offloaded, no tensor override (-ot,
    --cpu-moe, --n-cpu-moe, --n-cpu-ffn) and async compute with events on every device."""
    by_name = {d.name: d for d in devices}
    return (
        len(result.devices) > 1
        and gpu_layer_count(model.n_layer, request.gpu_layers) > model.n_layer
        and request.split_mode is SplitMode.LAYER
        and request.kv_offload
        and not overrides(request)
        and all(by_name[name].async_events for name in result.devices)
    )


def full_offload(model: ModelTensors, request: Placement) -> bool:
    """graph_get_cb's `model.n_gpu_layers() > n_layer_all`: every layer and the output layer offloaded."""
    return gpu_layer_count(model.n_layer, request.gpu_layers) > model.n_layer


def _alloc_size(device: Device, ceiling: bool) -> Callable[[Tensor], int]:
    """The device buffer type's get_alloc_size: ggml-cuda pads a quantized matrix (a weight copied in, a copy of a
    quantized cache's view) by a row; with
    `ceiling`, a prompt's flash attention (Q over more than 2 rows: ggml_cuda_get_best_fattn_kernel's TILE or MMA,
    by the GPU's compute capability, which no CPU run shows) holds F16 copies of a quantized K and V after its
    output (ggml_cuda_flash_attn_ext_get_alloc_size)."""

    def size(t: Tensor) -> int:
        if device.alloc is not AllocRule.CUDA:
            return t.nbytes
        if isinstance(t, WeightTensor):
            return cuda_alloc_size(t.size, t.ggml_type, t.ne[0])
        if ceiling and t.op == "FLASH_ATTN_EXT" and t.srcs[0].ne[1] > FATTN_VEC_ROWS:
            return t.nbytes + t.f16_extra
        if t.type in CACHE_TYPES:  # a cache's block type: [TAG_ALLOC_SIZE_EXPAND] as for a weight
            return cuda_alloc_size(t.nbytes, QT[t.type.upper()], t.ne[0])
        return t.nbytes

    return size


# --- where the weights and caches are -------------------------------------------------------------------------


@dataclass(eq=False)
class WeightTensor(Tensor):
    """A model weight as a source of the scheduler's graph: its bytes and buffer type (a copy keeps both)."""

    name: str = ""
    ggml_type: int = 0
    size: int = 0  # ggml_nbytes
    buffer_type: str = ""
    table: bool = False  # an input layer's table (llm_tensor_info_mapping's GET_ROWS tensors)
    head: bool = False  # the tied output: token_embd read by the LM head (its own copy where it has one)
    viewed: bool = False  # a view of the weight (a reshape an op reads): no buffer of its own while the graph is split

    @property
    def nbytes(self) -> int:
        return self.size


def _weight_tensor(w: Weight, buffer_type: str, layer: int | None) -> WeightTensor:
    return WeightTensor(
        "weight", w.ne, (0, 0, 0, 0), external=True, layer=layer, name=w.name, ggml_type=w.ggml_type,
        size=w.nbytes, buffer_type=buffer_type, table=w.name.rsplit(".", 1)[0] in INPUT_TABLES,
    )  # fmt: skip


BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Where:
    """Where the graph's pre-allocated tensors are: each layer's weights (with the buffer type each use reads) and
    each layer's cache (llama_kv_cache / llama_memory_recurrent: the layer's device when the KV is offloaded)."""

    weights: dict[int | None, tuple[WeightTensor, ...]]  # layer (None: outside the blocks) -> its weights
    caches: dict[int, str]  # layer -> its cache's buffer type
    layer_backends: tuple[str, ...]  # each layer's device (llama_model::dev_layer), CPU for the CPU's layers


def where(model: ModelTensors, result: PlacementResult, request: Placement) -> Where:
    """The buffer types of the weights and caches the graph reads, from the placement."""
    by_name = {w.name: w for w in model.weights}
    weights: dict[int | None, list[WeightTensor]] = {}
    for t in result.tensors:
        w = by_name[t.name]
        stem = t.name.rsplit(".", 1)[0]
        if stem in EVERY_LAYER:  # a table every layer loads: each layer reads the copy in its own buffer type,
            # one tensor per buffer type (create_tensor's TENSOR_DUPLICATED finds the one its context holds)
            copies = {buft: _weight_tensor(w, buft, None) for buft in t.buffer_types}
            for il, device in enumerate(result.layer_devices):
                if model.rope_layers is None or il in model.rope_layers:  # gemma4: the full-attention layers'
                    weights.setdefault(il, []).append(copies[device if device in copies else t.buffer_types[0]])
            continue
        m = BLOCK.match(t.name)
        layer = int(m.group(1)) if m else None
        if t.name == TOKEN_EMBD and model.tied:  # the input's table, and the output's copy where it has one
            table = _weight_tensor(w, t.buffer_types[0], None)
            head = replace(table, buffer_type=t.buffer_types[-1], table=False, name=OUTPUT_COPY)
            weights.setdefault(None, []).extend(
                [table, head] if len(t.buffer_types) > 1 else [replace(table, head=True)]
            )
            continue
        weights.setdefault(layer, []).append(_weight_tensor(w, t.buffer_types[0], layer))
    caches = {
        il: device if request.kv_offload and device != CPU else CPU for il, device in enumerate(result.layer_devices)
    }
    return Where({k: tuple(v) for k, v in weights.items()}, caches, result.layer_devices)


OUTPUT_COPY = "token_embd.weight (output)"  # the tied output's own copy of token_embd


def _shape_of_weight(node: Tensor, position: int, srcs: Sequence[Tensor]) -> Callable[[WeightTensor], bool]:
    """What a weight at `position` of `node` must look like, from the op (ggml.c's constructors): MUL_MAT's
    [K, rows] (batched over the node's third dimension), MUL_MAT_ID's [K, rows, experts], GET_ROWS's [width, ...],
    else a tensor that repeats to the node's shape (ggml_can_repeat: a bias, a norm's weight)."""
    others = [s for s in srcs if not isinstance(s, WeightTensor)]
    if node.op in ("MUL_MAT", "MUL_MAT_ID") and position == 0 and others:
        k, rows, experts = others[0].ne[0], node.ne[0], node.op == "MUL_MAT_ID"
        return lambda w: (
            w.ne[0] == k and w.ne[1] == rows and not w.name.endswith(".bias")
            and (w.ne[2] > 1 if experts else node.ne[2] % w.ne[2] == 0)
        )  # fmt: skip
    if node.op == "GET_ROWS" and position == 0:
        width = node.ne[0]
        return lambda w: w.ne[0] == width
    return lambda w: (
        (min(w.ne[0], w.ne[1]) == 1 and w.ne[2] == 1) and all(n % m == 0 for n, m in zip(node.ne, w.ne, strict=True))
    )


def resolve_weight(
    place: Where, node: Tensor, position: int, name: str, srcs: Sequence[Tensor], used: set[int]
) -> WeightTensor:
    """The weight a node reads at a source position: the one its builder names, if the layer has it (llama.cpp's
    tensor names: blk.N.<name>, with or without .weight; a layer's op may name one outside the blocks), else one of
    its layer's with the op's shape (outside the blocks, a table for GET_ROWS, else the output layer's: the tied
    output's own copy for the LM head), the first not read yet (`used`: distinct weights are distinct sources, each
    copied on its own). Weights of one shape that sit in different buffer types, or differ in type or size, are
    told apart only by name: refused when the builder does not name it."""
    layer_weights = place.weights.get(node.layer, ())
    if name:
        stem = f"blk.{node.layer}.{name}" if node.layer is not None else name
        named = [w for w in layer_weights if w.name in (stem, f"{stem}.weight")]
        if not named and node.layer is not None:  # a tensor named outside the blocks that a layer's op reads
            # (token_embd_norm: created for layer 0, in its buffer type, and normed with il 0)
            named = [w for w in place.weights.get(None, ()) if w.name in (name, f"{name}.weight")]
        if named:
            used.add(id(named[0]))
            return named[0]
    fits = _shape_of_weight(node, position, srcs)
    # outside the blocks, GET_ROWS reads the input layer's tables, the other ops the output layer's weights
    table = node.op == "GET_ROWS" and position == 0
    found = [w for w in layer_weights if fits(w) and (node.layer is not None or w.table == table or w.head)]
    exact = [w for w in found if w.ne[0] == node.ne[0]]  # a vector as wide as the node before one that repeats
    if node.op not in ("MUL_MAT", "MUL_MAT_ID", "GET_ROWS") and exact:
        found = exact
    if not found:
        raise PlacementUnsupported(f"no weight of layer {node.layer} fits a {node.op} of {node.ne}")
    kinds = {(w.buffer_type, w.ggml_type, w.size) for w in found}
    if len(kinds) > 1:
        names = ", ".join(sorted(w.name for w in found))
        raise PlacementUnsupported(f"the {node.op} of layer {node.layer} reads one of {names}: which is not known")
    chosen = next((w for w in found if id(w) not in used), found[0])
    used.add(id(chosen))
    return chosen


# --- the backends' rules (the mock GPUs mirror ggml-cuda's; the CPU is ggml-cpu's) ------------------------------


def is_host(buffer_type: str) -> bool:
    """ggml_backend_buft_is_host: the CPU's buffer types and a GPU's pinned host buffer (not the extra ones)."""
    return buffer_type in (CPU, CPU_MAPPED) or buffer_type.endswith("_Host")


def supports_buft(backend: Backend, buffer_type: str) -> bool:
    """ggml_backend_dev_supports_buft: a discrete GPU only its own buffer type (ggml-cuda); the CPU host memory
    and its extra buffer types (ggml_backend_cpu_device_supports_buft)."""
    if backend.device is None:
        return is_host(buffer_type) or buffer_type in EXTRA_CPU
    return buffer_type == backend.buffer_type


def op_batch(node: Tensor) -> int:
    """ggml-cuda's get_op_batch_size: GET_ROWS 0, MUL_MAT ne[1], MUL_MAT_ID and ROPE ne[2], else the rows."""
    if node.op == "GET_ROWS":
        return 0
    if node.op == "MUL_MAT":
        return node.ne[1]
    if node.op in ("MUL_MAT_ID", "ROPE", "ROPE_BACK"):
        return node.ne[2]
    return node.ne[1] * node.ne[2] * node.ne[3]


# --- the scheduler's passes ------------------------------------------------------------------------------------


@dataclass
class _Sched:
    """ggml_backend_sched's state for one graph: each tensor's backend, the copies of inputs per backend."""

    graph: Graph
    backends: tuple[Backend, ...]
    place: Where
    op_offload: bool
    n_copies: int
    srcs: dict[Tensor, list[Tensor]] = field(default_factory=dict)  # each node's sources, weights in place
    backend: dict[Tensor, int] = field(default_factory=dict)

    @property
    def cpu(self) -> int:
        return len(self.backends) - 1

    def of(self, t: Tensor | None) -> int:
        return -1 if t is None else self.backend.get(t, -1)

    def buffer(self, t: Tensor) -> str | None:
        """The buffer type of a pre-allocated tensor (its own or its view source's), or None."""
        base = t.view_src or t
        if isinstance(base, WeightTensor):
            return base.buffer_type
        if base.external:
            if base.layer is None:
                raise PlacementUnsupported("a cache tensor outside the layers")
            return self.place.caches[base.layer]
        return None

    @staticmethod
    def own_buffer(t: Tensor) -> str | None:
        """tensor->buffer while the graph is split: only the weights have one (a view gets its buffer when it is
        allocated, and the graph reads the caches through views)."""
        return t.buffer_type if isinstance(t, WeightTensor) and not t.viewed else None

    def supports_op(self, b: int, node: Tensor) -> bool:
        """ggml-cuda's supports_op refuses a source in another device's memory (the mock GPUs mirror it); the CPU's
        refuses an op over a weight in an extra buffer type that does not take it (repack: its matrix ops)."""
        backend = self.backends[b]
        if backend.device is None:
            for i, s in enumerate(self.srcs.get(node, ())[:4]):
                if self.own_buffer(s) in EXTRA_CPU:
                    return i == 0 and node.op in ("MUL_MAT", "MUL_MAT_ID")
            return True
        for s in self.srcs.get(node, ()):
            buft = self.own_buffer(s)
            if buft is not None and not is_host(buft) and buft not in EXTRA_CPU and buft != backend.buffer_type:
                return False
        return True

    def offload_op(self, b: int, node: Tensor) -> bool:
        return self.backends[b].device is not None and op_batch(node) >= OFFLOAD_MIN_BATCH

    def from_buffer(self, t: Tensor, node: Tensor) -> int:
        """ggml_backend_sched_backend_from_buffer: the first backend that supports the buffer type and the op."""
        buft = self.buffer(t)
        if buft is None:
            return -1
        for b in range(len(self.backends)):
            if supports_buft(self.backends[b], buft) and self.supports_op(b, node):
                return b
        return -1

    def from_cur(self, t: Tensor) -> int:
        """ggml_backend_sched_backend_id_from_cur."""
        b = self.from_buffer(t, t)
        if b != -1:
            return b
        if t.view_src is not None:
            b = self.from_buffer(t.view_src, t)
            if b != -1:
                return b
        if isinstance(t, WeightTensor) or t.external:
            raise PlacementUnsupported(f"no backend runs a {t.op} over its pre-allocated tensor")
        if t.input:
            return self.cpu
        if t.op in NOT_BY_WEIGHT:
            return -1
        for s in self.srcs.get(t, ()):
            if isinstance(s, WeightTensor) and not s.viewed:  # a view of a weight has no buffer yet
                b = self.from_buffer(s, t)
                if self.op_offload and b == self.cpu and is_host(s.buffer_type):
                    for g in range(b):
                        if self.supports_op(g, t) and self.offload_op(g, t):
                            return g
                return b
        return -1

    def buffer_supported(self, t: Tensor, b: int) -> bool:
        """ggml_backend_sched_buffer_supported: the backend takes the tensor's buffer type (its buffer's, else its
        backend's, else its view source's backend's)."""
        buft = self.buffer(t)
        if buft is None:
            tb = self.of(t)
            if tb == -1 and t.view_src is not None:
                tb = self.of(t.view_src)
            buft = self.backends[tb].buffer_type if tb != -1 else None
        return buft is not None and supports_buft(self.backends[b], buft)


def with_weights(graph: Graph, place: Where) -> dict[Tensor, list[Tensor]]:
    """Each node's sources as ggml has them: its weights put back at their positions."""
    used: set[int] = set()
    out = {}
    for node in graph.nodes:
        srcs: list[Tensor] = list(node.srcs)
        for position, name in node.weights:
            if name.endswith(VIEWED):  # the weight read through a view of it (a reshape: the same bytes)
                w = resolve_weight(place, node, position, name.removesuffix(VIEWED), srcs, used)
                srcs.insert(position, replace(w, op="RESHAPE", srcs=(w,), view_src=w, viewed=True))
                continue
            if name.endswith(VIEWED_ROW):  # its first row through ggml_view_1d: one row's bytes
                w = resolve_weight(place, node, position, name.removesuffix(VIEWED_ROW), srcs, used)
                rows = w.ne[1] * w.ne[2] * w.ne[3]
                row = replace(w, op="VIEW", ne=(w.ne[0], 1, 1, 1), size=w.size // rows, srcs=(w,), view_src=w)
                srcs.insert(position, replace(row, viewed=True))
                continue
            srcs.insert(position, resolve_weight(place, node, position, name, srcs, used))
        if node.op == "ROPE" and node.layer is not None:  # the layer's rope factors (llama_model::get_rope_factors)
            srcs += [w for w in place.weights.get(node.layer, ()) if w.name.rsplit(".", 1)[0] in EVERY_LAYER][:1]
        out[node] = srcs
    return out


def assign_pass1(s: _Sched) -> None:
    """Pass 1: pre-allocated tensors, inputs and ops over weights (offloaded ones to a GPU that wants them)."""
    for leaf in s.graph.leafs:
        if s.of(leaf) == -1:
            s.backend[leaf] = s.from_cur(leaf)
    for weights in {id(w): w for srcs in s.srcs.values() for w in srcs if isinstance(w, WeightTensor)}.values():
        s.backend[weights] = s.from_cur(weights)
    for node in s.graph.nodes:
        if s.of(node) == -1:
            b = s.from_cur(node)
            if b != -1:
                s.backend[node] = b


def _expand(s: _Sched, order: Sequence[Tensor], gpus_only: bool) -> None:
    """Pass 2: each backend spread over the unassigned nodes after it in `order` (views skipped): a GPU's only
    (the CPU ends a run), or any backend's; an op the backend does not support stays unassigned."""
    cur = -1
    for node in order:
        if node.op in VIEW_OPS:
            continue
        b = s.of(node)
        if b != -1:
            cur = -1 if gpus_only and b == s.cpu else b
        elif cur != -1 and s.supports_op(cur, node):
            s.backend[node] = cur


def assign_pass2(s: _Sched) -> None:
    nodes = s.graph.nodes
    _expand(s, nodes, True)
    _expand(s, nodes[::-1], True)
    _expand(s, nodes, False)
    _expand(s, nodes[::-1], False)


def assign_pass3(s: _Sched) -> None:
    """Pass 3: an unassigned node to the backend that supports it with the most sources in memory it can read; an
    assigned one to a higher-priority backend with the same buffer type that reads all its sources."""
    for node in s.graph.nodes:
        if node.op in VIEW_OPS:
            continue
        cur = s.of(node)
        if cur == -1:
            best = -1
            for b in range(len(s.backends)):
                if s.supports_op(b, node):
                    n = sum(
                        1
                        for src in s.srcs.get(node, ())
                        if (s.of(src) != -1 or s.of(src.view_src) != -1) and s.buffer_supported(src, b)
                    )
                    if n > best:
                        best, s.backend[node] = n, b
            continue
        for b in range(cur):
            same = s.backends[b].buffer_type == s.backends[cur].buffer_type
            if same and s.supports_op(b, node) and all(s.buffer_supported(x, b) for x in s.srcs.get(node, ())):
                s.backend[node] = b
                break


def assign_pass4(s: _Sched) -> None:
    """Pass 4: views to their source's backend, unassigned sources to their node's, the rest to the first backend
    that supports them."""
    for node in s.graph.nodes:
        if node.view_src is not None and s.of(node) == -1:
            s.backend[node] = s.of(node.view_src)
        for src in s.srcs.get(node, ()):
            if s.of(src) == -1:
                s.backend[src] = s.of(src.view_src) if src.view_src is not None else s.of(node)
        if s.of(node) == -1:
            s.backend[node] = next(b for b in range(len(s.backends)) if s.supports_op(b, node))


@dataclass
class _Split:
    backend: int
    start: int
    end: int = 0
    inputs: list[Tensor] = field(default_factory=list)


@dataclass
class SplitGraph:
    """Pass 5's result: the splits, each node's sources (copies in place of sources from another backend), the
    copies made per (source, backend), the graph inputs copied for pipeline parallelism."""

    splits: list[_Split]
    srcs: dict[Tensor, list[Tensor]]
    copies: dict[tuple[int, int], list[Tensor]]  # (id of source, backend) -> its n_copies copies
    graph_inputs: list[Tensor]
    origin: dict[Tensor, Tensor]  # copy -> the tensor it copies


def _copy_of(t: Tensor, input_output: bool) -> Tensor:
    """ggml_dup_tensor_layout: same type, shape and strides, no data; an input and an output with several copies."""
    if isinstance(t, WeightTensor):
        copy: Tensor = replace(
            t, op="NONE", external=False, input=input_output, output=input_output, srcs=(), view_src=None, viewed=False
        )  # a weight's view copied: a tensor of the view's bytes
    else:
        copy = Tensor(t.type, t.ne, t.nb, input=input_output, output=input_output, layer=t.layer)
    return copy


def split_pass5(s: _Sched) -> SplitGraph:
    """Pass 5: a new split where the backend changes, or a weight is in memory the split's backend cannot read; each
    source from another backend's memory copied in once per backend (n_copies times)."""
    nodes = s.graph.nodes
    srcs = {n: list(v) for n, v in s.srcs.items()}
    copies: dict[tuple[int, int], list[Tensor]] = {}
    graph_inputs: list[Tensor] = []
    origin: dict[Tensor, Tensor] = {}
    first = next((s.of(n) for n in nodes if n.op not in VIEW_OPS), s.cpu)
    split = _Split(first, 0)
    splits = [split]
    for i, node in enumerate(nodes):
        if node.op in VIEW_OPS:
            continue
        b = s.of(node)
        new_split = False
        if b == split.backend and split.inputs:
            for src in srcs.get(node, ()):
                weight = isinstance(src, WeightTensor) and not src.viewed
                if weight and s.of(src) != b and not s.buffer_supported(src, b):
                    new_split = True
                    break
                if len(split.inputs) >= SPLIT_INPUTS:
                    held = s.of(src) == b or (id(src), b) in copies or s.buffer_supported(src, b)
                    if not held:
                        new_split = True
                        break
        if b != split.backend or new_split:
            split.end = i
            split = _Split(b, i)
            splits.append(split)
        node_srcs = srcs.get(node, [])
        for j, src in enumerate(node_srcs):
            sb = s.of(src)
            if src.input and s.n_copies > 1 and (id(src), sb) not in copies:
                made = [src if c == 0 else _copy_of(src, True) for c in range(s.n_copies)]
                src.output = True  # ggml_set_output on the current copy: the original itself
                for c in made[1:]:
                    origin[c] = src
                copies[(id(src), sb)] = made
                graph_inputs.append(src)
            if sb != b and not s.buffer_supported(src, b):
                key = (id(src), b)
                if key not in copies:
                    made = [_copy_of(src, s.n_copies > 1) for _ in range(s.n_copies)]
                    for c in made:
                        origin[c] = src
                        s.backend[c] = b
                    copies[key] = made
                    split.inputs.append(src)
                node_srcs[j] = copies[key][0]
    split.end = len(nodes)
    return SplitGraph(splits, srcs, copies, graph_inputs, origin)


def _experts_times_weights(mul: Tensor, sources: Sources) -> tuple[Tensor, Tensor] | None:
    """ggml_cuda_match_moe_weighted_reduction's split_mul: a MUL of a tensor of its shape (the experts) by one
    broadcast over its rows (the weights, [1, ...]), both F32 and contiguous, either way round."""
    srcs = sources(mul)[:2]
    if len(srcs) < 2:
        return None

    def full(t: Tensor) -> bool:
        return t.type == F32 and t.contiguous and t.ne == mul.ne

    def weights(t: Tensor) -> bool:
        return t.type == F32 and t.contiguous and t.ne[0] == 1 and t.ne[1:] == mul.ne[1:]

    a, b = srcs
    return (a, b) if full(a) and weights(b) else (b, a) if full(b) and weights(a) else None


def _moe_reduction(nodes: Sequence[Tensor], i: int, sources: Sources) -> tuple[Tensor, tuple[Tensor, ...], int] | None:
    """ggml_cuda_match_moe_weighted_reduction at node i: (experts [* scale]) * weights, then n_used views of the
    product, one per expert, summed left to right by n_used - 1 ADDs: the last ADD, the tensors kept, the nodes."""
    first = nodes[i]
    if first.op != "MUL" or first.type != F32 or not first.contiguous:
        return None
    pair = _experts_times_weights(first, sources)
    kept: tuple[Tensor, ...] | None = pair
    weighted, mul_count = first, 1
    second = nodes[i + 1] if i + 1 < len(nodes) else None
    if second is not None and second.op == "MUL" and second.type == F32 and second.contiguous:
        outer = _experts_times_weights(second, sources)
        if outer is not None and outer[0] is first and pair is not None:  # (experts * expert_scale) * weights
            weighted, kept, mul_count = second, (pair[0], outer[1], pair[1]), 2
    if kept is None:
        return None
    n_used, tokens = weighted.ne[1], weighted.ne[2] * weighted.ne[3]
    count = 2 * n_used + mul_count - 1
    if not 2 <= n_used <= MOE_REDUCTION_MAX_EXPERTS or tokens <= 0 or i + count > len(nodes):
        return None
    views: list[Tensor] = []
    last: Tensor | None = None
    adds = 0
    for c in nodes[i + mul_count : i + count]:
        if c.op == "VIEW":
            at = len(views) * weighted.nb[1]
            shape = c.ne == (weighted.ne[0], tokens, 1, 1) and c.nb[:2] == (weighted.nb[0], weighted.nb[2])
            if len(views) >= n_used or c.view_src is not weighted or not shape or c.view_offs != at:
                return None
            views.append(c)
            continue
        if c.op != "ADD" or c.type != F32 or len(views) < 2 or adds + 1 >= len(views):
            return None
        if tuple(sources(c)[:2]) != (views[0] if last is None else last, views[adds + 1]):
            return None
        last, adds = c, adds + 1
    if last is None or len(views) != n_used or adds != n_used - 1:
        return None
    if not last.contiguous or last.ne != (weighted.ne[0], tokens, 1, 1):
        return None
    return last, kept, count


def moe_reduction_deps(nodes: Sequence[Tensor], sources: Sources) -> dict[Tensor, tuple[Tensor, ...]]:
    """ggml_backend_cuda_graph_optimize over one split: each fused MoE weighted sum's experts, weights (and scale)
    kept allocated until its last ADD (add_alloc_dep), which the scheduler adds as a dependency node after it."""
    deps: dict[Tensor, tuple[Tensor, ...]] = {}
    i = 0
    while i < len(nodes):
        match = _moe_reduction(nodes, i, sources)
        if match is None:
            i += 1
            continue
        deps[match[0]] = match[1]
        i += match[2]
    return deps


def allocation(s: _Sched, sg: SplitGraph, ceiling: bool = False) -> list[int]:
    """ggml_backend_sched_split_graph's graph_copy (each split's inputs: a dependency view of the source on its
    backend, then the copy on the split's; then the split's nodes; with several copies, the graph inputs' and the
    splits' input copies first among the leafs) through ggml_gallocr_reserve_n: each backend's buffer size."""
    nodes: list[Tensor] = []
    node_buffers: list[int] = []
    srcs: dict[Tensor, Sequence[Tensor]] = dict(sg.srcs)
    for split in sg.splits:
        for src in split.inputs:
            dep = Tensor(src.type, src.ne, src.nb, view_src=src.view_src or src, srcs=(src,), layer=src.layer)
            srcs[dep] = (src,)
            nodes.append(dep)
            node_buffers.append(s.of(src))
            nodes.append(sg.copies[(id(src), split.backend)][0])
            node_buffers.append(split.backend)
        split_nodes = s.graph.nodes[split.start : split.end]
        device = s.backends[split.backend].device
        deps = moe_reduction_deps(split_nodes, lambda t: srcs.get(t, t.srcs)) if device and device.moe_alloc_dep else {}
        for node in split_nodes:
            nodes.append(node)
            node_buffers.append(s.of(node))
            if node in deps:  # the kept tensors freed only after the fused sum's last node
                kept = deps[node]
                dep = Tensor(kept[0].type, kept[0].ne, kept[0].nb, view_src=kept[0].view_src or kept[0], srcs=kept)
                nodes.append(dep)
                node_buffers.append(split.backend)
    leafs: list[Tensor] = []
    leaf_buffers: list[int] = []
    if s.n_copies > 1:
        for src in sg.graph_inputs:
            sb = s.of(src)
            for c in sg.copies[(id(src), sb)]:
                leafs.append(c)
                leaf_buffers.append(sb)
        for split in sg.splits:
            for src in split.inputs:
                for c in sg.copies[(id(src), split.backend)]:
                    leafs.append(c)
                    leaf_buffers.append(split.backend)
    for leaf in s.graph.leafs:
        leafs.append(leaf)
        leaf_buffers.append(s.of(leaf))

    def sources(t: Tensor) -> Sequence[Tensor]:
        return srcs.get(t, t.srcs)

    def external(t: Tensor) -> bool:
        return t.external or isinstance(t, WeightTensor) and t not in sg.origin

    buffers = [b.buffer(ceiling) for b in s.backends]
    return replay_n(AllocGraph(leafs, nodes, leaf_buffers, node_buffers, buffers, sources, external))


@dataclass(frozen=True)
class Pins:
    """The pins llama.cpp's callbacks put on a graph's nodes (kept in REAL mode)."""

    norms: bool  # graph_get_cb: each layer's "norm" on its device (a full offload, or fewer than 32 tokens)
    kqv_on_cpu: bool  # build_attn_mha: attention's output on the CPU (offload_kqv off)


def apply_pins(s: _Sched, pins: Pins) -> None:
    for node in s.graph.nodes:
        if node.pin == NORM_PIN and pins.norms and node.layer is not None:
            name = s.place.layer_backends[node.layer]
            b = next((i for i, x in enumerate(s.backends) if x.name == name), -1)
            if b != -1 and s.supports_op(b, node):
                s.backend[node] = b
        elif node.pin == KQV_PIN and pins.kqv_on_cpu:
            s.backend[node] = s.cpu


def assigned(
    graph: Graph, backends: tuple[Backend, ...], place: Where, op_offload: bool, n_copies: int, pins: Pins | None
) -> _Sched:
    """ggml_backend_sched_split_graph's passes 1 to 4: each node's backend."""
    s = _Sched(graph, backends, place, op_offload, n_copies)
    s.srcs = with_weights(graph, place)
    if pins is not None:
        apply_pins(s, pins)
    assign_pass1(s)
    assign_pass2(s)
    assign_pass3(s)
    assign_pass4(s)
    return s


def schedule(
    graph: Graph, backends: tuple[Backend, ...], place: Where, op_offload: bool, n_copies: int, pins: Pins | None
) -> Schedule:
    """ggml_backend_sched_split_graph over a graph, then ggml_gallocr_reserve_n over its copy."""
    s = assigned(graph, backends, place, op_offload, n_copies, pins)
    sg = split_pass5(s)
    sizes = allocation(s, sg)
    copies_f16 = any(n.f16_extra and backends[s.of(n)].device is not None for n in graph.nodes)
    ceilings = allocation(s, sg, ceiling=True) if copies_f16 else sizes
    splits = tuple(Split(backends[x.backend].name, tuple(t.nbytes for t in x.inputs)) for x in sg.splits)
    names = [b.name for b in backends]
    return Schedule(splits, n_copies, dict(zip(names, sizes, strict=True)), dict(zip(names, ceilings, strict=True)))


def token_generation(geometry: ContextGeometry) -> ContextGeometry:
    """llama_context::sched_reserve's token-generation graph: n_seq tokens, n_seq outputs, the same caches."""
    return replace(geometry, graph_tokens=geometry.n_seq)


def compute_buffers(
    model: ModelTensors,
    memory: Memory,
    devices: Sequence[Device],
    request: Placement,
    result: PlacementResult,
    mode: Mode = Mode.DRY,
) -> ComputeBuffers:
    """Each backend's compute buffer llama.cpp reserves for this placement (estimator/placement.py's `place`)."""
    shape = memory.layout.graph
    if shape is None:
        raise PlacementUnsupported(f"the graph of {model.architecture} is not rebuilt: no split to place")
    backends = scheduler_backends(result, devices)
    place = where(model, result, request)
    copies = MAX_COPIES if pipeline_parallel(model, result, devices, request) else 1
    full = full_offload(model, request)

    lightning = shape.mixer is Mixer.LIGHTNING

    def pins(g: ContextGeometry) -> Pins:
        return Pins(full or ubatch_tokens(g) < TOKEN_GENERATION_MAX, not request.kv_offload)

    def graph_of(g: ContextGeometry, seqs: int | None = None) -> Graph:
        if lightning:  # MiniMax-01's graph over every sequence of the ubatch (or over `seqs`)
            return MinimaxGraph(shape, g, model.n_vocab, g.n_seq if seqs is None else seqs).build()
        return build_graph(shape, g, model.n_vocab)

    def run(g: ContextGeometry, pinned: bool, seqs: int | None = None) -> Schedule:
        return schedule(graph_of(g, seqs), backends, place, request.op_offload, copies, pins(g) if pinned else None)

    geometry = memory.geometry
    if geometry.flash_attention_auto:  # resolve_fused_ops' probe: one token a sequence
        probe = token_generation(geometry)
        s = assigned(graph_of(probe), backends, place, request.op_offload, copies, pins(probe))
        # split_only: the graph split with the callbacks' pins; off where a layer's flash attention is on another
        # device than the layer's (model.dev_layer)
        on = all(
            backends[s.of(n)].name == result.layer_devices[n.layer]
            for n in s.graph.nodes
            if n.op == "FLASH_ATTN_EXT" and n.layer is not None
        )
        geometry = replace(geometry, flash_attention=on, flash_attention_auto=False, transposed_v=geometry.v_trans)
    if mode is Mode.DRY:  # the first reserve alone (MiniMax-01's over every sequence)
        pp = run(geometry, False)
        return ComputeBuffers(backends, dict(pp.buffers), dict(pp.ceilings), pp, None, geometry.flash_attention)
    pp, tg = run(geometry, True), run(token_generation(geometry), True)
    runs = [pp, tg]
    if lightning:  # sched_reserve's last reserve for MiniMax-01
        runs += [run(geometry, True, seqs) for seqs in reserved_sequences(geometry)[1:]]
    sizes = {b.name: max(r.buffers[b.name] for r in runs) for b in backends}
    ceilings = {b.name: max(r.ceilings[b.name] for r in runs) for b in backends}
    return ComputeBuffers(backends, sizes, ceilings, pp, tg, geometry.flash_attention)
