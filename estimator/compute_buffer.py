"""llama.cpp's CPU compute buffer, from the graph it reserves: a floor and a ceiling.

llama_context::sched_reserve (src/llama-context.cpp) reserves the prompt-processing graph for one worst-case
ubatch: n_tokens = min(n_ctx, n_ubatch) rounded up to a multiple of n_seq (graph_reserve), an output row for
each token before the rounding, the KV caches full (n_kv = every cell). ggml_gallocr (ggml/src/ggml-alloc.c)
places every tensor of that graph in one buffer: inputs first, then each node in graph order, a tensor freed
after its last consumer, views and in-place ops (rms_norm, rope, soft_max, mul, add, unary) taking no new
memory; the buffer is the highest offset reached.

Where estimator/compute_graph.py rebuilds the graph, the buffer is that allocation replayed
(estimator/graph_alloc.py), and the bounds sit REPLAY_SLACK_* from it. Elsewhere (an architecture without a
rebuilt graph, sizes its builder does not take) the buffer is not derived: no bounds, the workspace `unknown`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from functools import lru_cache
from typing import Any, TypeVar, cast

from memfit.estimator import replay_table
from memfit.estimator.compute_graph import build_graph, buildable, ubatch_tokens
from memfit.estimator.context import DEFAULT_N_BATCH, ContextGeometry
from memfit.estimator.graph_alloc import Replay
from memfit.estimator.graph_dsv4 import sized as dsv4_sized
from memfit.estimator.layout import GraphShape, Layout
from memfit.integers import round_up

F32 = 4
MiB = 1 << 20
# The rebuilt graph is llama.cpp's node for node for the architectures whose graph was checked against llama.cpp's
# own (`node_for_node`: to the byte on 96% of their measured runs, within 1.01 MiB on all); for the others it leaves
# out a builder's own extras (LayerNorm, parallel blocks, layers without rope, routers), measured within two rows.
REPLAY_SLACK_ROWS = 2  # either side of the replayed buffer, where the graph is not checked node for node
REPLAY_SLACK_FIXED = 1 * MiB  # either side there too: small inputs' alignment
REPLAY_SLACK_CHECKED = 2 * MiB  # either side, where it is: within 1.01 MiB on every measured run of those


SHAPES = 256  # distinct shapes (graphs, layouts) interned
Shape = TypeVar("Shape", GraphShape, Layout)
_interned: dict[Hashable, Any] = {}  # one instance per distinct shape, the oldest first
_instances: dict[int, tuple[weakref.ref[Any], Any]] = {}  # by id: a live instance, its interned one


def interned(graph: Shape) -> Shape:
    """The one instance of `graph`'s shape (or a layout's) the caches key on: each quant of a repository derives
    its own equal shape, and a cache lookup with another instance compared every layer (22 us of Qwen3-8B's 36
    here, a third of a plan's work; 86 us for its whole layout)."""
    seen = _instances.get(id(graph))
    if seen is not None and seen[0]() is graph:
        return cast(Shape, seen[1])
    one = _interned.setdefault(graph, graph)
    while len(_interned) > SHAPES:
        try:
            del _interned[next(iter(_interned))]
        except (KeyError, RuntimeError, StopIteration):  # another thread's eviction
            break
    key = id(graph)
    _instances[key] = (weakref.ref(graph, _forgetting(key)), one)
    return one


def _forgetting(key: int) -> Callable[[weakref.ref[Any]], None]:
    held = _instances  # bound now: at interpreter exit the module's globals are gone before the last instances

    def forget(_: weakref.ref[Any]) -> None:
        held.pop(key, None)

    return forget


@lru_cache(maxsize=256)
def rebuilt(graph: GraphShape) -> bool:
    """compute_graph.buildable, once per shape (a plan asks it at every probe, of every layer)."""
    return buildable(graph)


def derived(graph: GraphShape, geometry: ContextGeometry) -> bool:
    """Whether the buffer is derived for this graph and workload: a rebuilt graph (deepseek4's for the K cache types
    graph_dsv4 sizes)."""
    return rebuilt(graph) and (graph.dsv4 is None or dsv4_sized(geometry))


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
    rule is not derived: the buffer ggml-alloc sizes for the rebuilt graph (estimator/compute_graph.py)."""
    graph = interned(graph)
    if not derived(graph, geometry):
        return None
    reserved = replayed(graph, n_vocab, geometry).size
    margin = replay_margin(graph, ubatch_tokens(geometry))
    return max(0, reserved - margin), reserved + margin


def compute_fallback(graph: GraphShape, n_vocab: int, geometry: ContextGeometry, n_ubatch: int) -> int:
    """How far the compute buffer's bounds can fall below this workload's as the context grows (the same ubatch
    request `n_ubatch`): ggml-alloc's best fit can place a larger graph in a smaller buffer, but never below the
    bytes alive at once, which only grow with the context; and the margin grows with the ubatch's tokens (at most
    to the requested ubatch). 0 where the buffer is not derived (no bounds to fall)."""
    graph = interned(graph)
    if not derived(graph, geometry):
        return 0
    found = replayed(graph, n_vocab, geometry)
    t = ubatch_tokens(geometry)
    widest = round_up(min(n_ubatch, DEFAULT_N_BATCH), geometry.n_seq)
    return found.size - found.live + replay_margin(graph, max(t, widest)) - replay_margin(graph, t)
