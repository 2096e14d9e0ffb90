"""GET /metrics: the app's metrics in Prometheus' text format."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from memfit.handlers.context import current
from memfit.telemetry import CONTENT_TYPE


async def get_metrics() -> Response:
    """Scraping reads the index and counts the history's rows: off the event loop."""
    return Response(await run_in_threadpool(current().metrics.exposition), media_type=CONTENT_TYPE)
