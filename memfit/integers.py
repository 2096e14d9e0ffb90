"""Integer helpers every layer shares: llama.cpp's rounding, and what counts as an integer in a file or a body."""

from __future__ import annotations

from typing import TypeGuard


def ceil_div(n: int, d: int) -> int:
    """n / d rounded up (d > 0)."""
    return -(-n // d)


def round_up(n: int, multiple: int) -> int:
    """n rounded up to a multiple (ggml's GGML_PAD, llama.cpp's cell padding)."""
    return ceil_div(n, multiple) * multiple


def is_int(value: object) -> TypeGuard[int]:
    """An integer, and not a boolean (JSON and GGUF both have booleans, which Python counts as ints)."""
    return isinstance(value, int) and not isinstance(value, bool)
