"""`memfit serve --workers N`'s throughput: `scripts/bench` (after cli_startup.py), or `python -m benchmarks.workers`.

`memfit serve` itself (the CLI, on 127.0.0.1) with 1 and with 2 worker processes over the real-size models of
bench.py, 32-model batches from 8 concurrent keep-alive connections for SECONDS. The clients are lean (asyncio
streams: one prepared request, each answer read by its content-length and not parsed; httpx spends more CPU per
batch than the server does, on the same cores) and split over two processes. The two servers take turns, ROUNDS
times; medians. Beside each: the CPU the server's processes used (in cores: what they could get), the batches per
second of that CPU (whether workers cost each other anything), and how busy the whole machine was (its other work
too). No target: what one process and two give on this machine, whose 2 cores the clients and other work share:
two workers gain only what a core left free gives them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from benchmarks.bench import REAL_SIZE, batch_body, free_port
from tools.gguf_writers import write_model

CLIENTS = 8
CLIENT_PROCESSES = 2


async def _connection(port: int, request: bytes, deadline: float) -> int:
    """Batches answered 200 on one keep-alive connection until `deadline`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    try:
        while time.monotonic() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
            done += 1
    finally:
        writer.close()
    return done


def _client(job: tuple[int, str, list[dict], int, float]) -> float:
    """Batches per second over `connections` connections for `seconds`."""
    port, token, body, connections, seconds = job
    payload = json.dumps(body).encode()
    request = (
        f"POST /v1/models/fit/batch HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: Bearer {token}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
    ).encode() + payload

    async def run() -> int:
        deadline = time.monotonic() + seconds
        return sum(await asyncio.gather(*(_connection(port, request, deadline) for _ in range(connections))))

    start = time.monotonic()
    done = asyncio.run(run())
    return done / (time.monotonic() - start)


class Serve:
    """`memfit serve --workers N` on a free port, over `models`, with its own state directory."""

    def __init__(self, workers: int, models: Path, state: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MEMFIT_STATE_DIR": str(state), "PYTHONWARNINGS": "ignore"}
        argv = ["serve", "--workers", str(workers), "--port", str(self.port), "--models", str(models)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memfit.cli", *argv, "--no-usual-dirs", "--offline"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not (state / "token").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.token = (state / "token").read_text().strip()
        body = batch_body([f"model-{i}" for i in range(len(REAL_SIZE))])
        answered: set[str] = set()
        while len(answered) < workers and time.monotonic() < deadline:  # every worker up, its headers read
            try:
                with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}) as c:
                    c.post("/v1/models/fit/batch", json=body)
                    metrics = c.get("/metrics").text
                answered |= {line.split()[1] for line in metrics.splitlines() if line.startswith("memfit_process_id ")}
            except httpx.HTTPError:
                time.sleep(0.1)

    def cpu_seconds(self) -> float:
        """User and system CPU time of the server's processes so far (the parent and its workers)."""
        processes = [psutil.Process(self.process.pid), *psutil.Process(self.process.pid).children(recursive=True)]
        total = 0.0
        for p in processes:
            try:
                times = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _busy_seconds() -> float:
    times = psutil.cpu_times()
    return times.user + times.system + getattr(times, "steal", 0.0)


def measure(seconds: float, rounds: int) -> dict[int, list[tuple[float, float, float]]]:
    """Per worker count, per turn: (batches per second, server cores, machine cores busy)."""
    turns: dict[int, list[tuple[float, float, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="memfit-workers-") as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        for i, build in enumerate(REAL_SIZE.values()):
            write_model(build(), models / f"model-{i}.gguf")
        body = batch_body([f"model-{i}" for i in range(len(REAL_SIZE))])
        spawn = multiprocessing.get_context("spawn")
        os.environ.setdefault("PYTHONWARNINGS", "ignore")  # the client processes import connexion (bench's imports)
        with spawn.Pool(CLIENT_PROCESSES) as pool:
            for r in range(rounds):
                for workers in (1, 2):
                    server = Serve(workers, models, Path(tmp) / f"state-{workers}-{r}")
                    try:
                        job = (server.port, server.token, body, CLIENTS // CLIENT_PROCESSES, seconds)
                        cpu, busy, start = server.cpu_seconds(), _busy_seconds(), time.monotonic()
                        rate = sum(pool.map(_client, [job] * CLIENT_PROCESSES))
                        wall = time.monotonic() - start
                        turns[workers].append(
                            (rate, (server.cpu_seconds() - cpu) / wall, (_busy_seconds() - busy) / wall)
                        )
                    finally:
                        server.stop()
    return turns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workers", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each server (default 3)")
    args = parser.parse_args(argv)
    turns = measure(args.seconds, args.rounds)
    med = {n: [statistics.median(t[k] for t in turns[n]) for k in range(3)] for n in (1, 2)}
    print(
        f"\n#### `memfit serve --workers N`: {CLIENTS} connections, 32-model batches (median of {args.rounds} turns)\n"
    )
    per_core = {n: statistics.median(t[0] / t[1] for t in turns[n]) for n in (1, 2)}
    print(
        f"| workers | batches/s | each turn | server CPU (cores) | batches per server core-second |"
        f" machine busy (cores of {psutil.cpu_count()}) |"
    )
    print("|---|---|---|---|---|---|")
    for n in (1, 2):
        each = ", ".join(f"{t[0]:.0f}" for t in turns[n])
        print(f"| {n} | {med[n][0]:.0f} | {each} | {med[n][1]:.2f} | {per_core[n]:.0f} | {med[n][2]:.2f} |")
    ratios = (med[2][0] / med[1][0], med[2][1] / med[1][1], per_core[2] / per_core[1])
    print(f"| 2 / 1 | {ratios[0]:.2f}x | | {ratios[1]:.2f}x | {ratios[2]:.2f}x | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
