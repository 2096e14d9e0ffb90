"""GET /health and the contract itself (/v1/openapi.json, /v1/openapi.yaml)."""

from __future__ import annotations

from starlette.responses import Response

from memfit.generated.models import WireHealth
from memfit.handlers.context import current, json_response


async def health() -> Response:
    return json_response(WireHealth(status="ok", api_revision=current().api_revision))


async def openapi_json() -> Response:
    return Response(current().spec_json, media_type="application/json")


async def openapi_yaml() -> Response:
    return Response(current().spec_yaml, media_type="text/yaml")
