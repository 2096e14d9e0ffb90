"""How memfit runs under uvicorn: its limits, set explicitly, and deadlines for request headers.

uvicorn closes an idle keep-alive connection, but waits forever for request headers that trickle in; the
protocol below closes a connection that has sent nothing within FIRST_BYTE_TIMEOUT_S of its start, and one
whose headers are not complete within HEADER_TIMEOUT_S of its first byte or of its previous response. (A body
that trickles in is cut off by the app's guard, with a 408, and the connection closed.)

Sockets are not what is scarce: uvicorn's limit_concurrency counts connections, so 256 idle ones answered 503
to everyone else. It is off; the app limits the requests it works on at once (memfit.http.concurrency), and
one client address may hold at most MAX_CONNECTIONS_PER_PEER connections (past it, a 503 and the connection
closed before anything is read).

httptools sets no limit on the size of request headers (uvicorn's h11_max_incomplete_event_size is for h11
only): the protocol below feeds its parser at most MAX_HEADER_BYTES of a request's line and headers, and
answers a 431 problem and closes the connection when they do not end within them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_S = 10.0
FIRST_BYTE_TIMEOUT_S = 1.5  # a connection that has sent nothing by then is closed
KEEP_ALIVE_S = 5
MAX_CONNECTIONS_PER_PEER = 64  # concurrent connections from one client address
MAX_HEADER_BYTES = 64 * 1024  # the request line and headers together; past it a 431
GRACEFUL_SHUTDOWN_S = 5

log = logging.getLogger("memfit.http")


def _peers(server_state: Any) -> dict[str, int]:
    """Open connections per client address, kept beside uvicorn's own per-server state."""
    peers = getattr(server_state, "memfit_peers", None)
    if peers is None:
        peers = server_state.memfit_peers = {}
    return peers


class DeadlineProtocol(HttpToolsProtocol):
    _deadline: asyncio.TimerHandle | None = None
    _awaiting_headers = True  # the parser is inside a request's line and headers (or before one)
    _header_bytes = 0
    _messages = 0  # requests whose headers have ended on this connection
    _silent = True  # nothing received yet
    _peer: str | None = None  # counted in _peers while open

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = self.client[0] if self.client else None
        if peer is not None:
            peers = _peers(self.server_state)
            if peers.get(peer, 0) >= MAX_CONNECTIONS_PER_PEER:
                self._refuse_peer(peer)
                return
            peers[peer] = peers.get(peer, 0) + 1
            self._peer = peer
        self._arm(FIRST_BYTE_TIMEOUT_S, "closed a connection that sent nothing for %.1f s")

    def _refuse_peer(self, peer: str) -> None:
        from memfit.handlers.problems import PROBLEM_JSON, problem_body  # here: a worker imports this module first

        log.warning("503: %s already holds %d connections", peer, MAX_CONNECTIONS_PER_PEER)
        body = problem_body(503, f"this client already holds {MAX_CONNECTIONS_PER_PEER} connections")
        self.transport.write(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: "
            + PROBLEM_JSON.encode()
            + b"\r\ncontent-length: "
            + str(len(body)).encode()
            + b"\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
            + body
        )
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._silent and data:
            self._silent = False
            self._arm()  # the first byte: now the whole request line and headers have HEADER_TIMEOUT_S
        if self._awaiting_headers:
            room = MAX_HEADER_BYTES - self._header_bytes
            if len(data) > room:  # feed what fits; the rest only once these headers have ended
                head, data = data[:room], data[room:]
                self._header_bytes += len(head)
                messages = self._messages
                super().data_received(head)
                if self.transport.is_closing():
                    return
                if self._awaiting_headers and self._messages == messages:
                    self._headers_too_large()
                    return
                self.data_received(data)  # a pipelined request's headers count from here on
                return
            self._header_bytes += len(data)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._awaiting_headers = False
        self._messages += 1
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_headers, self._header_bytes = True, 0  # a pipelined request may follow

    def _headers_too_large(self) -> None:
        from memfit.handlers.problems import PROBLEM_JSON, problem_body

        log.warning("431: request headers over %d bytes", MAX_HEADER_BYTES)
        body = problem_body(431, f"the request line and headers are larger than {MAX_HEADER_BYTES >> 10} KiB")
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: "
            + PROBLEM_JSON.encode()
            + b"\r\ncontent-length: "
            + str(len(body)).encode()
            + b"\r\nconnection: close\r\n\r\n"
            + body
        )
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._peer is not None:
            peers = _peers(self.server_state)
            left = peers.get(self._peer, 1) - 1
            if left > 0:
                peers[self._peer] = left
            else:
                peers.pop(self._peer, None)
            self._peer = None
        super().connection_lost(exc)

    def _arm(
        self, seconds: float | None = None, why: str = "closed a connection whose request headers took over %.0f s"
    ) -> None:
        self._disarm()
        seconds = HEADER_TIMEOUT_S if seconds is None else seconds
        self._deadline = self.loop.call_later(seconds, self._too_slow, seconds, why)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self, seconds: float, why: str) -> None:
        if not self.transport.is_closing():
            # a connection opened and never used is routine (browsers open spares); headers that trickle are not
            log.log(logging.INFO if self._silent else logging.WARNING, why, seconds)
            self.transport.close()


def server_config(app: ASGIApp | Callable[[], ASGIApp], host: str, port: int, **overrides: Any) -> uvicorn.Config:
    """The one uvicorn configuration memfit serves with (tests serve with it too); `app` is the app, or with
    `factory=True` what makes it in each worker."""
    settings: dict[str, Any] = dict(
        host=host,
        port=port,
        workers=1,  # not WEB_CONCURRENCY's: `memfit serve --workers` says how many
        http=DeadlineProtocol,
        log_level="info",
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        limit_concurrency=None,  # it counts connections: the app limits requests instead (memfit.http.concurrency)
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        server_header=False,
    )
    settings.update(overrides)
    return uvicorn.Config(app, **settings)
