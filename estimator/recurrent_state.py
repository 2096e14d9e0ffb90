"""Recurrent state bytes: F32 R and S tensors, one cell per sequence (llama-memory-recurrent.cpp)."""

from __future__ import annotations

from collections.abc import Sequence

from memfit.estimator.context import ContextGeometry
from memfit.estimator.layout import RecurrentLayer

STATE_ELEMENT_BYTES = 4  # llama.cpp keeps recurrent state in F32 whatever the KV cache types


def recurrent_state_bytes(layers: Sequence[RecurrentLayer], geometry: ContextGeometry) -> tuple[int, int]:
    """(R bytes, S bytes): max(1, n_seq) cells per recurrent layer, independent of the context (a PLE layer's conv
    history, R's type, counted with R)."""
    r = sum(layer.r_elements + layer.p_elements for layer in layers) * STATE_ELEMENT_BYTES * geometry.n_seq
    s = sum(layer.s_elements for layer in layers) * STATE_ELEMENT_BYTES * geometry.n_seq
    return r, s
