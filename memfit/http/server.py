"""How memfit runs under uvicorn: its limits, set explicitly, and deadlines for request headers.

uvicorn closes an idle keep-alive connection, but waits forever for request headers that trickle in; the
protocol below closes a connection that has sent nothing within FIRST_BYTE_TIMEOUT_S of its start, and one
whose headers are not complete within HEADER_TIMEOUT_S of its first byte or of its previous response (each
deadline spread over its upper half: memfit.http.spread). (A body
that trickles in is cut off by the app's guard, with a 408, and the connection closed.) uvicorn's own
per-connection set-up waits for the end of a connection's first request line and headers (until then the bytes
are kept here): a burst of connections opened at once (a flood, or browsers' spares) costs about two thirds as
much (61 µs a connection accepted and closed, from 90, on a 2-core machine), a connection that trickles its
headers costs nothing more, and a request queued behind them waits that much less.

Connections are capped per process, below the file limit (connection_budget: `memfit serve` first raises its
soft limit to the hard one), and counted across every client address: any local process may connect from any
127.x address, so a cap per address locked out 127.0.0.1 (every local client) and was sidestepped with the
others. At the cap a new connection closes the one that has been idle longest, so that idle or slow sockets never
lock anyone out: idle is a connection with no request in progress (silent since it opened, between keep-alive
requests, or still sending a request's line and headers) or whose client has stopped reading its answer. Only
when none is idle is the newcomer answered 503 and closed. uvicorn's limit_concurrency is off (it counts
connections and answers 503 to everyone past it); the app limits the requests it works on (memfit.http.concurrency).

httptools sets no limit on the size of request headers (uvicorn's h11_max_incomplete_event_size is for h11
only): the protocol below feeds its parser at most MAX_HEADER_BYTES of a request's line and headers, and
answers a 431 problem and closes the connection when they do not end within them. WebSocket upgrades are off:
memfit serves none, and an upgraded connection would leave this protocol without telling it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from memfit.http.problems import PROBLEM_JSON, problem_body
from memfit.http.spread import spread
from memfit.http.tally import Tally
from memfit.http.tarpit import CONNECTION_KEY

HEADER_TIMEOUT_S = 10.0
# a connection that has sent nothing by then is closed (at 1.5 s, 900 silent clients that reconnected made the server
# accept 600 connections a second; the cap closes silent ones first when room is needed)
FIRST_BYTE_TIMEOUT_S = 10.0
KEEP_ALIVE_S = 5
MAX_HEADER_BYTES = 64 * 1024  # the request line and headers together; past it a 431
GRACEFUL_SHUTDOWN_S = 5
MAX_CONNECTIONS = 4096  # per process, however high the file limit
MAX_BACKLOG = 2048  # connections the kernel queues before they are accepted (uvicorn's default)
# descriptors kept from connections for everything else: model files being read, the SQLite files of every worker
# thread (a database, its WAL and shared memory, for the header cache and the history), inotify, the event loop's
FILE_HEADROOM = 512
RETRY_AFTER_S = 1

log = logging.getLogger("memfit.http")


def connection_budget(soft_limit: int) -> tuple[int, int]:
    """(the connections one process holds at most, its listen backlog) under a soft file limit. FILE_HEADROOM
    descriptors are kept for files; twice the backlog for connections accepted in one go before any is counted,
    and as many closed to make room and not yet released; the connections get the rest, at most MAX_CONNECTIONS."""
    if soft_limit == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS, MAX_BACKLOG
    budget = soft_limit - FILE_HEADROOM
    backlog = max(1, min(MAX_BACKLOG, budget // 4))
    return max(1, min(MAX_CONNECTIONS, budget - 2 * backlog)), backlog


class Connections:
    """The connections one server holds (uvicorn's per-server state keeps it), and those of them that are idle,
    in the order they became so: the first is closed when a new one arrives at the cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.count = 0
        self.idle: dict[DeadlineProtocol, None] = {}  # insertion-ordered: the longest idle first
        self.evicted = Tally(log, logging.WARNING, f"at the cap of {cap} connections: closed %d idle ones for new ones")
        # a connection opened and never used is routine (browsers open spares); headers that trickle are not
        self.silent = Tally(log, logging.INFO, f"closed %d connections silent for {FIRST_BYTE_TIMEOUT_S:.0f} s")
        self.slow = Tally(log, logging.WARNING, f"closed %d connections whose headers took {HEADER_TIMEOUT_S:.0f} s")

    def make_room(self) -> bool:
        """Whether a new connection may be held: under the cap, or once the longest idle one is closed."""
        if self.count < self.cap:
            return True
        if not self.idle:
            return False
        next(iter(self.idle)).evict()
        self.evicted.add()
        return True


def _connections(server_state: Any, cap: int) -> Connections:
    connections = getattr(server_state, "memfit_connections", None)
    if connections is None:
        connections = server_state.memfit_connections = Connections(cap)
    return connections


def _ends_head(received: bytearray, new: int) -> bool:
    """Whether the `new` bytes at the end of `received` end a request's line and headers (an empty line: CRLF, or
    LF as a lenient parser takes it), looked for only where they could be: a head that trickles costs no rescans."""
    tail = received[-(new + 3) :]
    return b"\n\n" in tail or b"\n\r\n" in tail


class DeadlineProtocol(HttpToolsProtocol):
    _deadline: asyncio.TimerHandle | None = None
    _awaiting_headers = True  # the parser is inside a request's line and headers (or before one)
    _header_bytes = 0
    _messages = 0  # requests whose headers have ended on this connection
    _silent = True  # nothing received yet
    _spoken = False  # uvicorn's protocol set up (_speak): once a request's line and headers have ended
    _head: bytearray | None = None  # what came before that
    _in_progress = 0  # requests whose headers have ended and whose answer is not complete
    _stalled = False  # the client does not read what is written to it
    _held = False  # its answer, a refusal, is held back (memfit.http.tarpit)
    _connections: Connections | None = None  # counted there while open

    def __init__(self, *, max_connections: int, **uvicorn_kwargs: Any) -> None:
        # uvicorn's own set-up (its parser, flow control, both addresses) waits for the first byte: _speak
        self._uvicorn_kwargs = uvicorn_kwargs
        self.max_connections = max_connections
        self.server_state = uvicorn_kwargs["server_state"]
        self.loop = uvicorn_kwargs.get("_loop") or asyncio.get_event_loop()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        connections = _connections(self.server_state, self.max_connections)
        if not connections.make_room():
            self._refuse(connections.cap)
            return
        connections.count += 1
        self._connections = connections
        self._track()
        self._arm(FIRST_BYTE_TIMEOUT_S)

    def _track(self) -> None:
        """Keep this connection among the idle ones, where it is idle (from when it became so), or out of them."""
        if self._connections is None:
            return
        if self._in_progress == 0 or self._stalled or self._held:
            self._connections.idle.setdefault(self)
        else:
            self._connections.idle.pop(self, None)

    def evict(self) -> None:
        """Closed at once (what it has not read is dropped) to make room for a new connection."""
        self._forget()
        self.transport.abort()

    def _forget(self) -> None:
        if self._connections is not None:
            self._connections.count -= 1
            self._connections.idle.pop(self, None)
            self._connections = None

    def _refuse(self, cap: int) -> None:
        log.warning("503: %d connections open, none of them idle", cap)
        detail = f"the server holds {cap} connections, all busy; retry in {RETRY_AFTER_S} s"
        self._answer_and_close(503, "Service Unavailable", detail, f"retry-after: {RETRY_AFTER_S}\r\n")

    def _answer_and_close(self, status: int, reason: str, detail: str, headers: str = "") -> None:
        """A problem written straight onto the connection, before uvicorn's protocol took a request, then closed."""
        body = problem_body(status, detail)
        head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: {PROBLEM_JSON}\r\ncontent-length: {len(body)}\r\n"
        self.transport.write(f"{head}{headers}connection: close\r\n\r\n".encode() + body)
        self.transport.close()

    def _speak(self) -> None:
        """uvicorn's protocol set up, once the first request's line and headers have ended."""
        self._spoken = True
        transport = self.transport
        super().__init__(**self._uvicorn_kwargs)
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._spoken:
            if self._silent:
                self._silent = False
                self._head = bytearray()
                self._arm()  # the first byte: now the whole request line and headers have HEADER_TIMEOUT_S
            assert self._head is not None
            self._head += data
            if len(self._head) <= MAX_HEADER_BYTES and not _ends_head(self._head, len(data)):
                return  # uvicorn's set-up waits for the whole head: trickling connections never cost it
            data, self._head = bytes(self._head), None
            self._speak()
        if self._awaiting_headers:
            room = MAX_HEADER_BYTES - self._header_bytes
            if len(data) > room:  # feed what fits; the rest only once these headers have ended
                head, data = data[:room], data[room:]
                self._header_bytes += len(head)
                messages = self._messages
                super().data_received(head)
                if self.transport.is_closing():
                    return
                if self._awaiting_headers and self._messages == messages:
                    self._headers_too_large()
                    return
                self.data_received(data)  # a pipelined request's headers count from here on
                return
            self._header_bytes += len(data)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self.scope[CONNECTION_KEY] = self  # type: ignore[literal-required]
        self._disarm()
        self._awaiting_headers = False
        self._messages += 1
        self._in_progress += 1
        self._track()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_headers, self._header_bytes = True, 0  # a pipelined request may follow

    def _headers_too_large(self) -> None:
        log.warning("431: request headers over %d bytes", MAX_HEADER_BYTES)
        detail = f"the request line and headers are larger than {MAX_HEADER_BYTES >> 10} KiB"
        self._answer_and_close(431, "Request Header Fields Too Large", detail)

    def held(self) -> None:
        self._held = True
        self._track()

    def on_response_complete(self) -> None:
        self._in_progress -= 1
        self._held = False
        self._track()  # idle from now, unless a pipelined request waits
        super().on_response_complete()
        self._arm()

    def pause_writing(self) -> None:
        self._stalled = True
        self._track()
        if self._spoken:
            super().pause_writing()

    def resume_writing(self) -> None:
        self._stalled = False
        self._track()
        if self._spoken:
            super().resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._forget()
        if self._spoken:
            super().connection_lost(exc)

    def _arm(self, seconds: float | None = None) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(spread(HEADER_TIMEOUT_S if seconds is None else seconds), self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        if not self.transport.is_closing():
            if self._connections is not None:
                (self._connections.silent if self._silent else self._connections.slow).add()
            self.transport.close()


def server_config(
    app: ASGIApp | Callable[[], ASGIApp],
    host: str,
    port: int,
    *,
    max_connections: int | None = None,
    **overrides: Any,
) -> uvicorn.Config:
    """The one uvicorn configuration memfit serves with (tests serve with it too); `app` is the app, or with
    `factory=True` what makes it in each worker. The connection cap and the backlog follow this process's soft
    file limit (the workers inherit it); `max_connections` sets the cap instead."""
    cap, backlog = connection_budget(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    settings: dict[str, Any] = dict(
        host=host,
        port=port,
        workers=1,  # not WEB_CONCURRENCY's: `memfit serve --workers` says how many
        http=functools.partial(DeadlineProtocol, max_connections=cap if max_connections is None else max_connections),
        ws="none",
        backlog=backlog,
        log_level="info",
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        limit_concurrency=None,  # it counts connections: the app limits requests instead (memfit.http.concurrency)
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        server_header=False,
    )
    settings.update(overrides)
    return uvicorn.Config(app, **settings)
