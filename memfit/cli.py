"""The `memfit` command."""

from __future__ import annotations

import argparse
import contextlib
import errno
import fnmatch
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from memfit.config import default_state_dir, model_roots
from memfit.estimator.budget import BudgetSetting
from memfit.estimator.verdict import DEFAULT_MARGIN
from memfit.readers.declared_gpus import ENVIRONMENT as GPUS_ENVIRONMENT
from memfit.readers.declared_gpus import declared_gpus, gpu_flag
from memfit.readers.hub import HubSettings
from memfit.readers.model_roots import Root
from memfit.readers.state_health import StateFileError
from memfit.remote import Refused, RemoteServer, Unauthorized, Unproven, Unreachable
from memfit.server_record import RecordError, ServerRecord, process_alive, read_record
from memfit.service.answers import Settings
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from memfit.terminal import printable, printable_json
from memfit.token_file import UnsafeStateError, UnusableTokenError, read_token
from memfit.workload_flags import (
    EXAMPLES,
    add_placement_flags,
    add_profile_flag,
    add_workload_flags,
    count,
    placement_fields,
    tokens_per_stream,
)

if TYPE_CHECKING:
    import socket

    from memfit import answer_shapes as shapes
    from memfit.generated.plain_models import WireFitVerdictRequest

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9998
MAX_MODELS = 32  # the contract's batch limit

# exit codes a script can use; the highest one that applies wins
EXIT_GOOD, EXIT_USAGE, EXIT_TIGHT, EXIT_OVERSIZE, EXIT_UNKNOWN, EXIT_NOT_FOUND = 0, 2, 3, 4, 5, 6
EXIT_FOR_VERDICT = {"good": EXIT_GOOD, "tight": EXIT_TIGHT, "oversize": EXIT_OVERSIZE, "unknown": EXIT_UNKNOWN}
EPILOG = """exit codes (memfit fit; the highest that applies wins):
  0  every model is good
  2  usage error (a bad flag, more than 32 models, a --models path that is a file, a busy port,
     a token no client could send, a request the running server refused)
  3  some model is tight (fits, within the margin)
  4  some model is oversize (even the floor exceeds the budget)
  5  some verdict is unknown (the ceiling is unknown, or the floor fits and the ceiling does not)
  6  some id is not found (nearest known ids on stderr)
"""


class UsageError(Exception):
    """A mistake in the command line that argparse cannot see: said on stderr, exit 2, no traceback."""


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {value}")
    return value


def _check_model_dirs(paths: Sequence[str] | None) -> None:
    """A --models path that is a file is an error; one that does not exist (yet) is a warning."""
    for path in paths or ():
        p = Path(path).expanduser()
        if p.exists() and not p.is_dir():
            raise UsageError(f"--models {path} is a file, not a directory: name the directory that holds the models")
        if not p.exists():
            print(
                f"memfit: warning: --models {path} does not exist: nothing is found there until it does",
                file=sys.stderr,
            )


def _margin(text: str) -> Fraction:
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r}") from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError("the margin is a fraction between 0 and 10")
    return value


T = TypeVar("T")


def _say(text: str) -> None:
    print(f"memfit: {text}", file=sys.stderr)


def _settings(args: argparse.Namespace, record: ServerRecord | None = None) -> Settings:
    """The flags', else the running server's (its record's), else the defaults."""
    margin = args.margin if args.margin is not None else record.margin if record else DEFAULT_MARGIN
    budget = BudgetSetting(args.budget) if args.budget is not None else record.budget if record else None
    try:
        gpus = declared_gpus(args.gpu, os.environ) if args.gpu or record is None else record.gpus
    except ValueError as exc:
        raise UsageError(f"--gpu or {GPUS_ENVIRONMENT}: {exc}") from None
    return Settings(margin=margin, budget=budget or BudgetSetting.AVAILABLE, gpus=gpus)


def _service(args: argparse.Namespace, record: ServerRecord | None = None) -> FitService:
    """The estimator in this process: over the recorded server's model directories and settings when `record` is
    given, else the flags' and the environment's."""
    if record is not None:
        roots = list(record.roots)
    else:
        _check_model_dirs(args.models)
        roots = model_roots(args.models, usual=not args.no_usual_dirs)
    return build_service(roots, state_dir=default_state_dir(), settings=_settings(args, record), hub=_hub(args))


def _hub(args: argparse.Namespace) -> HubSettings:
    """How this process asks the Hugging Face Hub: HF_ENDPOINT's Hub, unless --offline or HF_HUB_OFFLINE."""
    return HubSettings.from_environment(args.offline)


def _configures_estimator(args: argparse.Namespace) -> bool:
    """Flags that say how to answer, which a running server cannot be asked to change: answered here."""
    return (
        bool(args.models) or args.no_usual_dirs or args.margin is not None or args.budget is not None or bool(args.gpu)
    )


def _recorded_server(args: argparse.Namespace) -> ServerRecord | None:
    """The record of the `memfit serve` using this state directory, unless the flags say how to answer (then it
    is not consulted); None when there is none, or when it cannot be used (said on stderr in one line)."""
    if getattr(args, "local", False) or _configures_estimator(args):
        return None
    try:
        return read_record(default_state_dir())
    except RecordError as exc:
        _say(f"{exc}; answering here, from the flags and environment")
        return None


def _running_server(args: argparse.Namespace) -> tuple[RemoteServer | None, ServerRecord | None]:
    """The server to ask and its record. (None, record) when its process is gone or its token cannot be read:
    the answer is then worked out here over its model directories and settings (said on stderr in one line)."""
    record = _recorded_server(args)
    if record is None:
        return None, None
    if args.offline and not record.hub_offline:
        _say(
            f"the server in {record.path} may ask the Hugging Face Hub; --offline: answering here with its model"
            " directories and settings"
        )
        return None, record
    if not process_alive(record.pid):
        _say(
            f"the server in {record.path} (pid {record.pid}, {record.url}) is not running;"
            " answering here with its model directories and settings"
        )
        return None, record
    try:
        token = read_token(default_state_dir())
    except (UnsafeStateError, UnusableTokenError) as exc:
        _say(f"{exc}; answering here with the server's model directories and settings")
        return None, record
    return RemoteServer(record.url, token.value if token else None), record


def _ask(server: RemoteServer | None, record: ServerRecord | None, question: Callable[[RemoteServer], T]) -> T | None:
    """The running server's answer; None (said on stderr in one line) when it cannot give one. Refused (a request
    it refused) propagates: the CLI says it and exits 2."""
    if server is None or record is None:
        return None
    try:
        return question(server)
    except Unauthorized as exc:
        token_file = os.path.join(default_state_dir(), "token")
        if record.token_from_env:
            hint = "it was started with MEMFIT_TOKEN: give this command the same MEMFIT_TOKEN"
        elif os.environ.get("MEMFIT_TOKEN"):
            hint = f"it uses the token in {token_file}: unset MEMFIT_TOKEN here"
        else:
            hint = f"{token_file} changed since it started: restart it"
        if isinstance(exc, Unproven):
            hint = f"if it is memfit, {hint}"
        _say(f"{exc}; {hint}; answering here with its model directories and settings")
    except Unreachable as exc:
        _say(f"{exc}; answering here with its model directories and settings")
    return None


def _add_service_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--models",
        action="append",
        metavar="PATH",
        help="a model directory (repeatable); default: MEMFIT_MODELS, an os.pathsep list",
    )
    parser.add_argument(
        "--no-usual-dirs",
        action="store_true",
        help="do not look in the Hugging Face hub cache, llama.cpp's cache, LM Studio's folder or Ollama's store",
    )
    parser.add_argument(
        "--margin",
        type=_margin,
        help=f"presentation margin for the verdict (default {float(DEFAULT_MARGIN):.2f})",
    )
    parser.add_argument(
        "--budget",
        choices=[b.value for b in BudgetSetting],
        help="judge against available (default) or total host memory",
    )
    parser.add_argument(
        "--gpu",
        action="append",
        type=gpu_flag,
        metavar="BACKEND:TOTAL[:FREE]",
        help="assume this GPU in place of those NVML or Metal report (repeatable; cuda or metal, e.g. cuda:24GiB or"
        f" cuda:24GiB:20GiB); default: {GPUS_ENVIRONMENT}, comma-separated",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="never ask the Hugging Face Hub: answer from this machine's files, memfit's cache of headers read from"
        " the Hub before, and the bundled catalog (also HF_HUB_OFFLINE=1)",
    )


ASKS_THE_SERVER = (
    "When a `memfit serve` of this state directory runs (its server.json), it is asked and its answer\n"
    "shown; --models, --no-usual-dirs, --margin, --budget, --gpu or --local answer in this process instead."
)


def _add_local_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local",
        action="store_true",
        help="answer in this process, from the flags and environment, even when a memfit serve is running",
    )


def _directories(roots: Sequence[Root]) -> str:
    """The model directories `serve` watches: those there now, then those it will watch once they appear."""
    there = [f"{r.path} ({r.kind})" for r in roots if os.path.isdir(r.path)]
    later = [f"{r.path} ({r.kind})" for r in roots if not os.path.isdir(r.path)]
    line = f"model directories: {', '.join(there) or '(none)'}"
    return line + (f"\nwatched for once they appear: {', '.join(later)}" if later else "")


def serve(args: argparse.Namespace) -> int:
    from memfit.heap import keep_heap
    from memfit.http.plan_limit import PLAN_SLOTS
    from memfit.plan_processes import PlanProcesses, ServiceSettings
    from memfit.serving import WorkerSettings, quiet_warnings, run_one, run_workers

    keep_heap()  # before any thread allocates: glibc fixes its arenas' number at the first thread's
    quiet_warnings()
    from memfit.server_record import client_url, record_path, remove_record, write_record
    from memfit.token_file import load_token

    state_dir = default_state_dir()
    try:
        token = load_token(state_dir)  # made here, once, before any worker starts
    except (UnsafeStateError, UnusableTokenError) as exc:
        print(f"memfit: {exc}", file=sys.stderr)
        return 2
    service = _service(args)  # with --workers, each worker builds its own; this one makes the state directory
    settings = _settings(args)
    try:
        sock = _listen(args.host, args.port)
    except OSError as exc:
        reason = "the address is already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        print(f"memfit: cannot listen on {args.host}:{args.port}: {reason}; choose another --port", file=sys.stderr)
        return 2
    record = ServerRecord(
        url=client_url(*sock.getsockname()[:2]),  # the address bound (--host localhost: 127.0.0.1), never a name
        pid=os.getpid(),
        roots=tuple(service.index.roots),
        margin=settings.margin,
        budget=settings.budget,
        gpus=settings.gpus,
        token_from_env=token.path is None,
        hub_offline=_hub(args).offline,
    )
    stopping = {sig: signal.signal(sig, handler) for sig, handler in _STOP_HANDLERS.items()}
    try:  # from here a Ctrl-C, SIGTERM or SIGHUP is a clean shutdown: connections queue on the socket already
        where = f"in {token.path}" if token.path else "from MEMFIT_TOKEN"
        workers = f", {args.workers} worker processes" if args.workers > 1 else ""
        print(f"memfit serving http://{args.host}:{args.port} (API at /v1, docs at /v1/ui/{workers})", flush=True)
        print(f"bearer token: {where}", flush=True)
        print(_directories(service.index.roots), flush=True)
        print(_hub_line(_hub(args)), flush=True)
        try:
            print(f"server record: {write_record(state_dir, record)} (memfit fit, plan and models ask this server)")
        except OSError as exc:
            print(
                f"memfit: warning: cannot write {record_path(state_dir)} ({exc}): the CLI will not find this server",
                file=sys.stderr,
            )
        sys.stdout.flush()
        service_settings = ServiceSettings(tuple(service.index.roots), state_dir, service.settings, _hub(args))
        if args.workers > 1:
            del service
            worker_settings = WorkerSettings(service_settings, token.value, args.metrics_public)
            run_workers(worker_settings, args.host, args.port, args.workers, sock, STOP_REQUESTED)
        else:
            from memfit.app import create_app

            plans = PlanProcesses(service_settings, PLAN_SLOTS)
            app = create_app(service, token.value, metrics_public=args.metrics_public, plan_processes=plans)
            run_one(app, args.host, args.port, sock, STOP_REQUESTED)
    except KeyboardInterrupt:  # before uvicorn runs, or after it shut down cleanly and re-raised the signal
        pass
    finally:
        sock.close()
        remove_record(state_dir, record.pid)
        for sig, handler in stopping.items():
            signal.signal(sig, handler)
    return 0


def _hub_line(hub: HubSettings) -> str:
    """Whether `serve` asks the Hugging Face Hub for ids that name no file here, and which."""
    if hub.offline:
        return "Hugging Face Hub: not asked (offline: --offline or HF_HUB_OFFLINE); its cached headers still answer"
    return f"Hugging Face Hub: {hub.shown} for ids that name no file here (--offline: never)"


def _stop(_signum: int, _frame: object) -> None:
    """SIGTERM (`kill`, `systemctl stop`) stops `memfit serve` as a Ctrl-C does, its record removed. While uvicorn
    runs it handles SIGTERM itself (a graceful shutdown) and raises it again once done, which lands here. Before
    uvicorn runs, the KeyboardInterrupt raised here may be lost (in a finalizer): STOP_REQUESTED says it came."""
    STOP_REQUESTED.set()
    raise KeyboardInterrupt


def _hang_up(_signum: int, _frame: object) -> None:
    """SIGHUP (the terminal closed): a SIGTERM, so that a running uvicorn shuts down gracefully too."""
    signal.raise_signal(signal.SIGTERM)


STOP_REQUESTED = threading.Event()  # a stop signal came: `serve` does not start uvicorn, or stops it once started
# SIGINT too: a shell starts a background job with SIGINT ignored, and a Ctrl-C or `kill -INT` that came before
# uvicorn installs its own handler was lost, the server running on
_STOP_HANDLERS: dict[int, Callable[[int, object], None]] = {signal.SIGTERM: _stop, signal.SIGINT: _stop}
if hasattr(signal, "SIGHUP"):  # not on Windows
    _STOP_HANDLERS[signal.SIGHUP] = _hang_up


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket uvicorn would bind, bound here so that a busy port is a clear message."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen()  # connections queue from now on, before uvicorn starts (it listens again with its backlog)
    except OSError:
        sock.close()
        raise
    return sock


def _matches(pattern: str, model_id: str) -> bool:
    """A glob (with *, ? or [) or a substring, either case-insensitive."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(model_id.lower(), pattern.lower())
    return pattern.lower() in model_id.lower()


def _json(answer: object) -> str:
    """A --json answer as JSON: always the generated pydantic models (a server's answer, or one worked out here
    without plain=True; a table's answer is built with the dataclasses, which spare it pydantic's start-up)."""
    from pydantic import BaseModel

    assert isinstance(answer, BaseModel)
    return printable_json(answer.model_dump_json(indent=2))


def models(args: argparse.Namespace) -> int:
    from memfit import wire
    from memfit.render import render_models, replaced

    def listed_here(service: FitService) -> shapes.ModelList:
        service.listing.weigh_catalog()  # a server's index thread weighs them and reads every header; here,
        service.listing.models(read_for=None)  # nothing else would
        return wire.model_list(service) if args.json else wire.model_list(service, plain=True)

    listing, _, _ = _answer(args, RemoteServer.model_list, listed_here)
    if args.filter:
        listing = replaced(listing, {"models": [m for m in listing.models if _matches(args.filter, m.model_id)]})
        if not listing.models:
            print(f"memfit: no model id matches {args.filter!r}", file=sys.stderr)
            return EXIT_NOT_FOUND
    print(_json(listing) if args.json else render_models(listing, detail=args.detail))
    return 0


def suggestions(missing: str, known: Sequence[str]) -> str:
    """The repository's quants, when the id names a known repository with another quant, and the nearest ids."""
    from memfit.estimator.model_ids import suggestions as suggested

    found = suggested(missing, known)
    hints = [f"{found.repository} has {', '.join(found.quants)}"] if found.repository else []
    if found.nearest:
        hints.append(f"did you mean {', '.join(found.nearest)}?")
    return "; ".join(hints) or "memfit models lists the ids it knows"


def fit(args: argparse.Namespace) -> int:
    from memfit import wire
    from memfit.render import render_fit, use_colour

    requests = _fit_requests(args)

    def worked_out(f: FitService) -> shapes.FitBatch:
        return wire.fit_batch(f, requests) if args.json else wire.fit_batch(f, requests, plain=True)

    # unknown ids are left out, as the contract says
    batch, known, record = _answer(args, lambda s: s.fit_batch(requests), worked_out)
    missing = _say_missing(known, args.model, {r.model_id for r in batch.results}, _reasons(batch))
    if args.json:
        print(_json(batch))
    elif batch.results:
        margin = _settings(args, record).margin
        print(render_fit(batch.results, margin, colour=use_colour(sys.stdout), detail=args.detail))
    codes = [EXIT_FOR_VERDICT.get(r.verdict, EXIT_UNKNOWN) for r in batch.results]
    return max([*codes, EXIT_NOT_FOUND if missing else EXIT_GOOD])


def _fit_requests(args: argparse.Namespace) -> list[WireFitVerdictRequest]:
    """The requests, as memfit.wire reads them (the flags' types have checked what the contract would)."""
    from memfit.generated.plain_models import WireFitVerdictRequest

    if len(args.model) > MAX_MODELS:
        raise UsageError(f"at most {MAX_MODELS} models, got {len(args.model)}")
    tokens = _tokens(args)
    return [
        WireFitVerdictRequest(
            model_id=m,
            allocated_tokens=tokens,
            streams=args.streams,
            key_element_bytes=args.key_bytes,
            value_element_bytes=args.value_bytes,
            mode=args.mode,
            flash_attention=args.flash_attention,
            ubatch_tokens=args.ubatch,
            kv_unified=args.kv_unified,
            cpu_variant=args.cpu_variant,
            **placement_fields(args),
            profile=args.profile,
            swa_full=None,
            load_mode=None,
            cache_ram_mib=None,
            context_checkpoints=None,
            rollback_snapshots=args.rollback_snapshots,
            multi_token_prediction=args.mtp,
            draft_tokens=args.draft_tokens,
            embeddings=args.embedding,
            pooling=args.pooling,
            draft_key_element_bytes=args.draft_key_bytes,
            draft_value_element_bytes=args.draft_value_bytes,
            draft_backend_sampling=args.draft_backend_sampling,
        )
        for m in args.model
    ]


def _tokens(args: argparse.Namespace) -> int | None:
    try:
        return tokens_per_stream(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _answer(
    args: argparse.Namespace, ask: Callable[[RemoteServer], T], work_out: Callable[[FitService], T]
) -> tuple[T, Callable[[], list[str]], ServerRecord | None]:
    """The running server's answer, else one worked out here; how to list the ids its side knows (for the
    nearest-id hints); the server's record, when there is one."""
    server, record = _running_server(args)
    answer = _ask(server, record, ask)
    if answer is not None and server is not None:
        return answer, lambda: _remote_ids(server), record
    service = _service(args, record)
    service.index.refresh()
    return work_out(service), lambda: [m.model_id for m in service.model_list()], record


def _remote_ids(server: RemoteServer) -> list[str]:
    try:
        return [m.model_id for m in server.model_list().models]
    except (Unreachable, Refused):
        return []


def _reasons(batch: shapes.FitBatch | shapes.PlanBatch) -> dict[str, str]:
    """Why each id a batch left out was left out, where the answer says (the Hub's answer)."""
    return {e.model_id: e.reason for e in batch.left_out if e.reason}


def _say_missing(
    known_ids: Callable[[], list[str]], asked: Sequence[str], found: set[str], reasons: dict[str, str]
) -> bool:
    """Name every id not found on stderr, with why (where the answer says) and the nearest known ids; whether any
    was missing."""
    missing = [m for m in dict.fromkeys(asked) if m not in found]
    if missing:
        known = known_ids()
        for m in missing:
            why = f"{reasons[m]}; " if m in reasons else ""
            print(f"memfit: not found: {m!r}: {printable(why + suggestions(m, known))}", file=sys.stderr)
    return bool(missing)


def plan(args: argparse.Namespace) -> int:
    from memfit import wire
    from memfit.render import render_plan, use_colour

    requests = _fit_requests(args)

    def worked_out(f: FitService) -> shapes.PlanBatch:
        return wire.fit_plan(f, requests) if args.json else wire.fit_plan(f, requests, plain=True)

    # unknown ids are left out, as the contract says
    plans, known, _ = _answer(args, lambda s: s.fit_plan(requests), worked_out)
    missing = _say_missing(known, args.model, {p.model_id for p in plans.results}, _reasons(plans))
    if args.json:
        print(_json(plans))
    elif plans.results:
        print(render_plan(plans.results, colour=use_colour(sys.stdout)))
    codes = [EXIT_FOR_VERDICT.get(q.fit.verdict, EXIT_UNKNOWN) for p in plans.results for q in p.quants]
    return max([*codes, EXIT_NOT_FOUND if missing else EXIT_GOOD])


def _not_measured(args: argparse.Namespace, auto: str) -> str | None:
    """Why a flag does not apply to `memfit measure` (what its load leaves out), or None."""
    if args.cpu_variant not in (None, auto):
        return "loads this host's own llama.cpp: --cpu-variant does not apply"
    if args.rollback_snapshots:
        return "loads the model with n_rs_seq 0: --rollback-snapshots does not apply"
    if args.mtp:
        return "loads the model without its MTP layers: --mtp does not apply"
    if args.draft_tokens:
        return "loads the model and verifies no draft: --draft-tokens does not apply"
    if args.embedding:
        return "loads the model without embeddings: --embedding does not apply"
    if args.pooling is not None:
        return "loads the model with its own pooling and no server output limit: --pooling does not apply"
    return None


def measure(args: argparse.Namespace) -> int:
    """Load MODEL in llama-cpp-python's llama.cpp and record what it allocated in the measurement history."""
    try:
        import llama_cpp
    except ImportError:
        print(
            "memfit measure needs llama-cpp-python, the memfit[measure] extra: in memfit's checkout,"
            " .venv/bin/pip install -e '.[measure]'",
            file=sys.stderr,
        )
        return 2
    from memfit.estimator.cpu_variant import AUTO
    from memfit.estimator.kv_cache import is_llama_cpp_type
    from memfit.estimator.workload import WorkloadRequest, input_refusal, resolve_workload
    from memfit.measure import LlamaCppLoad, observation, parse_llama_log

    service = _service(args, _recorded_server(args))  # a running server's model directories, unless flags say
    service.index.refresh()
    artifact = service.index.get(args.model)
    if artifact is None:
        print(f"memfit: {args.model!r} is not a GGUF file on this machine", file=sys.stderr)
        return 1
    inapplicable = _not_measured(args, AUTO)
    if inapplicable is not None:
        print(f"memfit: measure {inapplicable}", file=sys.stderr)
        return 1
    subject = service.subject(args.model)
    if subject is None or service.history.db is None:
        print(f"memfit: {args.model!r} cannot be measured here", file=sys.stderr)
        return 1
    workload = resolve_workload(
        WorkloadRequest(
            _tokens(args),
            args.streams,
            args.key_bytes,
            args.value_bytes,
            args.mode,
            args.flash_attention,
            args.ubatch,
            args.kv_unified,
        ),
        subject.context_limit,
    )
    if (
        input_refusal(workload)
        or not is_llama_cpp_type(workload.key_element_bytes)
        or not is_llama_cpp_type(workload.value_element_bytes)
    ):
        print("memfit: llama.cpp cannot load that workload", file=sys.stderr)
        return 1
    print(
        f"measuring {subject.model_id} with {workload.allocated_tokens} tokens x {workload.streams} stream(s)",
        file=sys.stderr,
    )
    parts = parse_llama_log(LlamaCppLoad(llama_cpp).run(artifact.paths[0], workload))
    for name in ("weights", "kv_cache", "recurrent_state", "workspace"):
        print(f"{name:16s} {getattr(parts, name)} bytes")
    if not workload.knobs_at_defaults:  # observations record no runtime settings: history holds only the defaults
        print("not recorded: the measurement history keeps only llama.cpp's default flash attention, ubatch and cache")
        return 0
    row = observation(
        subject.model_id,
        subject.revision,
        subject.quant,
        subject.artifact_bytes,
        workload,
        parts,
        f"llama-cpp-python {llama_cpp.__version__}",
    )
    observation_id = service.history.record(row)
    print(f"recorded as observation {observation_id} in {service.history.db.path}")
    return 0


class _Version(argparse.Action):
    """--version, looked up only when asked for (importlib.metadata is a hundredth of a second of every start)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_version())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memfit",
        description="Will this local LLM fit in this machine's memory?",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", metavar="{serve,models,fit,plan,measure}")
    p = commands.add_parser("serve", help="run the HTTP server")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"the address to listen on (default {DEFAULT_HOST})")
    p.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"the port to listen on, 1-65535 (default {DEFAULT_PORT})"
    )
    p.add_argument(
        "--workers",
        type=count,
        default=1,
        metavar="N",
        help="worker processes answering on the one port (default 1); they share the state directory's"
        " header cache and measurement history; each has its own index and /metrics",
    )
    p.add_argument(
        "--metrics-public",
        action="store_true",
        help="serve GET /metrics without the bearer token (for a scraper that cannot send one)",
    )
    _add_service_flags(p)
    p.set_defaults(run=serve)

    p = commands.add_parser(
        "models", help="list the models memfit knows (what GET /v1/models lists)", description=ASKS_THE_SERVER
    )
    p.add_argument("filter", nargs="?", help="only ids containing this text, or matching this glob (case-insensitive)")
    p.add_argument("--detail", action="store_true", help="also each model's revision and directory")
    _add_service_flags(p)
    _add_local_flag(p)
    p.add_argument("--json", action="store_true", help="the raw API answer")
    p.set_defaults(run=models)

    p = commands.add_parser(
        "fit",
        help="will these models fit? (what POST /v1/models/fit/batch answers)",
        description=ASKS_THE_SERVER,
        epilog=EXAMPLES["fit"] + "\n" + EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", nargs="+", help="model ids, e.g. Qwen/Qwen3-8B-GGUF:Q4_K_M (at most 32)")
    add_workload_flags(p)
    add_placement_flags(p)
    add_profile_flag(p)
    p.add_argument("--json", action="store_true", help="the raw API answer")
    p.add_argument("--detail", action="store_true", help="each part of each answer, with its evidence and notes")
    _add_service_flags(p)
    _add_local_flag(p)
    p.set_defaults(run=fit)

    p = commands.add_parser(
        "plan",
        help="the largest context each verdict holds at, and the best quant (what POST /v1/models/fit/plan answers)",
        description=ASKS_THE_SERVER,
        epilog=EXAMPLES["plan"] + "\n" + EPILOG.replace("memfit fit;", "memfit plan, at the asked context;"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model",
        nargs="+",
        help="model ids (at most 32); a repository without a quant, e.g. Qwen/Qwen3-8B-GGUF, means every quant",
    )
    add_workload_flags(p)
    add_placement_flags(p)
    add_profile_flag(p)
    p.add_argument("--json", action="store_true", help="the raw API answer")
    _add_service_flags(p)
    _add_local_flag(p)
    p.set_defaults(run=plan)

    p = commands.add_parser(
        "measure",
        help="load a model in llama.cpp (memfit[measure]) and record what it used",
        epilog=EXAMPLES["measure"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="a model id of a GGUF file on this machine")
    add_workload_flags(p)
    _add_service_flags(p)
    p.set_defaults(run=measure)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"memfit {version('memfit')}"
    except PackageNotFoundError:
        return "memfit (not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.INFO if args.run is serve else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # `memfit ... | head`: the reader has gone; nothing more to say
        with contextlib.suppress(OSError, ValueError):  # so the exit's own flush of stdout stays quiet
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    except (UsageError, Refused) as exc:
        print(f"memfit {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StateFileError as exc:  # a measurement history that cannot be opened: the file and the fix, no traceback
        print(f"memfit: {exc.path}: {exc.reason}", file=sys.stderr)
        if exc.fix:
            print(f"memfit: {exc.fix}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
