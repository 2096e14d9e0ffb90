"""llama.cpp's quantization recipe against llama.cpp's own quantizer, for every catalog shape and file type.

tests/data/quantized_catalog.jsonl: per (catalog entry, file type), the type of every tensor in the output of
`llama_model_quantize` (node-llama-cpp 3.21.1's libllama, llama.cpp v0.4.0) run on a sparse F16 GGUF of the
entry's tensor list, and the output's tensor bytes padded to 32. `how`: "quantized" (the output file read back)
or "dry_run" (llama_model_quantize_params.dry_run: the same type choice, no data written). Block tensors are
stored as run-length strings of one type per layer ("-": no such tensor in that layer).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from memfit.estimator.arch_rules import RULES
from memfit.estimator.artifact import padded, tensor_bytes
from memfit.estimator.catalog import Catalog, entry_tensors, recipe_facts
from memfit.estimator.cpu_variant import BY_NAME
from memfit.estimator.quant_recipe import fallback, tensor_types, use_more_bits
from memfit.estimator.tensor_list import Tensor
from memfit.readers.catalog_file import load_catalog_file

RECORDS = [json.loads(line) for line in (Path(__file__).parent / "data" / "quantized_catalog.jsonl").open()]
CATALOG = Catalog(load_catalog_file())
ENTRIES = {e.model_id: e for e in CATALOG.entries}
BLK = re.compile(r"blk\.(\d+)\.(.+)")
PLAIN_VARIANT = (BY_NAME["x64"],)


def _encode(types: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    top: dict[str, str] = {}
    blocks: dict[str, dict[int, str]] = defaultdict(dict)
    for name, t in types.items():
        m = BLK.match(name)
        if m:
            blocks[m.group(2)][int(m.group(1))] = t
        else:
            top[name] = t
    n = 1 + max((max(v) for v in blocks.values()), default=-1)
    encoded = {}
    for suffix, by_layer in blocks.items():
        seq = [by_layer.get(i, "-") for i in range(n)]
        runs, i = [], 0
        while i < n:
            j = i
            while j < n and seq[j] == seq[i]:
                j += 1
            runs.append(seq[i] + (f"*{j - i}" if j - i > 1 else ""))
            i = j
        encoded[suffix] = " ".join(runs)
    return top, encoded


def test_the_record_covers_every_catalog_entry_and_file_type() -> None:
    assert {r["model"] for r in RECORDS} == set(ENTRIES)
    assert len({r["ftype"] for r in RECORDS}) == 20 and len(RECORDS) == 20 * len(ENTRIES)
    quantized = {r["model"] for r in RECORDS if r["how"] == "quantized"}
    assert len(quantized) >= 5  # real outputs read back: the smallest shapes (bert, llama, lfm2)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"{r['model']}:{r['ftype']}")
def test_recipe_gives_every_tensor_the_quantizers_type(record: dict) -> None:
    entry = ENTRIES[record["model"]]
    tensors = entry_tensors(entry)
    assert tensors is not None and len(tensors) == record["tensors"]
    types = tensor_types(tensors, record["ftype"], recipe_facts(entry))
    top, blocks = _encode({name: t.name for name, t in types.items()})
    assert top == record["top"]
    assert blocks == record["blocks"]
    assert sum(padded(tensor_bytes(t.ne, types[t.name])) for t in tensors) == record["bytes"]


@pytest.mark.parametrize(
    "record",
    [
        r
        for r in RECORDS
        if r["ftype"] in ENTRIES[r["model"]].quants
        or (r["ftype"] == "MXFP4_MOE" and "MXFP4" in ENTRIES[r["model"]].quants)
    ],
    ids=lambda r: f"{r['model']}:{r['ftype']}",
)
def test_catalog_weights_are_the_quantized_bytes(record: dict) -> None:
    entry = ENTRIES[record["model"]]
    quant = record["ftype"] if record["ftype"] in entry.quants else "MXFP4"
    subject = CATALOG.subject(f"{entry.model_id}:{quant}", PLAIN_VARIANT)
    assert subject is not None
    weights = subject.weights  # no extra buffer type
    expected = record["bytes"]
    if RULES[entry.architecture].tied_embedding_twice:  # its loader allocates the tied token embedding twice
        embd = next(t for t in entry_tensors(entry) or [] if t.name == "token_embd.weight")
        expected += padded(tensor_bytes(embd.ne, QT[record["top"]["token_embd.weight"]]))
    assert weights.basis == "derivedLayout" and weights.bytes == expected
    if not entry.tied_embeddings:
        assert weights.slack == 0  # the recipe decides every type: floor = ceiling


def test_use_more_bits_and_fallbacks() -> None:
    assert [il for il in range(32) if use_more_bits(il, 32)] == [
        0,
        1,
        2,
        3,
        6,
        9,
        12,
        15,
        18,
        21,
        24,
        27,
        28,
        29,
        30,
        31,
    ]
    assert fallback(896, QT.Q4_K) == QT.Q5_0 and fallback(896, QT.Q6_K) == QT.Q8_0
    assert fallback(2880, QT.IQ4_XS) == QT.IQ4_NL and fallback(100, QT.Q8_0) == QT.F16


def test_an_importance_matrix_dependent_type_is_a_range() -> None:
    entry = ENTRIES["bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"]
    tensors = entry_tensors(entry)
    assert tensors is not None
    plain = tensor_types(tensors, "Q4_0", recipe_facts(entry))
    imatrix = tensor_types(tensors, "Q4_0", recipe_facts(entry), imatrix=True)
    changed = sorted(n for n in plain if plain[n] != imatrix[n])
    assert changed == [f"blk.{il}.ffn_down.weight" for il in range(4)]
    assert isinstance(tensors[0], Tensor)
