"""`/` is where people land: GET or HEAD on it redirects to the Swagger UI page (`/v1/ui/`), and a `Link`
header names the contract (`/v1/openapi.json`). Every other request passes through unchanged."""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware

UI_PATH = "/v1/ui/"
SPEC_LINK = b'</v1/openapi.json>; rel="service-desc", </v1/openapi.yaml>; rel="service-desc"'


class RootRedirect(HttpMiddleware):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        body = b"" if scope["method"] == "HEAD" else b"memfit: the API is described at /v1/ui/ and /v1/openapi.json\n"
        await send(
            {
                "type": "http.response.start",
                "status": 302,
                "headers": [
                    (b"location", UI_PATH.encode()),
                    (b"link", SPEC_LINK),
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
