"""ggml-alloc's graph allocator, replayed: the size of the buffers ggml_gallocr reserves for a graph.

Mirrors ggml/src/ggml-alloc.c: ggml_gallocr_alloc_graph_impl (leafs first, each in its buffer; the explicit
inputs in their first consumer's; then each node after its sources, a tensor freed when its last consumer has run,
outputs never freed), ggml_gallocr_allocate_node (an op that ggml_op_can_inplace takes over a source it is the only
consumer of, when the layouts match) and ggml_dyn_tallocr (best fit among the free blocks but the last, else the
end of the buffer; freed blocks merged with their neighbours). Each buffer is the highest offset reached in it. One
chunk per buffer: the CPU's and ggml-cuda's buffer types have no size cap.

A graph is one buffer (the CPU backend's, `replay`), or several (`replay_n`: ggml_gallocr_reserve_n over the
backend scheduler's graph, each tensor in its backend's buffer, estimator/scheduler.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memfit.estimator.ggml_graph import Graph, Tensor
from memfit.integers import round_up

ALIGNMENT = 32  # ggml-backend.cpp: the CPU buffer type's alignment (TENSOR_ALIGNMENT)
INPLACE_OPS = frozenset(  # ggml-alloc.c ggml_op_can_inplace (UNARY ops appear by their unary name)
    {
        "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL", "DIV", "SQR",
        "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM", "RMS_NORM_BACK", "CLAMP", "SOFT_MAX",
        "SOFT_MAX_BACK", "SILU", "GELU", "GELU_ERF", "GELU_QUICK", "RELU", "SIGMOID", "TANH", "EXP", "NEG", "ABS",
        "SOFTPLUS", "SGN",
    }
)  # fmt: skip


class FreeList:
    """ggml_dyn_tallocr: free blocks sorted by offset, the last one the open end of the buffer."""

    def __init__(self, alignment: int = ALIGNMENT) -> None:
        self.blocks: list[list[int]] = [[0, 1 << 62]]
        self.size = 0
        self.alignment = alignment

    def alloc(self, size: int) -> int:
        size = round_up(size, self.alignment)
        best = -1
        for i in range(len(self.blocks) - 1):  # best fit among the blocks but the last (ties: the last found)
            if self.blocks[i][1] >= size and (best < 0 or self.blocks[i][1] <= self.blocks[best][1]):
                best = i
        if best < 0:
            best = len(self.blocks) - 1
        block = self.blocks[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del self.blocks[best]
        self.size = max(self.size, offset + size)
        return offset

    def free(self, offset: int, size: int) -> None:
        size = round_up(size, self.alignment)
        blocks = self.blocks
        for i, block in enumerate(blocks):
            if block[0] + block[1] == offset:  # at the end of a block: grow it, merge with the next
                block[1] += size
                if i + 1 < len(blocks) and block[0] + block[1] == blocks[i + 1][0]:
                    block[1] += blocks.pop(i + 1)[1]
                return
            if offset + size == block[0]:  # at the start of a block: grow it down, merge with the previous
                block[0] = offset
                block[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == block[0]:
                    blocks[i - 1][1] += blocks.pop(i)[1]
                return
        at = next((i for i, b in enumerate(blocks) if b[0] >= offset), len(blocks))
        blocks.insert(at, [offset, size])


def nbytes(t: Tensor) -> int:
    """The alloc size of a buffer type without get_alloc_size (the CPU's, a host buffer's): ggml_nbytes."""
    return t.nbytes


@dataclass(frozen=True)
class Buffer:
    """One of ggml_gallocr's buffers: its buffer type's alignment and alloc size (ggml_backend_buft_get_alloc_size)."""

    alignment: int = ALIGNMENT
    alloc_size: Callable[[Tensor], int] = nbytes


@dataclass
class _State:
    """ggml-alloc.c hash_node."""

    allocated: bool = False
    offset: int = 0
    children: int = 0
    views: int = 0
    buffer: int = 0


def _same_layout(a: Tensor, b: Tensor) -> bool:
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


def _own_srcs(t: Tensor) -> Sequence[Tensor]:
    return t.srcs


def _external(t: Tensor) -> bool:
    return t.external


@dataclass(frozen=True)
class Replay:
    size: int  # the buffer ggml_gallocr_reserve sizes: the highest offset reached
    live: int  # the most bytes alive at once: what any placement needs (size - live is lost to holes)


@dataclass(frozen=True)
class AllocGraph:
    """A graph as ggml_gallocr_reserve_n takes it: leafs and nodes in order, each node's sources (the scheduler's
    copies in place of a source on another backend), each leaf's and node's buffer, each buffer's rules, and which
    tensors are allocated elsewhere (weights, caches: data or a buffer of their own)."""

    leafs: Sequence[Tensor]
    nodes: Sequence[Tensor]
    leaf_buffers: Sequence[int] = ()  # empty: every tensor in buffer 0
    node_buffers: Sequence[int] = ()
    buffers: Sequence[Buffer] = (Buffer(),)
    srcs: Callable[[Tensor], Sequence[Tensor]] = _own_srcs
    external: Callable[[Tensor], bool] = _external


def reserved_bytes(graph: Graph) -> int:
    """The compute buffer ggml_gallocr_reserve sizes for this graph."""
    return replay(graph).size


def replay(graph: Graph) -> Replay:
    """ggml_gallocr_alloc_graph_impl over the graph in one buffer, with the live bytes counted beside it."""
    sizes, live = _replay(AllocGraph(graph.leafs, graph.nodes))
    return Replay(sizes[0], live)


def replay_n(graph: AllocGraph) -> list[int]:
    """ggml_gallocr_reserve_n's buffer sizes, one per buffer."""
    return _replay(graph)[0]


def _replay(g: AllocGraph) -> tuple[list[int], int]:
    heaps = [FreeList(b.alignment) for b in g.buffers]
    size_of = [b.alloc_size for b in g.buffers]
    srcs_of, external = g.srcs, g.external
    state: dict[Tensor, _State] = {}  # by identity (Tensor compares by identity)
    live = [0, 0]  # bytes alive now, the most alive at once (over every buffer)

    def of(t: Tensor) -> _State:
        s = state.get(t)
        if s is None:
            s = state[t] = _State()
        return s

    def allocate(t: Tensor, buffer: int) -> None:
        s = of(t)
        if external(t) or s.allocated or t.view_src is not None:
            return
        s.allocated = True
        if t.op in INPLACE_OPS:
            for parent in srcs_of(t):
                p = of(parent)
                if not p.allocated or parent.output or (parent.view_src is not None and parent.view_src.output):
                    continue
                if not _same_layout(t, parent) or p.children != 1 or p.views != 0:
                    continue
                if parent.view_src is None:
                    s.offset, s.buffer, p.allocated = p.offset, p.buffer, False
                    _free_extra(heaps[p.buffer], s.offset, size_of[p.buffer](parent), size_of[s.buffer](t))
                    return
                base = of(parent.view_src)
                if base.views == 1 and base.children == 0 and parent.view_offs == 0:
                    s.offset, s.buffer, p.allocated, base.allocated = base.offset, base.buffer, False, False
                    _free_extra(heaps[s.buffer], s.offset, size_of[s.buffer](parent.view_src), size_of[s.buffer](t))
                    return
        size = size_of[buffer](t)
        s.buffer, s.offset = buffer, heaps[buffer].alloc(size)
        live[0] += round_up(size, heaps[buffer].alignment)
        live[1] = max(live[1], live[0])

    def release(t: Tensor) -> None:
        if not t.output:
            s = of(t)
            size = size_of[s.buffer](t)
            heaps[s.buffer].free(s.offset, size)
            s.allocated = False
            live[0] -= round_up(size, heaps[s.buffer].alignment)

    leaf_buffers, node_buffers = g.leaf_buffers, g.node_buffers
    for i, leaf in enumerate(g.leafs):
        allocate(leaf, leaf_buffers[i] if leaf_buffers else 0)
    for i, node in enumerate(g.nodes):
        buffer = node_buffers[i] if node_buffers else 0
        if node.view_src is not None and node.op != "NONE":  # NONE: the scheduler's dependencies, not views
            of(node.view_src).views += 1
        if node.input:
            allocate(node, buffer)
        for src in srcs_of(node):
            of(src).children += 1
            if src.input:
                allocate(src, buffer)
    for i, node in enumerate(g.nodes):
        buffer = node_buffers[i] if node_buffers else 0
        srcs = srcs_of(node)
        for src in srcs:
            allocate(src, buffer)
        allocate(node, buffer)
        for src in srcs:
            p = of(src)
            p.children -= 1
            if p.children or p.views:
                continue
            if src.view_src is not None:
                base = of(src.view_src)
                base.views -= 1
                if base.views == 0 and base.children == 0 and base.allocated:
                    release(src.view_src)
            elif p.allocated:
                release(src)
    return [h.size for h in heaps], live[1]


def _free_extra(heap: FreeList, offset: int, parent_bytes: int, node_bytes: int) -> None:
    """ggml_gallocr_free_extra_space: a smaller in-place result gives back the parent's tail (both sizes in the
    parent's buffer's alignment)."""
    parent_size, node_size = round_up(parent_bytes, heap.alignment), round_up(node_bytes, heap.alignment)
    if parent_size > node_size:
        heap.free(offset + node_size, parent_size - node_size)
