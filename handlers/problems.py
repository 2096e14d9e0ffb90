"""Problem documents (RFC 9457) with the contract's short `type` words; never a stack trace."""

from __future__ import annotations

import logging

from starlette.responses import Response

from memfit.generated.models import Problem

log = logging.getLogger("memfit.http")

TYPE_FOR_STATUS = {401: "unauthorized", 404: "notFound", 499: "cancelled"}
TITLES = {400: "Invalid request", 401: "Unauthorized", 404: "Not found", 405: "Method not allowed", 408: "Too slow",
          413: "Request body too large", 415: "Unsupported media type", 499: "Cancelled", 500: "Failed"}
PROBLEM_JSON = "application/problem+json"


def problem_type(status: int) -> str:
    if status in TYPE_FOR_STATUS:
        return TYPE_FOR_STATUS[status]
    return "failed" if status >= 500 else "invalidRequest"


def problem_body(status: int, detail: str) -> bytes:
    title = TITLES.get(status, "Failed" if status >= 500 else "Invalid request")
    return Problem(type=problem_type(status), title=title, status=status, detail=detail).model_dump_json().encode()


def problem_response(status: int, detail: str, headers: dict[str, str] | None = None) -> Response:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return Response(problem_body(status, detail), status_code=status, media_type=PROBLEM_JSON, headers=headers)
