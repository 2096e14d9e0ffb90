"""The fit batch's JSON put together from kept fragments (memfit/wire_json.py) is, byte for byte, the generated
model's own dump of the same answer: cold and warm, with and without GPUs, for refusals, unreadable files, shared
file sets, profiles, placements and ids no model answers to."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit import wire, wire_json
from memfit.estimator.machine import HostMemory
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.declared_gpus import declared_gpus
from memfit.readers.model_roots import Root, RootKind
from memfit.service.answers import Settings
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service

GIB = 1 << 30


def _service(models: Path, settings: Settings | None) -> FitService:
    service = build_service(
        [Root(str(models), RootKind.PLAIN)],
        settings=settings,
        read_host=lambda: HostMemory(available=48 << 20, total=16 * GIB),  # one reading for both; verdicts vary
        read_committed=lambda: None,
    )
    service.index.refresh()
    return service


def _batches(ids: list[str]) -> list[list[dict]]:
    first = "llama-gqa-f16"
    return [
        [{"modelId": i} for i in ids],  # broken/garbage among them: unreadable
        [
            {"modelId": first, "allocatedTokens": 2048},
            {"modelId": first, "allocatedTokens": 8192, "streams": 2},  # its file set twice: sharedKey
            {"modelId": first, "allocatedTokens": 1 << 30},  # past the model's limit: refused
            {"modelId": "no/such-model"},  # left out
            {"modelId": ids[-1], "profile": "ollama"},
            {"modelId": ids[1], "profile": "llamaServer", "gpuLayers": 2, "cpuVariant": "any"},
            {"modelId": ids[2], "keyElementBytes": 1, "flashAttention": "on", "kvOffload": False},
        ],
    ]


@pytest.mark.parametrize("gpus", [None, ["cuda:24GiB", "cuda:8GiB:6GiB"], ["metal:48GiB:40GiB"]])
def test_the_spliced_batch_is_the_models_dump(public_models: Path, gpus: list[str] | None) -> None:
    settings = Settings(gpus=declared_gpus(gpus, {})) if gpus else None
    service = _service(public_models, settings)
    ids = [e.model_id for e in service.model_list() if e.source == "local"]
    assert len(ids) > 3 and "llama-gqa-f16" in ids and "broken/garbage" in ids
    for body in _batches(ids):
        requests = [WireFitVerdictRequest.model_validate(item) for item in body]
        for _ in range(2):  # cold, then from the kept fragments
            spliced = wire_json.fit_batch_json(service, requests)
            assert spliced == wire.fit_batch(service, requests).model_dump_json(by_alias=True).encode()
