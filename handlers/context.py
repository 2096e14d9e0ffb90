"""What handlers reach through the request: the server's state, put in the ASGI scope by the app."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from connexion import request
from connexion.exceptions import BadRequestProblem
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from memfit.handlers.plan_runner import PlanRunner
from memfit.http.plan_limit import PlanLimit
from memfit.http.scope import CANCEL_KEY, STATE_KEY
from memfit.service.fit_service import FitService
from memfit.telemetry import Metrics

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class ServerState:
    service: FitService
    token: str
    api_revision: str
    spec_json: bytes
    spec_yaml: bytes
    metrics: Metrics
    plans: PlanLimit = field(default_factory=PlanLimit)  # the plans computed at once
    plan_processes: PlanRunner | None = None  # where they are computed (None: on worker threads)


def current() -> ServerState:
    return request.scope[STATE_KEY]


def cancellation() -> Callable[[], bool]:
    """Whether this request has been cancelled, for work running in a thread to poll."""
    event = request.scope.get(CANCEL_KEY)
    return event.is_set if event is not None else (lambda: False)


def parse(model: type[M], data: object) -> M:
    """A request body as its generated model; what the JSON Schema could not say (a date-time) is a 400 too.
    Only the spec's (camelCase) names are read: a Python field name on the wire is an unknown property, ignored
    like any other, never taken for the field (the models accept field names for memfit's own code)."""
    try:
        return model.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise BadRequestProblem(detail=f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}") from None


def json_response(model: BaseModel, status: int = 200) -> Response:
    """A generated model dumped by alias, with its content type set explicitly."""
    return Response(model.model_dump_json(by_alias=True), status_code=status, media_type="application/json")
