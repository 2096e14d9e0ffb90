"""connexion's error handler: every error connexion or a handler raises, as a problem with the contract's words."""

from __future__ import annotations

import logging

from connexion.exceptions import ProblemException
from connexion.lifecycle import ConnexionRequest, ConnexionResponse
from starlette.exceptions import HTTPException

from memfit.http.problems import FAILED_DETAIL, MAX_DETAIL, PROBLEM_JSON, UNAUTHORIZED, problem_response
from memfit.http.routing import ALLOW_KEY

log = logging.getLogger("memfit.http")


def problem_from_exception(request: ConnexionRequest, exc: Exception) -> ConnexionResponse:
    """connexion's error handler: every error it or a handler raises, as a problem with the contract's words."""
    if isinstance(exc, ProblemException):
        status, detail, headers = exc.status, str(exc.detail or exc.title or ""), dict(exc.headers or {})
    elif isinstance(exc, HTTPException):
        status, detail, headers = exc.status_code, str(exc.detail or ""), dict(exc.headers or {})
    else:
        log.error("request failed", exc_info=exc)
        status, detail, headers = 500, FAILED_DETAIL, {}
    if status == 401:
        detail = UNAUTHORIZED
    if status == 405 and request.scope.get(ALLOW_KEY):  # starlette names only the first route of a path
        headers["Allow"] = request.scope[ALLOW_KEY]
    if len(detail) > MAX_DETAIL:
        detail = detail[:MAX_DETAIL] + "..."
    response = problem_response(status, detail, headers)
    return ConnexionResponse(
        status_code=status,
        mimetype=PROBLEM_JSON,
        body=response.body,
        headers={k: v for k, v in response.headers.items() if k != "content-type"},
    )
