"""What resolving flash attention `auto` per placement costs a placed answer: `python -m benchmarks.fa_probe`.

llama_context::resolve_fused_ops splits a one-token graph to see where each layer's flash attention lands, and
memfit's scheduler.compute_buffers mirrors it (one more assignment of that graph) whenever flash attention is asked
as `auto` on GPUs. For every recorded mock-GPU run asked with `auto` (tests/data/mock/), it times memfit's compute
buffers for the run's placement as asked, beside the same run asked with flash attention `on` (no probe), and prints
the medians and the median ratio per model and over all the runs (time.perf_counter, best of 3 rounds per run).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from memfit.estimator.errors import EvidenceError
from memfit.estimator.placement import PlacementUnsupported
from tools.truth.mock import args_of, files, rows
from tools.truth.mock.mirror import compute, written_models

ROUNDS = 3


def best_ms(row: dict[str, Any], summaries: list[Any]) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        compute(row, summaries)
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def ratio(pairs: list[tuple[float, float]]) -> float:
    """The median of the runs' auto / on times."""
    return statistics.median(a / o for a, o in pairs)


def asked_on(row: dict[str, Any]) -> dict[str, Any]:
    """The run with flash attention asked `on`: llama_context keeps it on, no probe."""
    args = [a for a in row["args"] if not a.startswith("fa=")] + ["fa=on"]
    return row | {"args": args}


def main() -> int:
    runs = [
        r
        for path in files()
        for r in rows(path.name)
        if "error" not in r and args_of(r).get("fa", "auto") == "auto" and r["mock"].get("n", 0) > 0
    ]
    with tempfile.TemporaryDirectory() as tmp:
        summaries = written_models(Path(tmp), {r["model"] for r in runs})
        by_model: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for row in runs:
            try:
                pair = (best_ms(row, summaries[row["model"]]), best_ms(asked_on(row), summaries[row["model"]]))
            except (PlacementUnsupported, EvidenceError) as exc:  # a run memfit does not place: not timed
                print(f"  skipped {row['model']}: {type(exc).__name__}", file=sys.stderr)
                continue
            by_model[row["model"]].append(pair)
    print(f"{'model (15 dearest probes)':32} {'runs':>5} {'auto ms':>9} {'on ms':>9} {'ratio':>6}")
    worst = sorted(by_model.items(), key=lambda kv: -ratio(kv[1]))
    every = [p for pairs in by_model.values() for p in pairs]
    for model, pairs in [*worst[:15], ("all", every)]:
        auto, on = statistics.median(a for a, _ in pairs), statistics.median(o for _, o in pairs)
        print(f"{model:32} {len(pairs):5} {auto:9.2f} {on:9.2f} {ratio(pairs):6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
