"""Hostile GGUF headers: a valid header built field by field, and the ways an attacker or a broken download
bends it. Used by tests/test_hostile_files.py (a bounded sample in CI) and `scripts/fuzz` (10,000+ cases).

Every field of the base header is recorded with its offset and kind, so a mutation can aim at exactly the
thing it breaks: a count or a length set near 2^64, a string running past the end, a wrong value type, an
array of arrays, a non-UTF-8 or duplicate key, a tensor offset past the end, off its alignment or shared with
the tensor before it, a zero dimension, or a truncation inside any kind of field.
"""

from __future__ import annotations

import random
import struct
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memfit.estimator.errors import EvidenceError
from memfit.integers import round_up
from memfit.service.artifact_cache import ArtifactCache
from tools.gguf_writers import Model, llama_gqa, write_model

ALIGN = 32
UINT32, FLOAT32, STRING, ARRAY, UINT64 = 4, 6, 8, 9, 10
HUGE = (2**64 - 1, 2**63, 2**63 - 1, 2**32, 2**32 - 1, 2**31)


@dataclass
class Field:
    offset: int
    size: int
    kind: str  # magic, version, count, key_length, key, value_type, value, array_type, array_count, tensor_...


@dataclass
class Header:
    data: bytearray = field(default_factory=bytearray)
    fields: list[Field] = field(default_factory=list)
    kv_entries: list[tuple[int, int]] = field(default_factory=list)  # (start, end) of each key-value pair

    def put(self, kind: str, raw: bytes) -> None:
        self.fields.append(Field(len(self.data), len(raw), kind))
        self.data += raw

    def string(self, kind: str, text: str) -> None:
        raw = text.encode()
        self.put(f"{kind}_length", struct.pack("<Q", len(raw)))
        self.put(kind, raw)

    def of(self, kind: str) -> list[Field]:
        return [f for f in self.fields if f.kind == kind]


def base_header(layers: int = 4, vocab: int = 64) -> Header:
    """A small but complete llama header: scalars, a per-layer array, a string array, and tensor infos."""
    h = Header()
    h.put("magic", b"GGUF")
    h.put("version", struct.pack("<I", 3))
    tensors = [("token_embd.weight", (64, vocab)), ("output_norm.weight", (64,))]
    for i in range(layers):
        tensors += [
            (f"blk.{i}.attn_q.weight", (64, 64)),
            (f"blk.{i}.attn_k.weight", (64, 16)),
            (f"blk.{i}.attn_v.weight", (64, 16)),
            (f"blk.{i}.attn_output.weight", (64, 64)),
        ]
    h.put("tensor_count", struct.pack("<Q", len(tensors)))
    scalars: list[tuple[str, int, str | int | float]] = [
        ("general.architecture", STRING, "llama"),
        ("llama.block_count", UINT32, layers),
        ("llama.context_length", UINT32, 4096),
        ("llama.embedding_length", UINT32, 64),
        ("llama.attention.head_count", UINT32, 4),
        ("llama.rope.freq_base", FLOAT32, 10000.0),
        ("general.file_type", UINT32, 1),
    ]
    h.put("kv_count", struct.pack("<Q", len(scalars) + 2))
    for key, vtype, value in scalars:
        start = len(h.data)
        h.string("key", key)
        h.put("value_type", struct.pack("<I", vtype))
        if vtype == STRING:
            assert isinstance(value, str)
            h.string("value", value)
        else:
            h.put("value", struct.pack("<I" if vtype == UINT32 else "<f", value))
        h.kv_entries.append((start, len(h.data)))
    start = len(h.data)  # a per-layer array of integers
    h.string("key", "llama.attention.head_count_kv")
    h.put("value_type", struct.pack("<I", ARRAY))
    h.put("array_type", struct.pack("<I", UINT32))
    h.put("array_count", struct.pack("<Q", layers))
    h.put("array_items", struct.pack(f"<{layers}I", *([1] * layers)))
    h.kv_entries.append((start, len(h.data)))
    start = len(h.data)  # a string array, as tokenizers have
    h.string("key", "tokenizer.ggml.tokens")
    h.put("value_type", struct.pack("<I", ARRAY))
    h.put("array_type", struct.pack("<I", STRING))
    h.put("array_count", struct.pack("<Q", vocab))
    for i in range(vocab):
        h.string("token", f"t{i}")
    h.kv_entries.append((start, len(h.data)))
    offset = 0
    for name, shape in tensors:
        h.string("tensor_name", name)
        h.put("tensor_dims", struct.pack("<I", len(shape)))
        for n in shape:
            h.put("tensor_dim", struct.pack("<Q", n))
        h.put("tensor_type", struct.pack("<I", 1))  # F16
        h.put("tensor_offset", struct.pack("<Q", offset))
        size = 2
        for n in shape:
            size *= n
        offset += round_up(size, ALIGN)
    h.data += b"\0" * ((-len(h.data)) % ALIGN) + b"\0" * offset
    return h


def _set(data: bytearray, f: Field, value: int) -> None:
    data[f.offset : f.offset + f.size] = value.to_bytes(f.size, "little") if value < 256**f.size else b"\xff" * f.size


MUTATIONS = (
    "truncate",
    "huge_count",
    "string_past_end",
    "wrong_type",
    "array_of_arrays",
    "non_utf8_key",
    "duplicate_key",
    "offset_past_end",
    "misaligned_offset",
    "shared_offset",
    "zero_dimension",
    "too_many_dims",
    "random_bytes",
)


# The mutations that write one number into one field: (the kinds of field picked from, the number from the header's
# length and `value`)
NUMBERS: dict[str, tuple[tuple[str, ...], Callable[[int, int], int]]] = {
    "huge_count": (("tensor_count", "kv_count", "array_count", "tensor_dim"), lambda _, value: HUGE[value % len(HUGE)]),
    "string_past_end": (
        ("key_length", "value_length", "token_length", "tensor_name_length"),
        lambda length, value: length + 1 + value % HUGE[0],
    ),
    "wrong_type": (("value_type", "array_type", "tensor_type"), lambda _, value: value % 64),
    "array_of_arrays": (("array_type",), lambda _, __: ARRAY),
    "offset_past_end": (("tensor_offset",), lambda length, value: length + value % (1 << 40)),
    "zero_dimension": (("tensor_dim",), lambda _, __: 0),
    "too_many_dims": (("tensor_dims",), lambda _, value: 5 + value % 1000),
}


def mutate(base: Header, mutation: str, pick: int, value: int) -> bytes:
    """One hostile variant of `base`: `pick` chooses the field, `value` the size or number it gets."""
    data = bytearray(base.data)

    def field_of(*kinds: str) -> Field:
        candidates = [f for f in base.fields if f.kind in kinds]
        return candidates[pick % len(candidates)]

    if mutation == "truncate":  # inside any kind of field
        f = base.fields[pick % len(base.fields)]
        return bytes(data[: f.offset + value % max(1, f.size)])
    if mutation in NUMBERS:
        kinds, number = NUMBERS[mutation]
        _set(data, field_of(*kinds), number(len(data), value))
    elif mutation == "non_utf8_key":
        f = field_of("key", "value", "tensor_name")
        data[f.offset + value % f.size] = 0xFF
    elif mutation == "duplicate_key":
        start, end = base.kv_entries[pick % len(base.kv_entries)]
        insert_at = base.kv_entries[-1][1]
        data[insert_at:insert_at] = data[start:end]
        _set(data, base.of("kv_count")[0], len(base.kv_entries) + 1)
    elif mutation == "misaligned_offset":
        f = field_of("tensor_offset")
        _set(data, f, int.from_bytes(data[f.offset : f.offset + 8], "little") + 1 + value % (ALIGN - 1))
    elif mutation == "shared_offset":  # a tensor's data where the one before it starts
        offsets = base.of("tensor_offset")
        i = 1 + pick % (len(offsets) - 1)
        data[offsets[i].offset : offsets[i].offset + 8] = data[offsets[i - 1].offset : offsets[i - 1].offset + 8]
    else:  # random bytes over a field
        f = base.fields[pick % len(base.fields)]
        data[f.offset : f.offset + f.size] = bytes((value >> (8 * (i % 8))) & 0xFF for i in range(f.size))
    return bytes(data)


def _llama_with(key: str, value: object) -> Model:
    model = llama_gqa()
    model.kv[key] = value
    return model


def _write_with_shared_offset(path: Path) -> None:
    """llama_gqa with its second tensor's data offset set to the first's: two tensors at one offset."""
    model = llama_gqa()
    write_model(model, path)
    data = bytearray(path.read_bytes())
    name, ne, _ = model.tensors[1]
    raw = name.encode()
    # its info: name length, name, n_dims, the dims, type, then the offset
    at = data.index(struct.pack("<Q", len(raw)) + raw) + 8 + len(raw) + 4 + 8 * len(ne) + 4
    data[at : at + 8] = struct.pack("<Q", 0)  # where the first tensor's data starts
    path.write_bytes(bytes(data))


# Real GGUF files llama.cpp refuses to load, each llama_gqa with one thing changed: a writer of each, by name.
LLAMA_CPP_REFUSES: dict[str, Callable[[Path], object]] = {
    # attn_k / attn_v are then [n_embd, 0] to llama.cpp, and the file's are not (create_tensor: wrong shape)
    "zero-kv-heads": lambda p: write_model(_llama_with("llama.attention.head_count_kv", 0), p),
    # llama_model_loader::get_key: "key ... has wrong type ... but expected type u32"
    "context-as-string": lambda p: write_model(_llama_with("llama.context_length", "8192"), p),
    "context-as-float32": lambda p: write_model(_llama_with("llama.context_length", 8192.0), p),
    "context-as-int32": lambda p: write_model(_llama_with("llama.context_length", np.int32(8192)), p),
    "heads-as-float-array": lambda p: write_model(_llama_with("llama.attention.head_count", [8.0] * 4), p),
    # gguf_init_from_file: "tensor ... has offset ..., expected ..."
    "shared-offset": _write_with_shared_offset,
    # token_embd, attention and output are 256 wide; the metadata says 320 (create_tensor: wrong shape)
    "contradicted-width": lambda p: write_model(_llama_with("llama.embedding_length", 320), p),
}


@dataclass(frozen=True)
class Outcome:
    refused: str  # the limit of a refused file, "" when it was read
    seconds: float
    peak_bytes: int


TIME_LIMIT_S = 2.0  # a header of a few KiB, hostile or not, is judged well within this
MEMORY_LIMIT = 16 << 20  # whatever a header claims, reading it allocates at most this


def examine(data: bytes, path: Path) -> Outcome:
    """Read a hostile file as the server would; any exception but EvidenceError escapes to the caller."""
    path.write_bytes(data)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        ArtifactCache().facts((str(path),))
        refused = ""
    except EvidenceError as exc:
        refused = str(exc.limit)
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return Outcome(refused, seconds, peak)


def check(outcome: Outcome) -> None:
    assert outcome.seconds < TIME_LIMIT_S, f"took {outcome.seconds:.2f} s"
    assert outcome.peak_bytes < MEMORY_LIMIT, f"allocated {outcome.peak_bytes} bytes"


def main(argv: list[str]) -> int:
    """`scripts/fuzz [CASES] [SEED]`: every mutation kind in turn, random fields and values."""
    cases = int(argv[0]) if argv else 10_000
    rng = random.Random(int(argv[1]) if len(argv) > 1 else 1)
    base = base_header()
    counts: dict[tuple[str, str], int] = {}
    slowest = 0.0
    with tempfile.TemporaryDirectory(prefix="memfit-fuzz-") as tmp:
        path = Path(tmp) / "hostile.gguf"
        for i in range(cases):
            mutation = MUTATIONS[i % len(MUTATIONS)]
            pick, value = rng.randrange(10**6), rng.randrange(2**64)
            try:
                outcome = examine(mutate(base, mutation, pick, value), path)
                check(outcome)
            except Exception as exc:  # noqa: BLE001 - report any escape with its case, then fail
                print(f"FAILED case {i}: {mutation} pick={pick} value={value}: {exc!r}")
                return 1
            slowest = max(slowest, outcome.seconds)
            key = (mutation, outcome.refused or "read")
            counts[key] = counts.get(key, 0) + 1
    print("| mutation | outcome | cases |\n|---|---|---|")
    for (mutation, result), n in sorted(counts.items()):
        print(f"| {mutation} | {result} | {n} |")
    print(
        f"\n{cases} hostile files: no exception escaped, slowest {slowest * 1000:.1f} ms,"
        f" under {MEMORY_LIMIT >> 20} MiB each"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
