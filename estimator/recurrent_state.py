"""Recurrent state bytes: F32 R and S tensors, one cell per sequence (llama-memory-recurrent.cpp)."""

from __future__ import annotations

from memfit.estimator.context import ContextGeometry
from memfit.estimator.layout import Layout

STATE_ELEMENT_BYTES = 4  # llama.cpp keeps recurrent state in F32 whatever the KV cache types


def state_rows(layout: Layout, geometry: ContextGeometry) -> int:
    """The rows of each recurrent layer's R and S tensors: llama_memory_recurrent's mem_size * (1 + n_rs_seq), a
    cell per sequence and a snapshot of it per rollback slot (deepseek4's compressor states: n_stream *
    (1 + n_rs_seq) planes)."""
    return geometry.n_seq * (1 + geometry.rollback_slots(layout.rs_rollback))


def recurrent_state_bytes(layout: Layout, geometry: ContextGeometry) -> tuple[int, int]:
    """(R bytes, S bytes): state_rows per recurrent layer, independent of the context (a PLE layer's conv history,
    R's type, counted with R)."""
    layers, rows = layout.recurrent, state_rows(layout, geometry)
    r = sum(layer.r_elements + layer.p_elements for layer in layers) * STATE_ELEMENT_BYTES * rows
    s = sum(layer.s_elements for layer in layers) * STATE_ELEMENT_BYTES * rows
    return r, s
