"""`memfit serve --workers N` supervised: a worker that dies is started again while the others serve (one that
cannot open a history damaged since the supervisor checked it serves degraded, as one process does), and no worker
outlives its supervisor, however that ends."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import HISTORY_FILE, build_service
from tests.conftest import LiveServer
from tests.supervised_app import FAIL_FILE
from tests.test_history import BATCH, OBSERVATIONS, _observation
from tools.gguf_writers import qwen3, write_model

MODEL = "qwen3-f16"
MEASURED = 22_000_000  # a workspace within its derived bounds (an observation outside them is refused)
WAIT_S = 60  # the bound on every poll: the shared test machine may be slow to start Python processes


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    model: Path
    url: str
    port: int
    headers: dict[str, str]
    history: Path
    log: Path

    def workers(self) -> list[psutil.Process]:
        """The supervisor's worker processes (not multiprocessing's resource tracker)."""
        children = psutil.Process(self.proc.pid).children()
        return [p for p in children if "resource_tracker" not in " ".join(p.cmdline())]

    def worker_pid(self, client: httpx.Client) -> int:
        """The pid of the worker that answers on this client's connection (keep-alive: one worker per client)."""
        metrics = client.get("/metrics", headers=self.headers).text
        line = next(line for line in metrics.splitlines() if line.startswith("memfit_process_id "))
        return int(float(line.split()[1]))  # a Prometheus gauge: written as a float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(condition: object, what: str) -> None:
    """Poll `condition` (a callable) until it holds, for at most WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_S} s: {what}")
        time.sleep(0.2)


def _answers(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    return False


def _models(tmp_path: Path) -> Path:
    """A model directory holding one small model, MODEL."""
    models = tmp_path / "models"
    models.mkdir()
    write_model(qwen3(), models / f"{MODEL}.gguf")
    return models


def _workspace_basis(client: httpx.Client) -> str:
    """The basis of MODEL's workspace in a fit of its default workload (measuredArtifact once one is observed)."""
    batch = client.post(BATCH, json=[{"modelId": MODEL}])
    assert batch.status_code == 200, batch.text
    return str(
        next(p["basis"] for p in batch.json()["results"][0]["estimate"]["parts"] if p["component"] == "workspace")
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """`memfit serve --workers 2` over one small model and a fresh state directory, both workers started."""
    models = _models(tmp_path)
    state = tmp_path / "state"
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MEMFIT_STATE_DIR": str(state)}
    env.pop("MEMFIT_TOKEN", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memfit.cli", "serve", "--workers", "2", "--port", str(port)]
            + ["--models", str(models), "--no-usual-dirs"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    served = Served(proc, models / f"{MODEL}.gguf", url, port, {}, state / HISTORY_FILE, log)
    try:
        _until(lambda: (state / "token").is_file() and _answers(url), "the server answers")
        served.headers["Authorization"] = f"Bearer {(state / 'token').read_text().strip()}"
        pids: set[int] = set()

        def both_answered() -> bool:
            with httpx.Client(base_url=url, timeout=10) as client:  # a new connection each time
                pids.add(served.worker_pid(client))
            return len(pids) == 2

        _until(both_answered, "both workers answer")
        yield served
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process the test started, and its children, if it still runs."""
    _kill([psutil.Process(proc.pid), *psutil.Process(proc.pid).children()] if proc.poll() is None else [])
    proc.wait(timeout=WAIT_S)


def _kill(procs: list[psutil.Process]) -> None:
    """SIGKILL those of these processes that still run (psutil checks that a pid was not reused)."""
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=WAIT_S)


def _port_refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # a listener that no longer accepts (timing out): still held
        return False
    return False


def test_a_service_that_must_serve_is_degraded_by_a_history_it_cannot_open(tmp_path: Path) -> None:
    """What a worker builds (history_required=False) over a history that is not a database: fits from the derived
    numbers, /health degraded with the file and the fix, observations refused with a 503 (retryable)."""
    models = _models(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (state / HISTORY_FILE).write_bytes(b"garbage!" * 4096)
    service = build_service([Root(str(models), RootKind.PLAIN)], state_dir=str(state), history_required=False)
    size = os.path.getsize(models / f"{MODEL}.gguf")
    with LiveServer(service) as live, live.client() as client:
        health = client.get("/health").json()
        assert health["degraded"] is True, health
        assert str(state / HISTORY_FILE) in health["reason"] and "move it aside" in health["reason"], health
        assert _workspace_basis(client) == "derivedLayout"
        refused = client.post(OBSERVATIONS, json=_observation(MODEL, size, workspace=MEASURED))
        assert refused.status_code == 503 and refused.headers["retry-after"], refused.text
        assert str(state) in refused.json()["detail"] and "not a database" in refused.json()["detail"]


def test_no_worker_outlives_a_supervisor_killed_with_sigkill(served: Served) -> None:
    """SIGKILL leaves the supervisor no chance to stop its workers: each worker sees it gone (the kernel's
    parent-death signal on Linux, its own watch elsewhere) and stops, so nothing keeps the port."""
    children = psutil.Process(served.proc.pid).children()  # the workers and multiprocessing's resource tracker
    assert len([p for p in children if "resource_tracker" not in " ".join(p.cmdline())]) == 2
    served.proc.send_signal(signal.SIGKILL)
    served.proc.wait(timeout=WAIT_S)
    try:
        gone, alive = psutil.wait_procs(children, timeout=WAIT_S)
        assert alive == [], f"still running after the supervisor was killed: {alive}"
        assert len(gone) == len(children)
        _until(lambda: _port_refuses(served.port), f"port {served.port} is free")
    finally:
        _kill(children)  # the orphans, should the test fail


def test_a_worker_restarting_over_a_damaged_history_serves_degraded_and_the_others_keep_serving(
    served: Served,
) -> None:
    """The history is damaged under the running server, then a worker dies: the supervisor starts another,
    which cannot open the history and serves without it (fits from the derived numbers, /health degraded with
    the file and the fix, observations refused with a 503) instead of stopping the server; meanwhile the other
    worker answers every request."""
    size = os.path.getsize(served.model)
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=10) as client:
        recorded = client.post(OBSERVATIONS, json=_observation(MODEL, size, workspace=MEASURED))
        assert recorded.status_code == 201, recorded.text
        assert _workspace_basis(client) == "measuredArtifact"  # the worker on this connection reads the history
    with contextlib.closing(sqlite3.connect(served.history)) as db:  # the rows into the file, out of the WAL
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    served.history.write_bytes(b"garbage!" * 4096)  # in place: the same file, no longer a database
    victim, survivor = served.workers()
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=WAIT_S)

    def answer_once() -> set[int]:
        """One fit and one /health on a new connection (each must answer), and the worker pids now running."""
        with httpx.Client(base_url=served.url, headers=served.headers, timeout=10) as client:
            batch = client.post(BATCH, json=[{"modelId": MODEL}])
            assert batch.status_code == 200, batch.text
            assert batch.json()["results"][0]["estimate"] is not None
            assert client.get("/health").status_code == 200
        assert served.proc.poll() is None, "the supervisor stopped"
        return {p.pid for p in served.workers()}

    _until(lambda: len(answer_once() - {victim.pid, survivor.pid}) == 1, "a new worker is started")
    (replacement,) = answer_once() - {survivor.pid}
    assert survivor.is_running()

    def replacement_degraded() -> bool:
        """Whether this connection reached the new worker, and (then) that it serves degraded."""
        with httpx.Client(base_url=served.url, headers=served.headers, timeout=10) as client:
            if served.worker_pid(client) != replacement:
                return False
            health = client.get("/health").json()
            assert health["status"] == "ok" and health["degraded"] is True, health
            assert str(served.history) in health["reason"] and "move it aside" in health["reason"], health
            assert _workspace_basis(client) == "derivedLayout"  # not the recorded observation: the history is unread
            refused = client.post(OBSERVATIONS, json=_observation(MODEL, size, workspace=MEASURED))
            assert refused.status_code == 503 and refused.headers["retry-after"], refused.text
        return True

    _until(replacement_degraded, "the new worker answers")
    answer_once()
    assert {p.pid for p in served.workers()} == {survivor.pid, replacement}
    assert "Traceback" not in served.log.read_text(errors="replace")


SUPERVISE = """
import socket, sys
import uvicorn
from memfit.serving import Supervisor
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
config = uvicorn.Config("tests.supervised_app:app", factory=True, workers=2, lifespan="off")
Supervisor(config, [sock]).run()
"""


def test_a_worker_that_fails_every_start_is_retried_later_and_later_while_the_other_serves(tmp_path: Path) -> None:
    """A start that fails (uvicorn's STARTUP_FAILURE, which stops uvicorn's own supervisor) is one more death of
    that worker: another is started after a delay that doubles each time, the other worker answers every request
    meanwhile, and only SIGTERM stops the supervisor (and the workers with it)."""
    fail = tmp_path / "fail"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "supervisor.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SUPERVISE, str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, FAIL_FILE: str(fail)},
        )
    try:
        pids: set[int] = set()

        def both_answered() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                pids.add(int(httpx.get(url, timeout=5).text))
            return len(pids) == 2

        _until(both_answered, "both workers answer")
        fail.touch()  # from now on every start fails
        victim, survivor = (psutil.Process(pid) for pid in sorted(pids))
        victim.kill()
        victim.wait(timeout=WAIT_S)

        def delays() -> list[int]:
            """The delays the supervisor has said, after one answer (by the survivor) on a new connection."""
            assert httpx.get(url, timeout=10).text == str(survivor.pid)
            assert proc.poll() is None, "the supervisor stopped"
            return [int(d) for d in re.findall(r"another starts in (\d+) s", log.read_text(errors="replace"))]

        _until(lambda: len(delays()) >= 3, "two failed starts of the replacement")
        first, second, third = delays()[:3]
        assert second == 2 * first and third == 2 * second, delays()
        assert len(re.findall(r"exited \(code 3\)", log.read_text())) >= 2  # the failed starts
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
        assert psutil.wait_procs([survivor], timeout=WAIT_S)[1] == []
    finally:
        _stop(proc)


PARENT = """
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
open(sys.argv[2] + ".pid", "w").write(str(worker.pid))
time.sleep(600)
"""
WATCHING_WORKER = """
import sys, time
from memfit import serving
sys.platform = "darwin"  # a platform without Linux's parent-death signal: only the watch
serving.end_with_supervisor(int(sys.argv[1]))
open(sys.argv[2], "w").close()
time.sleep(600)
"""


def test_where_the_kernel_does_not_stop_a_worker_its_own_watch_does(tmp_path: Path) -> None:
    """end_with_supervisor without prctl: the worker's thread sees its parent gone and stops the worker."""
    ready = tmp_path / "watching"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, WATCHING_WORKER, str(ready)])
    worker: psutil.Process | None = None
    try:
        _until(lambda: ready.is_file() and Path(f"{ready}.pid").is_file(), "the worker watches")
        worker = psutil.Process(int(Path(f"{ready}.pid").read_text()))
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=WAIT_S)
        assert psutil.wait_procs([worker], timeout=WAIT_S)[1] == [], "the worker outlived its parent"
    finally:
        _stop(parent)
        _kill([worker] if worker is not None else [])
