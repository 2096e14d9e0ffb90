"""Random llama.cpp settings on the tiny models, measured by llama.cpp and held against memfit.

    python -m tools.truth.sweep OUT [--seed N] [--runs K] [--models M[,M]] [--cache DIR]

Each run draws a tiny model (tools/accuracy.py's writers, no real-scale shape) and settings: the context per
sequence (odd ones too, up to the model's trained context), 1 to 8 sequences, the K and V cache types the contract
names, flash attention, the ubatch (1 to 4096) and a unified cache. The probe loads it for real and decodes a
prompt, as the tiny models' truth files do (a dry run reports only the first reserve, where a load keeps the
largest: MiniMax-01's last one-sequence reserve), the CPU variant forced to haswell. A run llama.cpp accepts must
lie inside memfit's bounds, within max(1%, 8 MiB) (tools/accuracy.py's check, `tight`); memfit must answer one it
refuses or aborts on with no number (unknown, with workloadUnsupported where it refuses the settings); a run whose
context llama.cpp made and whose prompt it then aborted on is listed apart. Every row goes to OUT (JSON lines, as a
truth file's); the failures are printed and make the exit status 1: a failure found joins a truth file as an
explicit example.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memfit import wire
from memfit.estimator.machine import HostMemory
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tools.accuracy import file_bounds, model_writers, settings
from tools.gguf_writers import Model, write_model
from tools.truth import ELEMENT_BYTES, run_id
from tools.truth.matrices import LABEL, TruthFile
from tools.truth.measure import Probe
from tools.truth.regenerate import CACHE_ENV, LIB_SUBDIR, release_dir, row
from tools.truth.variant import backend_dir

RELEASE = "3.21.1"
VARIANT = "haswell"
SEQUENCES = (1, 1, 1, 2, 3, 4, 7, 8)
CONTEXTS = (100, 256, 333, 512, 1000, 1024, 2048, 4096)  # per sequence, up to the model's trained context
UBATCHES = (1, 7, 64, 128, 256, 512, 512, 1024, 2048, 4096)
CACHE_TYPES = (("f16", "f16"), ("f16", "f16"), ("q8_0", "q8_0"), ("f16", "q8_0"), ("q8_0", "f16"), ("f32", "f32"))
FLASH_ATTENTION = ("auto", "on", "off")
TERABYTE = 1 << 40
RESERVED = "sched_reserve: reserve took"  # llama_context's log line once its compute buffers are reserved


def tiny_writers() -> dict[str, Callable[[], Model]]:
    """The writers of tiny models: real-scale shapes (sparse, slow to build graphs for) left out."""
    return {name: w for name, w in model_writers().items() if "shape" not in name}


def trained_context(model: Model) -> int:
    return int(model.kv.get(f"{model.arch}.context_length", 4096))


def draw(rng: random.Random, model: Model) -> dict[str, Any]:
    """One run's settings for `model`, as a truth file's rows name them."""
    n_seq = rng.choice(SEQUENCES)
    per_seq = rng.choice([c for c in CONTEXTS if c <= trained_context(model)] or [trained_context(model)])
    type_k, type_v = rng.choice(CACHE_TYPES)
    return {
        "n_ctx": per_seq * n_seq,
        "n_seq": n_seq,
        "type_k": type_k,
        "type_v": type_v,
        "fa": rng.choice(FLASH_ATTENTION),
        "unified": int(rng.random() < 0.25),
        "mmap": 0,
        "n_ubatch": rng.choice(UBATCHES),
    }


def aborted_decoding(record: dict) -> bool:
    """Whether llama.cpp made the context (its compute buffers reserved) and then aborted on the probe's prompt: a
    failure of the decode, not of the settings (an encoder's prompt longer than its ubatch, a model whose first
    decode asserts), listed apart for a reader to judge."""
    return "error" in record and RESERVED in record.get("stderr_tail", "")


def refusal_problem(service: Any, record: dict) -> str | None:
    """Where memfit's answer to a run llama.cpp refused is a number, or None: a refused setting is unknown with
    workloadUnsupported; a file llama.cpp does not load unknown (whatever evidence memfit names)."""
    s = settings(record)
    request = WireFitVerdictRequest.model_validate(
        {
            "modelId": record["model"],
            "allocatedTokens": s["n_ctx"] // s["n_seq"],
            "streams": s["n_seq"],
            "keyElementBytes": ELEMENT_BYTES[s["type_k"]],
            "valueElementBytes": ELEMENT_BYTES[s["type_v"]],
            "flashAttention": s["fa"],
            "ubatchTokens": s["n_ubatch"],
            "kvUnified": bool(s["unified"]),
        }
    )
    answer = wire.fit_one(service, request)
    result = json.loads(answer.model_dump_json(by_alias=True)) if answer is not None else {}
    unknown = result.get("verdict") == "unknown" and result.get("estimate", {}).get("upperBoundBytes") is None
    if unknown and (record["error"] == "model load failed" or "workloadUnsupported" in result.get("limits", [])):
        return None
    return f"llama.cpp refused ({record['error']}), memfit answered {result.get('verdict')}"


def measure(rng: random.Random, names: list[str], runs: int, probe: Probe, folder: Path, out: Path) -> list[dict]:
    """`runs` draws measured by the probe, each written to `out` as it comes; the models written into `folder`."""
    writers, spec, rows = tiny_writers(), TruthFile({}, None, label=LABEL), []
    with open(out, "w") as f:
        for i in range(runs):
            name = rng.choice(names)
            model, path = writers[name](), folder / f"{name}.gguf"
            if not path.exists():
                write_model(model, path)
            record = row(probe, spec, name, path, path.stat().st_size, draw(rng, model), spec.extra)
            rows.append(record)
            f.write(json.dumps(record) + "\n")
            print(f"{i + 1}/{runs} {run_id(record)}", file=sys.stderr, flush=True)
    return rows


def failures(rows: list[dict], folder: Path, state: Path) -> list[str]:
    """Each run memfit does not hold: a refusal it answers with a number, a load outside its tight bounds."""
    service = build_service(  # a terabyte free: a refusal's verdict is the refusal's, not this host's memory's
        [Root(str(folder), RootKind.PLAIN)],
        state_dir=str(state),
        read_host=lambda: HostMemory(available=TERABYTE, total=TERABYTE),
        read_committed=lambda: 0,
    )
    service.index.refresh()
    found = []
    for record in (r for r in rows if "error" in r and not aborted_decoding(r)):
        why = refusal_problem(service, record)
        if why:
            found.append(f"{run_id(record)}: {why}")
    paths = {r["model"]: folder / f"{r['model']}.gguf" for r in rows}
    for b in file_bounds([r for r in rows if "error" not in r], paths):
        if not b.tight:
            found.append(
                f"{run_id(b.record)}: {b.status}, llama.cpp {b.real}, memfit {b.lower}..{b.upper} (workspace"
                f" {b.workspace[0]}..{b.workspace[1]}, llama.cpp {b.real_workspace}; kv exact {b.kv_exact}, output"
                f" exact {b.output_exact})"
            )
    return found


def report(rows: list[dict], found: list[str]) -> None:
    decoding = [r for r in rows if aborted_decoding(r)]
    refused = sum("error" in r for r in rows) - len(decoding)
    print(f"{len(rows)} runs ({refused} refused by llama.cpp), {len(found)} failures")
    for failure in found:
        print("  " + failure)
    if decoding:
        print(f"{len(decoding)} runs whose context llama.cpp made, then aborted decoding the prompt:")
        for record in decoding:
            asserted = next((line for line in record["stderr_tail"].splitlines() if "GGML_ASSERT" in line), "")
            print(f"  {run_id(record)}: {asserted.rsplit('/', 1)[-1] or record['error']}")


def sweep_args(doc: str | None, argv: list[str]) -> tuple[argparse.Namespace, Path, list[str]]:
    """A sweep's command line (OUT, --seed, --runs, --models, --cache or $MEMFIT_TRUTH_CACHE): the arguments, the
    harness's cache folder and the tiny models drawn from."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the rows measured (JSON lines)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--models", default="", help="draw from these models only (comma-separated)")
    ap.add_argument("--cache", type=Path, default=None, help=f"the harness's cache folder (or ${CACHE_ENV})")
    a = ap.parse_args(argv)
    cache = a.cache or (Path(os.environ[CACHE_ENV]) if os.environ.get(CACHE_ENV) else None)
    if cache is None:
        ap.error(f"name the harness's cache folder: --cache or ${CACHE_ENV}")
    writers = tiny_writers()
    names = [n for n in a.models.split(",") if n] or sorted(writers)
    unknown = [n for n in names if n not in writers]
    if unknown:
        ap.error(f"no tiny writer named {', '.join(unknown)}")
    return a, cache, names


def main(argv: list[str]) -> int:
    a, cache, names = sweep_args(__doc__, argv)
    root = release_dir(cache, RELEASE)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "models"
        folder.mkdir()
        backends = backend_dir(root / LIB_SUBDIR, VARIANT, Path(tmp) / "backends")
        rows = measure(random.Random(a.seed), names, a.runs, Probe(root / "probe", str(backends)), folder, a.out)
        found = failures(rows, folder, Path(tmp) / "state")
    report(rows, found)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
