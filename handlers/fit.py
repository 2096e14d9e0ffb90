"""POST /v1/models/fit/batch, POST /v1/models/fit/plan and POST /v1/models/fit."""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Scope

from memfit import wire, wire_json
from memfit.estimator.errors import Cancelled, OverBudget
from memfit.generated.models import WireFitVerdictRequest
from memfit.handlers.context import ServerState, cancellation, current, json_response, parse
from memfit.handlers.plan_runner import PlanProcessLost
from memfit.http.plan_limit import RETRY_AFTER_S
from memfit.http.problems import problem_response
from memfit.http.scope import CANCEL_KEY, STATE_KEY
from memfit.http.validation import operation_schemas
from memfit.service.memo import Memo

BATCH_PATH = "/v1/models/fit/batch"
BODIES_KEPT = 64  # batch bodies whose parse is kept
DIRECT_BODY_BYTES = 16 << 10  # the bodies answered directly: a 32-model batch of full requests is a few KiB


async def fit_batch(body: list[dict]) -> Response:
    """Through connexion: a body DirectBatch declined (an invalid one: connexion's problem answers it)."""
    batch = wire_json.batch_of([parse(WireFitVerdictRequest, item) for item in body])
    return await batch_answer(current(), batch, cancellation())


async def batch_answer(state: ServerState, batch: wire_json.Batch, cancelled: Callable[[], bool]) -> Response:
    state.metrics.batch_sizes.observe(len(batch.fits))
    try:
        answer = await run_in_threadpool(wire_json.fit_batch_json, state.service, batch, cancelled)
    except Cancelled as exc:
        return problem_response(499, str(exc))
    return Response(answer, media_type="application/json")


class DirectBatch:
    """POST /v1/models/fit/batch without connexion's layers (memfit.http.direct): a JSON body the compiled validator
    of the contract's schema takes (the one connexion's validator runs first), each request then parsed into its
    generated model, and answered as `fit_batch` answers. Any other body, or content type, is declined: connexion
    answers it, with the problem it gives; so is a body past DIRECT_BODY_BYTES (never parsed twice on the event
    loop). A body's parse is kept by its bytes (a launcher sends the same batch again and again). `check_answers`:
    each answer is checked against the contract's schema of the 200 answer, and one it breaks fails (tests, as
    connexion's validate_responses does)."""

    def __init__(self, spec: dict, check_answers: bool = False) -> None:
        self.body, self.answer = operation_schemas(spec, BATCH_PATH, "post")
        self.check_answers = check_answers
        self.parsed: Memo[bytes, wire_json.Batch] = Memo(BODIES_KEPT)

    async def __call__(self, scope: Scope, body: bytes) -> Response | None:
        if len(body) > DIRECT_BODY_BYTES or dict(scope.get("headers", ())).get(b"content-type") != b"application/json":
            return None
        batch = self.parsed.get(body)
        if batch is None:
            batch = self._parse(body)
            if batch is None:
                return None
            self.parsed.put(body, batch)
        event = scope.get(CANCEL_KEY)
        response = await batch_answer(scope[STATE_KEY], batch, event.is_set if event else lambda: False)
        answer = bytes(response.body)
        if self.check_answers and response.status_code == 200 and not self.answer.is_valid(json.loads(answer)):
            raise AssertionError(f"the batch's answer breaks the contract: {answer[:200]!r}")
        return response

    def _parse(self, body: bytes) -> wire_json.Batch | None:
        """The batch a body holds, or None when the schema's validator (or the generated model) refuses it."""
        try:
            data = json.loads(body.decode())
            if not self.body.is_valid(data):
                return None
            requests = [WireFitVerdictRequest.model_validate(item, by_alias=True, by_name=False) for item in data]
        except (ValueError, RecursionError):  # not UTF-8 JSON, or a request the schema could not refuse (a 400)
            return None
        return wire_json.batch_of(requests)


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
