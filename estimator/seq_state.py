"""One sequence's saved state: the bytes llama_state_seq_get_size (a llama-server prompt-cache entry) and
llama_state_seq_get_size_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) (a context checkpoint) count after T tokens
were decoded into the sequence.

llama_context::state_seq_get_size writes the sequence through llama_io_write_dummy, which counts every byte the
memory module's state_write would write: llama_kv_cache::state_write (a stream header, each cell's metadata, each
layer's K and V rows of the cells the sequence holds and its SWA mask keeps), llama_memory_recurrent::state_write
(the one cell of state the sequence holds) and the modules that combine them (llama_kv_cache_iswa,
llama_memory_hybrid, llama_memory_hybrid_iswa), whose PARTIAL_ONLY flag keeps only the part that cannot be rolled
back: the sliding-window cache, the recurrent state.
"""

from __future__ import annotations

from collections.abc import Sequence

from memfit.estimator.kv_cache import CacheType
from memfit.estimator.layout import AttentionLayer, Layout, RecurrentLayer, SwaType
from memfit.estimator.recurrent_state import STATE_ELEMENT_BYTES

SEQ_HEADER = 8  # llama_context::state_seq_get_size: io_magic (u32) and the seq id (i32)
CELL_EXT_BYTES = 12  # llama_kv_cell_ext: x, y (llama_pos) and tok (llama_token)
U32, U64 = 4, 8


def visible_cells(kind: SwaType, n_swa: int | None, tokens: int) -> int:
    """How many of a sequence's `tokens` cells (positions 0..tokens-1) a cache writes: those its SWA mask keeps
    for the newest position (llama_hparams::is_masked_swa with p1 = seq_pos_max); every one where no window."""
    if tokens <= 0:
        return 0
    if n_swa is None:
        return tokens
    if kind is SwaType.CHUNKED:  # p0 < (p1 / n_swa) * n_swa is masked
        return (tokens - 1) % n_swa + 1
    return min(tokens, n_swa)  # p1 - p0 >= n_swa is masked


def kv_cache_state_bytes(
    layers: Sequence[AttentionLayer],
    cells: int,
    n_stream: int,
    cell_ext: bool,
    v_trans: bool,
    k_type: CacheType,
    v_type: CacheType,
) -> int:
    """llama_kv_cache::state_write for one sequence holding `cells` cells in one of the cache's `n_stream` streams:
    n_stream, each stream's cell count, then (state_write_meta) per cell its position, a seq-id count, the cell's
    ext where kept and the one seq id, and (state_write_data) v_trans, n_layer, per layer K's type, row size and
    rows, then V's: type, row size and rows, or transposed, type, element size, width and each element row."""
    size = U32 + U32 * n_stream
    if cells == 0:
        return size
    size += cells * (U32 + U32 + (CELL_EXT_BYTES if cell_ext else 0) + U32)
    size += U32 + U32
    for layer in layers:
        size += U32 + U64 + cells * k_type.row_bytes(layer.k_width)
    for layer in layers:
        if not layer.has_v:  # no V tensor (MLA): skipped
            continue
        if v_trans:
            size += U32 + U32 + U32 + layer.v_width * cells * v_type.block_bytes  # ggml_type_size: one block
        else:
            size += U32 + U64 + cells * v_type.row_bytes(layer.v_width)
    return size


def recurrent_seq_state_bytes(layers: Sequence[RecurrentLayer]) -> int:
    """llama_memory_recurrent::state_write for one sequence (one cell): the cell count, the cell's position and a
    zero seq-id count, s_trans and n_layer, then per recurrent layer R's type, row size and row, and S's (F32)."""
    size = U32 + (U32 + U32) + U32 + U32
    for layer in layers:
        size += U32 + U64 + layer.r_elements * STATE_ELEMENT_BYTES
    for layer in layers:
        size += U32 + U64 + layer.s_elements * STATE_ELEMENT_BYTES
    return size


def seq_state_bytes(
    layout: Layout,
    tokens: int,
    n_stream: int,
    flash_attention: bool,
    k_type: CacheType,
    v_type: CacheType,
    partial: bool = False,
) -> int | None:
    """llama_state_seq_get_size_ext(ctx, seq, partial ? PARTIAL_ONLY : NONE) after `tokens` tokens were decoded into
    the sequence (at most its context). None where the memory module is not one mirrored here (an indexer cache
    beside the main one)."""
    if len(layout.caches) > 1:
        return None
    size = SEQ_HEADER
    if not layout.has_kv_cache and not layout.recurrent:
        return size  # no memory module: nothing past the header
    layers = layout.caches[0].layers if layout.caches else ()
    base = tuple(layer for layer in layers if layer.window is None)
    sliding = tuple(layer for layer in layers if layer.window is not None)
    v_trans = not flash_attention

    def cache(group: tuple[AttentionLayer, ...]) -> int:
        window = group[0].window if group else None
        cells = visible_cells(layout.swa_type, window, tokens)
        return kv_cache_state_bytes(group, cells, n_stream, layout.cell_ext, v_trans, k_type, v_type)

    if layout.has_kv_cache and layers:
        if sliding:  # llama_kv_cache_iswa: PARTIAL_ONLY keeps the SWA cache alone
            size += (0 if partial else cache(base)) + cache(sliding)
        elif not (partial and layout.recurrent):  # llama_kv_cache ignores the flag; a hybrid skips it
            size += cache(base)
    if layout.recurrent:
        size += recurrent_seq_state_bytes(layout.recurrent)
    return size
