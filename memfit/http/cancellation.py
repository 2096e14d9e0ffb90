"""Runs the app while listening for the client going away: then (or when the server stops) the request's
work is cancelled (the threading.Event at CANCEL_KEY is set, for work in a thread to poll) and it ends as a
499 `cancelled`. Runs behind body.py: the first message it receives is the whole body."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from starlette.types import Message, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.problems import send_problem
from memfit.http.scope import CANCEL_KEY

log = logging.getLogger("memfit.http")


class Cancellation(HttpMiddleware):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        first = await receive()
        if first["type"] == "http.disconnect":
            return
        cancel = threading.Event()
        scope[CANCEL_KEY] = cancel
        gone = asyncio.Event()
        replayed = started = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            await gone.wait()
            return {"type": "http.disconnect"}

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        app = asyncio.ensure_future(self.app(scope, replay, tracked))
        listener = asyncio.ensure_future(listen())
        try:
            await asyncio.wait({app, listener}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the server is stopping
            cancel.set()
            app.cancel()
            listener.cancel()
            log.warning("499 cancelled: %s %s: the server stopped before the answer", scope["method"], scope["path"])
            if started:
                raise
            with contextlib.suppress(OSError, RuntimeError):  # the connection may be closing too
                await send_problem(send, 499, "the server stopped before the answer was ready")
            return  # the request ended with its answer: the 499
        if app.done():
            listener.cancel()
            app.result()
            return
        cancel.set()  # the client went away first: stop the work, nobody will read the answer
        log.warning("499 cancelled: %s %s: the client went away before the answer", scope["method"], scope["path"])
        app.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app
