"""What a model keeps per token and per sequence, layer by layer: the input of the memory arithmetic."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionLayer:
    """A layer that owns KV cells (a layer that reuses another layer's KV is not listed)."""

    k_width: int  # elements of K per cell: n_head_kv(l) * head_dim_k, or the MLA latent width
    v_width: int  # elements of V per cell (0 where the cache keeps no V)
    window: int | None = None  # sliding-window size for an SWA layer, None for a full-context layer


@dataclass(frozen=True)
class RecurrentLayer:
    """A layer that keeps a fixed-size state per sequence, independent of the context."""

    r_elements: int  # conv / token-shift state (llama.cpp's R tensor), F32
    s_elements: int  # SSM / WKV state (llama.cpp's S tensor), F32


@dataclass(frozen=True)
class Layout:
    attention: tuple[AttentionLayer, ...]
    recurrent: tuple[RecurrentLayer, ...]
    has_kv_cache: bool  # False for embedding-only models: llama.cpp creates no KV cache for them
    note: str = ""  # the rule that produced this layout, in a few words
