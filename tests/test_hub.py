"""Ids of the Hugging Face Hub, answered from the real header of the repository's files, read by HTTP Range requests
from a local Hub (tools/hub_server.py: the Hub's routes over real GGUF files, on 127.0.0.1) through
huggingface_hub; never the network.

The remote answer is the answer for the same file on disk, part by part and byte for byte (its weights
`derivedLayout` where the file's are `measuredArtifact`, and `artifactNotOnDisk`); what it fetched is counted by the
local Hub and bounded: the header and at most one read window more per file, a few requests; a second ask, and an
offline one, fetch nothing; every fault (401, 404, 416, a Range ignored, an ETag that moves, a Hub too slow, a
hostile file) degrades that model only, with the reason, never the batch.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfit import wire
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.gguf_header import GGUFError, read_header, read_sized
from memfit.readers.hub import WINDOW, RangedFile, hub_id, hub_library
from memfit.readers.model_roots import Root, RootKind
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tests.test_discovery import projector
from tools.gguf_writers import gemma3_4b, llama_gqa, qwen3, write_model, write_split_model
from tools.hostile import MUTATIONS, base_header, mutate
from tools.hub_server import TOKEN, HubRepo, LocalHub, Request

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repositories' files, as a plain model directory would hold them (the answers on disk compare)."""
    d = tmp_path_factory.mktemp("hub-files")
    for folder in ("gemma", "split/Q8_0", "multi", "tiny", "broken", "hostile"):
        (d / folder).mkdir(parents=True)
    write_model(gemma3_4b(), d / "gemma" / "gemma-3-4b-it-Q4_K_M.gguf")  # a real vocabulary: a 6.7 MB header
    write_model(projector(), d / "gemma" / "mmproj-F16.gguf")
    write_split_model(qwen3(), d / "split" / "Q8_0" / "Split-Q8_0.gguf", 16)  # three splits, each its own tensors
    for quant in ("Q4_K_M", "Q6_K", "Q8_0", "UD-Q4_K_XL"):
        write_model(qwen3(), d / "multi" / f"Multi-{quant}.gguf")
    write_model(llama_gqa(), d / "tiny" / "Tiny-Q4_K_M.gguf")
    (d / "broken" / "Broken-Q4_K_M.gguf").write_bytes(b"GGUF" + b"\xff" * 4000)
    base = base_header()
    for i, mutation in enumerate(MUTATIONS):
        (d / "hostile" / f"{mutation}-Q4_K_M.gguf").write_bytes(mutate(base, mutation, i * 37, i * 2**58 + 11))
    return d


def _repos(d: Path) -> list[HubRepo]:
    def files(folder: str) -> dict[str, Path]:
        return {str(p.relative_to(d / folder)): p for p in sorted((d / folder).rglob("*.gguf"))}

    tiny = files("tiny")
    repos = [
        HubRepo("acme/Gemma-Shape-GGUF", files("gemma")),
        HubRepo("acme/Split-GGUF", files("split")),
        HubRepo("acme/Multi-GGUF", files("multi")),
        HubRepo("acme/Tiny-GGUF", tiny),
        HubRepo("acme/Broken-GGUF", files("broken")),
        HubRepo("acme/Gated-GGUF", tiny, gated=True),
        HubRepo("acme/Private-GGUF", tiny, private=True),
        HubRepo("acme/Norange-GGUF", tiny, fault="ignore-range"),
        HubRepo("acme/Refused-GGUF", tiny, fault="416"),
        HubRepo("acme/Moving-GGUF", {"G-Q4_K_M.gguf": d / "gemma" / "gemma-3-4b-it-Q4_K_M.gguf"}, fault="etag-change"),
        HubRepo("acme/Slow-GGUF", tiny, fault="slow", delay=3.0),
        HubRepo("acme/Direct-GGUF", tiny, gated=True, fault="same-origin"),
        # a repository the catalog knows, publishing other files than the catalog lists
        HubRepo("Qwen/Qwen3-8B-GGUF", {"Qwen3-8B-UD-Q4_K_XL.gguf": d / "multi" / "Multi-UD-Q4_K_XL.gguf"}),
        HubRepo("Qwen/Qwen3-0.6B-GGUF", tiny, fault="416"),  # known to the catalog, broken on the Hub
    ]
    repos += [HubRepo(f"hostile/{p.stem}", {p.name: p}) for p in sorted((d / "hostile").glob("*.gguf"))]
    repos += [HubRepo(f"slow/S{i}-GGUF", tiny, fault="slow", delay=2.0) for i in range(8)]
    repos += [HubRepo(f"many/M{i:02d}-GGUF", tiny) for i in range(32)]
    return repos


@pytest.fixture(scope="module")
def hub(files: Path) -> Iterator[LocalHub]:
    with LocalHub(_repos(files)) as local_hub:
        yield local_hub


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch, hub: LocalHub) -> LocalHub:
    """The suite sets HF_HUB_OFFLINE=1 so that nothing reaches the real Hub (conftest), which huggingface_hub read
    when this process imported it; lifted here, for services whose endpoint is the local Hub."""
    monkeypatch.setattr(hub_library().constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    hub.taken()
    return hub


def _hub_service(hub: LocalHub, state: Path, **settings: Any) -> FitService:
    from memfit.readers.hub import HubSettings

    return build_service(state_dir=str(state), hub=HubSettings(endpoint=hub.endpoint, **settings))


def _fit(service: FitService, *model_ids: str) -> Any:
    return wire.fit_batch(service, [WireFitVerdictRequest(model_id=m, allocated_tokens=4096) for m in model_ids])


def _local(files: Path, *model_ids: str) -> dict[str, Any]:
    service = build_service([Root(str(files), RootKind.PLAIN)])
    service.index.refresh()
    return {r.model_id: r for r in _fit(service, *model_ids).results}


def assert_same_answer(remote: Any, local: Any, commit: str) -> None:
    """The remote answer is the file's on disk, part by part and byte for byte; only what says where the bytes came
    from differs: `derivedLayout` for the measured file's bytes, no artifact bytes, `artifactNotOnDisk`."""
    r, lo = remote.estimate, local.estimate
    assert (r.lower_bound_bytes, r.upper_bound_bytes) == (lo.lower_bound_bytes, lo.upper_bound_bytes)
    assert [(p.component, p.bytes, p.upper_bytes) for p in r.parts] == [
        (p.component, p.bytes, p.upper_bytes) for p in lo.parts
    ]
    for rp, lp in zip(r.parts, lo.parts, strict=True):
        assert rp.basis == ("derivedLayout" if lp.basis == "measuredArtifact" else lp.basis), rp.component
    assert r.parts[0].note.startswith(lo.parts[0].note.split("; on llama.cpp's")[0])
    for field in ("quant", "context_limit"):
        assert getattr(remote.identity, field) == getattr(local.identity, field)
    assert remote.identity.artifact_bytes is None and local.identity.artifact_bytes > 0
    assert remote.identity.revision == commit
    assert set(remote.limits) == set(local.limits) | {"artifactNotOnDisk"}
    assert remote.verdict == local.verdict or "unknown" in (remote.verdict, local.verdict)


def _commit(hub: LocalHub, name: str) -> str:
    """The commit the local Hub serves `name` at."""
    repo = hub.repo(name)
    assert repo is not None
    return repo.commit


def _fetched(requests: list[Request]) -> tuple[int, int, int]:
    """(body bytes the storage sent, requests to the storage, requests to the Hub)."""
    storage = [q for q in requests if q.server == "storage"]
    return sum(q.sent for q in storage), len(storage), len(requests) - len(storage)


def _header_bytes(*paths: Path) -> int:
    return sum(read_header(p).data_offset for p in paths)


# --- exact: the same answer as the file on disk --------------------------------------------------------------------


def test_a_hub_id_answers_what_the_same_files_on_disk_answer(online: LocalHub, files: Path, tmp_path: Path) -> None:
    service = _hub_service(online, tmp_path)
    batch = _fit(service, "acme/Gemma-Shape-GGUF:Q4_K_M", "acme/Split-GGUF:Q8_0", "acme/tiny-gguf")
    assert batch.left_out == []
    local = _local(files, "gemma/gemma-3-4b-it-Q4_K_M", "split/Q8_0/Split-Q8_0", "tiny/Tiny-Q4_K_M")
    gemma, split, tiny = batch.results
    assert gemma.identity.model_id == "acme/Gemma-Shape-GGUF:Q4_K_M"
    assert tiny.identity.model_id == "acme/Tiny-GGUF:Q4_K_M"  # the default quant, the repository as the Hub names it
    for remote, on_disk, repo in (
        (gemma, local["gemma/gemma-3-4b-it-Q4_K_M"], "acme/Gemma-Shape-GGUF"),
        (split, local["split/Q8_0/Split-Q8_0"], "acme/Split-GGUF"),
        (tiny, local["tiny/Tiny-Q4_K_M"], "acme/Tiny-GGUF"),
    ):
        commit = _commit(online, repo)
        assert_same_answer(remote, on_disk, commit)
        weights = remote.estimate.parts[0]
        assert f"{repo} at {commit[:12]}" in weights.note and "bytes fetched in" in weights.note
    companions = gemma.estimate.parts[-1]
    assert companions.component == "companions" and companions.bytes > 0 and "mmproj-F16.gguf" in companions.note
    assert "3 splits" not in split.estimate.parts[0].note and "and 2 more splits" in split.estimate.parts[0].note

    # what it took: the headers and at most one window more per file, in a few requests
    sent, storage_requests, hub_requests = _fetched(online.taken())
    read = [*(files / "gemma").glob("*.gguf"), files / "tiny" / "Tiny-Q4_K_M.gguf"]
    read += sorted((files / "split").rglob("*.gguf"))
    assert _header_bytes(*read) <= sent <= _header_bytes(*read) + WINDOW * len(read)
    assert storage_requests <= sum(read_header(p).data_offset // WINDOW + 2 for p in read)
    assert hub_requests == 3 + len(read)  # a listing per repository, a HEAD per file


def test_a_second_ask_fetches_nothing_and_a_damaged_cache_is_read_again(
    online: LocalHub, files: Path, tmp_path: Path
) -> None:
    first = _fit(_hub_service(online, tmp_path), "acme/Split-GGUF:Q8_0").results[0]
    assert _fetched(online.taken())[0] > 0
    again = _fit(_hub_service(online, tmp_path), "acme/Split-GGUF:Q8_0").results[0]  # a new process, the same state
    assert online.taken() == []
    assert again.estimate == first.estimate.model_copy(update={"parts": again.estimate.parts})
    assert [p.bytes for p in again.estimate.parts] == [p.bytes for p in first.estimate.parts]
    assert "nothing fetched for this answer" in again.estimate.parts[0].note

    with sqlite3.connect(tmp_path / "headers.sqlite3") as db:  # a record damaged on disk: read again, not believed
        db.execute("UPDATE headers SET summary = replace(summary, 'split', 'splat') WHERE identity LIKE 'hub-h%'")
    again = _fit(_hub_service(online, tmp_path), "acme/Split-GGUF:Q8_0").results[0]
    assert _fetched(online.taken())[1] >= 3  # each split's header again
    assert [p.bytes for p in again.estimate.parts] == [p.bytes for p in first.estimate.parts]


def test_offline_answers_from_the_cache_and_the_catalog_and_fetches_nothing(online: LocalHub, tmp_path: Path) -> None:
    _fit(_hub_service(online, tmp_path), "acme/Tiny-GGUF:Q4_K_M")
    online.taken()
    offline = _hub_service(online, tmp_path, offline=True)
    batch = _fit(offline, "acme/Tiny-GGUF:Q4_K_M", "acme/Multi-GGUF:Q8_0", "Qwen/Qwen3-8B-GGUF:Q4_K_M")
    assert online.taken() == []
    assert [r.model_id for r in batch.results] == ["acme/Tiny-GGUF:Q4_K_M", "Qwen/Qwen3-8B-GGUF:Q4_K_M"]
    assert batch.results[0].estimate.parts[0].basis == "derivedLayout"  # the header read before
    assert "the Hub was not used" not in batch.results[1].estimate.parts[0].note  # the catalog, as without a Hub
    (left,) = batch.left_out
    assert left.model_id == "acme/Multi-GGUF:Q8_0" and "not in memfit's cache" in left.reason


def test_concurrent_services_share_one_cache(online: LocalHub, tmp_path: Path) -> None:
    answers: list[Any] = []

    def ask() -> None:
        estimate = _fit(_hub_service(online, tmp_path), "acme/Gemma-Shape-GGUF").results[0].estimate
        answers.append([(p.bytes, p.upper_bytes) for p in estimate.parts])

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 4 and all(a == answers[0] for a in answers)
    online.taken()
    _fit(_hub_service(online, tmp_path), "acme/Gemma-Shape-GGUF")
    assert online.taken() == []


# --- faults: that model only, with the reason ----------------------------------------------------------------------

FAULTS = {
    "acme/Gated-GGUF:Q4_K_M": "is gated: accept its conditions on the Hub and set HF_TOKEN",
    "acme/Private-GGUF:Q4_K_M": "has no repository acme/Private-GGUF@main (or it is private: set HF_TOKEN)",
    "acme/Nowhere-GGUF:Q4_K_M": "has no repository acme/Nowhere-GGUF@main",
    "acme/Tiny-GGUF:Q8_0": "acme/Tiny-GGUF has no Q8_0 GGUF file at main (it has Q4_K_M)",
    "acme/Tiny-GGUF:Q4_K_M@v9": "has no revision acme/Tiny-GGUF@v9",
    "acme/Norange-GGUF:Q4_K_M": "the server ignored the Range request (200, the whole file)",
    "acme/Refused-GGUF:Q4_K_M": "refused the range 0-",
    "acme/Moving-GGUF:Q4_K_M": "the file changed on the Hub while its header was read",
}


def test_every_fault_degrades_its_model_only_with_the_reason(
    online: LocalHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memfit.hub")
    service = _hub_service(online, tmp_path)
    started = time.monotonic()
    batch = _fit(service, "acme/Tiny-GGUF:Q4_K_M", *FAULTS, "Qwen/Qwen3-0.6B-GGUF:Q4_K_M", "acme/Broken-GGUF")
    assert time.monotonic() - started < 20
    answered = {r.model_id: r for r in batch.results}
    assert set(answered) == {"acme/Tiny-GGUF:Q4_K_M", "Qwen/Qwen3-0.6B-GGUF:Q4_K_M", "acme/Broken-GGUF"}
    reasons = {e.model_id: e.reason for e in batch.left_out}
    assert set(reasons) == set(FAULTS)
    for model_id, reason in FAULTS.items():
        assert reason in reasons[model_id], (model_id, reasons[model_id])
        assert model_id.partition(":")[0].split("@")[0] in caplog.text or "revision" in reason
    # a model the catalog knows is answered from it, saying why the Hub was not used
    catalog = answered["Qwen/Qwen3-0.6B-GGUF:Q4_K_M"].estimate.parts[0]
    assert catalog.basis == "derivedLayout" and "the Hub was not used" in catalog.note and "(416)" in catalog.note
    # a file on the Hub that is not a GGUF llama.cpp could load: as such a file on disk
    broken = answered["acme/Broken-GGUF"]
    assert broken.estimate.parts[0].basis == "unknown" and "artifactUnreadable" in broken.limits
    assert broken.identity.revision == _commit(online, "acme/Broken-GGUF")
    # a server that ignores Range is never read past its first bytes
    norange = [q for q in online.taken() if q.server == "storage" and q.status == 200]
    assert norange and all(q.sent < 64 << 20 for q in norange)


def test_a_gated_repository_opens_with_the_token_which_goes_to_the_hub_only(
    online: LocalHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    batch = _fit(_hub_service(online, tmp_path), "acme/Gated-GGUF:Q4_K_M", "acme/Private-GGUF", "acme/Direct-GGUF")
    assert [r.model_id for r in batch.results] == ["acme/Gated-GGUF:Q4_K_M", "acme/Private-GGUF", "acme/Direct-GGUF"]
    requests = online.taken()
    assert all(q.authorized for q in requests if q.server == "hub")
    assert not any(q.authorized for q in requests if q.server == "storage")  # another origin: never the token
    assert any(q.path.startswith("/acme/Direct-GGUF/resolve") and q.range for q in requests)  # served by the Hub
    assert TOKEN not in batch.model_dump_json() and TOKEN not in caplog.text


def test_a_slow_hub_is_waited_for_within_the_deadline_and_its_lookups_run_at_once(
    online: LocalHub, tmp_path: Path
) -> None:
    service = _hub_service(online, tmp_path, deadline_s=1.5)
    started = time.monotonic()
    batch = _fit(service, "acme/Slow-GGUF:Q4_K_M", "acme/Tiny-GGUF:Q4_K_M")
    assert time.monotonic() - started < 10
    assert [r.model_id for r in batch.results] == ["acme/Tiny-GGUF:Q4_K_M"]
    assert "did not answer within 1.5 s" in batch.left_out[0].reason

    service = _hub_service(online, tmp_path / "parallel", deadline_s=30)
    slow = [f"slow/S{i}-GGUF" for i in range(8)]  # the storage takes 2 s to answer each
    started = time.monotonic()
    batch = _fit(service, *slow)
    took = time.monotonic() - started
    assert [r.model_id for r in batch.results] == slow and took < 10, took  # one after another: 16 s or more


def test_a_batch_of_32_hub_models_is_looked_up_at_once(online: LocalHub, tmp_path: Path) -> None:
    many = [f"many/M{i:02d}-GGUF:Q4_K_M" for i in range(32)]
    batch = _fit(_hub_service(online, tmp_path), *many)
    assert [r.model_id for r in batch.results] == many and batch.left_out == []
    assert len({r.identity.revision for r in batch.results}) == 32
    requests = online.taken()
    assert len(requests) == 3 * 32  # per model: its listing, a HEAD, one ranged GET of its small header
    # 32 lookups on 8 threads: the storage saw several at once
    assert _fetched(requests)[1] == 32


def test_hostile_files_on_the_hub_degrade_only_themselves(online: LocalHub, tmp_path: Path) -> None:
    hostile = [r.repo for r in online.repos if r.repo.startswith("hostile/")]
    batch = _fit(_hub_service(online, tmp_path), *hostile[:15], "acme/Tiny-GGUF:Q4_K_M")
    assert "acme/Tiny-GGUF:Q4_K_M" in {r.model_id for r in batch.results}
    for r in batch.results[:-1]:
        assert "artifactUnreadable" in r.limits or r.estimate.parts, r.model_id
    assert len(batch.results) + len(batch.left_out) == len(hostile[:15]) + 1
    sent, _, _ = _fetched(online.taken())
    assert sent <= len(hostile) * WINDOW


def test_a_header_past_the_cap_is_not_a_model(files: Path) -> None:
    with (files / "gemma" / "gemma-3-4b-it-Q4_K_M.gguf").open("rb") as data:
        size = os.fstat(data.fileno()).st_size

        def fetch(start: int, end: int) -> bytes:
            data.seek(start)
            return data.read(end - start)

        with pytest.raises(GGUFError, match="runs past 2 MiB"):
            read_sized(RangedFile(fetch, size, cap=2 << 20), size)


def test_an_endpoint_s_credentials_are_never_shown() -> None:
    from memfit.readers.hub import HubSettings

    settings = HubSettings.from_environment(
        environ={"HF_ENDPOINT": "https://me:secret@hub.example/", "HF_HUB_OFFLINE": "1"}
    )
    assert settings.offline and settings.shown == "https://hub.example" and "secret" not in settings.shown


def test_only_hub_shaped_ids_reach_the_hub() -> None:
    plain, pull = hub_id("org/repo"), hub_id("org/repo:UD-Q4_K_XL@refs/pr/1")
    assert hub_id("org/repo:Q4_K_M@main") is not None and plain is not None and plain.tag == ""
    assert pull is not None and pull.revision == "refs/pr/1"
    for not_hub in ("../../etc/passwd", "org/../x", "/abs/path", "a/b/c", "llama3.1:8b", "org/re po", "org/r--x"):
        assert hub_id(not_hub) is None, not_hub


# --- plans: the repository's real file list -------------------------------------------------------------------------


def test_a_plan_of_a_repository_plans_its_real_files(online: LocalHub, tmp_path: Path) -> None:
    service = _hub_service(online, tmp_path)
    requests = [WireFitVerdictRequest(model_id=m) for m in ("acme/Multi-GGUF", "Qwen/Qwen3-8B-GGUF")]
    plans = wire.fit_plan(service, requests).results
    multi, qwen = ({q.model_id for q in p.quants} for p in plans)
    assert multi == {f"acme/Multi-GGUF:{q}" for q in ("Q8_0", "Q6_K", "Q4_K_M", "UD-Q4_K_XL")}
    assert qwen == {"Qwen/Qwen3-8B-GGUF:UD-Q4_K_XL"}  # what the repository publishes, not the catalog's quants
    assert all(q.fit.estimate.parts[0].basis == "derivedLayout" for p in plans for q in p.quants)

    offline = build_service(state_dir=str(tmp_path / "elsewhere"))  # no Hub: the catalog's list, as before
    plans = wire.fit_plan(offline, [WireFitVerdictRequest(model_id="Qwen/Qwen3-8B-GGUF")]).results
    assert {q.quant for q in plans[0].quants} >= {"Q4_K_M", "Q8_0"}


# --- the HTTP API and the CLI ----------------------------------------------------------------------------------------


def test_the_api_lists_models_asked_before_and_a_fault_is_never_a_500(online: LocalHub, tmp_path: Path) -> None:
    with LiveServer(_hub_service(online, tmp_path)) as server, server.client() as client:
        ok = client.post("/v1/models/fit", json={"modelId": "acme/Tiny-GGUF:Q4_K_M"})
        assert ok.status_code == 200 and ok.json()["identity"]["revision"] == _commit(online, "acme/Tiny-GGUF")
        assert "bytes fetched in 3 requests for this answer" in ok.json()["estimate"]["parts"][0]["note"]
        again = client.post("/v1/models/fit", json={"modelId": "acme/Tiny-GGUF:Q4_K_M"}).json()["estimate"]
        assert "nothing fetched for this answer" in again["parts"][0]["note"]  # each answer says what it fetched
        gated = client.post("/v1/models/fit", json={"modelId": "acme/Gated-GGUF:Q4_K_M"})
        assert gated.status_code == 404 and "is gated" in gated.json()["detail"]
        batch = client.post("/v1/models/fit/batch", json=[{"modelId": m} for m in FAULTS])
        assert batch.status_code == 200 and len(batch.json()["leftOut"]) == len(FAULTS)
        plan = client.post("/v1/models/fit/plan", json=[{"modelId": "acme/Norange-GGUF"}])
        assert plan.status_code == 200 and "ignored the Range" in plan.json()["leftOut"][0]["reason"]
        listed = client.get("/v1/models").json()["models"]
        hub = [m for m in listed if m["source"] == "hub"]
        assert [m["modelId"] for m in hub] == ["acme/Tiny-GGUF:Q4_K_M"]
        assert hub[0]["artifactBytes"] is None and hub[0]["architecture"] == "llama"
        assert listed.index(hub[0]) < next(i for i, m in enumerate(listed) if m["source"] == "catalog")


def _cli_env(hub: LocalHub, home: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFIT_", "HF_"))}
    env.update(HOME=str(home), MEMFIT_STATE_DIR=str(home / "state"), HF_HOME=str(home / "hf"), HF_ENDPOINT=hub.endpoint)
    env.update(PYTHONWARNINGS="ignore", NO_PROXY="127.0.0.1", **more)
    return env


def _memfit(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memfit.cli", *argv], env=env, capture_output=True, text=True, timeout=180, cwd=ROOT
    )


def test_memfit_fit_of_a_hub_id_is_exact_then_free_then_offline(hub: LocalHub, files: Path, tmp_path: Path) -> None:
    """The issue's test: with HF_ENDPOINT at the local Hub, `memfit fit org/repo:Q4_K_M` for a repository the
    catalog does not know answers what the file on disk answers, having fetched at most the header and one read
    window per file; a second ask fetches nothing; `--offline` fetches nothing."""
    env = _cli_env(hub, tmp_path)
    hub.taken()
    first = _memfit(env, "fit", "acme/Gemma-Shape-GGUF:Q4_K_M", "--json")
    assert first.returncode in (0, 3, 4, 5), first.stderr
    sent, storage_requests, hub_requests = _fetched(hub.taken())
    read = list((files / "gemma").glob("*.gguf"))
    assert _header_bytes(*read) <= sent <= _header_bytes(*read) + WINDOW * len(read)
    assert storage_requests <= 10 and hub_requests == 3, hub.requests  # the listing, a HEAD per file
    disk = _cli_env(hub, tmp_path / "disk", HF_HUB_OFFLINE="1")
    on_disk = _memfit(disk, "fit", "gemma-3-4b-it-Q4_K_M", "--json", "--models", str(files / "gemma"))
    remote = wire.generated().WireFitVerdictBatch.model_validate_json(first.stdout).results[0]
    local = wire.generated().WireFitVerdictBatch.model_validate_json(on_disk.stdout).results[0]
    assert_same_answer(remote, local, _commit(hub, "acme/Gemma-Shape-GGUF"))

    again = _memfit(env, "fit", "acme/Gemma-Shape-GGUF:Q4_K_M")
    assert again.returncode in (0, 3, 4, 5) and hub.taken() == []
    offline = _memfit(env, "fit", "acme/Gemma-Shape-GGUF:Q4_K_M", "acme/Tiny-GGUF:Q4_K_M", "--offline", "--json")
    assert hub.taken() == []
    assert offline.returncode == 6  # the second was never asked: not found, and the line says why
    assert "memfit: not found: 'acme/Tiny-GGUF:Q4_K_M': acme/Tiny-GGUF@main is not in memfit's cache" in offline.stderr
    assert json.loads(offline.stdout)["results"][0]["identity"]["modelId"] == "acme/Gemma-Shape-GGUF:Q4_K_M"

    switched_off = _memfit({**env, "HF_HUB_OFFLINE": "1"}, "fit", "acme/Tiny-GGUF:Q4_K_M")
    assert switched_off.returncode == 6 and hub.taken() == []

    gated = _memfit(env, "fit", "acme/Gated-GGUF:Q4_K_M")
    assert gated.returncode == 6 and "is gated: accept its conditions" in gated.stderr
    assert "Traceback" not in gated.stderr
    models = _memfit(env, "models", "acme", "--json")
    assert [m["source"] for m in json.loads(models.stdout)["models"]] == ["hub"]
    plan = _memfit(env, "plan", "acme/Multi-GGUF")
    assert plan.returncode in (0, 3, 4, 5) and "acme/Multi-GGUF:UD-Q4_K_XL" in plan.stdout, plan.stderr


def test_memfit_serve_asks_the_hub_unless_offline_and_logs_why_a_model_was_left_out(
    hub: LocalHub, tmp_path: Path
) -> None:
    env = _cli_env(hub, tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "memfit.cli", "serve", "--port", str(port), "--no-usual-dirs"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert server.stdout is not None
        lines = []
        while not (line := server.stdout.readline()).startswith("server record:"):
            assert line, "serve ended before it wrote its record"
            lines.append(line)
        assert f"Hugging Face Hub: {hub.endpoint} for ids that name no file here" in "".join(lines)
        hub.taken()
        asked = _memfit(env, "fit", "acme/Tiny-GGUF:Q4_K_M", "acme/Nowhere-GGUF:Q4_K_M")
        assert asked.returncode == 6 and "answering here" not in asked.stderr  # the server answered
        assert "has no repository acme/Nowhere-GGUF@main" in asked.stderr
        assert _fetched(hub.taken())[1] == 1
        here = _memfit(env, "fit", "acme/Tiny-GGUF:Q4_K_M", "--offline")
        assert "may ask the Hugging Face Hub; --offline: answering here" in here.stderr
        assert hub.taken() == [] and here.returncode in (0, 3, 4, 5)  # the cache the server filled answers
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=60)
    assert "hub: acme/Nowhere-GGUF:Q4_K_M@main: http" in err and "has no repository" in err  # the server's log
