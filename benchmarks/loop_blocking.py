"""How long a hostile body holds the event loop, before any answer: `python -m benchmarks.loop_blocking`.

A 1 MiB body of `[[],[],...]` (and one nested 100,000 deep) is sent to POST /v1/models/fit/batch as text/plain,
without a token and with one, straight into memfit's ASGI app, while a ticker task on the same loop wakes every
millisecond. The longest gap between two ticks, less the millisecond it sleeps, is how long the loop was held.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message

from memfit.app import create_app
from memfit.readers.model_roots import Root, RootKind
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service

TOKEN = "bench-token"
BODIES = {
    "1 MiB [[],[],...]": b"[" + b",".join([b"[]"] * 349_000) + b"]",
    "100,000 deep": b"[" * 100_000 + b"]" * 100_000,
}


def scope(body: bytes, token: str | None) -> dict:
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "path": "/v1/models/fit/batch",
        "raw_path": b"/v1/models/fit/batch",
        "query_string": b"",
        "root_path": "",
        "scheme": "http",
        "server": ("127.0.0.1", 9998),
        "client": ("127.0.0.1", 5000),
        "headers": headers,
    }


async def held(app: ASGIApp, body: bytes, token: str | None) -> tuple[int, float, float]:
    """(status, longest loop stall in ms, time to the answer in ms)"""
    messages = iter([{"type": "http.request", "body": body, "more_body": False}])
    status = 0

    async def receive() -> Message:
        for message in messages:
            return message
        await asyncio.sleep(3600)  # the body is all sent: the client stays (the call is cancelled long before)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    longest, stop = 0.0, False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest, last = max(longest, now - last - 0.001), now

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    call = asyncio.ensure_future(app(scope(body, token), receive, send))
    while status == 0 and not call.done():
        await asyncio.sleep(0.001)
    answered = time.perf_counter() - start
    stop = True
    await asyncio.wait({call}, timeout=5)
    call.cancel()
    await asyncio.gather(tick, call, return_exceptions=True)
    return status, longest * 1e3, answered * 1e3


async def main(make_app: Callable[[FitService, str], ASGIApp] = create_app) -> None:
    app = make_app(build_service([Root(tempfile.mkdtemp(), RootKind.PLAIN)]), TOKEN)
    for name, body in BODIES.items():
        for token in (None, "wrong", TOKEN):
            runs = [await held(app, body, token) for _ in range(5)]
            worst = max(r[1] for r in runs)
            print(
                f"{name:18} token={str(token):11} status {runs[0][0]}  loop held at most {worst:7.2f} ms"
                f"  answer in {sorted(r[2] for r in runs)[2]:7.2f} ms (median of 5)"
            )


if __name__ == "__main__":
    asyncio.run(main())
