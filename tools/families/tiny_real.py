"""Tiny random-weight models, one or more per architecture family whose compute graph differs, measured in real
llama.cpp with real allocation and a decode (tests/data/results_tiny_real.jsonl).

Each `<name>-rw` model is the family model `<name>` (same header, byte for byte) with its data region filled from
a seeded generator instead of left a sparse hole (`Model.seed`; norms 1, everything else N(0, 0.02)), so the
decode llama.cpp runs after allocating works on finite numbers. memfit reads only the header, so its answers
for `<name>-rw` and `<name>` are the same.

`python -m tools.families.tiny_real --out FILE` writes the models and measures them with the ground-truth
harness (`shared/groundtruth/measure.py` and its compiled probe, paths below); the tests need neither.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import types
import zlib
from collections.abc import Callable

from tools.families import attention, recurrent
from tools.gguf_writers import PUBLIC_SET, Model, write_model

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

GT = "/work/gt-work"
HARNESS = "/work/shared/groundtruth"
LABEL = "node-llama-cpp 3.21.1 prebuilt libllama (llama.cpp v0.4.0), REAL allocation, random weights"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--probe", default=f"{GT}/mem_probe_nlc")
    ap.add_argument("--harness", default=HARNESS, help="folder of measure.py")
    ap.add_argument("--backend-dir", default="/work/scratch/gt12/be_icelake", help="folder of libggml-cpu-*.so")
    a = ap.parse_args(argv)
    sys.path.insert(0, a.harness)
    import measure  # type: ignore[import-not-found]

    variant = ",".join(sorted(os.listdir(a.backend_dir)))
    probe = types.SimpleNamespace(probe=a.probe, backend_dir=a.backend_dir, decode=DECODE, extra="")
    names = [n for n in FAMILY_SET if not a.only or n in a.only.split(",")]
    family = {f"{n}-rw": fam for fam, ns in FAMILIES.items() for n in ns}
    with tempfile.TemporaryDirectory() as tmp, open(a.out, "a") as out:
        for name in names:
            path = os.path.join(tmp, f"{name}.gguf")
            size = write_model(FAMILY_SET[name](), path)
            for kind, s in SETTINGS:
                raw, log = measure.run_probe(probe, path, s)
                rec = {
                    "model": name,
                    "family": family[name],
                    "run_kind": kind,
                    "file_bytes": size,
                    "runtime": "probe",
                    "runtime_label": LABEL,
                    "settings": s,
                    "probe_extra": "",
                    "cpu_backend": variant,
                }
                rec.update(measure.summarize_probe(raw))
                rec.update(measure.summarize_log(log))
                if "log_kv_caches" in log:
                    rec["log_kv_caches"] = log["log_kv_caches"]
                out.write(json.dumps(rec) + "\n")
                out.flush()
                status = rec.get("error") or (
                    f"compute={rec['compute_bytes'] / 2**20:.2f} MiB decode_rc={rec.get('decode_rc')}"
                )
                print(f"{name} {kind}: {status}", flush=True)
            os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
