"""What the app puts in a request's ASGI scope for the layers above it, and what the plumbing reads back."""

from __future__ import annotations

from typing import Protocol

from starlette.types import Scope

STATE_KEY = "memfit.state"  # the server's state (memfit.handlers.context.ServerState), put there by state.py
CANCEL_KEY = "memfit.cancel"  # a threading.Event the app sets when the client goes away or the server stops


class Secured(Protocol):
    """What the plumbing reads of the server state: the bearer token (auth.py, proof.py, tarpit.py)."""

    @property
    def token(self) -> str: ...


def token_of(scope: Scope) -> str:
    """The server's bearer token, from the state in a request's scope."""
    state: Secured = scope[STATE_KEY]
    return state.token
