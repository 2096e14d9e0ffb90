"""Reads the request body up to its size limit and within its deadline, before anything parses it: 413 past
the limit (declared or sent), 408 when it trickles in for longer than the deadline, 400 for an invalid
Content-Length; each closes the connection after it (what is left of the body is never read). Only an
operation that takes a body (routing.py) has it read: for anything else the app behind gets an empty body and
what the client sent is never buffered. Either way the app behind gets the whole body as one message, with its
Content-Length (a chunked body is accepted within the same limit)."""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.problems import send_problem
from memfit.http.routing import ROUTE_KEY

MAX_BODY_BYTES = 1 << 20  # 32 requests take a few KiB; anything near this is not a fit request
BODY_TIMEOUT_S = 10.0  # a body that trickles in for longer is cut off with a 408


def whole_body(body: bytes) -> Message:
    return {"type": "http.request", "body": body, "more_body": False}


def replay(first: Message, receive: Receive) -> Receive:
    """`receive` with `first` handed out before anything it says."""
    replayed = False

    async def replaying() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return first
        return await receive()

    return replaying


def with_length(scope: Scope, length: int) -> Scope:
    """The scope of a body now read whole: a chunked one is described by its Content-Length, as the validators
    behind expect (they take a request without one for a request without a body)."""
    headers = [(k, v) for k, v in scope.get("headers", []) if k not in (b"content-length", b"transfer-encoding")]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


class BodyLimit(HttpMiddleware):
    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY_BYTES) -> None:
        super().__init__(app)
        self.max_body = max_body

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope.get(ROUTE_KEY)
        if route is None or not route.takes_body:
            await self.app(scope, replay(whole_body(b""), receive), send)
            return
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                body, problem = await self._read_body(scope, receive)
        except TimeoutError:
            body, problem = None, (408, f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s")
        if problem is not None:  # the rest of the body is not read: the connection closes after the answer
            await send_problem(send, *problem, [(b"connection", b"close")])
            return
        if body is None:  # the client went away while sending
            return
        await self.app(with_length(scope, len(body)), replay(whole_body(body), receive), send)

    async def _read_body(self, scope: Scope, receive: Receive) -> tuple[bytes | None, tuple[int, str] | None]:
        """(the body, or None when the client went away; a (status, detail) problem when it is refused)."""
        too_large = (413, f"the request body is larger than {self.max_body >> 20} MiB")
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                return None, (400, "invalid Content-Length")
            if int(declared) > self.max_body:
                return None, too_large
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None, too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None
