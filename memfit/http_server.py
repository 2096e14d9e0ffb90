"""How memfit runs under uvicorn: its limits, set explicitly, and a deadline for request headers.

uvicorn closes an idle keep-alive connection, but waits forever for request headers that trickle in; the
protocol below closes a connection whose headers are not complete within HEADER_TIMEOUT_S of its start or
of its previous response. (A body that trickles in is cut off by the app's guard, with a 408.)

httptools sets no limit on the size of request headers (uvicorn's h11_max_incomplete_event_size is for h11
only): the protocol below feeds its parser at most MAX_HEADER_BYTES of a request's line and headers, and
answers a 431 problem and closes the connection when they do not end within them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from memfit.handlers.problems import PROBLEM_JSON, problem_body

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 256  # beyond this uvicorn answers 503 rather than queue without bound
MAX_HEADER_BYTES = 64 * 1024  # the request line and headers together; past it a 431
GRACEFUL_SHUTDOWN_S = 5

log = logging.getLogger("memfit.http")


class DeadlineProtocol(HttpToolsProtocol):
    _deadline: asyncio.TimerHandle | None = None
    _awaiting_headers = True  # the parser is inside a request's line and headers (or before one)
    _header_bytes = 0
    _messages = 0  # requests whose headers have ended on this connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
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
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        if not self.transport.is_closing():
            log.warning("closed a connection whose request headers took over %.0f s", HEADER_TIMEOUT_S)
            self.transport.close()


def server_config(app: ASGIApp, host: str, port: int, **overrides: Any) -> uvicorn.Config:
    """The one uvicorn configuration memfit serves with (tests serve with it too)."""
    settings: dict[str, Any] = dict(
        host=host,
        port=port,
        http=DeadlineProtocol,
        log_level="info",
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        limit_concurrency=MAX_CONNECTIONS,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        server_header=False,
    )
    settings.update(overrides)
    return uvicorn.Config(app, **settings)
