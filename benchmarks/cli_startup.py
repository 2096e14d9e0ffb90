"""`memfit fit <catalog id>`'s start-up: `scripts/bench` (after scale.py).

The wall time of `memfit fit Qwen/Qwen3-8B-GGUF:Q4_K_M --no-usual-dirs --offline` in a fresh interpreter (import,
service, one catalog fit, the table printed; offline: the Hub is not asked), median of 7 runs, beside `python -c
pass` (the interpreter's own start, the floor of any Python command) in turns with it, over a fresh state
directory; and the modules it imports that it should not (the server stack, pydantic, numpy).

Both run with bytecode caches, as on a user's machine after memfit's first run (Python writes them on first
import; an installed wheel has them from the start): in a cache directory of this run's own (PYTHONPYCACHEPREFIX),
so that a PYTHONDONTWRITEBYTECODE set here does not make every run compile memfit's source again (about 0.07 s
more), and the checkout is left as it was.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 7
TARGET_S = 0.3
ARGS = ["fit", "Qwen/Qwen3-8B-GGUF:Q4_K_M", "--no-usual-dirs", "--offline"]  # the catalog's answer: no Hub asked
UNWANTED = ("connexion", "uvicorn", "starlette", "prometheus_client", "pydantic", "numpy")


def _wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    script = Path(sys.executable).with_name("memfit")  # the console script a user runs
    fit = [str(script), *ARGS] if script.exists() else [sys.executable, "-m", "memfit.cli", *ARGS]
    bare = [sys.executable, "-c", "pass"]
    with tempfile.TemporaryDirectory(prefix="memfit-cli-") as state, tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "MEMFIT_STATE_DIR": state, "PYTHONWARNINGS": "ignore", "PYTHONPYCACHEPREFIX": cache}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for argv in (fit, bare):  # the state directory made, every module's bytecode cached
            subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        baseline, times = [], []
        for _ in range(RUNS):
            baseline.append(_wall(bare, env))
            times.append(_wall(fit, env))
        probe = (
            "import json, sys; from memfit.cli import main; main(sys.argv[1:]);"
            " print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
        )
        done = subprocess.run([sys.executable, "-c", probe, *ARGS], env=env, capture_output=True, text=True, check=True)
        imported = [m for m in UNWANTED if m in json.loads(done.stdout.strip().splitlines()[-1])]
    base, wall = statistics.median(baseline), statistics.median(times)
    print(f"\n#### `memfit fit` of a catalog id, start to exit (median of {RUNS} runs, in turns)\n")
    print("| command | wall (s) |")
    print("|---|---|")
    print(f"| `python -c pass` | {base:.3f} |")
    print(f"| `memfit {' '.join(ARGS)}` | {wall:.3f} |")
    print(f"| difference (memfit's own start-up and work) | {wall - base:.3f} |")
    print(f"\nimported that should not be: {', '.join(imported) or 'none'}")
    met = wall <= TARGET_S and not imported
    print(f"target: <= {TARGET_S} s wall, none of {', '.join(UNWANTED)}: " + ("met" if met else "missed"))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
