"""KV cache bytes: llama.cpp's cells per layer times the row size of the cache type."""

from __future__ import annotations

from dataclasses import dataclass, replace

from memfit.estimator.context import CELL_PADDING, ContextGeometry
from memfit.estimator.layout import AttentionLayer, Layout
from memfit.gguf_constants import GGML_QUANT_SIZES
from memfit.gguf_constants import GGMLQuantizationType as QT
from memfit.integers import ceil_div, round_up


@dataclass(frozen=True)
class CacheType:
    name: str
    block: int  # elements per block
    block_bytes: int
    ggml_type: QT | None = None  # None for a size that names no llama.cpp type

    @property
    def quantized(self) -> bool:
        """ggml_is_quantized: elements stored in blocks (q8_0, q4_0, ...)."""
        return self.block > 1

    def row_bytes(self, width: int) -> int:
        """ggml_row_size: whole blocks of the type (llama.cpp refuses widths that are not whole blocks)."""
        return ceil_div(width, self.block) * self.block_bytes


def _ggml(qtype: QT) -> CacheType:
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    return CacheType(qtype.name.lower(), block, block_bytes, qtype)


# The types llama.cpp accepts for its KV cache (common/arg.cpp's kv_cache_types), by their llama.cpp names.
GGML_CACHE_TYPES = {
    t.name: t for t in map(_ggml, (QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.IQ4_NL))
}
# The contract's element bytes name llama.cpp's cache types: 4 f32, 2 f16, 1 q8_0 (32 int8 + an f16 scale).
BY_ELEMENT_BYTES = {4: GGML_CACHE_TYPES["f32"], 2: GGML_CACHE_TYPES["f16"], 1: GGML_CACHE_TYPES["q8_0"]}
# the same by llama.cpp's names (-ctk/-ctv and their kin, OLLAMA_KV_CACHE_TYPE): the contract's element bytes
ELEMENT_BYTES_BY_NAME = {t.name: element_bytes for element_bytes, t in BY_ELEMENT_BYTES.items()}


def cache_type(element_bytes: int) -> CacheType:
    """The llama.cpp type that `element_bytes` names; any other size multiplies plainly."""
    return BY_ELEMENT_BYTES.get(element_bytes) or CacheType(f"{element_bytes}-byte", 1, element_bytes)


def is_llama_cpp_type(element_bytes: int) -> bool:
    return element_bytes in BY_ELEMENT_BYTES


def cache_type_problem(layout: Layout, k_type: CacheType, v_type: CacheType) -> str | None:
    """Why llama.cpp would refuse these cache types for this model (llama_init_from_model), or None."""
    if layout.same_cache_types and k_type != v_type:
        return f"llama.cpp refuses different K ({k_type.name}) and V ({v_type.name}) cache types for this model"
    for head_k, head_v in layout.head_dims:
        if head_k % k_type.block:
            return f"llama.cpp refuses a {k_type.name} K cache: its blocks do not divide the head size {head_k}"
        if head_v % v_type.block:
            return f"llama.cpp refuses a {v_type.name} V cache: its blocks do not divide the head size {head_v}"
    return None


def window_cells(window: int | None, geometry: ContextGeometry) -> int:
    """Cells one stream keeps for a layer: the context, or for SWA pad(min(ctx, n_swa * seqs + n_ubatch), 256)."""
    if window is None or geometry.swa_full:
        return geometry.n_ctx_seq
    return round_up(min(geometry.n_ctx_seq, window * geometry.swa_seqs + geometry.n_ubatch), CELL_PADDING)


def group_cells(window: int | None, ratio: int, geometry: ContextGeometry) -> int:
    """Cells one stream keeps for a layer of this window and compression ratio: a compressed cache's
    pad(max(1, ceil(n_ctx_seq / ratio)), 256) (llama_kv_cache_dsv4: dsv4_comp_size padded), else window_cells."""
    if ratio:
        return round_up(max(1, ceil_div(geometry.n_ctx_seq, ratio)), CELL_PADDING)
    return window_cells(window, geometry)


def layer_cells(layer: AttentionLayer, geometry: ContextGeometry) -> int:
    return group_cells(layer.window, layer.ratio, geometry)


def cache_geometry(layout: Layout, geometry: ContextGeometry) -> ContextGeometry:
    """The streams the caches are made with: llama_kv_cache_dsv4 makes its caches non-unified whatever the context
    asks (unified_raw, unified_compressed), one stream per sequence and each window one sequence's."""
    if layout.streams_per_sequence:
        return replace(geometry, n_stream=geometry.n_seq, swa_seqs=1)
    return geometry


KvGroup = tuple[int | None, int, int, int]  # (window, compression ratio, K bytes per cell, V bytes per cell)


def kv_groups(
    layout: Layout, k_type: CacheType, v_type: CacheType, flash_attention: bool = True
) -> tuple[KvGroup, ...]:
    """The layers of every cache grouped by what fixes their cells (window, compression ratio), with the K and V
    bytes one cell of the group takes: row_bytes(type, width(l)) summed over its layers. A transposed V (flash
    attention off) makes every layer's V row as wide as the widest layer's of its cache."""
    groups: dict[tuple[int | None, int], tuple[int, int]] = {}
    for cache in layout.caches:
        for layer in cache.layers:
            k, v = groups.get((layer.window, layer.ratio), (0, 0))
            k += k_type.row_bytes(layer.k_width)
            if layer.has_v:
                v += v_type.row_bytes(layer.v_width if flash_attention else cache.v_width_max)
            groups[layer.window, layer.ratio] = (k, v)
    return tuple((window, ratio, k, v) for (window, ratio), (k, v) in groups.items())


def grouped_kv_bytes(layout: Layout, groups: tuple[KvGroup, ...], geometry: ContextGeometry) -> tuple[int, int]:
    """(K bytes, V bytes) over every stream: n_stream * sum_g cells(g) * bytes per cell(g), the groups
    kv_groups makes of `layout`."""
    geometry = cache_geometry(layout, geometry)
    k = v = 0
    for window, ratio, k_cell, v_cell in groups:
        cells = group_cells(window, ratio, geometry)
        k += cells * k_cell
        v += cells * v_cell
    return geometry.n_stream * k, geometry.n_stream * v


def kv_cache_bytes(
    layout: Layout, geometry: ContextGeometry, k_type: CacheType, v_type: CacheType, flash_attention: bool = True
) -> tuple[int, int]:
    """(K bytes, V bytes) over every stream: n_stream * sum_l cells(l) * row_bytes(type, width(l)), a transposed V
    (flash attention off) as wide as the widest layer's."""
    return grouped_kv_bytes(layout, kv_groups(layout, k_type, v_type, flash_attention), geometry)
