"""A fit after an observation with a large measurement history: `python -m benchmarks.history [ROWS]`.

Writes ROWS (500,000 by default) observations of other models into a fresh history database in one transaction
(as an older memfit, which kept every row, could have left them), then times: a fit before any observation of
its model, an observation written by another writer (no caps applied), the fit after it, an observation
recorded through memfit (which trims the history to its caps), the fit after that, and one more recorded at
the cap. Prints each time and the process's peak RSS.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from memfit.estimator.fit_types import FitRequest, ObservationRow
from memfit.readers.history_db import COLUMNS
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tools.gguf_writers import PUBLIC_SET, write_model

MODEL = "llama-gqa-f16"


T = TypeVar("T")


def timed(what: str, work: Callable[[], T]) -> T:
    start = time.perf_counter()
    result = work()
    print(f"{what:58s} {1000 * (time.perf_counter() - start):10.2f} ms")
    return result


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 500_000
    with tempfile.TemporaryDirectory() as directory:
        write_model(PUBLIC_SET[MODEL](), os.path.join(directory, f"{MODEL}.gguf"))
        service = build_service([Root(directory, RootKind.PLAIN)], state_dir=directory)
        service.index.refresh()
        db = service.history.db
        assert db is not None  # a state_dir was given
        insert = f"INSERT INTO observations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
        rows = (
            (f"m{i % 7}", "r", "Q4_K_M", i, 4096, 1, 2, 2, "fullGpu", i, None, None, i, None, "bench", "2026-11-01", "")
            for i in range(count)
        )
        with db.connection() as connection:
            connection.execute("BEGIN")
            timed(f"write {count} rows of other models", lambda: connection.executemany(insert, rows))
            connection.execute("COMMIT")
        fit = timed("fit, no observation of its model", lambda: service.fit_one(FitRequest(MODEL)))
        assert fit is not None
        workspace = next(p for p in fit.parts if p.component == "workspace").bytes
        assert workspace is not None
        subject = service.subject(MODEL)
        assert subject is not None
        row = ObservationRow(
            MODEL, subject.revision, subject.quant, subject.artifact_bytes, 4096, 1, 2, 2, "fullGpu",
            None, None, None, workspace + 1000, None, "bench", "2026-11-01T00:00:00+00:00",
        )  # fmt: skip
        with db.connection() as connection:
            timed(
                "an observation by another writer (no caps)",
                lambda: connection.execute(insert, [getattr(row, c) for c in COLUMNS]),
            )
        timed(f"fit after an observation at {db.count()} rows", lambda: service.fit_one(FitRequest(MODEL)))
        timed("an observation recorded by memfit (trims to the caps)", lambda: service.history.record(row))
        timed(f"fit after an observation at {db.count()} rows", lambda: service.fit_one(FitRequest(MODEL)))
        timed("another observation recorded at the cap", lambda: service.history.record(replace(row, streams=2)))
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
