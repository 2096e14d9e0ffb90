"""The fit batch's JSON put together from kept fragments (memfit/wire_json.py) is, byte for byte, the generated
model's own dump of the same answer: cold and warm, with and without GPUs, for refusals, unreadable files, shared
file sets, profiles, placements and ids no model answers to; and so is the model listing's."""

from __future__ import annotations

import json
import random
from pathlib import Path

import httpx
import pytest

from memfit import wire, wire_json
from memfit.estimator.fit_types import ModelEntry
from memfit.estimator.machine import HostMemory
from memfit.estimator.vocabulary import ModelSource
from memfit.generated import models
from memfit.generated.models import WireFitVerdictRequest
from memfit.handlers import fit
from memfit.handlers.context import parse
from memfit.readers.declared_gpus import declared_gpus
from memfit.readers.model_roots import Root, RootKind
from memfit.service.answers import Settings
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tests.conftest import LiveServer

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
            spliced = wire_json.fit_batch_json(service, wire_json.batch_of(requests))
            assert spliced == wire.fit_batch(service, requests).model_dump_json(by_alias=True).encode()


def _post(client: httpx.Client, body: bytes, content_type: str) -> httpx.Response:
    return client.post("/v1/models/fit/batch", content=body, headers={"Content-Type": content_type})


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (
            [{"modelId": "llama-gqa-f16"}, {"modelId": "llama-gqa-f16", "allocatedTokens": 1 << 30}, {"modelId": "x"}],
            200,
        ),
        ([{"modelId": "llama-gqa-f16"}] * 33, 400),  # past maxItems
        ([], 400),  # an empty batch
        ([{"modelId": "llama-gqa-f16", "streams": "two"}], 400),
        ([{"modelId": 5}], 400),
        ({"modelId": "llama-gqa-f16"}, 400),  # not an array
    ],
)
def test_a_batch_answered_without_connexion_is_connexions_answer(
    public_models: Path, body: object, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DirectBatch takes an `application/json` body; with a charset in its content type, connexion answers the
    same request (DirectBatch declines it): the same status, headers and bytes, a problem included."""
    parsed: list[object] = []  # the requests connexion's handler parsed

    def counted(model: type[WireFitVerdictRequest], item: object) -> WireFitVerdictRequest:
        parsed.append(item)
        return parse(model, item)

    monkeypatch.setattr(fit, "parse", counted)
    with LiveServer(_service(public_models, None)) as server, server.client() as client:
        raw = json.dumps(body).encode()
        direct = _post(client, raw, "application/json")
        assert parsed == []  # answered without connexion, or refused by it before its handler
        through = _post(client, raw, "application/json; charset=utf-8")
        assert parsed == (body if status == 200 else [])
    assert direct.status_code == through.status_code == status
    assert direct.content == through.content
    assert {k: v for k, v in direct.headers.items() if k != "date"} == {
        k: v for k, v in through.headers.items() if k != "date"
    }


def test_a_kept_parse_answers_only_its_own_body(public_models: Path) -> None:
    """DirectBatch keeps a body's parse by its bytes: each body, sent again, gets its own workload's answer."""

    def kv(client: httpx.Client, tokens: int) -> int:
        raw = json.dumps([{"modelId": "llama-gqa-f16", "allocatedTokens": tokens}]).encode()
        (result,) = _post(client, raw, "application/json").json()["results"]
        return next(p["bytes"] for p in result["estimate"]["parts"] if p["component"] == "kvCache")

    with LiveServer(_service(public_models, None)) as server, server.client() as client:
        first = [kv(client, 2048), kv(client, 4096)]
        assert first[1] == 2 * first[0]  # a full-attention model: the cache grows with the context
        assert [kv(client, 2048), kv(client, 4096)] == first


def test_a_large_body_is_left_to_connexion(public_models: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body past DirectBatch's size is parsed once, by connexion (never twice on the event loop)."""
    parsed: list[object] = []

    def counted(model: type[WireFitVerdictRequest], item: object) -> WireFitVerdictRequest:
        parsed.append(item)
        return parse(model, item)

    monkeypatch.setattr(fit, "parse", counted)
    body = [{"modelId": "llama-gqa-f16"}]
    raw = json.dumps(body).encode() + b" " * fit.DIRECT_BODY_BYTES  # valid JSON, past the size
    with LiveServer(_service(public_models, None)) as server, server.client() as client:
        assert _post(client, raw, "application/json").status_code == 200
    assert parsed == body


def _text(rng: random.Random) -> str:
    """Text as file names and headers may give it: quotes, backslashes, control characters, U+2028, non-BMP."""
    return "".join(rng.choice('a/-_.:"\\\n\t\x00\x1f\x7f é\u2028😀') for _ in range(rng.randrange(0, 12)))


def _entries(rng: random.Random) -> list[ModelEntry]:
    maybe = lambda value: rng.choice((None, value))  # noqa: E731
    return [
        ModelEntry(
            model_id=_text(rng),
            source=rng.choice(list(ModelSource)),
            root=_text(rng),
            architecture=_text(rng),
            quant=_text(rng),
            revision=_text(rng),
            artifact_bytes=maybe(rng.choice((0, 1, 2**63 - 1, rng.randrange(2**40)))),
            context_limit=maybe(rng.randrange(2**31)),
            has_projector=rng.random() < 0.5,
            unreadable=maybe(_text(rng)),
            weights_bytes=maybe(rng.randrange(2**40)),
            reading=rng.choice((None, True)),
            loaded_by=rng.choice(((), ((rng.randrange(1, 2**22), maybe(rng.randrange(1, 65536))),))),
        )
        for _ in range(rng.randrange(0, 40))
    ]


def test_the_listing_written_field_by_field_is_the_models_dump(public_models: Path) -> None:
    """GET /v1/models' body is written from the entries without a model per entry: the same bytes as the generated
    model's dump, on a real listing and on 200 made-up ones (fixed seed) with every field's kinds of values."""
    listings = [list(_service(public_models, None).model_list())]
    rng = random.Random(28)
    listings += [_entries(rng) for _ in range(200)]
    for entries in listings:
        dumped = models.WireModelList(models=[wire.model_entry(e) for e in entries])
        assert wire_json.models_json(entries, models) == dumped.model_dump_json(by_alias=True).encode()


def _reading_service(models: Path, readings: list[int]) -> FitService:
    """A service whose host reads `available` from `readings`, one per request, in turn."""
    service = build_service(
        [Root(str(models), RootKind.PLAIN)],
        read_host=lambda: HostMemory(available=readings.pop(0), total=16 * GIB),
        read_committed=lambda: None,
    )
    service.index.refresh()
    return service


def test_a_batch_judged_again_follows_each_reading(public_models: Path) -> None:
    """A repeated batch is judged and dumped once per reading of the host (Answers.judge and wire_json keep the
    last ones): an equal reading gives the kept bytes, another reading its own budget and verdicts, and each answer
    is the one a service that saw only that reading gives."""
    low, high = 1 << 20, 12 * GIB  # the tiny f16 model's weights alone are past 1 MiB, and well within 12 GiB
    readings = [high, high, low, high]
    service = _reading_service(public_models, list(readings))
    batch = wire_json.batch_of([WireFitVerdictRequest.model_validate({"modelId": "llama-gqa-f16"})] * 2)
    answers = [wire_json.fit_batch_json(service, batch) for _ in readings]
    assert answers[1] is answers[0]  # the same reading: the kept bytes
    assert answers[3] == answers[0]
    for answer, available in zip(answers, readings, strict=True):
        alone = wire_json.fit_batch_json(_reading_service(public_models, [available]), batch)
        assert answer == alone
        results = json.loads(answer)["results"]
        assert [r["budget"]["bytes"] for r in results] == [available] * 2
        assert {r["verdict"] for r in results} == {"good" if available == high else "oversize"}


def test_a_kept_batch_writes_the_left_out_it_is_given(public_models: Path) -> None:
    """The same results with another `leftOut` (its suggestions changed as models came) are dumped again."""
    service = _service(public_models, None)
    results = service.fit_batch(wire_json.batch_of([WireFitVerdictRequest(model_id="llama-gqa-f16")]).fits)
    none = wire_json.batch_json(results, [], models)
    left = [models.WireLeftOut(model_id="llama-gqa", suggestions=models.Suggestions(["llama-gqa-f16"]))]
    named = wire_json.batch_json(results, left, models)
    assert json.loads(none)["leftOut"] == []
    assert json.loads(named)["leftOut"] == [{"modelId": "llama-gqa", "suggestions": ["llama-gqa-f16"], "reason": None}]
