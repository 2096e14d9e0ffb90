"""Records every HTTP request in the app's metrics (memfit/telemetry.py): its route as the contract names it (the
path template routing.py found, never the raw path, so ids and probes cannot grow the label set), its method,
its status and how long it took. A request that ends with no answer (the client went away) counts as 499."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.routing import METHODS, ROUTE_KEY
from memfit.telemetry import UNMATCHED_ROUTE, Metrics

NO_ANSWER = 499


class RequestMetrics(HttpMiddleware):
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
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
