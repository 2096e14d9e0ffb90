"""Asking a running memfit server, for the CLI: the contract's routes over HTTP with urllib (no server stack, no
HTTP library), bodies read into the generated wire models, so that a terminal answer renders the server's own.

Never through a proxy (the server is on this machine and the request carries the bearer token), never following
a redirect (it would carry the token elsewhere).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # imported when a server is asked: a CLI start that answers here needs no pydantic
    from pydantic import BaseModel

    from memfit.generated import models as wire

TIMEOUT_SECONDS = 60.0  # a 32-model plan takes well under a second; a server that takes this long is stuck
MAX_ANSWER_BYTES = 64 << 20  # a 32-model answer is a few hundred KiB; a listing of 10,000 models a few MiB

M = TypeVar("M", bound="BaseModel")


class Unreachable(Exception):
    """No usable answer: nothing listens, it timed out, or it answered something that is not memfit's. The
    message says which; the CLI answers in its own process instead."""


class Unauthorized(Unreachable):
    """The server refused the token (401)."""


class Refused(Exception):
    """The server refused the request itself (a 4xx problem other than 401): its detail, as the server wrote it."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # the 3xx is raised as an HTTPError


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


class RemoteServer:
    def __init__(self, url: str, token: str | None, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def fit_batch(self, requests: Sequence[Any]) -> wire.WireFitVerdictBatch:
        from memfit.generated import models

        return self._call("POST", "/v1/models/fit/batch", models.WireFitVerdictBatch, _body(requests))

    def fit_plan(self, requests: Sequence[Any]) -> wire.WireFitPlanBatch:
        from memfit.generated import models

        return self._call("POST", "/v1/models/fit/plan", models.WireFitPlanBatch, _body(requests))

    def model_list(self) -> wire.WireModelList:
        from memfit.generated import models

        return self._call("GET", "/v1/models", models.WireModelList)

    def _call(self, method: str, path: str, answer: type[M], body: bytes | None = None) -> M:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=body, headers=headers, method=method)
        where = f"the server at {self.url}"
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                data = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise _problem(exc, where) from None
        except TimeoutError:
            raise Unreachable(f"{where} did not answer within {self.timeout:g} s") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            text = getattr(reason, "strerror", None) or str(reason)
            raise Unreachable(f"{where} cannot be reached ({text})") from None
        except (OSError, ValueError) as exc:  # a connection reset, a malformed status line
            raise Unreachable(f"{where} cannot be reached ({exc.__class__.__name__}: {exc})") from None
        if len(data) > MAX_ANSWER_BYTES:
            raise Unreachable(f"{where} answered more than {MAX_ANSWER_BYTES >> 20} MiB")
        from pydantic import ValidationError

        try:
            return answer.model_validate_json(data)
        except ValidationError:
            raise Unreachable(f"{where} answered something that is not memfit's {path} answer") from None


def _body(requests: Sequence[Any]) -> bytes:
    """The requests (the generated models, or memfit.plain's of the same fields) as the contract's JSON."""
    from memfit.generated import models

    wired = [models.WireFitVerdictRequest(**vars(r)) for r in requests]
    return json.dumps([r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in wired]).encode()


def _problem(exc: urllib.error.HTTPError, where: str) -> Exception:
    """The exception for an error status: its problem document's words when it has one."""
    try:
        doc = json.loads(exc.read(1 << 16) or b"{}")
    except (ValueError, OSError):
        doc = {}
    detail = doc.get("detail") if isinstance(doc, dict) else None
    said = f"{exc.code} {doc.get('type', '')}".strip() if isinstance(doc, dict) else str(exc.code)
    if exc.code == 401:
        return Unauthorized(f"{where} refused the token ({said})")
    if 400 <= exc.code < 500 and exc.code not in (404, 405, 408, 499) and isinstance(detail, str):
        return Refused(f"{where} refused the request: {detail}")
    return Unreachable(f"{where} answered {said}" + (f": {detail}" if isinstance(detail, str) else ""))
