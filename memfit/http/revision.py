"""Stamps the API revision (the contract's info.version) on every HTTP response, errors included."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REVISION_HEADER = b"x-memfit-api-revision"


class ApiRevision:
    def __init__(self, app: ASGIApp, revision: str) -> None:
        self.app = app
        self.revision = revision.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (REVISION_HEADER, self.revision)]
            await send(message)

        await self.app(scope, receive, stamped)
