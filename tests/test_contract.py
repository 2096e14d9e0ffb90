"""schemathesis fuzzes the running app against openapi.yaml, every check enabled, positive and negative cases."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, load_all_checks
from starlette.types import ASGIApp

from memfit.app import create_app
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tests.conftest import AUTH, TOKEN
from tools.gguf_writers import gemma3_swa, qwen3, write_model

load_all_checks()
ALL_CHECKS = list(CHECKS.get_all())

config = schemathesis.Config()
config.projects.default.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
)
# The spec is read at collection from an app over no models and no files (what it serves does not depend on
# them); every case is sent to `contract_app`, the same app over two written models and a history database.
schema = schemathesis.openapi.from_asgi(
    "/v1/openapi.json", create_app(build_service(), TOKEN, validate_responses=True), config=config
)


@pytest.fixture(scope="module")
def contract_app(tmp_path_factory: pytest.TempPathFactory) -> ASGIApp:
    models = tmp_path_factory.mktemp("contract-models")
    write_model(qwen3(), models / "qwen3-f16.gguf")
    write_model(gemma3_swa(), models / "gemma3-swa-f16.gguf")
    return create_app(
        build_service([Root(str(models), RootKind.PLAIN)], state_dir=str(models)), TOKEN, validate_responses=True
    )


def _known_model(case: schemathesis.Case) -> None:
    """Point a valid generated request at a model that exists, so the fuzzed workloads reach the estimator."""
    if case.meta is not None and case.meta.generation.mode is not schemathesis.GenerationMode.POSITIVE:
        return
    items = case.body if isinstance(case.body, list) else [case.body]
    for item in items[:1]:
        if isinstance(item, dict) and isinstance(item.get("modelId"), str):
            item["modelId"] = "qwen3-f16"


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_contract(case: schemathesis.Case, contract_app: ASGIApp) -> None:
    _known_model(case)
    case.call_and_validate(headers=AUTH, checks=ALL_CHECKS, app=contract_app)
