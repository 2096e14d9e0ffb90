"""The part of ggml a compute graph's memory depends on: tensor shapes, views, and the order of a graph's nodes.

Only what ggml-alloc reads is kept: each tensor's type, shape and strides (ggml_are_same_layout, ggml_nbytes), its
op (ggml_op_can_inplace), its sources, whether it views another tensor, and its flags. Weights are left out of the
sources (they live in the model's buffers: ggml-alloc never places them, and they are never reused in place), but
each op notes where its weights were (`weights`: the source positions a builder passed None at); KV cache tensors
are `external` (their own buffer). Each tensor also keeps the layer it was made in (`in_layer`: llama.cpp's `il`)
and the pin a builder's callback puts on it (`pin`), which the backend scheduler reads (estimator/scheduler.py).
Shapes follow ggml.c's op constructors; `Graph.expand` is ggml_build_forward_expand (ggml_visit_parents_graph:
sources first, left to right, each tensor once).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property

from memfit.gguf_constants import GGML_QUANT_SIZES
from memfit.gguf_constants import GGMLQuantizationType as QT

F32, F16, I32, I64 = "f32", "f16", "i32", "i64"
ELEMENT_BYTES = {F32: 4, F16: 2, I32: 4, I64: 8}
# A KV cache's types, by llama.cpp's names, as (elements per block, bytes per block): a compute tensor of a cache's
# type (deepseek4's concatenated K) sized as ggml_nbytes sizes it
CACHE_TYPES = {
    t.name.lower(): GGML_QUANT_SIZES[t] for t in (QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1)
}
BINARY = frozenset({"ADD", "SUB", "MUL", "DIV"})  # ggml's element-wise ops over two tensors (a, b broadcast)
NORM_PIN = "norm"  # llama_context::graph_get_cb: build_norm's "norm" (a weighted norm of a layer il >= 0)
KQV_PIN = "kqv_out"  # build_attn_mha: attention's output, on the CPU when offload_kqv is off (flash attention off)
# The layer the tensors made now belong to (llama.cpp's il; None: the input or output layer): set by the builders'
# loops through `in_layer`, reset by every new Graph.
_LAYER: ContextVar[int | None] = ContextVar("memfit_graph_layer", default=None)


def in_layer(il: int | None) -> None:
    """The tensors made from here on belong to layer `il` (None: outside the blocks): their weights are that
    layer's, their cache tensors its cache, their pins its device's (estimator/scheduler.py)."""
    _LAYER.set(il)


@dataclass(eq=False)
class Tensor:
    type: str
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    op: str = "NONE"
    srcs: tuple[Tensor, ...] = ()
    view_src: Tensor | None = None  # the tensor whose memory this one views (always the base, as in ggml)
    view_offs: int = 0
    input: bool = False  # GGML_TENSOR_FLAG_INPUT: allocated before the graph runs
    output: bool = False  # GGML_TENSOR_FLAG_OUTPUT: never freed, never reused in place
    external: bool = False  # has its own buffer (the KV cache)
    weights: tuple[tuple[int, str], ...] = ()  # each weight's source position and name ("": unnamed), not in srcs
    layer: int | None = field(default_factory=_LAYER.get)  # the layer it was made in (in_layer)
    pin: str | None = None  # the backend a builder's callback pins it to (NORM_PIN, KQV_PIN)
    f16_extra: int = 0  # FLASH_ATTN_EXT: the bytes ggml-cuda's alloc size adds for F16 copies of a quantized K, V

    @property
    def elements(self) -> int:  # ggml_nelements
        return self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]

    @cached_property
    def nbytes(self) -> int:
        """ggml_nbytes for the element types compute tensors have (a block type's rows whole blocks)."""
        if any(n == 0 for n in self.ne):
            return 0
        block, size = block_of(self.type)
        if block > 1:
            rows = sum((n - 1) * b for n, b in zip(self.ne[1:], self.nb[1:], strict=True))
            return self.ne[0] * self.nb[0] // block + rows
        return size + sum((n - 1) * b for n, b in zip(self.ne, self.nb, strict=True))

    @property
    def contiguous(self) -> bool:
        return self.nb == strides(self.type, self.ne)


def block_of(type_: str) -> tuple[int, int]:
    """(elements per block, bytes per block) of a type: one element each but for a cache's block types."""
    found = ELEMENT_BYTES.get(type_)
    return (1, found) if found is not None else CACHE_TYPES[type_]


def strides(type_: str, ne: Sequence[int]) -> tuple[int, int, int, int]:
    """A contiguous tensor's strides (ggml_new_tensor_impl: a row of a block type is its whole blocks)."""
    block, size = block_of(type_)
    nb = [size, size * (ne[0] // block)]
    for n in ne[1:3]:
        nb.append(nb[-1] * n)
    return nb[0], nb[1], nb[2], nb[3]


def shape4(ne: Sequence[int]) -> tuple[int, int, int, int]:
    padded = [*ne, 1, 1, 1, 1][:4]
    return padded[0], padded[1], padded[2], padded[3]


def new_tensor(type_: str, *ne: int, input: bool = False, external: bool = False) -> Tensor:
    """ggml_new_tensor: a leaf (an input when `input`, a buffer of its own when `external`)."""
    shape = shape4(ne)
    return Tensor(type_, shape, strides(type_, shape), input=input, external=external)


Source = Tensor | str | None  # an op's source: a tensor, or a weight (None, or its name in the layer: "attn_q")
# the mark on a weight's name where the op reads it through a view (ggml_reshape_Nd of the weight: a node of its own,
# with no buffer of its own while the scheduler splits the graph, so the op is not placed by that weight)
VIEWED = "#view"


VIEWED_ROW = "#row"  # the weight's first row read through ggml_view_1d (bert.cpp's token type row): that row's bytes


def viewed(name: str, row: bool = False) -> str:
    """A weight's name, read through a view of it (VIEWED; `row`: of its first row alone, VIEWED_ROW)."""
    return name + (VIEWED_ROW if row else VIEWED)


def op(name: str, type_: str, ne: Sequence[int], *srcs: Source) -> Tensor:
    """A new, contiguous result tensor of an op over `srcs` (weights, None or named, are left out of srcs, their
    positions and names kept in `weights`; a binary element-wise op given one source has a weight for its second)."""
    shape = shape4(ne)
    weights = tuple((i, s or "") for i, s in enumerate(srcs) if not isinstance(s, Tensor))
    if name in BINARY and len(srcs) == 1:
        weights = ((1, ""),)
    tensors = tuple(s for s in srcs if isinstance(s, Tensor))
    return Tensor(type_, shape, strides(type_, shape), op=name, srcs=tensors, weights=weights)


def pinned(t: Tensor, pin: str) -> Tensor:
    """t, pinned as a builder's callback pins it (ggml_backend_sched_set_tensor_backend)."""
    t.pin = pin
    return t


def _view(src: Tensor, opname: str, ne: Sequence[int], nb: Sequence[int], offset: int = 0) -> Tensor:
    base = src.view_src or src
    return Tensor(
        src.type,
        shape4(ne),
        (nb[0], nb[1], nb[2], nb[3]),
        op=opname,
        srcs=(src,),
        view_src=base,
        view_offs=src.view_offs + offset,
    )


def in_place(src: Tensor, opname: str) -> Tensor:
    """An op's *_inplace form (ggml_scale_inplace): a view of its source that the op writes."""
    return _view(src, opname, src.ne, src.nb)


def reshape(src: Tensor, *ne: int) -> Tensor:
    """ggml_reshape_Nd: a contiguous view with a new shape."""
    shape = shape4(ne)
    return _view(src, "RESHAPE", shape, strides(src.type, shape))


def view(src: Tensor, ne: Sequence[int], nb: Sequence[int] = (), offset: int = 0) -> Tensor:
    """ggml_view_Nd: `nb` the strides of dims 1.. as given; the rest, as ggml_view_impl makes them, ne x nb of the
    dimension before (none given: contiguous)."""
    shape = shape4(ne)
    full = [block_of(src.type)[1], *nb]
    while len(full) < 4:
        full.append(full[-1] * shape[len(full) - 1])
    return _view(src, "VIEW", shape, full, offset)


def permute(src: Tensor, a0: int, a1: int, a2: int, a3: int) -> Tensor:
    """ggml_permute: axis i of src becomes axis a_i."""
    ne, nb = [0] * 4, [0] * 4
    for i, axis in enumerate((a0, a1, a2, a3)):
        ne[axis], nb[axis] = src.ne[i], src.nb[i]
    return _view(src, "PERMUTE", ne, nb)


def transpose(src: Tensor) -> Tensor:
    return permute(src, 1, 0, 2, 3)


def same_shape(src: Tensor, opname: str, *others: Source) -> Tensor:
    """Element-wise ops (add, mul, scale, norms, rope, soft_max, unary): the result has src's shape, F32."""
    return op(opname, F32, src.ne, src, *others)


def same(x: Tensor, *ops: str) -> Tensor:
    """Element-wise ops one after the other (each in place where ggml-alloc can)."""
    for name in ops:
        x = same_shape(x, name)
    return x


def argsort_top_k(x: Tensor, k: int) -> Tensor:
    """ggml_argsort_top_k: the whole ARGSORT (I32), viewed to its first k columns."""
    ranked = op("ARGSORT", I32, x.ne, x)
    return view(ranked, (k, *ranked.ne[1:]), ranked.nb[1:])


def mul_mat(a: Source, b: Tensor, rows: int) -> Tensor:
    """ggml_mul_mat(a, b) with `a` a weight of `rows` output rows: [rows, b.ne1, b.ne2, b.ne3]."""
    return op("MUL_MAT", F32, (rows, b.ne[1], b.ne[2], b.ne[3]), a, b)


def mul_mat_t(a: Tensor, b: Tensor) -> Tensor:
    """ggml_mul_mat of two activations: [a.ne1, b.ne1, b.ne2, b.ne3]."""
    return op("MUL_MAT", F32, (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), a, b)


def cont(src: Tensor, *ne: int) -> Tensor:
    """ggml_cont / ggml_cont_Nd: a contiguous copy, optionally reshaped."""
    return op("CONT", src.type, ne or src.ne, src)


def get_rows(src: Source, rows: Tensor, width: int) -> Tensor:
    """ggml_get_rows from a [width, ...] table (a weight when src is None): F32 [width, rows.ne0, ...]."""
    return op("GET_ROWS", F32, (width, rows.ne[0], rows.ne[1], rows.ne[2]), src, rows)


def set_rows(dst: Tensor, src: Tensor, idxs: Tensor) -> Tensor:
    """ggml_set_rows: writes into dst, returns a view of it."""
    result = _view(dst, "SET_ROWS", dst.ne, dst.nb)
    result.srcs = (src, idxs, dst)
    return result


def copy_into(src: Tensor, dst: Tensor) -> Tensor:
    """ggml_cpy into a tensor of its own buffer: returns a view of dst."""
    result = _view(dst, "CPY", dst.ne, dst.nb)
    result.srcs = (src, dst)
    return result


def glu(a: Tensor, b: Tensor, name: str = "SWIGLU") -> Tensor:
    """ggml_swiglu_split / ggml_geglu_split (`name` GEGLU): a new tensor (GLU ops are not in place)."""
    return op(name, F32, a.ne, a, b)


@dataclass
class Graph:
    """ggml_cgraph: leafs and nodes in the order ggml_build_forward_expand visits them."""

    leafs: list[Tensor] = field(default_factory=list)
    nodes: list[Tensor] = field(default_factory=list)
    _seen: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        in_layer(None)  # a new graph starts outside the blocks

    def expand(self, tensor: Tensor) -> Tensor:
        """ggml_visit_parents_graph without recursion: sources left to right, then the tensor."""
        stack: list[tuple[Tensor, bool]] = [(tensor, False)]
        while stack:
            t, done = stack.pop()
            if done:
                (self.leafs if t.op == "NONE" else self.nodes).append(t)
                continue
            if id(t) in self._seen:
                continue
            self._seen.add(id(t))
            stack.append((t, True))
            stack.extend((s, False) for s in reversed(t.srcs))
        return tensor
