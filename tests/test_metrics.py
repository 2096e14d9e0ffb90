"""GET /metrics: Prometheus' text format, scraped over HTTP from a live server after real requests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from memfit.cli import build_parser
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.gguf_writers import llama_gqa, qwen3, write_model


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, from an exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path]]:
    models = tmp_path_factory.mktemp("metrics-models")
    write_model(qwen3(), models / "qwen3-f16.gguf")
    write_model(llama_gqa(), models / "llama-f16.gguf")
    service = build_service(
        [Root(str(models), RootKind.PLAIN)], state_dir=str(tmp_path_factory.mktemp("metrics-state"))
    )
    with LiveServer(service) as live:
        yield live, models


def test_a_scrape_after_a_batch_counts_it(server: tuple[LiveServer, Path]) -> None:
    live, models = server
    with live.client() as c:
        before = samples(c.get("/metrics").text)
        batch = [{"modelId": "qwen3-f16"}, {"modelId": "llama-f16"}, {"modelId": "qwen3-f16"}]
        assert c.post("/v1/models/fit/batch", json=batch).status_code == 200
        assert c.post("/v1/models/fit/batch", json=batch[:1]).status_code == 200
        assert c.post("/v1/models/fit", json={"modelId": "no-such-model"}).status_code == 404
        assert c.delete("/v1/models/observations/12345").status_code == 404
        assert c.get("/no/such/path/secret-id").status_code == 404
        response = c.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    after = samples(response.text)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    batch_route = {"route": "/v1/models/fit/batch", "method": "POST", "status": "200"}
    assert grew("memfit_http_requests_total", **batch_route) == 2
    assert grew("memfit_http_request_duration_seconds_count", **batch_route) == 2
    assert grew("memfit_http_request_duration_seconds_sum", **batch_route) > 0
    assert grew("memfit_http_requests_total", route="/v1/models/fit", method="POST", status="404") == 1
    deleted = {"route": "/v1/models/observations/{observationId}", "method": "DELETE", "status": "404"}
    assert grew("memfit_http_requests_total", **deleted) == 1  # the template, never the raw path
    assert grew("memfit_http_requests_total", route="unmatched", method="GET", status="404") == 1
    assert "secret-id" not in response.text and "12345" not in response.text
    assert grew("memfit_http_requests_total", route="/metrics", method="GET", status="200") == 1  # the first scrape
    assert grew("memfit_fit_batch_size_count") == 2 and grew("memfit_fit_batch_size_sum") == 4
    assert grew("memfit_fit_batch_size_bucket", le="1.0") == 1 and grew("memfit_fit_batch_size_bucket", le="4.0") == 2
    lookups = grew("memfit_header_cache_hits_total") + grew("memfit_header_cache_misses_total")
    # a request looks each model it names up once (qwen3 and llama), and the listing's entries were derived while the
    # index read them, so no lookup of the listing's counts here
    assert lookups >= 2 and value(after, "memfit_header_cache_hits_total") >= 2
    assert value(after, "memfit_index_artifacts", root=str(models), kind="plain") == 2
    assert value(after, "memfit_history_rows") == 0


def test_history_rows_are_counted(server: tuple[LiveServer, Path]) -> None:
    live, _ = server
    observation = {
        "modelId": "someone-elses-model",
        "revision": "",
        "quant": "Q4_K_M",
        "artifactBytes": 1000,
        "workload": {
            "allocatedTokens": 4096,
            "streams": 1,
            "keyElementBytes": 2,
            "valueElementBytes": 2,
            "mode": "fullGpu",
        },
        "parts": {"workspace": 1 << 20},
        "runtime": "llama.cpp b6500",
    }
    with live.client() as c:
        before = value(samples(c.get("/metrics").text), "memfit_history_rows")
        assert c.post("/v1/models/observations", json=observation).status_code == 201
        assert value(samples(c.get("/metrics").text), "memfit_history_rows") == before + 1


def test_metrics_need_the_token(server: tuple[LiveServer, Path]) -> None:
    live, _ = server
    with live.client(token=None) as anonymous, live.client(token="wrong") as wrong:
        for c in (anonymous, wrong):
            response = c.get("/metrics")
            assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
            assert "memfit_" not in response.text


def test_metrics_public_flag_serves_them_without_the_token(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", "--metrics-public"])
    assert args.metrics_public and not build_parser().parse_args(["serve"]).metrics_public
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    with LiveServer(service, metrics_public=args.metrics_public) as live, live.client(token=None) as anonymous:
        assert anonymous.get("/metrics").status_code == 200
        assert anonymous.get("/v1/models").status_code == 401  # only /metrics is opened
        with live.client() as c:
            assert c.get("/metrics").status_code == 200


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    with LiveServer(build_service()) as first, first.client() as c:
        for _ in range(3):
            c.get("/health")
    with LiveServer(build_service()) as second, second.client() as c:
        assert 'route="/health"' not in c.get("/metrics").text
