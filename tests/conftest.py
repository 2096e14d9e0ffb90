from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from memfit.app import create_app
from memfit.http.server import server_config
from memfit.readers.model_roots import Root, RootKind
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tools.gguf_writers import PUBLIC_SET, write_model

# No test reaches the real Hugging Face Hub: the CLI and `memfit serve` ask it by default (the subprocesses tests start
# inherit this); the tests of Hub lookups point HF_ENDPOINT at tools/hub_server.py's local Hub and lift it.
os.environ["HF_HUB_OFFLINE"] = "1"

TOKEN = "test-token-1f0e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="session")
def public_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The public ground-truth set as sparse GGUF files, plus two broken files under broken/."""
    directory = tmp_path_factory.mktemp("public-models")
    for name, build in PUBLIC_SET.items():
        write_model(build(), directory / f"{name}.gguf")
    broken = directory / "broken"
    broken.mkdir()
    (broken / "garbage.gguf").write_bytes(b"this is not a gguf file" * 10)
    whole = (directory / "llama-gqa-f16.gguf").read_bytes()[:100_000]
    (broken / "truncated.gguf").write_bytes(whole)  # header intact, tensor data missing
    return directory


class LiveServer:
    """A real uvicorn server on 127.0.0.1 in a background thread, answering with response validation on."""

    def __init__(self, service: FitService, token: str = TOKEN, *, metrics_public: bool = False, **config: Any) -> None:
        """`config`: server_config's settings for this server (a lower connection cap, longer timeouts)."""
        self.service = service
        self.app = create_app(service, token, validate_responses=True, metrics_public=metrics_public)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server_config(self.app, "127.0.0.1", self.port, log_level="warning", **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def client(self, token: str | None = TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture(scope="session")
def live(public_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    service = build_service(
        [Root(str(public_models), RootKind.PLAIN)], state_dir=str(tmp_path_factory.mktemp("history"))
    )
    with LiveServer(service) as server:
        yield server


@pytest.fixture
def client(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client() as c:
        yield c


@pytest.fixture(autouse=True, scope="session")
def _isolated_state(tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test touches the user's real state directory, token or model caches."""
    os.environ["MEMFIT_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    os.environ.pop("MEMFIT_TOKEN", None)
    os.environ.pop("MEMFIT_MODELS", None)


@pytest.fixture(scope="session")
def rebuilt() -> list[Any]:
    """Every measured run whose graph estimator/compute_graph.py rebuilds (tests/rebuilt_runs.py): shared by the
    replay's tests, loaded once."""
    from tests.rebuilt_runs import rebuilt_runs

    return rebuilt_runs()
