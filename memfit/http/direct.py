"""Answers some operations without connexion's stack of about twenty layers: `GET /health` (nothing to validate:
no body, one free-form header), which was most of what a `/health` cost (about 2 ms of a 2.5 ms answer) and so what
a supervisor's or a launcher's polling costs the server, and `POST /v1/models/fit/batch` when its body is valid
(handlers/fit.py: the layers were most of a warm batch's cost). An answer may decline (None): connexion then
answers the request, body and all, with its own problem. It sits innermost, behind every memfit middleware: the
revision header, the proof, the metrics and the limits apply as to every request (body.py has read the body whole).
The answers are the handlers' own (app.py passes them); one that fails is a 500 problem, as connexion's error
handler gives."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from memfit.http.body import replay
from memfit.http.middleware import HttpMiddleware
from memfit.http.problems import FAILED_DETAIL, send_problem

Answer = Callable[[Scope, bytes], Awaitable[Response | None]]  # (the scope, the whole body): None declines

log = logging.getLogger("memfit.http")


class Direct(HttpMiddleware):
    def __init__(self, app: ASGIApp, routes: Mapping[tuple[str, str], Answer]) -> None:
        """`routes`: (method, path) to the answer, given the request's scope and whole body."""
        super().__init__(app)
        self.routes = routes

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = self.routes.get((scope["method"], scope["path"]))
        if answer is None:
            await self.app(scope, receive, send)
            return
        message = await receive()  # the whole body, as body.py hands it over
        try:
            response = await answer(scope, message.get("body", b""))
        except Exception as exc:
            log.error("request failed", exc_info=exc)
            await send_problem(send, 500, FAILED_DETAIL)
            return
        if response is None:
            await self.app(scope, replay(message, receive), send)
            return
        await response(scope, receive, send)
