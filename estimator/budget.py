"""The budget a verdict is taken against: one host reading per request."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from memfit.estimator.machine import HostMemory
from memfit.estimator.vocabulary import BudgetBasis


class BudgetSetting(StrEnum):
    """`memfit serve --budget`: which host figure verdicts are taken against."""

    AVAILABLE = "available"
    TOTAL = "total"


@dataclass(frozen=True)
class Budget:
    basis: BudgetBasis
    bytes: int | None
    committed_bytes: int | None


def budget_from(host: HostMemory, setting: BudgetSetting, committed_bytes: int | None) -> Budget:
    """available (psutil's available memory) by default; total when asked for or when available is unreadable."""
    if setting is BudgetSetting.AVAILABLE and host.available is not None:
        return Budget(BudgetBasis.HOST_AVAILABLE, host.available, committed_bytes)
    if host.total is not None:
        return Budget(BudgetBasis.HOST_TOTAL, host.total, committed_bytes)
    return Budget(BudgetBasis.UNKNOWN, None, committed_bytes)
