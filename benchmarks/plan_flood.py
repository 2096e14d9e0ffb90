"""A flood of plans on a live `memfit serve` on 127.0.0.1, and what it does to `/health`:
`python -m benchmarks.plan_flood [--plans 44] [--seconds 60] [--memfit PATH]`.

Starts a real `memfit serve` over the public model set (a temporary state directory, a free port), probes
`/health` every 20 ms with no load (the baseline), then sends `--plans` concurrent 32-item plans of catalog models
while probing on from a process of its own, until they are all answered or `--seconds` pass. Prints /health's
p50/p99/max latency beside the baseline and the plans' statuses; exits 1 when /health took over 50 ms under the
flood. `--memfit` names another build's `memfit` executable (another checkout's, for a before/after comparison).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

import httpx

from benchmarks.bench import free_port

PROBE_S = 0.02
MAX_HEALTH_MS = 50.0
ITEMS = 32


def percentiles(ms: list[float]) -> str:
    ordered = sorted(ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return f"p50 {pick(0.5):7.1f} ms  p99 {pick(0.99):7.1f} ms  max {ordered[-1]:7.1f} ms  ({len(ms)} probes)"


async def probe(url: str, until: Callable[[], bool], ms: list[float]) -> None:
    """/health every PROBE_S until `until()`, each latency in ms."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await client.get("/health")  # not counted: a new client's first request (its connection, httpx's set-up)
        while not until():
            start = time.perf_counter()
            response = await client.get("/health")
            ms.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, response.text
            await asyncio.sleep(PROBE_S)


def probing(url: str, stop: EventType, results: Queue) -> None:
    """The probe in a process of its own: the plans' client, in this one, encodes 44 bodies and reads 44 answers at
    once on its event loop, which delayed a probe sharing it by 0.2 s."""
    ms: list[float] = []
    asyncio.run(probe(url, stop.is_set, ms))
    results.put(ms)


async def flood(url: str, token: str, plans: int, seconds: float) -> tuple[list[float], list[float], Counter]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=seconds + 30) as client:
        listing = (await client.get("/v1/models")).json()["models"]
    ids = [m["modelId"] for m in listing if m["source"] == "catalog"]
    body = [{"modelId": ids[i * 7 % len(ids)], "streams": 1 + i % 4} for i in range(ITEMS)]

    baseline: list[float] = []
    done = asyncio.Event()
    task = asyncio.create_task(probe(url, done.is_set, baseline))
    await asyncio.sleep(2)
    done.set()
    await task

    statuses: Counter = Counter()
    spawn = multiprocessing.get_context("spawn")
    stop, results = spawn.Event(), spawn.Queue()
    prober = spawn.Process(target=probing, args=(url, stop, results))
    prober.start()
    await asyncio.sleep(1)  # the probe's process started
    limits = httpx.Limits(max_connections=plans)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=seconds + 30, limits=limits) as client:

        async def plan() -> None:
            statuses[(await client.post("/v1/models/fit/plan", json=body)).status_code] += 1

        tasks = [asyncio.create_task(plan()) for _ in range(plans)]
        _, pending = await asyncio.wait(tasks, timeout=seconds)
        statuses["unanswered"] += len(pending)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    stop.set()
    loaded = results.get(timeout=60)
    prober.join(timeout=30)
    return baseline, loaded, statuses


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plan_flood")
    parser.add_argument("--plans", type=int, default=44)
    parser.add_argument("--seconds", type=float, default=60, help="the most the flood runs")
    parser.add_argument("--memfit", default=str(Path(sys.executable).with_name("memfit")))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plan-flood-") as work:
        models = os.path.join(work, "models")
        subprocess.run([sys.executable, "-m", "tools.gguf_writers", models], check=True)
        port, token = free_port(), secrets.token_urlsafe(24)
        env = {**os.environ, "MEMFIT_STATE_DIR": os.path.join(work, "state"), "MEMFIT_TOKEN": token}
        env["HF_HUB_OFFLINE"] = "1"  # catalog answers, as before the Hub lookups (an older --memfit ignores it)
        command = [args.memfit, "serve", "--port", str(port), "--models", models, "--no-usual-dirs"]
        with open(os.path.join(work, "server.log"), "wb") as log:
            server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    print(Path(work, "server.log").read_text(), file=sys.stderr)
                    return 2
                time.sleep(0.1)
            start = time.monotonic()
            baseline, loaded, statuses = asyncio.run(flood(url, token, args.plans, args.seconds))
            took = time.monotonic() - start - 2
        finally:
            server.terminate()
            server.wait(timeout=15)
    print(f"server: {args.memfit}; {args.plans} concurrent {ITEMS}-item plans, answered within {took:.1f} s")
    print(f"plans by status: {dict(statuses)}")
    print(f"/health, no load:    {percentiles(baseline)}")
    print(f"/health, the flood:  {percentiles(loaded)}")
    worst = max(loaded)
    if worst > MAX_HEALTH_MS:
        print(f"FAIL: /health took {worst:.1f} ms under the flood (over {MAX_HEALTH_MS:g} ms)")
        return 1
    print(f"ok: /health stayed within {MAX_HEALTH_MS:g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
