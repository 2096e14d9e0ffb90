"""POST, GET /v1/models/observations and DELETE /v1/models/observations/{observationId}."""

from __future__ import annotations

import os

from connexion import request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit import wire
from memfit.estimator.errors import ObservationRefused
from memfit.generated.models import WireObservation
from memfit.handlers.context import current, json_response, parse
from memfit.http.problems import problem_response
from memfit.readers.state_health import StateFileError

DEFAULT_LIMIT = 100  # openapi.yaml's default for `limit`
LIST_QUERY = {"limit", "modelId"}
RECORD_QUERY = {"dryRun"}
RETRY_AFTER = "10"  # seconds: a lock another process holds is usually let go by then


def _unavailable(exc: StateFileError, outcome: str, done: str) -> Response:
    """A 503 for a measurement history that cannot be `done` (read, written) now: nothing was changed, and the
    request may be sent again later."""
    where = os.path.dirname(os.path.abspath(exc.path))
    why = exc.reason.partition(": ")[2] or exc.reason
    return problem_response(
        503,
        f"{outcome}: the measurement history in the state directory {where} cannot be {done} ({why})",
        {"Retry-After": RETRY_AFTER},
    )


def _unknown_query(takes: set[str]) -> Response | None:
    """A 400 naming a query parameter the operation does not take: a misspelt `dryRun` would store, a misspelt
    filter list every model's observations."""
    unknown = sorted(set(request.query_params) - takes)
    if not unknown:
        return None
    return problem_response(400, f"unknown query parameter {unknown[0][:64]!r}; this operation takes {sorted(takes)}")


async def record_observation(body: dict, dryRun: bool = False) -> Response:  # noqa: N803
    refused = _unknown_query(RECORD_QUERY)
    if refused is not None:
        return refused
    observation = parse(WireObservation, body)
    try:
        receipt = await run_in_threadpool(wire.record_observation, current().service, observation, not dryRun)
    except StateFileError as exc:  # never acknowledged: the runtime may send it again later
        return _unavailable(exc, "the observation was not stored", "written")
    except ObservationRefused as exc:
        return problem_response(400, str(exc))
    return json_response(receipt, status=200 if dryRun else 201)


async def list_observations(limit: int = DEFAULT_LIMIT, modelId: str | None = None) -> Response:  # noqa: N803
    refused = _unknown_query(LIST_QUERY)
    if refused is not None:
        return refused
    try:
        observations = await run_in_threadpool(wire.observation_list, current().service, limit, modelId)
    except StateFileError as exc:
        return _unavailable(exc, "the observations cannot be listed now", "read")
    return json_response(observations)


async def delete_observation(observationId: int) -> Response:  # noqa: N803
    try:
        deleted = await run_in_threadpool(wire.delete_observation, current().service, observationId)
    except StateFileError as exc:
        return _unavailable(exc, "the observation was not removed", "written")
    if not deleted:
        return problem_response(404, "no observation has that id")
    return Response(status_code=204)
