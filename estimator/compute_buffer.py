"""llama.cpp's CPU compute buffer, from the graph it reserves: a floor and a ceiling.

llama_context::sched_reserve (src/llama-context.cpp) reserves the prompt-processing graph for one worst-case
ubatch: n_tokens = min(n_ctx, n_ubatch) rounded up to a multiple of n_seq (graph_reserve), an output row for
each token before the rounding, the KV caches full (n_kv = every cell). ggml_gallocr (ggml/src/ggml-alloc.c)
places every tensor of that graph in one buffer: inputs first, then each node in graph order, a tensor freed
after its last consumer, views and in-place ops (rms_norm, rope, soft_max, mul, add, unary) taking no new
memory; the buffer is the highest offset reached.

Where estimator/compute_graph.py rebuilds the graph, the buffer is that allocation replayed
(estimator/graph_alloc.py), and the bounds sit REPLAY_SLACK_* from it. Elsewhere the phase rule below bounds it:
the buffer is at least the largest set of tensors alive at once (`peak`: the widest phase of the graph) and at
most that plus what the best-fit allocator loses to holes. The phases mirror src/llama-graph.cpp; their
`*_HOLE_ROWS`, `FLOOR_ROWS`, `FLOOR_INPUTS`, `SLACK_ROWS`, `SLACK_FIXED` and `FFN_SLACK_ROWS` constants are NOT
derived: they are the allocator gap measured on llama.cpp v0.4.0's dry and real runs (tests/data), in
[n_embd, n_tokens] F32 rows of the residual stream or of the widest activation.
All activations are F32; T = ubatch tokens, E = n_embd.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import lru_cache

from memfit.estimator import replay_table
from memfit.estimator.compute_graph import build_graph, buildable, ubatch_outputs, ubatch_tokens
from memfit.estimator.context import DEFAULT_N_BATCH, ContextGeometry
from memfit.estimator.graph_alloc import Replay
from memfit.estimator.kv_cache import window_cells
from memfit.estimator.layout import GraphLayer, GraphShape
from memfit.integers import round_up

F32 = 4
MiB = 1 << 20
ATTN_HOLE_ROWS = 1  # allocator gap (measured): the KQ scores / FA output sit 1-3 residual rows above the live set
FFN_HOLE_ROWS = 2  # allocator gap (measured): a dense FFN's swiglu sits above attention's freed Q / out / wo
HEAD_HOLE_ROWS = 1  # allocator gap (measured): the last block's ffn_out / residual stays below the logits
FLOOR_ROWS = 1  # allocator gap (measured): the holes above can be one residual row fewer
FLOOR_INPUTS = 2 * MiB  # allocator gap (measured): small inputs and alignment the floor does not count on
SLACK_ROWS = 2  # allocator gap (measured): up to two more rows of the widest activation lost to best fit
SLACK_FIXED = 8 * MiB  # allocator gap (measured): sinks, extra masks, norms and scales, 32/64-byte alignment
FFN_SLACK_ROWS = 1  # allocator gap (measured): the head's logits can land above one freed FFN activation row
# The rebuilt graph is llama.cpp's node for node for the architectures whose graph was checked against llama.cpp's
# own (`node_for_node`: to the byte on 96% of their measured runs, within 1.01 MiB on all); for the others it leaves
# out a builder's own extras (LayerNorm, parallel blocks, layers without rope, routers), measured within two rows.
REPLAY_SLACK_ROWS = 2  # either side of the replayed buffer, where the graph is not checked node for node
REPLAY_SLACK_FIXED = 1 * MiB  # either side there too: small inputs' alignment
REPLAY_SLACK_CHECKED = 2 * MiB  # either side, where it is: within 1.01 MiB on every measured run of those

# Above this ubatch the phases' holes grow past the rows above (3+ rows at n_ubatch 2048 on real shapes,
# measured): the phase rule is not used there.
MAX_DERIVED_UBATCH = 512


def mask_bytes(graph: GraphShape, geometry: ContextGeometry, t: int) -> int:
    """The KQ masks: graph inputs, alive until the last attention layer."""
    elt = 2 if geometry.flash_attention else F32  # build_attn_inp_kq_mask: F16 under flash attention, else F32
    if not any(layer.n_head for layer in graph.distinct_layers):
        return 0
    if not graph.cache_attention:
        return t * t * elt  # build_attn_inp_no_cache: one [T, T] mask
    cells = {window_cells(layer.window, geometry) for layer in graph.distinct_layers if layer.n_head}
    return sum(n_kv * t * elt for n_kv in cells)  # one mask per cache, ne = [n_kv, T/n_stream, 1, n_stream]


def small_inputs(t: int) -> int:
    return t * 4 * F32 + t * F32  # inp_tokens, inp_pos, k_idxs / v_idxs (I64), out_ids


def attention_phase(layer: GraphLayer, geometry: ContextGeometry, cache: bool, t: int) -> int:
    h = layer.n_head
    q = t * h * layer.head_k * F32  # build_attn: Qcur (mul_mat; rope in place)
    kv_cur = t * layer.n_head_kv * (layer.head_k + layer.head_v) * F32  # Kcur, Vcur before set_rows into the cache
    out = t * h * layer.head_v * F32  # build_attn_mha: flash_attn_ext / kqv result [Dv, H, T]
    if layer.fused_qkv:
        kv_cur += t * (h + 2 * layer.n_head_kv) * layer.head_k * F32  # build_qkv: attn_qkv output under the views
    if geometry.flash_attention:
        return q + kv_cur + out  # build_attn_mha, flash path: no score matrix
    n_kv = window_cells(layer.window, geometry) if cache else t  # no cache (non-causal): keys are the ubatch
    return q + n_kv * t * h * F32 + out  # build_attn_mha: kq = mul_mat(k, q), soft_max in place, kqv beside it


def ffn_phase(layer: GraphLayer, n_embd: int, t: int) -> int:
    dense = 0
    if layer.n_ff:  # build_ffn: up, gate, swiglu (GLU is not in place) | up, activation in place, down
        dense = 3 * t * layer.n_ff * F32 if layer.gated else t * (layer.n_ff + n_embd) * F32
    moe = 0
    if layer.n_expert:
        router = 2 * t * layer.n_expert * F32  # build_moe_ffn: router logits / probs, argsort_top_k (I32, full)
        k, ff = layer.n_expert_used, layer.n_ff_exp
        moe = router + max(3 * t * k * ff, t * k * (ff + n_embd)) * F32  # mul_mat_id up, gate, swiglu | down [E,k,T]
    shared = layer.routing.shared_ff
    shexp = (t * n_embd + 3 * t * shared) * F32 if shared else 0  # moe_out beside the shared FFN
    return max(dense, moe, shexp)


def recurrent_phase(layer: GraphLayer, geometry: ContextGeometry, t: int) -> int:
    if not layer.recurrent_in:  # build_rs / ssm_scan / rwkv_wkv: in-projection + conv / scan output, scan state
        return 0
    return 2 * t * layer.recurrent_in * F32 + layer.recurrent_state * F32 * geometry.n_seq


def layer_phase(
    graph: GraphShape, layer: GraphLayer, geometry: ContextGeometry, t: int, mask: int | None = None
) -> int:
    """One block's widest phase beside the masks, the small inputs and the residual stream (`mask`: the masks'
    bytes when the caller has them, the same for every block)."""
    residual = t * graph.n_embd * F32  # inpSA / ffn_inp: the residual stream
    attn = attention_phase(layer, geometry, graph.cache_attention, t) + ATTN_HOLE_ROWS * residual if layer.n_head else 0
    ffn = ffn_phase(layer, graph.n_embd, t) + (FFN_HOLE_ROWS * residual if layer.n_ff or layer.n_expert else 0)
    work = max(attn, ffn, recurrent_phase(layer, geometry, t))
    masks = mask_bytes(graph, geometry, t) if mask is None else mask
    return masks + small_inputs(t) + residual + work


def head_phase(graph: GraphShape, n_vocab: int, geometry: ContextGeometry, t: int) -> int:
    if not graph.logits:  # build_pooling: result_norm [E, T] and the pooled rows, one per sequence
        return t * graph.n_embd * F32 + geometry.n_seq * graph.n_embd * F32
    rows = ubatch_outputs(geometry)  # the reserve's outputs: the ubatch before its rounding to n_seq
    logits = rows * (n_vocab + graph.n_embd) * F32  # build_inp_out_ids rows of result_norm, result_output = lm head
    return logits + HEAD_HOLE_ROWS * t * graph.n_embd * F32


def compute_peak(graph: GraphShape, n_vocab: int, geometry: ContextGeometry) -> int:
    """The widest phase of the graph: the tensors alive at once, with the allocator's usual holes below them."""
    t = ubatch_tokens(geometry)
    mask = mask_bytes(graph, geometry, t)  # graph inputs: the same beside every block
    blocks = graph.distinct_layers  # identical blocks have identical phases: each distinct one once
    return max([head_phase(graph, n_vocab, geometry, t)] + [layer_phase(graph, b, geometry, t, mask) for b in blocks])


def widest_row(graph: GraphShape) -> int:
    """The widest per-token activation of an attention block (the unit the allocator's holes come in)."""
    return max(
        [graph.n_embd]
        + [max(b.n_head * max(b.head_k, b.head_v), b.n_head_kv * b.head_k) for b in graph.distinct_layers]
    )


def widest_ffn_row(graph: GraphShape) -> int:
    """The widest per-token activation of a feed-forward or recurrent block."""
    widths = [max(b.n_ff, b.n_expert_used * b.n_ff_exp, b.routing.shared_ff, b.recurrent_in) for b in graph.layers]
    return max(widths, default=0)


def derived_for(graph: GraphShape, geometry: ContextGeometry) -> bool:
    """Where the phases above hold against llama.cpp: ubatches up to MAX_DERIVED_UBATCH, and flash attention off
    only without sliding or chunked layers (their two masks and score matrices leave holes not modelled here)."""
    if (
        geometry.n_ubatch > MAX_DERIVED_UBATCH or geometry.swa_full
    ):  # swa_full: the phases' holes were never measured with full-size sliding caches
        return False
    return geometry.flash_attention or not any(layer.window for layer in graph.distinct_layers)


SHAPES = 256  # distinct graph shapes interned
_interned: dict[GraphShape, GraphShape] = {}  # one instance per distinct shape, the oldest first
_instances: dict[int, tuple[weakref.ref[GraphShape], GraphShape]] = {}  # by id: a live instance, its interned one


def interned(graph: GraphShape) -> GraphShape:
    """The one instance of `graph`'s shape the caches below key on: each quant of a repository derives its own
    equal shape, and a cache lookup with another instance compared every layer (22 us of Qwen3-8B's 36 here, a
    third of a plan's work)."""
    seen = _instances.get(id(graph))
    if seen is not None and seen[0]() is graph:
        return seen[1]
    one = _interned.setdefault(graph, graph)
    while len(_interned) > SHAPES:
        try:
            del _interned[next(iter(_interned))]
        except (KeyError, RuntimeError, StopIteration):  # another thread's eviction
            break
    key = id(graph)
    _instances[key] = (weakref.ref(graph, _forgetting(key)), one)
    return one


def _forgetting(key: int) -> Callable[[weakref.ref[GraphShape]], None]:
    held = _instances  # bound now: at interpreter exit the module's globals are gone before the last instances

    def forget(_: weakref.ref[GraphShape]) -> None:
        held.pop(key, None)

    return forget


@lru_cache(maxsize=256)
def rebuilt(graph: GraphShape) -> bool:
    """compute_graph.buildable, once per shape (a plan asks it at every probe, of every layer)."""
    return buildable(graph)


@lru_cache(maxsize=1024)
def replayed(graph: GraphShape, n_vocab: int, geometry: ContextGeometry) -> Replay:
    """ggml-alloc's buffer for the rebuilt graph (the same for every quant of a model: kept for the next ask), from
    the graph structure's pieces (estimator/replay_table.py) where a context has been asked of it before."""
    return replay_table.replayed(graph, n_vocab, geometry, build_graph)


def replay_margin(graph: GraphShape, tokens: int) -> int:
    """How far either bound sits from the replayed buffer of a `tokens`-token ubatch."""
    if graph.node_for_node:
        return REPLAY_SLACK_CHECKED
    return REPLAY_SLACK_ROWS * tokens * graph.n_embd * F32 + REPLAY_SLACK_FIXED


def compute_bounds(graph: GraphShape, n_vocab: int, geometry: ContextGeometry) -> tuple[int, int] | None:
    """(floor, ceiling) of the compute buffer llama.cpp reserves for this graph and workload, or None where the
    rule is not derived: the buffer ggml-alloc sizes for the rebuilt graph (estimator/compute_graph.py) where it is
    rebuilt, else the widest phase below (see `derived_for`)."""
    graph = interned(graph)
    if rebuilt(graph):
        reserved = replayed(graph, n_vocab, geometry).size
        margin = replay_margin(graph, ubatch_tokens(geometry))
        return max(0, reserved - margin), reserved + margin
    if not derived_for(graph, geometry):
        return None
    t = ubatch_tokens(geometry)
    peak = compute_peak(graph, n_vocab, geometry)
    floor = max(0, peak - FLOOR_ROWS * t * graph.n_embd * F32 - FLOOR_INPUTS)
    holes = SLACK_ROWS * t * widest_row(graph) + FFN_SLACK_ROWS * t * widest_ffn_row(graph)
    ceiling = peak + holes * F32 + SLACK_FIXED  # ggml_dyn_tallocr_alloc: what best fit loses to holes
    return floor, ceiling


def compute_fallback(graph: GraphShape, n_vocab: int, geometry: ContextGeometry, n_ubatch: int) -> int:
    """How far the compute buffer's bounds can fall below this workload's as the context grows (the same ubatch
    request `n_ubatch`): ggml-alloc's best fit can place a larger graph in a smaller buffer, but never below the
    bytes alive at once, which only grow with the context; and the margin grows with the ubatch's tokens (at most
    to the requested ubatch). 0 for the phase rule, whose bounds only grow."""
    graph = interned(graph)
    if not rebuilt(graph):
        return 0
    found = replayed(graph, n_vocab, geometry)
    t = ubatch_tokens(geometry)
    widest = round_up(min(n_ubatch, DEFAULT_N_BATCH), geometry.n_seq)
    return found.size - found.live + replay_margin(graph, max(t, widest)) - replay_margin(graph, t)
