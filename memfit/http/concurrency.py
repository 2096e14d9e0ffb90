"""Limits the requests the server works on at once (not the connections it holds: an idle or slow socket
costs a file descriptor, not work). Past MAX_CONCURRENT_REQUESTS a request for an operation that needs the
token is answered at once with a 503 problem and `Retry-After`, rather than queued. Runs behind body.py, so a
body still arriving holds no place; the liveness and contract routes are never limited."""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.problems import send_problem
from memfit.http.routing import ROUTE_KEY

MAX_CONCURRENT_REQUESTS = 64  # the worker threads are 40; a batch of 32 models takes milliseconds when cached
RETRY_AFTER_S = 1

log = logging.getLogger("memfit.http")


class ConcurrencyLimit(HttpMiddleware):
    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app)
        self.in_flight = 0  # only the event loop's thread changes it

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope.get(ROUTE_KEY)
        if route is None or not route.secured:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= MAX_CONCURRENT_REQUESTS:
            log.warning("503: %d requests in progress", self.in_flight)
            await send_problem(
                send,
                503,
                f"the server is working on {MAX_CONCURRENT_REQUESTS} requests; retry in {RETRY_AFTER_S} s",
                [(b"retry-after", str(RETRY_AFTER_S).encode())],
            )
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
