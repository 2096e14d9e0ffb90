"""`memfit fit <catalog id>`'s start-up: `scripts/bench` (after scale.py).

The wall time of `python -m memfit.cli fit Qwen/Qwen3-8B-GGUF:Q4_K_M --no-usual-dirs` in a fresh interpreter (import,
service, one catalog fit, the table printed), median of 5 runs, beside `python -c pass` (the interpreter's own
start, the floor of any Python command), over a fresh state directory; and the modules it imports that it should
not (the server stack, numpy).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = 5
TARGET_S = 0.3
FIT = ["-m", "memfit.cli", "fit", "Qwen/Qwen3-8B-GGUF:Q4_K_M", "--no-usual-dirs"]
UNWANTED = ("connexion", "uvicorn", "starlette", "prometheus_client", "numpy")


def _median_wall(argv: list[str], env: dict[str, str]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="memfit-cli-") as state:
        env = {**os.environ, "MEMFIT_STATE_DIR": state, "PYTHONWARNINGS": "ignore"}
        subprocess.run([sys.executable, *FIT], env=env, check=True, stdout=subprocess.DEVNULL)  # state made once
        baseline = _median_wall(["-c", "pass"], env)
        fit = _median_wall(FIT, env)
        probe = (
            "import json, sys; from memfit.cli import main; main(sys.argv[1:]);"
            " print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe, *FIT[2:]], env=env, capture_output=True, text=True, check=True
        )
        imported = [m for m in UNWANTED if m in json.loads(done.stdout.strip().splitlines()[-1])]
    print(f"\n#### `memfit fit` of a catalog id, start to exit (median of {RUNS} runs)\n")
    print("| command | wall (s) |")
    print("|---|---|")
    print(f"| `python -c pass` | {baseline:.3f} |")
    print(f"| `python -m memfit.cli fit Qwen/Qwen3-8B-GGUF:Q4_K_M --no-usual-dirs` | {fit:.3f} |")
    print(f"\nimported that should not be: {', '.join(imported) or 'none'}")
    met = fit <= TARGET_S and not imported
    print(f"target: <= {TARGET_S} s wall, none of {', '.join(UNWANTED)}: " + ("met" if met else "missed"))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
