"""Where plans are computed under `memfit serve`, as the handlers see it (no connexion here: the plan processes import
this)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class PlanProcessLost(Exception):
    """The process computing a plan ended before it answered (a 503: the plan may be sent again)."""


class PlanRunner(Protocol):
    """Where plans are computed under `memfit serve` (memfit.plan_processes.PlanProcesses): the answer's JSON, or
    PlanProcessLost."""

    async def plan(self, body: Sequence[dict]) -> bytes: ...
