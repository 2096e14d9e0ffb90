"""The bearer token check on a request: the presented token against the server's, in constant time.
(Loading or creating the token is memfit.auth's job.)"""

from __future__ import annotations

import hmac

from connexion.lifecycle import ConnexionRequest

from memfit.handlers.context import STATE_KEY


def token_matches(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape"))


def bearer_info(token: str, request: ConnexionRequest) -> dict | None:
    """connexion's x-bearerInfoFunc (openapi.yaml names it through memfit.auth)."""
    if token_matches(token, request.scope[STATE_KEY].token):
        return {"sub": "memfit-client"}
    return None

