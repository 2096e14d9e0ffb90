"""ggml-alloc's replay compiled once per graph structure, its tensor sizes affine in the KV cells.

estimator/graph_alloc.py's `replay` walks a Graph of Tensor objects; everything it decides but the sizes is fixed
by the graph's structure (which tensors exist, their ops, sources, views and flags). Two graphs of one structure
built at two cell counts x (a stream's KV cells, `ContextGeometry.n_ctx_seq`) give every tensor's size as a + b*x
and every layout as such functions too; `compile_program` walks them once, as `replay` does, and records what the
allocator is asked in order (`Program.ops`):

- ALLOC: ggml_gallocr_allocate_node's ggml_dyn_tallocr_alloc of a new tensor;
- REUSE: ggml_gallocr_allocate_node's in-place branch (ggml_op_can_inplace, a source with one consumer and the
  same layout, ggml_are_same_layout): the node takes its source's offset, and ggml_gallocr_free_extra_space gives
  back the source's tail;
- FREE: ggml_gallocr_free_node, a tensor whose last consumer has run.

`same layout` and a view's offset 0 are the only questions `replay` asks of sizes outside the allocator: where
their answer holds at a single cell count (two affine layouts crossing), that count is `Program.special` and the
program does not hold there (the caller replays that graph in full).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from memfit.estimator.ggml_graph import Graph, Tensor
from memfit.estimator.graph_alloc import ALIGNMENT, INPLACE_OPS
from memfit.integers import round_up

ALLOC, REUSE, FREE = 0, 1, 2
Affine = tuple[int, int]  # (a, b): a + b*x
PERIOD_CANDIDATES = 3  # the most common gaps between alike ops tried as the layers' period


@dataclass(frozen=True)
class Program:
    """What ggml_gallocr_alloc_graph_impl asks of its dynamic allocator for one graph structure."""

    sizes: tuple[Affine, ...]  # each tensor's bytes, rounded up to ALIGNMENT (ggml_dyn_tallocr_alloc)
    ops: tuple[tuple[int, int, int], ...]  # (ALLOC | FREE, tensor, -1) or (REUSE, tensor, its source's block)
    special: frozenset[int]  # cell counts where a layout or offset question flips: not valid there
    period: Period | None = None  # identical layers: a stretch of ops repeating every P ops


@dataclass(frozen=True)
class Period:
    """ops[k + every] is ops[k] one layer on, for k in [start, end): the same kind and sizes, its tensors `shift`
    slots further (each layer's tensors are the previous layer's, `shift` slots on)."""

    start: int
    end: int
    every: int
    shift: int


class Mismatch(ValueError):
    """The two graphs differ in structure, or a size is not affine in the cells."""


def _affine(va: int, vb: int, xa: int, xb: int) -> Affine:
    slope, rest = divmod(vb - va, xb - xa)
    if rest:
        raise Mismatch(f"{va} at {xa} and {vb} at {xb} are not integer-affine")
    return va - slope * xa, slope


def _crossing(fa: list[Affine], fb: list[Affine]) -> tuple[bool, int | None]:
    """Whether two vectors of affine functions are equal everywhere; else the one x where they all agree, if any."""
    point: int | None = None
    for (a1, b1), (a2, b2) in zip(fa, fb, strict=True):
        if b1 == b2:
            if a1 != a2:
                return False, None
            continue
        x, rest = divmod(a2 - a1, b1 - b2)
        if rest or (point is not None and point != x):
            return False, None
        point = x
    return point is None, point


def _numbers(t: Tensor) -> tuple[int, ...]:
    return (*t.ne, *t.nb)


def compile_program(ga: Graph, gb: Graph, xa: int, xb: int) -> Program:
    """The replay of `ga` (built at xa cells) as a program over sizes affine in x, `gb` the same structure built at
    xb. Mirrors graph_alloc.replay step for step (ggml-alloc.c ggml_gallocr_alloc_graph_impl)."""
    order_a, order_b = [*ga.leafs, *ga.nodes], [*gb.leafs, *gb.nodes]
    if len(order_a) != len(order_b) or len(ga.leafs) != len(gb.leafs):
        raise Mismatch("the graphs have different tensor counts")
    slot = {t: i for i, t in enumerate(order_a)}
    slot_b = {t: i for i, t in enumerate(order_b)}
    n = len(order_a)
    srcs: list[tuple[int, ...]] = []
    view: list[int] = []
    sizes: list[Affine] = []
    at, at_b = slot.__getitem__, slot_b.__getitem__
    for ta, tb in zip(order_a, order_b, strict=True):
        mine = tuple(map(at, ta.srcs))
        base = -1 if ta.view_src is None else at(ta.view_src)
        if (
            (ta.op, ta.type, ta.input, ta.output, ta.external) != (tb.op, tb.type, tb.input, tb.output, tb.external)
            or base != (-1 if tb.view_src is None else at_b(tb.view_src))
            or mine != tuple(map(at_b, tb.srcs))
        ):
            raise Mismatch(f"the graphs differ at a {ta.op} tensor")
        srcs.append(mine)
        view.append(base)
        if base >= 0 or ta.external:  # never placed: no size
            sizes.append((0, 0))
            continue
        va, vb = round_up(ta.nbytes, ALIGNMENT), round_up(tb.nbytes, ALIGNMENT)
        sizes.append((va, 0) if va == vb else _affine(va, vb, xa, xb))
    inplace = [t.op in INPLACE_OPS for t in order_a]
    external = [t.external for t in order_a]
    output = [t.output for t in order_a]
    special: set[int] = set()

    def crossing(na: tuple[int, ...], nb: tuple[int, ...], ma: tuple[int, ...], mb: tuple[int, ...]) -> bool:
        """Whether the numbers na (at xa) / nb (at xb) equal ma / mb at every x; a single x where they do is
        recorded as special."""
        if na == ma and nb == mb:
            return True
        f = [_affine(p, q, xa, xb) for p, q in zip(na, nb, strict=True)]
        g = [_affine(p, q, xa, xb) for p, q in zip(ma, mb, strict=True)]
        always, point = _crossing(f, g)
        if point is not None:
            special.add(point)
        return always

    def same_layout(i: int, j: int) -> bool:  # ggml_are_same_layout, for every x but the special ones
        ta, tb = order_a[i], order_a[j]
        if ta.type != tb.type:
            return False
        return crossing(_numbers(ta), _numbers(order_b[i]), _numbers(tb), _numbers(order_b[j]))

    def offset_zero(i: int) -> bool:  # view_offs == 0, for every x but the special ones
        return crossing((order_a[i].view_offs,), (order_b[i].view_offs,), (0,), (0,))

    allocated = [False] * n
    children = [0] * n
    views = [0] * n
    ops: list[tuple[int, int, int]] = []

    def allocate(t: int) -> None:  # graph_alloc.replay's allocate
        if external[t] or allocated[t] or view[t] >= 0:
            return
        allocated[t] = True
        if inplace[t]:
            for p in srcs[t]:
                if not allocated[p] or output[p] or (view[p] >= 0 and output[view[p]]):
                    continue
                if not same_layout(t, p) or children[p] != 1 or views[p] != 0:
                    continue
                if view[p] < 0:
                    allocated[p] = False
                    ops.append((REUSE, t, p))
                    return
                base = view[p]
                if views[base] == 1 and children[base] == 0 and offset_zero(p):
                    allocated[p] = allocated[base] = False
                    ops.append((REUSE, t, base))
                    return
        ops.append((ALLOC, t, -1))

    def release(t: int) -> None:
        if not output[t]:
            ops.append((FREE, t, -1))
            allocated[t] = False

    leafs = range(len(ga.leafs))
    nodes = range(len(ga.leafs), n)
    for leaf in leafs:
        allocate(leaf)
    for node in nodes:
        if view[node] >= 0:
            views[view[node]] += 1
        if order_a[node].input:
            allocate(node)
        for src in srcs[node]:
            children[src] += 1
            if order_a[src].input:
                allocate(src)
    for node in nodes:
        for src in srcs[node]:
            allocate(src)
        allocate(node)
        for src in srcs[node]:
            children[src] -= 1
            if children[src] or views[src]:
                continue
            if view[src] >= 0:
                base = view[src]
                views[base] -= 1
                if views[base] == 0 and children[base] == 0 and allocated[base]:
                    release(base)
            elif allocated[src]:
                release(src)
    # only the tensors the allocator places, numbered in graph order (identical layers stay a constant shift apart)
    used = sorted({t for _, t, _ in ops} | {src for _, _, src in ops if src >= 0})
    dense = {t: i for i, t in enumerate(used)}
    program = [(kind, dense[t], dense[src] if src >= 0 else -1) for kind, t, src in ops]
    sig = [(kind, order_a[t].op, sizes[t], sizes[src] if src >= 0 else None) for kind, t, src in ops]
    return Program(tuple(sizes[t] for t in used), tuple(program), frozenset(special), find_period(program, sig))


def find_period(ops: list[tuple[int, int, int]], sig: list[tuple]) -> Period | None:
    """The longest stretch of ops that repeats with one period (the graph's identical layers), or None. `sig`: what
    makes two ops alike (kind, tensor op, sizes). The period is among the most common gaps between two alike ops in
    a row; each candidate is checked op by op."""
    ids: dict[tuple, int] = {}
    kinds = [ids.setdefault(key, len(ids)) for key in sig]
    last: dict[int, int] = {}
    gaps: Counter[int] = Counter()
    for k, kind in enumerate(kinds):
        if kind in last:
            gaps[k - last[kind]] += 1
        last[kind] = k
    found: Period | None = None
    for every, _ in gaps.most_common(PERIOD_CANDIDATES):
        pairs = list(zip(ops[:-every], ops[every:], kinds[:-every], kinds[every:], strict=True))
        shifts = Counter(b[1] - a[1] for a, b, ka, kb in pairs if ka == kb)
        shift = shifts.most_common(1)[0][0]
        start = length = run = 0
        for k, (a, b, ka, kb) in enumerate(pairs):
            if ka == kb and b[1] - a[1] == shift and (b[2] - a[2] == shift if a[2] >= 0 else b[2] < 0):
                run += 1
                if run > length:
                    length, start = run, k + 1 - run
            else:
                run = 0
        if length >= 2 * every and (found is None or length > found.end - found.start):
            found = Period(start, start + length, every, shift)
    return found
