"""The app a test runs memfit's worker supervisor with (tests/test_workers.py): light to import, since each worker
imports it, and made to fail its start while the file that FAIL_FILE names exists."""

from __future__ import annotations

import os
import sys

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.config import STARTUP_FAILURE

FAIL_FILE = "MEMFIT_TEST_FAIL_FILE"  # the environment variable naming it


async def pid_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers every request with the pid of the worker that took it."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(os.getpid()).encode()})


def app() -> ASGIApp:
    """uvicorn's app factory: pid_app, or the exit of a start that failed while the fail file exists."""
    if os.path.exists(os.environ[FAIL_FILE]):
        sys.exit(STARTUP_FAILURE)
    return pid_app
