"""Faults of the state directory: a full disk, a damaged, deleted, replaced or locked file. Fits never depend on
the header cache or the measurement history; a history write that cannot be made is a 503 naming the state
directory; a history that cannot be opened stops `memfit serve` with the file and the fix, no traceback."""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from memfit.cli import main
from memfit.readers.header_store import HeaderStore
from memfit.readers.history_db import HistoryDB
from memfit.readers.model_roots import Root, RootKind
from memfit.service.fit_service import FitService
from memfit.service_builder import HEADERS_FILE, HISTORY_FILE, build_service
from tests.conftest import LiveServer
from tests.test_history import BATCH, OBSERVATIONS, _observation, _row


def _close_state(service: FitService) -> None:
    """Closes the connections of a service that keeps its state in a folder (its history and header store)."""
    history, store = service.history.db, service.cache.store
    assert history is not None and store is not None
    history.close()
    store.close()


MODEL = "llama-gqa-q8_0"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def server(public_models: Path, state: Path) -> Iterator[LiveServer]:
    """A server of its own, over a fresh state directory (nothing cached, no observation). Its index does not
    read new files' headers in the background: the requests do, through the faults these tests make."""
    service = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(state))
    service.index.warm = None
    with LiveServer(service) as live:
        yield live


def _measured_response(live: LiveServer, public_models: Path, workspace: int) -> httpx.Response:
    """Post an observation of MODEL's default workload."""
    size = os.path.getsize(public_models / f"{MODEL}.gguf")
    with live.client() as c:
        return c.post(OBSERVATIONS, json=_observation(MODEL, size, quant="Q8_0", workspace=workspace))


def _measured(live: LiveServer, public_models: Path, workspace: int) -> int:
    return _measured_response(live, public_models, workspace).status_code


def _workspace(live: LiveServer) -> dict:
    with live.client() as c:
        response = c.post(BATCH, json=[{"modelId": MODEL}])
    assert response.status_code == 200, response.text
    return next(p for p in response.json()["results"][0]["estimate"]["parts"] if p["component"] == "workspace")


def _health(live: LiveServer) -> dict:
    with live.client(None) as c:
        response = c.get("/health")
    assert response.status_code == 200
    return response.json()


def test_a_full_state_disk_fails_no_fit_or_listing_and_refuses_observations_with_a_503(
    server: LiveServer, state: Path, public_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every new connection gets SQLITE_FULL: the header cache may not grow by a page (real SQLite), the
    history cannot be opened at all."""
    connect = sqlite3.connect

    def full(path: str, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if HISTORY_FILE in str(path):
            raise sqlite3.OperationalError("database or disk is full")
        db = connect(path, *args, **kwargs)
        db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
        return db

    monkeypatch.setattr(sqlite3, "connect", full)
    _close_state(server.service)  # the connections opened at start: from now on each use opens a new one
    with server.client() as c:
        batch = c.post(BATCH, json=[{"modelId": name} for name in ("qwen3-f16", "llama-gqa-f16", MODEL)])
        listing = c.get("/v1/models")
    assert batch.status_code == 200 and len(batch.json()["results"]) == 3  # files never read before: uncached
    assert listing.status_code == 200
    assert all(p["basis"] != "unknown" for p in batch.json()["results"][0]["estimate"]["parts"][:1])

    size = os.path.getsize(public_models / f"{MODEL}.gguf")
    with server.client() as c:
        refused = c.post(OBSERVATIONS, json=_observation(MODEL, size, quant="Q8_0", workspace=18_000_000))
    assert refused.status_code == 503 and refused.headers["retry-after"]
    assert refused.json()["type"] == "failed" and str(state) in refused.json()["detail"]
    assert "full" in refused.json()["detail"]
    health = _health(server)
    assert health["status"] == "ok" and health["degraded"] is True
    assert HEADERS_FILE in health["reason"] and HISTORY_FILE in health["reason"]


def test_a_history_made_unreadable_keeps_fits_answering_from_the_derived_numbers(
    server: LiveServer,
    state: Path,
    public_models: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Damaged pages under open connections: every read of the history raises what SQLite raises for them, and
    answers fall back to the derived workspace (the history is looked up per answer, nothing is held in memory)."""
    assert _measured(server, public_models, 18_000_000) == 201
    assert _workspace(server)["basis"] == "measuredArtifact"

    def damaged(self: HistoryDB, *args: object) -> None:
        raise sqlite3.DatabaseError("database disk image is malformed")

    for read in ("latest", "any_for_model", "probe"):
        monkeypatch.setattr(HistoryDB, read, damaged)
    with caplog.at_level("WARNING", logger="memfit.state"):
        for _ in range(3):
            assert _workspace(server)["basis"] == "derivedLayout"  # the derived numbers, never a 500
        health = _health(server)
    assert health["degraded"] is True and str(state / HISTORY_FILE) in health["reason"]
    assert "malformed" in health["reason"]
    assert len([r for r in caplog.records if "degraded" in r.getMessage()]) == 1  # one warning, not one per fit


@pytest.mark.parametrize("change", ["deleted", "replaced"])
def test_an_observation_is_never_acknowledged_into_a_deleted_or_replaced_history(
    server: LiveServer, state: Path, public_models: Path, change: str
) -> None:
    """The file at the path must still be the one memfit opened: otherwise a 503 (nothing acknowledged and then
    lost), health says why, and a restart uses the file at the path."""
    path = state / HISTORY_FILE
    assert _measured(server, public_models, 18_000_000) == 201
    assert _workspace(server)["bytes"] == 18_000_000
    for name in (HISTORY_FILE, f"{HISTORY_FILE}-wal", f"{HISTORY_FILE}-shm"):
        (state / name).unlink(missing_ok=True)
    if change == "replaced":  # e.g. restored from a backup
        other = HistoryDB(str(state / "backup.sqlite3"))
        other.insert(_row(1))
        other.close()
        os.replace(state / "backup.sqlite3", path)
    refused = _measured_response(server, public_models, 17_000_000)
    assert refused.status_code == 503 and str(state) in refused.json()["detail"]
    assert "restart memfit" in refused.json()["detail"]
    health = _health(server)
    assert health["degraded"] is True and "deleted or replaced" in health["reason"]
    assert _workspace(server)["basis"] == "derivedLayout"  # fits answer, from the derived numbers
    expected = [1] if change == "replaced" else []
    assert [r.workspace_bytes for r in HistoryDB(str(path)).all()] == expected  # nothing written where none reads

    restarted = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(state))
    with LiveServer(restarted) as again:
        assert _measured(again, public_models, 19_000_000) == 201
        assert _workspace(again)["bytes"] == 19_000_000 and _health(again)["degraded"] is False


def test_a_foreign_write_lock_is_a_quick_503_and_fits_still_answer(
    server: LiveServer, state: Path, public_models: Path
) -> None:
    assert _measured(server, public_models, 18_000_000) == 201
    locker = sqlite3.connect(state / HISTORY_FILE, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock and never lets go
    locker.execute(
        "INSERT INTO observations (model_id, revision, quant, allocated_tokens, streams, "
        "key_element_bytes, value_element_bytes, mode, runtime, observed_at) "
        "VALUES ('m', '', 'q', 1, 1, 2, 2, 'fullGpu', 'r', 't')"
    )
    try:
        start = time.monotonic()
        assert _measured(server, public_models, 17_500_000) == 503
        assert time.monotonic() - start < 6  # not 30 s of a worker thread
        start = time.monotonic()
        assert _workspace(server)["bytes"] == 18_000_000
        assert time.monotonic() - start < 3
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert _measured(server, public_models, 17_800_000) == 201


def test_listing_or_deleting_observations_while_the_history_cannot_be_used_is_a_503(
    server: LiveServer, state: Path, public_models: Path
) -> None:
    """Another process's write lock stops a delete (not a listing: readers never wait for a writer), and a
    deleted history stops both: a 503 with Retry-After naming the state directory, never a 500."""
    stored = _measured_response(server, public_models, 18_000_000).json()["observationId"]
    locker = sqlite3.connect(state / HISTORY_FILE, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    try:
        with server.client() as c:
            deleted = c.delete(f"{OBSERVATIONS}/{stored}")
            listed = c.get(OBSERVATIONS)
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert deleted.status_code == 503 and deleted.headers["retry-after"]
    assert deleted.json()["type"] == "failed" and str(state) in deleted.json()["detail"]
    assert "locked" in deleted.json()["detail"]
    assert listed.status_code == 200 and [o["observationId"] for o in listed.json()["observations"]] == [stored]

    for name in (HISTORY_FILE, f"{HISTORY_FILE}-wal", f"{HISTORY_FILE}-shm"):
        (state / name).unlink(missing_ok=True)
    with server.client() as c:
        for response in (c.get(OBSERVATIONS), c.delete(f"{OBSERVATIONS}/{stored}")):
            assert response.status_code == 503 and response.headers["retry-after"]
            assert "restart memfit" in response.json()["detail"]
    assert _workspace(server)["basis"] == "derivedLayout"  # fits answer, from the derived numbers


def _health_once_ok(live: LiveServer) -> dict:
    """GET /health until it says ok again, for at most a generous minute (it should take about a second)."""
    deadline = time.monotonic() + 60
    health = _health(live)
    while health["degraded"] and time.monotonic() < deadline:
        time.sleep(0.2)
        health = _health(live)
    return health


def test_health_is_ok_again_soon_after_a_foreign_lock_is_let_go(
    server: LiveServer, state: Path, public_models: Path
) -> None:
    """Locks another process holds on both files make an observation a 503 and the header cache miss (fits
    answer from the files) and /health `degraded`; once they are let go, /health probes the files and says ok
    again, although no request has used them since."""
    lockers = [sqlite3.connect(state / name, isolation_level=None) for name in (HISTORY_FILE, HEADERS_FILE)]
    for locker in lockers:
        locker.execute("BEGIN IMMEDIATE")
    try:
        assert _measured(server, public_models, 18_000_000) == 503
        assert _workspace(server)["basis"] == "derivedLayout"  # its header read from the file, not stored
        locked = _health(server)
    finally:
        for locker in lockers:
            locker.execute("ROLLBACK")
            locker.close()
    assert locked["status"] == "ok" and locked["degraded"] is True
    assert HISTORY_FILE in locked["reason"] and HEADERS_FILE in locked["reason"] and "locked" in locked["reason"]
    health = _health_once_ok(server)
    assert (health["degraded"], health["reason"]) == (False, None)
    assert _measured(server, public_models, 18_000_000) == 201


def test_the_state_files_are_private_to_their_owner(tmp_path: Path, public_models: Path) -> None:
    """The history and the header cache, and their WAL and shared-memory files, are 0600 under the usual umask
    (022), in a state directory memfit makes 0700; files an earlier memfit left 0644 are made 0600."""
    state = tmp_path / "state"
    umask = os.umask(0o022)
    try:
        service = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(state))
        with LiveServer(service) as live:
            assert _measured(live, public_models, 18_000_000) == 201
            _workspace(live)
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in state.iterdir()}
        files = {name + suffix for name in (HISTORY_FILE, HEADERS_FILE) for suffix in ("", "-wal", "-shm")}
        assert modes == dict.fromkeys(files, 0o600)
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        _close_state(service)
        older = tmp_path / "older"
        older.mkdir()
        for name in (HISTORY_FILE, HEADERS_FILE):  # as SQLite makes them, left open so the side files stay
            sqlite3.connect(older / name).execute("PRAGMA journal_mode=WAL").close()
        kept_open = [sqlite3.connect(older / name) for name in (HISTORY_FILE, HEADERS_FILE)]
        for db in kept_open:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        before = {p.name: stat.S_IMODE(p.stat().st_mode) for p in older.iterdir()}
        reopened = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(older))
        after = {p.name: stat.S_IMODE(p.stat().st_mode) for p in older.iterdir()}
        _close_state(reopened)
        for db in kept_open:
            db.close()
    finally:
        os.umask(umask)
    assert before == dict.fromkeys(files, 0o644) and after == dict.fromkeys(files, 0o600)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "directory"])
def test_an_unreadable_header_cache_is_moved_aside_and_rebuilt(state: Path, damage: str) -> None:
    path = state / HEADERS_FILE
    state.mkdir()
    if damage == "garbage":
        path.write_bytes(b"\x00garbage" * 4096)
    elif damage == "truncated":
        store = HeaderStore(str(path))
        for i in range(400):
            store.put(f"id{i}", "x" * 2000)
        del store
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size // 3)
    else:
        path.mkdir()
    store = HeaderStore(str(path))
    store.put("a", "summary")
    assert store.get("a") == "summary" and store.health.reason is None
    assert (
        path.is_file() and len([p for p in state.glob(f"{HEADERS_FILE}.broken-*") if not p.name.endswith("-wal")]) == 1
    )


def _serve(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, state: Path) -> tuple[int, str]:
    monkeypatch.setenv("MEMFIT_STATE_DIR", str(state))
    monkeypatch.setenv("MEMFIT_TOKEN", "t" * 32)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: pytest.fail("memfit serve started"))
    code = main(["serve", "--no-usual-dirs"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("damage", ["garbage", "truncated", "directory", "read-only", "locked"])
def test_a_history_that_cannot_be_opened_stops_serve_with_the_file_and_the_fix(
    state: Path, damage: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = state / HISTORY_FILE
    state.mkdir()
    locker = None
    if damage == "garbage":
        path.write_bytes(b"garbage!" * 4096)
    elif damage == "truncated":
        db = HistoryDB(str(path))
        for i in range(2000):
            db.insert(_row(i))
        sqlite3.connect(path).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
        del db
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size // 2)
    elif damage == "directory":
        path.mkdir()
    elif damage == "read-only":  # tests run as root, whom chmod does not stop: the error sqlite gives instead
        connect = sqlite3.connect

        def read_only(where: str, *args: Any, **kwargs: Any) -> sqlite3.Connection:
            if HISTORY_FILE in str(where):
                raise sqlite3.OperationalError("attempt to write a readonly database")
            return connect(where, *args, **kwargs)

        monkeypatch.setattr(sqlite3, "connect", read_only)
    else:
        db = HistoryDB(str(path))
        db.insert(_row(1))
        db.close()
        locker = sqlite3.connect(path, isolation_level=None)
        locker.execute("PRAGMA locking_mode=EXCLUSIVE")
        locker.execute("BEGIN EXCLUSIVE")
        locker.execute("COMMIT")  # the exclusive lock stays held
    start = time.monotonic()
    try:
        code, err = _serve(capsys, monkeypatch, state)
    finally:
        if locker is not None:
            locker.close()
    assert code == 2 and str(path) in err and "Traceback" not in err
    assert time.monotonic() - start < 6
    expected = {
        "garbage": "move it aside",
        "truncated": "move it aside",
        "directory": "regular SQLite file",
        "read-only": "writable",
        "locked": "Another process",
    }[damage]
    assert expected in err, err
