"""Problem documents (RFC 9457) with the contract's short `type` words; never a stack trace."""

from __future__ import annotations

import functools

from starlette.responses import Response
from starlette.types import Send

from memfit.estimator.vocabulary import ProblemType
from memfit.generated.models import Problem, Suggestions

TYPE_FOR_STATUS = {401: ProblemType.UNAUTHORIZED, 404: ProblemType.NOT_FOUND, 499: ProblemType.CANCELLED}
TITLES = {
    400: "Invalid request",
    401: "Unauthorized",
    404: "Not found",
    405: "Method not allowed",
    408: "Too slow",
    413: "Request body too large",
    415: "Unsupported media type",
    431: "Request headers too large",
    503: "Unavailable",
    499: "Cancelled",
    500: "Failed",
}
PROBLEM_JSON = "application/problem+json"
UNAUTHORIZED = "a valid bearer token is required"
FAILED_DETAIL = "the request failed; see the server log"
MAX_DETAIL = 300  # a validation message may quote the whole body; a problem needs only its start


def problem_type(status: int) -> str:
    if status in TYPE_FOR_STATUS:
        return TYPE_FOR_STATUS[status]
    return ProblemType.FAILED if status >= 500 else ProblemType.INVALID_REQUEST


@functools.lru_cache(maxsize=256)  # the same few refusals make up a flood: each was a model built and serialised
def problem_body(status: int, detail: str, suggestions: tuple[str, ...] | None = None) -> bytes:
    """`suggestions`: a 404's known ids to try instead."""
    title = TITLES.get(status, "Failed" if status >= 500 else "Invalid request")
    listed = None if suggestions is None else Suggestions(list(suggestions))
    problem = Problem(type=problem_type(status), title=title, status=status, detail=detail, suggestions=listed)
    return problem.model_dump_json(exclude_none=True).encode()


def problem_response(
    status: int, detail: str, headers: dict[str, str] | None = None, suggestions: tuple[str, ...] | None = None
) -> Response:
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    body = problem_body(status, detail, suggestions)
    return Response(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


async def send_problem(send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """A problem straight onto an ASGI connection, for the middleware in front of connexion (`extra` headers:
    `connection: close` makes uvicorn close the connection after it)."""
    body = problem_body(status, detail)
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", PROBLEM_JSON.encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    headers.extend(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
