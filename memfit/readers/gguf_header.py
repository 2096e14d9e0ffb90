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
import sys
from typing import TYPE_CHECKING, BinaryIO, Protocol

from memfit import gguf_constants as gguf
from memfit.estimator.gguf_file import MAX_DIMS, GGUFHeader, KeyType, SkippedArray, SkippedString, TensorInfo, Value
from memfit.integers import is_int, round_up
from memfit.readers.regular_files import open_regular

if TYPE_CHECKING:
    import numpy as np

GGUF_MAGIC = struct.pack("<I", gguf.GGUF_MAGIC)  # b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
MAX_NAME = 64  # GGML_MAX_NAME: gguf_init refuses a tensor name of this many bytes or more
# Numeric arrays up to this length are kept (per-layer hyperparameters); longer ones only counted.
KEPT_ARRAY_LENGTH = 4096
# String arrays up to this length are kept (tags, languages); longer ones (a tokenizer's tokens and merges, of any
# vocabulary's size) only counted: nothing reads their text, and decoding a small test vocabulary's merges one by
# one was most of its header's read.
KEPT_STRINGS = 64
# Far beyond any real model (tokenizers hold < 300k strings, models < 100k tensors and < 1k keys), and low
# enough that walking a hostile header stays quick whatever the file's size.
MAX_STRINGS_IN_ARRAY = 1 << 22
MAX_STRINGS_PER_FILE = 1 << 22
MAX_TENSORS = 1 << 20
MAX_KEYS = 1 << 16
MAX_KEY_BYTES = 1 << 16  # keys (gguf keys are at most 65535 bytes); tensor names are shorter (MAX_NAME)
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


SKIP_WINDOW = 1 << 23  # the most of a long string array read at once
FIRST_READ = 1 << 18  # the file's first read: the keys and a small vocabulary in one window
STRING_BYTES_GUESS = 16  # bytes per string (its length and text) of an array not yet walked: a vocabulary's
VECTOR_MIN = 64  # strings left before the vectorised walk is worth its set-up
SPAN_PER_STRING = 24  # bytes of the window the vectorised walk looks at per string left (more when it runs short)
SPAN_SLACK = 512  # and this many more
MAX_RUN = 1 << 16  # linked candidates taken at once at most: at first, and again after a run unbroken from 64 up
SHORT_RUN = 16  # linked candidates: a run shorter than this that breaks makes the walk step on one at a time


def _walk_strings(buf: bytes, base: int, pos: int, count: int, big_endian: bool) -> tuple[int, int]:
    """Walk up to `count` strings (a u64 length, then that many bytes) from file offset `pos` in `buf`, which holds
    the file from offset `base`: (strings walked, the offset after them). It walks every string whose length lies
    wholly in `buf` (at least one when the first one's does; a string's text may run past `buf`) and stops at the
    first whose length does not; it never reads past `buf`, and a length that runs past the file is the caller's
    to refuse. Vectorised (numpy) for many strings, one at a time (struct) for a few."""
    if count < VECTOR_MIN:
        return _walk_strings_one_by_one(buf, base, pos, count, big_endian)
    return _walk_strings_vectorised(buf, base, pos, count, big_endian)


def _walk_strings_one_by_one(buf: bytes, base: int, pos: int, count: int, big_endian: bool) -> tuple[int, int]:
    """The plain walk: one struct read per string."""
    u64 = (_U64_BE if big_endian else _U64_LE).unpack_from
    last = base + len(buf) - 8  # the last offset whose length lies wholly in buf
    walked = 0
    while walked < count and pos <= last:
        pos += 8 + u64(buf, pos - base)[0]
        walked += 1
    return walked, pos


_U64_LE, _U64_BE = struct.Struct("<Q"), struct.Struct(">Q")


def _candidates(words: np.ndarray, big_endian: bool) -> tuple[np.ndarray, np.ndarray]:
    """The vectorised walk's candidates in `words` (word k: bytes 4k .. 4k + 3 of the span): where each one's string
    starts and ends, in bytes from the span's start, in order."""
    import numpy as np

    j = (words[1:-1] == 0).nonzero()[0]  # word j + 1 is zero; j indexes its neighbours: words[j], words[2:][j]
    before, next_word = words.take(j), words[2:].take(j)  # take: faster than fancy indexing
    # e: 3 - the zero high bytes of the word before (a little-endian u32's high bytes come last). A length's block
    # of seven zero bytes starts 3 - e bytes before the zero word, so the word after must begin with e zero bytes
    # (its low 8e bits: numpy shifts a u32 by 32 to 0); the length's low byte is the byte beside the block
    # (little-endian: the word before's byte e, with only zero bytes above it; big-endian: the word after's byte e).
    # Each new vocabulary-sized array is memory to allocate and touch: the arrays made here are reused in place.
    e = np.greater_equal(before, 1 << 24).view(np.uint8)
    scratch = np.greater_equal(before, 1 << 16)
    e += scratch.view(np.uint8)
    np.greater_equal(before, 1 << 8, out=scratch)
    e += scratch.view(np.uint8)
    shift = np.multiply(e, np.uint8(8), out=scratch.view(np.uint8))
    if big_endian:
        low = np.right_shift(next_word, shift)
        low &= np.uint32(0xFF)
    else:
        low = np.right_shift(before, shift, out=before)
    np.left_shift(next_word, np.subtract(np.uint8(32), shift, out=shift), out=next_word)  # 0: begins as it must
    bad = next_word != 0 if next_word.any() else None  # where it does not: that candidate is no short length
    starts = next_word.view(np.int32)  # offsets from the span's start (< 2**31)
    np.copyto(starts, j, casting="unsafe")
    starts *= 4
    starts += e
    if big_endian:
        starts += 1  # the block of seven zero bytes, then the length's low byte
    ends = low.view(np.int32)  # low < 256: the same value as an int32
    ends += starts
    ends += 8  # where each candidate's string ends
    if bad is not None:
        np.putmask(ends, bad, -1)  # an end no candidate starts at: never taken
    return starts, ends


def _linked_run(starts: np.ndarray, ends: np.ndarray, i: int, k: int, cur: int) -> tuple[int, int]:
    """Of the `k` candidates from the `i`th (which starts at `cur`), how many are walked at once, each starting
    where the one before ends, and where the last of them ends (`cur` when none is)."""
    import numpy as np

    linked = ends[i : i + k - 1] == starts[i + 1 : i + k]
    good = k if bool(linked.all()) else int(np.argmin(linked)) + 1
    end = int(ends[i + good - 1])
    if end < 0:  # not a candidate after all (only the last can be one: its end is no candidate's start)
        good -= 1
        end = int(ends[i + good - 1]) if good else cur
    return good, end


def _walk_strings_vectorised(buf: bytes, base: int, pos: int, count: int, big_endian: bool) -> tuple[int, int]:
    """The walk in numpy, exact. Candidates are the offsets whose u64 length is below 256 (seven zero bytes beside
    the low one: every token of a real vocabulary). Seven zero bytes always hold one whole zero word of any 4-byte
    grid (here the one aligned in `buf`, at or just before `pos`), so each zero word, with the zero high bytes of
    the word before it (the block of seven starts there) and enough zero low bytes in the word after it, is a
    candidate; its length's low byte sits in one of those neighbours, right beside the zero bytes. Each
    candidate's string ends at its offset + 8 + that byte, and a run of candidates each starting where the
    previous one ends is walked at once. A candidate inside another string's text (zero bytes in text) is never
    taken, since every string taken starts exactly where its predecessor ends; a string that is not a candidate
    (a length of 256 or more, a longer run of zeros) is stepped over with struct and the walk goes on from the
    next candidate."""
    import numpy as np  # here, not at the top: a catalog fit (`memfit fit` of an id) never walks a vocabulary

    r0 = pos - base
    lead = r0 & 3  # the grid starts on a 4-byte boundary of buf (numpy gathers from an unaligned array slowly)
    g0 = r0 - lead
    span = min(len(buf) - g0, SPAN_PER_STRING * count + SPAN_SLACK + lead)  # bytes from g0 the candidates are from
    m = span // 4
    if m < 3:
        return _walk_strings_one_by_one(buf, base, pos, count, big_endian)
    u64 = (_U64_BE if big_endian else _U64_LE).unpack_from
    starts, ends = _candidates(np.frombuffer(buf, dtype="<u4", count=m, offset=g0), big_endian)
    last = span - 8  # the last offset (from g0) whose length lies wholly in the span
    n = len(starts)
    cur, walked, i, run, burst = lead, 0, 0, MAX_RUN, 64
    while walked < count and cur <= last:
        if i < n and int(starts[i]) == cur:  # a run of linked candidates from here
            k = min(count - walked, n - i, run)
            good, cur = _linked_run(starts, ends, i, k, cur)
            walked += good
            i += good
            if good == k:
                run, burst = min(run * 2, MAX_RUN), 64
                continue
            run = 64
            steps = 0 if good >= SHORT_RUN else burst  # runs that keep breaking: walk a while without them
        else:
            steps = burst  # not a candidate: step over strings one at a time, more of them each time it comes again
        if steps:
            burst = min(burst * 2, 1 << 16)
            while steps and walked < count and cur <= last:
                cur += 8 + u64(buf, g0 + cur)[0]
                walked += 1
                steps -= 1
        if cur <= last:
            i = int(starts.searchsorted(np.int32(cur)))
    return walked, base + g0 + cur


_U32_U64 = {order: (struct.Struct(order + "I").unpack_from, struct.Struct(order + "Q").unpack_from) for order in "<>"}
_SCALARS = {order: {vtype: struct.Struct(order + fmt) for vtype, fmt in _SCALAR_FORMATS.items()} for order in "<>"}
# a tensor info after its name and n_dims, by n_dims: the dims, the type, the offset
_TENSOR_TAILS = {order: [struct.Struct(f"{order}{n}QIQ").unpack_from for n in range(MAX_DIMS + 1)] for order in "<>"}


def _text(buf: bytes, start: int, stop: int, offset: int) -> str:
    """`buf[start:stop]` as UTF-8; `offset` is where it starts in the file."""
    try:
        return buf[start:stop].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GGUFError(f"string at byte {offset} is not UTF-8") from exc


def _refuse_duplicate_names(infos: list[TensorInfo]) -> None:
    """gguf_init refuses a duplicate tensor name: the first one named again."""
    seen: set[str] = set()
    for t in infos:
        if t.name in seen:
            raise GGUFError(f"duplicate tensor name {t.name!r}")
        seen.add(t.name)


class Seekable(Protocol):
    """What the reader needs of a file: a local one, or a remote one read by ranges (memfit.readers.hub)."""

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def read(self, n: int = -1, /) -> bytes: ...


class _Source:
    """The file's bytes, read on demand in windows: a header of any size without holding the whole file, and
    no mmap, so a file truncated while it is read is an error here rather than a SIGBUS."""

    CHUNK = 1 << 16  # the least read at once

    def __init__(self, data: bytes | None = None, file: Seekable | None = None, size: int = 0) -> None:
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
        self.item_type = 0  # the item type of the array read last
        self._u32, self._u64 = _U32_U64[order]

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
        return _text(buf, i, i + n, self.pos - n)

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
        src, end, pos, big_endian = self.src, self.end, self.pos, self.order == ">"
        first, total = pos, count
        while count:
            held = src.base + len(src.buf)
            walked = total - count
            guess = (pos - first) * count // walked if walked else STRING_BYTES_GUESS * count
            # a new window when the length at pos is not held, or before the walk starts when the array looks
            # longer than what is held: then the whole array is walked in one window, with one set-up
            if pos + 8 > held or (not walked and held < min(pos + guess, end)):
                if pos + 8 > end:
                    raise GGUFError("string array runs past the end of the file")
                # a window for the strings left, as long as those walked so far suggest (a little more)
                src.window(pos, min(max(8, guess + guess // 8 + 4096), SKIP_WINDOW, end - pos))
            done, pos = _walk_strings(src.buf, src.base, pos, count, big_endian)
            count -= done
            if pos > end:
                raise GGUFError("string array runs past the end of the file")
        self.pos = pos

    def tensor_infos(self, count: int) -> tuple[TensorInfo, ...]:
        """`count` tensor infos (name, n_dims, the dims, type, offset). Each is read straight from the window when
        it lies there whole, else value by value; the checks are the same either way."""
        u64, u32, src = self._u64, self._u32, self.src
        tail = _TENSOR_TAILS[self.order]
        infos: list[TensorInfo] = []
        append, intern, new = infos.append, sys.intern, tuple.__new__
        pos, buf, base = self.pos, src.buf, src.base
        held = min(len(buf), self.end - base)  # the bytes of the window that are in the file
        for _ in range(count):
            i = pos - base
            # the whole record, when the window holds it: name length, name, n_dims, dims, type, offset
            if 0 <= i <= held - 8:
                n = u64(buf, i)[0]
                at = i + 8 + n  # n_dims
                if n < MAX_NAME and at + 4 <= held:
                    n_dims = u32(buf, at)[0]
                    stop = at + 16 + 8 * n_dims
                    if 1 <= n_dims <= MAX_DIMS and stop <= held:
                        self.kept += TENSOR_INFO_BYTES + n + ITEM_BYTES  # keep(), inline in this loop
                        if self.kept > MAX_KEPT_BYTES:
                            self.keep(0)
                        try:
                            name = intern(buf[i + 8 : at].decode("utf-8"))  # one per distinct name
                        except UnicodeDecodeError:
                            name = _text(buf, i + 8, at, pos + 8)  # raises
                        values = tail[n_dims](buf, at + 4)  # the dims, the type, the offset
                        shape = values[:n_dims]
                        if 0 in shape:
                            raise GGUFError(f"tensor {name!r} has a zero dimension")
                        append(new(TensorInfo, (name, shape, values[n_dims], values[n_dims + 1])))
                        pos = base + stop
                        continue
            self.pos = pos
            append(self._tensor_info())
            pos, buf, base = self.pos, src.buf, src.base
            held = min(len(buf), self.end - base)
        self.pos = pos
        if len({t.name for t in infos}) < len(infos):
            _refuse_duplicate_names(infos)
        return tuple(infos)

    def _tensor_info(self) -> TensorInfo:
        """One tensor info, value by value (across windows, or to say what is wrong with it)."""
        self.keep(TENSOR_INFO_BYTES)
        name = self.key()
        if len(name.encode()) >= MAX_NAME:
            raise GGUFError(f"tensor name {name[:MAX_NAME]!r}... is {MAX_NAME} bytes or longer")
        n_dims = self.u32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFError(f"tensor {name!r} has {n_dims} dimensions")
        shape = tuple(self.u64() for _ in range(n_dims))
        if 0 in shape:
            raise GGUFError(f"tensor {name!r} has a zero dimension")
        ggml_type = self.u32()
        offset = self.u64()
        return TensorInfo(name, shape, ggml_type, offset)

    def metadata(self, count: int) -> tuple[dict[str, Value], dict[str, KeyType]]:
        """`count` key-value pairs: the values by key, and the keys' types. A key, its type and a scalar or string
        value are read straight from the window when they lie there whole, else value by value; the checks are the
        same either way."""
        u64, u32, src, new = self._u64, self._u32, self.src, tuple.__new__
        metadata: dict[str, Value] = {}
        key_types: dict[str, KeyType] = {}
        for _ in range(count):
            pos, buf, base = self.pos, src.buf, src.base
            held = min(len(buf), self.end - base)  # the bytes of the window that are in the file
            i = pos - base
            n = u64(buf, i)[0] if 0 <= i <= held - 8 else MAX_KEY_BYTES + 1
            at = i + 8 + n  # the value's type
            if n <= MAX_KEY_BYTES and at + 4 <= held:  # the key and its type, from the window
                self.keep(n + ITEM_BYTES)
                key = _text(buf, i + 8, at, pos + 8)
                if not key:
                    raise GGUFError("a metadata key is empty")
                vtype = u32(buf, at)[0]
                value = self._value_in(vtype, buf, base, at + 4, held)
            else:
                key = self.key()
                if not key:
                    raise GGUFError("a metadata key is empty")
                vtype = self.u32()
                value = self.value(vtype)
            if key in metadata:
                raise GGUFError(f"duplicate metadata key {key!r}")
            metadata[key] = value
            key_types[key] = new(KeyType, (vtype, self.item_type if vtype == ARRAY else None))
        return metadata, key_types

    def _value_in(self, vtype: int, buf: bytes, base: int, at: int, held: int) -> Value:
        """The value of type `vtype` at `buf[at:]` (the window from file offset `base`, of which `held` bytes are
        in the file): a scalar or a string straight from the window when it lies there whole, else value by value
        from file offset base + at."""
        scalar = _SCALARS[self.order].get(vtype)
        if scalar is not None and at + scalar.size <= held:
            self.pos = base + at + scalar.size
            return scalar.unpack_from(buf, at)[0]
        n = self._u64(buf, at)[0] if vtype == STRING and at + 8 <= held else MAX_STRING_BYTES + 1
        if n <= MAX_STRING_BYTES and at + 8 + n <= held:
            self.keep(n + ITEM_BYTES)
            self.pos = base + at + 8 + n
            return _text(buf, at + 8, at + 8 + n, base + at + 8)
        self.pos = base + at
        return self.value(vtype)

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
        self.item_type = item_type = self.u32()
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
            if count > KEPT_STRINGS:
                self.skip_strings(count)
                return SkippedArray(item_type, count)
            return tuple(self.string() for _ in range(count))
        if item_type == ARRAY:
            raise GGUFError("arrays of arrays are not part of any model's metadata")
        raise GGUFError(f"unknown array item type {item_type}")


def _byte_order(source: _Source) -> str:
    if source.size < 24:
        raise GGUFError("not a GGUF file (too short)")
    buf, i = source.window(0, min(FIRST_READ, source.size))
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

    metadata, key_types = cur.metadata(n_kv)
    tensors = cur.tensor_infos(n_tensors)

    alignment = metadata.get(gguf.Keys.General.ALIGNMENT, gguf.GGUF_DEFAULT_ALIGNMENT)
    if key_types.get(gguf.Keys.General.ALIGNMENT, KeyType(VT.UINT32)).type != VT.UINT32:  # gguf_init
        raise GGUFError(f"{gguf.Keys.General.ALIGNMENT} is not a uint32")
    if not is_int(alignment) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"{gguf.Keys.General.ALIGNMENT} {alignment!r} is not a power of two")
    data_offset = round_up(cur.pos, alignment)
    return GGUFHeader(version, metadata, tensors, alignment, data_offset, source.size, key_types)


def read_sized(file: Seekable, size: int) -> GGUFHeader:
    """Read the header of a file of `size` bytes through `file`'s seek and read, from its start (a file on the Hub,
    read by ranges); the same walk, checks and caps as a file on disk. Raises GGUFError, or what `file` raises."""
    file.seek(0)
    return _parse(_Source(file=file, size=size))


def read_header(source: str | os.PathLike[str] | BinaryIO) -> GGUFHeader:
    """Read the header of the GGUF file at a path, or of a file already open (read from its start); raises
    GGUFError or OSError."""
    if not isinstance(source, (str, os.PathLike)):
        source.seek(0)
        return _parse(_Source(file=source, size=os.fstat(source.fileno()).st_size))
    with open_regular(source) as f:
        return _parse(_Source(file=f, size=os.fstat(f.fileno()).st_size))
