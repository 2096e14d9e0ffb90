"""Random launches on mock GPUs, every tiny model, held against memfit's placement and compute buffers.

    python -m tools.truth.mock.sweep OUT [--seed N] [--runs K] [--models M[,M]] [--cache DIR]

Each run draws a tiny model (tools/truth/sweep.py's) and a launch: 1 to 3 mock GPUs, -ngl from 0 to all, -ts,
flash attention, --no-kv-offload, the context, 1 to 4 sequences, the ubatch, the cache types, ggml-cuda's
allocation rules (with its fused-MoE dependencies) or the plain ones, and llama.cpp's dry run or a real load. The
mock probe (tools/truth/mock/build.sh) measures it; memfit mirrors it (tools/truth/mock/mirror.py): any difference
in the placement (each layer's device and buffer types, the weights, caches and states per buffer type and per
device) or in a backend's compute buffer, its splits or its input copies is a failure. The failures are printed and
make the exit status 1; every row goes to OUT as tests/data/mock/'s rows are, so a failure joins a mock file as an
explicit run. Runs llama.cpp refused are counted, not compared.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from memfit.estimator.artifact import HeaderSummary, summarize
from memfit.estimator.errors import EvidenceError
from memfit.estimator.placement import PlacementUnsupported
from memfit.readers.gguf_header import read_header
from tools.gguf_writers import Model, write_model
from tools.truth.mock import row_id
from tools.truth.mock.matrix import CPU_VARIANT, LABEL, RELEASE
from tools.truth.mock.mirror import compare, compute, llama_cpp_compute, memfit_compute
from tools.truth.mock.regenerate import measure
from tools.truth.regenerate import LIB_SUBDIR, release_dir
from tools.truth.sweep import CACHE_TYPES, FLASH_ATTENTION, sweep_args, tiny_writers, trained_context
from tools.truth.variant import backend_dir

GPUS = (1, 1, 2, 2, 3)
SEQUENCES = (1, 1, 2, 4)
CONTEXTS = (512, 1000, 2048, 4096)  # per sequence, up to the model's trained context
UBATCHES = (64, 128, 512, 512, 2048)
SPLITS = ("1", "3", "1.5", "0.5")  # each device's share of -ts


def n_layer(model: Model) -> int:
    return int(model.kv[f"{model.arch}.block_count"])


def draw(rng: random.Random, model: Model) -> dict[str, str]:
    """One launch's probe arguments for `model`."""
    gpus, n_seq = rng.choice(GPUS), rng.choice(SEQUENCES)
    per_seq = rng.choice([c for c in CONTEXTS if c <= trained_context(model)] or [trained_context(model)])
    type_k, type_v = rng.choice(CACHE_TYPES)
    args = {
        "n_ctx": str(per_seq * n_seq),
        "n_seq": str(n_seq),
        "n_ubatch": str(rng.choice(UBATCHES)),
        "type_k": type_k,
        "type_v": type_v,
        "fa": rng.choice(FLASH_ATTENTION),
        "mock_gpus": str(gpus),
        "no_alloc": rng.choice(("1", "1", "0")),
    }
    if rng.random() < 0.6:
        args["ngl"] = str(rng.randint(0, n_layer(model) + 1))
    if gpus > 1:
        args["ts"] = ",".join(rng.choice(SPLITS) for _ in range(gpus))
    if rng.random() < 0.2:
        args["kv_offload"] = "0"
    if rng.random() < 0.5:
        args |= {"mock_alloc": "cuda", "mock_moe_dep": "1"}
    return args


def read_summaries(path: Path) -> list[HeaderSummary]:
    """The file as memfit reads it; empty where memfit refuses it (a file llama.cpp refuses too, mostly)."""
    try:
        with open(path, "rb") as f:
            return [summarize(read_header(f))]
    except EvidenceError:
        return []


def problems(row: dict[str, Any], summaries: list[HeaderSummary]) -> list[str]:
    """Where memfit's mirror of a measured run differs from llama.cpp's (tests/test_scheduler.py's checks)."""
    try:
        found = compare(row, summaries)
        if found:
            return found
        buffers = compute(row, summaries)
    except (PlacementUnsupported, EvidenceError, AssertionError) as exc:  # memfit refused, or knows no layout
        return [f"{type(exc).__name__}: {exc}"]
    got, want = memfit_compute(row, buffers), llama_cpp_compute(row)
    out = [f"compute: memfit {got}, llama.cpp {want}"] if got != want else []
    if len(buffers.pp.splits) != row["n_splits_pp"] or buffers.pp.n_copies != row["n_copies"]:
        memfit = (len(buffers.pp.splits), buffers.pp.n_copies)
        out.append(f"splits, copies: memfit {memfit}, llama.cpp {(row['n_splits_pp'], row['n_copies'])}")
    return out


def main(argv: list[str]) -> int:
    a, cache, names = sweep_args(__doc__, argv)
    writers = tiny_writers()
    probe = cache / "mock" / f"probe_mock-{RELEASE}"
    if not probe.exists():
        sys.exit(f"{probe} is missing: run tools/truth/mock/build.sh {cache}")
    rng, failures, refused = random.Random(a.seed), [], 0
    summaries: dict[str, list[HeaderSummary]] = {}
    with tempfile.TemporaryDirectory() as tmp, open(a.out, "w") as out:
        backend = backend_dir(release_dir(cache, RELEASE) / LIB_SUBDIR, CPU_VARIANT, Path(tmp) / CPU_VARIANT)
        for i in range(a.runs):
            name = rng.choice(names)
            model, path = writers[name](), Path(tmp) / f"{name}.gguf"
            if name not in summaries:
                write_model(model, path)
                summaries[name] = read_summaries(path)
            args = draw(rng, model)
            row = {"model": name, "label": f"sweep{a.seed}_{i}", "args": [f"{k}={v}" for k, v in args.items()]}
            row |= {"runtime_label": LABEL} | measure(probe, backend, path, args)
            out.write(json.dumps(row, separators=(",", ":")) + "\n")
            print(f"{i + 1}/{a.runs} {row_id(row)} {' '.join(row['args'])}", file=sys.stderr, flush=True)
            if "error" in row:
                refused += 1
                continue
            found = problems(row, summaries[name]) if summaries[name] else ["memfit does not read the file"]
            failures += [f"{row_id(row)} ({' '.join(row['args'])}): {p}" for p in found]
    print(f"{a.runs} runs ({refused} refused by llama.cpp), {len(failures)} failures")
    for failure in failures:
        print("  " + failure[:600])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
