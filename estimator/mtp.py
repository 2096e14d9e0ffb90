"""llama-server's --spec-type draft-mtp (multi-token prediction) on the target model, the one the answer is about.

common.cpp's common_model_params_to_llama sets load_mtp under draft-mtp: each architecture's load_arch_tensors then
loads the NextN/MTP layers' tensors (the last nextn_predict_layers of block_count) instead of skipping them
(TENSOR_SKIP), on the devices their layers are assigned to. common_speculative_impl_draft_mtp's constructor sets
the target context's nextn embeddings, unmasked (llama_set_embeddings_nextn(ctx_tgt, true, false)), after the
context is made: the first decode's llama_context::output_reserve then grows the output buffer by n_embd_out
floats per batch token (workspace.output_buffer; the geometry's nextn_width, set by context_kernel).

llama-server's MTP draft context (common_speculative_init_result) is a second llama_context on the same model: ctx_type
LLAMA_CONTEXT_TYPE_MTP, the target's n_ctx, n_rs_seq 0, common_base_params_to_speculative's own cache types
(--cache-type-k-draft / -v-draft, f16 by default) and one output a sequence (n_outputs_max n_parallel). Its memory
module (llama_model::create_memory under ctx_type MTP) is a KV cache (draft_kv_bytes) of the NextN layers alone (a plain
one for qwen3next, qwen35, qwen35moe, bailingmoe3, nemotron_h_moe, hy_v3, and deepseek32 and glm-dsa, whose draft runs
dense MLA without the DSA indexer and its cache: NEXTN_ONLY_CACHE; mimo2's, step35's and deepseek4's
llama_kv_cache_iswa, each NextN layer in its base or sliding half (deepseek4's own branch: not its target's
llama_kv_cache_dsv4, no compressed caches or compressor states): NEXTN_ONLY_ISWA_CACHE) or of every layer (deepseek2,
glm4moe: ALL_LAYERS_CACHE; cohere2moe's llama_kv_cache_iswa, each layer in its half: ALL_LAYERS_ISWA_CACHE), its graph
LLM_GRAPH_TYPE_DECODER_MTP (estimator/graph_mtp.py, replayed by ggml-alloc as the
target's is), its output buffer a row a sequence of logits, masked nextn embeddings and the backend sampling's outputs
(draft_output_bytes). Those fourteen architectures' draft contexts are counted (the others' are unknown): the cache in
kvCache, the compute and output buffers in workspace (context_kernel), and the cache and compute buffer where
llama-server's --fit fits it with the target (common_fit_extra_model: estimator/fitter.py host_projection,
draft_compute; with GPUs estimator/fit_placement.py draft_memory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from memfit.estimator.bounds import Part
from memfit.estimator.compute_buffer import compute_bounds, compute_fallback, replayed
from memfit.estimator.context import ContextGeometry
from memfit.estimator.graph_mtp import mtp_graph_shape, nextn_block
from memfit.estimator.kv_cache import CacheType, cache_type, cache_type_problem, window_cells
from memfit.estimator.layout import GraphLayer, GraphShape, Layout
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, Component
from memfit.estimator.workload import Workload, quantized_v_refusal

NO_MTP_TENSORS = (
    "llama-server's --spec-type draft-mtp builds its MTP draft context's graph on the model's NextN layer, and this"
    " file holds none of that layer's tensors: the graph's GGML_ASSERT on nextn.eh_proj aborts the server"
)
NO_MTP_HEAD = (
    "llama-server's --spec-type draft-mtp builds its MTP draft context's graph on the model's NextN layer, and this"
    " file holds that layer's block but not its nextn.eh_proj: the graph's GGML_ASSERT on it aborts the server"
)
MTP_GRAPH_ABORTS = (
    "llama-server's --spec-type draft-mtp builds {arch}'s MTP draft graph (graph_mtp) on the NextN layer, and it aborts"
    " on this file's: {why}"
)
NO_MTP_LAYERS = (
    "llama-server's --spec-type draft-mtp needs the model's NextN/MTP layers, and it has none: llama_init_from_model"
    ' refuses the MTP context ("model doesn\'t contain MTP layers") and the server stops'
)


def mtp_refusal(subject: Subject, workload: Workload) -> str | None:
    """Why llama-server does not start under draft-mtp with this model (one without NextN layers, a file without
    their tensors, a draft context llama.cpp refuses), or None."""
    if not workload.multi_token_prediction or subject.layout is None:
        return None
    if not subject.layout.nextn_width:
        return NO_MTP_LAYERS
    if subject.mtp is not None and subject.mtp.count == 0:  # a trunk-only file: no nextn.eh_proj to build on
        return NO_MTP_TENSORS
    if subject.mtp is not None and not subject.mtp.head:
        return NO_MTP_HEAD
    shape = subject.layout.graph
    why = mtp_graph_abort(subject.architecture, shape) if shape else None
    if why:
        return MTP_GRAPH_ABORTS.format(arch=subject.architecture, why=why)
    return draft_refusal(subject, workload)


def draft_refusal(subject: Subject, workload: Workload) -> str | None:
    """Why llama_init_from_model refuses the draft context's own cache types (the model's checks on them, and a
    quantized V with flash attention off), which stops llama-server ("failed to create MTP context"), or None."""
    assert subject.layout is not None
    k, v = draft_types(workload.draft_key_element_bytes, workload.draft_value_element_bytes)
    problem = cache_type_problem(subject.layout, k, v) or quantized_v_refusal(v, workload, subject.architecture)
    return None if problem is None else f"llama-server's MTP draft context (--spec-draft-type-k/-v): {problem}"


def draft_types(key_element_bytes: int, value_element_bytes: int) -> tuple[CacheType, CacheType]:
    """The draft context's K and V cache types (common_base_params_to_speculative: speculative.draft.cache_type_k/v,
    --spec-draft-type-k/-v, f16 by default)."""
    return cache_type(key_element_bytes), cache_type(value_element_bytes)


def with_mtp(subject: Subject, workload: Workload) -> Subject:
    """The subject as llama-server loads it under the workload: with draft-mtp, its weights (and the part of them
    the CPU's extra buffer types pack, and the tensors placement assigns) hold the NextN/MTP layers' tensors too;
    unchanged otherwise, or when they are held already."""
    if not workload.multi_token_prediction or subject.mtp_loaded:
        return subject
    w, mtp = subject.weights, subject.mtp
    has_layers = subject.layout is not None and subject.layout.nextn_width > 0
    if w.bytes is None or w.basis in (Basis.UNKNOWN, Basis.NOT_APPLICABLE) or not has_layers:
        weights = w
    elif mtp is None:
        weights = Part.unknown(
            Component.WEIGHTS,
            f"{w.note}; under --spec-type draft-mtp llama.cpp also loads its NextN/MTP layers' tensors (load_mtp),"
            " which this description of the model does not list",
        )
    else:
        note = (
            f"{w.note}; with the {mtp.count} tensors ({mtp.floor} bytes) of its NextN/MTP layers, which llama-server"
            " loads under --spec-type draft-mtp (load_mtp)"
        )
        weights = replace(w, bytes=w.bytes + mtp.floor, slack=w.slack + mtp.slack, note=note)
    packed = subject.packed
    if packed is not None and mtp is not None:
        packed = (packed[0] + mtp.packed[0], packed[1] + mtp.packed[1])
    tensors = tuple(t.with_mtp() for t in subject.tensors)
    return replace(subject, weights=weights, packed=packed, tensors=tensors, mtp_loaded=True)


# llama_model::create_memory under ctx_type MTP: a plain llama_kv_cache whose filter keeps il >= n_layer() (the NextN
# layers) for these architectures (deepseek32's and glm-dsa's own branch: no llama_kv_cache_dsa, no indexer cache;
# nemotron_h_moe's mtp_on_hybrid_nemotron: no recurrent state; hy_v3: no SWA keys, a plain cache); their DECODER_MTP
# graph runs one NextN block (n_layer_nextn == 1 asserted)
NEXTN_ONLY_CACHE = frozenset(
    {"qwen3next", "qwen35", "qwen35moe", "bailingmoe3", "deepseek32", "glm-dsa", "nemotron_h_moe", "hy_v3"}
)
# the same branch gives these no layer filter under ctx_type MTP: the draft's llama_kv_cache holds every layer
# (n_layer_all: the trunk's and the NextN one, each as wide as the target's); their graph_mtp runs one NextN block
ALL_LAYERS_CACHE = frozenset({"deepseek2", "glm4moe"})
# llama_model::create_memory under ctx_type MTP (swa_type set): a llama_kv_cache_iswa whose filter keeps
# il >= n_layer(); each NextN layer in its base cache or its SWA cache as hparams.is_swa(il) says, with its own heads
# (graph_mtp's nextn_layer_offset 0 block is the first NextN layer's: GraphShape.nextn); deepseek4's own branch
# (not llama_kv_cache_dsv4: no compressed caches or compressor states) the same, its NextN layers sliding, K and V
# allocated (not MLA to the cache) though its graph reads V as a view of K
NEXTN_ONLY_ISWA_CACHE = frozenset({"mimo2", "step35", "deepseek4"})
# create_memory's default branch (3.21.1's llama.cpp filters the NextN layers for its own list of architectures
# alone) gives these no layer filter under ctx_type MTP: the draft's llama_kv_cache_iswa holds every layer, each in the
# base or the SWA half as the target's (is_swa(il)); their graph_mtp runs the NextN layer's own block
ALL_LAYERS_ISWA_CACHE = frozenset({"cohere2moe"})


@dataclass(frozen=True)
class DraftContext:
    """llama-server's MTP draft context for a model: its graph and the rows of its KV cache."""

    graph: GraphShape  # LLM_GRAPH_TYPE_DECODER_MTP (estimator/graph_mtp.py)
    layers: int  # the layers its KV cache holds: the NextN ones, or (all_layers) every layer
    k_width: int  # K elements a cell, a layer
    v_width: int  # V elements a cell, a layer (0: an MLA cache keeps K only)
    all_layers: bool = False  # ALL_LAYERS_CACHE: the trunk's layers are in the draft's cache too
    window: int | None = None  # the NextN layers' sliding window (llama_kv_cache_iswa's SWA cache); None: n_ctx_seq
    v_width_trans: int = 0  # a transposed V's width (llama_kv_cache: n_embd_v_gqa_max, flash attention off); 0: v_width
    # ALL_LAYERS_ISWA_CACHE: each layer's window in layer order (None: the base half's n_ctx_seq cells); (): `window`
    windows: tuple[int | None, ...] = ()

    def cells(self, geometry: ContextGeometry) -> int:
        """Cells a stream of a NextN layer's cache: llama_kv_cache_iswa's SWA size for a sliding one, else n_ctx_seq."""
        return window_cells(self.window, geometry)

    def layer_cells(self, geometry: ContextGeometry) -> tuple[int, ...]:
        """Cells a stream of each layer the cache holds, in layer order (`windows`' each, else `cells`)."""
        if self.windows:
            return tuple(window_cells(w, geometry) for w in self.windows)
        return (self.cells(geometry),) * self.layers

    def v_row(self, geometry: ContextGeometry) -> int:
        """V elements a cell: llama_kv_cache's n_embd_v_gqa_max() where V is transposed (flash attention off)."""
        return self.v_width_trans if geometry.v_trans and self.v_width_trans and self.v_width else self.v_width


def draft_context(arch: str, layout: Layout) -> DraftContext | None:
    """The draft context where memfit derives it (NEXTN_ONLY_CACHE or ALL_LAYERS_CACHE, one NextN layer, its graph
    rebuilt; NEXTN_ONLY_ISWA_CACHE: iswa_draft_context), else None. The NextN block's heads are the trunk's last
    attention layer's (graph_mtp.nextn_block); an all-layers cache is derived where every trunk layer's cache row is
    as wide as that block's."""
    if arch in NEXTN_ONLY_ISWA_CACHE:
        return iswa_draft_context(arch, layout)
    if arch in ALL_LAYERS_ISWA_CACHE:
        return all_layers_iswa_draft_context(arch, layout)
    every = arch in ALL_LAYERS_CACHE
    if not (every or arch in NEXTN_ONLY_CACHE) or layout.nextn_layers != 1 or layout.graph is None:
        return None
    graph, block = mtp_graph_shape(arch, layout.graph), nextn_block(layout.graph)
    if graph is None or block is None:
        return None
    if block.kv_lora:  # llama_kv_cache of an MLA layer: K [kv_lora_rank + n_rot], no V
        k_width, v_width = block.kv_lora + block.n_rot, 0
    else:
        k_width, v_width = block.n_head_kv * block.head_k, block.n_head_kv * block.head_v
    if not every:
        return DraftContext(graph, layout.nextn_layers, k_width, v_width)
    trunk = layout.graph.layers
    if any(_row(b) != _row(block) for b in trunk):
        return None
    return DraftContext(graph, len(trunk) + layout.nextn_layers, k_width, v_width, all_layers=True)


def _row(b: GraphLayer) -> tuple[int, int, int, int, int]:
    """What sizes a layer's cache row."""
    return b.kv_lora, b.n_rot, b.n_head_kv, b.head_k, b.head_v


def iswa_draft_context(arch: str, layout: Layout) -> DraftContext | None:
    """The draft of mimo2 / step35 / deepseek4 (llama_kv_cache_iswa filtered to il >= n_layer()): every NextN layer
    its own block (GraphShape.nextn), all alike here (the graph reserved for offset 0 is the one each draft step's
    is), their cache rows in the SWA cache where is_swa(il) (Window's pattern over n_layer_all: step35 reads the NextN
    layers' entries, deepseek4 slides every layer, mimo2 reads n_layer()'s only, so its NextN layer is full); None
    where they are not derived or differ."""
    shape = layout.graph
    if shape is None or not shape.nextn or len(set(shape.nextn)) != 1 or len(shape.nextn) != layout.nextn_layers:
        return None
    graph, block = mtp_graph_shape(arch, shape), shape.nextn[0]
    if (
        graph is None
        or not block.n_head
        or block.kv_lora
        or mtp_graph_abort(arch, shape)
        or not builds_mtp_graph(arch, graph)
    ):
        return None
    k, v = block.n_head_kv * block.head_k, block.n_head_kv * block.head_v
    return DraftContext(graph, layout.nextn_layers, k, v, window=block.window, v_width_trans=graph.v_width_all)


def all_layers_iswa_draft_context(arch: str, layout: Layout) -> DraftContext | None:
    """The draft of cohere2moe (llama_kv_cache_iswa over every layer, none filtered): one NextN layer's own block
    (GraphShape.nextn) for the graph, every layer's cache row in the half its window names; None where a layer does
    not attend or its row is not as wide as the NextN block's."""
    shape = layout.graph
    if shape is None or len(shape.nextn) != 1 or layout.nextn_layers != 1:
        return None
    graph, block, blocks = mtp_graph_shape(arch, shape), shape.nextn[0], shape.layers + shape.nextn
    if (
        graph is None
        or block.kv_lora
        or not all(b.n_head for b in blocks)
        or any(_row(b) != _row(block) for b in blocks)
    ):
        return None
    k, v = block.n_head_kv * block.head_k, block.n_head_kv * block.head_v
    windows = tuple(b.window for b in blocks)
    return DraftContext(graph, len(blocks), k, v, all_layers=True, v_width_trans=graph.v_width_all, windows=windows)


def mimo2_abort(shape: GraphShape) -> str | None:
    """mimo2.cpp's graph_mtp asserts a fused attn_qkv and a dense FFN on each NextN block (GGML_ASSERT(layer.wqkv),
    GGML_ASSERT(layer.ffn_gate && layer.ffn_down && layer.ffn_up))."""
    for b in shape.nextn:
        if not b.fused_qkv:
            return "its Q, K and V apart, where GGML_ASSERT(layer.wqkv) needs one fused attn_qkv"
        if not b.n_ff or b.n_expert:
            return "its routed experts, where a GGML_ASSERT needs a dense FFN (ffn_gate, ffn_down, ffn_up)"
    return None


def nemotron_h_moe_abort(shape: GraphShape) -> str | None:
    """nemotron-h-moe.cpp's graph_mtp runs the block's experts on its n_embd-wide rows, where load_arch_tensors made
    them moe_latent_size wide (ggml_mul_mat_id's GGML_ASSERT(as->ne[0] == b->ne[0]))."""
    if any(b.routing.latent for b in shape.layers if b.n_expert):
        return (
            "its experts are moe_latent_size wide and get n_embd-wide rows (no ffn_latent_down before them):"
            " ggml_mul_mat_id's GGML_ASSERT(as->ne[0] == b->ne[0])"
        )
    return None


# the architectures whose graph_mtp aborts on some NextN blocks: why, for a model's graph
MTP_GRAPH_ABORT: dict[str, Callable[[GraphShape], str | None]] = {
    "mimo2": mimo2_abort,
    "nemotron_h_moe": nemotron_h_moe_abort,
}


def mtp_graph_abort(arch: str, shape: GraphShape) -> str | None:
    """Why the architecture's graph_mtp aborts on this model's NextN block, or None."""
    abort = MTP_GRAPH_ABORT.get(arch)
    return abort(shape) if abort else None


def dsv4_block_built(graph: GraphShape) -> bool:
    """deepseek4.cpp's graph_mtp on a block that neither compresses (GGML_ASSERT(inp_dsv4 || ratio == 0)) nor routes
    by token (il >= dsv4_hash_layer_count): the blocks memfit rebuilds."""
    (block,) = graph.layers
    return graph.dsv4 is not None and graph.dsv4.ratios == (0,) and not block.routing.by_token


# the architectures whose draft graph memfit rebuilds only on some NextN blocks (every other one's on all)
MTP_BLOCK_BUILT: dict[str, Callable[[GraphShape], bool]] = {"deepseek4": dsv4_block_built}


def builds_mtp_graph(arch: str, graph: GraphShape) -> bool:
    """Whether memfit rebuilds the architecture's graph_mtp on the draft graph's NextN block (where mtp_graph_abort
    finds no abort)."""
    built = MTP_BLOCK_BUILT.get(arch)
    return built(graph) if built else True


def draft_geometry(geometry: ContextGeometry) -> ContextGeometry:
    """The draft context's sizes beside the target's (common_speculative_init_result): the same n_ctx, streams,
    ubatch and flash attention; n_rs_seq 0; common_base_params_to_speculative's n_outputs_max = n_parallel; the
    draft's own cache types (draft_types: Hadamard rotations where quantized); no verification rows, embeddings or
    nextn rows of its own at reserve."""
    k, v = draft_types(geometry.draft.key_element_bytes, geometry.draft.value_element_bytes)
    return replace(
        geometry,
        n_outputs_max=geometry.n_seq,
        quantized_k=k.quantized,
        quantized_v=v.quantized,
        k_type=k.name,
        v_type=v.name,
        rs_snapshots=0,
        nextn_width=0,
        draft_tokens=0,
        embeddings=False,
        embd_width=0,
        graph_tokens=0,
    )


def draft_kv_bytes(draft: DraftContext, geometry: ContextGeometry) -> tuple[int, int]:
    """(K bytes, V bytes) of the draft's KV cache (llama_kv_cache's constructor over its layers): per layer
    K [k_width, cells, n_stream] and V [v_row, ...] in the draft's own types (draft_types; cells: n_ctx_seq, or a
    sliding layer's pad(min(n_ctx_seq, n_swa * seqs + n_ubatch), 256) in llama_kv_cache_iswa's SWA cache)."""
    rows = sum(draft.layer_cells(geometry)) * geometry.n_stream
    k, v = draft_types(geometry.draft.key_element_bytes, geometry.draft.value_element_bytes)
    return rows * k.row_bytes(draft.k_width), rows * v.row_bytes(draft.v_row(geometry))


def draft_output_bytes(n_vocab: int, nextn_width: int, geometry: ContextGeometry) -> int:
    """llama_context::output_reserve on the draft after llama_set_embeddings_nextn(ctx_dft, true, masked) and, with
    llama-server's draft backend_sampling (on by default: the geometry's draft settings), a top-k sampler chain a
    sequence (llama_set_sampler): for max(n_outputs, n_seq_max) rows (each draft step one output a sequence) logits
    and nextn embeddings, and with the sampler the backend sampling's logits and probs (2 x n_vocab floats) and its
    sampled token and candidates (1 + n_vocab tokens); the buffer of init, logits alone, is freed first.
    `nextn_width` 0: the buffer at init."""
    if not nextn_width:
        return n_vocab * geometry.n_seq * 4
    sampled = 2 * n_vocab + 1 + n_vocab if geometry.draft.backend_sampling else 0
    return (n_vocab + nextn_width + sampled) * geometry.n_seq * 4


def draft_workspace(
    draft: DraftContext, n_vocab: int, nextn_width: int, geometry: ContextGeometry
) -> tuple[int, int] | None:
    """(floor, slack) of the draft's compute buffer (its DECODER_MTP graph replayed) plus its output buffer, at the
    target's `geometry`; None where the buffer is not derived."""
    g = draft_geometry(geometry)
    bounds = compute_bounds(draft.graph, n_vocab, g)
    if bounds is None:
        return None
    floor, ceiling = bounds
    return floor + draft_output_bytes(n_vocab, nextn_width, geometry), ceiling - floor


def draft_compute(draft: DraftContext, n_vocab: int, geometry: ContextGeometry) -> int:
    """The draft's compute buffer as a dry run reserves it (its DECODER_MTP graph replayed, no sampler set yet): what
    common_fit_extra_model adds beside its KV cache at each context the fitter tries (the weights shared, the output
    buffer left out as for the target)."""
    return replayed(draft.graph, n_vocab, draft_geometry(geometry)).size


def draft_fallback(draft: DraftContext, n_vocab: int, geometry: ContextGeometry, n_ubatch: int) -> int:
    """compute_buffer.compute_fallback of the draft's graph."""
    return compute_fallback(draft.graph, n_vocab, draft_geometry(geometry), n_ubatch)
