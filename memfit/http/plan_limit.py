"""How many plans the server computes at once. A plan is CPU-bound Python for up to seconds; threads share one
interpreter lock, so many at once starve the event loop (`/health` included) however they are scheduled. Past
PLAN_SLOTS, a plan waits for a slot, without a thread, up to PLAN_WAIT_S, then is answered 503 with Retry-After."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from starlette.concurrency import run_in_threadpool

T = TypeVar("T")

PLAN_SLOTS = max(1, (os.cpu_count() or 1) // 2)  # half the cores: the rest answer everything else
PLAN_WAIT_S = 10.0  # a waiting plan gives up after this long
POLL_S = 0.02  # how often a waiting plan looks for a free slot (loop-agnostic: no asyncio primitive to bind)
RETRY_AFTER_S = 5


class PlansBusy(Exception):
    """Every slot stayed taken for PLAN_WAIT_S."""


class PlanLimit:
    def __init__(self, slots: int = PLAN_SLOTS, wait_s: float = PLAN_WAIT_S) -> None:
        self.slots, self.wait_s = slots, wait_s
        self._free = threading.BoundedSemaphore(slots)

    async def run(self, work: Callable[[], T]) -> T:
        """`work()` in a worker thread once a slot is free; PlansBusy when none frees up in time."""
        deadline = time.monotonic() + self.wait_s
        while not self._free.acquire(blocking=False):
            if time.monotonic() >= deadline:
                raise PlansBusy(
                    f"the server is computing {self.slots} plan(s) and more waited {self.wait_s:g} s;"
                    f" retry in {RETRY_AFTER_S} s"
                )
            await asyncio.sleep(POLL_S)
        try:
            return await run_in_threadpool(work)
        finally:
            self._free.release()
