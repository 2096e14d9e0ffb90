"""What handlers reach through the request: the server's state, put in the ASGI scope by the app."""

from __future__ import annotations

from dataclasses import dataclass

from connexion import request
from pydantic import BaseModel
from starlette.responses import Response

from memfit.estimator.service import FitService

STATE_KEY = "memfit.state"


@dataclass(frozen=True)
class ServerState:
    service: FitService
    token: str
    api_revision: str
    spec_json: bytes
    spec_yaml: bytes


def current() -> ServerState:
    return request.scope[STATE_KEY]


def json_response(model: BaseModel, status: int = 200) -> Response:
    """A generated model dumped by alias, with its content type set explicitly."""
    return Response(model.model_dump_json(by_alias=True), status_code=status, media_type="application/json")
