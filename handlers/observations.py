"""POST /v1/models/observations."""

from __future__ import annotations

import os

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit import wire
from memfit.generated.models import WireObservation
from memfit.handlers.context import current, json_response, parse
from memfit.handlers.problems import problem_response
from memfit.readers.state_health import StateFileError


async def record_observation(body: dict) -> Response:
    observation = parse(WireObservation, body)
    try:
        receipt = await run_in_threadpool(wire.record_observation, current().service, observation)
    except StateFileError as exc:  # never acknowledged: the runtime may send it again later
        where = os.path.dirname(os.path.abspath(exc.path))
        return problem_response(
            503,
            f"the observation was not stored: the measurement history in the state directory {where} cannot be "
            f"written ({exc.reason.removeprefix('cannot write the measurement history: ')})",
            {"Retry-After": "10"},
        )
    return json_response(receipt, status=201)
