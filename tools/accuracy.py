"""memfit's parts against llama.cpp's measured buffers, run by run.

`scripts/accuracy [TRUTH.jsonl ...] [--models DIR]` reads ground-truth runs in the harness's JSON-lines
format (`shared/groundtruth/measure.py`), computes memfit's numbers for each model under the run's exact
llama.cpp settings, prints one row per run and exits 1 on any kvCache or recurrentState mismatch.
Models come from `--models DIR/<model>.gguf`, else from the writers in tools/ (sparse files, written once).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from memfit.estimator.artifact import weights_on
from memfit.estimator.artifact_cache import ArtifactCache
from memfit.estimator.context import llama_geometry
from memfit.estimator.errors import EvidenceError
from memfit.estimator.kv_cache import GGML_CACHE_TYPES, kv_cache_bytes
from memfit.estimator.recurrent_state import recurrent_state_bytes
from memfit.readers.cpu_features import CpuFamily
from tools.gguf_writers import Model, write_model
from tools.truth import DATA, MEASURED_ON, load


def model_writers() -> dict[str, Callable[[], Model]]:
    """Every model the ground truth names, by name."""
    from tools import gguf_writers
    from tools.families import attention, more, recurrent

    return {
        **gguf_writers.PUBLIC_SET,
        **gguf_writers.SHAPE_SET,
        **attention.FAMILY_SET,
        **recurrent.FAMILY_SET,
        **more.FAMILY_SET,
    }


@dataclass(frozen=True)
class Row:
    record: dict
    status: str  # "ok", "MISMATCH", or why memfit gives no derived number
    kv: int | None = None
    recurrent: int | None = None
    weights: tuple[int, int] | None = None  # (floor, ceiling)

    @property
    def measured_kv(self) -> int | None:
        r = self.record
        return None if "error" in r or _dry_run(r) else r["memory_bytes"] - r["rs_bytes"]

    @property
    def measured_recurrent(self) -> int | None:
        r = self.record
        return None if "error" in r or _dry_run(r) else r["rs_bytes"]


def settings(record: dict) -> dict:
    """A run's llama.cpp settings, with the extra probe options (`swa_full=1 n_rs_seq=2`) folded in."""
    extra = record.get("probe_extra") or ""
    parsed = dict(item.split("=", 1) for item in extra.split() if "=" in item)
    return {**record["settings"], **{k: int(v) if v.isdigit() else v for k, v in parsed.items()}}


def _dry_run(record: dict) -> bool:
    """llama.cpp's no_alloc dry run reports only the memory module's total."""
    return record["kv_bytes"] == 0 and record["rs_bytes"] == 0 and record["memory_bytes"] > 0


def unmodelled(record: dict) -> str | None:
    """Why a run's settings are outside what memfit models, or None."""
    s = settings(record)
    if "error" in record:
        return "llama.cpp refused these settings"
    if s.get("n_rs_seq"):
        return "n_rs_seq (experimental rollback) is not modelled"
    if s["type_k"] not in GGML_CACHE_TYPES or s["type_v"] not in GGML_CACHE_TYPES:
        return "cache type not modelled"
    return None


def compare(record: dict, path: Path, cache: ArtifactCache, cpu: CpuFamily = MEASURED_ON) -> Row:
    """memfit's numbers for one run, its weights as a host of `cpu` bounds them (by default the CPU the
    ground truth was measured on)."""
    why = unmodelled(record)
    if why:
        return Row(record, why)
    try:
        facts = cache.facts((str(path),))
    except EvidenceError as exc:
        return Row(record, f"unreadable: {exc}")
    floor, slack, _ = weights_on(facts, cpu)
    weights = (floor, floor + slack)
    if facts.layout is None:
        return Row(record, f"not derived ({facts.layout_error})", weights=weights)
    s = settings(record)
    geometry = llama_geometry(
        s["n_ctx"], s["n_seq"], record["n_ubatch"], unified=bool(s.get("unified")), swa_full=bool(s.get("swa_full"))
    )
    k, v = kv_cache_bytes(
        facts.layout,
        geometry,
        GGML_CACHE_TYPES[s["type_k"]],
        GGML_CACHE_TYPES[s["type_v"]],
        flash_attention=bool(record["flash_attn"]),
    )
    r, state = recurrent_state_bytes(facts.layout.recurrent, geometry)
    row = Row(record, "ok", k + v, r + state, weights)
    if _dry_run(record):
        matches = k + v + r + state == record["memory_bytes"]
    else:
        matches = (k + v, r + state) == (row.measured_kv, row.measured_recurrent)
    return row if matches else Row(record, "MISMATCH", k + v, r + state, weights)


def compare_all(records: Iterable[dict], models: dict[str, Path]) -> list[Row]:
    cache = ArtifactCache()
    return [compare(r, models[r["model"]], cache) for r in records]


def write_models(names: set[str], directory: Path) -> dict[str, Path]:
    writers = model_writers()
    paths = {}
    for name in sorted(names):
        paths[name] = directory / f"{name}.gguf"
        write_model(writers[name](), paths[name])
    return paths


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def print_table(rows: list[Row]) -> None:
    print(
        "| model | n_ctx | seq | K/V | fa | unified | kvCache memfit | llama.cpp | recurrentState memfit | llama.cpp "
        "| weights floor..ceiling | llama.cpp | status |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        r, s = row.record, settings(row.record)
        weights = "-" if row.weights is None else f"{_mib(row.weights[0])}..{_mib(row.weights[1])}"
        measured_w = _mib(r.get("weights_bytes")) if not s.get("mmap") else "(mmap)"
        print(
            f"| {r['model']} | {s['n_ctx']} | {s['n_seq']} | {s['type_k']}/{s['type_v']} | {s['fa']} | "
            f"{s.get('unified', 0)} | {_mib(row.kv)} | {_mib(row.measured_kv)} | {_mib(row.recurrent)} | "
            f"{_mib(row.measured_recurrent)} | {weights} | {measured_w} | {row.status} |"
        )


def print_summary(rows: list[Row]) -> None:
    """One line per model: how many runs match, and its largest f16 single-stream run side by side."""
    print(
        "| model | architecture | runs matching | kvCache memfit / llama.cpp (MiB) | recurrentState memfit / "
        "llama.cpp (MiB) | at n_ctx | weights floor..ceiling / llama.cpp (MiB) |"
    )
    print("|---|---|---|---|---|---|---|")
    by_model: dict[str, list[Row]] = {}
    for row in rows:
        by_model.setdefault(row.record["model"], []).append(row)
    for model, group in by_model.items():
        counted = [r for r in group if r.status in ("ok", "MISMATCH")]
        if not counted:
            reason = next((r.status for r in group if r.status.startswith("not derived")), group[0].status)
            print(f"| {model} | {_arch(group[0].record)} | {reason} | | | | |")
            continue
        plain = [
            r
            for r in counted
            if settings(r.record)["type_k"] == "f16"
            and settings(r.record)["n_seq"] == 1
            and not settings(r.record).get("unified")
            and r.measured_kv is not None
        ] or counted
        big = max(plain, key=lambda r: r.record["settings"]["n_ctx"])
        ok = sum(r.status == "ok" for r in counted)
        weights = f"{_mib(big.weights[0])}..{_mib(big.weights[1])} / {_mib(big.record.get('weights_bytes'))}"
        if big.measured_kv is None:  # a dry run measures only the total of both
            memory = f"{_mib(big.kv + big.recurrent)} / {_mib(big.record['memory_bytes'])} (both, dry run) | |"
        else:
            memory = (
                f"{_mib(big.kv)} / {_mib(big.measured_kv)} | {_mib(big.recurrent)} / {_mib(big.measured_recurrent)} |"
            )
        print(
            f"| {model} | {_arch(big.record)} | {ok}/{len(counted)} | {memory} {big.record['settings']['n_ctx']} "
            f"| {weights} |"
        )


def _arch(record: dict) -> str:
    return record.get("model_desc", "?").split()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/accuracy", description=__doc__.splitlines()[0])
    parser.add_argument("truth", nargs="*", type=Path, help="ground-truth JSON lines (default: tests/data/*.jsonl)")
    parser.add_argument("--summary", action="store_true", help="one line per model instead of one per run")
    parser.add_argument(
        "--models",
        type=Path,
        action="append",
        default=[],
        help="a directory of <model>.gguf, repeatable (models not found are written from tools/)",
    )
    args = parser.parse_args(argv)
    records = [r for path in (args.truth or sorted(DATA.glob("results_*.jsonl"))) for r in load(path)]
    with tempfile.TemporaryDirectory(prefix="memfit-accuracy-") as tmp:
        names = {r["model"] for r in records}
        models = {n: d / f"{n}.gguf" for d in reversed(args.models) for n in names if (d / f"{n}.gguf").exists()}
        if names - set(models):
            models.update(write_models(names - set(models), Path(tmp)))
        rows = compare_all(records, models)
    (print_summary if args.summary else print_table)(rows)
    counted = [r for r in rows if r.status in ("ok", "MISMATCH")]
    mismatches = [r for r in rows if r.status == "MISMATCH"]
    matched, unmodelled = len(counted) - len(mismatches), len(rows) - len(counted)
    print(f"\nruns: {matched} match, {len(mismatches)} mismatch, {unmodelled} not modelled")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
