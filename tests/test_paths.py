"""A model id is looked up, never used as a path: nothing outside the model roots is ever opened."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from memfit.readers.model_roots import Root, RootKind
from memfit.service.index import ModelIndex
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.gguf_writers import qwen3, write_model

OPENED: list[str] = []
AUDITING = {"on": False}


def _audit(event: str, args: tuple) -> None:
    if AUDITING["on"] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)

HOSTILE_IDS = [
    "../../etc/passwd",
    "/etc/passwd",
    "..%2F..%2Fetc%2Fpasswd",
    "%2e%2e/outside/secret",
    "escape",
    "../outside/secret",
    "models/../../outside/secret",
    "secret",
    "a\u0000b",
    "x" * 10_000,
    "file:///etc/passwd",
    "C:\\Windows\\win.ini",
    "~/.ssh/id_rsa",
    "",
    ".",
    "..",
    "./good",
]


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("paths")
    models, outside = base / "models", base / "outside"
    models.mkdir()
    outside.mkdir()
    write_model(qwen3(), models / "good.gguf")
    write_model(qwen3(), outside / "secret.gguf")
    (models / "escape.gguf").symlink_to(outside / "secret.gguf")  # a symlink out of the root
    (models / "sub").mkdir()
    (models / "sub" / "up").symlink_to(outside, target_is_directory=True)  # a directory symlink out of it
    return models, outside


def test_hostile_ids_are_never_opened(layout: tuple[Path, Path]) -> None:
    models, outside = layout
    OPENED.clear()
    AUDITING["on"] = True  # from the start: the index thread reads new files' headers in the background
    with LiveServer(build_service([Root(str(models), RootKind.PLAIN)])) as server, server.client() as c:
        try:
            batch = c.post(
                "/v1/models/fit/batch", json=[{"modelId": i} for i in HOSTILE_IDS[:31]] + [{"modelId": "good"}]
            )
            singles = [c.post("/v1/models/fit", json={"modelId": i}).status_code for i in HOSTILE_IDS]
            listing = c.get("/v1/models").json()["models"]
        finally:
            AUDITING["on"] = False
    assert batch.status_code == 200
    assert [r["modelId"] for r in batch.json()["results"]] == ["good"]
    assert singles == [404] * len(HOSTILE_IDS)
    assert not any(m["modelId"] in ("escape", "sub/up/secret") for m in listing)
    real_outside = os.path.realpath(outside)
    assert not [p for p in OPENED if os.path.realpath(p).startswith(real_outside) or "passwd" in p], OPENED
    assert all(os.path.realpath(p).startswith(os.path.realpath(models)) for p in OPENED if p.endswith(".gguf"))
    assert any(p.endswith("good.gguf") for p in OPENED)  # the audit saw the model that was read


def test_an_index_never_lists_files_outside_its_roots(layout: tuple[Path, Path]) -> None:
    models, outside = layout
    index = ModelIndex([Root(str(models), RootKind.PLAIN)])
    index.refresh()
    paths = [p for a in index.artifacts() for p in a.paths]
    assert [Path(p).name for p in paths] == ["good.gguf"]
