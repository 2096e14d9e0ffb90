"""Where each byte lives, through the API: the placement fields of a fit request, the per-device answer, what-if
GPUs (declared ones, and a stand-in NVML), and the verdict taken pool by pool.

The byte counts per device are held against llama.cpp's own placement on mock GPUs (tests/data/mock/, the runs
tests/test_placement.py holds estimator/placement.py against): a declared `cuda` GPU of the mock's size is the mock
device with ggml-cuda's rules, so the service's answer for the run's flags must carry llama.cpp's bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from memfit import wire
from memfit.cli import main
from memfit.estimator.device_forecast import gpu_devices, places_nothing_on_gpus
from memfit.estimator.devices import mock_gpus
from memfit.estimator.machine import HostMemory
from memfit.estimator.workload import PlacementFlags
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.declared_gpus import declared_gpu, declared_gpus
from memfit.readers.model_roots import Root, RootKind
from memfit.readers.nvml import NvmlReader
from memfit.service.answers import Settings
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tests.test_environment import fake_nvml
from tools.gguf_writers import QT, qwen3_30b_a3b, write_model
from tools.truth.mock import args_of, files, placement_request, row_id, rows
from tools.truth.mock.matrix import CPU_VARIANT, mock_writers

GIB = 1 << 30
BIG = "qwen3-30b-a3b-q5_0"  # 30.5B parameters at 5.5 bits: a 20 GB file (sparse: no disk)
HOST_16 = HostMemory(16 * GIB, 16 * GIB)
WRITERS = mock_writers()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("device-models")
    size = write_model(qwen3_30b_a3b(QT.Q5_0), folder / f"{BIG}.gguf")
    assert 20 * 10**9 <= size < 24 * GIB
    return folder


def _server(models: Path, **service: Any) -> LiveServer:
    return LiveServer(build_service([Root(str(models), RootKind.PLAIN)], read_host=lambda: HOST_16, **service))


@pytest.fixture(scope="module")
def nvml_24(models: Path) -> Iterator[LiveServer]:
    """A host reporting (through a stand-in NVML) one 24 GiB GPU, 23 GiB of it free, and 16 GiB of RAM."""
    nvml = NvmlReader(fake_nvml([("GPU-aaaa-1111", 23 * GIB, 24 * GIB)]), environ={})
    with _server(models, nvml=nvml) as server:
        server.service.index.refresh()
        yield server


def _fit(server: LiveServer, **fields: Any) -> dict[str, Any]:
    with server.client() as client:
        response = client.post("/v1/models/fit", json={"modelId": BIG, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def _part(device: dict[str, Any], component: str) -> dict[str, Any]:
    return next(p for p in device["parts"] if p["component"] == component)


def test_a_20_gb_model_on_a_24_gib_gpu_is_no_longer_oversize_for_16_gib_of_ram(nvml_24: LiveServer) -> None:
    """Judged as one pool (the whole estimate against host RAM, what memfit answered before 1.14.0) it is oversize;
    each pool against its own memory, the host keeps the token embeddings and the GPU holds every layer."""
    answer = _fit(nvml_24, mode="fullGpu")
    assert answer["estimate"]["lowerBoundBytes"] > 16 * GIB  # the whole allocation: more than the host has
    host, gpu = answer["devices"]
    assert (host["name"], host["kind"], gpu["name"], gpu["kind"], gpu["source"]) == (
        "host",
        "host",
        "CUDA0",
        "gpu",
        "nvml",
    )
    assert (gpu["freeBytes"], gpu["totalBytes"], host["freeBytes"]) == (23 * GIB, 24 * GIB, 16 * GIB)
    assert gpu["note"] == "layers 0-47, output" and host["note"] == "no layer"
    assert _part(host, "weights")["bytes"] < GIB < 19 * GIB < _part(gpu, "weights")["bytes"]
    assert _part(host, "kvCache")["bytes"] == 0 and _part(gpu, "kvCache")["bytes"] > 0
    assert host["lowerBoundBytes"] < 16 * GIB and gpu["lowerBoundBytes"] < 23 * GIB
    assert answer["gpuAdmits"] is True
    # each backend's compute buffer, from the scheduler's split graph: the host's holds the output buffer too
    assert [_part(d, "workspace")["basis"] for d in (host, gpu)] == ["derivedLayout", "derivedLayout"]
    assert 0 < _part(host, "workspace")["bytes"] and 0 < _part(gpu, "workspace")["bytes"]
    assert gpu["upperBoundBytes"] is not None and host["upperBoundBytes"] is not None
    assert answer["verdict"] == "good" and answer["estimate"]["workload"]["gpuLayers"] == "all"


def test_no_gpu_layers_is_the_hosts_answer(nvml_24: LiveServer) -> None:
    """-ngl 0: the host holds the whole estimate, the GPU no layer: only the compute buffer of the matrix products
    the scheduler offloads from the host (op offload, a 512-token ubatch: the weights of one offloaded product at a
    time copied in, tests/data/mock's -ngl 0 runs hold it to llama.cpp's); the verdict is the estimate's against host
    RAM."""
    answer = _fit(nvml_24, gpuLayers=0)
    host, gpu = answer["devices"]
    assert host["parts"] == answer["estimate"]["parts"]
    assert (host["lowerBoundBytes"], host["upperBoundBytes"]) == (
        answer["estimate"]["lowerBoundBytes"],
        answer["estimate"]["upperBoundBytes"],
    )
    assert (answer["verdict"], answer["decidedBy"], host["verdict"]) == ("oversize", "host", "oversize")
    assert gpu["note"] == "no layer" and answer["gpuAdmits"] is True
    assert [p["basis"] for p in gpu["parts"] if p["bytes"]] == ["derivedLayout"]  # the workspace alone
    assert 0 < gpu["lowerBoundBytes"] == _part(gpu, "workspace")["bytes"] < GIB
    assert answer["estimate"]["workload"]["gpuLayers"] == 0 and "fitter" not in host["note"]


def test_cpu_offload_is_the_fitters_placement_on_the_gpu_read(nvml_24: LiveServer) -> None:
    """cpuOffload is -ngl auto: the placement llama.cpp's fitter chooses for the GPU's free memory (23 GiB), which
    leaves its 1 GiB margin (--fit-target) on the GPU; the fitter is the source of the -ngl, -ts and -ot echoed."""
    answer = _fit(nvml_24, mode="cpuOffload")
    workload = answer["estimate"]["workload"]
    sources = {s["setting"]: s["source"] for s in workload["settings"]}
    assert [sources[s] for s in ("gpuLayers", "tensorSplit", "tensorOverrides")] == ["fitter"] * 3
    host, gpu = answer["devices"]
    assert gpu["lowerBoundBytes"] <= 22 * GIB and _part(gpu, "weights")["bytes"] > 0
    assert gpu["note"] != "no layer" and "not predicted" not in host["note"]


def test_cpu_offload_with_the_experts_flag_is_every_layer_as_the_fitter_gives_up(nvml_24: LiveServer) -> None:
    """-ngl auto with --n-cpu-moe: llama.cpp's fitter keeps a placement whose overrides the launcher set, and loads
    with -ngl auto's every layer, the first layers' experts on the CPU."""
    answer = _fit(nvml_24, mode="cpuOffload", nCpuMoe=8)
    workload = answer["estimate"]["workload"]
    assert (workload["gpuLayers"], workload["nCpuMoe"], workload["tensorOverrides"]) == ("all", 8, [])
    assert answer["devices"][1]["note"] == "layers 0-47, output"


def test_cpu_offload_without_a_gpu_read_is_answered_as_no_gpu_layers(models: Path) -> None:
    """Where no GPU is read (or there is none) memfit does not predict the fitter: -ngl 0, as the host's note says."""
    with _server(models, nvml=NvmlReader(fake_nvml([]), environ={})) as server:
        server.service.index.refresh()
        answer = _fit(server, mode="cpuOffload")
    assert answer["estimate"]["workload"]["gpuLayers"] == 0
    assert "fitter's choice is not predicted here" in answer["devices"][0]["note"]


def test_the_placement_fields_are_echoed_with_llama_cpps_defaults(nvml_24: LiveServer) -> None:
    workload = _fit(nvml_24)["estimate"]["workload"]
    assert {k: workload[k] for k in ("gpuLayers", "nCpuMoe", "tensorOverrides", "tensorSplit")} == {
        "gpuLayers": "all",
        "nCpuMoe": 0,
        "tensorOverrides": [],
        "tensorSplit": [],
    }
    assert (workload["splitMode"], workload["mainGpu"], workload["kvOffload"], workload["mode"]) == (
        "layer",
        0,
        True,
        "fullGpu",
    )
    asked = {"gpuLayers": 20, "nCpuMoe": 8, "tensorOverrides": ["blk\\.3\\.=CPU"], "kvOffload": False}
    workload = _fit(nvml_24, **asked, tensorSplit=[3, 1], splitMode="layer", mainGpu=0)["estimate"]["workload"]
    assert {k: workload[k] for k in asked} == asked and workload["tensorSplit"] == [3.0, 1.0]


def test_n_cpu_moe_moves_experts_to_the_host(nvml_24: LiveServer) -> None:
    """-ngl 20 puts layers 29-47 and the output on the GPU; --n-cpu-moe 30 brings the experts of its layers 29 back."""
    plain, moe = _fit(nvml_24, gpuLayers=20), _fit(nvml_24, gpuLayers=20, nCpuMoe=30)
    assert plain["devices"][1]["note"] == moe["devices"][1]["note"] == "layers 29-47, output"
    left = _part(plain["devices"][1], "weights")["bytes"] - _part(moe["devices"][1], "weights")["bytes"]
    came = _part(moe["devices"][0], "weights")["bytes"] - _part(plain["devices"][0], "weights")["bytes"]
    # one layer's experts: gate, up and down, each 128 experts of 2048 x 768 in Q5_0 (22 bytes a block of 32),
    # into CUDA_Host (pinned host memory, ggml_nbytes); on the GPU, ggml-cuda padded down's 768-element rows with
    # one row of 256 elements (176 bytes, 256 once aligned to 128)
    one_layer = 3 * 128 * 2048 * 768 // 32 * 22
    assert (came, left) == (one_layer, one_layer + 256)
    no_kv = _fit(nvml_24, gpuLayers=20, kvOffload=False)
    assert _part(no_kv["devices"][1], "kvCache")["bytes"] == 0
    assert (
        _part(no_kv["devices"][0], "kvCache")["bytes"]
        == _part(plain["devices"][0], "kvCache")["bytes"] + _part(plain["devices"][1], "kvCache")["bytes"]
    )


@pytest.mark.parametrize(
    "fields, why",
    [
        ({"splitMode": "row"}, "-sm row is not mirrored"),
        ({"tensorOverrides": ["blk\\.0\\.=NPU0"]}, "unknown buffer types NPU0"),
        ({"tensorOverrides": ["blk\\.(=CPU"]}, "is not a regular expression"),
    ],
)
def test_a_placement_memfit_does_not_mirror_is_unknown(nvml_24: LiveServer, fields: dict, why: str) -> None:
    answer = _fit(nvml_24, **fields)
    assert answer["gpuAdmits"] is None and answer["verdict"] == "unknown" and "workloadUnsupported" in answer["limits"]
    assert all(why in _part(d, "weights")["note"] for d in answer["devices"])


def test_an_unknown_mode_names_no_placement(nvml_24: LiveServer) -> None:
    answer = _fit(nvml_24, mode="npuOnly")
    assert answer["gpuAdmits"] is None and answer["estimate"]["workload"]["gpuLayers"] is None
    assert "workloadUnsupported" not in answer["limits"]
    assert _fit(nvml_24, mode="npuOnly", gpuLayers=0)["gpuAdmits"] is True


@pytest.mark.parametrize("body", [{"gpuLayers": -1}, {"gpuLayers": "auto"}, {"tensorOverrides": ["noequals"]}])
def test_placement_fields_out_of_the_contract_are_refused(nvml_24: LiveServer, body: dict) -> None:
    with nvml_24.client() as client:
        response = client.post("/v1/models/fit", json={"modelId": BIG, **body})
    assert response.status_code == 400 and response.json()["type"] == "invalidRequest"


def test_declared_gpus_replace_the_ones_read(models: Path) -> None:
    """A server told to assume a 24 GiB and an 8 GiB card (6 GiB free) answers about those, marked declared, whatever
    NVML reports."""
    nvml = NvmlReader(fake_nvml([("GPU-aaaa-1111", GIB, 2 * GIB)]), environ={})
    gpus = declared_gpus(["cuda:24GiB", "cuda:8GiB:6GiB"], {})
    with _server(models, nvml=nvml, settings=Settings(gpus=gpus)) as server:
        server.service.index.refresh()
        devices = _fit(server)["devices"]
    assert [(d["name"], d["source"], d["declared"], d["freeBytes"], d["totalBytes"]) for d in devices] == [
        ("host", "hostAvailable", False, 16 * GIB, 16 * GIB),
        ("CUDA0", "declared", True, 24 * GIB, 24 * GIB),
        ("CUDA1", "declared", True, 6 * GIB, 8 * GIB),
    ]
    # the layer split follows the free memory, as llama.cpp's does: 24 of 30 parts, 49 layers with the output
    assert (devices[1]["note"], devices[2]["note"]) == ("layers 0-39", "layers 40-47, output")


def test_memfit_gpus_and_the_flag_read_the_same() -> None:
    env = declared_gpus(None, {"MEMFIT_GPUS": "cuda:24GiB, metal:48GiB:40GiB"})
    assert env == declared_gpus(["cuda:24GiB", "metal:48GiB:40GiB"], {"MEMFIT_GPUS": "cuda:1GiB"})
    assert env is not None and [(g.free, g.total, g.unified, g.declared) for g in env] == [
        (24 * GIB, 24 * GIB, False, True),
        (40 * GIB, 48 * GIB, True, True),
    ]
    assert declared_gpus(None, {}) is None and declared_gpu("cuda:80GB", 0).total == 80 * 10**9
    odd = declared_gpu("cuda:1.5TiB:512MiB", 0)
    assert (odd.free, odd.total) == (512 << 20, 3 << 39)
    with pytest.raises(ValueError, match="at most 16 GPUs"):
        declared_gpus(["cuda:8GiB"] * 17, {})
    for bad in ("rocm:24GiB", "cuda", "cuda:0", "cuda:8GiB:9GiB", "cuda:24XB"):
        with pytest.raises(ValueError):
            declared_gpu(bad, 0)


# --- the per-device bytes against llama.cpp's own placement on mock GPUs ---------------------------------------


def _comparable(row: dict[str, Any]) -> bool:
    """A run a declared cuda GPU stands for: ggml-cuda's rules and pinned host buffer, flags the API names."""
    mock, a = row["mock"], args_of(row)
    plain = not ({"ot", "n_cpu_ffn", "no_host", "repack", "mmap", "cpu_moe"} & set(a)) and not mock.get("unsupported")
    return (
        mock["n"] > 0
        and mock.get("alloc") == "cuda"
        and mock.get("align") == 128
        and mock.get("host")
        and plain
        and not row.get("fit")
    )


RUNS = [r for path in files() for r in rows(path.name) if _comparable(r)]


def _sizes(mock: dict[str, Any]) -> list[tuple[int, int]]:
    """Each mock device's total and free memory (one value stands for every device, free = total unless given),
    as tools/truth/mock registers them (estimator/devices.py's mock_gpus)."""
    return [(d.total, d.free) for d in mock_gpus(mock["n"], total=tuple(mock["total"]), free=tuple(mock["free"]))]


def test_the_mock_runs_cover_splits_offload_and_experts() -> None:
    labels = {r["label"] for r in RUNS}
    assert {"g1_cuda", "g2_11_cuda", "g1_half_cuda", "g1_cuda_q8"} <= labels
    assert len(RUNS) >= 4


@pytest.mark.parametrize("row", RUNS, ids=row_id)
def test_each_device_holds_what_llama_cpp_put_there(row: dict[str, Any], tmp_path: Path) -> None:
    """Each device's weights, KV cache and recurrent state equal llama.cpp's, and its compute buffer lies inside
    the workspace's bounds; but a model routing experts on a mock without ggml-cuda's fused-MoE allocation rule
    (every cuda-rule run recorded before the rule was mirrored): a real CUDA GPU keeps those sources longer
    (tests/test_scheduler.py holds the scheduler to the byte on each mock's own rules)."""
    model = WRITERS[row["model"]]()
    write_model(model, tmp_path / f"{row['model']}.gguf")
    experts = any(key.endswith(".expert_count") and value for key, value in model.kv.items())
    cuda_like = row["mock"].get("moe_dep") or not experts
    mock = row["mock"]
    gpus = tuple(
        declared_gpu(f"cuda:{t}:{f}", i) for i, (t, f) in enumerate(zip(mock["total"], mock["free"], strict=True))
    )
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)], settings=Settings(gpus=gpus))
    service.index.refresh()
    answer = wire.fit_batch(service, [WireFitVerdictRequest(model_id=row["model"], **placement_request(row))]).results[
        0
    ]
    if answer.estimate.refusal == "contextExceedsModelLimit":  # memfit's own refusal: past the trained context
        assert row["cparams"]["n_ctx_seq"] > int(model.kv[f"{model.arch}.context_length"])
        return
    devices = {d.name.replace("CUDA", mock["name"]): d for d in answer.devices}
    for name, want in row["per_device"].items():
        if name == "Host":
            continue  # llama.cpp counts the repacked CPU weights apart from its Host
        d = devices[name]
        got = {p.component: p.bytes or 0 for p in d.parts}
        assert (got["weights"], got["kvCache"] + got["recurrentState"]) == (want["model"], want["context"]), name
        workspace = next(p for p in d.parts if p.component == "workspace")
        assert workspace.basis == "derivedLayout" and workspace.bytes is not None and workspace.upper_bytes is not None
        if cuda_like:
            assert workspace.bytes <= want["compute"] <= workspace.upper_bytes, name


def test_the_cli_prints_one_row_per_device_in_80_columns(
    models: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    flags = ["-ngl", "20", "--n-cpu-moe", "8", "--gpu", "cuda:24GiB", "--models", str(models), "--no-usual-dirs"]
    code = main(["fit", BIG, *flags])
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    rows = [line.split() for line in out.splitlines() if line.startswith("  ") and line.split()[0] in ("host", "CUDA0")]
    assert [r[0] for r in rows] == ["host", "CUDA0"] and all(r[-1] in ("GOOD", "TIGHT", "OVERSIZE") for r in rows)
    assert code in (0, 3, 4)  # a verdict, each pool's derived (no UNKNOWN)
    assert "layers 0-28" in out and "layers 29-47, output" in out and "24.00 GiB declared" in out
    assert main(["fit", BIG, *flags, "--detail"]) == code
    detail = capsys.readouterr().out
    table = detail[detail.index("  DEVICE  weights") :].splitlines()[:4]  # the parts table above is the part's own
    assert [line.split()[0] for line in table] == ["DEVICE", "------", "host", "CUDA0"]
    assert all(len(line) <= 80 for line in table)


def test_gpus_are_numbered_per_backend_and_an_override_to_a_gpu_places_something_there() -> None:
    gpus = declared_gpus(["cuda:8GiB", "metal:16GiB", "cuda:8GiB"], {})
    assert gpus is not None
    devices = gpu_devices(gpus)
    assert [(d.name, d.alignment, d.host_buffer_type) for d in devices] == [
        ("CUDA0", 128, "CUDA_Host"),
        ("MTL0", 32, None),  # ggml-metal: 32-byte alignment, no pinned host buffer type
        ("CUDA1", 128, "CUDA_Host"),
    ]
    none = PlacementFlags(gpu_layers=0)
    assert places_nothing_on_gpus(none, devices) and places_nothing_on_gpus(PlacementFlags(), [])
    assert places_nothing_on_gpus(replace(none, tensor_overrides=("exps=CUDA_Host",)), devices)
    assert not places_nothing_on_gpus(replace(none, tensor_overrides=("exps=CUDA1",)), devices)
    assert not places_nothing_on_gpus(PlacementFlags(gpu_layers=1), devices)


def test_experts_overridden_onto_the_gpu_with_no_layer_there(nvml_24: LiveServer) -> None:
    """-ngl 0 -ot exps=CUDA0: every layer on the host, but the experts in the GPU's own buffer type."""
    answer = _fit(nvml_24, gpuLayers=0, tensorOverrides=["_exps\\.=CUDA0"])
    host, gpu = answer["devices"]
    assert (host["note"], gpu["note"]) == ("layers 0-47, output", "no layer")
    # 48 layers of gate, up and down experts, down's 768-element rows padded by ggml-cuda (256 bytes aligned)
    assert _part(gpu, "weights")["bytes"] == 48 * (3 * 128 * 2048 * 768 // 32 * 22 + 256)
    assert _part(gpu, "kvCache")["bytes"] == 0 and answer["gpuAdmits"] is True


def test_a_catalog_model_is_placed_from_its_recipes_tensors() -> None:
    """A catalog id (no file, the Hub offline) is placed from the tensors its published layout lists, typed by
    llama-quantize's recipe: -ngl all keeps only the token embedding on the host."""
    service = build_service(settings=Settings(gpus=declared_gpus(["cuda:24GiB"], {})))
    answer = wire.fit_batch(service, [WireFitVerdictRequest(model_id="Qwen/Qwen3-8B-GGUF:Q4_K_M")]).results[0]
    host, gpu = ({p.component: p.bytes for p in d.parts} for d in answer.devices)
    # token_embd, 151936 x 4096 in Q4_K (144 bytes a block of 256): Q4_K_M keeps the embedding in its default type
    assert host["weights"] == 151936 * 4096 // 256 * 144 and host["kvCache"] == 0
    # 36 layers of K and V, 8 heads of 128, 4096 cells in f16
    assert gpu["kvCache"] == 36 * 2 * 8 * 128 * 4096 * 2 and answer.devices[1].note == "layers 0-35, output"
    assert answer.gpu_admits is True


# --- cpuOffload: llama.cpp's fitter's placement ------------------------------------------------------------------

# the fitter's runs on ggml-cuda's rules (tools/truth/mock/matrix.py context_fit_runs): a context of 8192 on one and
# two devices, and llama-server's four unified slots choosing the context
FIT_RUNS = [r for r in rows("results_mock_fit_context_dryrun.jsonl") if r["mock"]["alloc"] == "cuda"]


def _fitter_answer(row: dict[str, Any], folder: Path) -> Any:
    """The service's answer for a fitter's run: its model on declared cuda GPUs of the mock's sizes, cpuOffload at
    the run's context, or the llamaServer profile choosing it."""
    write_model(WRITERS[row["model"]](), folder / f"{row['model']}.gguf")
    gpus = tuple(declared_gpu(f"cuda:{t}:{f}", i) for i, (t, f) in enumerate(_sizes(row["mock"])))
    service = build_service([Root(str(folder), RootKind.PLAIN)], settings=Settings(gpus=gpus))
    service.index.refresh()
    body: dict[str, Any] = {"cpuVariant": CPU_VARIANT}
    if row["label"].endswith("_server"):
        body["profile"] = "llamaServer"
    else:
        body |= {"mode": "cpuOffload", "allocatedTokens": int(args_of(row)["n_ctx"])}
    request = WireFitVerdictRequest(model_id=row["model"], **body)
    return wire.fit_batch(service, [request]).results[0]


def test_the_fitters_runs_on_cuda_rules_cover_both_ways() -> None:
    assert {r["label"] for r in FIT_RUNS} == {"fit1_25_cuda", "fit2_25_cuda", "fitctx1_60_server"}
    assert any(r["fit"]["overrides"] for r in FIT_RUNS) and any(r["fit"]["n_gpu_layers"] < 0 for r in FIT_RUNS)


@pytest.mark.parametrize("row", FIT_RUNS, ids=row_id)
def test_cpu_offload_answers_with_the_fitters_placement(row: dict[str, Any], tmp_path: Path) -> None:
    """cpuOffload (and llama-server's default, -ngl auto) is the placement common_fit_params chose on the same
    devices: its -ngl, -ts, overrides and context echoed, the fitter named as their source, and each device holding
    the weights, KV cache and recurrent state llama.cpp then put there."""
    answer = _fitter_answer(row, tmp_path)
    workload, fit = answer.estimate.workload.model_dump(by_alias=True), row["fit"]
    assert workload["gpuLayers"] == ("all" if fit["n_gpu_layers"] < 0 else fit["n_gpu_layers"])
    n = row["mock"]["n"]
    assert workload["tensorSplit"] == (fit["tensor_split"][:n] if n > 1 else [])  # -ts: the layers per device
    assert workload["tensorOverrides"] == [f"{p}={b.replace('MOCK', 'CUDA')}" for p, b in fit["overrides"]]
    assert workload["allocatedTokens"] * workload["streams"] == fit["n_ctx"] == row["cparams"]["n_ctx"]
    sources = {s["setting"]: s for s in workload["settings"]}
    assert {sources[s]["source"] for s in ("gpuLayers", "tensorSplit", "tensorOverrides")} == {"fitter"}
    assert "common_fit_params" in sources["gpuLayers"]["detail"]
    assert (sources["allocatedTokens"]["source"] == "fitter") is row["label"].endswith("_server")
    devices = {d.name.replace("CUDA", row["mock"]["name"]): d for d in answer.devices}
    for name, want in row["per_device"].items():
        if name != "Host":
            got = {p.component: p.bytes or 0 for p in devices[name].parts}
            assert (got["weights"], got["kvCache"] + got["recurrentState"]) == (want["model"], want["context"]), name
    assert "not predicted" not in answer.devices[0].note


def test_the_mtp_draft_context_is_placed_with_its_nextn_layer(tmp_path: Path) -> None:
    """Under multiTokenPrediction on a GPU holding every layer (qwen35-mtp, the run of results_mtp_ctx.jsonl at 4096
    cells over two sequences): the draft context's KV cache lands with its NextN layer on the GPU, byte for byte as
    llama.cpp made it on the host, the host's none of it."""
    from tools.families import recurrent
    from tools.truth import DATA, load

    run = next(
        r
        for r in load(DATA / "results_mtp_ctx.jsonl")
        if r["model"] == "qwen35-mtp" and r["settings"]["n_ctx"] == 4096 and r["settings"]["n_seq"] == 2
    )
    write_model(recurrent.FAMILY_SET["qwen35-mtp"](), tmp_path / "qwen35-mtp.gguf")
    nvml = NvmlReader(fake_nvml([("GPU-aaaa-1111", 23 * GIB, 24 * GIB)]), environ={})
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)], read_host=lambda: HOST_16, nvml=nvml)
    service.index.refresh()
    asked = {"modelId": "qwen35-mtp", "allocatedTokens": 2048, "streams": 2, "mode": "fullGpu", "draftTokens": 0}
    asked |= {"cpuVariant": "haswell", "flashAttention": "on"}

    def devices(mtp: bool) -> dict[str, dict[str, Any]]:
        answer = wire.fit_one(service, WireFitVerdictRequest.model_validate(asked | {"multiTokenPrediction": mtp}))
        assert answer is not None
        body = answer.model_dump(by_alias=True, mode="json")
        return {d["kind"]: {p["component"]: p for p in d["parts"]} for d in body["devices"]}

    plain, mtp = devices(False), devices(True)
    draft = run["draft_ctx"]
    assert mtp["gpu"]["kvCache"]["bytes"] - plain["gpu"]["kvCache"]["bytes"] == draft["memory_bytes"]
    assert mtp["host"]["kvCache"]["bytes"] == plain["host"]["kvCache"]["bytes"]


# llama-server's --spec-type draft-mtp on ggml-cuda's rules (tools/truth/mock/matrix.py mtp_fit_runs): the fitter with
# the MTP draft context beside the target (common_fit_extra_model) at a context of 8192, on the models whose trunk
# memfit splits per backend (deepseek2, glm4moe, mimo2, step35, hy_v3, qwen35, bailingmoe3); the runs llama.cpp
# finished (an `error` row has none of the fitter's fields)
MTP_FIT_RUNS = [
    r
    for r in rows("fit_mtp_gpu.jsonl")
    if not r.get("error")
    and r["mock"]["alloc"] == "cuda"
    and r["model"]
    in ("deepseek2-mla-mtp", "glm4moe-mtp", "mimo2-mtp", "step35-mtp", "hy-v3-mtp", "qwen35-mtp", "bailingmoe3")
]


@pytest.mark.parametrize("row", MTP_FIT_RUNS, ids=row_id)
def test_under_mtp_cpu_offload_answers_with_the_fitters_placement(row: dict[str, Any], tmp_path: Path) -> None:
    """multiTokenPrediction with cpuOffload: the -ngl, -ts and overrides common_fit_params chose beside the draft
    context, the fitter named as their source."""
    write_model(WRITERS[row["model"]](), tmp_path / f"{row['model']}.gguf")
    gpus = tuple(declared_gpu(f"cuda:{t}:{f}", i) for i, (t, f) in enumerate(_sizes(row["mock"])))
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)], settings=Settings(gpus=gpus))
    service.index.refresh()
    body: dict[str, Any] = {"cpuVariant": CPU_VARIANT, "mode": "cpuOffload", "allocatedTokens": 8192}
    body["multiTokenPrediction"] = True
    answer = wire.fit_batch(service, [WireFitVerdictRequest(model_id=row["model"], **body)]).results[0]
    workload, fit = answer.estimate.workload.model_dump(by_alias=True), row["fit"]
    assert workload["gpuLayers"] == ("all" if fit["n_gpu_layers"] < 0 else fit["n_gpu_layers"])
    n = row["mock"]["n"]
    # -ts is written where the fitter assigned layers (several devices); a fit that kept every layer on the GPUs
    # (-ngl -1) leaves the launcher's, none
    assert workload["tensorSplit"] == (fit["tensor_split"][:n] if n > 1 and fit["n_gpu_layers"] >= 0 else [])
    assert workload["tensorOverrides"] == [f"{p}={b.replace('MOCK', 'CUDA')}" for p, b in fit["overrides"]]
    sources = {s["setting"]: s for s in workload["settings"]}
    assert {sources[s]["source"] for s in ("gpuLayers", "tensorSplit", "tensorOverrides")} == {"fitter"}
