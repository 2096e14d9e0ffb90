"""memfit's placement mirror asked about a recorded mock-GPU run: the devices, request and memory the run names.

`compare(row, summaries)` lists every field where memfit's placement (estimator/placement.py) differs from what
llama.cpp reported for the run: the layer and output devices, each layer's tensors per buffer type, the tensors
outside the layers, the weights, KV cache and recurrent state per buffer type (the memory whole where the probe
does not take it apart: the indexer's and compressed caches), per cache, per pool, and the output buffer. Empty
when memfit mirrors the run to the byte. `compute(row, summaries)` is memfit's compute buffer of each backend for
the run (estimator/scheduler.py), in the mode the run sized them (a dry run, or a loading context).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from memfit.estimator.artifact import HeaderSummary, artifact_facts, summarize
from memfit.estimator.context import llama_geometry
from memfit.estimator.cpu_variant import BY_NAME
from memfit.estimator.devices import AllocRule, Device, mock_gpus
from memfit.estimator.fit_placement import FitParams, PlacementFit, expert_count, fit_placement, forecast_measure
from memfit.estimator.kv_cache import GGML_CACHE_TYPES
from memfit.estimator.placement import (
    Memory,
    ModelTensors,
    Placement,
    PlacementResult,
    SplitMode,
    model_tensors,
    overrides,
    place,
)
from memfit.estimator.scheduler import ComputeBuffers, Mode, compute_buffers
from memfit.readers.gguf_header import read_header
from tools.gguf_writers import write_model
from tools.truth.mock import args_of
from tools.truth.mock.matrix import CPU_VARIANT, mock_writers

MIB = 1 << 20
MemoryAt = Callable[[int], Memory]  # a total context -> the memory


def written_models(folder: Path, names: Iterable[str]) -> dict[str, list[HeaderSummary]]:
    """The mock runs' models (the real-scale shapes sparse) written into `folder` and read as memfit reads them."""
    writers = mock_writers()
    out = {}
    for name in sorted(set(names)):
        path = folder / f"{name}.gguf"
        write_model(writers[name](), path)
        with open(path, "rb") as f:
            out[name] = [summarize(read_header(f))]
    return out


def devices_of(row: dict[str, Any]) -> tuple[Device, ...]:
    """The mock GPUs the run registered, as memfit's devices."""
    mock = row["mock"]
    if not mock["n"]:
        return ()
    return mock_gpus(
        mock["n"],
        total=tuple(mock["total"]),
        free=tuple(mock["free"]),
        alloc=AllocRule(mock["alloc"]),
        alignment=mock["align"],
        host_buffer=bool(mock["host"]),
        name=mock["name"],
        async_events=bool(mock["async"] and mock["events"]),
        moe_alloc_dep=bool(mock["moe_dep"]),
    )


def request_of(row: dict[str, Any]) -> Placement:
    """The run's placement flags; a fitter's run with the -ngl, -ts and overrides it chose."""
    a, s = args_of(row), row["settings"]
    ngl = s["ngl"]
    split = [float(x) for x in a["ts"].split(",")] if "ts" in a else []
    request = Placement(
        gpu_layers=None if ngl < 0 else ngl,
        split_mode=SplitMode(a.get("split", "layer")),
        main_gpu=int(a.get("main_gpu", 0)),
        tensor_split=tuple(split),
        overrides=tuple(tuple(x.rsplit("=", 1)) for x in a.get("ot", "").split(";") if x),  # type: ignore[misc]
        cpu_moe=a.get("cpu_moe") == "1",
        n_cpu_moe=int(a.get("n_cpu_moe", 0)),
        n_cpu_ffn=int(a.get("n_cpu_ffn", 0)),
        kv_offload=a.get("kv_offload", "1") == "1",
        op_offload=a.get("op_offload", "1") == "1",
        no_host=a.get("no_host") == "1",
        extra_buffers=a.get("repack", "1") == "1",
        mmap=a.get("mmap") == "1",
    )
    if row.get("fit"):
        fit = row["fit"]
        return dataclasses.replace(
            request,
            gpu_layers=fit["n_gpu_layers"] if fit["n_gpu_layers"] >= 0 else None,
            tensor_split=tuple(fit["tensor_split"][: row["mock"]["n"]]),
            overrides=tuple((p, b) for p, b in fit["overrides"]),
            cpu_moe=False,
            n_cpu_moe=0,
            n_cpu_ffn=0,
        )
    return request


def memory_at(row: dict[str, Any], summaries: Sequence[HeaderSummary], name: str) -> tuple[ModelTensors, MemoryAt]:
    """The model and its memory at any total context, with the run's sequences, ubatch, cache types, flash
    attention (as auto resolved it) and output cap."""
    facts = artifact_facts(list(summaries), name)
    a, c = args_of(row), row["cparams"]
    k_type, v_type = GGML_CACHE_TYPES[a.get("type_k", "f16")], GGML_CACHE_TYPES[a.get("type_v", "f16")]
    assert facts.layout is not None and facts.n_vocab is not None, facts.layout_error
    layout = facts.layout
    mtp = a.get("mtp_ctx") == "1"  # the model loaded with load_mtp, and the MTP draft context made

    def at(n_ctx: int) -> Memory:
        geometry = llama_geometry(
            n_ctx,
            int(a.get("n_seq", 1)),
            int(a.get("n_ubatch", 512)),
            unified=bool(c["kv_unified"]),
            causal=layout.causal,  # a non-causal model's n_batch is not capped by the context
            quantized_k=k_type.quantized,
            k_type=k_type.name,
            v_type=v_type.name,
            quantized_v=v_type.quantized,
            flash_attention=a.get("fa") != "off",  # on, or auto: on when the cache is made
            # auto: llama_context resolves it after the cache is made (compute_buffers; cparams.flash_attn its result)
            flash_attention_auto=a.get("fa", "auto") == "auto",
        )
        # llama-server's output limit as the run set it (outputs_max: llama_context_params.n_outputs_max)
        geometry = dataclasses.replace(geometry, n_outputs_max=int(a.get("outputs_max", 0)))
        if mtp:  # llama-server's draft-mtp: the nextn rows (the draft context beside the target, f16 caches)
            geometry = dataclasses.replace(geometry, nextn_width=layout.nextn_width)
        return Memory(layout, geometry, k_type, v_type)

    model = model_tensors(summaries, facts.n_vocab)
    return (model.with_mtp() if mtp or a.get("mtp") == "1" else model), at


def memory_of(row: dict[str, Any], summaries: Sequence[HeaderSummary], name: str) -> tuple[ModelTensors, Memory]:
    """The model and its memory at the run's context (-c 0: the one llama.cpp chose, the trained or the fitter's)."""
    model, at = memory_at(row, summaries, name)
    return model, at(int(args_of(row).get("n_ctx", 2048)) or row["cparams"]["n_ctx"])


def fitter(row: dict[str, Any], summaries: Sequence[HeaderSummary]) -> PlacementFit:
    """memfit's prediction of the fitter's choice for a fitter's run: its devices, margins, minimum context and
    the launcher's other flags."""
    model, at = memory_at(row, summaries, row["model"])
    a, fit = args_of(row), row["fit"]
    facts = artifact_facts(list(summaries), row["model"])
    assert facts.layout is not None and facts.context_limit is not None
    devices = devices_of(row)
    request = FitParams(
        model.n_layer if args_of(row).get("mtp_ctx") == "1" else model.n_trunk,  # hp_ngl: NextN layers loaded too
        expert_count(facts.layout),
        facts.context_limit,
        int(a.get("n_ctx", 0)),
        int(a.get("n_seq", 1)),
        bool(row["cparams"]["kv_unified"]),
        tuple(m * MIB for m in fit["margins_mib"]),
        fit["n_ctx_min"],
    )
    base = dataclasses.replace(request_of({**row, "fit": None}), gpu_layers=None)
    measure = forecast_measure(model, at, devices, base, BY_NAME[CPU_VARIANT])
    return fit_placement(request, [d.name for d in devices], measure)


def mirror(row: dict[str, Any], summaries: Sequence[HeaderSummary]) -> PlacementResult:
    model, memory = memory_of(row, summaries, row["model"])
    return place(model, memory, devices_of(row), request_of(row), BY_NAME[CPU_VARIANT])


def compute(row: dict[str, Any], summaries: Sequence[HeaderSummary]) -> ComputeBuffers:
    """memfit's compute buffers for the run: its placement's split graph, in its mode (no_alloc: the dry run)."""
    model, memory = memory_of(row, summaries, row["model"])
    mode = Mode.DRY if row["no_alloc"] else Mode.REAL
    return compute_buffers(model, memory, devices_of(row), request_of(row), mirror(row, summaries), mode)


def llama_cpp_compute(row: dict[str, Any]) -> dict[str, int]:
    """The run's compute buffer per backend, as llama.cpp allocated it."""
    return {b["backend"]: b["bytes"] for b in row["compute_by_backend"]}


def memfit_compute(row: dict[str, Any], buffers: ComputeBuffers) -> dict[str, int]:
    """memfit's compute buffer per backend for the buffers the run's mock allocated: with ggml-cuda's
    flash-attention F16 copies (mock_fa_alloc) the ceilings, else the floors."""
    sizes = buffers.ceilings if row["mock"].get("fa_alloc") else buffers.bytes
    return {name: size for name, size in sizes.items() if size or name in llama_cpp_compute(row)}


def _layer_counts(result: PlacementResult, n_layer: int) -> list[dict[str, int]]:
    counts: list[Counter[str]] = [Counter() for _ in range(n_layer)]
    for t in result.tensors:
        if t.layer is not None:
            counts[t.layer].update(t.buffer_types)
    return [dict(c) for c in counts]


def _io_tensors(result: PlacementResult) -> dict[str, str]:
    return {t.name: "+".join(sorted(t.buffer_types)) for t in result.tensors if t.layer is None}


def _cache_buffers(row: dict[str, Any]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for cache in row["kv_caches"]:
        out.update(cache["buffers"])
    return {k: v for k, v in out.items() if v}


def _state_buffers(row: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in (row["recurrent"] or {}).get("buffers", {}).items() if v}


def _summed(*parts: dict[str, int]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for part in parts:
        out.update(part)
    return {k: v for k, v in out.items() if v}


def _parts_reported(row: dict[str, Any]) -> bool:
    """Whether the probe's KV caches and recurrent state make up the whole memory (memory_buffers): not for the
    memories it does not take apart (llama_kv_cache_dsa, llama_kv_cache_dsv4: memory_kind other; the indexer
    cache of llama_memory_hybrid_idx), whose memory is compared whole per buffer type."""
    return _summed(_cache_buffers(row), _state_buffers(row)) == _summed(row.get("memory_buffers", {}))


def compare(row: dict[str, Any], summaries: Sequence[HeaderSummary]) -> list[str]:
    """Where memfit's placement of the run differs from llama.cpp's."""
    result = mirror(row, summaries)
    model, _ = memory_of(row, summaries, row["model"])
    got: dict[str, Any] = {
        "model_devices": list(result.devices),
        "layer_dev": list(result.layer_devices),
        "output_dev": result.output_device,
        "layer_bufts": _layer_counts(result, model.n_layer),
        "io_tensors": _io_tensors(result),
        "model_buffers": result.by_buffer_type("weights"),
        "kv_buffers": result.by_buffer_type("kv"),
        "rs_buffers": result.by_buffer_type("recurrent"),
        "memory_buffers": _summed(result.by_buffer_type("kv"), result.by_buffer_type("recurrent")),
        "output_buffer_type": result.output_buffer_type,
        "output_buffer_bytes": result.output_buffer_bytes,
    }
    pools = result.by_pool()
    want: dict[str, Any] = {
        "model_devices": row["model_devices"],
        "layer_dev": row["layer_dev"],
        "output_dev": row["output_dev"],
        "layer_bufts": row["layer_bufts"],
        "io_tensors": row["io_tensors"],
        "model_buffers": {k: v for k, v in row["model_buffers"].items() if v},
        "kv_buffers": _cache_buffers(row),
        "rs_buffers": _state_buffers(row),
        "memory_buffers": _summed(row.get("memory_buffers", {})),
        "output_buffer_type": row["output_buffer_type"],
        "output_buffer_bytes": row["output_buffer_bytes"],
    }
    if not _parts_reported(row):
        del want["kv_buffers"], want["rs_buffers"]
    out = [f"{k}: memfit {got[k]!r}, llama.cpp {want[k]!r}" for k in want if got[k] != want[k]]
    for name, d in row["per_device"].items():
        p = pools.get(name)
        mine = (p.weights, p.kv + p.recurrent) if p else (0, 0)
        if mine != (d["model"], d["context"]):
            out.append(f"per_device {name}: memfit (model, context) {mine}, llama.cpp {(d['model'], d['context'])}")
    if not row.get("fit"):
        echoed = [tuple(x) for x in row["settings"]["overrides"]]
        if overrides(request_of(row)) != echoed:
            out.append(f"overrides: memfit {overrides(request_of(row))}, llama.cpp {echoed}")
    return out
