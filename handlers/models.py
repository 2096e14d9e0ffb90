"""GET /v1/models."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit import wire_json
from memfit.handlers.context import current


async def list_models() -> Response:
    body = await run_in_threadpool(wire_json.model_list_json, current().service)  # may read headers: off the loop
    return Response(body, media_type="application/json")
