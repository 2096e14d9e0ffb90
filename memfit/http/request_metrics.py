"""Records every HTTP request in the app's metrics (memfit/telemetry.py): its route as the contract names it (the
path template routing.py found, never the raw path, so ids and probes cannot grow the label set), its method,
its status and how long it took. A request that ends with no answer (the client went away) counts as 499."""

from __future__ import annotations

import time
from typing import Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.routing import METHODS, ROUTE_KEY

NO_ANSWER = 499
UNMATCHED_ROUTE = "unmatched"  # a path the contract does not name (404s, the Swagger UI's pages)


class RequestRecorder(Protocol):
    """Where each request is counted (memfit.telemetry.Metrics)."""

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None: ...


class RequestMetrics(HttpMiddleware):
    def __init__(self, app: ASGIApp, metrics: RequestRecorder) -> None:
        super().__init__(app)
        self.metrics = metrics

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope.get(ROUTE_KEY)
        template = route.template if route is not None else UNMATCHED_ROUTE
        method = scope["method"] if scope["method"].lower() in METHODS else "other"
        status = NO_ANSWER
        started = time.perf_counter()

        async def recorded(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recorded)
        finally:
            self.metrics.observe_request(template, method, status, time.perf_counter() - started)
