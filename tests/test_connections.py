"""Connections: no local client can lock others out by holding sockets, whatever 127.x address it connects from,
and the server never runs out of file descriptors for them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfit.http import server as http_server
from memfit.http.server import FILE_HEADROOM, MAX_CONNECTIONS, connection_budget
from memfit.service_builder import build_service
from tests.conftest import TOKEN, LiveServer
from tests.test_requests import _connect, _read_answer

HEALTH = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
PARTIAL = b"GET /health HTTP/1.1\r\n"  # a request begun and never finished: idle, not a request in progress


def _health(s: socket.socket) -> bytes:
    """The status line of a GET /health on the kept-alive connection `s`."""
    s.sendall(HEALTH)
    return _read_answer(s).split(b"\r\n", 1)[0]


def _closed(s: socket.socket) -> bool:
    """Whether the server has closed `s` (the caller knows it has either closed it or will answer on it)."""
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def capped(tmp_path: Path, public_models: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    """A server holding at most 16 connections, with deadlines long enough that only the cap closes any."""
    from memfit.readers.model_roots import Root, RootKind

    monkeypatch.setattr(http_server, "FIRST_BYTE_TIMEOUT_S", 60.0)
    monkeypatch.setattr(http_server, "HEADER_TIMEOUT_S", 60.0)
    service = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(tmp_path / "state"))
    with LiveServer(service, max_connections=16, timeout_keep_alive=60) as server:
        yield server


def test_idle_connections_from_127_0_0_1_lock_nobody_out(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every local client is 127.0.0.1: 100 kept-alive connections from it once made all the rest a 503. (The
    deadlines long enough that none closes a connection the test has not used yet: on a loaded machine the last of
    the 100 sat silent past FIRST_BYTE_TIMEOUT_S, and was closed as a spare.)"""
    monkeypatch.setattr(http_server, "FIRST_BYTE_TIMEOUT_S", 60.0)
    monkeypatch.setattr(http_server, "HEADER_TIMEOUT_S", 60.0)
    held = [_connect(live) for _ in range(100)]
    try:
        assert [_health(s) for s in held] == [b"HTTP/1.1 200 OK"] * 100
        with _connect(live) as s:
            assert _health(s) == b"HTTP/1.1 200 OK"
    finally:
        for s in held:
            s.close()


def test_other_loopback_addresses_count_against_the_same_cap(capped: LiveServer) -> None:
    """16 connections from 16 addresses fill the cap; each newcomer, from yet another address, closes the one idle
    longest."""
    held = [_connect(capped, f"127.0.0.{2 + i}") for i in range(16)]
    newcomers = []
    try:
        assert [_health(s) for s in held] == [b"HTTP/1.1 200 OK"] * 16
        for i in range(4):
            newcomers.append(_connect(capped, f"127.0.0.{100 + i}"))
            assert _health(newcomers[-1]) == b"HTTP/1.1 200 OK"
        assert all(_closed(s) for s in held[:4])
        assert [_health(s) for s in held[4:] + newcomers] == [b"HTTP/1.1 200 OK"] * 16
    finally:
        for s in held + newcomers:
            s.close()


def test_at_the_cap_an_authenticated_fit_gets_through(capped: LiveServer) -> None:
    """The cap full of silent, trickling and kept-alive connections: a fit's connection closes the oldest."""
    silent = [_connect(capped, "127.0.0.3") for _ in range(6)]
    trickling = [_connect(capped, "127.0.0.4") for _ in range(5)]
    for s in trickling:
        s.sendall(PARTIAL)
    kept = [_connect(capped, "127.0.0.5") for _ in range(5)]
    try:
        assert [_health(s) for s in kept] == [b"HTTP/1.1 200 OK"] * 5  # answered: those before them are counted
        with capped.client() as c:
            assert c.post("/v1/models/fit/batch", json=[{"modelId": "qwen3-f16"}]).status_code == 200
        assert _closed(silent[0])
        for s in trickling:
            s.sendall(HEALTH[len(PARTIAL) :])
        assert [_read_answer(s).split(b"\r\n", 1)[0] for s in trickling] == [b"HTTP/1.1 200 OK"] * 5
        assert [_health(s) for s in silent[1:] + kept] == [b"HTTP/1.1 200 OK"] * 10
    finally:
        for s in silent + trickling + kept:
            s.close()


def test_with_every_connection_busy_a_newcomer_is_a_503(
    tmp_path: Path, public_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memfit.http import body as body_module
    from memfit.readers.model_roots import Root, RootKind

    monkeypatch.setattr(body_module, "BODY_TIMEOUT_S", 60.0)
    service = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(tmp_path / "state"))
    body = b'[{"modelId": "qwen3-f16"}]'
    head = (
        f"POST /v1/models/fit/batch HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    with LiveServer(service, max_connections=4) as server:
        busy = [_connect(server) for _ in range(4)]
        try:
            for s in busy:
                s.sendall(head)
                assert s.recv(100).startswith(b"HTTP/1.1 100")  # the app asks for the body: a request in progress
            with _connect(server) as refused:
                answer = _read_answer(refused)
                assert answer.startswith(b"HTTP/1.1 503") and b"application/problem+json" in answer
                assert b"retry-after: 1" in answer and _closed(refused)
            busy[0].sendall(body)  # its answer makes it idle again: the next newcomer takes its place
            assert _read_answer(busy[0]).startswith(b"HTTP/1.1 200")
            with _connect(server) as s:
                assert _health(s) == b"HTTP/1.1 200 OK"
            assert _closed(busy[0])
        finally:
            for s in busy:
                s.close()


def test_websocket_upgrades_hold_no_place(capped: LiveServer) -> None:
    """An upgraded connection left the protocol that counts connections without telling it: 16 of them once took
    every place for good."""
    upgrade = (
        b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    for _ in range(20):
        with _connect(capped) as s:
            s.sendall(upgrade)
            assert _read_answer(s).startswith(b"HTTP/1.1 ")
    with _connect(capped) as s:
        assert _health(s) == b"HTTP/1.1 200 OK"


def test_stopping_closes_connections_that_never_spoke(tmp_path: Path, public_models: Path) -> None:
    """A connection is set up for HTTP only on its first byte, and joins uvicorn's own count then: a server
    stopping closes those that never sent one as well as kept-alive ones, and stops within its graceful shutdown."""
    from memfit.readers.model_roots import Root, RootKind

    service = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(tmp_path / "state"))
    server = LiveServer(service, timeout_keep_alive=60)
    with server:
        silent = [_connect(server, f"127.0.0.{2 + i}") for i in range(5)]
        kept = _connect(server)
        assert _health(kept) == b"HTTP/1.1 200 OK"
        stopping = time.monotonic()
    try:
        assert not server.thread.is_alive()
        assert time.monotonic() - stopping < http_server.GRACEFUL_SHUTDOWN_S
        for s in [*silent, kept]:
            s.settimeout(5)
            assert _closed(s)
    finally:
        for s in [*silent, kept]:
            s.close()


@pytest.mark.parametrize("soft", [1024, 4096, 65536, 1 << 20])
def test_the_connection_cap_leaves_descriptors_for_files(soft: int) -> None:
    cap, backlog = connection_budget(soft)
    assert 0 < cap <= MAX_CONNECTIONS and 0 < backlog
    assert cap + 2 * backlog + FILE_HEADROOM <= soft  # connections, those accepted at once, and files fit


def _serve(tmp_path: Path, models: Path, limits: tuple[int, int]) -> tuple[subprocess.Popen[bytes], int]:
    """`memfit serve` on a free port of 127.0.0.1 started with file limits `limits` (soft, hard), and its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "memfit.cli", "serve", "--port", str(port), "--models", str(models)]
    process = subprocess.Popen(
        [*argv, "--no-usual-dirs"],
        env={**os.environ, "MEMFIT_STATE_DIR": str(tmp_path / "state"), "PYTHONWARNINGS": "ignore"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits),
    )
    for _ in range(600):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(HEALTH)
            if _read_answer(s).startswith(b"HTTP/1.1 200"):
                return process, port
        if process.poll() is not None:
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
    process.kill()
    raise RuntimeError("memfit serve did not start")


def _soft_limit(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/limits").read_text().splitlines() if x.startswith("Max open files"))
    return int(line.split()[3])


@pytest.mark.skipif(not Path("/proc/self/limits").exists(), reason="reads the server's limits from /proc")
def test_serve_raises_its_soft_file_limit_to_the_hard_one(tmp_path: Path, public_models: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard < 1024:
        pytest.skip(f"needs a finite hard file limit of 1,024 or more (it is {hard})")
    server, _ = _serve(tmp_path, public_models, (512, hard))
    try:
        assert _soft_limit(server.pid) == hard
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts the server's descriptors in /proc")
def test_connections_past_the_file_limit_leave_health_answering(tmp_path: Path, public_models: Path) -> None:
    """A hard limit of 1,024 cannot be raised: 1,200 connections from 48 addresses, each with a request begun
    (10 s to end its headers), once took every descriptor, and accept() failed for everyone."""
    limit, flood = 1024, 1200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < flood + 200:
        pytest.skip(f"the test opens {flood} sockets; its hard file limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, flood + 200), hard))
    server, port = _serve(tmp_path, public_models, (limit, limit))
    held: list[socket.socket] = []
    try:
        for i in range(flood):
            held.append(socket.socket())
            held[-1].settimeout(30)
            with contextlib.suppress(OSError):  # refused, or closed at once by a server out of descriptors
                held[-1].bind((f"127.0.0.{2 + i % 48}", 0))  # 25 from each address
                held[-1].connect(("127.0.0.1", port))
                held[-1].sendall(PARTIAL)
        peak = len(os.listdir(f"/proc/{server.pid}/fd"))
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            assert _health(s) == b"HTTP/1.1 200 OK"
        assert peak < limit
    finally:
        for s in held:
            s.close()
        server.terminate()
        server.wait(timeout=30)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_health_answers_while_the_shared_worker_threads_are_all_taken(live: LiveServer) -> None:
    """Every thread of the shared pool held (as 40 slow fits hold them): /health still answers, from its own
    threads. It once queued behind them, and a supervisor polling it saw a server that did not answer."""
    import anyio.to_thread

    loop = live.server.servers[0].get_loop()
    release = threading.Event()

    async def hold_a_thread() -> None:
        await anyio.to_thread.run_sync(release.wait)

    async def hold_every_thread() -> None:
        limiter = anyio.to_thread.current_default_thread_limiter()
        async with anyio.create_task_group() as group:
            for _ in range(int(limiter.total_tokens)):
                group.start_soon(hold_a_thread)

    held = asyncio.run_coroutine_threadsafe(hold_every_thread(), loop)
    try:
        with live.client(token=None) as client:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until every thread is taken
                limiter_free = asyncio.run_coroutine_threadsafe(_free_threads(), loop).result(10)
                if limiter_free == 0:
                    break
                time.sleep(0.05)
            assert limiter_free == 0
            assert client.get("/health", timeout=20).status_code == 200
    finally:
        release.set()
        held.result(30)


async def _free_threads() -> float:
    import anyio.to_thread

    return anyio.to_thread.current_default_thread_limiter().available_tokens
