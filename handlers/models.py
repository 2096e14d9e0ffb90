"""GET /v1/models."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit import wire
from memfit.handlers.context import current, json_response


async def list_models() -> Response:
    return json_response(await run_in_threadpool(wire.model_list, current().service))  # may read headers: off the loop
