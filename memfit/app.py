"""The ASGI application: connexion routes and validates against openapi.yaml, a thin guard wraps it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sys
import threading
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

import yaml
from connexion import AsyncApp
from connexion.exceptions import ProblemException
from connexion.lifecycle import ConnexionRequest, ConnexionResponse
from connexion.options import SwaggerUIOptions
from connexion.resolver import Resolver
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfit.handlers.context import CANCEL_KEY, STATE_KEY, ServerState
from memfit.handlers.problems import PROBLEM_JSON, problem_body, problem_response
from memfit.estimator.fit_service import FitService
from memfit.validation import VALIDATORS

log = logging.getLogger("memfit.http")

SPEC_PATH = Path(str(resources.files("memfit.generated").joinpath("openapi.yaml")))  # scripts/regenerate copies it
MAX_BODY_BYTES = 1 << 20  # 32 requests take a few KiB; anything near this is not a fit request
REVISION_HEADER = b"x-memfit-api-revision"
BODY_TIMEOUT_S = 10.0  # a body that trickles in for longer is cut off with a 408
MAX_JSON_DEPTH = 64  # a fit request nests 3 deep; parsers deeper down the stack would overflow on thousands
LONG_DIGITS = re.compile(rb"\d{%d}" % (sys.get_int_max_str_digits() + 1))
MAX_DETAIL = 300  # a validation message may quote the whole body; a problem needs only its start


def load_spec() -> dict:
    with open(SPEC_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


def server_state(service: FitService, token: str) -> ServerState:
    spec = load_spec()
    return ServerState(service=service, token=token, api_revision=str(spec["info"]["version"]),
                       spec_json=json.dumps(spec).encode(), spec_yaml=SPEC_PATH.read_bytes())


class Guard:
    """Outermost layer: puts the server state in the scope, stamps the API revision on every response,
    and reads the body up to its limit before anything parses it (413 past the limit)."""

    def __init__(self, app: ASGIApp, state: ServerState, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.state = state
        self.max_body = max_body
        self.revision = state.api_revision.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[STATE_KEY] = self.state

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (REVISION_HEADER, self.revision)]
            await send(message)

        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                body, problem = await self._read_body(scope, receive)
        except TimeoutError:
            body, problem = None, (408, f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s")
        if problem is None and body and (refused := unparseable(body)):
            problem = (400, refused)
        if problem is not None:
            await _send_problem(stamped, *problem)
            return
        if body is None:  # the client went away while sending
            return
        await self._run_cancellable(scope, body, receive, stamped)

    async def _run_cancellable(self, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
        """Run the app with the body replayed, while listening for the client going away: then (or when the
        server stops) the request's work is cancelled and it ends as 499 `cancelled`."""
        cancel = threading.Event()
        scope[CANCEL_KEY] = cancel
        gone = asyncio.Event()
        replayed = started = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        app = asyncio.ensure_future(self.app(scope, replay, tracked))
        listener = asyncio.ensure_future(listen())
        try:
            await asyncio.wait({app, listener}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the server is stopping
            cancel.set()
            app.cancel()
            listener.cancel()
            log.warning("499 cancelled: %s %s: the server stopped before the answer", scope["method"], scope["path"])
            if started:
                raise
            with contextlib.suppress(OSError, RuntimeError):  # the connection may be closing too
                await _send_problem(send, 499, "the server stopped before the answer was ready")
            return  # the request ended with its answer: the 499
        if app.done():
            listener.cancel()
            app.result()
            return
        cancel.set()  # the client went away first: stop the work, nobody will read the answer
        log.warning("499 cancelled: %s %s: the client went away before the answer", scope["method"], scope["path"])
        app.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app

    async def _read_body(self, scope: Scope, receive: Receive) -> tuple[bytes | None, tuple[int, str] | None]:
        """(the body, or None when the client went away; a (status, detail) problem when it is refused)."""
        too_large = (413, f"the request body is larger than {self.max_body >> 20} MiB")
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                return None, (400, "invalid Content-Length")
            if int(declared) > self.max_body:
                return None, too_large
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None, too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None


def unparseable(body: bytes) -> str | None:
    """Why a JSON body would break the parsers behind the validator, or None. Nesting past MAX_JSON_DEPTH
    overflows recursive ones; an integer longer than Python converts (sys.get_int_max_str_digits) raises
    inside json.loads. Only a body with that many brackets or digits is parsed to see; a body that is not
    JSON at all is left to the validator, which says so."""
    deep = body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH
    if not deep and not LONG_DIGITS.search(body):
        return None
    too_deep = f"the request body nests deeper than {MAX_JSON_DEPTH} levels"
    try:
        document = json.loads(body)
    except RecursionError:
        return too_deep
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    except ValueError:  # json.loads's only other ValueError: an integer past the digit limit
        return f"a number in the request body has more than {sys.get_int_max_str_digits()} digits"
    return too_deep if deep and _depth(document) > MAX_JSON_DEPTH else None


def _depth(document: object) -> int:
    deepest, level = 0, [(document, 1)]
    while level:
        node, depth = level.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        level.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


async def _send_problem(send: Send, status: int, detail: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", PROBLEM_JSON.encode())]})
    await send({"type": "http.response.body", "body": problem_body(status, detail)})


def _problem(_request: ConnexionRequest, exc: Exception) -> ConnexionResponse:
    """Every error connexion or a handler raises, as a problem document with the contract's words."""
    if isinstance(exc, ProblemException):
        status, detail, headers = exc.status, str(exc.detail or exc.title or ""), dict(exc.headers or {})
    elif isinstance(exc, HTTPException):
        status, detail, headers = exc.status_code, str(exc.detail or ""), dict(exc.headers or {})
    else:
        log.error("request failed", exc_info=exc)
        status, detail, headers = 500, "the request failed; see the server log", {}
    if status == 401:
        detail = "a valid bearer token is required"
    if len(detail) > MAX_DETAIL:
        detail = detail[:MAX_DETAIL] + "..."
    response = problem_response(status, detail, headers)
    return ConnexionResponse(status_code=status, mimetype=PROBLEM_JSON, body=response.body,
                             headers={k: v for k, v in response.headers.items() if k != "content-type"})


class SnakeCaseResolver(Resolver):
    """operationId `fitBatch` under `x-openapi-router-controller: memfit.handlers.fit` is `memfit.handlers.fit.fit_batch`."""

    def resolve_operation_id(self, operation) -> str:
        controller = operation.router_controller
        return f"{controller}.{re.sub(r'(?<!^)(?=[A-Z])', '_', operation.operation_id).lower()}"


def create_app(service: FitService, token: str, *, validate_responses: bool = False) -> ASGIApp:
    """The whole server as one ASGI app. `validate_responses` checks every answer against the spec (tests)."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: object) -> AsyncIterator[None]:
        service.index.start()
        try:
            yield
        finally:
            service.index.stop()

    app = AsyncApp(__name__, lifespan=lifespan, swagger_ui_options=SwaggerUIOptions(
        serve_spec=False, spec_path="/v1/openapi.json", swagger_ui_path="/v1/ui"))
    app.add_api(SPEC_PATH, validate_responses=validate_responses, validator_map=VALIDATORS,
                resolver=SnakeCaseResolver())
    for exc_class in (ProblemException, HTTPException, Exception):
        app.add_error_handler(exc_class, _problem)
    return Guard(app, server_state(service, token))
