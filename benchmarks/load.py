"""A bounded load on a live memfit server on 127.0.0.1: `scripts/load [--clients 32] [--seconds 60]`.

Clients send a mix of 32-model batches, single fits, model listings and observations for a fixed time, then
stop by themselves. It reports requests, errors by status, latency percentiles and the server's resident
memory over the run, and checks that no observation written under the load is lost. Exits 1 on any error,
on memory that grew more than 10%, or on a lost observation.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from benchmarks.bench import REAL_SIZE, Server, batch_body
from benchmarks.serve import TOKEN
from memfit.readers.history_db import HistoryDB
from tools.gguf_writers import write_model

MAX_RSS_GROWTH = 0.10


def observation(client: int, n: int) -> dict:
    """Client `client`'s `n`th observation, each under an identity of its own: the history keeps 16 rows per
    identity and workload (history_db.PER_WORKLOAD_CAP), so rows sharing one would be trimmed, not lost."""
    return {
        "modelId": "model-0",
        "revision": "",
        "quant": "Q4_K_M",
        "artifactBytes": 1000 + client * 1_000_000 + n,
        "workload": {
            "allocatedTokens": 4096,
            "streams": 1,
            "keyElementBytes": 2,
            "valueElementBytes": 2,
            "mode": "fullGpu",
        },
        "parts": {"workspace": n},
        "runtime": f"load client {client}",
    }


async def run(url: str, clients: int, seconds: float, body: list[dict]) -> tuple[Counter, list[float], int]:
    statuses: Counter = Counter()
    latencies: list[float] = []
    stored = 0
    deadline = time.monotonic() + seconds

    async def client(number: int) -> None:
        nonlocal stored
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
            n = 0
            while time.monotonic() < deadline:
                n += 1
                kind = n % 20
                start = time.perf_counter()
                try:
                    if kind == 0:
                        response = await c.post("/v1/models/observations", json=observation(number, n))
                        stored += response.status_code == 201
                    elif kind == 1:
                        response = await c.get("/v1/models")
                    elif kind == 2:
                        response = await c.post("/v1/models/fit", json=body[n % len(body)])
                    else:
                        response = await c.post("/v1/models/fit/batch", json=body)
                    statuses[response.status_code] += 1
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1
                latencies.append((time.perf_counter() - start) * 1000)

    await asyncio.gather(*(client(i) for i in range(clients)))
    return statuses, latencies, stored


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/load", description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfit-load-") as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        for i, build in enumerate(REAL_SIZE.values()):
            write_model(build(), models / f"model-{i}.gguf")
        state = Path(tmp) / "state"
        server = Server("memfit", models, state)
        try:
            body = batch_body([f"model-{i}" for i in range(len(REAL_SIZE))])
            # warm up at the load's own concurrency (its observations count too)
            stored = asyncio.run(run(server.url, args.clients, 2.0, body))[2]
            rss = [server.rss()]
            statuses: Counter = Counter()
            latencies: list[float] = []
            for _ in range(max(1, round(args.seconds / 5))):  # in slices, reading the memory between them
                part = asyncio.run(run(server.url, args.clients, min(5.0, args.seconds), body))
                statuses += part[0]
                latencies += part[1]
                stored += part[2]
                rss.append(server.rss())
        finally:
            server.stop()
        rows = len(HistoryDB(str(state / "history.sqlite3")).all())
    errors = {k: v for k, v in statuses.items() if k not in (200, 201)}
    q = statistics.quantiles(latencies, n=100)
    start = rss[1] if len(rss) > 2 else rss[0]  # after the first slice, when there are several
    growth = rss[-1] / start - 1
    print(f"{args.clients} clients for {args.seconds:g} s on 127.0.0.1")
    print("| requests | errors | p50 (ms) | p95 (ms) | p99 (ms) | RSS start | RSS end | growth | observations |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {sum(statuses.values())} | {sum(errors.values())} {dict(errors) or ''} | {q[49]:.1f} | {q[94]:.1f} | "
        f"{q[98]:.1f} | {start / 2**20:.1f} MiB | {rss[-1] / 2**20:.1f} MiB | {growth:+.1%} | "
        f"{stored} stored, {rows} in the database |"
    )
    print(f"statuses: {dict(sorted(statuses.items(), key=str))}")
    problems = []
    if errors:
        problems.append("errors")
    if growth > MAX_RSS_GROWTH:
        problems.append("memory grew")
    if rows != stored:
        problems.append("observations lost")
    print(
        "load: " + ("no errors, flat memory, no observation lost" if not problems else "FAILED: " + ", ".join(problems))
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
