"""ggml-alloc's graph allocator, replayed: the size of the buffer ggml_gallocr reserves for a graph.

Mirrors ggml/src/ggml-alloc.c: ggml_gallocr_alloc_graph_impl (inputs and leafs first, then each node after its
sources, a tensor freed when its last consumer has run, outputs never freed), ggml_gallocr_allocate_node (an op
that ggml_op_can_inplace takes over a source it is the only consumer of, when the layouts match) and
ggml_dyn_tallocr (best fit among the free blocks but the last, else the end of the buffer; freed blocks merged with
their neighbours). The buffer is the highest offset reached. One chunk: the CPU backend's buffers have no size cap.
"""

from __future__ import annotations

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

    def __init__(self) -> None:
        self.blocks: list[list[int]] = [[0, 1 << 62]]
        self.size = 0

    def alloc(self, size: int) -> int:
        size = round_up(size, ALIGNMENT)
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
        size = round_up(size, ALIGNMENT)
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


@dataclass
class _State:
    """ggml-alloc.c hash_node."""

    allocated: bool = False
    offset: int = 0
    children: int = 0
    views: int = 0


def _same_layout(a: Tensor, b: Tensor) -> bool:
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


@dataclass(frozen=True)
class Replay:
    size: int  # the buffer ggml_gallocr_reserve sizes: the highest offset reached
    live: int  # the most bytes alive at once: what any placement needs (size - live is lost to holes)


def reserved_bytes(graph: Graph) -> int:
    """The compute buffer ggml_gallocr_reserve sizes for this graph."""
    return replay(graph).size


def replay(graph: Graph) -> Replay:
    """ggml_gallocr_alloc_graph_impl over the graph, with the live bytes counted beside the buffer."""
    heap = FreeList()
    state: dict[Tensor, _State] = {}  # by identity (Tensor compares by identity)
    live = [0, 0]  # bytes alive now, the most alive at once

    def of(t: Tensor) -> _State:
        s = state.get(t)
        if s is None:
            s = state[t] = _State()
        return s

    def allocate(t: Tensor) -> None:
        s = of(t)
        if t.external or s.allocated or t.view_src is not None:
            return
        s.allocated = True
        if t.op in INPLACE_OPS:
            for parent in t.srcs:
                p = of(parent)
                if not p.allocated or parent.output or (parent.view_src is not None and parent.view_src.output):
                    continue
                if not _same_layout(t, parent) or p.children != 1 or p.views != 0:
                    continue
                if parent.view_src is None:
                    s.offset, p.allocated = p.offset, False
                    _free_extra(heap, s.offset, parent.nbytes, t.nbytes)
                    return
                base = of(parent.view_src)
                if base.views == 1 and base.children == 0 and parent.view_offs == 0:
                    s.offset, p.allocated, base.allocated = base.offset, False, False
                    _free_extra(heap, s.offset, parent.view_src.nbytes, t.nbytes)
                    return
        s.offset = heap.alloc(t.nbytes)
        live[0] += round_up(t.nbytes, ALIGNMENT)
        live[1] = max(live[1], live[0])

    def release(t: Tensor) -> None:
        if not t.output:
            heap.free(of(t).offset, t.nbytes)
            of(t).allocated = False
            live[0] -= round_up(t.nbytes, ALIGNMENT)

    for leaf in graph.leafs:
        allocate(leaf)
    for node in graph.nodes:
        if node.view_src is not None:
            of(node.view_src).views += 1
        if node.input:
            allocate(node)
        for src in node.srcs:
            of(src).children += 1
            if src.input:
                allocate(src)
    for node in graph.nodes:
        for src in node.srcs:
            allocate(src)
        allocate(node)
        for src in node.srcs:
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
    return Replay(heap.size, live[1])


def _free_extra(heap: FreeList, offset: int, parent_bytes: int, node_bytes: int) -> None:
    """ggml_gallocr_free_extra_space: a smaller in-place result gives back the parent's tail."""
    parent_size, node_size = round_up(parent_bytes, ALIGNMENT), round_up(node_bytes, ALIGNMENT)
    if parent_size > node_size:
        heap.free(offset + node_size, parent_size - node_size)
