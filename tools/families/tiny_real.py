"""Tiny random-weight models, one or more per architecture family whose compute graph differs, measured in real
llama.cpp with real allocation and a decode (tests/data/results_tiny_real.jsonl).

Each `<name>-rw` model is the family model `<name>` (same header, byte for byte) with its data region filled from
a seeded generator instead of left a sparse hole (`Model.seed`; norms 1, everything else N(0, 0.02)), so the
decode llama.cpp runs after allocating works on finite numbers. memfit reads only the header, so its answers
for `<name>-rw` and `<name>` are the same.

`python -m tools.truth.regenerate OUT --only results_tiny_real.jsonl` writes the models and measures them with
the truth harness (tools/truth/); the tests need neither.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable

from tools.families import attention, recurrent
from tools.gguf_writers import PUBLIC_SET, Model

# family -> the models measured for it (names of the sparse writers in tools/)
FAMILIES: dict[str, tuple[str, ...]] = {
    "embedding": ("bert-embd", "nomic-bert-embd"),
    "moe": ("qwen3moe-f16", "gptoss-swa-moe"),
    "mla": ("deepseek2-mla",),
    "hybrid": ("granitehybrid-f16", "lfm2-f16", "qwen3next"),
    "recurrent": ("mamba2-f16", "rwkv6", "rwkv7"),
    "per-layer-heads": ("openelm-arr", "deci-arr"),
}
_BASE: dict[str, Callable[[], Model]] = {**PUBLIC_SET, **attention.FAMILY_SET, **recurrent.FAMILY_SET}


def _random_weights(name: str) -> Callable[[], Model]:
    def build() -> Model:
        return dataclasses.replace(_BASE[name](), seed=zlib.crc32(name.encode()))

    return build


FAMILY_SET: dict[str, Callable[[], Model]] = {
    f"{name}-rw": _random_weights(name) for names in FAMILIES.values() for name in names
}

# The settings measured per model: llama.cpp's defaults at 4096 tokens, four streams with a q8_0 cache,
# flash attention off, and a 2048-token ubatch (weights loaded, not mmapped; a non-unified cache).
SETTINGS: list[tuple[str, dict]] = [
    ("default", dict(n_ctx=4096, n_seq=1, type_k="f16", type_v="f16", fa="auto", unified=0, mmap=0)),
    ("seq4-q8_0", dict(n_ctx=4096, n_seq=4, type_k="q8_0", type_v="q8_0", fa="auto", unified=0, mmap=0)),
    ("fa_off", dict(n_ctx=4096, n_seq=1, type_k="f16", type_v="f16", fa="off", unified=0, mmap=0)),
    ("ubatch2048", dict(n_ctx=4096, n_seq=1, type_k="f16", type_v="f16", fa="auto", unified=0, mmap=0, n_ubatch=2048)),
]
DECODE = 8

LABEL = "node-llama-cpp 3.21.1 prebuilt libllama (llama.cpp v0.4.0), REAL allocation, random weights"
CPU_VARIANT = "icelake"
_FAMILY_OF = {f"{n}-rw": family for family, names in FAMILIES.items() for n in names}
_KIND_OF = {json.dumps(s, sort_keys=True): kind for kind, s in SETTINGS}


def tags(model: str, settings: dict) -> dict[str, str]:
    """A row's own fields: the model's family, the run's kind, the CPU backend it was measured with."""
    return {
        "family": _FAMILY_OF[model],
        "run_kind": _KIND_OF[json.dumps(settings, sort_keys=True)],
        "cpu_backend": f"libggml-cpu-{CPU_VARIANT}.so",
    }
