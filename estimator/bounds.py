"""The parts of an estimate and its bounds: the floor, the ceiling, the weakest evidence, what is missing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memfit.estimator.vocabulary import BASIS_STRENGTH, INT64_MAX, Basis, Component, Residency


@dataclass(frozen=True)
class Part:
    component: Component
    bytes: int | None  # None exactly when the basis is unknown
    basis: Basis
    note: str
    slack: int = 0  # how far above `bytes` llama.cpp may go for this part (0 where the rule is exact)
    shared_key: str = ""
    residency: Residency = Residency.HARD  # how it holds the host's memory

    @staticmethod
    def unknown(component: Component, note: str) -> Part:
        return Part(component, None, Basis.UNKNOWN, note)

    @staticmethod
    def not_applicable(component: Component, note: str) -> Part:
        return Part(component, 0, Basis.NOT_APPLICABLE, note)


@dataclass(frozen=True)
class Bounds:
    lower: int
    upper: int | None
    weakest: Basis
    missing: tuple[str, ...]
    widest_part: int = 0  # the largest part's ceiling: beyond 2^63-1 the contract cannot say it either

    @property
    def overflows(self) -> bool:
        return max(self.lower, self.widest_part) > INT64_MAX or (self.upper is not None and self.upper > INT64_MAX)


def bounds(parts: Sequence[Part]) -> Bounds:
    """lower = sum of the numbers; upper = lower + every slack, or None when any part is unknown."""
    lower = sum(p.bytes for p in parts if p.bytes is not None)
    missing = tuple(p.component.value for p in parts if p.basis is Basis.UNKNOWN)
    upper = None if missing else lower + sum(p.slack for p in parts)
    counted = [p.basis for p in parts if p.basis is not Basis.NOT_APPLICABLE]
    weakest = max(counted, key=BASIS_STRENGTH.index) if counted else Basis.UNKNOWN
    widest = max((p.bytes + p.slack for p in parts if p.bytes is not None), default=0)
    return Bounds(lower, upper, weakest, missing, widest)


REFUSED = Bounds(0, None, Basis.UNKNOWN, ())


def soft_bytes(parts: Sequence[Part]) -> int:
    """The most of the parts the kernel may reclaim: every soft part's ceiling."""
    return sum(p.bytes + p.slack for p in parts if p.residency is Residency.SOFT and p.bytes is not None)
