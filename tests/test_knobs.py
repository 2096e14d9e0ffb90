"""The runtime settings launchers pass to llama.cpp: flashAttention, ubatchTokens and kvUnified.

Each one is echoed in the answer's workload with its documented default, and each one reaches the parts: a
request with the settings of a measured llama.cpp run gives that run's KV cache to the byte.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from memfit import wire
from memfit.cli import main
from memfit.estimator.workload import Workload, WorkloadRequest, flash_attention_for, refused_setting, resolve_workload
from memfit.generated.models import WireFitVerdictRequest, WireObservation
from memfit.measure import LlamaCppLoad, flash_attn_type
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tools.accuracy import settings, write_models
from tools.truth import DATA, load

BATCH = "/v1/models/fit/batch"
RUNS = [r for path in sorted(DATA.glob("results_*.jsonl")) for r in load(path)]

# (model, n_ctx, n_seq, fa, unified, n_ubatch): measured runs where the setting changes llama.cpp's KV cache
# (every layer's V as wide as the widest with flash attention off; sliding windows of window * n_seq + ubatch
# cells in a unified cache, window + ubatch otherwise), ubatch 128 and 2048 (tests/data/results_tiny_real.jsonl)
# included.
MEASURED = [
    ("deci-arr", 2048, 4, "off", 0, 512),
    ("gemma4-shared", 8192, 1, "off", 0, 512),
    ("jamba", 2048, 1, "off", 0, 512),
    ("mimo2-nextn", 512, 4, "off", 0, 512),
    ("cohere2-swa", 8192, 4, "auto", 1, 512),
    ("gemma3-swa-f16", 8192, 4, "auto", 1, 512),
    ("granite-swa", 4096, 2, "auto", 1, 512),
    ("llama4-chunked", 32768, 2, "auto", 1, 512),
    ("gemma2-swa-f16", 4096, 1, "auto", 0, 128),
    ("gptoss-swa-moe", 4096, 1, "auto", 0, 128),
    ("gemma3n-shared", 4096, 1, "off", 0, 128),
    ("deci-arr", 4096, 1, "off", 0, 128),
    ("gptoss-swa-moe-rw", 4096, 1, "auto", 0, 2048),
]


def _run(model: str, n_ctx: int, n_seq: int, fa: str, unified: int, n_ubatch: int) -> dict:
    for r in RUNS:
        s = settings(r)
        if (
            "error" not in r
            and r["model"] == model
            and (s["n_ctx"], s["n_seq"], s["fa"], s.get("unified", 0), r["n_ubatch"])
            == (n_ctx, n_seq, fa, unified, n_ubatch)
            and (s["type_k"], s["type_v"]) == ("f16", "f16")
            and not s.get("swa_full")
            and not s.get("mmap")
            and r["kv_bytes"] > 0  # not a dry run: the KV buffers were allocated
        ):
            return r
    raise LookupError((model, n_ctx, n_seq, fa, unified, n_ubatch))


@pytest.fixture(scope="module")
def measured_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("knob-models")
    write_models({m[0] for m in MEASURED} | {"llama-gqa-f16"}, directory)
    return directory


@pytest.fixture(scope="module")
def service(measured_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    built = build_service(
        [Root(str(measured_models), RootKind.PLAIN)], state_dir=str(tmp_path_factory.mktemp("knob-state"))
    )
    built.index.refresh()
    return built


def _fit(service: Any, model_id: str, **fields: Any) -> dict:
    result = wire.fit_one(service, WireFitVerdictRequest.model_validate({"modelId": model_id, **fields}))
    assert result is not None
    return json.loads(result.model_dump_json(by_alias=True))


def _parts(result: dict) -> dict[str, dict]:
    return {p["component"]: p for p in result["estimate"]["parts"]}


@pytest.mark.parametrize("measured", MEASURED, ids=lambda m: "-".join(map(str, m)))
def test_a_request_with_a_runs_settings_gives_its_kv_cache(service: Any, measured: tuple) -> None:
    run = _run(*measured)
    model, n_ctx, n_seq, fa, unified, n_ubatch = measured
    knobs = {"flashAttention": fa, "kvUnified": bool(unified), "ubatchTokens": n_ubatch}
    plain = {"allocatedTokens": n_ctx // n_seq, "streams": n_seq}
    result = _fit(service, model, **plain, **knobs)
    kv = _parts(result)["kvCache"]
    assert kv["basis"] == "derivedLayout"
    assert kv["bytes"] == run["memory_bytes"] - run["rs_bytes"] == run["kv_bytes"]
    assert {k: result["estimate"]["workload"][k] for k in knobs} == knobs
    # the setting matters for this run: llama.cpp's defaults give a different cache
    assert _parts(_fit(service, model, **plain))["kvCache"]["bytes"] != kv["bytes"]


def test_defaults_are_echoed_for_absent_and_null_settings(service: Any) -> None:
    defaults = {"flashAttention": "auto", "ubatchTokens": 512, "kvUnified": False}
    for fields in ({}, {"flashAttention": None, "ubatchTokens": None, "kvUnified": None}):
        workload = _fit(service, "llama-gqa-f16", **fields)["estimate"]["workload"]
        assert {k: workload[k] for k in defaults} == defaults
        assert workload["contextSource"] == "documentedDefault"


def test_given_settings_are_echoed(service: Any) -> None:
    given = {"flashAttention": "on", "ubatchTokens": 100_000, "kvUnified": True}
    workload = _fit(service, "llama-gqa-f16", **given)["estimate"]["workload"]
    assert {k: workload[k] for k in given} == given  # as requested, before llama.cpp's cap


def test_llama_cpp_caps_the_ubatch_to_its_batch(service: Any) -> None:
    """n_ubatch = min(n_ubatch, n_batch), n_batch = min(2048, n_ctx): past 2048 a sliding window grows no more."""
    at_cap = _parts(_fit(service, "gemma2-swa-f16", allocatedTokens=8192, ubatchTokens=2048))["kvCache"]
    beyond = _parts(_fit(service, "gemma2-swa-f16", allocatedTokens=8192, ubatchTokens=100_000))["kvCache"]
    default = _parts(_fit(service, "gemma2-swa-f16", allocatedTokens=8192))["kvCache"]
    assert at_cap["bytes"] == beyond["bytes"] > default["bytes"]
    assert "ubatch 2048" in beyond["note"]


def test_flash_attention_on_is_the_default_auto(service: Any) -> None:
    on = _fit(service, "deci-arr", flashAttention="on")
    auto = _fit(service, "deci-arr")
    assert on["estimate"]["parts"] == auto["estimate"]["parts"]


def test_an_unknown_flash_attention_value_is_echoed_and_leaves_what_depends_on_it_unknown(service: Any) -> None:
    # deci-arr's layers have different V widths: its KV cache differs with flash attention on and off
    result = _fit(service, "deci-arr", flashAttention="turbo")
    parts = _parts(result)
    assert result["estimate"]["workload"]["flashAttention"] == "turbo"
    assert parts["kvCache"]["basis"] == parts["workspace"]["basis"] == "unknown"
    assert "'turbo'" in parts["kvCache"]["note"]
    assert "workloadUnsupported" in result["limits"] and result["estimate"]["upperBoundBytes"] is None
    assert result["estimate"]["refusal"] == "none"

    # llama-gqa's layers are uniform: its KV cache is the same either way and stays derived
    uniform = _fit(service, "llama-gqa-f16", flashAttention="TURBO")
    default = _fit(service, "llama-gqa-f16")
    assert _parts(uniform)["kvCache"] == _parts(default)["kvCache"]
    assert _parts(uniform)["workspace"]["basis"] == "unknown"
    assert "workloadUnsupported" in uniform["limits"] and "workloadUnsupported" not in default["limits"]


@pytest.mark.parametrize("model", ["llama-gqa-f16", "gemma3-swa-f16"])
def test_flash_attention_off_reaches_the_workspace(service: Any, model: str) -> None:
    """Off, llama.cpp's graph holds the KQ scores (one per cache, full and sliding): a larger workspace."""
    on = _parts(_fit(service, model, allocatedTokens=8192))["workspace"]
    off = _parts(_fit(service, model, allocatedTokens=8192, flashAttention="off"))["workspace"]
    assert on["basis"] == off["basis"] == "derivedLayout" and off["bytes"] > on["bytes"]


def test_the_ubatch_reaches_the_workspace(service: Any) -> None:
    small = _parts(_fit(service, "llama-gqa-f16", ubatchTokens=128))["workspace"]
    default = _parts(_fit(service, "llama-gqa-f16"))["workspace"]
    assert small["bytes"] < default["bytes"] and "128-token ubatch" in small["note"]


def test_history_is_used_only_with_llama_cpps_default_settings(measured_models: Path, tmp_path: Path) -> None:
    service = build_service([Root(str(measured_models), RootKind.PLAIN)], state_dir=str(tmp_path))
    service.index.refresh()
    size = os.path.getsize(measured_models / "llama-gqa-f16.gguf")
    observation = {
        "modelId": "llama-gqa-f16",
        "revision": "",
        "quant": "F16",
        "artifactBytes": size,
        "workload": {
            "allocatedTokens": 4096,
            "streams": 1,
            "keyElementBytes": 2,
            "valueElementBytes": 2,
            "mode": "fullGpu",
        },
        "parts": {"workspace": 18_000_000},
        "runtime": "llama.cpp test build",
    }
    wire.record_observation(service, WireObservation.model_validate(observation))
    for fields in ({}, {"flashAttention": "auto", "ubatchTokens": 512, "kvUnified": False}):
        workspace = _parts(_fit(service, "llama-gqa-f16", **fields))["workspace"]
        assert (workspace["basis"], workspace["bytes"]) == ("measuredArtifact", 18_000_000)
    for changed in ({"flashAttention": "on"}, {"ubatchTokens": 256}, {"kvUnified": True}):
        workspace = _parts(_fit(service, "llama-gqa-f16", **changed))["workspace"]
        assert workspace["basis"] == "derivedLayout", changed


@pytest.mark.parametrize(
    "body", [{"ubatchTokens": 0}, {"ubatchTokens": -1}, {"ubatchTokens": "512"}, {"kvUnified": "yes"}]
)
def test_settings_outside_the_contract_are_400(client: httpx.Client, body: dict) -> None:
    response = client.post(BATCH, json=[{"modelId": "llama-gqa-f16", **body}])
    assert response.status_code == 400
    assert response.json()["type"] == "invalidRequest"


def test_the_settings_over_http(client: httpx.Client) -> None:
    given = {"flashAttention": "off", "ubatchTokens": 256, "kvUnified": True}
    result = client.post(BATCH, json=[{"modelId": "llama-gqa-f16", **given}]).json()["results"][0]
    assert {k: result["estimate"]["workload"][k] for k in given} == given


def test_the_cli_passes_the_settings(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "llama-gqa-f16", "--models", str(public_models), "--no-usual-dirs", "--json"]
    assert main([*args, "--flash-attention", "off", "--ubatch", "128", "--kv-unified"]) == 0
    workload = json.loads(capsys.readouterr().out)["results"][0]["estimate"]["workload"]
    assert (workload["flashAttention"], workload["ubatchTokens"], workload["kvUnified"]) == ("off", 128, True)
    assert main(args) == 0
    workload = json.loads(capsys.readouterr().out)["results"][0]["estimate"]["workload"]
    assert (workload["flashAttention"], workload["ubatchTokens"], workload["kvUnified"]) == ("auto", 512, False)
    for bad in (["--flash-attention", "turbo"], ["--ubatch", "0"]):
        with pytest.raises(SystemExit):
            main([*args, *bad])


class FakeLlamaCpp(SimpleNamespace):
    """Just enough of llama-cpp-python for LlamaCppLoad to create a context; keeps the context's parameters."""

    LLAMA_FLASH_ATTN_TYPE_AUTO, LLAMA_FLASH_ATTN_TYPE_DISABLED, LLAMA_FLASH_ATTN_TYPE_ENABLED = -1, 0, 1
    LLAMA_LOAD_MODE_NONE = 0

    def __init__(self) -> None:
        super().__init__(params=None)
        self.llama_log_callback = self.llama_progress_callback = lambda f: f
        self.llama_log_set = self.llama_backend_init = self.llama_model_free = self.llama_free = lambda *a: None
        self.llama_model_default_params = self.llama_context_default_params = lambda: SimpleNamespace()
        self.llama_model_load_from_file = lambda path, params: object()

        def init(model: object, params: SimpleNamespace) -> object:
            self.params = params
            return object()

        self.llama_init_from_model = init


def test_measure_gives_llama_cpp_the_settings() -> None:
    lib = FakeLlamaCpp()
    workload = resolve_workload(WorkloadRequest(1024, 2, 2, 1, "cpuOffload", "off", 128, True), None)
    LlamaCppLoad(lib).run("model.gguf", workload)  # type: ignore[arg-type]
    p = lib.params
    assert (p.n_ctx, p.n_seq_max, p.n_batch, p.n_ubatch) == (2048, 2, 2048, 128)
    assert (p.flash_attn_type, p.kv_unified, p.swa_full) == (lib.LLAMA_FLASH_ATTN_TYPE_DISABLED, True, False)
    default = resolve_workload(WorkloadRequest(), None)
    LlamaCppLoad(lib).run("model.gguf", default)  # type: ignore[arg-type]
    assert (lib.params.n_ubatch, lib.params.flash_attn_type, lib.params.kv_unified) == (512, -1, False)
    assert flash_attn_type(lib, "on") == lib.LLAMA_FLASH_ATTN_TYPE_ENABLED  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        flash_attn_type(lib, "turbo")  # type: ignore[arg-type]


def test_knobs_at_defaults() -> None:
    assert Workload(
        4096, resolve_workload(WorkloadRequest(), None).context_source, 1, 2, 2, "fullGpu"
    ).knobs_at_defaults
    assert not resolve_workload(WorkloadRequest(flash_attention="on"), None).knobs_at_defaults
    assert resolve_workload(WorkloadRequest(flash_attention="turbo"), None).flash_attention_on is None
    assert resolve_workload(WorkloadRequest(flash_attention="off"), None).flash_attention_on is False


# llama_init_from_model's and llama_context's refusals (tests/data/results_floors_dryrun.jsonl has llama.cpp's own
# refusals of these settings): no context, so nothing past the weights gets a number and the verdict is unknown.
REFUSED = [
    ({"valueElementBytes": 1, "flashAttention": "off"}, "quantized V cache requires flash_attn"),
    ({"keyElementBytes": 1, "valueElementBytes": 1, "flashAttention": "off"}, "quantized V cache requires flash_attn"),
    ({"streams": 257}, "n_seq_max must be <= 256"),
]
ACCEPTED = [  # the same settings a step inside what llama.cpp accepts
    {"valueElementBytes": 1, "flashAttention": "auto"},  # auto turns flash attention on for a quantized V cache
    {"valueElementBytes": 1, "flashAttention": "on"},
    {"keyElementBytes": 1, "flashAttention": "off"},
    {"streams": 256},
]


def _refused(result: dict, message: str) -> None:
    parts = _parts(result)
    assert result["verdict"] == "unknown" and "workloadUnsupported" in result["limits"]
    assert result["estimate"]["upperBoundBytes"] is None and result["estimate"]["refusal"] == "none"
    for component in ("kvCache", "recurrentState", "workspace"):
        assert parts[component]["basis"] == "unknown" and message in parts[component]["note"]
    assert parts["weights"]["basis"] != "unknown"  # loaded before llama.cpp refuses the context


@pytest.mark.parametrize(("given", "message"), REFUSED, ids=lambda v: str(v))
@pytest.mark.parametrize("model", ["llama-gqa-f16", "jamba"])  # a KV cache; a hybrid with a recurrent state
def test_settings_llama_cpp_refuses_answer_unknown(service: Any, model: str, given: dict, message: str) -> None:
    _refused(_fit(service, model, allocatedTokens=1024, **given), message)


@pytest.mark.parametrize("given", ACCEPTED, ids=str)
def test_settings_llama_cpp_accepts_get_bounds(service: Any, given: dict) -> None:
    result = _fit(service, "llama-gqa-f16", allocatedTokens=1024, **given)
    assert result["estimate"]["upperBoundBytes"] is not None and "workloadUnsupported" not in result["limits"]


def test_flash_attention_is_forced_off_for_grok() -> None:
    """llama_init_from_model turns flash attention off for Grok whatever is asked: a quantized V cache is refused."""
    on = resolve_workload(WorkloadRequest(value_element_bytes=1, flash_attention="on"), None)
    assert flash_attention_for(on, "grok") is False and flash_attention_for(on, "llama") is True
    assert "forces off for grok" in (refused_setting(on, "grok") or "")
    assert refused_setting(on, "llama") is None


@pytest.mark.parametrize(
    ("fa", "ubatch", "streams", "aborts"),
    [
        ("on", 512, 1, True),
        ("auto", 512, 1, True),  # auto resolves on
        ("off", 512, 1, False),
        ("on", 1, 1, False),  # a one-token ubatch: cpy_v's row is one token's values
        ("on", 1, 2, True),  # two sequences round the ubatch up to two tokens
        ("auto", 1, 2, True),  # auto's probe reserves one token a sequence
    ],
)
def test_plm_with_flash_attention_on_is_refused(fa: str, ubatch: int, streams: int, aborts: bool) -> None:
    """plm's V reaches llama_kv_cache::cpy_v flattened over the tokens (results_fa_abort.jsonl): llama.cpp aborts
    under flash attention unless the ubatch is one token; another architecture is not refused."""
    workload = resolve_workload(
        WorkloadRequest(flash_attention=fa, ubatch_tokens=ubatch, streams=streams, allocated_tokens=1024), None
    )
    assert (refused_setting(workload, "plm") is not None) is aborts
    assert refused_setting(workload, "minicpm3") is None
