"""GET /v1/models."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit.handlers.context import current, json_response


async def list_models() -> Response:
    return json_response(await run_in_threadpool(current().service.model_list))  # may read headers: off the loop
