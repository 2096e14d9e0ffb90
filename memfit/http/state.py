"""Puts the server state in every HTTP request's scope, where handlers find it (memfit.handlers.context)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from memfit.handlers.context import STATE_KEY, ServerState


class WithState:
    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[STATE_KEY] = self.state
        await self.app(scope, receive, send)
