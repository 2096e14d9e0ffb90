"""Hostile requests: slow clients are cut off, the token is guarded, the token file is private."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import stat
import sys
import time
from pathlib import Path

import pytest
from starlette.types import ASGIApp, Message

from memfit.http import body as body_module
from memfit.http import concurrency, json_depth
from memfit.http import server as http_server
from memfit.token_file import UnsafeStateError, load_token
from tests.conftest import TOKEN, LiveServer


def _connect(server: LiveServer, source: str = "127.0.0.1") -> socket.socket:
    """A connection from `source` (any 127.x address: each is a client address of its own to the server)."""
    s = socket.create_connection(("127.0.0.1", server.port), source_address=(source, 0))
    s.settimeout(10)
    return s


def test_headers_that_trickle_in_are_cut_off(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_server, "HEADER_TIMEOUT_S", 0.5)
    with _connect(live) as s:
        s.sendall(b"POST /v1/models/fit/batch HTTP/1.1\r\nHost: localhost\r\n")  # never finished
        start = time.monotonic()
        assert s.recv(100) == b""  # the server closed the connection
        assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    ("head", "rest", "status"),
    [
        (b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n", b"", b"200"),
        (b"GET /health HTTP/1.1\nHost: localhost\n\n", b"", b"400"),  # bare line feeds: httptools refuses them
        (b"POST /v1/models/fit/batch HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n", b"[]", b"401"),
    ],
)
def test_a_head_that_trickles_in_sets_up_uvicorn_once_it_ends(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, head: bytes, rest: bytes, status: bytes
) -> None:
    """A burst of connections that trickle their headers made uvicorn's protocol set up on each one's first byte
    (its parser, both addresses: tens of µs each, with `/health` queued behind them): the bytes are kept until the
    request's line and headers end, then handed over at once, the body's first bytes with them."""
    spoken: list[int] = []
    speak = http_server.DeadlineProtocol._speak

    def counted(self: http_server.DeadlineProtocol) -> None:
        spoken.append(1)
        speak(self)

    monkeypatch.setattr(http_server.DeadlineProtocol, "_speak", counted)
    with _connect(live) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(head) - 1):
            s.sendall(head[i : i + 1])
            time.sleep(0.002)
        time.sleep(0.2)
        assert spoken == []
        s.sendall(head[-1:] + rest)
        answer = _read_answer(s)
    assert spoken == [1] and answer.split(b" ")[1] == status


def _read_answer(s: socket.socket) -> bytes:
    """One whole HTTP answer: its head, then as many body bytes as its Content-Length says (it may come in parts)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length and (chunk := s.recv(4096)):
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_body_that_trickles_in_is_a_408(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_module, "BODY_TIMEOUT_S", 0.5)
    with _connect(live) as s:
        s.sendall(
            b"POST /v1/models/fit/batch HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer "
            + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[{"
        )
        answer = _read_answer(s).decode()
        start = time.monotonic()
        assert s.recv(100) == b"" and time.monotonic() - start < 2  # closed right after the 408
    assert answer.startswith("HTTP/1.1 408") and "application/problem+json" in answer and "invalidRequest" in answer
    assert "connection: close" in answer.lower()


def _fit_status(server: LiveServer) -> tuple[int, float]:
    start = time.monotonic()
    with server.client() as c:
        status = c.post("/v1/models/fit/batch", json=[{"modelId": "qwen3-f16"}]).status_code
    return status, time.monotonic() - start


def test_idle_sockets_do_not_lock_out_a_fit(live: LiveServer) -> None:
    """300 connections that never send a byte, from 5 addresses: uvicorn's limit_concurrency counted them and
    answered everyone else 503."""
    idle = [_connect(live, f"127.0.0.{2 + i % 5}") for i in range(300)]
    try:
        time.sleep(0.2)  # all of them accepted
        status, took = _fit_status(live)
        assert status == 200 and took < 3
    finally:
        for s in idle:
            s.close()


def test_a_connection_that_sends_nothing_is_closed_at_the_first_byte_deadline(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_server, "FIRST_BYTE_TIMEOUT_S", 1.0)
    with _connect(live) as s:
        start = time.monotonic()
        assert s.recv(100) == b""
        # spread over the deadline's upper half (memfit.http.spread), never before it
        assert time.monotonic() - start >= http_server.FIRST_BYTE_TIMEOUT_S / 2


def test_a_request_started_within_the_first_byte_deadline_is_served(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_server, "FIRST_BYTE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(http_server, "HEADER_TIMEOUT_S", 6.0)
    with _connect(live) as s:
        s.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(http_server.FIRST_BYTE_TIMEOUT_S + 0.5)  # headers have HEADER_TIMEOUT_S from the first byte
        s.sendall(b"Host: localhost\r\nConnection: close\r\n\r\n")
        assert _read_answer(s).startswith(b"HTTP/1.1 200")


def test_past_the_concurrency_limit_work_is_a_503_problem(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(concurrency, "MAX_CONCURRENT_REQUESTS", 0)
    with live.client() as c:
        refused = c.post("/v1/models/fit/batch", json=[{"modelId": "qwen3-f16"}])
        health = c.get("/health")
    assert refused.status_code == 503 and refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"] == "failed" and refused.headers["retry-after"] == "1"
    assert health.status_code == 200  # liveness is never limited


def test_an_idle_keep_alive_connection_is_closed(live: LiveServer) -> None:
    with _connect(live) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert b"200 OK" in s.recv(4096)
        s.settimeout(http_server.KEEP_ALIVE_S + 5)
        assert s.recv(100) == b""  # closed after the keep-alive timeout


def test_the_token_never_appears_in_logs_or_answers(live: LiveServer, caplog: pytest.LogCaptureFixture) -> None:
    wrong = "wrong-" + TOKEN[::-1]
    bodies = []
    with caplog.at_level(logging.DEBUG):
        for token in (TOKEN, wrong, None):
            with live.client(token) as c:
                for path, body in (
                    ("/v1/models/fit/batch", [{"modelId": "qwen3-f16"}]),
                    ("/v1/models/fit", {"modelId": "nope"}),
                    ("/v1/models/fit/batch", "not json"),
                ):
                    response = c.post(path, json=body)
                    bodies.append(response.text + str(response.headers))
    logged = "\n".join(r.getMessage() + str(r.args) for r in caplog.records)
    for secret in (TOKEN, wrong):
        assert secret not in logged and not any(secret in b for b in bodies)


def test_the_token_file_is_private_and_replaced_atomically(tmp_path: Path) -> None:
    state = tmp_path / "state"
    token = load_token(str(state), environ={})
    assert token.path is not None
    path = Path(token.path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token.value) >= 32
    assert load_token(str(state), environ={}).value == token.value  # kept across restarts
    path.write_text("")  # an emptied file: a fresh token replaces it, in a new file renamed over the old
    inode = path.stat().st_ino
    fresh = load_token(str(state), environ={})
    assert fresh.value != token.value and path.stat().st_ino != inode
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and not [p for p in state.iterdir() if p.name != "token"]
    os.chmod(path, 0o644)  # a file made readable by others is made private again
    load_token(str(state), environ={})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_token(str(state), environ={"MEMFIT_TOKEN": "from-env"}).path is None


@pytest.mark.parametrize("depth", [65, 960, 100_000])
def test_deeply_nested_json_is_a_400(live: LiveServer, depth: int) -> None:
    body = b"[" * depth + b"]" * depth
    for path in ("/v1/models/fit/batch", "/v1/models/fit", "/v1/models/observations"):
        with live.client() as c:
            response = c.post(path, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400 and response.headers["content-type"] == "application/problem+json"
        assert "nests deeper" in response.json()["detail"]


def test_a_flat_body_with_many_brackets_is_not_too_deep() -> None:
    wide = json.dumps([{"modelId": f"m{i}", "extra": [[1], [2]]} for i in range(32)]).encode()
    assert not json_depth.unparseable(wide) and json_depth.unparseable(b"[" * 65 + b"]" * 65)
    assert not json_depth.unparseable(b"[" * 64 + b"]" * 64) and not json_depth.unparseable(b"[[[ not json")


def test_an_integer_too_long_to_convert_is_a_400(live: LiveServer) -> None:
    digits = "7" * (sys.get_int_max_str_digits() + 1)
    bodies = {
        "/v1/models/fit/batch": f'[{{"modelId": "qwen3-f16", "streams": {digits}}}]',
        "/v1/models/fit": f'{{"modelId": "qwen3-f16", "allocatedTokens": {digits}}}',
        "/v1/models/observations": f'{{"modelId": "x", "artifactBytes": {digits}}}',
    }
    with live.client() as c:
        for path, body in bodies.items():
            response = c.post(path, content=body, headers={"Content-Type": "application/json"})
            assert response.status_code == 400 and "digits" in response.json()["detail"], path
        as_text = c.post("/v1/models/fit", json={"modelId": digits})  # a long run of digits in a string is fine
    assert as_text.status_code == 404


WIDE = b"[" + b",".join([b"[]"] * 349_000) + b"]"  # 1 MiB: the old guard parsed it (~1.2 s of the loop) first


def _asgi(app: ASGIApp, method: str, path: str, body: bytes, token: str | None) -> tuple[int, dict[bytes, bytes], int]:
    """(status, headers, how many times the app asked for the body) for one request straight into the app."""
    reads = 0
    answer: dict = {}

    async def receive() -> Message:
        nonlocal reads
        reads += 1
        if reads == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)  # the body is all sent: the client stays (the call ends long before)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.update(status=message["status"], headers=dict(message["headers"]))

    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
        "headers": headers,
    }

    async def call() -> None:
        task = asyncio.ensure_future(app(scope, receive, send))
        await asyncio.wait({task}, timeout=10)
        task.cancel()

    asyncio.run(call())
    return answer["status"], answer["headers"], reads


@pytest.mark.parametrize("body", [WIDE, b"[" * 100_000 + b"]" * 100_000])
@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_an_unauthenticated_body_is_never_read(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, body: bytes, token: str | None
) -> None:
    """Authentication comes before the body: nothing reads, scans or parses it (benchmarks/loop_blocking.py
    measures how long the loop is held)."""
    parsed = []
    for name in ("outside_strings", "nests_deeper", "unparseable"):
        monkeypatch.setattr(json_depth, name, lambda *a, name=name: parsed.append(name))
    monkeypatch.setattr(json, "loads", lambda *a, **k: parsed.append("json.loads"))
    status, headers, reads = _asgi(live.app, "POST", "/v1/models/fit/batch", body, token)
    assert (status, headers[b"www-authenticate"], reads, parsed) == (401, b"Bearer", 0, [])


def test_a_route_without_a_body_never_reads_one(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = []
    monkeypatch.setattr(json_depth, "unparseable", lambda *a: parsed.append("unparseable"))
    for method, path, token, expected in (
        ("GET", "/health", None, 200),
        ("POST", "/nowhere", TOKEN, 404),
        ("GET", "/v1/models/fit", TOKEN, 405),
        ("GET", "/v1/models", TOKEN, 200),
    ):
        status, _, _ = _asgi(live.app, method, path, WIDE, token)
        assert status == expected, path
    assert parsed == []


def test_an_unauthenticated_megabyte_is_refused_over_http(live: LiveServer) -> None:
    with live.client(None) as c:
        response = c.post("/v1/models/fit/batch", content=WIDE, headers={"Content-Type": "text/plain"})
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert response.json()["type"] == "unauthorized"


def test_the_depth_count_skips_strings_and_needs_no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("the depth check parsed the body"))
    assert json_depth.unparseable(WIDE) is None and json_depth.unparseable(b"[" * 65 + b"]" * 65)
    assert json_depth.unparseable(b"{" * 70)  # unclosed still counts
    assert json_depth.unparseable(b'["' + b"[" * 100 + b'"]') is None  # brackets inside a string do not
    assert json_depth.unparseable(b'["\\\\", "\\"[[' + b"[" * 100 + b'"]') is None  # escapes do not end it
    assert json_depth.unparseable((b"[" * 64 + b"]" * 64 + b",") * 1000) is None


def test_runs_of_digits_just_under_the_limit_are_scanned_once() -> None:
    """The old check searched with re `\\d{4301}`, which restarts inside every run: 1 MiB of 4,300-digit runs
    took ~30 s of the event loop. The count is now linear (a few ms)."""
    digits = sys.get_int_max_str_digits()
    assert json_depth.unparseable((b"7" * digits + b",") * ((1 << 20) // (digits + 1))) is None
    assert json_depth.unparseable(b"[" + b"7" * (digits + 1) + b"]")


@pytest.mark.parametrize("header_bytes", [100 * 1024, 8 << 20])
def test_request_headers_past_the_limit_are_a_431(live: LiveServer, header_bytes: int) -> None:
    with _connect(live) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
        answer = b""
        try:
            for _ in range(header_bytes // 8192):
                s.sendall(b"X-Filler: " + b"a" * 8180 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the client finished
        try:
            while chunk := s.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 431") and b"application/problem+json" in answer and b"invalidRequest" in answer


def test_headers_within_the_limit_are_served(live: LiveServer) -> None:
    with _connect(live) as s:
        filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 1000) for i in range(60))  # ~60 KiB
        s.sendall(
            b"GET /health HTTP/1.1\r\nHost: localhost\r\n"
            + filler
            + b"\r\nGET /health HTTP/1.1\r\nHost: localhost\r\n"
            + filler
            + b"Connection: close\r\n\r\n"
        )
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.count(b"HTTP/1.1 200 OK") == 2


def test_a_symlinked_token_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0:root:/root:/bin/bash\n")
    target.chmod(0o644)
    (state / "token").symlink_to(target)
    with pytest.raises(UnsafeStateError, match="symbolic link"):
        load_token(str(state), environ={})
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # never chmod-ed through the link
    assert target.read_text().startswith("root:")


@pytest.mark.parametrize("where", ["directory", "file"])
def test_a_state_directory_or_token_file_others_can_write_is_refused(tmp_path: Path, where: str) -> None:
    state = tmp_path / "state"
    token = load_token(str(state), environ={})
    assert token.path is not None
    (state if where == "directory" else Path(token.path)).chmod(0o777 if where == "directory" else 0o666)
    with pytest.raises(UnsafeStateError, match="writable by its group or others"):
        load_token(str(state), environ={})


def test_a_token_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")
    state = tmp_path / "state"
    token = load_token(str(state), environ={})
    assert token.path is not None
    os.chown(token.path, 12345, 12345)
    with pytest.raises(UnsafeStateError, match="another user"):
        load_token(str(state), environ={})


def test_a_fifo_as_token_file_is_refused_without_blocking(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.mkfifo(state / "token", 0o600)
    with pytest.raises(UnsafeStateError, match="not a regular file"):
        load_token(str(state), environ={})


def test_a_chunked_body_is_read_within_the_same_limit(live: LiveServer) -> None:
    body = json.dumps([{"modelId": "qwen3-f16"}]).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7))
    head = (
        b"POST /v1/models/fit/batch HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer "
        + TOKEN.encode()
        + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    with _connect(live) as s:
        s.sendall(head + chunked + b"0\r\n\r\n")
        answer = _read_answer(s)
    assert answer.startswith(b"HTTP/1.1 200") and b'"modelId":"qwen3-f16"' in answer
    too_large = b"".join(b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16)) for _ in range(17))  # 1 MiB + 64 KiB
    with _connect(live) as s:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the server may stop reading at the limit
            s.sendall(head + too_large + b"0\r\n\r\n")
        assert _read_answer(s).startswith(b"HTTP/1.1 413")
