"""The ASGI application: connexion routes and validates against openapi.yaml; the middleware of memfit.http
wraps it. This module only assembles them."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from connexion import AsyncApp
from connexion.exceptions import ProblemException
from connexion.options import SwaggerUIOptions
from connexion.resolver import Resolver
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from memfit.handlers.context import ServerState
from memfit.handlers.fit import BATCH_PATH, DirectBatch
from memfit.handlers.health import health_of
from memfit.http.auth import RequireToken
from memfit.http.body import BodyLimit
from memfit.http.cancellation import Cancellation
from memfit.http.concurrency import ConcurrencyLimit
from memfit.http.direct import Answer, Direct
from memfit.http.errors import problem_from_exception
from memfit.http.host import HostCheck
from memfit.http.json_depth import JsonDepth
from memfit.http.log_redaction import query_parameters, redact_access_log
from memfit.http.plan_limit import PlanSlots
from memfit.http.proof import HEALTH_PATH, ServerProof
from memfit.http.request_metrics import RequestMetrics
from memfit.http.revision import ApiRevision
from memfit.http.root import RootRedirect
from memfit.http.routing import RouteTable, Routing
from memfit.http.scope import STATE_KEY
from memfit.http.state import WithState
from memfit.http.tarpit import Refusals, Tarpit, quiet_refusals
from memfit.http.validation import VALIDATORS
from memfit.plan_processes import PlanProcesses
from memfit.service.fit_service import FitService
from memfit.telemetry import Metrics

PLAN = "fitPlan"  # the operation that takes a plan slot
SPEC_PATH = Path(str(resources.files("memfit.generated").joinpath("openapi.yaml")))  # scripts/regenerate copies it


# libyaml's parser, where PyYAML has it (its wheels do): the contract, parsed three times at start-up, in 0.13 s a
# time instead of 1.06 s (pure Python), the same document (tests/test_served_spec.py)
SPEC_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_spec(text: str) -> dict:
    return yaml.load(text, Loader=SPEC_LOADER)  # a safe loader: libyaml's, else PyYAML's


def load_spec() -> dict:
    return parse_spec(SPEC_PATH.read_text(encoding="utf-8"))


# What the server serves says `servers: [{url: /}]`: the contract's `http://localhost:9998` documents the default
# address, but a page loaded from 127.0.0.1 or another port must call its own origin (the Swagger UI's "Try it out"
# would otherwise be a cross-origin call, or send the token to whatever listens on 9998).
SERVED_SERVERS = [{"url": "/"}]
_SERVERS_BLOCK = re.compile(r"^servers:\n(?:[ \t]+.*\n|\n)*", re.MULTILINE)


def served_spec_yaml(raw: str) -> str:
    """The contract's text with its top-level `servers` block made relative; every other byte unchanged."""
    served, found = _SERVERS_BLOCK.subn("servers:\n  - url: /\n", raw, count=1)
    if not found or parse_spec(served).get("servers") != SERVED_SERVERS:
        raise ValueError("openapi.yaml's top-level `servers` block is not where served_spec_yaml expects it")
    return served


def server_state(service: FitService, token: str, plan_processes: PlanProcesses | None = None) -> ServerState:
    served = served_spec_yaml(SPEC_PATH.read_text(encoding="utf-8"))
    spec = parse_spec(served)
    return ServerState(
        service=service,
        token=token,
        api_revision=str(spec["info"]["version"]),
        spec_json=json.dumps(spec).encode(),
        spec_yaml=served.encode(),
        metrics=Metrics(service),
        plan_processes=plan_processes,
    )


class SnakeCaseResolver(Resolver):
    """operationId `fitBatch` under `x-openapi-router-controller: memfit.handlers.fit` resolves to
    `memfit.handlers.fit.fit_batch`."""

    def resolve_operation_id(self, operation: Any) -> str:
        controller = operation.router_controller
        return f"{controller}.{re.sub(r'(?<!^)(?=[A-Z])', '_', operation.operation_id).lower()}"


def create_app(
    service: FitService,
    token: str,
    *,
    validate_responses: bool = False,
    metrics_public: bool = False,
    plan_processes: PlanProcesses | None = None,
) -> ASGIApp:
    """The whole server as one ASGI app. `validate_responses` checks every answer against the spec (tests);
    `metrics_public` serves GET /metrics without the token (`memfit serve --metrics-public`); `plan_processes`
    computes plans (`memfit serve`; without them, plans are computed on worker threads)."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: object) -> AsyncIterator[None]:
        service.index.start()
        try:
            yield
        finally:
            service.index.stop()
            if plan_processes is not None:
                plan_processes.close()

    app = AsyncApp(
        __name__,
        lifespan=lifespan,
        swagger_ui_options=SwaggerUIOptions(serve_spec=False, spec_path="/v1/openapi.json", swagger_ui_path="/v1/ui"),
    )
    app.add_api(
        SPEC_PATH,
        validate_responses=validate_responses,
        validator_map=VALIDATORS,
        resolver=SnakeCaseResolver(),
    )
    for exc_class in (ProblemException, HTTPException, Exception):
        app.add_error_handler(exc_class, problem_from_exception)
    state = server_state(service, token, plan_processes)
    spec = load_spec()
    redact_access_log(query_parameters(spec))
    refusals = Refusals()
    quiet_refusals(refusals)
    # outermost first: the state and the revision header reach every request and every answer; refusals that come as a
    # flood are held (tarpit.py); a request whose Host does not name this server is refused; /health proves the server
    # holds the token when challenged; `/` redirects to the Swagger UI page; the route is known before anything else
    # and every request is counted under it, whatever answers it; the token is checked before any body is read, and
    # only an operation that takes one has it read; only a request whose body has arrived takes one of the places of
    # the concurrency limit; a plan then waits for a plan slot (plan_limit.py); GET /health is answered without
    # connexion, and so is a valid fit batch (direct.py)
    direct: dict[tuple[str, str], Answer] = {
        ("GET", HEALTH_PATH): lambda scope, _: health_of(scope[STATE_KEY]),
        ("POST", BATCH_PATH): DirectBatch(spec, validate_responses),
    }
    table = RouteTable(spec, public=frozenset({"getMetrics"}) if metrics_public else frozenset())
    guarded = Routing(
        RequestMetrics(
            RequireToken(
                BodyLimit(ConcurrencyLimit(PlanSlots(JsonDepth(Cancellation(Direct(app, direct))), state.plans, PLAN)))
            ),
            state.metrics,
        ),
        table,
    )
    return WithState(
        ApiRevision(Tarpit(HostCheck(ServerProof(RootRedirect(guarded))), refusals), state.api_revision), state
    )
