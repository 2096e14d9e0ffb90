"""Puts the server state in every HTTP request's scope, where handlers find it (memfit.handlers.context) and the
plumbing reads its token (memfit.http.scope)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from memfit.http.scope import STATE_KEY, Secured


class WithState:
    def __init__(self, app: ASGIApp, state: Secured) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[STATE_KEY] = self.state
        await self.app(scope, receive, send)
