"""Answers the operations whose requests hold nothing to validate (`GET /health`: no body, one free-form header)
without connexion's stack of about twenty layers, which was most of what a `/health` cost (about 2 ms of a 2.5 ms
answer) and so what a supervisor's or a launcher's polling costs the server. It sits innermost, behind every memfit
middleware: the revision header, the proof, the metrics and the limits apply as to every request. The answers are
the handlers' own (app.py passes them); one that fails is a 500 problem, as connexion's error handler gives."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.problems import FAILED_DETAIL, send_problem

Answer = Callable[[Scope], Awaitable[Response]]

log = logging.getLogger("memfit.http")


class Direct(HttpMiddleware):
    def __init__(self, app: ASGIApp, routes: Mapping[tuple[str, str], Answer]) -> None:
        """`routes`: (method, path) to the answer."""
        super().__init__(app)
        self.routes = routes

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = self.routes.get((scope["method"], scope["path"]))
        if answer is None:
            await self.app(scope, receive, send)
            return
        try:
            response = await answer(scope)
        except Exception as exc:
            log.error("request failed", exc_info=exc)
            await send_problem(send, 500, FAILED_DETAIL)
            return
        await response(scope, receive, send)
