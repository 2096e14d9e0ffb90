"""A local connection flood against `memfit serve`: `python -m benchmarks.flood [--nofile 1024] [--seconds 15]`.

A real `memfit serve` on 127.0.0.1 (a free port, its own state directory, the public model set, no usual model
directories) started with a soft file limit of --nofile (1024, the usual default; --hard lowers the hard limit
too, so that nothing can raise it). A second process opens --connections connections (2,000) from 127.0.0.2 to
127.0.0.50, each its own client address to the server: some idle (never a byte), some trickling a request's
headers one byte every half second, some sending requests without the token in a loop; each one closed by the
server is opened again. Meanwhile this process probes from 127.0.0.1, each probe on a new connection as the CLI
makes: `GET /health` every 20 ms and an authenticated `POST /v1/models/fit/batch` every 200 ms. The same probes
run first for --baseline seconds without the flood, then while the attackers open their connections (`opening`:
until each has opened one, the burst of new connections the server must accept), then for --seconds (`flood`).

Printed: per phase and probe, the count, failures (an error, a timeout while connecting or waiting for the answer,
a status other than 200) and p50/p99/max latency; the attackers' connections (opened, refused with a 503, closed
by the server before any answer) and the answers they got; the server's file limits, the cores it used during the
flood (on a shared machine, what it could get), its peak of open descriptors and the `Too many open files` lines
in its log. Exits 1 if any `/health` probe failed or took over HEALTH_LIMIT_MS. Loopback only; it stops itself.
FLOOD_KEEP_LOG=PATH keeps the server's log there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

import psutil

from tools.gguf_writers import PUBLIC_SET
from tools.gguf_writers import main as write_public_set

SOURCES = [f"127.0.0.{i}" for i in range(2, 51)]  # the attackers' client addresses
HEALTH_EVERY_S = 0.02
FIT_EVERY_S = 0.2
HEALTH_LIMIT_MS = 50.0
PROBE_TIMEOUT_S = 5.0
WARM_UP_S = 1.0  # probes before the baseline, not counted
TRICKLE_EVERY_S = 0.5
OPENING_LIMIT_S = 60.0  # the attackers open their connections within it
IDLE, TRICKLE, CHURN = "idle", "trickle", "churn"


def _request(method: str, path: str, port: int, token: str | None = None, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
    if token:
        head += f"authorization: Bearer {token}\r\n"
    if body:
        head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """One answer's status line (its body read by content-length and dropped)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    await reader.readexactly(length)
    return head.split(b"\r\n", 1)[0]


# the attackers (in their own process)


class Flood:
    """The attackers' shared state in their process: when to stop, and which have not opened a connection yet."""

    def __init__(self, connections: int, ready: EventType) -> None:
        self.deadline = float("inf")  # set once the lead process says stop
        self.unopened = set(range(connections))
        self.ready = ready  # set once every attacker has opened its first connection
        self.counts: Counter = Counter()

    def opened(self, n: int) -> None:
        self.counts["opened"] += 1
        if n in self.unopened:
            self.unopened.discard(n)
            if not self.unopened:
                self.ready.set()

    @property
    def running(self) -> bool:
        return time.monotonic() < self.deadline


async def _attacker(kind: str, n: int, port: int, flood: Flood) -> None:
    """One attacking connection of `kind`, opened again each time the server closes it, until the flood stops."""
    source = SOURCES[n % len(SOURCES)]
    unauthenticated = _request("POST", "/v1/models/fit/batch", port, body=b'[{"modelId": "qwen3-f16"}]')
    counts = flood.counts
    while flood.running:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            counts["connect failed"] += 1
            await asyncio.sleep(0.1)
            continue
        flood.opened(n)
        answered = False
        try:
            if kind == CHURN:
                while flood.running:
                    writer.write(unauthenticated)
                    status = await _answer(reader)
                    answered = True
                    counts[status.split(b" ", 2)[1].decode()] += 1
            elif kind == TRICKLE:
                await _trickle(reader, writer, flood)
            else:
                while not await _closed_within(reader, 1.0, flood):
                    pass
        except (OSError, asyncio.IncompleteReadError, ValueError):
            if not answered:
                counts["closed by the server"] += 1
        finally:
            writer.close()


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flood: Flood) -> None:
    """A request's head one byte at a time, TRICKLE_EVERY_S apart, until the server answers or closes."""
    for byte in b"GET /health HTTP/1.1\r\nx-slow: " + b"a" * 10_000:
        writer.write(bytes([byte]))
        if await _closed_within(reader, TRICKLE_EVERY_S, flood):
            return


async def _closed_within(reader: asyncio.StreamReader, seconds: float, flood: Flood) -> bool:
    """Whether the server answered or closed the connection within `seconds` (or the flood is over)."""
    try:
        data = await asyncio.wait_for(reader.read(4096), seconds)
    except TimeoutError:
        return not flood.running
    flood.counts["refused (503)" if data.startswith(b"HTTP/1.1 503") else "closed by the server"] += 1
    return True


def _flood(port: int, connections: int, churn: int, ready: EventType, stop: EventType, results: Queue) -> None:
    _raise_own_limit(connections + 256)
    kinds = [CHURN] * churn + [IDLE, TRICKLE] * ((connections - churn) // 2)
    kinds += [IDLE] * (connections - len(kinds))
    flood = Flood(connections, ready)

    async def stopped() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.1)
        flood.deadline = time.monotonic()

    async def run() -> None:
        await asyncio.gather(stopped(), *(_attacker(kind, n, port, flood) for n, kind in enumerate(kinds)))

    asyncio.run(run())
    results.put(dict(flood.counts))


def _raise_own_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


# the probes (this process)


async def _probe(port: int, request: bytes, samples: list[float | str]) -> None:
    """One request on a new connection from 127.0.0.1: its latency in ms, or why it failed."""
    start = time.perf_counter()
    stage = "connecting"
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.1", 0))
            stage = "waiting for the answer"
            try:
                writer.write(request)
                status = await _answer(reader)
            finally:
                writer.close()
    except TimeoutError:
        samples.append(f"timeout {stage}")
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        samples.append(type(exc).__name__)
    else:
        ok = status.startswith(b"HTTP/1.1 200")
        samples.append((time.perf_counter() - start) * 1000 if ok else status.split(b" ", 2)[1].decode())


async def _probes(
    port: int, token: str, seconds: float, until: Callable[[], bool] = lambda: False
) -> dict[str, list[float | str]]:
    """Probes for `seconds`, or until `until()` is true."""
    health = _request("GET", "/health", port)
    body = json.dumps([{"modelId": name} for name in PUBLIC_SET]).encode()
    fit = _request("POST", "/v1/models/fit/batch", port, token, body)
    samples: dict[str, list[float | str]] = {"/health": [], "fit/batch": []}
    tasks = set()
    start = time.monotonic()
    ticks = 0
    while (now := time.monotonic()) < start + seconds and not until():
        tasks.add(asyncio.create_task(_probe(port, health, samples["/health"])))
        if ticks % round(FIT_EVERY_S / HEALTH_EVERY_S) == 0:
            tasks.add(asyncio.create_task(_probe(port, fit, samples["fit/batch"])))
        ticks += 1
        await asyncio.sleep(max(0.0, start + ticks * HEALTH_EVERY_S - now))
    await asyncio.gather(*tasks)
    return samples


def _summary(phase: str, samples: dict[str, list[float | str]]) -> tuple[list[str], bool]:
    """Table rows, and whether every /health probe answered within HEALTH_LIMIT_MS."""
    rows, healthy = [], True
    for name, values in samples.items():
        good = sorted(v for v in values if isinstance(v, float))
        failed = Counter(v for v in values if isinstance(v, str))

        def at(q: float, good: list[float] = good) -> str:
            return f"{good[min(len(good) - 1, int(q * len(good)))]:.1f}" if good else "-"

        why = ", ".join(f"{n} {reason}" for reason, n in failed.most_common())
        rows.append(
            f"| {phase} | {name} | {len(values)} | {sum(failed.values())} {why and f'({why})'} "
            f"| {at(0.5)} | {at(0.99)} | {at(1.0)} |"
        )
        if name == "/health":
            healthy = not failed and bool(good) and good[-1] <= HEALTH_LIMIT_MS
    return rows, healthy


# the server


class Server:
    """`memfit serve` on a free port of 127.0.0.1 with a soft file limit of `nofile` (and the hard one too if
    `hard`), over the public set, in `tmp`."""

    def __init__(self, tmp: Path, nofile: int, hard: bool) -> None:
        models, self.state = tmp / "models", tmp / "state"
        write_public_set([str(models)])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tmp / "server.log"

        def limit() -> None:
            _, hard_limit = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile if hard else hard_limit))

        argv = ["serve", "--port", str(self.port), "--models", str(models), "--no-usual-dirs", "--offline"]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "memfit.cli", *argv],
                env={**os.environ, "MEMFIT_STATE_DIR": str(self.state), "PYTHONWARNINGS": "ignore"},
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=limit,
            )
        deadline = time.monotonic() + 60
        while not self._answers() and time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.1)
        self.token = (self.state / "token").read_text().strip()
        self.peak_fds = 0

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
            return s.recv(100).startswith(b"HTTP/1.1 200")
        return False

    def soft_limit(self) -> str:
        for line in Path(f"/proc/{self.process.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return " ".join(line.split()[3:5]) + " (soft, hard)"
        return "?"

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system

    def sample_fds(self) -> None:
        with contextlib.suppress(OSError):
            self.peak_fds = max(self.peak_fds, len(os.listdir(f"/proc/{self.process.pid}/fd")))

    def emfile_lines(self) -> int:
        return sum("Too many open files" in line for line in self.log.read_text(errors="replace").splitlines())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def _sampling(server: Server, seconds: float, until: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        server.sample_fds()
        await asyncio.sleep(0.25)


async def _flood_phase(
    server: Server, seconds: float, until: Callable[[], bool] = lambda: False
) -> dict[str, list[float | str]]:
    samples, _ = await asyncio.gather(
        _probes(server.port, server.token, seconds, until), _sampling(server, seconds, until)
    )
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flood", description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=2000, help="attacking connections (default 2000)")
    parser.add_argument("--churn", type=int, default=200, help="of them, sending requests in a loop (default 200)")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long the flood lasts (default 15)")
    parser.add_argument("--baseline", type=float, default=3.0, help="probes without the flood first (default 3)")
    parser.add_argument("--nofile", type=int, default=1024, help="the server's soft file limit at start (1024)")
    parser.add_argument("--hard", action="store_true", help="lower the server's hard file limit to --nofile too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memfit-flood-") as tmp:
        keep = os.environ.get("FLOOD_KEEP_LOG")  # the server's log, to read after
        server = Server(Path(tmp), args.nofile, args.hard)
        try:
            print(f"server pid {server.process.pid} on 127.0.0.1:{server.port}, file limit {server.soft_limit()}")
            asyncio.run(_probes(server.port, server.token, WARM_UP_S))  # the first answers build caches
            baseline = asyncio.run(_probes(server.port, server.token, args.baseline))
            spawn = multiprocessing.get_context("spawn")
            results: Queue = spawn.Queue()
            ready, stop = spawn.Event(), spawn.Event()
            attacker = spawn.Process(
                target=_flood, args=(server.port, args.connections, args.churn, ready, stop, results)
            )
            attacker.start()
            opening_started = time.monotonic()
            opening = asyncio.run(_flood_phase(server, OPENING_LIMIT_S, ready.is_set))
            opening_s = time.monotonic() - opening_started
            cpu, start = server.cpu_seconds(), time.monotonic()
            flooded = asyncio.run(_flood_phase(server, args.seconds))
            cores = (server.cpu_seconds() - cpu) / (time.monotonic() - start)
            stop.set()
            counts = results.get(timeout=60)
            attacker.join(timeout=30)
            alive = server.process.poll() is None
        finally:
            server.stop()
            if keep:
                Path(keep).write_bytes(server.log.read_bytes())
        rows_before, healthy_before = _summary("baseline", baseline)
        rows_opening, healthy_opening = _summary("opening", opening)
        rows_after, healthy_after = _summary("flood", flooded)
        print("\n| phase | probe | n | failed | p50 (ms) | p99 (ms) | max (ms) |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows_before + rows_opening + rows_after))
        print(f"\nopening: from the attackers' start until each had opened a connection ({opening_s:.1f} s)")
        print(f"attackers ({args.connections} connections, {args.churn} in a loop): {dict(sorted(counts.items()))}")
        print(
            f"server: {cores:.2f} cores busy during the flood, peak {server.peak_fds} open descriptors,"
            f" {server.emfile_lines()} 'Too many open files' lines"
        )
        print(f"server still running after the flood: {alive}")
    ok = healthy_before and healthy_opening and healthy_after and alive
    print(f"/health {'answered within' if ok else 'failed or took over'} {HEALTH_LIMIT_MS:.0f} ms throughout")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
