"""How memfit runs under uvicorn: its limits, set explicitly, and a deadline for request headers.

uvicorn closes an idle keep-alive connection, but waits forever for request headers that trickle in; the
protocol below closes a connection whose headers are not complete within HEADER_TIMEOUT_S of its start or
of its previous response. (A body that trickles in is cut off by the app's guard, with a 408.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
MAX_CONNECTIONS = 256  # beyond this uvicorn answers 503 rather than queue without bound
MAX_HEADER_BYTES = 64 * 1024
GRACEFUL_SHUTDOWN_S = 5

log = logging.getLogger("memfit.http")


class DeadlineProtocol(HttpToolsProtocol):
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

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
