"""Makes a flood of refused requests cheap to serve. A client without the token that sends requests in a loop gets
each refusal (401, and the 404, 405 and 421 a guess at the routes or the Host header gets) at once, and so costs the
server as much work as it can make it do: 200 such clients kept a 2-core server busy enough that `/health` waited
seconds. Once refusals come faster than FLOOD_REFUSALS_PER_S (no client that holds the token comes near it), each
one is held up to HOLD_S (memfit.http.spread) before it is sent, as a login throttle holds a wrong password: a
looping client then costs about one answer per second per connection. Its connection counts as idle while held, so
the connection cap closes it before any working one. The access log, which one line per refusal would fill as fast
as the flood comes, gets a summary instead (memfit.http.tally). Requests that present the token, and answers other
than those, are never held."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfit.http.auth import presents_token
from memfit.http.log_redaction import ACCESS_LOGGER
from memfit.http.middleware import HttpMiddleware
from memfit.http.scope import token_of
from memfit.http.spread import spread
from memfit.http.tally import Tally

FLOOD_REFUSALS_PER_S = 100
HOLD_S = 2.0
REFUSED = frozenset({401, 404, 405, 421})
CONNECTION_KEY = "memfit.connection"  # the scope's connection (memfit.http.server), told when its answer is held
_STATUS_ARG = 4  # uvicorn's access line: '%s - "%s %s HTTP/%s" %d' (client, method, path, version, status)

log = logging.getLogger("memfit.http")


class HeldConnection(Protocol):
    def held(self) -> None:
        """This connection's answer is being held: it may be closed for a newcomer."""


class Refusals:
    """Refusals counted in one-second windows; a flood while this window's count or the last one's is over the
    rate."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._window = 0
        self._count = 0
        self._last_count = 0
        self.held = Tally(log, logging.WARNING, f"a flood of refused requests: held %d of them {HOLD_S:.0f} s each")

    def count(self) -> bool:
        """Counts one refusal; whether it is part of a flood (and so held)."""
        self._roll()
        self._count += 1
        if flooding := self.flooding:
            self.held.add()
        return flooding

    @property
    def flooding(self) -> bool:
        self._roll()
        return max(self._count, self._last_count) > FLOOD_REFUSALS_PER_S

    def _roll(self) -> None:
        if (window := int(self.clock())) != self._window:
            self._last_count = self._count if window == self._window + 1 else 0
            self._window, self._count = window, 0


class Tarpit(HttpMiddleware):
    def __init__(self, app: ASGIApp, refusals: Refusals) -> None:
        super().__init__(app)
        self.refusals = refusals

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def held(message: Message) -> None:
            if (
                message["type"] == "http.response.start"
                and message["status"] in REFUSED
                and not presents_token(scope, token_of(scope))
                and self.refusals.count()
            ):
                connection: HeldConnection | None = scope.get(CONNECTION_KEY)
                if connection is not None:
                    connection.held()
                await asyncio.sleep(spread(HOLD_S))
            await send(message)

        await self.app(scope, receive, held)


class QuietRefusals(logging.Filter):
    """Drops the access log's line for a refused answer while a flood lasts (Refusals logs a summary)."""

    def __init__(self, refusals: Refusals) -> None:
        super().__init__()
        self.refusals = refusals

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            self.refusals.flooding
            and isinstance(args, tuple)
            and len(args) > _STATUS_ARG
            and args[_STATUS_ARG] in REFUSED
        )


def quiet_refusals(refusals: Refusals) -> None:
    """Install the filter on uvicorn's access logger, first, once per process (a second app replaces the first's)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for old in [f for f in logger.filters if isinstance(f, QuietRefusals)]:
        logger.removeFilter(old)
    logger.filters.insert(0, QuietRefusals(refusals))
