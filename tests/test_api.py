"""The request path end to end: a real uvicorn server on 127.0.0.1, real GGUF files, real psutil."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from memfit.estimator.cpu_variant import BY_NAME
from memfit.estimator.machine import HostMemory
from memfit.readers.host_memory import read_host_memory
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tests.test_history import _observation
from tools.families import shapes
from tools.gguf_writers import qwen3_30b_a3b, write_model
from tools.truth import records

BATCH = "/v1/models/fit/batch"
DENSE = ["llama-gqa-f16", "llama-gqa-q8_0", "llama-gqa-q4_0", "qwen3-f16", "qwen3moe-f16"]


def _problem(response: httpx.Response, status: int, kind: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == kind and body["status"] == status and body["title"] and "Traceback" not in body["detail"]
    return body


def _refused(result: dict, refusal: str) -> None:
    estimate = result["estimate"]
    assert estimate["refusal"] == refusal
    assert estimate["parts"] == [] and estimate["lowerBoundBytes"] == 0 and estimate["upperBoundBytes"] is None
    assert estimate["weakestBasis"] == "unknown" and result["verdict"] == "unknown" and result["gpuAdmits"] is None


def test_batch_of_32_in_request_order(client: httpx.Client) -> None:
    ids = [DENSE[i % len(DENSE)] for i in range(32)]
    response = client.post(BATCH, json=[{"modelId": i} for i in ids])
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert [r["modelId"] for r in response.json()["results"]] == ids


@pytest.mark.parametrize("body", [[{"modelId": "qwen3-f16"}] * 33, []], ids=["33", "empty"])
def test_oversized_or_empty_batch_is_400(client: httpx.Client, body: list) -> None:
    _problem(client.post(BATCH, json=body), 400, "invalidRequest")


def test_an_oversized_batch_says_the_rule_first(client: httpx.Client) -> None:
    body = _problem(client.post(BATCH, json=[{"modelId": "qwen3-f16"}] * 33), 400, "invalidRequest")
    assert body["detail"].startswith("at most 32 requests, got 33")
    body = _problem(client.post(BATCH, json=[]), 400, "invalidRequest")
    assert body["detail"].startswith("at least 1 requests, got 0")


def _observation_with(field: str) -> dict:
    """A valid observation whose workload also has `field`."""
    body = _observation("qwen3-f16", None, workspace=1)
    body["workload"][field] = "on"
    return body


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (BATCH, [{"modelId": "qwen3-f16", "tokens": 32768, "parallel": 2}], "parallel"),
        ("/v1/models/fit", {"modelId": "qwen3-f16", "allocated_tokens": 8192}, "allocated_tokens"),
        ("/v1/models/fit/plan", [{"modelId": "qwen3-f16", "stream": 2}], "stream"),
        ("/v1/models/observations", _observation_with("flashAttn"), "flashAttn"),
    ],
    ids=["batch", "fit", "plan", "observation"],
)
def test_a_field_the_contract_does_not_name_is_a_400_naming_it(
    client: httpx.Client, path: str, body: object, field: str
) -> None:
    """`"tokens": 32768, "parallel": 2` was answered at 4096 x 1, as if nothing had been asked."""
    assert repr(field) in _problem(client.post(path, json=body), 400, "invalidRequest")["detail"]


def test_an_unreadable_file_is_flagged_in_the_listing(client: httpx.Client) -> None:
    models = {m["modelId"]: m for m in client.get("/v1/models").json()["models"]}
    assert models["broken/garbage"]["architecture"] == "" and models["broken/garbage"]["unreadable"]
    assert models["qwen3-f16"]["unreadable"] is None


def test_catalog_entries_are_listed_with_the_weights_a_fit_counts(client: httpx.Client) -> None:
    """Catalog rows listed `SIZE ?` though a fit knew their weights: once the server's index thread has weighed the
    catalog (a few seconds after start-up), each catalog entry carries the floor of its fit's `weights` part."""
    deadline = time.monotonic() + 60
    while True:
        models = client.get("/v1/models").json()["models"]
        catalog = [m for m in models if m["source"] == "catalog"]
        if all(m["weightsBytes"] is not None for m in catalog) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert catalog and all(m["weightsBytes"] is not None for m in catalog)
    assert all(m["weightsBytes"] is None for m in models if m["source"] == "local")
    for m in catalog[:: len(catalog) // 5]:
        parts = client.post("/v1/models/fit", json={"modelId": m["modelId"]}).json()["estimate"]["parts"]
        weights = next(p for p in parts if p["component"] == "weights")
        assert m["weightsBytes"] == weights["bytes"] > 0, m["modelId"]


def test_unknown_ids_are_left_out(client: httpx.Client) -> None:
    body = [
        {"modelId": "qwen3-f16"},
        {"modelId": "no/such:Q4_K_M"},
        {"modelId": "../../etc/passwd"},
        {"modelId": "llama-gqa-f16"},
    ]
    results = client.post(BATCH, json=body).json()["results"]
    assert [r["modelId"] for r in results] == ["qwen3-f16", "llama-gqa-f16"]


def test_one_budget_reading_per_batch(public_models: Path) -> None:
    calls: list[int] = []

    def counting_reader() -> HostMemory:
        calls.append(1)
        return read_host_memory()

    service = build_service([Root(str(public_models), RootKind.PLAIN)], read_host=counting_reader)
    with LiveServer(service) as server, server.client() as c:
        results = c.post(BATCH, json=[{"modelId": m} for m in DENSE * 3]).json()["results"]
    assert len(calls) == 1
    budgets = [r["budget"] for r in results]
    assert all(b == budgets[0] for b in budgets)
    assert budgets[0]["basis"] == "hostAvailable"
    assert 0 < budgets[0]["bytes"] <= psutil.virtual_memory().total


def test_dense_models_match_llama_cpp(client: httpx.Client) -> None:
    """Measured weights and derived KV equal what llama.cpp allocated for the public set's dense models."""
    runs = [
        r
        for r in records("results_probe.jsonl")
        if r["model"] in DENSE and r["settings"]["n_ctx"] % r["settings"]["n_seq"] == 0 and r["n_ubatch"] == 512
    ]
    element = {"f16": 2, "q8_0": 1}
    body = [
        {
            "modelId": r["model"],
            "allocatedTokens": r["settings"]["n_ctx"] // r["settings"]["n_seq"],
            "streams": r["settings"]["n_seq"],
            "keyElementBytes": element[r["settings"]["type_k"]],
            "valueElementBytes": element[r["settings"]["type_v"]],
            "cpuVariant": "haswell",  # the variant the public set was measured on (any x86-64 AVX2 host runs it)
            "flashAttention": "on" if r["flash_attn"] else "off",  # as llama.cpp resolved it
            "kvUnified": bool(r["settings"]["unified"]),
        }
        for r in runs
    ]
    assert len(body) >= 32
    for start in range(0, len(body), 32):
        results = client.post(BATCH, json=body[start : start + 32]).json()["results"]
        for run, result in zip(runs[start : start + 32], results, strict=True):
            parts = {p["component"]: p for p in result["estimate"]["parts"]}
            assert parts["weights"]["basis"] == "measuredArtifact"
            assert parts["weights"]["bytes"] == run["weights_bytes"]
            assert parts["kvCache"]["basis"] == "derivedLayout"
            assert parts["kvCache"]["bytes"] == run["kv_bytes"]
            assert parts["recurrentState"]["basis"] == "notApplicable"
            # each part's ceiling: exact parts carry none, the workspace's holds llama.cpp's buffers between
            assert parts["weights"]["upperBytes"] == run["weights_bytes"]  # one CPU variant: exact
            assert parts["kvCache"]["upperBytes"] == run["kv_bytes"]
            workspace = run["compute_bytes"] + run["output_buffer_bytes_init"]
            assert parts["workspace"]["bytes"] <= workspace <= parts["workspace"]["upperBytes"]


def test_answer_shape_for_a_dense_model(client: httpx.Client) -> None:
    result = client.post(BATCH, json=[{"modelId": "llama-gqa-f16"}]).json()["results"][0]
    assert result["identity"] == {
        "modelId": "llama-gqa-f16",
        "revision": "",
        "quant": "F16",
        "artifactBytes": result["identity"]["artifactBytes"],
        "contextLimit": 8192,  # the writer's llama.context_length
    }
    assert result["identity"]["artifactBytes"] > 14_000_000
    estimate = result["estimate"]
    assert [p["component"] for p in estimate["parts"]] == [
        "weights",
        "kvCache",
        "recurrentState",
        "workspace",
        "companions",
    ]
    assert estimate["workload"].pop("cpuVariant") in BY_NAME  # `auto` echoes the variant this host loads
    settings = estimate["workload"].pop("settings")  # the request named none: every one memfit's default
    assert {s["setting"] for s in settings} >= {"allocatedTokens", "loadMode", "cacheRamMib"}
    assert {s["source"] for s in settings} == {"default"}
    assert estimate["workload"] == {
        "allocatedTokens": 4096,
        "contextSource": "documentedDefault",
        "streams": 1,
        "keyElementBytes": 2,
        "valueElementBytes": 2,
        "mode": "fullGpu",
        "preparedTokens": None,
        "flashAttention": "auto",
        "ubatchTokens": 512,
        "kvUnified": False,
        "gpuLayers": "all",  # what fullGpu means (since 1.14.0), and llama.cpp's placement defaults
        "nCpuMoe": 0,
        "tensorOverrides": [],
        "tensorSplit": [],
        "splitMode": "layer",
        "mainGpu": 0,
        "kvOffload": True,
        "profile": "custom",  # nothing a launcher adds, nothing that grows after load
        "swaFull": False,
        "loadMode": "none",
        "cacheRamMib": 0,
        "contextCheckpoints": 0,
        "rollbackSnapshots": 0,  # llama.cpp's n_rs_seq: no speculative rollback
        "multiTokenPrediction": False,  # llama-server's --spec-type draft-mtp: the MTP layers not loaded
        "draftTokens": 0,  # no speculative decoding: one logits row per sequence
        "embeddings": False,  # no --embedding: one logits row per sequence, no embeddings rows
        "pooling": None,  # no --pooling: the model's own (llama_pooling_type unspecified)
        "draftKeyElementBytes": 2,  # no -ctkd / -ctvd: the MTP draft's f16 (changes nothing without MTP)
        "draftValueElementBytes": 2,
        "draftBackendSampling": True,  # llama-server's default: the draft sampled on the backend
        "slotTokens": None,
    }
    assert {p["residency"] for p in estimate["parts"]} == {"hard"} and result["softBytes"] == 0
    # no GPU read: the host holds the whole estimate, and decides the verdict
    [host] = result["devices"]
    assert (host["name"], host["parts"], host["lowerBoundBytes"]) == (
        "host",
        estimate["parts"],
        estimate["lowerBoundBytes"],
    )
    assert (result["decidedBy"], host["verdict"]) == ("host", result["verdict"])
    numbered = sum(p["bytes"] for p in estimate["parts"] if p["bytes"] is not None)
    assert estimate["lowerBoundBytes"] == numbered
    assert estimate["upperBoundBytes"] == sum(p["upperBytes"] for p in estimate["parts"])
    assert all(p["bytes"] <= p["upperBytes"] for p in estimate["parts"])
    workspace = estimate["parts"][3]
    assert workspace["upperBytes"] > workspace["bytes"]  # the compute buffer's margin sits on the workspace alone
    assert result["gpuAdmits"] is None and "gpuTelemetryUnavailable" in result["limits"]


def test_context_default_is_capped_to_model_limit(client: httpx.Client) -> None:
    # llama-gqa's context limit is 8192; qwen3's 32768: the 4096 default fits both, so ask with streams
    result = client.post("/v1/models/fit", json={"modelId": "llama-gqa-f16"}).json()
    assert result["estimate"]["workload"]["allocatedTokens"] == 4096


@pytest.mark.parametrize(
    "request_fields, refusal",
    [
        ({"allocatedTokens": 0}, "nonPositiveContext"),
        ({"allocatedTokens": -4096, "streams": 0}, "nonPositiveContext"),
        ({"streams": 0}, "nonPositiveStreams"),
        ({"streams": -3}, "nonPositiveStreams"),
        ({"allocatedTokens": 8193}, "contextExceedsModelLimit"),
        ({"allocatedTokens": 2**62, "streams": 2**20}, "nonFiniteInput"),
        ({"allocatedTokens": 2**40, "streams": 2**30, "keyElementBytes": 2**62}, "nonFiniteInput"),
    ],
)
def test_refusals(client: httpx.Client, request_fields: dict, refusal: str) -> None:
    result = client.post(BATCH, json=[{"modelId": "llama-gqa-f16", **request_fields}]).json()["results"][0]
    _refused(result, refusal)
    workload = result["estimate"]["workload"]
    for field, value in request_fields.items():
        assert workload[field] == min(value, 2**63 - 1)


def test_unknown_mode_is_echoed_with_null_gpu_answer(client: httpx.Client) -> None:
    result = client.post(BATCH, json=[{"modelId": "qwen3-f16", "mode": "npuOnly"}]).json()["results"][0]
    assert result["estimate"]["workload"]["mode"] == "npuOnly"
    assert result["gpuAdmits"] is None
    assert result["estimate"]["refusal"] == "none"


def test_broken_files_degrade_only_their_answer(client: httpx.Client) -> None:
    body = [{"modelId": "broken/garbage"}, {"modelId": "qwen3-f16"}, {"modelId": "broken/truncated"}]
    results = client.post(BATCH, json=body).json()["results"]
    assert [r["modelId"] for r in results] == ["broken/garbage", "qwen3-f16", "broken/truncated"]
    for broken in (results[0], results[2]):
        assert "artifactUnreadable" in broken["limits"]
        weights = broken["estimate"]["parts"][0]
        assert weights["basis"] == "unknown" and weights["bytes"] is None
        assert broken["estimate"]["upperBoundBytes"] is None and broken["verdict"] in ("unknown", "oversize")
    assert results[1]["estimate"]["parts"][0]["basis"] == "measuredArtifact"


def test_a_truncated_file_gives_its_reason_once(client: httpx.Client, public_models: Path) -> None:
    """The weights say why the file cannot be read; the parts that need its layout point there instead of
    repeating it (or giving a reason of their own), and the file on disk keeps its size."""
    (result,) = client.post(BATCH, json=[{"modelId": "broken/truncated"}]).json()["results"]
    weights, *others = [p for p in result["estimate"]["parts"] if p["basis"] == "unknown"]
    assert weights["component"] == "weights" and weights["note"].startswith("not a readable GGUF file")
    assert [p["component"] for p in others] == ["kvCache", "recurrentState", "workspace"]
    assert all(p["note"] == "not derived: the file could not be read (the weights say why)" for p in others)
    assert result["identity"]["artifactBytes"] == (public_models / "broken" / "truncated.gguf").stat().st_size


def test_single_fit_and_404(client: httpx.Client) -> None:
    one = client.post("/v1/models/fit", json={"modelId": "qwen3-f16"})
    assert one.status_code == 200
    batch = client.post(BATCH, json=[{"modelId": "qwen3-f16"}]).json()["results"][0]
    assert one.json()["estimate"] == batch["estimate"]
    _problem(client.post("/v1/models/fit", json={"modelId": "nothing/here"}), 404, "notFound")


def test_ids_no_model_answers_to_are_listed_with_suggestions(client: httpx.Client) -> None:
    """Each was a silent `{"results": []}` (or a bare 404): now the batch says which ids it left out and why."""
    asked = ["qwen3-f17", "qwen3-f16", "Qwen/Qwen3-8B-GGUF:Q3_K_XL", "qwen3-f17", "hf.co/Qwen/Qwen3-8B-GGUF:Q8_0"]
    answer = client.post(BATCH, json=[{"modelId": m} for m in asked]).json()
    assert [r["modelId"] for r in answer["results"]] == ["qwen3-f16", "hf.co/Qwen/Qwen3-8B-GGUF:Q8_0"]
    typo, other_quant = answer["leftOut"]  # each once, in request order
    assert typo["modelId"] == "qwen3-f17" and typo["suggestions"][0] == "qwen3-f16"
    assert other_quant["modelId"] == "Qwen/Qwen3-8B-GGUF:Q3_K_XL"
    assert other_quant["suggestions"][:4] == [f"Qwen/Qwen3-8B-GGUF:{q}" for q in ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")]
    assert client.post(BATCH, json=[{"modelId": "qwen3-f16"}]).json()["leftOut"] == []
    plans = client.post("/v1/models/fit/plan", json=[{"modelId": "Qwen/Qwen3-8B-GGUF"}, {"modelId": "no/such"}])
    assert [m["modelId"] for m in plans.json()["leftOut"]] == ["no/such"]  # a repository is what a plan names
    missing = _problem(client.post("/v1/models/fit", json={"modelId": "qwen3-f17"}), 404, "notFound")
    assert missing["suggestions"][0] == "qwen3-f16"
    assert "suggestions" not in _problem(client.post(BATCH, json=[]), 400, "invalidRequest")


@pytest.mark.parametrize("method, path", [("POST", BATCH), ("POST", "/v1/models/fit"), ("GET", "/v1/models")])
@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_protected_routes_need_the_token(live: LiveServer, method: str, path: str, token: str | None) -> None:
    with live.client(token) as c:
        response = c.request(method, path, json=[{"modelId": "qwen3-f16"}] if path == BATCH else {"modelId": "x"})
    body = _problem(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"
    assert "wrong-token" not in response.text and "test-token" not in body["detail"]


def test_health_and_spec_need_no_token(live: LiveServer) -> None:
    with live.client(None) as c:
        health = c.get("/health")
        assert health.json() == {
            "status": "ok",
            "apiRevision": health.headers["x-memfit-api-revision"],
            "degraded": False,
            "reason": None,
        }
        assert c.get("/v1/openapi.json").json()["openapi"] == "3.0.3"
        assert c.get("/v1/openapi.yaml").text.startswith("openapi: 3.0.3")
        ui = c.get("/v1/ui/")
        assert ui.status_code == 200 and "swagger" in ui.text.lower() and "cdn" not in ui.text.lower()


def test_health_answered_without_connexion_is_the_operation_connexion_answers(live: LiveServer) -> None:
    """GET /health skips connexion's stack (memfit.http.direct); HEAD still goes through it: same headers."""
    with live.client(None) as c:
        direct, routed = c.get("/health"), c.head("/health")
    assert direct.status_code == routed.status_code == 200
    for name in ("content-type", "content-length", "x-memfit-api-revision"):
        assert direct.headers[name] == routed.headers[name]


def test_a_health_probe_that_fails_is_a_500_problem(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("probe broke")

    monkeypatch.setattr(live.service, "check_state", broken)
    with live.client(None) as c:
        response = c.get("/health")
    assert _problem(response, 500, "failed")["detail"] == "the request failed; see the server log"


@pytest.mark.parametrize(
    "content, kind",
    [
        (b'[{"modelId": ', "truncated JSON"),
        (b'[{"modelId": "\xff\xfe"}]', "not UTF-8"),
        (b'{"modelId": "qwen3-f16"}', "object, not array"),
        (b'[{"allocatedTokens": 10}]', "modelId missing"),
        (b'[{"modelId": "qwen3-f16", "allocatedTokens": "many"}]', "string for integer"),
        (b'[{"modelId": "qwen3-f16", "keyElementBytes": 0}]', "element bytes 0"),
        (b'[{"modelId": "qwen3-f16", "allocatedTokens": 99999999999999999999}]', "beyond int64"),
        (b"[" * 50000, "deep nesting"),
        (b"", "empty body"),
    ],
)
def test_malformed_bodies_are_400(client: httpx.Client, content: bytes, kind: str) -> None:
    response = client.post(BATCH, content=content, headers={"content-type": "application/json"})
    _problem(response, 400, "invalidRequest")


def test_oversized_body_is_413(client: httpx.Client) -> None:
    response = client.post(BATCH, content=b"[" + b" " * (2 << 20) + b"]", headers={"content-type": "application/json"})
    _problem(response, 413, "invalidRequest")


def test_model_list(client: httpx.Client) -> None:
    models = client.get("/v1/models").json()["models"]
    local = [m["modelId"] for m in models if m["source"] == "local"]
    assert (
        "qwen3-f16" in local
        and local == sorted(local)
        and models[: len(local)] == [m for m in models if m["source"] == "local"]
    )
    qwen = next(m for m in models if m["modelId"] == "qwen3-f16")
    assert (qwen["source"], qwen["architecture"], qwen["quant"], qwen["contextLimit"]) == (
        "local",
        "qwen3",
        "F16",
        32768,
    )


def test_a_local_id_typed_with_spaces_is_found(client: httpx.Client) -> None:
    (result,) = client.post(BATCH, json=[{"modelId": " qwen3-f16\t"}]).json()["results"]
    assert result["modelId"] == " qwen3-f16\t" and result["identity"]["modelId"] == "qwen3-f16"


@pytest.fixture(scope="module")
def real_qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server over Qwen3-30B-A3B's published shape (n_vocab 151,936), written sparse by tools/gguf_writers.py."""
    directory = tmp_path_factory.mktemp("real-qwen")
    write_model(qwen3_30b_a3b(), directory / "qwen3-30b-a3b.gguf")
    service = build_service([Root(str(directory), RootKind.PLAIN)], state_dir=str(tmp_path_factory.mktemp("state")))
    with LiveServer(service) as server, server.client() as client:
        yield client


def _workspace(client: httpx.Client, **workload: object) -> tuple[int, int, dict]:
    body = {"modelId": "qwen3-30b-a3b", "cpuVariant": "haswell", "mode": "cpuOffload", **workload}
    (result,) = client.post(BATCH, json=[body]).json()["results"]
    parts = {p["component"]: p for p in result["estimate"]["parts"]}
    return parts["workspace"]["bytes"], parts["workspace"]["upperBytes"], result["estimate"]["workload"]


@pytest.mark.parametrize(
    ("tokens", "streams", "draft", "rows"),
    [
        (4096, 4, 3, 4 * (1 + 3)),  # each slot's sampled token and its 3 drafts, all with logits
        (4096, 1, 16, 1 + 16),
        (256, 2, 256, 512),  # 2 x 257 outputs, capped by n_batch = min(2048, n_ctx 512)
        (4096, 16, 200, 2048),  # 16 x 201 outputs, capped by n_batch 2048
    ],
)
def test_draft_tokens_grow_the_output_buffer_to_the_verified_rows(
    real_qwen: httpx.Client, tokens: int, streams: int, draft: int, rows: int
) -> None:
    """llama-server's verification batch decodes every slot's sampled token and draft with logits, so
    llama_context::decode's output_reserve(n_outputs_all) grows the output buffer from n_seq_max rows of n_vocab
    floats to the batch's outputs, at most min(n_batch, n_parallel x (1 + n_draft)) (server_output_limits); the
    compute buffer is the same replay, so the workspace's floor and ceiling both move by the added rows."""
    plain_floor, plain_ceiling, _ = _workspace(real_qwen, allocatedTokens=tokens, streams=streams)
    floor, ceiling, workload = _workspace(real_qwen, allocatedTokens=tokens, streams=streams, draftTokens=draft)
    added = 151936 * 4 * (rows - streams)  # Qwen3-30B-A3B's vocabulary, a float each, per added row
    assert (floor - plain_floor, ceiling - plain_ceiling) == (added, added)
    assert workload["draftTokens"] == draft
    assert {s["setting"]: s["source"] for s in workload["settings"]}["draftTokens"] == "request"


def test_multi_token_prediction_verifies_llama_servers_default_draft(real_qwen: httpx.Client) -> None:
    """--spec-type draft-mtp always drafts, common_params_speculative_draft::n_max = 3 tokens by default: without a
    draftTokens of its own an MTP request carries 4 logits rows a slot (this model has no NextN layers, so past the
    weights the answer is unknown; the echo still says what was asked)."""
    *_, workload = _workspace(real_qwen, allocatedTokens=4096, streams=2, multiTokenPrediction=True)
    assert workload["draftTokens"] == 3
    *_, asked = _workspace(real_qwen, allocatedTokens=4096, multiTokenPrediction=True, draftTokens=0)
    assert asked["draftTokens"] == 0


QWEN_VOCAB, QWEN_EMBD = 151936, 2048  # Qwen3-30B-A3B's vocabulary and hidden size (tools/gguf_writers.qwen3_30b_a3b)


@pytest.mark.parametrize(("tokens", "streams"), [(4096, 1), (4096, 4), (1024, 2)])
def test_embeddings_output_every_token_of_a_batch(real_qwen: httpx.Client, tokens: int, streams: int) -> None:
    """A context that computes embeddings outputs every token of a decode (llama_context::decode's output_all), and
    output_reserve keeps n_embd_out floats of embeddings beside the n_vocab logits of each: in a plain context
    (custom) the output buffer grows from n_seq_max rows of logits to n_batch rows of both, n_batch =
    min(2048, n_ctx); the model names no pooling, so the compute buffer is the same replay."""
    plain_floor, plain_ceiling, _ = _workspace(real_qwen, allocatedTokens=tokens, streams=streams)
    floor, ceiling, workload = _workspace(real_qwen, allocatedTokens=tokens, streams=streams, embeddings=True)
    n_batch = min(2048, tokens * streams)
    added = (QWEN_VOCAB + QWEN_EMBD) * 4 * n_batch - QWEN_VOCAB * 4 * streams
    assert (floor - plain_floor, ceiling - plain_ceiling) == (added, added)
    assert workload["embeddings"] is True
    assert {s["setting"]: s["source"] for s in workload["settings"]}["embeddings"] == "request"


@pytest.mark.parametrize("ubatch", [512, 256, 2048])
def test_llama_server_serving_embeddings_lifts_its_output_limit(real_qwen: httpx.Client, ubatch: int) -> None:
    """llama-server serving embeddings cuts its n_batch to the ubatch (tools/server/server.cpp) and sets its output
    limit to that n_batch (server_output_limits: { n_batch, 1 }): the reserved graph is a plain context's, every
    token of the ubatch an output, and the output buffer holds the ubatch's rows of logits and embeddings. Without
    embeddings llama-server caps the graph's outputs at its 4 slots, below both."""
    settings = {"allocatedTokens": 4096, "streams": 4, "kvUnified": True, "ubatchTokens": ubatch}
    plain_floor, plain_ceiling, _ = _workspace(real_qwen, profile="custom", **settings)
    floor, ceiling, workload = _workspace(real_qwen, profile="llamaServer", embeddings=True, **settings)
    added = (QWEN_VOCAB + QWEN_EMBD) * 4 * ubatch - QWEN_VOCAB * 4 * 4
    assert (floor - plain_floor, ceiling - plain_ceiling) == (added, added)
    assert workload["embeddings"] is True and workload["ubatchTokens"] == ubatch
    capped_floor, _, capped = _workspace(real_qwen, profile="llamaServer", **settings)
    assert capped["embeddings"] is False and capped_floor < plain_floor
    assert {s["setting"]: s["source"] for s in capped["settings"]}["embeddings"] == "profile"


def test_a_pooling_alone_lifts_llama_servers_output_limit_without_embeddings(real_qwen: httpx.Client) -> None:
    """A --pooling other than none without --embedding: server_output_limits lifts llama-server's output limit to
    its n_batch (2048, uncut: server.cpp cuts it only under params.embedding), so the reserved graph is a plain
    context's (every ubatch token a logits row), but cparams.embeddings stays false: the graph pools nothing and the
    output buffer holds n_seq_max rows of logits, a plain context's workspace exactly. Serving embeddings is more;
    llama-server's capped graph less."""
    settings = {"allocatedTokens": 4096, "streams": 4, "kvUnified": True}
    plain = _workspace(real_qwen, profile="custom", **settings)
    floor, ceiling, workload = _workspace(real_qwen, profile="llamaServer", pooling="mean", **settings)
    assert (floor, ceiling) == plain[:2]
    assert (workload["pooling"], workload["embeddings"]) == ("mean", False)
    assert {s["setting"]: s["source"] for s in workload["settings"]}["pooling"] == "request"
    serving_floor, _, _ = _workspace(real_qwen, profile="llamaServer", pooling="mean", embeddings=True, **settings)
    capped_floor, _, capped = _workspace(real_qwen, profile="llamaServer", **settings)
    assert capped_floor < floor < serving_floor
    assert capped["pooling"] is None
    assert {s["setting"]: s["source"] for s in capped["settings"]}["pooling"] == "profile"
    none_floor, _, _ = _workspace(real_qwen, profile="llamaServer", pooling="none", **settings)
    assert none_floor == capped_floor  # pooling none: the limit stays


def test_a_pooling_llama_cpp_does_not_name_is_refused_by_the_contract(real_qwen: httpx.Client) -> None:
    body = {"modelId": "qwen3-30b-a3b", "pooling": "max"}
    assert real_qwen.post(BATCH, json=[body]).status_code == 400


@pytest.fixture(scope="module")
def rerankers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server over two small BERTs whose own pooling is rank: one with its WordPiece vocabulary (a BOS and a SEP
    token), one without a vocabulary (tokenizer.ggml.model "none": llama_vocab's LLAMA_VOCAB_TYPE_NONE, no special
    token at all, its size from `bert.vocab_size`)."""
    directory = tmp_path_factory.mktemp("rerankers")
    for name, vocab_type in (("reranker", "bert"), ("no-bos-reranker", "none")):
        model = shapes.bert(name, E=64, F=256, L=2, H=2, V=30522, nomic=False, ctx=512)
        model.arch_kv(pooling_type=4)
        if vocab_type == "none":
            model.vocab = 0  # no token list written
            model.kv["tokenizer.ggml.model"] = "none"
            model.arch_kv(vocab_size=30522)
        write_model(model, directory / f"{name}.gguf")
    service = build_service([Root(str(directory), RootKind.PLAIN)], state_dir=str(tmp_path_factory.mktemp("state")))
    with LiveServer(service) as server, server.client() as client:
        yield client


def _reranked(client: httpx.Client, **workload: object) -> dict:
    body = {"allocatedTokens": 512, "cpuVariant": "haswell", "mode": "cpuOffload", **workload}
    (result,) = client.post(BATCH, json=[body]).json()["results"]
    return dict(result)


def _reranked_workspace(result: dict) -> int | None:
    return {p["component"]: p for p in result["estimate"]["parts"]}["workspace"]["bytes"]


def test_llama_server_refuses_rank_pooling_without_a_bos_token(rerankers: httpx.Client) -> None:
    """common_init_from_params fails the load where the context pools by rank (the model's own, or --rerank's) and
    the vocabulary has no BOS token: under the profiles that run llama-server the parts past the weights are unknown
    with workloadUnsupported, never a number; another pooling named, or a plain llama.cpp context (custom, which
    makes no such check), is answered."""
    refused = _reranked(rerankers, modelId="no-bos-reranker", profile="llamaServer", embeddings=True)
    parts = {p["component"]: p for p in refused["estimate"]["parts"]}
    assert parts["workspace"]["bytes"] is None and "BOS" in parts["workspace"]["note"]
    assert "workloadUnsupported" in refused["limits"] and refused["estimate"]["upperBoundBytes"] is None
    named = _reranked(rerankers, modelId="no-bos-reranker", profile="llamaServer", pooling="rank")
    assert _reranked_workspace(named) is None and "workloadUnsupported" in named["limits"]
    for answered in (
        _reranked(rerankers, modelId="no-bos-reranker", profile="llamaServer", embeddings=True, pooling="mean"),
        _reranked(rerankers, modelId="no-bos-reranker", profile="custom", embeddings=True),
        _reranked(rerankers, modelId="reranker", profile="llamaServer", embeddings=True),
    ):
        assert _reranked_workspace(answered) is not None and "workloadUnsupported" not in answered["limits"]


@pytest.fixture(scope="module")
def real_bert(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server over bert-large's shape (tools/families/shapes.py, written sparse), its pooling none (so computing
    embeddings adds no node to the graph, only rows to the output buffer)."""
    directory = tmp_path_factory.mktemp("real-bert")
    model = shapes.FAMILY_SET["bert-large-shape"]()
    model.arch_kv(pooling_type=0)
    write_model(model, directory / "bert-large.gguf")
    service = build_service([Root(str(directory), RootKind.PLAIN)], state_dir=str(tmp_path_factory.mktemp("state")))
    with LiveServer(service) as server, server.client() as client:
        yield client


BERT_VOCAB, BERT_EMBD = 30522, 1024  # bert-large's vocabulary and hidden size (tools/families/shapes.py)


@pytest.mark.parametrize(
    ("streams", "ubatch", "rows"),
    [
        (1, 512, 512),  # a prompt of a whole ubatch, every token an output
        (4, 512, 512),
        (4, 256, 256),  # the ubatch, not n_batch (2048: a non-causal model's, uncapped by its context)
        (4, 2, 4),  # n_seq_max rows where the ubatch is smaller (output_reserve's max(n_outputs, n_seq_max))
    ],
)
def test_a_model_without_memory_outputs_every_token_of_its_ubatch(
    real_bert: httpx.Client, streams: int, ubatch: int, rows: int
) -> None:
    """A model without a memory module (BERT) decodes through llama_context::encode, whose one ubatch is every
    token an output, embeddings or not: the output buffer holds max(n_seq_max, n_ubatch) rows after the first decode,
    n_vocab logits each, and n_embd_out embeddings more under cparams.embeddings (custom: a plain context)."""
    settings = {"modelId": "bert-large", "allocatedTokens": 512, "streams": streams, "ubatchTokens": ubatch}
    plain_floor, plain_ceiling, _ = _workspace(real_bert, **settings)
    floor, ceiling, workload = _workspace(real_bert, embeddings=True, **settings)
    added = BERT_EMBD * 4 * rows
    assert (floor - plain_floor, ceiling - plain_ceiling) == (added, added)
    assert workload["embeddings"] is True and workload["profile"] == "custom"
    one_floor, one_ceiling, _ = _workspace(real_bert, **settings | {"streams": 1})
    one_added = BERT_VOCAB * 4 * (rows - max(1, ubatch))  # one stream's rows: the ubatch's
    # the ceiling's compute slack grows with the sequences of a 2-token ubatch too
    assert plain_floor - one_floor == one_added <= plain_ceiling - one_ceiling
