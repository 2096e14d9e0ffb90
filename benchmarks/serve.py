"""A server for the benchmark: memfit's app, a bare Starlette route calling the same estimator, or a bare route
serving the same bytes (the wire's own cost).

`python -m benchmarks.serve memfit|bare|bytes MODELS_DIR PORT STATE_DIR` runs it on 127.0.0.1 under uvicorn, the
way `memfit serve` runs (same service construction, the process's heap and collector set as memfit.serving sets
them), with access logs off so that all pay the same.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memfit import wire
from memfit.app import create_app
from memfit.generated.models import WireFitVerdictRequest
from memfit.heap import keep_heap
from memfit.readers.model_roots import Root, RootKind
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from memfit.serving import settle_for_serving

TOKEN = "bench-token"


def service(models: str, state: str) -> FitService:
    return build_service([Root(models, RootKind.PLAIN)], state_dir=state)


def _app(fit: FitService, batch: Callable[[Request], Awaitable[Response]]) -> Starlette:
    """A bare Starlette app: the batch route, /health, and the service's index started with it."""

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        fit.index.start()
        yield
        fit.index.stop()

    return Starlette(
        routes=[Route("/v1/models/fit/batch", batch, methods=["POST"]), Route("/health", health)], lifespan=lifespan
    )


def bare_app(fit: FitService) -> Starlette:
    """The least a server could do: parse the JSON, build the requests, call the estimator, dump the answer."""

    async def batch(request: Request) -> Response:
        requests = [WireFitVerdictRequest.model_validate(item) for item in await request.json()]
        answer = await run_in_threadpool(wire.fit_batch, fit, requests)
        return Response(answer.model_dump_json(by_alias=True), media_type="application/json")

    return _app(fit, batch)


def bytes_app(fit: FitService) -> Starlette:
    """A bare route serving the same bytes: each distinct body answered once by the estimator (the bare route's
    answer), then its bytes sent again as they are; what is left is the wire's cost (read the body, send the
    answer)."""
    answers: dict[bytes, bytes] = {}

    async def batch(request: Request) -> Response:
        body = await request.body()
        answer = answers.get(body)
        if answer is None:
            requests = [WireFitVerdictRequest.model_validate(item) for item in json.loads(body)]
            answered = await run_in_threadpool(wire.fit_batch, fit, requests)
            answer = answers[body] = answered.model_dump_json(by_alias=True).encode()
        return Response(answer, media_type="application/json")

    return _app(fit, batch)


APPS = {"bare": bare_app, "bytes": bytes_app}


def main(argv: list[str]) -> int:
    kind, models, port, state = argv
    keep_heap()
    fit = service(models, state)
    app = create_app(fit, TOKEN) if kind == "memfit" else APPS[kind](fit)
    settle_for_serving()
    uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
