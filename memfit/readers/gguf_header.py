"""A bounded, lazy reader of a GGUF file's header: metadata and tensor infos, never tensor data.

It walks the header with struct over windows of the file and keeps what an estimate needs: every scalar, every
numeric array short enough to be a per-layer array, and only the length of the long arrays (the
tokenizer's tokens, scores and merges), which it skips without building them. Every count and
length is checked against the bytes left in the file before it is used, so a hostile header costs
time and memory bounded by the file's real size, never by what it claims.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import BinaryIO

from memfit import gguf_constants as gguf
from memfit.integers import is_int, round_up
from memfit.readers.regular_files import open_regular

GGUF_MAGIC = struct.pack("<I", gguf.GGUF_MAGIC)  # b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
# Numeric arrays up to this length are kept (per-layer hyperparameters); longer ones only counted.
KEPT_ARRAY_LENGTH = 4096
# Far beyond any real model (tokenizers hold < 300k strings, models < 100k tensors and < 1k keys), and low
# enough that walking a hostile header stays quick whatever the file's size.
MAX_STRINGS_IN_ARRAY = 1 << 22
MAX_STRINGS_PER_FILE = 1 << 22
MAX_TENSORS = 1 << 20
MAX_KEYS = 1 << 16
MAX_KEY_BYTES = 1 << 16  # keys and tensor names (gguf keys are at most 65535 bytes)
MAX_STRING_BYTES = 1 << 20  # a longer value (a vast chat template) is skipped, never held
# All the header keeps (strings, short arrays, tensor infos), counting each item as at least 8 bytes. A real
# header keeps well under 2 MiB (its long tokenizer arrays are only counted); this bounds a hostile one's
# memory and time whatever the file's size.
MAX_KEPT_BYTES = 8 << 20
ITEM_BYTES = 8
TENSOR_INFO_BYTES = 64

VT = gguf.GGUFValueType
STRING, ARRAY = VT.STRING, VT.ARRAY
_SCALAR_FORMATS: dict[int, str] = {
    VT.UINT8: "B",
    VT.INT8: "b",
    VT.UINT16: "H",
    VT.INT16: "h",
    VT.UINT32: "I",
    VT.INT32: "i",
    VT.FLOAT32: "f",
    VT.BOOL: "?",
    VT.UINT64: "Q",
    VT.INT64: "q",
    VT.FLOAT64: "d",
}


class GGUFError(ValueError):
    """The file is not a GGUF header this reader can trust."""


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


SKIP_WINDOW = 1 << 22  # the window a long string array is walked in
VECTOR_MIN = 64  # strings left before the vectorised walk is worth its set-up


def _walk_short_strings(buf: bytes, base: int, pos: int, count: int, big_endian: bool) -> tuple[int, int]:
    """Walk up to `count` strings from file offset `pos` in `buf` (which holds the file from `base`), vectorised:
    (strings walked, the offset after them). Exact: it walks only strings whose length fits in the low byte of
    their u64 length (every token of a real vocabulary) and whose length lies in the window, each one checked
    to start where the previous one ends; it stops (returning what it walked) at the first string it cannot
    take, which the caller then steps over one at a time. Candidates are the offsets whose seven high length
    bytes are zero; a candidate inside another string (zero bytes in text) is never taken, since every string
    taken starts exactly where its predecessor ends."""
    import numpy as np  # here, not at the top: a catalog fit (`memfit fit` of an id) never walks a vocabulary

    a = np.frombuffer(buf, dtype=np.uint8)
    r0 = pos - base
    n = len(a) - 8 - r0 + 1  # offsets r0 .. len(a) - 8 have a whole length in the window
    if n <= 0:
        return 0, pos
    zero = a[r0:] == 0
    if big_endian:  # bytes 0..6 zero, the length in byte 7
        mask = zero[0:n].copy()
        for k in range(1, 7):
            mask &= zero[k : k + n]
        low = 7
    else:  # the length in byte 0, bytes 1..7 zero
        mask = zero[1 : 1 + n].copy()
        for k in range(2, 8):
            mask &= zero[k : k + n]
        low = 0
    starts = np.flatnonzero(mask)  # relative to r0
    if not len(starts) or starts[0] != 0:
        return 0, pos
    after = starts + 8 + a[r0 + low + starts].astype(np.int64)  # where each candidate's string ends
    i, walked, block = 0, 0, 64
    while walked < count:
        k = min(count - walked, len(starts) - i, block)
        linked = after[i : i + k - 1] == starts[i + 1 : i + k]
        good = k if bool(linked.all()) else int(np.argmin(linked)) + 1
        walked += good
        nxt = int(after[i + good - 1])
        i += good
        block = min(block * 2, 1 << 16) if good == k else 64
        if walked == count or nxt > n - 1:
            return walked, pos + nxt
        if i >= len(starts) or starts[i] != nxt:
            i = int(np.searchsorted(starts, nxt))
            if i >= len(starts) or starts[i] != nxt:
                return walked, pos + nxt  # the next string is not a candidate: the caller steps over it
    return walked, pos


class _Source:
    """The file's bytes, read on demand in windows: a header of any size without holding the whole file, and
    no mmap, so a file truncated while it is read is an error here rather than a SIGBUS."""

    CHUNK = 1 << 20

    def __init__(self, data: bytes | None = None, file: BinaryIO | None = None, size: int = 0) -> None:
        self.file = file
        self.buf = data if data is not None else b""
        self.base = 0
        self.size = len(data) if data is not None else size

    def window(self, offset: int, n: int) -> tuple[bytes, int]:
        """A buffer holding bytes [offset, offset + n) of the file, and where they start in it."""
        if self.base <= offset and offset + n <= self.base + len(self.buf):
            return self.buf, offset - self.base
        if self.file is None:
            raise GGUFError(f"header runs past the end of the data at byte {offset}")
        self.file.seek(offset)
        self.buf = self.file.read(min(max(n, self.CHUNK), self.size - offset))
        self.base = offset
        if len(self.buf) < n:
            raise GGUFError("the file changed while it was read")
        return self.buf, 0


class _Cursor:
    """Reads little- or big-endian values, refusing to step past the end of the file."""

    def __init__(self, source: _Source, order: str) -> None:
        self.src = source
        self.end = source.size
        self.pos = 0
        self.order = order
        self.strings_walked = 0
        self.kept = 0
        self._u32 = struct.Struct(order + "I").unpack_from
        self._u64 = struct.Struct(order + "Q").unpack_from

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise GGUFError(f"header runs past the end of the file at byte {self.pos}")

    def keep(self, n: int) -> None:
        """Account for `n` more bytes kept from the header; refuse a header that keeps more than any model's."""
        self.kept += n
        if self.kept > MAX_KEPT_BYTES:
            raise GGUFError(f"the header keeps over {MAX_KEPT_BYTES >> 20} MiB of metadata: not a model's")

    def _take(self, n: int) -> tuple[bytes, int]:
        self.need(n)
        buf, i = self.src.window(self.pos, n)
        self.pos += n
        return buf, i

    def u32(self) -> int:
        buf, i = self._take(4)
        return self._u32(buf, i)[0]

    def u64(self) -> int:
        buf, i = self._take(8)
        return self._u64(buf, i)[0]

    def string(self, max_bytes: int = MAX_STRING_BYTES) -> str | SkippedString:
        n = self.u64()
        if n > max_bytes:  # no model needs it: skipped, never held
            self.need(n)
            self.pos += n
            return SkippedString(n)
        self.keep(n + ITEM_BYTES)
        buf, i = self._take(n)
        try:
            return buf[i : i + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(f"string at byte {self.pos - n} is not UTF-8") from exc

    def key(self) -> str:
        key = self.string(MAX_KEY_BYTES)
        if isinstance(key, SkippedString):
            raise GGUFError(f"a key of {key.length} bytes is not a model's")
        return key

    def skip_strings(self, count: int) -> None:
        # Each string is a u64 length and that many bytes: walk the lengths without decoding.
        self.strings_walked += count
        if self.strings_walked > MAX_STRINGS_PER_FILE:
            raise GGUFError(f"{self.strings_walked} strings in arrays are not a model's")
        u64, src, end, pos = self._u64, self.src, self.end, self.pos
        while count:
            if pos + 8 > src.base + len(src.buf):
                if pos + 8 > end:
                    raise GGUFError("string array runs past the end of the file")
                src.window(pos, min(max(8, SKIP_WINDOW), end - pos))
            buf, base = src.buf, src.base
            if count >= VECTOR_MIN:
                done, pos = _walk_short_strings(buf, base, pos, count, self.order == ">")
                count -= done
                if done:
                    continue
            # One string the vectorised walk does not take (a length of 256 or more, or near the window's end).
            pos += 8 + u64(buf, pos - base)[0]
            count -= 1
            if pos > end:
                raise GGUFError("string array runs past the end of the file")
        if pos > end:
            raise GGUFError("string array runs past the end of the file")
        self.pos = pos

    def scalar(self, vtype: int) -> int | float | bool:
        fmt = _SCALAR_FORMATS[vtype]
        buf, i = self._take(struct.calcsize(fmt))
        return struct.unpack_from(self.order + fmt, buf, i)[0]

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
            if count > KEPT_ARRAY_LENGTH:
                self.need(count * size)
                self.pos += count * size
                return SkippedArray(item_type, count)
            self.keep(count * ITEM_BYTES)
            buf, i = self._take(count * size)
            return tuple(struct.unpack_from(f"{self.order}{count}{_SCALAR_FORMATS[item_type]}", buf, i))
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


def _byte_order(source: _Source) -> str:
    if source.size < 24:
        raise GGUFError("not a GGUF file (too short)")
    buf, i = source.window(0, 24)
    if buf[i : i + 4] != GGUF_MAGIC:
        raise GGUFError("not a GGUF file (bad magic)")
    (little,) = struct.unpack_from("<I", buf, i + 4)
    if little in SUPPORTED_VERSIONS:
        return "<"
    (big,) = struct.unpack_from(">I", buf, i + 4)
    if big in SUPPORTED_VERSIONS:
        return ">"
    raise GGUFError(f"unsupported GGUF version {little}")


def parse_header(data: bytes) -> GGUFHeader:
    """Parse the GGUF header of a file held whole in `data`."""
    return _parse(_Source(data=data))


def _parse(source: _Source) -> GGUFHeader:
    cur = _Cursor(source, _byte_order(source))
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
        key = cur.key()
        vtype = cur.u32()
        value = cur.value(vtype)
        if key in metadata:
            raise GGUFError(f"duplicate metadata key {key!r}")
        metadata[key] = value

    tensors = []
    for _ in range(n_tensors):
        cur.keep(TENSOR_INFO_BYTES)
        name = cur.key()
        n_dims = cur.u32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFError(f"tensor {name!r} has {n_dims} dimensions")
        shape = tuple(cur.u64() for _ in range(n_dims))
        if 0 in shape:
            raise GGUFError(f"tensor {name!r} has a zero dimension")
        ggml_type = cur.u32()
        offset = cur.u64()
        tensors.append(TensorInfo(name, shape, ggml_type, offset))

    alignment = metadata.get(gguf.Keys.General.ALIGNMENT, gguf.GGUF_DEFAULT_ALIGNMENT)
    if not is_int(alignment) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"{gguf.Keys.General.ALIGNMENT} {alignment!r} is not a power of two")
    data_offset = round_up(cur.pos, alignment)
    return GGUFHeader(version, metadata, tuple(tensors), alignment, data_offset, source.size)


def read_header(source: str | os.PathLike[str] | BinaryIO) -> GGUFHeader:
    """Read the header of the GGUF file at a path, or of a file already open (read from its start); raises
    GGUFError or OSError."""
    if not isinstance(source, (str, os.PathLike)):
        source.seek(0)
        return _parse(_Source(file=source, size=os.fstat(source.fileno()).st_size))
    with open_regular(source) as f:
        return _parse(_Source(file=f, size=os.fstat(f.fileno()).st_size))
