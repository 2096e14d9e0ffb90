"""POST /v1/models/observations."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit import wire
from memfit.generated.models import WireObservation
from memfit.handlers.context import current, json_response, parse


async def record_observation(body: dict) -> Response:
    observation = parse(WireObservation, body)
    receipt = await run_in_threadpool(wire.record_observation, current().service, observation)
    return json_response(receipt, status=201)
