"""memfit's prediction of llama.cpp's fitter (estimator/fit_placement.py) against common_fit_params on mock GPUs.

Every fitter's run in tests/data/mock/ (tools/truth/mock/: llama.cpp's common_fit_params against one to three mock
GPUs whose free memory holds part of a full offload, then the load with what it chose) records the context, -ngl,
-ts and tensor overrides the fitter chose: at a context the launcher set (results_mock_shapes_dryrun.jsonl) and
choosing the context itself (-c 0, results_mock_fit_context_dryrun.jsonl), over dense, SWA, MoE, recurrent and
hybrid models. memfit runs the same search over its own forecast of each candidate's dry run (each device's
weights, KV cache, recurrent state and compute buffer) and chooses the same on every run.
"""

from __future__ import annotations

import dataclasses

import pytest

from memfit.estimator.artifact import HeaderSummary
from memfit.estimator.cpu_variant import BY_NAME
from memfit.estimator.device_forecast import Placed, draft_compute
from memfit.estimator.fit_placement import (
    DeviceMemory,
    FitParams,
    Measure,
    Offload,
    draft_memory,
    fit_placement,
    forecast_measure,
)
from memfit.estimator.placement import PlacementUnsupported, place
from tools.truth.mock import args_of, files, row_id, rows
from tools.truth.mock.matrix import CPU_VARIANT
from tools.truth.mock.mirror import devices_of, fitter, memory_at, request_of, written_models

RUNS = [r for path in files() for r in rows(path.name) if r.get("fit")]
MIB = 1 << 20


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[HeaderSummary]]:
    return written_models(tmp_path_factory.mktemp("mock-models"), (r["model"] for r in RUNS))


def _split(values: list[float] | tuple[float, ...]) -> tuple[float, ...]:
    """-ts as llama.cpp reads it: all zero is no split (by free memory)."""
    return tuple(values) if any(values) else ()


@pytest.mark.parametrize("run", RUNS, ids=row_id)
def test_the_fitters_choice_equals_llama_cpps(run: dict, summaries: dict[str, list[HeaderSummary]]) -> None:
    got = fitter(run, summaries[run["model"]])
    fit, n_devices = run["fit"], run["mock"]["n"]
    assert fit["status_name"] == "success" and got.fitted, got.why
    assert got.n_ctx == fit["n_ctx"] == run["cparams"]["n_ctx"]
    assert got.offload.gpu_layers == (None if fit["n_gpu_layers"] < 0 else fit["n_gpu_layers"])
    assert _split(got.offload.tensor_split) == _split(fit["tensor_split"][:n_devices])
    assert list(got.offload.overrides) == [tuple(o) for o in fit["overrides"]]


def test_the_runs_cover_the_fitters_paths() -> None:
    """Context kept and reduced, one to three devices, full offload kept, dense layers, MoE partial layers overflowing
    to the next device."""
    fits = [r["fit"] for r in RUNS]
    assert {r["mock"]["n"] for r in RUNS} == {1, 2, 3}
    assert any(f["n_ctx_before"] == 0 and f["n_gpu_layers"] < 0 for f in fits)  # the context reduced alone
    assert any(f["n_ctx_before"] == 0 and 0 <= f["n_gpu_layers"] for f in fits)  # then the layers
    assert any(f["n_ctx_before"] > 0 for f in fits)
    assert any(b == "MOCK1" for f in fits for _, b in f["overrides"])
    assert {r["model_desc"].split()[0] for r in RUNS} >= {"llama", "gemma3", "qwen3moe", "mamba2", "granitehybrid"}


def _linear(per_layer: int, fixed: int, free: int) -> Measure:
    """A device whose dry run holds `fixed` bytes and `per_layer` bytes a layer (the output layer one more)."""

    def measure(n_ctx: int, offload: Offload) -> list[DeviceMemory]:
        ngl = 33 if offload.gpu_layers is None else offload.gpu_layers
        return [DeviceMemory(free, ngl * per_layer, 0, fixed)]

    return measure


def test_a_dense_model_gets_the_layers_that_keep_the_margin() -> None:
    """32 layers and the output layer of 100 MiB each, 300 MiB of compute, 2 GiB free: (2048 - 1024 - 300) MiB
    hold 7 layers (700 MiB), not 8."""
    request = FitParams(n_layer=32, n_expert=0, n_ctx_train=4096, n_ctx=4096, n_seq=1, kv_unified=True)
    got = fit_placement(request, ["CUDA0"], _linear(100 * MIB, 300 * MIB, 2048 * MIB))
    assert got.fitted and got.offload == Offload(7, (), ())
    assert [(d.n_layer, d.n_part) for d in got.layers] == [(7, 0)]


def test_a_model_that_fits_is_left_as_it_is() -> None:
    request = FitParams(n_layer=32, n_expert=0, n_ctx_train=4096, n_ctx=4096, n_seq=1, kv_unified=True)
    got = fit_placement(request, ["CUDA0"], _linear(MIB, MIB, 2048 * MIB))
    assert got.fitted and got.offload == Offload() and got.n_ctx == 4096


def test_a_placement_the_user_set_makes_the_fitter_give_up() -> None:
    request = FitParams(32, 0, 4096, 4096, 1, True, gpu_layers=20, user_placement="-ngl 20")
    got = fit_placement(request, ["CUDA0"], _linear(100 * MIB, 300 * MIB, 2048 * MIB))
    assert not got.fitted and got.offload == Offload() and "-ngl 20" in got.why


# --- llama-server's --spec-type draft-mtp: the MTP draft context fitted beside the target -------------------------

# tests/data/mock/fit_mtp_gpu.jsonl (tools/truth/mock/matrix.py mtp_fit_runs): common_fit_params given
# common_init_result's common_fit_extra_model, one and two mock GPUs; `fit.extra` is the draft's dry run at the
# fitted context per device (what add_extra_memory adds there, its weights not counted: shares_model)
MTP_RUNS = [r for r in rows("fit_mtp_gpu.jsonl") if r.get("fit")]
# runs llama.cpp did not finish: the fitter looping in its step 4 (the probe stopped after 60 s), and a heap
# corruption the probe aborted on (malloc(): invalid size, hy_v3 on two devices), not compared
FAILED = {row_id(r): r for r in rows("fit_mtp_gpu.jsonl") if r.get("error")}


@pytest.fixture(scope="module")
def mtp_summaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[HeaderSummary]]:
    return written_models(tmp_path_factory.mktemp("mock-mtp-models"), (r["model"] for r in MTP_RUNS))


def _draft(run: dict, summaries: list[HeaderSummary]) -> dict[str, tuple[int, int]]:
    """memfit's add_extra_memory for the run: the draft's (context, compute) bytes per device at the fitted context,
    laid out by the launcher's flags (every layer on the GPUs)."""
    model, at = memory_at(run, summaries, run["model"])
    base = dataclasses.replace(request_of({**run, "fit": None}), gpu_layers=None, mmap=False)
    return draft_memory(model, at(run["fit"]["extra"]["n_ctx"]), devices_of(run), base, BY_NAME[CPU_VARIANT])


def test_the_mtp_runs_cover_the_fitters_paths() -> None:
    fits = {(r["model"], r["label"]): r["fit"] for r in MTP_RUNS}
    placed = list(fits.values())
    assert {r["mock"]["n"] for r in MTP_RUNS} == {1, 2} and {r["mock"]["alloc"] for r in MTP_RUNS} == {"plain", "cuda"}
    assert all(f["status_name"] == "success" for f in fits.values())
    assert any(f["n_ctx_before"] == 0 and f["n_ctx"] > f["n_ctx_min"] and f["n_gpu_layers"] < 0 for f in placed)
    assert any(f["n_gpu_layers"] == 0 for f in placed)  # the draft alone takes the room of every layer
    assert any(0 < f["n_gpu_layers"] and f["overrides"] and f["tensor_split"][1] > 0 for f in placed)
    assert any(0 < f["n_gpu_layers"] and f["overrides"] and len(f["tensor_split"]) == 1 for f in placed)
    assert any(b == "MOCK1" for f in placed for _, b in f["overrides"])
    # two devices: the draft's graph computed on the device of its NextN layer alone; its cache there too (a
    # NextN-only cache) or on both (deepseek2's and glm4moe's cache of every layer)
    two = {m: f["extra"] for (m, _), f in fits.items() if len(f["tensor_split"]) == 2}
    assert all(x["MOCK0"]["compute"] == 0 < x["MOCK1"]["compute"] for x in two.values())
    assert two["qwen35-mtp"]["MOCK0"]["context"] == 0 < two["deepseek2-mla-mtp"]["MOCK0"]["context"]
    # every architecture whose draft context memfit counts, the iswa pair (mimo2, step35) among them
    assert {r["model_desc"].split()[0] for r in MTP_RUNS} >= {
        "qwen35",
        "bailingmoe3",
        "deepseek2",
        "glm4moe",
        "mimo2",
        "step35",
        "deepseek32",
        "glm-dsa",
        "nemotron_h_moe",
        "hy_v3",
    }
    assert {k: r["error"].split(":")[0] for k, r in FAILED.items()} == {
        "mimo2-mtp:fitmtp2_60": "timeout",
        "hy-v3-mtp:fitmtp2_10": "no output (exit -6)",
    }


@pytest.mark.parametrize("run", MTP_RUNS, ids=row_id)
def test_the_draft_context_the_fitter_adds_equals_llama_cpps(
    run: dict, mtp_summaries: dict[str, list[HeaderSummary]]
) -> None:
    """The MTP draft context's KV cache and compute buffer on each device (its DECODER_MTP graph split by the
    scheduler: the pipeline's copies on two devices), byte for byte."""
    extra = run["fit"]["extra"]
    want = {name: (extra[name]["context"], extra[name]["compute"]) for name in run["per_device"] if name != "Host"}
    assert _draft(run, mtp_summaries[run["model"]]) == want


@pytest.mark.parametrize("run", MTP_RUNS, ids=row_id)
def test_the_draft_context_on_the_fitted_placement_equals_llama_cpps(
    run: dict, mtp_summaries: dict[str, list[HeaderSummary]]
) -> None:
    """The draft context llama-server then makes on the model loaded with the fitter's choice (the row's `mtp_ctx`,
    a dry run): its cache and compute buffer per device for that placement, layers on the CPU and partial layers
    among them."""
    model, at = memory_at(run, mtp_summaries[run["model"]], run["model"])
    request = dataclasses.replace(request_of(run), mmap=False)
    got = draft_memory(model, at(run["cparams"]["n_ctx"]), devices_of(run), request, BY_NAME[CPU_VARIANT])
    want = {k: (v["context"], v["compute"]) for k, v in run["mtp_ctx"]["per_device"].items() if k != "Host"}
    assert got == want


def _placed(run: dict, summaries: list[HeaderSummary]) -> Placed:
    """The run's fitted placement as device_forecast takes it (one typing, the run's CPU variant)."""
    model, at = memory_at(run, summaries, run["model"])
    memory, devices = at(run["cparams"]["n_ctx"]), tuple(devices_of(run))
    request = dataclasses.replace(request_of(run), mmap=False)
    return Placed(model, memory, devices, request, (place(model, memory, devices, request, BY_NAME[CPU_VARIANT]),))


@pytest.mark.parametrize("run", MTP_RUNS, ids=row_id)
def test_the_draft_compute_buffer_of_each_pool_is_llama_cpps(
    run: dict, mtp_summaries: dict[str, list[HeaderSummary]]
) -> None:
    """device_forecast's draft compute share of each pool (the host's too) on the fitted placement: the draft graph's
    split per backend, its floor the dry run's buffer to the byte (the NextN layer on a GPU or on the CPU, where
    ggml's op offload still reserves a GPU buffer), within its bounds over both of memfit's scheduler modes."""
    got = draft_compute(_placed(run, mtp_summaries[run["model"]]))
    want = {("host" if k == "Host" else k): v["compute"] for k, v in run["mtp_ctx"]["per_device"].items()}
    assert {k: got.get(k, (0, 0))[0] for k in want} == want
    assert all(got.get(k, (0, 0))[0] <= w <= got.get(k, (0, 0))[1] for k, w in want.items())
    assert set(got) <= set(want)


def test_a_fit_llama_cpp_never_ends_is_unsupported(mtp_summaries: dict[str, list[HeaderSummary]]) -> None:
    """mimo2 on two devices at 60%: common_params_fit_impl's step 4 converts no dense-only layer, keeps the same
    candidate and delta, and loops (the probe stopped it); memfit's fitter reaches the same step and refuses rather
    than loop or answer. The run's devices are its recorded sibling's (fitmtp2_25) with its own free and total."""
    failed = FAILED["mimo2-mtp:fitmtp2_60"]
    sibling = next(r for r in MTP_RUNS if row_id(r) == "mimo2-mtp:fitmtp2_25")
    a = args_of(failed)
    free, total = int(a["mock_free_mib"]) * MIB, int(a["mock_total_mib"]) * MIB
    run = sibling | {"args": failed["args"], "mock": sibling["mock"] | {"free": [free] * 2, "total": [total] * 2}}
    with pytest.raises(PlacementUnsupported, match="does not end"):
        fitter(run, mtp_summaries["mimo2-mtp"])


@pytest.mark.parametrize("run", MTP_RUNS, ids=row_id)
def test_under_mtp_the_fitters_choice_equals_llama_cpps(
    run: dict, mtp_summaries: dict[str, list[HeaderSummary]]
) -> None:
    """The context, -ngl, -ts and overrides common_fit_params chose with the draft beside the target, and each
    device's bytes at that choice: the target's weights, cache and compute buffer as llama.cpp then loaded them,
    and the draft's."""
    got = fitter(run, mtp_summaries[run["model"]])
    fit, n_devices = run["fit"], run["mock"]["n"]
    assert got.fitted, got.why
    assert got.n_ctx == fit["n_ctx"] == run["cparams"]["n_ctx"]
    assert got.offload.gpu_layers == (None if fit["n_gpu_layers"] < 0 else fit["n_gpu_layers"])
    assert _split(got.offload.tensor_split) == _split(fit["tensor_split"][:n_devices])
    assert list(got.offload.overrides) == [tuple(o) for o in fit["overrides"]]
    model, at = memory_at(run, mtp_summaries[run["model"]], run["model"])
    base = dataclasses.replace(request_of({**run, "fit": None}), gpu_layers=None)
    measured = forecast_measure(model, at, devices_of(run), base, BY_NAME[CPU_VARIANT])(got.n_ctx, got.offload)
    for device, memory in zip(run["model_devices"], measured, strict=True):
        want, extra = run["per_device"][device], fit["extra"][device]
        assert (memory.model, memory.context, memory.compute) == (
            want["model"],
            want["context"] + extra["context"],
            want["compute"] + extra["compute"],
        ), device
