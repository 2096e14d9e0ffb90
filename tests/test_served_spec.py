"""What a running server serves of its contract works from the page it serves: `servers` is relative (the
Swagger UI's "Try it out" calls the origin the page came from, whatever the host and port), the request bodies
the page fills in from the `example`s are requests the server accepts, and `/` leads to the page.
scripts/ui-check drives the page itself in headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from memfit.app import SERVED_SERVERS, SPEC_LOADER, SPEC_PATH, parse_spec, served_spec_yaml
from memfit.service_builder import build_service
from tests.conftest import TOKEN, LiveServer

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
SCHEMAS = CONTRACT["components"]["schemas"]


@pytest.fixture(scope="module")
def own_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server of its own: the observation example is stored in its history, not the shared server's."""
    service = build_service([], state_dir=str(tmp_path_factory.mktemp("served-spec-state")))
    with LiveServer(service) as server:
        yield server


def test_the_served_spec_has_a_relative_server_and_is_otherwise_the_contract(own_live: LiveServer) -> None:
    with own_live.client(None) as c:
        served_json = c.get("/v1/openapi.json").json()
        served_yaml = c.get("/v1/openapi.yaml").text
    assert served_json["servers"] == SERVED_SERVERS == [{"url": "/"}]
    assert yaml.safe_load(served_yaml) == served_json
    assert {k: v for k, v in served_json.items() if k != "servers"} == {
        k: v for k, v in CONTRACT.items() if k != "servers"
    }
    text = (ROOT / "openapi.yaml").read_text(encoding="utf-8")
    assert served_yaml == served_spec_yaml(text)
    assert len(served_yaml.splitlines()) == len(text.splitlines()) - 3  # only the servers block differs


def test_served_spec_yaml_refuses_a_contract_without_a_servers_block() -> None:
    with pytest.raises(ValueError):
        served_spec_yaml("openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths: {}\n")


def test_the_request_examples_are_requests_the_server_accepts(own_live: LiveServer) -> None:
    fit = SCHEMAS["WireFitVerdictRequest"]["example"]
    assert fit == {"modelId": "Qwen/Qwen3-8B-GGUF:Q4_K_M", "allocatedTokens": 8192}
    observation = SCHEMAS["WireObservation"]["example"]
    with own_live.client(TOKEN) as c:
        batch = c.post("/v1/models/fit/batch", json=[fit])  # what the Swagger UI fills in for the batch
        assert batch.status_code == 200, batch.text
        (result,) = batch.json()["results"]
        assert result["identity"]["modelId"] == fit["modelId"] and result["estimate"]["lowerBoundBytes"] > 0
        one = c.post("/v1/models/fit", json=fit)
        assert one.status_code == 200, one.text
        stored = c.post("/v1/models/observations", json=observation)
        assert stored.status_code == 201, stored.text
        listed = c.get("/v1/models/observations", params={"modelId": fit["modelId"], "limit": 20})
        assert listed.status_code == 200 and listed.json()["observations"]


def test_the_root_redirects_to_the_ui_and_names_the_spec(own_live: LiveServer) -> None:
    with own_live.client(None) as c:
        root = c.get("/")
        assert root.status_code == 302 and root.headers["location"] == "/v1/ui/"
        assert "/v1/openapi.json" in root.headers["link"] and "/v1/openapi.json" in root.text
        assert root.headers["x-memfit-api-revision"] == CONTRACT["info"]["version"]
        assert c.head("/").status_code == 302
        page = c.get("/", follow_redirects=True)
        assert page.status_code == 200 and "swagger" in page.text.lower()
        assert c.post("/").status_code in (404, 405)
        assert httpx.URL(str(page.url)).path == "/v1/ui/"


def test_the_spec_parsed_with_libyaml_is_the_document_pyyaml_reads() -> None:
    """The server parses the contract with libyaml (a second of its start-up in pure Python): the same document."""
    text = SPEC_PATH.read_text(encoding="utf-8")
    assert SPEC_LOADER is yaml.CSafeLoader  # the wheels pinned in constraints.txt have libyaml
    assert parse_spec(text) == yaml.safe_load(text) and parse_spec(served_spec_yaml(text)) == yaml.safe_load(
        served_spec_yaml(text)
    )
