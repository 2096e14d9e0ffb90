"""A stop signal that came before uvicorn's own handlers were in place stops `memfit serve` all the same. memfit's
handler raises KeyboardInterrupt, which can be lost (raised while a finalizer runs, it is only printed: under load a
Ctrl-C sent just after start-up left the server running), so it also sets memfit.cli.STOP_REQUESTED, and serving
then neither starts uvicorn nor keeps it running past its start-up."""

from __future__ import annotations

import gc
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
from starlette.types import Receive, Scope, Send

from memfit import cli
from memfit.serving import run_one

WAIT_S = 30


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    """run_one settles this process for serving (gc frozen, thresholds, switch interval): undone after each test."""
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    sys.setswitchinterval(interval)
    cli.STOP_REQUESTED.clear()


def _app(on_startup: Callable[[], None]) -> Callable[[Scope, Receive, Send], object]:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                on_startup()
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    return app


def _served(on_startup: Callable[[], None], stop: threading.Event) -> tuple[threading.Thread, list[str]]:
    """run_one in a thread of its own (no signal handlers there), on a listening socket; what the app saw."""
    seen: list[str] = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()

    def started() -> None:
        seen.append("startup")
        on_startup()

    thread = threading.Thread(target=run_one, args=(_app(started), "127.0.0.1", 0, sock, stop), daemon=True)
    thread.start()
    thread.join(WAIT_S)
    sock.close()
    return thread, seen


def test_a_stop_before_uvicorn_runs_starts_no_server() -> None:
    stop = threading.Event()
    stop.set()
    thread, seen = _served(lambda: None, stop)
    assert not thread.is_alive() and seen == []


def test_a_stop_during_uvicorns_start_up_stops_it_once_started() -> None:
    stop = threading.Event()
    thread, seen = _served(stop.set, stop)  # the signal's KeyboardInterrupt lost while the app started up
    assert not thread.is_alive() and seen == ["startup"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the interrupt, printed
def test_the_stop_handler_marks_the_stop_where_its_interrupt_is_lost() -> None:
    class Finalized:
        def __del__(self) -> None:
            cli._stop(signal.SIGINT, None)  # the KeyboardInterrupt it raises is printed, not raised

    Finalized()
    assert cli.STOP_REQUESTED.is_set()
