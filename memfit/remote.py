"""Asking a running memfit server, for the CLI: the contract's routes over one HTTP connection with http.client
(no server stack, no HTTP library), bodies read into the generated wire models, so that a terminal answer renders
the server's own.

The token is sent only to a process that has proved it holds it (memfit.server_proof): the first request on the
connection is `GET /health` with a fresh challenge, and only when its answer carries the right proof for the
address the connection reached is the real request, with the token, sent on the same connection. Never through a
proxy, never following a redirect (it would carry the token elsewhere).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from memfit.server_proof import CHALLENGE_HEADER, PROOF_HEADER, new_nonce, proves
from memfit.terminal import printable

if TYPE_CHECKING:  # imported when a server is asked: a CLI start that answers here needs no pydantic (nor http.client)
    import http.client

    from pydantic import BaseModel

    from memfit.generated import models as wire
    from memfit.generated.plain_models import WireFitVerdictRequest

TIMEOUT_SECONDS = 60.0  # a 32-model plan takes well under a second; a server that takes this long is stuck
MAX_ANSWER_BYTES = 64 << 20  # a 32-model answer is a few hundred KiB; a listing of 10,000 models a few MiB
MAX_PROBLEM_BYTES = 1 << 16
HEALTH_PATH = "/health"

M = TypeVar("M", bound="BaseModel")


class Unreachable(Exception):
    """No usable answer: nothing listens, it timed out, or it answered something that is not memfit's. The
    message says which; the CLI answers in its own process instead."""


class Unauthorized(Unreachable):
    """The server refused the token (401)."""


class Unproven(Unauthorized):
    """What listens did not prove it holds this token (not memfit, or a server with another token): the token
    was not sent."""


class Refused(Exception):
    """The server refused the request itself (a 4xx problem other than 401): its detail, as the server wrote it."""


class RemoteServer:
    def __init__(self, url: str, token: str | None, timeout: float = TIMEOUT_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def fit_batch(self, requests: Sequence[WireFitVerdictRequest]) -> wire.WireFitVerdictBatch:
        from memfit.generated import models

        return self._call("POST", "/v1/models/fit/batch", models.WireFitVerdictBatch, _body(requests))

    def fit_plan(self, requests: Sequence[WireFitVerdictRequest]) -> wire.WireFitPlanBatch:
        from memfit.generated import models

        return self._call("POST", "/v1/models/fit/plan", models.WireFitPlanBatch, _body(requests))

    def model_list(self) -> wire.WireModelList:
        from memfit.generated import models

        return self._call("GET", "/v1/models", models.WireModelList)

    def _call(self, method: str, path: str, answer: type[M], body: bytes | None = None) -> M:
        import http.client

        where = f"the server at {self.url}"
        parts = urlsplit(self.url)
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=self.timeout)
        connection.auto_open = False  # never a second connection (to whoever listens by then) on the same object
        try:
            connection.connect()
            self._check_proof(connection, where)
            headers = {"Accept": "application/json", "Authorization": f"Bearer {self.token}"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            status, data = response.status, response.read(MAX_ANSWER_BYTES + 1)
        except TimeoutError:
            raise Unreachable(f"{where} did not answer within {self.timeout:g} s") from None
        except http.client.NotConnected:
            raise Unreachable(f"{where} closed the connection after its proof") from None
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, a malformed status line
            text = getattr(exc, "strerror", None) or f"{exc.__class__.__name__}: {exc}"
            raise Unreachable(f"{where} cannot be reached ({printable(text)})") from None
        finally:
            connection.close()
        if not 200 <= status < 300:
            raise _problem(status, data[:MAX_PROBLEM_BYTES], where)
        if len(data) > MAX_ANSWER_BYTES:
            raise Unreachable(f"{where} answered more than {MAX_ANSWER_BYTES >> 20} MiB")
        from pydantic import ValidationError

        try:
            return answer.model_validate_json(data)
        except ValidationError:
            raise Unreachable(f"{where} answered something that is not memfit's {path} answer") from None

    def _check_proof(self, connection: http.client.HTTPConnection, where: str) -> None:
        """Unproven unless the peer of `connection` answers a fresh challenge with the proof for this token."""
        if not self.token:
            raise Unproven(f"{where} cannot be checked: there is no token here to check it with")
        assert connection.sock is not None  # connected
        host, port = connection.sock.getpeername()[:2]
        nonce = new_nonce()
        connection.request("GET", HEALTH_PATH, headers={CHALLENGE_HEADER: nonce, "Accept": "application/json"})
        response = connection.getresponse()
        response.read(MAX_PROBLEM_BYTES)  # the whole of a health answer: the connection carries the next request
        if not proves(response.getheader(PROOF_HEADER), self.token, nonce, host, port):
            raise Unproven(
                f"what listens at {self.url} did not prove it is this state directory's server (no valid"
                f" {PROOF_HEADER}): the token was not sent, nor its answer used"
            )


def _body(requests: Sequence[WireFitVerdictRequest]) -> bytes:
    """The requests (the generated dataclasses) as the contract's JSON, checked by the pydantic models."""
    from memfit.generated import models

    wired = [models.WireFitVerdictRequest(**dataclasses.asdict(r)) for r in requests]
    return json.dumps([r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in wired]).encode()


def _problem(status: int, data: bytes, where: str) -> Exception:
    """The exception for an error status: its problem document's words when it has one (made printable)."""
    try:
        doc = json.loads(data or b"{}")
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    detail = printable(doc["detail"]) if isinstance(doc.get("detail"), str) else None
    kind = doc.get("type")
    said = f"{status} {printable(kind) if isinstance(kind, str) else ''}".strip()
    if status == 401:
        return Unauthorized(f"{where} refused the token ({said})")
    if 400 <= status < 500 and status not in (404, 405, 408, 499) and detail is not None:
        return Refused(f"{where} refused the request: {detail}")
    return Unreachable(f"{where} answered {said}" + (f": {detail}" if detail is not None else ""))
