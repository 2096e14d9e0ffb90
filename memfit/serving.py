"""How `memfit serve` runs: in one process, or as `--workers N` processes answering on one listening socket.

With N workers, uvicorn's supervisor (its `--workers` mode) keeps N spawned worker processes alive on the socket the
parent bound. The parent first makes everything the workers share, once, so that no two of them race to make it:
the bearer token (read, or created in the state directory) and the state directory's SQLite files (made,
migrated, a damaged header cache moved aside; `memfit serve` builds its fit service in the parent for that, and
says what it found, as with one process). Each worker then builds its own fit service from the same settings,
handed to it with uvicorn's configuration through the pipe that starts it (the token is never in a worker's
environment or command line), and serves.

What the workers share lives in SQLite, in WAL mode with busy timeouts (memfit/readers/header_store.py,
history_db.py): the header summaries (a header one worker read is another's cache hit, never read twice across a
restart) and the measurement history (an observation recorded through one worker is in every worker's next
answer). Each worker has its own index of the model roots (its own watch on them), its own in-memory caches, and
its own counters: GET /metrics and /health answer for the worker that took the request (memfit_process_id says
which).
"""

from __future__ import annotations

import functools
import logging
import socket
import sys
import warnings
from dataclasses import dataclass, field

import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from memfit.estimator.fit_service import Settings
from memfit.http_server import server_config
from memfit.readers.model_roots import Root

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
log = logging.getLogger("memfit.serve")


@dataclass(frozen=True)
class WorkerSettings:
    """All a worker needs to build the app `memfit serve` would build in one process."""

    roots: tuple[Root, ...]
    state_dir: str
    settings: Settings
    token: str = field(repr=False)  # never in a log line
    metrics_public: bool = False


def quiet_warnings() -> None:
    """Before connexion is imported: it imports starlette's test client, which warns about httpx (nothing a user of
    memfit can act on). This module imports nothing that imports connexion, nor does memfit.http_server: a worker
    imports them first, to unpickle its configuration."""
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")


def worker_app(settings: WorkerSettings) -> ASGIApp:
    """A worker's app (uvicorn calls it in the worker, as an app factory). A worker that cannot build it exits with
    uvicorn's start-up failure, which stops the supervisor instead of starting the worker again and again."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    quiet_warnings()
    try:
        from memfit.app import create_app
        from memfit.service_builder import build_service

        service = build_service(settings.roots, state_dir=settings.state_dir, settings=settings.settings)
        return create_app(service, settings.token, metrics_public=settings.metrics_public)
    except Exception:
        log.exception("a worker could not start")
        sys.exit(STARTUP_FAILURE)


def run_workers(settings: WorkerSettings, host: str, port: int, workers: int, sock: socket.socket) -> None:
    """Serve on `sock` with `workers` processes until SIGINT or SIGTERM (the supervisor stops every worker)."""
    config = server_config(functools.partial(worker_app, settings), host, port, factory=True, workers=workers)
    Multiprocess(config, sockets=[sock]).run()


def run_one(app: ASGIApp, host: str, port: int, sock: socket.socket) -> None:
    uvicorn.Server(server_config(app, host, port)).run(sockets=[sock])
