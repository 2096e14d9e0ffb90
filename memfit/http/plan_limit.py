"""How many plans the server computes at once. A plan is CPU-bound Python for up to seconds; threads share one
interpreter lock, so many at once starve the event loop (`/health` included) however they are scheduled. Past
PLAN_SLOTS, a plan waits for a slot on the event loop (no thread, no polling: a finishing plan hands its slot to
the first waiting one) up to PLAN_WAIT_S, then is answered 503 with Retry-After."""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from starlette.concurrency import run_in_threadpool

T = TypeVar("T")

PLAN_SLOTS = max(1, (os.cpu_count() or 1) // 2)  # half the cores: the rest answer everything else
PLAN_WAIT_S = 10.0  # a waiting plan gives up after this long
RETRY_AFTER_S = 5


class PlansBusy(Exception):
    """Every slot stayed taken for PLAN_WAIT_S."""


class PlanLimit:
    """Only the event loop's thread uses it (the plans themselves run in worker threads)."""

    def __init__(self, slots: int = PLAN_SLOTS, wait_s: float = PLAN_WAIT_S) -> None:
        self.slots, self.wait_s = slots, wait_s
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` in a worker thread once a slot is free; PlansBusy when none frees up in time."""
        if self.running < self.slots:
            self.running += 1
        else:
            await self._wait()
        try:
            return await run_in_threadpool(work)
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
