"""KV cache bytes: llama.cpp's cells per layer times its row size for the cache type."""

from __future__ import annotations

from collections.abc import Sequence

from memfit.estimator.context import CELL_PADDING, ContextGeometry, pad
from memfit.estimator.layout import AttentionLayer

Q8_0_BLOCK, Q8_0_BLOCK_BYTES = 32, 34  # 32 int8 values and one f16 scale
CACHE_TYPES = {4: "f32", 2: "f16", 1: "q8_0"}


def row_bytes(element_bytes: int, width: int) -> int:
    """ggml_row_size for the cache type that element bytes name; other values multiply plainly."""
    if element_bytes == 1:
        return -(-width // Q8_0_BLOCK) * Q8_0_BLOCK_BYTES
    return width * element_bytes


def layer_cells(layer: AttentionLayer, geometry: ContextGeometry) -> int:
    """Cells one stream keeps for a layer: the full context, or for SWA pad(min(ctx, n_swa + n_ubatch), 256)."""
    if layer.window is None:
        return geometry.n_ctx_seq
    return pad(min(geometry.n_ctx_seq, layer.window + geometry.n_ubatch), CELL_PADDING)


def kv_cache_bytes(layers: Sequence[AttentionLayer], geometry: ContextGeometry,
                   key_element_bytes: int, value_element_bytes: int) -> tuple[int, int]:
    """(K bytes, V bytes) over every stream: n_stream * sum_l cells(l) * row_bytes(type, width(l))."""
    k = v = 0
    for layer in layers:
        cells = layer_cells(layer, geometry)
        k += cells * row_bytes(key_element_bytes, layer.k_width)
        v += cells * row_bytes(value_element_bytes, layer.v_width)
    return geometry.n_stream * k, geometry.n_stream * v


def cache_type_note(key_element_bytes: int, value_element_bytes: int) -> str:
    """Names the cache types; says so when an element size is not one llama.cpp has."""
    names = [CACHE_TYPES.get(b) for b in (key_element_bytes, value_element_bytes)]
    if None in names:
        return (f"{key_element_bytes}/{value_element_bytes} bytes per K/V element is not a llama.cpp cache type;"
                " multiplied plainly")
    return f"K {names[0]}, V {names[1]}"
