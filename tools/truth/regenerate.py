"""Regenerate tests/data's truth files: write each file's models, run the probe on each settings, one row per run.

    python -m tools.truth.regenerate OUT [--only NAME[,NAME]] [--models M[,M]] [--cache DIR] [--release VERSION]
                                         [--cpu-variant V] [--probe P]

OUT is a folder (tests/data itself to replace the recorded files); the probe is the one tools/truth/build.sh built
in the cache folder (--cache, or $MEMFIT_TRUTH_CACHE) for the release (default: the one the files were measured
with). Each file's CPU variant is forced by a backend folder holding only it (tools/truth/variant.py). After
writing a file it prints how its rows differ from the recorded ones (--models measures only those models' runs and
keeps every other model's rows as recorded, so a new writer's rows join a file without measuring the rest): every
field but the process's RSS and the failures' log tails (which vary from run to run and host to host) is expected
to be equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

from tools.gguf_writers import write_model
from tools.truth import DATA, load, run_id
from tools.truth.matrices import RELEASE, TRUTH_FILES, Settings, TruthFile
from tools.truth.measure import Probe, run, summarize, summarize_log
from tools.truth.variant import backend_dir

CACHE_ENV = "MEMFIT_TRUTH_CACHE"
LIB_SUBDIR = Path("node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")
# Row fields that depend on the process and host, not on llama.cpp's allocation.
VOLATILE = ("rss_", "peak_rss_growth", "stderr_tail")
RELEASES = Path(__file__).resolve().parent / "releases.json"


def release_dir(cache: Path, release: str) -> Path:
    """Where tools/truth/build.sh installs a release and builds its probe."""
    return cache / f"node-llama-cpp-{release}"


def runs_of(spec: TruthFile, name: str, model: str) -> list[tuple[Settings, str]]:
    """The runs of `model` in truth file `name`, each its settings and the probe's extra arguments: the file's
    matrix, or the recorded rows' own."""
    if spec.settings is not None:
        return [(s, spec.extra) for s in spec.settings]
    return [(r["settings"], r.get("probe_extra") or "") for r in load(DATA / name) if r["model"] == model]


def models_of(spec: TruthFile, name: str) -> list[str]:
    if spec.settings is not None:
        return list(spec.models)
    return list(dict.fromkeys(r["model"] for r in load(DATA / name)))


def row(
    probe: Probe, spec: TruthFile, model: str, path: Path, size: int, settings: Settings, extra: str
) -> dict[str, Any]:
    raw, log = run(probe, path, settings, extra)
    head = {
        "model": model,
        "file_bytes": size,
        "runtime": "probe",
        "runtime_label": spec.label,
        "settings": settings,
        "probe_extra": extra,
    }
    if spec.tags:
        head |= spec.tags(model, settings)
    return head | summarize(raw) | summarize_log(log)


def regenerate(
    name: str, spec: TruthFile, probe: Probe, out: Path, only: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """Measure truth file `name` into `out` (only the models in `only`, when given, the others' rows kept as
    recorded); the rows measured."""
    rows = []
    kept = [r for r in load(DATA / name) if r["model"] not in only] if only and (DATA / name).exists() else []
    with tempfile.TemporaryDirectory() as tmp, open(out, "w") as f:
        for r in kept:
            f.write(json.dumps(r) + "\n")
        for model in models_of(spec, name):
            if only and model not in only:
                continue
            path = Path(tmp) / f"{model}.gguf"
            size = write_model(spec.models[model](), path)
            for settings, extra in runs_of(spec, name, model):
                rows.append(row(probe, spec, model, path, size, settings, extra))
                f.write(json.dumps(rows[-1]) + "\n")
                f.flush()
            os.remove(path)
    return rows


def stable(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if not k.startswith(VOLATILE)}


def differences(recorded: list[dict[str, Any]], measured: list[dict[str, Any]]) -> list[str]:
    """Where two files' rows differ, run by run (matched by `run_id`), ignoring the volatile fields and the fields
    only the measured rows have (the probe added some after older rows were recorded)."""
    old = {run_id(r): stable(r) for r in recorded}
    new = {run_id(r): stable(r) for r in measured}
    out = [f"{rid}: not measured" for rid in old.keys() - new.keys()]
    out += [f"{rid}: not recorded" for rid in new.keys() - old.keys()]
    for rid in sorted(old.keys() & new.keys()):
        a, b = old[rid], new[rid]
        out += [f"{rid}: {k} not measured" for k in a if k not in b]
        out += [f"{rid}: {k} {a[k]!r} != {b[k]!r}" for k in a if k in b and a[k] != b[k]]
    return out


def report(name: str, runs: int, diff: list[str]) -> None:
    """What regenerating a file measured: its runs, and the first of their differences from the recorded rows."""
    print(f"{name}: {runs} runs, {len(diff)} differences from the recorded rows", flush=True)
    for line in diff[:20]:
        print(f"  {line}")


def relabelled(spec: TruthFile, release: str) -> TruthFile:
    """`spec` with its label naming `release` and the llama.cpp tag it bundles (releases.json) instead of RELEASE's."""
    pinned = json.loads(RELEASES.read_text())
    label = spec.label.replace(f"node-llama-cpp {RELEASE} ", f"node-llama-cpp {release} ")
    tags = pinned[RELEASE]["llama_cpp_tag"], pinned[release]["llama_cpp_tag"]
    return dataclasses.replace(spec, label=label.replace(*tags))


def parser(doc: str | None, known: str) -> argparse.ArgumentParser:
    """The arguments of a regeneration: the output folder, the files (of `known`), the models, the cache."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder to write the files into")
    ap.add_argument("--only", default="", help=f"comma-separated file names (default: all of {known})")
    ap.add_argument("--models", default="", help="comma-separated models: measure only their runs")
    ap.add_argument("--cache", type=Path, default=os.environ.get(CACHE_ENV), help=f"build.sh's folder (${CACHE_ENV})")
    return ap


def chosen(ap: argparse.ArgumentParser, a: argparse.Namespace, known: Collection[str]) -> list[str]:
    """The files --only names (all of `known` by default); an argument error for an unknown one or no cache."""
    if a.cache is None:
        ap.error(f"--cache or ${CACHE_ENV} is required")
    names = a.only.split(",") if a.only else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"no such file {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def main(argv: list[str]) -> int:
    ap = parser(__doc__, "TRUTH_FILES")
    ap.add_argument("--release", default=RELEASE, help="node-llama-cpp release (tools/truth/releases.json)")
    ap.add_argument("--cpu-variant", default="", help="force this CPU variant instead of each file's own")
    ap.add_argument("--probe", type=Path, help="the probe to run (default: the one build.sh built in the cache)")
    a = ap.parse_args(argv)
    names = chosen(ap, a, TRUTH_FILES)
    if a.release not in json.loads(RELEASES.read_text()):
        ap.error(f"release {a.release} is not pinned in {RELEASES.name}")
    root = release_dir(a.cache, a.release)
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as backends:
        for name in names:
            spec = relabelled(TRUTH_FILES[name], a.release)
            variant = a.cpu_variant or spec.cpu_variant
            bdir = backend_dir(root / LIB_SUBDIR, variant, Path(backends) / variant)
            probe = Probe(a.probe or root / "probe", str(bdir), spec.decode)
            only = frozenset(filter(None, a.models.split(",")))
            recorded = load(DATA / name) if (DATA / name).exists() else []  # a new file records nothing yet
            recorded = [r for r in recorded if not only or r["model"] in only]
            measured = regenerate(name, spec, probe, a.out / name, only)
            report(name, len(measured), differences(recorded, measured))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
