"""The compute buffer at any context without replaying the whole graph: per graph structure, the buffer as a
piecewise affine function of a stream's KV cells, its pieces found as contexts are asked for.

The graph llama.cpp reserves (estimator/compute_graph.py) depends on the context only through the KV cells each
layer sees (kv_cache.window_cells: a stream's cells x = n_ctx_seq, or a sliding window's pad(min(x, cap), 256)) and
through the ubatch's tokens and outputs (compute_graph.ubatch_outputs). Everything else in the geometry (ubatch,
streams, flash attention, cache types, the outputs' cap) and the model fixes the graph's structure
(`structure_key`). Between two `caps` (a sliding window's cells, a sparse attention's top-k: `regime`) every cell
count the graph takes is x or a constant, so every tensor size is affine in x; two graphs of a structure built
at two cell counts give that program (estimator/replay_program.py), and a run of it at x gives the buffer over a
whole piece of contexts (estimator/replay_interval.py).

The first context asked of a structure is replayed in full (graph_alloc.replay), as a single fit needs no more,
its graph kept a while; the second compiles the structure from its own graph and that one; every later context
is a piece already found, or one run of the program (its identical layers skipped once the allocator repeats
itself). Where the program does not hold (a size not affine in x, a cell count where two layouts coincide) the
graph is replayed in full.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING

from memfit.estimator.context import CELL_PADDING, ContextGeometry
from memfit.estimator.ggml_graph import Graph
from memfit.estimator.graph_alloc import Replay, replay
from memfit.estimator.layout import GraphShape
from memfit.integers import round_up

if TYPE_CHECKING:  # imported where a structure compiles: a single fit (the CLI's) never loads them
    from memfit.estimator.replay_interval import Piece
    from memfit.estimator.replay_program import Program

Build = Callable[[GraphShape, ContextGeometry, int], Graph]  # compute_graph.build_graph
STRUCTURES = 64  # graph structures (model, vocabulary, geometry but the context, regime) kept: ~150 KiB each
PENDING = 8  # graphs of structures asked once, kept for the second context's compile: ~0.5 MiB each
_pending: dict[tuple, tuple[int, Graph]] = {}  # by structure: the first context's cells and graph


class _Table:
    """One structure's answers so far: full replays by cell count, then its program and the pieces it found."""

    __slots__ = ("exact", "program", "failed", "pieces")

    def __init__(self) -> None:
        self.exact: dict[int, Replay] = {}  # full replays: the first context asked, special cell counts
        self.program: Program | None = None  # compiled at the second context asked
        self.failed = False  # the structure has no affine program: always replayed in full
        self.pieces: list[Piece] = []


def caps(graph: GraphShape, geometry: ContextGeometry) -> set[int]:
    """The cell counts at which a width the graph takes of a stream's cells x stops growing with it: each sliding
    window's pad(window * swa_seqs + n_ubatch, 256) (kv_cache.window_cells), the DSA indexer's top-k
    (graph_dsa: TOP_K keeps min(n_kv, top_k) cells), QSA's selected cells (graph_qwen4exp: min(n_kv, top_k + ratio
    - 1)). A width min(x, k) with k between two padded cell counts jumps between them: both are caps, so the
    regime between holds those two counts alone (`_padded_edges`)."""
    found: set[int] = set()
    if not geometry.swa_full:
        for layer in graph.distinct_layers:
            if layer.window is not None:
                found.add(round_up(layer.window * geometry.swa_seqs + geometry.n_ubatch, CELL_PADDING))
    widths = [graph.indexer.top_k] if graph.indexer is not None else []
    if graph.hyper is not None:
        widths += [graph.hyper.idx_top_k + ratio - 1 for ratio in graph.hyper.ratios if ratio]
    for k in widths:
        found.update(_padded_edges(k))
    return found


def _padded_edges(k: int) -> tuple[int, int]:
    return k // CELL_PADDING * CELL_PADDING, round_up(k, CELL_PADDING)


def affine_in_cells(graph: GraphShape) -> bool:
    """Whether every size is affine in x between two caps: QSA's blocks, ceil(x / ratio), are over llama.cpp's
    padded cell counts only where the ratio divides the padding (graph_qwen4exp.qsa_top_k); deepseek4's compressed
    caches step with x (pad(ceil(x / ratio), 256) cells, graph_dsv4) and its windows are one sequence's whatever the
    cache's unification: never."""
    if graph.dsv4 is not None:
        return False
    return graph.hyper is None or all(CELL_PADDING % ratio == 0 for ratio in graph.hyper.ratios if ratio)


def regime(graph: GraphShape, geometry: ContextGeometry, x: int) -> tuple[int, int | None]:
    """The cell counts [lo, hi] around x over which every width the graph takes of the cells is x or a constant:
    between two of the `caps`, hi None past the last."""
    found = caps(graph, geometry)
    lo = max([CELL_PADDING, *(c for c in found if c <= x)])
    hi = min((c for c in found if c > x), default=None)
    return lo, hi


def structure_key(geometry: ContextGeometry) -> tuple:
    """The geometry's fields with the context taken out: the cells left out, n_ctx as what the graph reads of it
    (the ubatch's tokens, min(n_ctx, n_ubatch)), n_outputs_max as the reserved graph's outputs, min(those tokens,
    n_outputs_max), and the output buffer's own fields (n_batch, capped by the context and at least the ubatch, so
    no graph reads it beyond the outputs; the nextn embeddings' width; the draft tokens a verification carries; the
    embeddings' width)."""
    fields = dict(vars(geometry))
    del fields["n_ctx_seq"], fields["n_batch"], fields["nextn_width"], fields["draft_tokens"], fields["embd_width"]
    fields["n_ctx"] = min(geometry.n_ctx, geometry.n_ubatch)
    fields["n_outputs_max"] = min(fields["n_ctx"], geometry.outputs_max)
    return tuple(fields.values())


@lru_cache(maxsize=STRUCTURES)
def _table(graph: GraphShape, n_vocab: int, structure: tuple, lo: int) -> _Table:
    return _Table()


def clear() -> None:
    """Forget every structure (tests, benchmarks)."""
    _table.cache_clear()
    _pending.clear()


def _keep(key: tuple, x: int, built: Graph) -> None:
    _pending[key] = (x, built)
    while len(_pending) > PENDING:  # the oldest first
        try:
            del _pending[next(iter(_pending))]
        except (KeyError, RuntimeError, StopIteration):  # another thread's eviction
            break


def replayed(graph: GraphShape, n_vocab: int, geometry: ContextGeometry, build: Build) -> Replay:
    """graph_alloc.replay of build(graph, geometry, n_vocab), from the structure's pieces where it can."""
    x = geometry.n_ctx_seq
    if x < CELL_PADDING or x % CELL_PADDING or not affine_in_cells(graph):  # not what the regimes assume
        return replay(build(graph, geometry, n_vocab))
    lo, hi = regime(graph, geometry, x)
    key = (graph, n_vocab, structure_key(geometry), lo)
    table = _table(*key)
    found = table.exact.get(x)
    if found is not None:
        return found
    for piece in table.pieces:
        if piece.holds(x):
            return Replay(*piece.at(x))
    if table.failed:
        return replay(build(graph, geometry, n_vocab))
    if table.program is None and not table.exact:
        built = build(graph, geometry, n_vocab)
        found = table.exact[x] = replay(built)
        _keep(key, x, built)
        return found
    from memfit.estimator.replay_interval import run  # here: a single fit (the CLI's) never compiles
    from memfit.estimator.replay_program import Mismatch, compile_program

    program = table.program
    if program is None:  # the second context: compiled from its graph and the first's (or a neighbour's)
        built = build(graph, geometry, n_vocab)
        other, other_built = _pending.pop(key, (x, built))
        if other == x:
            other = x + CELL_PADDING if hi is None or x + CELL_PADDING <= hi else x - CELL_PADDING
            other_built = build(graph, replace(geometry, n_ctx_seq=other), n_vocab)
        try:
            program = compile_program(built, other_built, x, other)
        except Mismatch:
            table.failed = True
            return replay(built)
        table.program = program
    if x in program.special:
        found = table.exact[x] = replay(build(graph, geometry, n_vocab))
        return found
    piece = run(program, x, lo, hi)
    table.pieces.append(piece)
    return Replay(*piece.at(x))
