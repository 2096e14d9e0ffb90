"""A flood of refused requests is held, not answered at once: a client without the token that loops costs the
server about one answer a second per connection, and its held connection is the first the cap closes."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfit.http import server as http_server
from memfit.http import tarpit
from memfit.http.spread import SLOTS, spread
from memfit.http.tarpit import FLOOD_REFUSALS_PER_S, QuietRefusals, Refusals
from memfit.service_builder import build_service
from tests.conftest import TOKEN, LiveServer
from tests.test_requests import _connect, _read_answer

REFUSED = b"POST /v1/models/fit/batch HTTP/1.1\r\nHost: localhost\r\ncontent-length: 2\r\n\r\n[]"
BATCH = b'[{"modelId": "qwen3-f16"}]'
FIT = (
    b"POST /v1/models/fit/batch HTTP/1.1\r\nHost: localhost\r\nauthorization: Bearer %s\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (TOKEN.encode(), len(BATCH), BATCH)
)
HEALTH = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
FLOOD_AT = 5  # refusals a second that make a flood, in these tests
HOLD_S = 30.0  # held at least 9/16 of it: 16.9 s
ANSWERED_WITHIN_S = 8.0  # an answer not held comes well within it, however loaded the machine; a held one never does


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_refusals_are_a_flood_past_the_rate_and_for_a_second_after() -> None:
    clock = Clock()
    refusals = Refusals(clock)
    assert not any(refusals.count() for _ in range(FLOOD_REFUSALS_PER_S))
    assert refusals.count()  # one more in the same second
    clock.now += 1
    assert refusals.count()  # the last second's count still makes it one
    clock.now += 2  # a quiet second between
    assert not refusals.count()


def test_the_access_log_drops_refused_lines_only_while_a_flood_lasts() -> None:
    clock = Clock()
    refusals = Refusals(clock)
    quiet = QuietRefusals(refusals)

    def line(status: int) -> logging.LogRecord:
        args = ("127.0.0.1:5000", "POST", "/v1/models/fit/batch", "1.1", status)
        return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)

    assert quiet.filter(line(401))
    for _ in range(FLOOD_REFUSALS_PER_S + 1):
        refusals.count()
    assert not quiet.filter(line(401)) and not quiet.filter(line(421))
    assert quiet.filter(line(200))  # answers that are not refusals are always logged
    clock.now += 3
    assert quiet.filter(line(401))


def test_spread_gives_the_upper_half_of_a_span_in_turn() -> None:
    factors = {round(spread(16.0)) for _ in range(SLOTS)}
    assert factors == {16, 15, 14, 13, 12, 11, 10, 9}


@pytest.fixture
def held(tmp_path: Path, public_models: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    """A server of its own (the flood it sees would reach other tests): at most 2 connections, a flood past 5
    refusals a second, held up to HOLD_S."""
    from memfit.readers.model_roots import Root, RootKind

    monkeypatch.setattr(tarpit, "FLOOD_REFUSALS_PER_S", FLOOD_AT)
    monkeypatch.setattr(tarpit, "HOLD_S", HOLD_S)
    monkeypatch.setattr(http_server, "FIRST_BYTE_TIMEOUT_S", 60.0)
    service = build_service([Root(str(public_models), RootKind.PLAIN)], state_dir=str(tmp_path / "state"))
    with LiveServer(service, max_connections=2, timeout_keep_alive=60) as server:
        yield server


def _closed(s: socket.socket) -> bool:
    s.settimeout(ANSWERED_WITHIN_S)
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


def test_a_flood_of_refusals_is_held_and_its_connection_closed_first(
    held: LiveServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every refusal a flood here (the rate and its window: the tests above), so none depends on how fast the
    machine sends them."""
    monkeypatch.setattr(tarpit, "FLOOD_REFUSALS_PER_S", 0)
    with caplog.at_level(logging.WARNING, "memfit.http"), _connect(held) as flooder:
        flooder.settimeout(ANSWERED_WITHIN_S)
        flooder.sendall(REFUSED)
        with pytest.raises(TimeoutError):  # held
            _read_answer(flooder)
        with _connect(held) as client:
            client.sendall(FIT)  # the token holder is answered while the refusal is held
            assert _read_answer(client).startswith(b"HTTP/1.1 200")
            with _connect(held) as newcomer:  # at the cap: the held connection is the one closed
                assert _closed(flooder)
                newcomer.sendall(HEALTH)
                assert _read_answer(newcomer).startswith(b"HTTP/1.1 200")
            client.sendall(HEALTH)
            assert _read_answer(client).startswith(b"HTTP/1.1 200")
    assert any("a flood of refused requests" in r.getMessage() for r in caplog.records)


def test_a_refusal_below_the_rate_is_answered_at_once(held: LiveServer) -> None:
    with _connect(held) as s:
        s.settimeout(ANSWERED_WITHIN_S)
        for _ in range(FLOOD_AT):  # at most FLOOD_AT in any second, however fast they go: never a flood
            s.sendall(REFUSED)
            assert _read_answer(s).startswith(b"HTTP/1.1 401")
