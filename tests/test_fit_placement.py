"""memfit's prediction of llama.cpp's fitter (estimator/fit_placement.py) against common_fit_params on mock GPUs.

Every fitter's run in tests/data/mock/ (tools/truth/mock/: llama.cpp's common_fit_params against one to three mock
GPUs whose free memory holds part of a full offload, then the load with what it chose) records the context, -ngl,
-ts and tensor overrides the fitter chose: at a context the launcher set (results_mock_shapes_dryrun.jsonl) and
choosing the context itself (-c 0, results_mock_fit_context_dryrun.jsonl), over dense, SWA, MoE, recurrent and
hybrid models. memfit runs the same search over its own forecast of each candidate's dry run (each device's
weights, KV cache, recurrent state and compute buffer) and chooses the same on every run.
"""

from __future__ import annotations

import pytest

from memfit.estimator.artifact import HeaderSummary
from memfit.estimator.fit_placement import DeviceMemory, FitParams, Measure, Offload, fit_placement
from tools.truth.mock import files, row_id, rows
from tools.truth.mock.mirror import fitter, written_models

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
