"""The parts of a forecast for one subject under one workload."""

from __future__ import annotations

from memfit.estimator.context import ContextGeometry, context_geometry
from memfit.estimator.estimate import Part
from memfit.estimator.kv_cache import cache_type_note, kv_cache_bytes
from memfit.estimator.layout import Layout
from memfit.estimator.recurrent_state import recurrent_state_bytes
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, Component, Limit
from memfit.estimator.workload import Workload


def kv_cache_part(layout: Layout, geometry: ContextGeometry, workload: Workload) -> Part:
    if not layout.has_kv_cache:
        return Part.not_applicable(Component.KV_CACHE, f"llama.cpp keeps no KV cache here ({layout.note})")
    if not layout.attention:
        return Part.not_applicable(Component.KV_CACHE, f"no layer holds KV ({layout.note})")
    k, v = kv_cache_bytes(layout.attention, geometry, workload.key_element_bytes, workload.value_element_bytes)
    swa = sum(1 for layer in layout.attention if layer.window is not None)
    note = (f"{len(layout.attention)} KV layers ({swa} sliding-window) x {geometry.n_stream} stream(s) x "
            f"{geometry.n_ctx_seq} cells; {cache_type_note(workload.key_element_bytes, workload.value_element_bytes)}"
            f"; K {k} + V {v} bytes; {layout.note}")
    return Part(Component.KV_CACHE, k + v, Basis.DERIVED_LAYOUT, note)


def recurrent_part(layout: Layout, geometry: ContextGeometry) -> Part:
    if not layout.recurrent:
        return Part.not_applicable(Component.RECURRENT_STATE, "no recurrent layers")
    r, s = recurrent_state_bytes(layout.recurrent, geometry)
    note = (f"{len(layout.recurrent)} recurrent layers x {geometry.n_seq} sequence(s), F32;"
            f" R {r} + S {s} bytes; {layout.note}")
    return Part(Component.RECURRENT_STATE, r + s, Basis.DERIVED_LAYOUT, note)


def forecast_parts(subject: Subject, workload: Workload) -> tuple[list[Part], list[Limit]]:
    """The five parts, in the contract's order, and the limits they add."""
    limits: list[Limit] = []
    if subject.layout is None:
        why = str(subject.layout_problem) if subject.layout_problem else "layout unknown"
        kv = Part.unknown(Component.KV_CACHE, why)
        recurrent = Part.unknown(Component.RECURRENT_STATE, why)
    else:
        geometry = context_geometry(workload.allocated_tokens, workload.streams)
        kv = kv_cache_part(subject.layout, geometry, workload)
        recurrent = recurrent_part(subject.layout, geometry)
    workspace = Part.unknown(Component.WORKSPACE, "llama.cpp's compute and output buffers are not yet measured")
    limits.append(Limit.WORKSPACE_UNMEASURED)
    return [subject.weights, kv, recurrent, workspace, subject.companions], limits
