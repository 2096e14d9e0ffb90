"""GET /health and the contract itself (/v1/openapi.json, /v1/openapi.yaml)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from starlette.responses import Response

from memfit.generated.models import WireHealth
from memfit.handlers.context import ServerState, current, json_response

# The probes' own threads: in the shared pool a probe waited behind the fits that held its 40 threads, and /health,
# which a supervisor polls to decide whether memfit lives, took seconds while fits ran
PROBE_THREADS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memfit-health")


async def health() -> Response:
    return await health_of(current())


async def health_of(state: ServerState) -> Response:
    """`ok` while it answers; `degraded` and the reason while a state file (the header cache, the measurement
    history) cannot be used and answers come from memory and the derived numbers. The files are probed first: a
    fault since the last request shows, and one that has passed ends. (memfit.http.direct answers GET /health
    with it, without connexion; `health` is the operation connexion routes, for HEAD.)"""
    await asyncio.get_running_loop().run_in_executor(PROBE_THREADS, state.service.check_state)
    reason = state.service.state.reason
    return json_response(
        WireHealth(status="ok", api_revision=state.api_revision, degraded=reason is not None, reason=reason)
    )


async def openapi_json() -> Response:
    return Response(current().spec_json, media_type="application/json")


async def openapi_yaml() -> Response:
    return Response(current().spec_yaml, media_type="text/yaml")
