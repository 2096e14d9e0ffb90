"""What a create/delete churn under a large root costs the index: `python -m benchmarks.churn [--models N]`.

A plain root of N (10,000 by default) sparse GGUFs (benchmarks.scale's: header bytes written, data a hole) is
indexed and watched as `memfit serve` does (over a fresh state directory, every header read). Then, for
`--seconds` (20 by default) each: nothing changes (the idle baseline), and another process creates one more
model file and deletes it again every 10 ms. Printed for each: the CPU seconds of the index's thread and of this
whole process (the churn runs in a process of its own), and the index's full rescans and directory passes.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.scale import _populate, _ready
from memfit.readers.gguf_header import read_header
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tools.gguf_writers import qwen3, with_vocab, write_model

CHURN_PERIOD_S = 0.01
# the churning process: create the file, wait, delete it, wait, until the time is up
CHURN = """
import os, sys, time
path, head, period, seconds = sys.argv[1], bytes.fromhex(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
end = time.monotonic() + seconds
while time.monotonic() < end:
    with open(path, "wb") as f:
        f.write(head)
    time.sleep(period)
    os.unlink(path)
    time.sleep(period)
"""


def _thread_cpu(name: str) -> float:
    """The CPU seconds the thread called `name` has used."""
    thread = next(t for t in threading.enumerate() if t.name == name)
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def main(argv: list[str] | None = None) -> int:
    argv = argv or []
    n = int(argv[argv.index("--models") + 1]) if "--models" in argv else 10_000
    seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 20.0
    with tempfile.TemporaryDirectory(prefix="memfit-churn-") as tmp:
        work = Path(tmp)
        template, root = work / "template.gguf", work / "models"
        small = with_vocab(qwen3(), 512)  # a few KiB of header: the index's cost, not the tokenizer's
        write_model(small, template)
        head = template.read_bytes()[: read_header(str(template)).data_offset]
        root.mkdir()
        _populate(root, n, template)
        service = build_service([Root(str(root), RootKind.PLAIN)], state_dir=str(work / "state"))
        index = service.index
        index.start()
        try:
            _ready(service, n)
            if not index.wait_for(lambda: index.mode == "watch" and index.walks >= 2, timeout=600):
                raise RuntimeError(f"the index never began watching (mode {index.mode})")
            time.sleep(1)
            rows = []
            for label in ("idle", f"churn every {CHURN_PERIOD_S * 1e3:g} ms"):
                scans, regions, walks = index.scans, index.regions, index.walks
                thread, process, wall = _thread_cpu("memfit-index"), time.process_time(), time.monotonic()
                if label == "idle":
                    time.sleep(seconds)
                else:
                    args = [str(root / "org0" / "churn-Q8_0.gguf"), head.hex(), str(CHURN_PERIOD_S), str(seconds)]
                    subprocess.run([sys.executable, "-c", CHURN, *args], check=True)
                    index.wait_for(lambda: len(index.artifacts()) == n, timeout=120)  # the last change taken in
                thread, process = _thread_cpu("memfit-index") - thread, time.process_time() - process
                share = thread / (time.monotonic() - wall)
                rescans = (index.scans - scans, index.regions - regions, index.walks - walks)
                rows.append((label, thread, share, process, *rescans))
            listed = len(index.artifacts())
        finally:
            index.stop()
    print(f"\n#### Index CPU under a create/delete churn ({n:,} models, {seconds:g} s each)\n")
    print(
        "| phase | index thread CPU (s) | % of a core | process CPU (s) | full rescans | regions rescanned |"
        " directory passes |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, thread, share, process, scans, regions, walks in rows:
        print(f"| {label} | {thread:.2f} | {share * 100:.1f} | {process:.2f} | {scans} | {regions} | {walks} |")
    print(f"\nlisted after the churn: {listed:,} of {n:,}")
    return 0 if listed == n else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
