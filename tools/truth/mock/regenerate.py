"""Regenerate tests/data/mock/: write each file's models, run the mock-GPU probe on each of their runs, one row each.

    python -m tools.truth.mock.regenerate OUT [--only NAME[,NAME]] [--models M[,M]] [--cache DIR]

OUT is a folder (tests/data/mock itself to replace the recorded files); the probe is the one
tools/truth/mock/build.sh built into the cache folder (--cache, or $MEMFIT_TRUTH_CACHE: CACHE/mock/probe_mock-3.21.1,
its libraries under CACHE/node-llama-cpp-3.21.1). The CPU backend is the haswell variant alone
(tools/truth/variant.py), so the CPU-side numbers do not depend on the host. --models measures only those models'
runs and keeps every other model's rows as recorded. After writing a file it prints how its rows differ from the
recorded ones: every field but the fitter's timing is expected to be equal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.gguf_writers import write_model
from tools.truth.mock import MOCK_DATA, row_id
from tools.truth.mock.matrix import CPU_VARIANT, LABEL, MOCK_FILES, RELEASE, MockFile
from tools.truth.regenerate import LIB_SUBDIR, chosen, parser, release_dir, report
from tools.truth.variant import backend_dir

TIMEOUT_S = 600
# a fitter's run (fit=1) ends in seconds; llama.cpp's fitter can loop forever (common_params_fit_impl's step 4: a
# conversion step that converts no layer and fits repeats itself), which the row records as an error
FIT_TIMEOUT_S = 60
# Probe output that depends on the process or the host, not on llama.cpp's placement: left out of the rows.
DROPPED = ("system_info", "llama_cpp", "rss_start", "rss_after_backend", "rss_after_model", "rss_after_ctx")
VOLATILE = ("seconds",)  # inside `fit`: the fitter's wall time


def measure(probe: Path, backend: Path, model: Path, args: dict[str, str]) -> dict[str, Any]:
    """The probe's JSON for one run, without the host's fields (an `error` key when it failed)."""
    cmd = [str(probe), str(model), *(f"{k}={v}" for k, v in args.items()), f"backend_dir={backend}", "quiet=1"]
    timeout = FIT_TIMEOUT_S if args.get("fit") == "1" else TIMEOUT_S
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout: no result in {timeout} s"}
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    out: dict[str, Any]
    try:
        out = json.loads(lines[-1]) if lines else {"error": f"no output (exit {p.returncode})"}
    except json.JSONDecodeError:
        out = {"error": "bad json"}
    for key in DROPPED:
        out.pop(key, None)
    if isinstance(out.get("fit"), dict):
        out["fit"] = {k: v for k, v in out["fit"].items() if k not in VOLATILE}
    return out


def regenerate(spec: MockFile, probe: Path, backend: Path, out: Path, only: frozenset[str] = frozenset()) -> list[dict]:
    """Measure one file into `out` (only the models in `only`, when given, the others' rows kept as recorded)."""
    recorded = MOCK_DATA / out.name
    kept = [json.loads(x) for x in recorded.read_text().splitlines()] if only and recorded.exists() else []
    kept = [r for r in kept if r["model"] not in only]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp, open(out, "w") as f:
        for r in kept:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
        for name, writer in spec.models.items():
            if only and name not in only:
                continue
            model = writer()
            path = Path(tmp) / f"{name}.gguf"
            write_model(model, path)
            runs = spec.runs(model)
            done: dict[str, dict] = {}
            for label, args in runs:
                done[label] = measure(probe, backend, path, args)
                rows.append(_row(name, label, args, done[label]))
                f.write(json.dumps(rows[-1], separators=(",", ":")) + "\n")
                f.flush()
            full = done["g1_all"].get("per_device", {}).get("MOCK0", {}).get("total") if spec.fits else None
            for label, args in (
                spec.fits(full, any("_exps." in t[0] for t in model.tensors)) if spec.fits and full else []
            ):
                args = spec.base | args
                rows.append(_row(name, label, args, measure(probe, backend, path, args)))
                f.write(json.dumps(rows[-1], separators=(",", ":")) + "\n")
                f.flush()
            os.remove(path)
    return rows


def _row(model: str, label: str, args: dict[str, str], result: dict[str, Any]) -> dict[str, Any]:
    head = {"model": model, "label": label, "args": [f"{k}={v}" for k, v in args.items()], "runtime_label": LABEL}
    return head | result


def differences(recorded: list[dict], measured: list[dict]) -> list[str]:
    """Where two files' rows differ, run by run (model and label)."""
    old, new = {row_id(r): r for r in recorded}, {row_id(r): r for r in measured}
    out = [f"{k}: not measured" for k in old.keys() - new.keys()] + [
        f"{k}: not recorded" for k in new.keys() - old.keys()
    ]
    for k in sorted(old.keys() & new.keys()):
        out += [f"{k}: {f} {old[k].get(f)!r} != {new[k].get(f)!r}" for f in old[k] if old[k].get(f) != new[k].get(f)]
    return out


def main(argv: list[str]) -> int:
    ap = parser(__doc__, "MOCK_FILES")
    a = ap.parse_args(argv)
    names = chosen(ap, a, MOCK_FILES)
    probe = a.cache / "mock" / f"probe_mock-{RELEASE}"
    if not probe.exists():
        ap.error(f"{probe} is missing: run tools/truth/mock/build.sh {a.cache}")
    only = frozenset(filter(None, a.models.split(",")))
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as backends:
        backend = backend_dir(release_dir(a.cache, RELEASE) / LIB_SUBDIR, CPU_VARIANT, Path(backends) / CPU_VARIANT)
        for name in names:
            recorded_path = MOCK_DATA / name
            recorded = [json.loads(x) for x in recorded_path.read_text().splitlines()] if recorded_path.exists() else []
            measured = regenerate(MOCK_FILES[name], probe, backend, a.out / name, only)
            recorded = [r for r in recorded if not only or r["model"] in only]
            report(name, len(measured), differences(recorded, measured))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
