"""Stamps the API revision (the contract's info.version) on every HTTP response, errors included."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware

REVISION_HEADER = b"x-memfit-api-revision"


class ApiRevision(HttpMiddleware):
    def __init__(self, app: ASGIApp, revision: str) -> None:
        super().__init__(app)
        self.revision = revision.encode()

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (REVISION_HEADER, self.revision)]
            await send(message)

        await self.app(scope, receive, stamped)
