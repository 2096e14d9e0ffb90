"""A Python client generated from openapi.yaml with openapi-python-client drives a live memfit serve.

The client is generated into a temporary folder (never committed) and imported from there; every
assertion is on the typed objects it returns, not on raw JSON.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.conftest import TOKEN, LiveServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def memfit_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    out = tmp_path_factory.mktemp("generated-client")
    generator = Path(sys.executable).with_name("openapi-python-client")
    done = subprocess.run(
        [
            str(generator),
            "generate",
            "--path",
            str(ROOT / "openapi.yaml"),
            "--meta",
            "none",
            "--output-path",
            str(out / "memfit_client"),
            "--config",
            str(ROOT / "clients" / "python" / "openapi-python-client.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, "the generator warned: fix the spec, not the client"
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("memfit_client")
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == "memfit_client" or m.startswith("memfit_client.")]:
            del sys.modules[name]


def _api(name: str) -> ModuleType:
    return importlib.import_module(name)


def test_batch_through_the_generated_client(memfit_client: ModuleType, live: LiveServer) -> None:
    fit_batch = _api("memfit_client.api.models.fit_batch")
    models = _api("memfit_client.models")
    client = memfit_client.AuthenticatedClient(base_url=live.url, token=TOKEN)
    body = [
        models.WireFitVerdictRequest(model_id="qwen3-f16", allocated_tokens=8192, streams=2),
        models.WireFitVerdictRequest(model_id="not/a:model"),
        models.WireFitVerdictRequest(model_id="llama-gqa-f16", allocated_tokens=0, mode="npuOnly"),
    ]
    batch = fit_batch.sync(client=client, body=body)
    assert isinstance(batch, models.WireFitVerdictBatch)
    known, refused = batch.results
    assert known.model_id == "qwen3-f16" and refused.model_id == "llama-gqa-f16"

    estimate = known.estimate
    assert estimate.workload.allocated_tokens == 8192 and estimate.workload.streams == 2
    assert estimate.workload.prepared_tokens is None
    assert isinstance(estimate.upper_bound_bytes, int) and estimate.missing == []
    parts = {p.component: p for p in estimate.parts}
    assert isinstance(parts["kvCache"].bytes_, int) and parts["kvCache"].basis == "derivedLayout"  # `bytes_`: Python
    assert parts["recurrentState"].basis == "notApplicable" and parts["recurrentState"].bytes_ == 0
    assert isinstance(known.verdict, str) and isinstance(known.budget.basis, str)  # open strings stay strings
    assert known.gpu_admits is None and "gpuTelemetryUnavailable" in known.limits
    assert known.identity.quant == "F16" and known.identity.revision == ""

    assert refused.estimate.refusal == "nonPositiveContext"
    assert refused.estimate.workload.mode == "npuOnly"
    assert refused.estimate.parts == [] and refused.estimate.upper_bound_bytes is None


def test_single_fit_and_model_list(memfit_client: ModuleType, live: LiveServer) -> None:
    fit_one = _api("memfit_client.api.models.fit_one")
    list_models = _api("memfit_client.api.models.list_models")
    models = _api("memfit_client.models")
    client = memfit_client.AuthenticatedClient(base_url=live.url, token=TOKEN)
    one = fit_one.sync(client=client, body=models.WireFitVerdictRequest(model_id="qwen3-f16"))
    assert isinstance(one, models.WireFitVerdictResult) and one.estimate.workload.context_source == "documentedDefault"

    missing = fit_one.sync_detailed(client=client, body=models.WireFitVerdictRequest(model_id="nothing/here"))
    assert missing.status_code == HTTPStatus.NOT_FOUND
    assert isinstance(missing.parsed, models.Problem) and missing.parsed.type_ == "notFound"

    listing = list_models.sync(client=client)
    entry = next(m for m in listing.models if m.model_id == "qwen3-f16")
    assert (entry.source, entry.architecture, entry.context_limit, entry.has_projector) == (
        "local",
        "qwen3",
        32768,
        False,
    )


def test_errors_through_the_generated_client(memfit_client: ModuleType, live: LiveServer) -> None:
    fit_batch = _api("memfit_client.api.models.fit_batch")
    health = _api("memfit_client.api.service.health")
    models = _api("memfit_client.models")
    anonymous = memfit_client.Client(base_url=live.url)
    unauthorized = fit_batch.sync_detailed(client=anonymous, body=[models.WireFitVerdictRequest(model_id="qwen3-f16")])
    assert unauthorized.status_code == HTTPStatus.UNAUTHORIZED
    assert unauthorized.parsed.type_ == "unauthorized" and unauthorized.headers["www-authenticate"] == "Bearer"

    client = memfit_client.AuthenticatedClient(base_url=live.url, token=TOKEN)
    too_many = fit_batch.sync_detailed(client=client, body=[models.WireFitVerdictRequest(model_id="x")] * 33)
    assert too_many.status_code == HTTPStatus.BAD_REQUEST
    assert too_many.parsed.type_ == "invalidRequest" and too_many.parsed.status == 400

    up = health.sync(client=anonymous)
    assert up.status == "ok" and up.api_revision


def test_a_499_is_a_problem_not_a_value_error(memfit_client: ModuleType) -> None:
    """The contract's 499 (`cancelled`): http.HTTPStatus has no 499, so the generator's `HTTPStatus(...)` would
    raise ValueError; clients/python/openapi-python-client.yaml's post hook keeps the int."""
    fit_batch = _api("memfit_client.api.models.fit_batch")
    models = _api("memfit_client.models")
    problem = {"type": "cancelled", "title": "Cancelled", "status": 499, "detail": "the server is stopping"}
    transport = httpx.MockTransport(lambda request: httpx.Response(499, json=problem))
    client = memfit_client.AuthenticatedClient(
        base_url="http://memfit", token=TOKEN, httpx_args={"transport": transport}
    )
    answer = fit_batch.sync_detailed(client=client, body=[models.WireFitVerdictRequest(model_id="qwen3-f16")])
    assert answer.status_code == 499
    assert isinstance(answer.parsed, models.Problem) and answer.parsed.type_ == "cancelled"
    assert fit_batch.sync_detailed(client=client, body=[]).status_code != HTTPStatus.OK
