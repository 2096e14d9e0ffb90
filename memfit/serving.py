"""How `memfit serve` runs: in one process, or as `--workers N` processes answering on one listening socket.

With N workers, a supervisor (uvicorn's `--workers` mode, with memfit's restarts: Supervisor) keeps N spawned
worker processes alive on the socket the parent bound. The parent first makes everything the workers share, once,
so that no two of them race to make it: the bearer token (read, or created in the state directory) and the state
directory's SQLite files (made, migrated, a damaged header cache moved aside; `memfit serve` builds its fit service
in the parent for that, and says what it found, as with one process). Each worker then builds its own fit service
from the same settings, handed to it with uvicorn's configuration through the pipe that starts it (the token is
never in a worker's environment or command line), and serves.

What the workers share lives in SQLite, in WAL mode with busy timeouts (memfit/readers/header_store.py,
history_db.py): the header summaries (a header one worker read is another's cache hit, never read twice across a
restart) and the measurement history (an observation recorded through one worker is in every worker's next
answer). Each worker has its own index of the model roots (its own watch on them), its own in-memory caches, and
its own counters: GET /metrics and /health answer for the worker that took the request (memfit_process_id says
which).

The supervisor stops only on SIGINT or SIGTERM (then it stops every worker). A worker that dies, however it dies,
is started again while the others serve, after a delay that doubles with each death in a row of its slot; a worker
that cannot open the measurement history (damaged since the parent opened it) serves degraded, as one process does
when the history breaks under it. No worker outlives the supervisor (end_with_supervisor), so a supervisor killed
with SIGKILL leaves nothing holding the port.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess
from uvicorn.supervisors.multiprocess import Process

from memfit.heap import keep_heap
from memfit.http.plan_limit import PLAN_SLOTS
from memfit.http.server import server_config
from memfit.plan_processes import PlanProcesses, ServiceSettings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
log = logging.getLogger("memfit.serve")
RESTART_DELAY_S = 1.0  # before a dead worker's first replacement; doubled for each death in a row of its slot
MAX_RESTART_DELAY_S = 30.0
STEADY_S = 60.0  # a worker that ran this long before it died starts its slot's count of deaths anew
PARENT_WATCH_S = 0.5  # how often a worker checks that its supervisor is still its parent
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class WorkerSettings:
    """All a worker needs to build the app `memfit serve` would build in one process."""

    service: ServiceSettings
    token: str = field(repr=False)  # never in a log line
    metrics_public: bool = False


def quiet_warnings() -> None:
    """Before connexion is imported: it imports starlette's test client, which warns about httpx (nothing a user of
    memfit can act on). This module imports nothing that imports connexion, nor does memfit.http.server: a worker
    imports them first, to unpickle its configuration."""
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")


def end_with_supervisor(supervisor: int) -> None:
    """Make this worker stop (SIGTERM: uvicorn's graceful shutdown, at most GRACEFUL_SHUTDOWN_S) when its
    supervisor, the process `supervisor`, ends however it ends (SIGKILL included), so that no worker outlives it
    holding the port. On Linux the kernel sends it (prctl's PR_SET_PDEATHSIG; it fires when the thread that started
    this process ends: uvicorn starts every worker from the supervisor's main thread, so that is when the process
    ends). Everywhere, a daemon thread also watches for this process to have another parent (its supervisor gone:
    another process adopted it), which also covers a supervisor that ended before prctl was called."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # should it fail, the watch is still there

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(PARENT_WATCH_S)
        log.warning("the supervisor [%d] has gone: this worker stops", supervisor)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="memfit-supervisor-watch", daemon=True).start()


def worker_app(settings: WorkerSettings, supervisor: int) -> ASGIApp:
    """A worker's app (uvicorn calls it in the worker, as an app factory), the worker made to end with its
    supervisor. A measurement history that cannot be opened leaves the worker degraded, not stopped (said in the
    log now, and on /health); a worker that cannot build its app at all exits, and the supervisor starts another
    later. glibc keeps the memory header reads reuse (memfit.heap), set before any thread allocates."""
    keep_heap()
    end_with_supervisor(supervisor)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    quiet_warnings()
    try:
        from memfit.app import create_app
        from memfit.service_builder import build_service

        service = build_service(
            settings.service.roots,
            state_dir=settings.service.state_dir,
            settings=settings.service.settings,
            history_required=False,
            hub=settings.service.hub,
        )
        service.check_state()
        app = create_app(
            service,
            settings.token,
            metrics_public=settings.metrics_public,
            plan_processes=PlanProcesses(settings.service, PLAN_SLOTS),
        )
    except Exception:
        log.exception("a worker could not start")
        sys.exit(STARTUP_FAILURE)
    settle_for_serving()
    return app


@dataclass
class Slot:
    """What the supervisor knows of one worker."""

    started: float  # when it was started (monotonic)
    deaths: int = 0  # its slot's deaths in a row before it was started
    replace_at: float | None = None  # once it has died: when its replacement starts


class Supervisor(Multiprocess):
    """uvicorn's supervisor, but a worker that dies (one that failed to start included, which stops uvicorn's) is
    replaced after restart_delay while the others serve: the supervisor stops only on SIGINT or SIGTERM."""

    def __init__(self, config: uvicorn.Config, sockets: list[socket.socket]) -> None:
        super().__init__(config, sockets)
        self.began = time.monotonic()
        self.slots: dict[Process, Slot] = {}  # by worker; those uvicorn starts itself (at first, on SIGTTIN) lack one

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        self.slots = {p: slot for p, slot in self.slots.items() if p in self.processes}  # SIGHUP, SIGTTOU replace
        for idx, process in enumerate(self.processes):
            slot = self.slots.setdefault(process, Slot(self.began))
            if slot.replace_at is None:
                if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                    continue
                process.kill()  # hung, or already gone
                process.join()
                if self.should_exit.is_set():
                    return
                now = time.monotonic()
                slot.deaths = slot.deaths + 1 if now - slot.started < STEADY_S else 1
                delay = restart_delay(slot.deaths)
                slot.replace_at = now + delay
                log.warning(
                    "worker [%s] exited (code %s); another starts in %.0f s", process.pid, process.exitcode, delay
                )
            elif time.monotonic() >= slot.replace_at:
                replacement = Process(self.config, self.sockets)
                replacement.start()
                self.processes[idx] = replacement
                self.slots[replacement] = Slot(time.monotonic(), slot.deaths)


def restart_delay(deaths: int) -> float:
    """How long a slot waits for a worker after its `deaths`-th death in a row: doubling, up to a bound."""
    return min(MAX_RESTART_DELAY_S, RESTART_DELAY_S * 2 ** (deaths - 1))


def raise_file_limit() -> None:
    """The soft limit on open files raised to the hard one, before the server is configured (its connection cap
    follows the soft limit) and its workers spawned (they inherit it): connections and files share it, and the
    usual soft 1,024 left room for about 1,000 sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # macOS refuses an unlimited hard limit (past OPEN_MAX)
            log.warning("the file limit stays at %d: %s", soft, exc)


def run_workers(
    settings: WorkerSettings, host: str, port: int, workers: int, sock: socket.socket, stop: threading.Event
) -> None:
    """Serve on `sock` with `workers` processes until SIGINT or SIGTERM (the supervisor stops every worker);
    not at all once `stop` is set (a stop signal came before the supervisor's own handlers were in place)."""
    raise_file_limit()
    if stop.is_set():
        return
    app = functools.partial(worker_app, settings, os.getpid())
    config = server_config(app, host, port, factory=True, workers=workers)
    Supervisor(config, sockets=[sock]).run()


# middle-generation collections between full ones (CPython's default, 10, makes one about every 85,000 net
# allocations): a full collection scans every open connection (about 30 ms under 2,000 of them), and 2,000 new
# connections surviving their young collections set one off in the middle of their burst
FULL_COLLECTION_EVERY = 100
# How long a thread holding the GIL runs on while another waits for it (Python's default: 5 ms). A request on the
# event loop's thread hands the GIL over several times (to the threads that compute its answer and back); behind
# a busy thread (the index weighing the catalog, a fit) each hand-over cost up to the whole interval: `/health`
# took up to 164 ms in the first seconds after start-up, 68 ms at 0.5 ms (/health every 20 ms, this machine)
SWITCH_INTERVAL_S = 0.0005


def settle_for_serving() -> None:
    """For a serving process whose app is made. What start-up made (the spec and its validators, connexion's
    routes, the catalog) lives as long as the server: frozen out of the collector's way, a full collection no
    longer scans its 80,000 objects (112 ms on this machine under load, 0 once frozen), which paused every request
    while a flood of connections made collections frequent. Full collections, which still scan the connections,
    come less often (FULL_COLLECTION_EVERY). Threads hand the GIL over every SWITCH_INTERVAL_S."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


class StoppableServer(uvicorn.Server):
    """uvicorn's server, which stops after its start-up where `stop` was set before its own signal handlers were in
    place: the KeyboardInterrupt memfit's handler raises then can be lost (one raised while a finalizer runs is only
    printed), and under load a Ctrl-C sent just after start-up left the server running."""

    def __init__(self, config: uvicorn.Config, stop: threading.Event) -> None:
        super().__init__(config)
        self.stop = stop

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.stop.is_set():
            self.should_exit = True


def run_one(app: ASGIApp, host: str, port: int, sock: socket.socket, stop: threading.Event) -> None:
    """Serve `app` on `sock` until SIGINT or SIGTERM; not at all, or only until its start-up is done, once `stop`
    is set (memfit.cli's handlers set it)."""
    raise_file_limit()
    settle_for_serving()
    if not stop.is_set():
        StoppableServer(server_config(app, host, port), stop).run(sockets=[sock])
