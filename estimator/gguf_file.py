"""What a GGUF header says, as memfit reads it (memfit/readers/gguf_header.py parses a file into these): its
metadata, each key's value type, and its tensors' names, shapes, types and offsets. Long arrays and strings an
estimate never reads are kept as their length only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

MAX_DIMS = 4  # GGML_MAX_DIMS


@dataclass(frozen=True)
class SkippedArray:
    """A long array whose items were not built: its item type and length only."""

    item_type: int
    count: int


@dataclass(frozen=True)
class SkippedString:
    """A string value too long to be anything an estimate reads: its length only."""

    length: int


Value = int | float | bool | str | tuple | SkippedArray | SkippedString


class KeyType(NamedTuple):
    """A key's GGUF value type, and its items' type when it is an array (what llama.cpp's getters check)."""

    type: int
    item: int | None = None


class TensorInfo(NamedTuple):
    name: str
    shape: tuple[int, ...]  # ne[0], ne[1], ... as ggml orders them
    ggml_type: int
    offset: int  # relative to the start of the data section


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Value]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_offset: int
    file_size: int
    key_types: dict[str, KeyType]
