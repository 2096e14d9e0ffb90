"""The bearer token check on a request: the presented token against the server's, in constant time, for
connexion (bearer_info) and, before any body is read, for every secured operation (RequireToken).
(Loading or creating the token is memfit.token_file's job.)"""

from __future__ import annotations

import hmac

from connexion.lifecycle import ConnexionRequest
from starlette.types import ASGIApp, Receive, Scope, Send

from memfit.http.problems import UNAUTHORIZED, send_problem
from memfit.http.routing import ROUTE_KEY
from memfit.http.scope import token_of


def token_matches(presented: str, expected: str) -> bool:
    return hmac.compare_digest(
        presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def bearer_info(token: str, request: ConnexionRequest) -> dict | None:
    """connexion's x-bearerInfoFunc (openapi.yaml names it)."""
    if token_matches(token, token_of(request.scope)):
        return {"sub": "memfit-client"}
    return None


def presents_token(scope: Scope, expected: str) -> bool:
    """Whether the request's first Authorization header is `Bearer <expected>`, read as connexion reads it."""
    authorization = next((value for name, value in scope.get("headers", []) if name == b"authorization"), b"")
    parts = authorization.decode("latin-1").split(maxsplit=1)
    return len(parts) == 2 and parts[0].lower() == "bearer" and token_matches(parts[1], expected)


class RequireToken:
    """Refuses, with a 401, a request for a secured operation (routing.py) that does not present the token,
    before its body is read. (connexion checks the token again for the operations it runs.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope.get(ROUTE_KEY) if scope["type"] == "http" else None
        if route is not None and route.secured and not presents_token(scope, token_of(scope)):
            await send_problem(send, 401, UNAUTHORIZED)
            return
        await self.app(scope, receive, send)
