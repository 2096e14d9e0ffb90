"""A batch whose client goes away, or whose server stops, is cancelled: its remaining work does not run."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import httpx
import pytest

from memfit.readers.model_roots import LocalArtifact, Root, RootKind
from memfit.service.index import ModelIndex
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.gguf_writers import PUBLIC_SET

# 32 models (a request looks each model it names up once): the public set's, then ids naming none
BATCH = [{"modelId": model_id} for model_id in (*PUBLIC_SET, *(f"absent-{i}" for i in range(32 - len(PUBLIC_SET))))]


class SlowIndex(ModelIndex):
    """Looking a model up takes 0.1 s, so a 32-model batch takes over three seconds."""

    def __init__(self, root: Path) -> None:
        super().__init__([Root(str(root), RootKind.PLAIN)])
        self.lookups = 0

    def _warm(self, artifacts: tuple[LocalArtifact, ...] | None = None) -> None:
        """No background listing: every lookup counted is the batch's."""

    def get(self, model_id: str) -> LocalArtifact | None:
        self.lookups += 1
        time.sleep(0.1)
        return super().get(model_id)


def test_a_client_that_goes_away_cancels_its_batch(public_models: Path, caplog: pytest.LogCaptureFixture) -> None:
    index = SlowIndex(public_models)
    with caplog.at_level(logging.WARNING, logger="memfit.http"), LiveServer(build_service(index=index)) as server:
        with server.client() as client, pytest.raises(httpx.ReadTimeout):
            client.post("/v1/models/fit/batch", json=BATCH, timeout=0.5)
        time.sleep(0.6)  # the worker notices between two models
        stopped_at = index.lookups
        time.sleep(0.5)
        assert index.lookups == stopped_at < 16  # no further work, far from the 32 lookups of the whole batch
        with server.client() as client:  # the server still answers
            assert client.get("/health").status_code == 200
    assert any("499 cancelled" in r.getMessage() and "client went away" in r.getMessage() for r in caplog.records)


def test_a_stopping_server_cancels_the_batch_in_flight(public_models: Path, caplog: pytest.LogCaptureFixture) -> None:
    index = SlowIndex(public_models)
    server = LiveServer(build_service(index=index))
    # uvicorn annotates an int, and waits for it with asyncio.wait_for, which takes any number of seconds
    server.server.config.timeout_graceful_shutdown = 0.3  # type: ignore[assignment]
    responses: list[httpx.Response | Exception] = []

    def post() -> None:
        with server.client() as client:
            try:
                responses.append(client.post("/v1/models/fit/batch", json=BATCH, timeout=10))
            except httpx.HTTPError as exc:
                responses.append(exc)

    with caplog.at_level(logging.WARNING, logger="memfit.http"), server:
        sender = threading.Thread(target=post)
        sender.start()
        time.sleep(0.5)
    sender.join(timeout=10)
    stopped_at = index.lookups
    time.sleep(0.5)
    assert index.lookups == stopped_at < 32
    assert any("499 cancelled" in r.getMessage() and "server stopped" in r.getMessage() for r in caplog.records)
    response = responses[0]
    if isinstance(response, httpx.Response):  # the 499 reached the client before the connection closed
        assert response.status_code == 499 and response.json()["type"] == "cancelled"
