"""The ledger past what llama.cpp allocates at load (estimator/ledger.py), held against llama.cpp's measurements:
the mapped weights and the packed copies beside them (the probe's mmap runs: CPU_Mapped, CPU_REPACK, AMX), and a
slot's context checkpoint (llama_state_seq_get_size_ext(PARTIAL_ONLY), tests/data/results_state_seq.jsonl); and
the API's answers under a launch profile."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from memfit.estimator.ledger import weights_under_load_mode
from memfit.estimator.vocabulary import Component, Residency
from memfit.estimator.workload import WorkloadRequest, resolve_workload
from memfit.service.artifact_cache import ArtifactCache
from tools.accuracy import file_subject, settings, write_models
from tools.truth import DATA, load, measured_variant, run_id

MAPPED_RUNS = [
    r
    for path in sorted(DATA.glob("results_*.jsonl"))
    for r in load(path)
    if settings(r).get("mmap") and "CPU_Mapped" in r.get("weights_buffers", {})
]
CACHE = ArtifactCache()
BATCH = "/v1/models/fit/batch"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_models({r["model"] for r in MAPPED_RUNS}, tmp_path_factory.mktemp("mapped-models"))


def test_the_mapped_runs_cover_packed_copies() -> None:
    assert len(MAPPED_RUNS) > 50
    assert any(set(r["weights_buffers"]) & {"CPU_REPACK", "AMX"} for r in MAPPED_RUNS)


@pytest.mark.parametrize("run", MAPPED_RUNS, ids=run_id)
def test_mapped_weights_are_soft_and_the_packed_copies_hard(run: dict, model_files: dict[str, Path]) -> None:
    """llama.cpp's mapped buffer lies within the soft part's bounds, its extra buffer types are the packed part."""
    subject = file_subject(model_files[run["model"]], measured_variant(run), CACHE)
    workload = resolve_workload(WorkloadRequest(load_mode="mmap"), subject.context_limit)
    parts = {p.component: p for p in weights_under_load_mode(subject, workload)}
    mapped, buffers = parts[Component.WEIGHTS], run["weights_buffers"]
    assert mapped.residency is Residency.SOFT and mapped.bytes is not None
    assert mapped.bytes <= buffers["CPU_Mapped"] <= mapped.bytes + mapped.slack
    packed = sum(v for k, v in buffers.items() if k in ("CPU_REPACK", "AMX"))
    if Component.PACKED_WEIGHTS in parts:
        assert parts[Component.PACKED_WEIGHTS].residency is Residency.HARD
        assert parts[Component.PACKED_WEIGHTS].bytes == packed
    else:
        assert packed == 0


def fit(client: httpx.Client, **request: object) -> dict:
    return client.post(BATCH, json=[request]).json()["results"][0]


def parts_of(result: dict) -> dict[str, dict]:
    return {p["component"]: p for p in result["estimate"]["parts"]}


def test_llama_server_holds_four_slots_a_prompt_cache_and_checkpoints(client: httpx.Client) -> None:
    result = fit(client, modelId="gemma3-swa-f16", profile="llamaServer")
    w = result["estimate"]["workload"]
    assert (w["profile"], w["streams"], w["kvUnified"], w["contextSource"]) == ("llamaServer", 4, True, "launcher")
    assert (w["loadMode"], w["cacheRamMib"], w["contextCheckpoints"]) == ("auto", 8192, 32)
    sources = {s["setting"]: s for s in w["settings"]}
    assert sources["streams"]["source"] == "profile" and "tools/server/server.cpp" in sources["streams"]["detail"]
    assert sources["allocatedTokens"]["source"] == "fitter" and "common/fit.cpp" in sources["allocatedTokens"]["detail"]
    parts = parts_of(result)
    assert parts["promptCache"] | {"note": ""} == {
        "component": "promptCache",
        "bytes": 0,
        "upperBytes": 8192 << 20,  # --cache-ram 8192 MiB
        "basis": "derivedLayout",
        "sharedKey": "",
        "note": "",
        "residency": "grows",
    }
    # 32 checkpoints x 4 slots x llama.cpp's own PARTIAL_ONLY size of a gemma3 sequence past its 512-token
    # window in one unified stream, f16, flash attention on (the probe's run: tests/data/results_state_seq.jsonl)
    (measured,) = [
        r["state_seq_partial_bytes"]
        for r in load(DATA / "results_state_seq.jsonl")
        if r["model"] == "gemma3-swa-f16" and r["kv_unified"] and r["flash_attn"] and r["settings"]["type_k"] == "f16"
    ]
    assert parts["contextCheckpoints"]["upperBytes"] == 32 * 4 * measured
    assert (parts["contextCheckpoints"]["bytes"], parts["contextCheckpoints"]["residency"]) == (0, "grows")
    assert parts["weights"]["residency"] == "soft" and result["softBytes"] == parts["weights"]["upperBytes"]
    assert result["estimate"]["upperBoundBytes"] == sum(p["upperBytes"] for p in parts.values())


def test_a_field_the_request_names_overrides_the_profile(client: httpx.Client) -> None:
    result = fit(client, modelId="mamba2-f16", profile="llamaServer", streams=2, cacheRamMib=0, loadMode="none")
    w = result["estimate"]["workload"]
    assert (w["streams"], w["cacheRamMib"], w["loadMode"]) == (2, 0, "none")
    assert {s["setting"]: s["source"] for s in w["settings"]}["streams"] == "request"
    parts = parts_of(result)
    assert "promptCache" not in parts and parts["weights"]["residency"] == "hard" and result["softBytes"] == 0
    # a recurrent model's checkpoint is its state, whatever the context: 32 x 2 slots x the measured one
    (measured,) = {
        r["state_seq_partial_bytes"] for r in load(DATA / "results_state_seq.jsonl") if r["model"] == "mamba2-f16"
    }
    assert parts["contextCheckpoints"]["upperBytes"] == 32 * 2 * measured


def test_a_plain_model_makes_no_checkpoints(client: httpx.Client) -> None:
    parts = parts_of(fit(client, modelId="llama-gqa-f16", profile="llamaServer"))
    assert parts["contextCheckpoints"]["basis"] == "notApplicable"  # server_context: it can roll the cache back


def test_ollama_runs_its_tier_context_over_one_slot(client: httpx.Client) -> None:
    w = fit(client, modelId="qwen3-f16", profile="ollama")["estimate"]["workload"]
    assert (w["allocatedTokens"], w["streams"], w["kvUnified"]) == (4096, 1, False)  # no GPU: the 4096 tier
    assert "server/routes.go" in {s["setting"]: s for s in w["settings"]}["allocatedTokens"]["detail"]


@pytest.mark.parametrize("field", [{"profile": "llama-server"}, {"loadMode": "mapped"}])
def test_an_unknown_profile_or_load_mode_is_a_400(client: httpx.Client, field: dict) -> None:
    assert client.post(BATCH, json=[{"modelId": "qwen3-f16", **field}]).status_code == 400
