"""memfit's GGUF header reader agrees with gguf-py's GGUFReader, and refuses what it cannot trust."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import gguf
import numpy as np
import pytest

from memfit.estimator.errors import EvidenceError
from memfit.estimator.gguf_file import SkippedArray
from memfit.estimator.vocabulary import Limit
from memfit.readers.gguf_header import GGUFError, parse_header, read_header
from memfit.service.artifact_cache import ArtifactCache
from tools.gguf_writers import Model, granitehybrid, llama_gqa, qwen3, write_model
from tools.hostile import LLAMA_CPP_REFUSES


def _reference_value(field: gguf.ReaderField) -> object:
    """A GGUFReader field as a Python value: scalar, string, or a list of items."""
    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode()
    if vtype == gguf.GGUFValueType.ARRAY:
        if field.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode() for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    return field.parts[field.data[0]].tolist()[0]


@pytest.mark.parametrize(
    "build",
    [lambda: llama_gqa(gguf.GGMLQuantizationType.Q4_0), qwen3, granitehybrid],
    ids=["llama-q4_0", "qwen3-gpt2-merges", "granitehybrid-per-layer-array"],
)
def test_agrees_with_gguf_reader(tmp_path: Path, build: Callable[[], Model]) -> None:
    path = tmp_path / "m.gguf"
    write_model(build(), path)
    ours = read_header(path)
    ref = gguf.GGUFReader(path)

    ref_fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.metadata) == list(ref_fields)
    for key, field in ref_fields.items():
        expected, got = _reference_value(field), ours.metadata[key]
        if isinstance(got, SkippedArray):
            assert isinstance(expected, list) and got.count == len(expected), key
        elif isinstance(got, tuple):
            assert isinstance(expected, list)
            assert list(got) == pytest.approx(expected) if isinstance(expected[0], float) else list(got) == expected
        elif isinstance(got, float):
            assert got == pytest.approx(expected), key
        else:
            assert got == expected, key

    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for t, r in zip(ours.tensors, ref.tensors, strict=True):
        assert list(t.shape) == [int(x) for x in r.shape], t.name
        assert t.ggml_type == int(r.tensor_type), t.name
        assert ours.data_offset + t.offset == r.data_offset, t.name


def test_long_arrays_are_counted_not_built(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_model(qwen3(), path)
    header = read_header(path)
    tokens = header.metadata["tokenizer.ggml.tokens"]
    assert tokens == SkippedArray(gguf.GGUFValueType.STRING, 8192)
    # 676 merges: counted too (decoding them one by one was most of a small header's read)
    assert header.metadata["tokenizer.ggml.merges"] == SkippedArray(gguf.GGUFValueType.STRING, 676)


def test_short_string_arrays_are_kept() -> None:
    def strings(key: bytes, items: list[bytes]) -> bytes:
        return (
            _s(key)
            + struct.pack("<IIQ", gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING, len(items))
            + b"".join(_s(i) for i in items)
        )

    tags = [b"text-generation", b"llama"]
    names = [b"t%d" % i for i in range(65)]
    header = parse_header(_header([strings(b"general.tags", tags), strings(b"x.names", names)]) + b"\0" * 64)
    assert header.metadata["general.tags"] == ("text-generation", "llama")
    assert header.metadata["x.names"] == SkippedArray(gguf.GGUFValueType.STRING, 65)  # over 64: counted


# --- hostile headers ----------------------------------------------------------------------------


def _s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def _header(
    kvs: list[bytes], tensors: Sequence[bytes] = (), n_kv: int | None = None, n_tensors: int | None = None
) -> bytes:
    head = b"GGUF" + struct.pack(
        "<IQQ", 3, len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    return head + b"".join(kvs) + b"".join(tensors)


def _kv_u32(key: bytes, value: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, value)


def _tensor(name: bytes, dims: list[int], ggml_type: int = 0, offset: int = 0) -> bytes:
    return (
        _s(name)
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


VALID = _header(
    [_kv_u32(b"llama.block_count", 2), _s(b"general.architecture") + struct.pack("<I", 8) + _s(b"llama")],
    [_tensor(b"t", [32, 2])],
)


def test_valid_hand_built_header() -> None:
    header = parse_header(VALID + b"\0" * 512)
    assert header.metadata == {"llama.block_count": 2, "general.architecture": "llama"}
    assert header.tensors[0].shape == (32, 2)


@pytest.mark.parametrize("cut", range(4, len(VALID), 3))
def test_truncated_header_is_refused(cut: int) -> None:
    with pytest.raises(GGUFError):
        parse_header(VALID[:cut])


@pytest.mark.parametrize(
    "data, why",
    [
        (b"GGUX" + VALID[4:], "bad magic"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1"),
        (_header([], n_kv=2**64 - 1), "kv count near 2^64"),
        (_header([], n_tensors=2**63), "tensor count near 2^63"),
        (_header([struct.pack("<Q", 2**64 - 1) + b"k"]), "key length past the end"),
        (_header([_s(b"k") + struct.pack("<I", 8) + struct.pack("<Q", 10**12)]), "string value past the end"),
        (_header([_s(b"k") + struct.pack("<I", 99)]), "unknown value type"),
        (_header([_s(b"k") + struct.pack("<IIQ", 9, 9, 1)]), "array of arrays"),
        (_header([_s(b"k") + struct.pack("<IIQ", 9, 4, 2**62)]), "array count past the end"),
        (_header([_s(b"k") + struct.pack("<IIQ", 9, 8, 2**60)]), "string array count past the end"),
        (_header([_s(b"\xff\xfe") + struct.pack("<II", 4, 1)]), "non-UTF-8 key"),
        (_header([_kv_u32(b"k", 1), _kv_u32(b"k", 2)]), "duplicate key"),
        (_header([], [_tensor(b"t", [1, 1, 1, 1, 1])]), "five dimensions"),
        (_header([], [_tensor(b"t", [])]), "zero dimensions"),
        (_header([], [_tensor(b"t", [32, 0])]), "a dimension of zero"),
        (_header([_kv_u32(b"general.alignment", 24)]), "alignment not a power of two"),
        (_header([_s(b"general.alignment") + struct.pack("<IQ", 10, 32)]), "alignment not a uint32"),
        (_header([_s(b"") + struct.pack("<II", 4, 1)]), "an empty key"),
        (_header([], [_tensor(b"t", [32]), _tensor(b"t", [32], offset=128)]), "duplicate tensor name"),
        (_header([], [_tensor(b"t" * 64, [32])]), "a tensor name of GGML_MAX_NAME bytes"),
    ],
)
def test_hostile_header_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(GGUFError):
        parse_header(data + b"\0" * 64)


def test_big_endian_header(tmp_path: Path) -> None:
    path = tmp_path / "be.gguf"
    w = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_block_count(3)
    w.add_tensor("t", np.zeros((2, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    header = read_header(path)
    assert header.metadata["llama.block_count"] == 3
    assert header.tensors[0].shape == (32, 2)


def _random_strings(order: str, seed: int, count: int = 20_000) -> list[bytes]:
    """Lengths of 0-300 bytes, text with runs of zero bytes in it (false candidates for the vectorised walk)."""
    import random

    rng = random.Random(seed)
    strings = []
    for _ in range(count):
        n = rng.choice([0, 1, 3, 7, 8, 15, 255, 256, 300]) if rng.random() < 0.1 else rng.randrange(1, 12)
        text = bytes(rng.choice([0, 0, 65, 66]) if rng.random() < 0.2 else rng.randrange(32, 127) for _ in range(n))
        strings.append(struct.pack(order + "Q", n) + text)
    return strings


@pytest.mark.parametrize("vectorised", [True, False], ids=["numpy", "struct-only"])
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("seed", range(6))
def test_the_string_skip_walks_exactly_what_a_plain_loop_walks(
    order: str, seed: int, vectorised: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through windows ending mid-array, with the numpy walk and with the plain struct walk alone."""
    from memfit.readers import gguf_header as gh

    strings = _random_strings(order, seed)
    data = b"".join(strings) + b"tail"
    monkeypatch.setattr(gh, "SKIP_WINDOW", 4099)  # many windows, each ending mid-string
    monkeypatch.setattr(gh._Source, "CHUNK", 4099)
    if not vectorised:
        monkeypatch.setattr(gh, "VECTOR_MIN", len(strings) + 1)
        monkeypatch.setattr(gh, "_walk_strings_vectorised", None)  # never called
    cur = gh._Cursor(gh._Source(file=io.BytesIO(data), size=len(data)), order)
    cur.skip_strings(len(strings))
    assert cur.pos == len(data) - 4
    truncated = data[: len(data) - 5]
    short = gh._Cursor(gh._Source(file=io.BytesIO(truncated), size=len(truncated)), order)  # the last runs past
    with pytest.raises(gh.GGUFError, match="past the end"):
        short.skip_strings(len(strings))


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("seed", range(3))
def test_the_vectorised_walk_takes_a_prefix_of_the_plain_walk_from_any_offset(order: str, seed: int) -> None:
    """From every alignment of the 4-byte grid, in a buffer that starts before the array: the strings the numpy walk
    takes are the plain walk's first ones, at least one, and all of them when the buffer holds them."""
    from memfit.readers import gguf_header as gh

    strings = _random_strings(order, seed, 3_000)
    for lead in range(5):
        data = b"\0" * lead + b"".join(strings) + b"tail"
        for base in sorted({0, lead // 2, lead}):  # the buffer from its file offset `base`
            for count in (64, 1_000, len(strings)):
                done, pos = gh._walk_strings_vectorised(data[base:], base, lead, count, order == ">")
                assert 1 <= done <= count
                assert (done, pos) == gh._walk_strings_one_by_one(data[base:], base, lead, done, order == ">")
        done, pos = gh._walk_strings_vectorised(data, 0, lead, len(strings), order == ">")
        assert (done, pos) == (len(strings), len(data) - 4)


@pytest.mark.parametrize(
    "lengths",
    [(1, 256), (0, 3), (300,), (9,)],
    ids=["short-and-long", "empty-and-short", "all-long", "zero-text"],
)
def test_a_hostile_string_array_costs_time_linear_in_its_size(lengths: tuple[int, ...]) -> None:
    """Strings the vectorised walk cannot take, or candidates that keep breaking (text of zero bytes), alternate
    with ones it can: the walk steps over them with struct instead of starting over (an earlier walk took 28 s
    for 20,000 strings alternating 1 and 256 bytes)."""
    import time

    from memfit.readers import gguf_header as gh

    count = 100_000
    data = b"".join(
        struct.pack("<Q", n) + (b"\0" if n == 9 else b"a") * n
        for n in (lengths[i % len(lengths)] for i in range(count))
    )
    cur = gh._Cursor(gh._Source(file=io.BytesIO(data), size=len(data)), "<")
    start = time.process_time()
    cur.skip_strings(count)
    assert cur.pos == len(data)
    assert time.process_time() - start < 5.0  # about 0.1 s here


# --- headers gguf_init and llama_model_loader refuse ----------------------------------------------


WHY_REFUSED = {
    "zero-kv-heads": "'blk.0.attn_k.weight' has shape [256, 64], but the model's hyperparameters make it [256, 0]",
    "context-as-string": "llama.context_length has type STRING",
    "context-as-float32": "llama.context_length has type FLOAT32",
    "context-as-int32": "llama.context_length has type INT32",
    "heads-as-float-array": "llama.attention.head_count has type ARRAY of FLOAT32",
    "shared-offset": "'output_norm.weight' has offset 0, expected",
    "contradicted-width": "'token_embd.weight' has shape [256, 8192], but the model's hyperparameters make it [320,",
}


@pytest.mark.parametrize("name", sorted(LLAMA_CPP_REFUSES))
def test_headers_llama_cpp_refuses_are_unreadable(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.gguf"
    LLAMA_CPP_REFUSES[name](path)
    read_header(path)  # a well-formed GGUF: what llama.cpp refuses is what it says
    with pytest.raises(EvidenceError) as caught:
        ArtifactCache().facts([str(path)])
    assert caught.value.limit == Limit.ARTIFACT_UNREADABLE
    assert WHY_REFUSED[name] in str(caught.value)


def test_the_unchanged_model_and_what_llama_cpp_accepts_are_read(tmp_path: Path) -> None:
    """What llama.cpp loads is not refused: per-layer counts as INT32 or UINT32 arrays (get_arr copies either),
    head_count_kv 0 on the recurrent layers of a hybrid, a 63-byte tensor name."""
    int32_kv = llama_gqa()
    int32_kv.kv["llama.attention.head_count_kv"] = [2] * 4  # an INT32 array
    uint32_ff = llama_gqa()
    uint32_ff.kv["llama.feed_forward_length"] = np.array([768] * 4, dtype=np.uint32)
    long_name = llama_gqa()
    long_name.tensors.append(("x" * 63, (32,), gguf.GGMLQuantizationType.F32))
    cases = {"plain": llama_gqa(), "int32-kv": int32_kv, "uint32-ff": uint32_ff, "hybrid": granitehybrid()}
    cases["long-name"] = long_name
    for name, model in cases.items():
        write_model(model, tmp_path / f"{name}.gguf")
        facts = ArtifactCache().facts([str(tmp_path / f"{name}.gguf")])
        assert facts.layout is not None, name
