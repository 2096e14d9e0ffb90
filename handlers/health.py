"""GET /health and the contract itself (/v1/openapi.json, /v1/openapi.yaml)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit.generated.models import WireHealth
from memfit.handlers.context import current, json_response


async def health() -> Response:
    """`ok` while it answers; `degraded` and the reason while a state file (the header cache, the measurement
    history) cannot be used and answers come from memory and the derived numbers. The files are probed first: a
    fault since the last request shows, and one that has passed ends."""
    state = current()
    await run_in_threadpool(state.service.check_state)
    reason = state.service.state.reason
    return json_response(
        WireHealth(status="ok", api_revision=state.api_revision, degraded=reason is not None, reason=reason)
    )


async def openapi_json() -> Response:
    return Response(current().spec_json, media_type="application/json")


async def openapi_yaml() -> Response:
    return Response(current().spec_yaml, media_type="text/yaml")
