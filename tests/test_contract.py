"""schemathesis fuzzes the running app against openapi.yaml, every check enabled, positive and negative cases.

The run is seeded, so every run sends the same cases and a failure is a failure every time; scripts/contract explores
further (other seeds, nightly sizes) against a live server. Every failure a run ever found is kept below as an
explicit case, so it stays checked whatever the seed draws."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, is_check_class, load_all_checks
from schemathesis.core.jsonschema.types import JsonValue
from starlette.testclient import TestClient
from starlette.types import ASGIApp

from memfit.app import create_app
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tests.conftest import AUTH, TOKEN
from tools.gguf_writers import gemma3_swa, qwen3, write_model

SEED = 21
EXAMPLES = 100  # per operation
KNOWN_MODEL = "qwen3-f16"

load_all_checks()
ALL_CHECKS = [c for c in CHECKS.get_all() if not is_check_class(c)]  # every one a function (the call takes no class)

config = schemathesis.Config(seed=SEED)
config.projects.default.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
)
# The spec is read at collection from an app over no models and no files (what it serves does not depend on
# them); every case is sent to `contract_app`, the same app over two written models and a history database.
schema = schemathesis.openapi.from_asgi(
    "/v1/openapi.json", create_app(build_service(), TOKEN, validate_responses=True), config=config
)


@pytest.fixture(scope="module")
def contract_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ASGIApp]:
    """The app with its model index started (schemathesis' calls run no lifespan), so the models are found."""
    models = tmp_path_factory.mktemp("contract-models")
    write_model(qwen3(), models / f"{KNOWN_MODEL}.gguf")
    write_model(gemma3_swa(), models / "gemma3-swa-f16.gguf")
    service = build_service([Root(str(models), RootKind.PLAIN)], state_dir=str(models))
    service.index.start()
    yield create_app(service, TOKEN, validate_responses=True)
    service.index.stop()


def _known_model(case: schemathesis.Case) -> None:
    """Point a valid generated request at a model that exists, so the fuzzed workloads reach the estimator."""
    if case.meta is not None and case.meta.generation.mode is not schemathesis.GenerationMode.POSITIVE:
        return
    items = case.body if isinstance(case.body, list) else [case.body]
    for item in items[:1]:
        if isinstance(item, dict) and isinstance(item.get("modelId"), str):
            item["modelId"] = KNOWN_MODEL


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_contract(case: schemathesis.Case, contract_app: ASGIApp) -> None:
    _known_model(case)
    case.call_and_validate(headers=AUTH, checks=ALL_CHECKS, app=contract_app)


# Failures the fuzzing found, each kept as the case it was found with (operation, body).
FOUND: dict[str, tuple[str, JsonValue]] = {
    # a 500: the step ends of a unified cache of 2^59 streams overflowed len() (estimator/plan.py)
    "plan of a unified cache of 2^59 streams": (
        "/v1/models/fit/plan",
        [{"modelId": KNOWN_MODEL, "streams": 576460752303423488, "kvUnified": True}],
    ),
    # a 500: a launcher's context split among the request's 0 streams divided by zero (estimator/profiles.py)
    "fit of 0 streams under a launch profile": (
        "/v1/models/fit",
        {"modelId": KNOWN_MODEL, "streams": 0, "profile": "llamaServer"},
    ),
    "fit of 0 streams under the running profile": (
        "/v1/models/fit",
        {"modelId": KNOWN_MODEL, "streams": 0, "profile": "running"},
    ),
    # a 500: Ollama's ubatch tier of the negative context of negative streams found none (estimator/profiles.py)
    "plan of negative streams under the ollama profile": (
        "/v1/models/fit/plan",
        [{"modelId": KNOWN_MODEL, "streams": -2628600, "profile": "ollama"}],
    ),
}


@pytest.mark.parametrize("name", FOUND)
def test_found_cases_keep_the_contract(name: str, contract_app: ASGIApp) -> None:
    path, body = FOUND[name]
    case = schema[path]["POST"].Case(body=body, media_type="application/json")
    case.call_and_validate(headers=AUTH, checks=ALL_CHECKS, app=contract_app)


def _estimate(contract_app: ASGIApp, body: dict[str, Any]) -> dict[str, Any]:
    """The estimate of a fit answer (its budget is read anew per request)."""
    response = TestClient(contract_app).post("/v1/models/fit", json=body, headers=AUTH)
    assert response.status_code == 200, response.text
    return response.json()["estimate"]


@pytest.mark.parametrize(
    "field, value", [("allocated_tokens", 65536), ("key_element_bytes", "x"), ("ubatch_tokens", 1)]
)
def test_python_field_names_on_the_wire_are_unknown_properties(
    contract_app: ASGIApp, field: str, value: object
) -> None:
    """The spec names the fields in camelCase: a snake_case name is a property it does not name, a 400 that
    names it (since 1.10.0; before, ignored), never taken for the field nor refused for its value."""
    plain = _estimate(contract_app, {"modelId": KNOWN_MODEL})
    response = TestClient(contract_app).post(
        "/v1/models/fit", json={"modelId": KNOWN_MODEL, field: value}, headers=AUTH
    )
    assert response.status_code == 400 and response.json()["type"] == "invalidRequest"
    assert repr(field) in response.json()["detail"]
    camel = field.split("_")[0] + "".join(w.title() for w in field.split("_")[1:])
    if isinstance(value, int):  # the spec's name for it is read, and moves the answer
        assert _estimate(contract_app, {"modelId": KNOWN_MODEL, camel: value}) != plain
