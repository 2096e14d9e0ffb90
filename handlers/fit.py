"""POST /v1/models/fit/batch, POST /v1/models/fit/plan and POST /v1/models/fit."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit import wire, wire_json
from memfit.estimator.errors import Cancelled, OverBudget
from memfit.generated.models import WireFitVerdictRequest
from memfit.handlers.context import cancellation, current, json_response, parse
from memfit.handlers.plan_runner import PlanProcessLost
from memfit.http.plan_limit import RETRY_AFTER_S
from memfit.http.problems import problem_response


async def fit_batch(body: list[dict]) -> Response:
    requests = [parse(WireFitVerdictRequest, item) for item in body]
    current().metrics.batch_sizes.observe(len(requests))
    try:
        batch = await run_in_threadpool(wire_json.fit_batch_json, current().service, requests, cancellation())
    except Cancelled as exc:
        return problem_response(499, str(exc))
    return Response(batch, media_type="application/json")


async def fit_plan(body: list[dict]) -> Response:
    """Computed in a plan process under `memfit serve` (on a worker thread otherwise), holding one of the server's
    plan slots (memfit.http.plan_limit: taken before the body was validated)."""
    requests = [parse(WireFitVerdictRequest, item) for item in body]
    state, cancelled = current(), cancellation()
    try:
        if state.plan_processes is not None:
            answer = await state.plan_processes.plan(body)
        else:
            answer = await run_in_threadpool(wire.fit_plan_json, state.service, requests, cancelled)
    except Cancelled as exc:
        return problem_response(499, str(exc))
    except OverBudget as exc:
        return problem_response(400, str(exc))
    except PlanProcessLost as exc:
        return problem_response(503, str(exc), {"Retry-After": str(RETRY_AFTER_S)})
    return Response(answer, media_type="application/json")


async def fit_one(body: dict) -> Response:
    request = parse(WireFitVerdictRequest, body)
    service = current().service
    result = await run_in_threadpool(wire.fit_one, service, request)
    if result is None:
        suggested, why = await run_in_threadpool(wire.suggested_ids, service, request.model_id)
        detail = "no model on this machine, on the Hugging Face Hub or in the bundled catalog has that id"
        return problem_response(404, f"{detail}: {why}" if why else detail, suggestions=suggested)
    return json_response(result)
