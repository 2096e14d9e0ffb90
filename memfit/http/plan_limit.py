"""How many plans the server computes at once. A plan is CPU-bound Python for up to seconds, computed elsewhere (a
plan process under `memfit serve`, memfit.plan_processes; a worker thread in an app a test makes): each takes a
core, and the rest answer everything else. Past PLAN_SLOTS, a plan waits for a slot on the event loop (no thread, no
polling: a finishing plan hands its slot to the first waiting one) up to PLAN_WAIT_S, then is answered 503 with
Retry-After. It waits before its body is validated (PlanSlots sits in front of connexion): 44 plans arriving at
once had their 32-item bodies validated on the event loop first, one after another, and `/health` waited 0.2 s
behind them, for plans that mostly ended as a 503."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import AsyncIterator

from starlette.types import ASGIApp, Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.problems import send_problem
from memfit.http.routing import ROUTE_KEY

PLAN_SLOTS = max(1, (os.cpu_count() or 1) // 2)  # half the cores: the rest answer everything else
PLAN_WAIT_S = 10.0  # a waiting plan gives up after this long
RETRY_AFTER_S = 5


class PlansBusy(Exception):
    """Every slot stayed taken for PLAN_WAIT_S."""


class PlanLimit:
    """Only the event loop's thread uses it (the plans themselves are computed elsewhere)."""

    def __init__(self, slots: int = PLAN_SLOTS, wait_s: float = PLAN_WAIT_S) -> None:
        self.slots, self.wait_s = slots, wait_s
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Holds a slot, once one is free; PlansBusy when none frees up in time."""
        if self.running < self.slots:
            self.running += 1
        else:
            await self._wait()
        try:
            yield
        finally:
            self._release()

    async def _wait(self) -> None:
        """Until a finishing plan hands this one its slot; PlansBusy after wait_s."""
        handed = asyncio.get_running_loop().create_future()
        self._waiting.append(handed)
        try:
            await asyncio.wait_for(asyncio.shield(handed), self.wait_s)
        except BaseException as exc:  # the time is up, or the request was cancelled
            owned = handed.done() and not handed.cancelled()  # handed over just as the wait ended
            handed.cancel()  # _release skips it
            if isinstance(exc, TimeoutError) and owned:
                return
            if owned:
                self._release()
            if isinstance(exc, TimeoutError):
                raise PlansBusy(
                    f"the server is computing {self.slots} plan(s) and this one waited {self.wait_s:g} s;"
                    f" retry in {RETRY_AFTER_S} s"
                ) from None
            raise

    def _release(self) -> None:
        while self._waiting:
            handed = self._waiting.popleft()
            if not handed.done():
                handed.set_result(None)  # the slot passes on: `running` stays
                return
        self.running -= 1


class PlanSlots(HttpMiddleware):
    """The operation `operation` (the plan) runs holding a slot of `limit`: past every slot it waits, its body not
    yet validated, and is answered 503 when none frees up."""

    def __init__(self, app: ASGIApp, limit: PlanLimit, operation: str) -> None:
        super().__init__(app)
        self.limit, self.operation = limit, operation

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = scope.get(ROUTE_KEY)
        if route is None or route.operation != self.operation:
            await self.app(scope, receive, send)
            return
        try:
            async with self.limit.slot():
                await self.app(scope, receive, send)
        except PlansBusy as exc:
            await send_problem(send, 503, str(exc), [(b"retry-after", str(RETRY_AFTER_S).encode())])
