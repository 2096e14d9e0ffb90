"""memfit's header reader beside a C walk of the same header (benchmarks/gguf_walk.c), compiled in the benchmark's
run where the machine has a C compiler: issue 28's targets, within 3x the C walk for a small header and within 2x
for a 262k-vocabulary one. Both sides are CPU time, the OS page cache warm."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from pathlib import Path

from memfit.readers.gguf_header import read_header

SOURCE = Path(__file__).with_name("gguf_walk.c")
TARGETS = {"small": 3.0, "262k": 2.0}  # memfit's read in C walks, by the header's label


class CWalk:
    """The compiled walker; `CWalk.build(directory)` is None where the machine has no C compiler."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary

    @classmethod
    def build(cls, directory: Path) -> CWalk | None:
        compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if compiler is None:
            return None
        binary = directory / "gguf_walk"
        subprocess.run([compiler, "-O2", "-Wall", "-Werror", "-o", str(binary), str(SOURCE)], check=True)
        return cls(binary)

    def ms(self, path: Path, repeats: int) -> float:
        """CPU milliseconds per walk of `path`'s header (opened and read afresh each time)."""
        done = subprocess.run([str(self.binary), str(path), str(repeats)], capture_output=True, text=True, check=True)
        return int(done.stdout.split()[0]) / 1e6


def reader_ms(path: Path, repeats: int) -> float:
    """memfit's CPU milliseconds per read of `path`'s header (read_header: the walk and what it keeps), the median
    of `repeats` reads."""
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        read_header(path)
        times.append((time.thread_time() - start) * 1000)
    return statistics.median(times)


def reader_table(headers: dict[str, Path], work: Path) -> list[str]:
    """Prints memfit's header read beside the C walk of each header, in rounds taking turns; the targets missed."""
    walk = CWalk.build(work)
    print("\n## The header reader beside a C walk of the same bytes (CPU time, page cache warm)\n")
    if walk is None:
        print("No C compiler on this machine: the C walk was not built, and these targets were not measured.")
        return []
    rounds: dict[str, list[tuple[float, float]]] = {label: [] for label in headers}
    for _ in range(5):
        for label, path in headers.items():
            small = read_header(path).data_offset < 1 << 20
            rounds[label].append((reader_ms(path, 40 if small else 9), walk.ms(path, 200 if small else 20)))
    print("| header | bytes | memfit read (ms) | C walk (ms) | ratio | target |")
    print("|---|---|---|---|---|---|")
    failed = []
    for label, path in headers.items():
        memfit = statistics.median(m for m, _ in rounds[label])
        c = statistics.median(c for _, c in rounds[label])
        target = next((t for key, t in TARGETS.items() if key in label), None)
        ratio = memfit / c
        print(
            f"| {label} | {read_header(path).data_offset:,} | {memfit:.3f} | {c:.3f} | {ratio:.1f}x |"
            f" {f'<= {target:g}x' if target else ''} |"
        )
        if target is not None and ratio > target:
            failed.append(f"header read {label}")
    return failed
