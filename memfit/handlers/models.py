"""GET /v1/models."""

from __future__ import annotations

from starlette.responses import Response

from memfit.handlers.context import current, json_response


async def list_models() -> Response:
    return json_response(current().service.model_list())
