"""Caches that are never wrong: keyed by file identity, kept across restarts, refreshed when a file changes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from memfit import wire
from memfit.estimator import artifact_cache
from memfit.estimator.fit_service import FitService
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.gguf_writers import gemma3_4b, llama_gqa, qwen3, write_model


def _weights(client, model_id: str) -> tuple[int, int]:
    result = client.post("/v1/models/fit", json={"modelId": model_id}).json()
    return result["estimate"]["parts"][0]["bytes"], result["identity"]["artifactBytes"]


def test_a_file_changed_under_a_running_server_gets_a_new_answer(tmp_path: Path) -> None:
    path = tmp_path / "changing.gguf"
    write_model(llama_gqa(), path)
    with LiveServer(build_service([Root(str(tmp_path), RootKind.PLAIN)])) as server, server.client() as c:
        first = _weights(c, "changing")
        write_model(qwen3(), path)  # replaced in place under the same name
        replaced = _weights(c, "changing")
        assert replaced != first and replaced[1] == os.path.getsize(path)
        with open(path, "ab") as f:  # grown: a new size is a new identity
            f.write(b"\0" * 4096)
        grown = _weights(c, "changing")
        assert grown == (replaced[0], replaced[1] + 4096)
        assert _weights(c, "changing") == grown  # and a cache hit now


def test_a_restarted_server_is_warm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models, store_path = tmp_path / "models", str(tmp_path / "state" / "headers.sqlite3")
    models.mkdir()
    write_model(gemma3_4b(), models / "big.gguf")  # a 262k-token vocabulary: the header read that costs
    request = [WireFitVerdictRequest(model_id="big")]

    def service() -> FitService:
        fresh = build_service([Root(str(models), RootKind.PLAIN)], state_dir=os.path.dirname(store_path))
        fresh.index.refresh()
        return fresh

    first = wire.fit_batch(service(), request).results[0]

    def no_reading(path: str):
        raise AssertionError(f"{path} was read again")

    monkeypatch.setattr(artifact_cache, "read_header", no_reading)
    restarted = wire.fit_batch(service(), request).results[0]  # a new process would start with this store
    assert restarted.estimate == first.estimate

    time.sleep(0.01)
    os.utime(models / "big.gguf")  # touched: a new mtime is a new identity, so the store has no summary
    with pytest.raises(AssertionError, match="read again"):
        wire.fit_batch(service(), request)
