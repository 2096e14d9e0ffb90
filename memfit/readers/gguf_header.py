"""A bounded, lazy reader of a GGUF file's header: metadata and tensor infos, never tensor data.

It walks the header with struct over an mmap and keeps what an estimate needs: every scalar, every
numeric array short enough to be a per-layer array, and only the length of the long arrays (the
tokenizer's tokens, scores and merges), which it skips without building them. Every count and
length is checked against the bytes left in the file before it is used, so a hostile header costs
time and memory bounded by the file's real size, never by what it claims.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Union

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
# Numeric arrays up to this length are kept (per-layer hyperparameters); longer ones only counted.
KEPT_ARRAY_LENGTH = 4096
# Far beyond any real model (tokenizers hold < 300k strings, models < 100k tensors and < 1k keys), and low
# enough that walking a hostile header stays quick whatever the file's size.
MAX_STRINGS_IN_ARRAY = 1 << 22
MAX_TENSORS = 1 << 20
MAX_KEYS = 1 << 16

# gguf value types (GGUFValueType in gguf-py's constants.py)
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR_FORMATS = {
    UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i",
    FLOAT32: "f", BOOL: "?", UINT64: "Q", INT64: "q", FLOAT64: "d",
}


class GGUFError(ValueError):
    """The file is not a GGUF header this reader can trust."""


@dataclass(frozen=True)
class SkippedArray:
    """A long array whose items were not built: its item type and length only."""

    item_type: int
    count: int


Value = Union[int, float, bool, str, tuple, SkippedArray]


@dataclass(frozen=True)
class TensorInfo:
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


class _Cursor:
    """Reads little- or big-endian values from a buffer, refusing to step past its end."""

    def __init__(self, buf: mmap.mmap | bytes, order: str) -> None:
        self.buf = buf
        self.end = len(buf)
        self.pos = 0
        self.order = order
        self._u32 = struct.Struct(order + "I").unpack_from
        self._u64 = struct.Struct(order + "Q").unpack_from

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise GGUFError(f"header runs past the end of the file at byte {self.pos}")

    def u32(self) -> int:
        self.need(4)
        (v,) = self._u32(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self) -> int:
        self.need(8)
        (v,) = self._u64(self.buf, self.pos)
        self.pos += 8
        return v

    def string(self) -> str:
        n = self.u64()
        self.need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(f"string at byte {self.pos - n} is not UTF-8") from exc

    def skip_strings(self, count: int) -> None:
        # Each string is a u64 length and that many bytes; walk the lengths without decoding.
        u64, buf, end, pos = self._u64, self.buf, self.end, self.pos
        for _ in range(count):
            if pos + 8 > end:
                raise GGUFError("string array runs past the end of the file")
            pos += 8 + u64(buf, pos)[0]
        if pos > end:
            raise GGUFError("string array runs past the end of the file")
        self.pos = pos

    def scalar(self, vtype: int) -> int | float | bool:
        fmt = _SCALAR_FORMATS[vtype]
        size = struct.calcsize(fmt)
        self.need(size)
        (v,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += size
        return v

    def value(self, vtype: int) -> Value:
        if vtype in _SCALAR_FORMATS:
            return self.scalar(vtype)
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            return self.array()
        raise GGUFError(f"unknown value type {vtype}")

    def array(self) -> Value:
        item_type = self.u32()
        count = self.u64()
        if item_type in _SCALAR_FORMATS:
            size = struct.calcsize(_SCALAR_FORMATS[item_type])
            self.need(count * size)
            if count > KEPT_ARRAY_LENGTH:
                self.pos += count * size
                return SkippedArray(item_type, count)
            items = struct.unpack_from(f"{self.order}{count}{_SCALAR_FORMATS[item_type]}", self.buf, self.pos)
            self.pos += count * size
            return tuple(items)
        if item_type == STRING:
            if count > MAX_STRINGS_IN_ARRAY:
                raise GGUFError(f"a string array of {count} entries is not a model's")
            self.need(count * 8)  # every string has at least its length
            if count > KEPT_ARRAY_LENGTH:
                self.skip_strings(count)
                return SkippedArray(item_type, count)
            return tuple(self.string() for _ in range(count))
        if item_type == ARRAY:
            raise GGUFError("arrays of arrays are not part of any model's metadata")
        raise GGUFError(f"unknown array item type {item_type}")


def _byte_order(buf: mmap.mmap | bytes) -> str:
    if len(buf) < 24 or buf[:4] != GGUF_MAGIC:
        raise GGUFError("not a GGUF file (bad magic)")
    (little,) = struct.unpack_from("<I", buf, 4)
    if little in SUPPORTED_VERSIONS:
        return "<"
    (big,) = struct.unpack_from(">I", buf, 4)
    if big in SUPPORTED_VERSIONS:
        return ">"
    raise GGUFError(f"unsupported GGUF version {little}")


def parse_header(buf: mmap.mmap | bytes) -> GGUFHeader:
    """Parse a GGUF header held in `buf` (the whole file, usually an mmap)."""
    cur = _Cursor(buf, _byte_order(buf))
    cur.pos = 4
    version = cur.u32()
    n_tensors = cur.u64()
    n_kv = cur.u64()
    # A key-value pair takes at least 12 bytes and a tensor info at least 24: claims beyond the file are lies.
    cur.need(n_kv * 12 + n_tensors * 24)
    if n_kv > MAX_KEYS or n_tensors > MAX_TENSORS:
        raise GGUFError(f"{n_kv} keys and {n_tensors} tensors are not a model's")

    metadata: dict[str, Value] = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.u32()
        value = cur.value(vtype)
        if key in metadata:
            raise GGUFError(f"duplicate metadata key {key!r}")
        metadata[key] = value

    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.u32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFError(f"tensor {name!r} has {n_dims} dimensions")
        shape = tuple(cur.u64() for _ in range(n_dims))
        if 0 in shape:
            raise GGUFError(f"tensor {name!r} has a zero dimension")
        ggml_type = cur.u32()
        offset = cur.u64()
        tensors.append(TensorInfo(name, shape, ggml_type, offset))

    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"general.alignment {alignment!r} is not a power of two")
    data_offset = -(-cur.pos // alignment) * alignment
    return GGUFHeader(version, metadata, tuple(tensors), alignment, data_offset, len(buf))


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read the header of the GGUF file at `path`; raises GGUFError or OSError."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise GGUFError("empty file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return parse_header(buf)
