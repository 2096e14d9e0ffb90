"""Answers `GET /health` carrying a `Memfit-Challenge` with a `Memfit-Proof` (memfit.server_proof): how the CLI
knows it reached this state directory's server before it sends the token. Every other request passes through."""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.scope import token_of
from memfit.server_proof import CHALLENGE, CHALLENGE_HEADER, PROOF_HEADER, proof

HEALTH_PATH = "/health"
_CHALLENGE = CHALLENGE_HEADER.lower().encode()


class ServerProof(HttpMiddleware):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        nonce = next((v for k, v in scope.get("headers", []) if k == _CHALLENGE), b"").decode("latin-1")
        server = scope.get("server")
        if scope["path"] != HEALTH_PATH or server is None or not CHALLENGE.fullmatch(nonce):
            await self.app(scope, receive, send)
            return
        answer = proof(token_of(scope), nonce, server[0], server[1]).encode()

        async def proven(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (PROOF_HEADER.lower().encode(), answer)]
            await send(message)

        await self.app(scope, receive, proven)
