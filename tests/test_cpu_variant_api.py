"""`cpuVariant` end to end: a real uvicorn server on 127.0.0.1 whose host is stated (an AMX Xeon, an AVX2
desktop), the public set's GGUF files, and the weights llama.cpp measured under each variant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memfit.estimator.machine import CpuArch, CpuFeatures
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.truth import records

BATCH = "/v1/models/fit/batch"
PLAN = "/v1/models/fit/plan"
HASWELL = "SSE42 AVX F16C FMA AVX2 BMI2"
SAPPHIRE_RAPIDS = HASWELL + " AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8"
HOSTS = {
    "amx": CpuFeatures(CpuArch.X86_64, frozenset(SAPPHIRE_RAPIDS.split())),
    "avx2": CpuFeatures(CpuArch.X86_64, frozenset(HASWELL.split())),
}


def _plain(run: dict) -> bool:
    """A loaded (not mmapped) run at llama.cpp's defaults whose weights the public set's files hold."""
    return not run["settings"]["mmap"] and "error" not in run


@pytest.fixture(scope="module", params=sorted(HOSTS))
def host(request: pytest.FixtureRequest, public_models: Path) -> Iterator[tuple[str, httpx.Client]]:
    service = build_service([Root(str(public_models), RootKind.PLAIN)], read_cpu=lambda: HOSTS[request.param])
    with LiveServer(service) as server, server.client() as c:
        yield request.param, c


def _weights(result: dict) -> dict:
    return next(p for p in result["estimate"]["parts"] if p["component"] == "weights")


@pytest.mark.parametrize(
    ("truth", "variant"), [("results_amx_probe.jsonl", "sapphirerapids"), ("results_probe.jsonl", "haswell")]
)
def test_weights_are_what_llama_cpp_allocated_under_the_variant(
    host: tuple[str, httpx.Client], truth: str, variant: str
) -> None:
    """Each public model's weights, asked under the variant its runs were measured on: byte-equal to
    llama.cpp's, on the AMX host (which runs both) and, for haswell, on the AVX2 host."""
    name, client = host
    if name == "avx2" and variant == "sapphirerapids":
        pytest.skip("an AVX2 host cannot run sapphirerapids (test_a_variant_the_host_cannot_run)")
    measured = {r["model"]: r["weights_bytes"] for r in records(truth) if _plain(r)}
    assert len(measured) == 10
    body = [{"modelId": m, "cpuVariant": variant} for m in measured]
    for result in client.post(BATCH, json=body).json()["results"]:
        weights = _weights(result)
        assert result["estimate"]["workload"]["cpuVariant"] == variant
        assert (weights["bytes"], weights["basis"]) == (measured[result["modelId"]], "measuredArtifact")
        assert result["estimate"]["upperBoundBytes"] - result["estimate"]["lowerBoundBytes"] < 64 << 20


def test_auto_is_the_variant_the_host_loads(host: tuple[str, httpx.Client]) -> None:
    name, client = host
    expected = {"amx": "sapphirerapids", "avx2": "haswell"}[name]
    for body in ({"modelId": "llama-gqa-q8_0"}, {"modelId": "llama-gqa-q8_0", "cpuVariant": "auto"}):
        (result,) = client.post(BATCH, json=[body]).json()["results"]
        assert result["estimate"]["workload"]["cpuVariant"] == expected and expected in _weights(result)["note"]


def test_any_holds_every_variant_the_host_runs(host: tuple[str, httpx.Client]) -> None:
    """llama-gqa-q8_0 (untied, Q8_0): haswell allocates its file bytes, sapphirerapids packs its matrices
    larger; `any` spans both where the host runs both: its bounds are haswell's floor and the ceiling raised by
    what llama.cpp measured more under sapphirerapids."""
    name, client = host
    measured = {
        truth: next(r["weights_bytes"] for r in records(truth) if r["model"] == "llama-gqa-q8_0" and _plain(r))
        for truth in ("results_probe.jsonl", "results_amx_probe.jsonl")
    }
    body = [{"modelId": "llama-gqa-q8_0", "cpuVariant": v} for v in ("any", "haswell")]
    every, haswell = (r["estimate"] for r in client.post(BATCH, json=body).json()["results"])
    assert every["workload"]["cpuVariant"] == "any" and every["lowerBoundBytes"] == haswell["lowerBoundBytes"]
    amx_more = measured["results_amx_probe.jsonl"] - measured["results_probe.jsonl"] if name == "amx" else 0
    assert every["upperBoundBytes"] - haswell["upperBoundBytes"] == amx_more


@pytest.mark.parametrize("variant", ["sapphirerapids", "armv8.2_1", "pentium", ""])
def test_a_variant_the_host_cannot_run(host: tuple[str, httpx.Client], variant: str) -> None:
    """unknown + workloadUnsupported for that model only: the batch answers 200, the other model as usual."""
    name, client = host
    if name == "amx" and variant == "sapphirerapids":
        pytest.skip("the AMX host runs it")
    body = [{"modelId": "qwen3-f16", "cpuVariant": variant}, {"modelId": "qwen3-f16"}]
    response = client.post(BATCH, json=body)
    assert response.status_code == 200, response.text
    refused, usual = response.json()["results"]
    assert refused["estimate"]["workload"]["cpuVariant"] == variant
    assert _weights(refused)["basis"] == "unknown" and "workloadUnsupported" in refused["limits"]
    assert refused["verdict"] == "unknown" and refused["estimate"]["upperBoundBytes"] is None
    assert _weights(usual)["basis"] == "measuredArtifact" and "workloadUnsupported" not in usual["limits"]


def test_a_plan_takes_the_variant(host: tuple[str, httpx.Client]) -> None:
    name, client = host
    response = client.post(PLAN, json=[{"modelId": "llama-gqa-q8_0", "cpuVariant": "haswell"}])
    assert response.status_code == 200, response.text
    (quant,) = response.json()["results"][0]["quants"]
    assert quant["fit"]["estimate"]["workload"]["cpuVariant"] == "haswell"
    assert quant["maxAllocatedTokens"]["possible"] is not None
    refused = client.post(PLAN, json=[{"modelId": "llama-gqa-q8_0", "cpuVariant": "pentium"}]).json()
    (quant,) = refused["results"][0]["quants"]
    assert "workloadUnsupported" in quant["fit"]["limits"] and quant["maxAllocatedTokens"]["good"] is None
