"""schemathesis fuzzes the running app against openapi.yaml, every check enabled, positive and negative cases."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, load_all_checks

from memfit.app import create_app
from memfit.estimator.history import History
from memfit.estimator.registry import ModelIndex
from memfit.readers.history_db import HistoryDB
from memfit.readers.model_roots import Root, RootKind
from memfit.estimator.service import FitService
from tests.conftest import AUTH, TOKEN
from tools.gguf_writers import gemma3_swa, qwen3, write_model

load_all_checks()
ALL_CHECKS = list(CHECKS.get_all())

MODELS = Path(tempfile.mkdtemp(prefix="memfit-contract-"))
atexit.register(shutil.rmtree, MODELS, ignore_errors=True)
write_model(qwen3(), MODELS / "qwen3-f16.gguf")
write_model(gemma3_swa(), MODELS / "gemma3-swa-f16.gguf")

config = schemathesis.Config()
config.projects.default.generation.update(modes=[schemathesis.GenerationMode.POSITIVE,
                                                 schemathesis.GenerationMode.NEGATIVE])
schema = schemathesis.openapi.from_asgi(
    "/v1/openapi.json",
    create_app(FitService(ModelIndex([Root(str(MODELS), RootKind.PLAIN)]),
                          history=History(HistoryDB(str(MODELS / "history.sqlite3")))), TOKEN, validate_responses=True),
    config=config)


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
def test_contract(case: schemathesis.Case) -> None:
    _known_model(case)
    case.call_and_validate(headers=AUTH, checks=ALL_CHECKS)
