"""The parts of a forecast for one subject under one workload."""

from __future__ import annotations

from dataclasses import replace

from memfit.estimator.bounds import Part, bounds
from memfit.estimator.compute_graph import buildable
from memfit.estimator.context import ContextGeometry
from memfit.estimator.context_kernel import ContextKernel
from memfit.estimator.fit_types import ObservationRow
from memfit.estimator.kv_cache import cache_geometry, is_llama_cpp_type
from memfit.estimator.ledger import after_load_parts, weights_under_load_mode
from memfit.estimator.mtp import draft_kv_bytes, draft_output_bytes, draft_types, mtp_refusal, with_mtp
from memfit.estimator.observations import NO_MATCH, HistoryMatch, kv_contradiction
from memfit.estimator.pooling import pooling_refusal
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, Component, Limit
from memfit.estimator.warmup import warmup_refusal
from memfit.estimator.workload import Workload, refused_setting
from memfit.estimator.workspace import output_buffer


def kv_cache_part(kernel: ContextKernel, geometry: ContextGeometry) -> Part:
    layout, workload = kernel.layout, kernel.workload
    if not layout.has_kv_cache:
        return Part.not_applicable(Component.KV_CACHE, f"llama.cpp keeps no KV cache here ({layout.note})")
    if not layout.attention:
        return Part.not_applicable(Component.KV_CACHE, f"no layer holds KV ({layout.note})")
    if kernel.draft_unknown:
        return Part.unknown(
            Component.KV_CACHE,
            "under --spec-type draft-mtp llama-server makes an MTP draft context on the model, whose KV cache memfit"
            " does not derive for this architecture",
        )
    k_type, v_type = kernel.k_type, kernel.v_type
    k, v = kernel.kv_bytes(geometry)
    if workload.flash_attention_on is None and (k, v) != kernel.kv_bytes(
        geometry, flash_attention=not geometry.flash_attention
    ):
        return Part.unknown(
            Component.KV_CACHE,
            f"flash attention {workload.flash_attention!r} is not a llama.cpp setting memfit knows, and this"
            " model's V cache differs with flash attention on and off",
        )
    layout_v = "" if geometry.flash_attention else ", V transposed (flash attention off)"
    streams = cache_geometry(layout, geometry).n_stream
    note = (
        f"{layout.note}; {streams} stream(s) x {geometry.n_ctx_seq} cells, ubatch {geometry.n_ubatch}"
        f"{layout_v}, K {k_type.name} {k} + V {v_type.name} {v} bytes"
    )
    if kernel.draft is not None:
        dk, dv = draft_kv_bytes(kernel.draft, geometry)
        dk_type, dv_type = draft_types(workload.draft_key_element_bytes, workload.draft_value_element_bytes)
        kept = "layers (every layer, the NextN one too)" if kernel.draft.all_layers else "NextN layer(s)"
        note += (
            f", of which llama-server's MTP draft context's cache of its {kernel.draft.layers} {kept}"
            f" (--spec-draft-type-k/-v) K {dk_type.name} {dk} + V {dv_type.name} {dv} bytes"
        )
    odd = [b for b in (workload.key_element_bytes, workload.value_element_bytes) if not is_llama_cpp_type(b)]
    if odd:
        note += f"; {odd[0]} bytes per element is not a llama.cpp cache type, multiplied plainly"
    return Part(Component.KV_CACHE, k + v, Basis.DERIVED_LAYOUT, note)


def recurrent_part(kernel: ContextKernel, geometry: ContextGeometry) -> Part:
    if not kernel.layout.recurrent:
        return Part.not_applicable(Component.RECURRENT_STATE, "no recurrent layers")
    r, s = kernel.recurrent_bytes(geometry)
    slots = geometry.rollback_slots(kernel.layout.rs_rollback)
    snapshots = f" x (1 + {slots} rollback snapshots)" if slots else ""
    note = f"{kernel.layout.note}; {geometry.n_seq} sequence(s){snapshots}, F32 R {r} + S {s} bytes"
    return Part(Component.RECURRENT_STATE, r + s, Basis.DERIVED_LAYOUT, note)


def no_layout(subject: Subject) -> str:
    """Why a part that needs the model's layout is unknown: an unreadable file's reason is said once, by the
    weights; another part points there."""
    if subject.unreadable:
        return "not derived: the file could not be read (the weights say why)"
    return str(subject.layout_problem) if subject.layout_problem else "layout unknown"


def workspace_part(subject: Subject, kernel: ContextKernel | None, geometry: ContextGeometry | None) -> Part:
    """Derived from the graph llama.cpp reserves where the architecture's graph is derived, else unknown."""
    if subject.layout is None:
        why = no_layout(subject) if subject.unreadable else "not derived: the model's layout is unknown (see kvCache)"
        return Part.unknown(Component.WORKSPACE, why)
    graph = subject.layout.graph
    bounds = kernel.workspace(geometry) if kernel is not None and geometry is not None else None
    if kernel is not None and kernel.draft_unknown:
        return Part.unknown(
            Component.WORKSPACE,
            f"under --spec-type draft-mtp llama-server makes an MTP draft context on the model, whose KV cache,"
            f" compute and output buffers memfit does not derive for {subject.architecture}",
        )
    if geometry is None or bounds is None or subject.n_vocab is None:
        return Part.unknown(
            Component.WORKSPACE,
            "llama.cpp's compute buffer is not derived for this architecture (its graph holds tensors memfit does"
            " not model), this model or this workload (its ubatch, cache types or rollback snapshots)",
        )
    floor, slack = bounds
    how = (
        "rebuilt node by node and its allocation replayed as ggml-alloc places it"
        if graph is not None and buildable(graph)
        else "bounded by its widest phase and the allocator's measured holes"
    )
    note = (
        f"llama.cpp's output buffer ({output_buffer(subject.n_vocab, geometry)} bytes) and a compute buffer from the"
        f" graph it reserves for a {geometry.n_ubatch}-token ubatch, {how}; the bounds are {slack} bytes apart"
        f" (flash attention {'on' if geometry.flash_attention else 'off'})"
    )
    if kernel is not None and kernel.draft is not None:
        draft_out = draft_output_bytes(subject.n_vocab, subject.layout.nextn_width, geometry)
        note += (
            "; with llama-server's MTP draft context's compute buffer (its DECODER_MTP graph, rebuilt and replayed"
            f" the same way) and its output buffer ({draft_out} bytes)"
        )
    return Part(Component.WORKSPACE, floor, Basis.DERIVED_LAYOUT, note, slack=slack)


def measured_workspace(observation: ObservationRow, kv: Part) -> Part:
    note = (
        f"measured by {observation.runtime} at {observation.observed_at} for this identity and workload"
        f"{kv_contradiction(observation.kv_cache_bytes, kv.bytes if kv.basis is Basis.DERIVED_LAYOUT else None)}"
    )
    return Part(Component.WORKSPACE, observation.workspace_bytes, Basis.MEASURED_ARTIFACT, note)


def workspace_floor(subject: Subject, geometry: ContextGeometry | None, derived: Part) -> tuple[int, str] | None:
    """The least llama.cpp allocates for the workspace, and what it is: the derived workspace floor where it is
    derived, else the exact output buffer where the vocabulary is known; None where neither is."""
    if derived.basis is Basis.DERIVED_LAYOUT and derived.bytes is not None:
        return derived.bytes, f"the derived workspace floor ({derived.bytes} bytes)"
    if geometry is not None and subject.n_vocab is not None:
        exact = output_buffer(subject.n_vocab, geometry)
        return exact, f"llama.cpp's output buffer ({exact} bytes)"
    return None


def workspace_ceiling(derived: Part) -> int | None:
    """The most llama.cpp allocates for the workspace where it is derived (the floor and the slack above it); None
    where it is not (then nothing bounds an observation from above)."""
    if derived.basis is Basis.DERIVED_LAYOUT and derived.bytes is not None:
        return derived.bytes + derived.slack
    return None


def refusal(subject: Subject, workload: Workload) -> str | None:
    """Why llama.cpp or llama-server does not run this model (as the workload loads it) under the workload, or None:
    a setting llama.cpp refuses, draft-mtp without what it needs, a pooling or a warmup llama-server refuses, a
    model whose first decode aborts."""
    layout = subject.layout
    return (
        refused_setting(workload, subject.architecture)
        or mtp_refusal(subject, workload)
        or pooling_refusal(layout, workload)
        or warmup_refusal(layout, workload)
        or (layout.decode_abort if layout is not None else "")
        or None
    )


def forecast_parts(
    subject: Subject, workload: Workload, history: HistoryMatch = NO_MATCH
) -> tuple[list[Part], list[Limit]]:
    """The five parts, in the contract's order (then the ledger's, where the workload has them), and the limits
    they add. Under a setting llama.cpp refuses, nothing
    past the weights is allocated: the rest is unknown, unless a byte count it derives is beyond 2^63-1 (the
    contract's first refusal, nonFiniteInput, is decided on those parts). The weights are the subject's as the
    workload loads them (estimator/mtp.py: with the NextN/MTP layers under llama-server's draft-mtp)."""
    loaded = with_mtp(subject, workload)
    parts, limits = _derived_parts(loaded, workload, history)
    if loaded.weights.basis is Basis.UNKNOWN and subject.weights.basis is not Basis.UNKNOWN:
        limits.append(Limit.WORKLOAD_UNSUPPORTED)  # the NextN/MTP layers' tensors draft-mtp loads are not known
    subject = loaded
    refused = refusal(subject, workload)
    if refused is None or bounds(parts).overflows:
        # the weights as the load mode holds them, and what llama-server grows after load (estimator/ledger.py)
        return [*weights_under_load_mode(subject, workload), *parts[1:], *after_load_parts(subject, workload)], limits
    context = (Component.KV_CACHE, Component.RECURRENT_STATE, Component.WORKSPACE)
    return [subject.weights, *(Part.unknown(c, refused) for c in context), subject.companions], [
        Limit.WORKLOAD_UNSUPPORTED
    ]


def _derived_parts(subject: Subject, workload: Workload, history: HistoryMatch) -> tuple[list[Part], list[Limit]]:
    limits: list[Limit] = []
    kernel = geometry = None
    if subject.layout is None:
        why = no_layout(subject)
        kv = Part.unknown(Component.KV_CACHE, why)
        recurrent = Part.unknown(Component.RECURRENT_STATE, why)
    else:
        kernel = ContextKernel(subject.layout, subject.n_vocab, subject.architecture, workload)
        geometry = kernel.geometry(workload.allocated_tokens)
        if kernel.kv_problem:
            kv = Part.unknown(Component.KV_CACHE, kernel.kv_problem)
            limits.append(Limit.WORKLOAD_UNSUPPORTED)
        else:
            kv = kv_cache_part(kernel, geometry)
            if kv.basis is Basis.UNKNOWN:  # the flash attention setting is unknown and changes it
                limits.append(Limit.WORKLOAD_UNSUPPORTED)
        recurrent = recurrent_part(kernel, geometry)
    if workload.flash_attention_on is None:
        workspace = Part.unknown(
            Component.WORKSPACE,
            f"llama.cpp's compute buffer depends on flash attention, and {workload.flash_attention!r} is not a"
            " setting memfit knows",
        )
        limits.append(Limit.WORKLOAD_UNSUPPORTED)
    else:
        workspace = workspace_part(subject, kernel, geometry)
    observed = history.observation.workspace_bytes if history.observation is not None else None
    floor, ceiling = workspace_floor(subject, geometry, workspace), workspace_ceiling(workspace)
    if history.observation is not None and observed is not None:
        # one recorded before observations were checked, or by another writer, may be out of bounds: they stand
        if floor is not None and observed < floor[0]:
            workspace = replace(workspace, note=f"{workspace.note}; an observation below {floor[1]} was ignored")
        elif ceiling is not None and observed > ceiling:
            workspace = replace(
                workspace,
                note=f"{workspace.note}; an observation above the derived ceiling ({ceiling} bytes) was ignored",
            )
        else:
            workspace = measured_workspace(history.observation, kv)
    if workspace.basis is Basis.UNKNOWN and workload.flash_attention_on is not None:
        limits.append(Limit.WORKSPACE_UNMEASURED)
    if history.identity_insufficient:
        limits.append(Limit.HISTORY_IDENTITY_INSUFFICIENT)
    return [subject.weights, kv, recurrent, workspace, subject.companions], limits
