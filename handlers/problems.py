"""Problem documents (RFC 9457) with the contract's short `type` words; never a stack trace."""

from __future__ import annotations

import logging

from starlette.responses import Response

from memfit.estimator.vocabulary import ProblemType
from memfit.generated.models import Problem

log = logging.getLogger("memfit.http")

TYPE_FOR_STATUS = {401: ProblemType.UNAUTHORIZED, 404: ProblemType.NOT_FOUND, 499: ProblemType.CANCELLED}
TITLES = {400: "Invalid request", 401: "Unauthorized", 404: "Not found", 405: "Method not allowed", 408: "Too slow",
          413: "Request body too large", 415: "Unsupported media type", 499: "Cancelled", 500: "Failed"}
PROBLEM_JSON = "application/problem+json"


def problem_type(status: int) -> str:
    if status in TYPE_FOR_STATUS:
        return TYPE_FOR_STATUS[status]
    return ProblemType.FAILED if status >= 500 else ProblemType.INVALID_REQUEST


def problem_body(status: int, detail: str) -> bytes:
    title = TITLES.get(status, "Failed" if status >= 500 else "Invalid request")
    return Problem(type=problem_type(status), title=title, status=status, detail=detail).model_dump_json().encode()


def problem_response(status: int, detail: str, headers: dict[str, str] | None = None) -> Response:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return Response(problem_body(status, detail), status_code=status, media_type=PROBLEM_JSON, headers=headers)
