"""Measurement history: observations in SQLite, used only for an identical identity and workload."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sqlite3
import threading
from dataclasses import replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import httpx
import pytest

from memfit.estimator.bounds import Part
from memfit.estimator.fit_types import FitRequest, ObservationRow
from memfit.estimator.observations import KV_ROUNDING
from memfit.estimator.vocabulary import Component
from memfit.readers.header_store import HeaderStore
from memfit.readers.history_db import BUSY_TIMEOUT_S, COLUMNS, MAX_CHARS, PER_WORKLOAD_CAP, TOTAL_CAP, HistoryDB
from memfit.readers.model_roots import Root, RootKind
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.gguf_writers import llama_gqa, write_model

OBSERVATIONS = "/v1/models/observations"
BATCH = "/v1/models/fit/batch"


def _observation(
    model_id: str, artifact_bytes: int | None, tokens: int = 4096, quant: str = "F16", **parts: int
) -> dict:
    return {
        "modelId": model_id,
        "revision": "",
        "quant": quant,
        "artifactBytes": artifact_bytes,
        "workload": {
            "allocatedTokens": tokens,
            "streams": 1,
            "keyElementBytes": 2,
            "valueElementBytes": 2,
            "mode": "fullGpu",
        },
        "parts": parts,
        "runtime": "llama.cpp test build",
        "observedAt": "2026-11-01T10:00:00Z",
    }


def _parts(client: httpx.Client, model_id: str, **workload: object) -> tuple[dict, dict]:
    result = client.post(BATCH, json=[{"modelId": model_id, **workload}]).json()["results"][0]
    return {p["component"]: p for p in result["estimate"]["parts"]}, result


def test_an_observation_measures_the_workspace_of_that_identity_and_workload_only(
    client: httpx.Client, public_models: Path
) -> None:
    size = os.path.getsize(public_models / "llama-gqa-q8_0.gguf")
    wrong_quant = client.post(OBSERVATIONS, json=_observation("llama-gqa-q8_0", size, workspace=1))
    receipt = client.post(OBSERVATIONS, json=_observation("llama-gqa-q8_0", size, quant="Q8_0", workspace=18_000_000))
    assert wrong_quant.status_code == 201
    assert receipt.status_code == 201
    assert receipt.json()["known"] and receipt.json()["modelId"] == "llama-gqa-q8_0"

    parts, result = _parts(client, "llama-gqa-q8_0")
    assert parts["workspace"] == {**parts["workspace"], "basis": "measuredArtifact", "bytes": 18_000_000}
    assert "llama.cpp test build" in parts["workspace"]["note"]
    assert result["estimate"]["weakestBasis"] == "derivedLayout"  # KV is derived; weights and workspace measured
    assert _parts(client, "llama-gqa-q8_0", allocatedTokens=2048)[0]["workspace"]["basis"] == "derivedLayout"
    assert _parts(client, "llama-gqa-q8_0", streams=2)[0]["workspace"]["basis"] == "derivedLayout"

    client.post(OBSERVATIONS, json=_observation("llama-gqa-f16", 12345, workspace=1))  # not this file's size
    assert _parts(client, "llama-gqa-f16")[0]["workspace"]["basis"] == "derivedLayout"


def test_a_dry_run_checks_the_observation_and_stores_nothing(client: httpx.Client, public_models: Path) -> None:
    """`dryRun` (what the docs page's Try-it-out sends): the answer storing would give, with no id, a 200; the
    same refusal as storing; and no answer changes, nothing is listed."""
    size = os.path.getsize(public_models / "mamba2-f16.gguf")
    derived = _parts(client, "mamba2-f16", allocatedTokens=2048)[0]["workspace"]
    before = client.get(OBSERVATIONS, params={"modelId": "mamba2-f16"}).json()["observations"]
    ok = _observation("mamba2-f16", size, 2048, workspace=derived["bytes"] + 1)
    checked = client.post(OBSERVATIONS, params={"dryRun": "true"}, json=ok)
    assert checked.status_code == 200 and checked.json() == {"modelId": "mamba2-f16", "known": True, "flags": []}
    low = _observation("mamba2-f16", size, 2048, workspace=0)
    refused = client.post(OBSERVATIONS, params={"dryRun": "true"}, json=low)
    assert refused.status_code == 400 and refused.json()["detail"].startswith("parts.workspace:")
    misspelt = client.post(OBSERVATIONS, params={"dryrun": "true"}, json=ok)  # would have stored it
    assert misspelt.status_code == 400 and "'dryrun'" in misspelt.json()["detail"]
    assert client.get(OBSERVATIONS, params={"modelId": "mamba2-f16"}).json()["observations"] == before
    assert _parts(client, "mamba2-f16", allocatedTokens=2048)[0]["workspace"] == derived
    stored = client.post(OBSERVATIONS, params={"dryRun": "false"}, json=ok)
    assert stored.status_code == 201 and stored.json()["observationId"] >= 1  # the same body, stored
    assert client.delete(f"{OBSERVATIONS}/{stored.json()['observationId']}").status_code == 204


def test_a_weak_identity_keeps_the_derived_number(client: httpx.Client) -> None:
    """A catalog model has no revision and no artifact bytes: a record about it cannot be trusted."""
    observation = _observation("Qwen/Qwen3-8B-GGUF", None, quant="Q4_K_M", workspace=1)
    receipt = client.post(OBSERVATIONS, json=observation).json()
    assert receipt["modelId"] == "Qwen/Qwen3-8B-GGUF:Q4_K_M"  # an alias is stored under the full id
    parts, result = _parts(client, "Qwen/Qwen3-8B-GGUF:Q4_K_M")
    assert parts["workspace"]["basis"] == "derivedLayout"
    assert "historyIdentityInsufficient" in result["limits"]
    assert "historyIdentityInsufficient" not in _parts(client, "Qwen/Qwen3-4B-GGUF")[1]["limits"]


def test_a_kv_cache_contradicting_the_derived_one_is_refused(client: httpx.Client, public_models: Path) -> None:
    """For the identity answers would use, a contradiction is a 400 naming the part; for another, a flag."""
    size = os.path.getsize(public_models / "qwen3-f16.gguf")
    parts = _parts(client, "qwen3-f16", allocatedTokens=1024)[0]
    derived, floor = parts["kvCache"]["bytes"], parts["workspace"]["bytes"]
    close = client.post(
        OBSERVATIONS, json=_observation("qwen3-f16", size, 1024, kvCache=derived + KV_ROUNDING, workspace=floor + 5)
    )
    assert (close.status_code, close.json()["flags"]) == (201, [])
    far = client.post(OBSERVATIONS, json=_observation("qwen3-f16", size, 1024, kvCache=derived * 2, workspace=floor))
    assert far.status_code == 400
    assert far.json()["type"] == "invalidRequest" and far.json()["detail"].startswith("parts.kvCache:")
    assert str(derived) in far.json()["detail"]
    other_file = client.post(OBSERVATIONS, json=_observation("qwen3-f16", size + 1, 1024, kvCache=derived * 2))
    assert (other_file.status_code, other_file.json()["flags"]) == (201, ["kvContradictsDerived"])
    workspace = _parts(client, "qwen3-f16", allocatedTokens=1024)[0]["workspace"]
    assert workspace["bytes"] == floor + 5  # the refused one is not stored


def test_a_workspace_below_the_floor_is_refused_and_an_old_one_ignored(
    client: httpx.Client, live: LiveServer, public_models: Path
) -> None:
    """The derived workspace floor (or llama.cpp's exact output buffer) is never undercut by an observation."""
    size = os.path.getsize(public_models / "llama-gqa-f16.gguf")
    derived = _parts(client, "llama-gqa-f16", allocatedTokens=3072)[0]["workspace"]
    for low in (0, derived["bytes"] - 1):
        refused = client.post(OBSERVATIONS, json=_observation("llama-gqa-f16", size, 3072, workspace=low))
        assert refused.status_code == 400 and refused.json()["detail"].startswith("parts.workspace:")
        assert f"the derived workspace floor ({derived['bytes']} bytes)" in refused.json()["detail"]
    assert _parts(client, "llama-gqa-f16", allocatedTokens=3072)[0]["workspace"] == derived
    old = replace(_row(0), model_id="llama-gqa-f16", revision="", quant="F16", artifact_bytes=size)
    _db(live.service).insert(replace(old, allocated_tokens=3072, workspace_bytes=1))  # as before the check
    workspace = _parts(client, "llama-gqa-f16", allocatedTokens=3072)[0]["workspace"]
    assert (workspace["basis"], workspace["bytes"]) == ("derivedLayout", derived["bytes"])
    assert "an observation below the derived workspace floor" in workspace["note"]


def test_a_workspace_above_the_derived_ceiling_is_refused_and_an_old_one_ignored(
    client: httpx.Client, live: LiveServer, public_models: Path
) -> None:
    """No observation makes a model oversize "for certain" with a workspace llama.cpp never allocates: the
    derived ceiling bounds it from above as the floor does from below. (This file's other parts are exact, so the
    spread of the answer's bounds is the workspace's slack.)"""
    size = os.path.getsize(public_models / "llama-gqa-f16.gguf")
    parts, result = _parts(client, "llama-gqa-f16", allocatedTokens=1536)
    derived, estimate = parts["workspace"], result["estimate"]
    ceiling = derived["bytes"] + estimate["upperBoundBytes"] - estimate["lowerBoundBytes"]
    assert derived["basis"] == "derivedLayout" and ceiling > derived["bytes"]
    for high in (ceiling + 1, 10**18):
        refused = client.post(OBSERVATIONS, json=_observation("llama-gqa-f16", size, 1536, workspace=high))
        assert refused.status_code == 400 and refused.json()["detail"].startswith("parts.workspace:")
        assert f"the derived workspace ceiling ({ceiling} bytes)" in refused.json()["detail"]
    assert _parts(client, "llama-gqa-f16", allocatedTokens=1536)[0]["workspace"] == derived  # none was stored

    old = replace(_row(0), model_id="llama-gqa-f16", revision="", quant="F16", artifact_bytes=size)
    _db(live.service).insert(replace(old, allocated_tokens=1536, workspace_bytes=10**18))  # as before the check
    parts, result = _parts(client, "llama-gqa-f16", allocatedTokens=1536)
    assert (parts["workspace"]["basis"], parts["workspace"]["bytes"]) == ("derivedLayout", derived["bytes"])
    assert f"an observation above the derived ceiling ({ceiling} bytes) was ignored" in parts["workspace"]["note"]
    assert result["estimate"]["lowerBoundBytes"] == estimate["lowerBoundBytes"]

    at_ceiling = client.post(OBSERVATIONS, json=_observation("llama-gqa-f16", size, 1536, workspace=ceiling))
    assert at_ceiling.status_code == 201
    workspace = _parts(client, "llama-gqa-f16", allocatedTokens=1536)[0]["workspace"]
    assert (workspace["basis"], workspace["bytes"]) == ("measuredArtifact", ceiling)
    assert client.delete(f"{OBSERVATIONS}/{at_ceiling.json()['observationId']}").status_code == 204


def test_a_workspace_memfit_does_not_derive_has_no_ceiling(tmp_path: Path) -> None:
    """xverse's compute graph is not derived: only llama.cpp's output buffer bounds an observation (from
    below), and any workspace above it is taken as measured."""
    model = llama_gqa()
    kv = {
        (f"xverse.{key.removeprefix('llama.')}" if key.startswith("llama.") else key): v for key, v in model.kv.items()
    }
    write_model(replace(model, arch="xverse", kv=kv), tmp_path / "xverse-f16.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)], state_dir=str(tmp_path / "state"))
    size = os.path.getsize(tmp_path / "xverse-f16.gguf")
    with LiveServer(service) as live, live.client() as c:
        assert _parts(c, "xverse-f16")[0]["workspace"]["basis"] == "unknown"
        stored = c.post(OBSERVATIONS, json=_observation("xverse-f16", size, workspace=10**15))
        assert stored.status_code == 201, stored.text
        workspace = _parts(c, "xverse-f16")[0]["workspace"]
    assert (workspace["basis"], workspace["bytes"]) == ("measuredArtifact", 10**15)


def test_an_observation_id_past_int64_is_a_400(client: httpx.Client) -> None:
    """The contract's id is an int64: a longer one is refused as invalid, one past Python's integer conversion
    limit (4,300 digits) included, never a 500."""
    for digits in (20, 4300, 4301, 5000):
        response = client.delete(f"{OBSERVATIONS}/{'9' * digits}")
        assert (response.status_code, response.json()["type"]) == (400, "invalidRequest"), digits


THREADS = 20


def _open_descriptors(under: Path) -> int:
    """This process's descriptors open on files under `under` (other tests' servers may open others meanwhile)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since it was listed
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(under))
    return count


def test_threads_that_read_the_state_files_and_exit_leave_no_connection_open(tmp_path: Path) -> None:
    """A server's worker threads come and go: the connections to the history and the header cache are pooled, so
    none stays open (with its WAL: two descriptors each) after the thread that used it exited, and threads at
    once hold no more than one round of them needs."""
    db = HistoryDB(str(tmp_path / "history.sqlite3"))
    store = HeaderStore(str(tmp_path / "headers.sqlite3"))
    db.insert(_row(1))
    store.put("a", "summary")
    answers = []

    def read(together: threading.Barrier | None = None) -> None:
        if together is not None:
            together.wait()
        answers.append((len(db.newest(1)), store.get("a")))

    before = _open_descriptors(tmp_path)
    assert before >= 2  # the two databases' own, counted
    for _ in range(3 * THREADS):  # one after another: each finds the connections the last one gave back
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    assert _open_descriptors(tmp_path) - before <= 2  # not two per thread and file: the last one's may be kept

    peaks = []
    for _ in range(3):  # all at once: each needs connections of its own, and most are closed when given back
        together = threading.Barrier(THREADS)
        threads = [threading.Thread(target=read, args=(together,)) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        peaks.append(_open_descriptors(tmp_path))
    assert max(peaks) - before <= 2 * 2 * THREADS  # what one round at once needs, however many rounds ran
    assert answers == [(1, "summary")] * (6 * THREADS)
    db.close()
    store.close()
    assert _open_descriptors(tmp_path) <= before


def test_observations_are_listed_newest_first_and_deleted(client: httpx.Client, public_models: Path) -> None:
    size = os.path.getsize(public_models / "gemma3-swa-f16.gguf")
    floor = _parts(client, "gemma3-swa-f16", allocatedTokens=2048)[0]["workspace"]["bytes"]
    ids = [
        client.post(OBSERVATIONS, json=_observation("gemma3-swa-f16", size, 2048, workspace=floor + i)).json()[
            "observationId"
        ]
        for i in (1, 2, 3)
    ]
    listed = client.get(OBSERVATIONS, params={"modelId": "gemma3-swa-f16"}).json()["observations"]
    assert [o["observationId"] for o in listed[:3]] == ids[::-1]
    assert listed[0]["parts"]["workspace"] == floor + 3 and listed[0]["workload"]["allocatedTokens"] == 2048
    assert all(o["modelId"] == "gemma3-swa-f16" for o in listed)
    assert len(client.get(OBSERVATIONS, params={"modelId": "gemma3-swa-f16", "limit": 2}).json()["observations"]) == 2
    everything = client.get(OBSERVATIONS).json()["observations"]
    assert [o["observationId"] for o in everything] == sorted((o["observationId"] for o in everything), reverse=True)
    assert client.get(OBSERVATIONS, params={"limit": 0}).status_code == 400
    assert client.get(OBSERVATIONS, params={"limit": 1001}).status_code == 400
    assert client.get(OBSERVATIONS, params={"modelid": "gemma3-swa-f16"}).status_code == 400  # misspelt: not all
    assert client.put(OBSERVATIONS).headers["allow"] == "POST, GET, HEAD"  # every method of the path

    assert _parts(client, "gemma3-swa-f16", allocatedTokens=2048)[0]["workspace"]["bytes"] == floor + 3
    deleted = client.delete(f"{OBSERVATIONS}/{ids[2]}")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert _parts(client, "gemma3-swa-f16", allocatedTokens=2048)[0]["workspace"]["bytes"] == floor + 2  # at once
    again = client.delete(f"{OBSERVATIONS}/{ids[2]}")
    assert (again.status_code, again.json()["type"]) == (404, "notFound")
    assert client.delete(f"{OBSERVATIONS}/abc").status_code in (400, 404)
    for other in ids[:2]:
        assert client.delete(f"{OBSERVATIONS}/{other}").status_code == 204
    workspace = _parts(client, "gemma3-swa-f16", allocatedTokens=2048)[0]["workspace"]
    assert (workspace["basis"], workspace["bytes"]) == ("derivedLayout", floor)


def test_listing_and_deleting_need_the_token(live: LiveServer) -> None:
    with live.client(None) as anonymous:
        for response in (anonymous.get(OBSERVATIONS), anonymous.delete(f"{OBSERVATIONS}/1")):
            assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"


def test_observations_need_the_token_and_a_valid_body(live: LiveServer) -> None:
    with live.client(None) as anonymous:
        assert anonymous.post(OBSERVATIONS, json=_observation("x", None, workspace=1)).status_code == 401
    with live.client() as client:
        assert client.post(OBSERVATIONS, json=_observation("x", None)).status_code == 400  # no part at all
        bad_time = {**_observation("x", None, workspace=1), "observedAt": "yesterday"}
        assert client.post(OBSERVATIONS, json=bad_time).json()["type"] == "invalidRequest"


def _row(i: int) -> ObservationRow:
    return ObservationRow(
        model_id=f"m{i % 7}",
        revision="r",
        quant="Q4_K_M",
        artifact_bytes=i,
        allocated_tokens=4096,
        streams=1,
        key_element_bytes=2,
        value_element_bytes=2,
        mode="fullGpu",
        weights_bytes=i,
        kv_cache_bytes=None,
        recurrent_state_bytes=None,
        workspace_bytes=i,
        companions_bytes=None,
        runtime="test",
        observed_at="2026-11-01T00:00:00+00:00",
    )


def _db(service: FitService) -> HistoryDB:
    """The service's history database (every service here keeps its state in a folder)."""
    db = service.history.db
    assert db is not None
    return db


def _write_rows(path: str, start: int, count: int) -> None:
    db = HistoryDB(path)
    for i in range(start, start + count):
        db.insert(_row(i))


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "history.sqlite3")
    HistoryDB(path)
    threads = [threading.Thread(target=_write_rows, args=(path, t * 200, 200)) for t in range(4)]
    processes = [
        multiprocessing.get_context("spawn").Process(target=_write_rows, args=(path, 10_000 + p * 200, 200))
        for p in range(2)
    ]
    workers: list[threading.Thread | BaseProcess] = [*threads, *processes]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert all(p.exitcode == 0 for p in processes)
    rows = HistoryDB(path).all()
    assert len(rows) == 1200 and len({r.artifact_bytes for r in rows}) == 1200


def _bulk_insert(db: HistoryDB, count: int) -> None:
    """`count` rows of other models, fast: one transaction, no caps applied (as an older memfit left them)."""
    rows = (
        (f"m{i % 7}", "r", "Q4_K_M", i, 4096, 1, 2, 2, "fullGpu", i, None, None, i, None, "test", "2026-11-01")
        for i in range(count)
    )
    with db.connection() as connection:
        connection.execute("BEGIN")
        connection.executemany(
            f"INSERT INTO observations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * 16)}, '')", rows
        )
        connection.execute("COMMIT")


def _fit_work(service: FitService, model_id: str) -> tuple[Part, int]:
    """One fit's workspace part and the SQLite virtual machine instructions it ran (on the pool's connection
    given back last, which the fit's one read takes)."""
    steps = 0

    def step() -> int:
        nonlocal steps
        steps += 1
        return 0  # go on

    with _db(service).connection() as connection:
        connection.set_progress_handler(step, 1)
    try:
        result = service.fit_one(FitRequest(model_id))
    finally:
        connection.set_progress_handler(None, 1)
    assert result is not None
    parts = {p.component: p for p in result.parts}
    return parts[Component.WORKSPACE], steps


def test_a_fit_after_an_observation_reads_a_few_rows_of_500k(tmp_path: Path, public_models: Path) -> None:
    """An answer looks its observation up by index: the work does not grow with the history."""
    service = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(tmp_path))
    service.index.refresh()
    db = _db(service)
    _bulk_insert(db, 500_000)
    derived, _ = _fit_work(service, "llama-gqa-f16")
    assert derived.bytes is not None
    size = os.path.getsize(public_models / "llama-gqa-f16.gguf")
    row = replace(_row(0), model_id="llama-gqa-f16", revision="", quant="F16", artifact_bytes=size)
    observed = replace(row, workspace_bytes=derived.bytes + 1000)
    with db.connection() as other:  # another writer (an older memfit, another process): no caps applied
        other.execute(
            f"INSERT INTO observations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            [getattr(observed, c) for c in COLUMNS],
        )
    workspace, work = _fit_work(service, "llama-gqa-f16")
    assert (workspace.basis, workspace.bytes) == ("measuredArtifact", derived.bytes + 1000)
    assert 0 < work < 1_000  # one indexed lookup: about 40 instructions; reading 500k rows runs 10 million

    later = replace(observed, workspace_bytes=derived.bytes + 2000)
    service.history.record(later)  # through memfit: the caps apply
    workspace, work = _fit_work(service, "llama-gqa-f16")
    assert (workspace.bytes, 0 < work < 1_000) == (derived.bytes + 2000, True)
    assert db.count() == TOTAL_CAP
    newest = db.newest(TOTAL_CAP)
    assert newest[0].id is not None and newest[-1].id == newest[0].id - TOTAL_CAP + 1  # the oldest went first


def test_each_identity_and_workload_keeps_its_newest_rows(tmp_path: Path) -> None:
    db = HistoryDB(str(tmp_path / "history.sqlite3"))
    ids = [db.insert(replace(_row(1), workspace_bytes=i)) for i in range(PER_WORKLOAD_CAP + 4)]
    other = db.insert(replace(_row(1), streams=2))  # another workload of the same identity
    kept = db.newest(100)
    assert [r.id for r in kept] == [other, *reversed(ids[4:])]
    latest = db.latest(("m1", "r", "Q4_K_M", 1), (4096, 1, 2, 2, "fullGpu"))
    assert latest is not None and latest.workspace_bytes == PER_WORKLOAD_CAP + 3


def test_the_database_refuses_overlong_strings(tmp_path: Path) -> None:
    db = HistoryDB(str(tmp_path / "history.sqlite3"))
    for column, limit in MAX_CHARS.items():
        with pytest.raises(ValueError, match=column):
            overlong: dict[str, Any] = {column: "x" * (limit + 1)}
            db.insert(replace(_row(1), **overlong))
        longest: dict[str, Any] = {column: "x" * limit}
        db.insert(replace(_row(1), **longest))
    assert db.count() == len(MAX_CHARS)


def test_an_observation_without_a_workspace_leaves_the_measured_one_standing(
    client: httpx.Client, public_models: Path
) -> None:
    size = os.path.getsize(public_models / "qwen3-f16.gguf")
    kv = _parts(client, "qwen3-f16", allocatedTokens=1024)[0]["kvCache"]["bytes"]
    measured = _observation("qwen3-f16", size, tokens=1024, workspace=22_000_000)  # within the derived bounds
    assert client.post(OBSERVATIONS, json=measured).status_code == 201
    for parts in ({"workspace": None}, {"weights": None, "kvCache": None}, {"kvCache": kv}):
        later = {**_observation("qwen3-f16", size, tokens=1024), "parts": parts}
        assert client.post(OBSERVATIONS, json=later).status_code == 201  # stored as a record of the run
        workspace = _parts(client, "qwen3-f16", allocatedTokens=1024)[0]["workspace"]
        assert (workspace["basis"], workspace["bytes"]) == ("measuredArtifact", 22_000_000)


def test_a_new_connection_waits_out_another_making_the_file_wal(tmp_path: Path) -> None:
    """While another connection holds the file's reserved lock (as one switching it to WAL, or making its schema,
    at the same moment does), SQLite answers the WAL switch 'database is locked' at once, without its busy handler:
    the history tries again until the lock is gone (within BUSY_TIMEOUT_S), instead of failing to open (four services
    opening one state directory at once failed so under load)."""
    path = str(tmp_path / "history.sqlite3")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE made_first (x)")
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):  # what a bare connection meets meanwhile
        sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None).execute("PRAGMA journal_mode=WAL")
    released = threading.Timer(0.2, lambda: other.execute("COMMIT"))
    released.start()
    try:
        db = HistoryDB(path)
    finally:
        released.join()
        other.close()
    with db.connection() as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()
