"""Plans computed in processes of their own, for `memfit serve`. A plan is seconds of CPU-bound Python; on a thread it
shares the interpreter lock with the event loop, which then waited for it several times per answer: `/health` took
0.1-0.4 s while one plan ran. A plan process builds the service `memfit serve` built (its own index over the same
model roots, the same header cache and measurement history), when the first plan arrives, and answers each plan
with its JSON. It ends with the server (serving.end_with_supervisor). One that dies (killed, out of memory) is
replaced for the next plan; the plan it was computing is PlanProcessLost (a 503). A plan whose client goes away
runs on in its process until done or past its budget (PlanBudget bounds it)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from memfit.handlers.plan_runner import PlanProcessLost
from memfit.readers.hub import HubSettings
from memfit.readers.model_roots import Root
from memfit.service.answers import Settings
from memfit.service.fit_service import FitService


@dataclass(frozen=True)
class ServiceSettings:
    """What a plan process needs to build the service `memfit serve` built (no token: it answers no one)."""

    roots: tuple[Root, ...]
    state_dir: str
    settings: Settings
    hub: HubSettings | None = None  # how it asks the Hugging Face Hub (None: never)


_service: FitService | None = None  # in a plan process: its service
# A plan process's CPU priority below the server's (nice(2)): where the cores are busy, the server's own work (/health,
# fits, the event loop) runs first and the plans wait
PLAN_NICENESS = 10


def _start(settings: ServiceSettings, server: int) -> None:
    """A plan process's start: made to end with the server and to yield the CPU to it, then its service built and
    its index started."""
    global _service
    from memfit.service_builder import build_service
    from memfit.serving import end_with_supervisor, quiet_warnings

    end_with_supervisor(server)
    quiet_warnings()
    os.nice(PLAN_NICENESS)
    _service = build_service(
        settings.roots,
        state_dir=settings.state_dir,
        settings=settings.settings,
        history_required=False,
        hub=settings.hub,
    )
    _service.index.start()


def _plan(body: Sequence[dict]) -> bytes:
    """A plan request's body (validated by the server) answered as its JSON."""
    from memfit import wire
    from memfit.generated.models import WireFitVerdictRequest

    assert _service is not None, "a plan process computes plans only once started"
    requests = [WireFitVerdictRequest.model_validate(item, by_alias=True, by_name=False) for item in body]
    return wire.fit_plan_json(_service, requests)


class PlanProcesses:
    """At most `processes` plan processes, started as plans arrive. Only the event loop's thread uses it."""

    def __init__(self, settings: ServiceSettings, processes: int) -> None:
        self.settings, self.processes = settings, processes
        self._pool: ProcessPoolExecutor | None = None

    async def plan(self, body: Sequence[dict]) -> bytes:
        """The plan's JSON, computed in a plan process. OverBudget (and any other failure of the plan) is raised
        as the process raised it."""
        pool = self._pool or self._start()
        try:
            return await asyncio.wrap_future(pool.submit(_plan, list(body)))
        except BrokenProcessPool:
            if self._pool is pool:
                self._pool = None  # the next plan starts new processes
            raise PlanProcessLost("the process computing this plan ended before it answered; retry") from None

    def _start(self) -> ProcessPoolExecutor:
        self._pool = ProcessPoolExecutor(
            self.processes,
            mp_context=multiprocessing.get_context("spawn"),  # never fork a process with threads
            initializer=_start,
            initargs=(self.settings, os.getpid()),
        )
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            with contextlib.suppress(Exception):
                self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
