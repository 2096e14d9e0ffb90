"""Deadlines and delays spread over their upper half, so that what a flood started at once does not all end, and
start again, at once: 2,000 connections opened together and closed at one deadline came back together, and
accepting them held every other request for 0.2 s. Deterministic: the n-th call gets the n-th of SLOTS factors."""

from __future__ import annotations

import itertools

SLOTS = 8
_calls = itertools.count()


def spread(seconds: float) -> float:
    """`seconds` times one of 1, 15/16, ..., 9/16, in turn."""
    return seconds * (1 - (next(_calls) % SLOTS) / (2 * SLOTS))
