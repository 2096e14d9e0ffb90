"""The verdict: the estimate's bounds against one budget reading, with a presentation margin."""

from __future__ import annotations

from fractions import Fraction

from memfit.estimator.bounds import Bounds
from memfit.estimator.vocabulary import Verdict

DEFAULT_MARGIN = Fraction(1, 10)


def verdict(estimate: Bounds, budget: int | None, margin: Fraction, refused: bool) -> Verdict:
    """oversize: floor > budget; good: ceiling x (1 + margin) <= budget; tight: ceiling <= budget; else unknown."""
    if refused or budget is None:
        return Verdict.UNKNOWN
    if estimate.lower > budget:
        return Verdict.OVERSIZE
    if estimate.upper is None:
        return Verdict.UNKNOWN
    if estimate.upper * (margin.denominator + margin.numerator) <= budget * margin.denominator:  # x (1 + margin)
        return Verdict.GOOD
    if estimate.upper <= budget:
        return Verdict.TIGHT
    return Verdict.UNKNOWN
