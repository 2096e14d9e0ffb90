"""The whole-machine ledger beyond what llama.cpp allocates at load: how the weights hold memory under the load
mode, and what llama-server grows after load (its prompt cache, each slot's context checkpoints)."""

from __future__ import annotations

from dataclasses import replace

from memfit.estimator.bounds import Part
from memfit.estimator.cpu_repack import TENSOR_ALIGNMENT
from memfit.estimator.kv_cache import cache_type
from memfit.estimator.layout import Layout
from memfit.estimator.seq_state import seq_state_bytes
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, Component, LoadMode, Residency
from memfit.estimator.workload import Workload, flash_attention_for

MIB = 1 << 20
MAPPED = frozenset({LoadMode.AUTO, LoadMode.MMAP})  # llama_model_loader maps the file (auto: the CPU can)


def weights_under_load_mode(subject: Subject, workload: Workload) -> list[Part]:
    """The weights as the load mode holds them. Mapped (auto, mmap): the weights in the CPU buffer are the file's
    pages, soft; the mapping spans from the first to the last of them (llama_model_loader::get_mapping_range), so
    it may cover the tensors the CPU's extra buffer types repacked, at most the file's tensors, which are no
    larger than the weights read in; a tensor loaded twice (a tied embedding's output) is a second view of the
    same pages. The repacked copies are anonymous: `packedWeights`, hard. Read in (none, dio) or locked (mlock,
    mmap+mlock): the weights part as it is, hard."""
    w = subject.weights
    if workload.load_mode not in MAPPED or w.bytes is None or subject.packed is None:
        return [w]
    low, high = subject.packed
    note = f"{w.note}; memory-mapped (--load-mode {workload.load_mode}): the file's page cache, reclaimable"
    # the mapping ends where the last tensor's data ends: without its padding to the alignment
    floor = max(0, w.bytes - high - subject.duplicate - (TENSOR_ALIGNMENT - 1))
    mapped = replace(w, bytes=floor, slack=w.bytes + w.slack - floor, note=note, residency=Residency.SOFT)
    if high == 0:
        return [mapped]
    packed_note = "the weights the CPU's extra buffer types repack from the mapped file, in anonymous memory"
    return [mapped, Part(Component.PACKED_WEIGHTS, low, w.basis, packed_note, slack=high - low)]


def prompt_cache_part(workload: Workload) -> Part | None:
    """llama-server's prompt cache (server_prompt_cache): saved states of idle prompts, each one sequence's
    llama_state_seq_get_size and its checkpoints; an entry over the limit is skipped and the oldest are evicted
    to make room, so it holds from nothing up to --cache-ram. None where there is none (0)."""
    mib = workload.cache_ram_mib
    if mib == 0:
        return None
    if mib < 0:
        return Part.unknown(Component.PROMPT_CACHE, "--cache-ram -1: the prompt cache has no size limit")
    note = f"llama-server's prompt cache: from 0 up to --cache-ram {mib} MiB, one per server"
    return Part(Component.PROMPT_CACHE, 0, Basis.DERIVED_LAYOUT, note, slack=mib * MIB, residency=Residency.GROWS)


def _checkpointed(layout: Layout, workload: Workload) -> bool:
    """server_context: checkpoints are made where memory cannot be rolled back: a recurrent state, or sliding
    layers without --swa-full."""
    sliding = any(layer.window is not None for layer in layout.attention)
    return bool(layout.recurrent) or (sliding and not workload.swa_full)


def checkpoints_part(subject: Subject, workload: Workload) -> Part | None:
    """Each slot's context checkpoints: up to --ctx-checkpoints of them, each llama_state_seq_get_size_ext with
    PARTIAL_ONLY (the sliding-window cells or the recurrent state) of a slot that filled its context. None where
    there are none (0)."""
    count = workload.context_checkpoints
    if count <= 0:
        return None
    component, layout = Component.CONTEXT_CHECKPOINTS, subject.layout
    if layout is None:
        return Part.unknown(component, "the model's layout is not derived")
    if not _checkpointed(layout, workload):
        why = "llama-server checkpoints only memory it cannot roll back: sliding windows, recurrent states"
        return Part.not_applicable(component, why)
    flash = flash_attention_for(workload, subject.architecture)
    if flash is None:
        return Part.unknown(component, f"V's layout depends on flash attention, {workload.flash_attention!r}")
    slot = workload.slot_tokens
    if slot is None:
        slot = workload.n_ctx if workload.kv_unified else workload.allocated_tokens
        slot = min(slot, subject.context_limit) if subject.context_limit else slot
    n_stream = 1 if workload.kv_unified else workload.streams
    k_type, v_type = cache_type(workload.key_element_bytes), cache_type(workload.value_element_bytes)
    one = seq_state_bytes(layout, slot, n_stream, flash, k_type, v_type, partial=True)
    if one is None:
        return Part.unknown(component, "a checkpoint of an indexer cache beside the main one is not mirrored")
    slots = workload.streams
    note = f"up to {count} checkpoints x {slots} slots x {one} bytes (one slot's state at {slot} tokens)"
    return Part(component, 0, Basis.DERIVED_LAYOUT, note, slack=count * slots * one, residency=Residency.GROWS)


def after_load_parts(subject: Subject, workload: Workload) -> list[Part]:
    """What llama-server grows after load, where the workload has it."""
    return [p for p in (prompt_cache_part(workload), checkpoints_part(subject, workload)) if p is not None]
