"""`memfit fit`, `plan` and `models` give the answer of the `memfit serve` the user started, without its flags:
the server records itself in the state directory (server.json) and the CLI asks it over HTTP; a record whose
server is gone answers here with its model directories, and a record that cannot be used is said and ignored."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from memfit.cli import main
from memfit.estimator.budget import BudgetSetting
from memfit.estimator.machine import HostMemory
from memfit.generated.models import WireFitPlanBatch, WireFitVerdictBatch, WireModelList
from memfit.readers.declared_gpus import declared_gpus
from memfit.readers.model_roots import Root, RootKind
from memfit.server_proof import CHALLENGE_HEADER, PROOF_HEADER, proof
from memfit.server_record import (
    RECORD_FILE,
    ServerRecord,
    client_url,
    read_record,
    remove_record,
    write_record,
)
from memfit.service_builder import build_service
from tests.conftest import TOKEN, LiveServer
from tools.gguf_writers import qwen3, write_model

CATALOG_ID = "Qwen/Qwen3-8B-GGUF:Q4_K_M"
PROVEN_TOKEN = "secret-token"
SERVER_STACK = ("connexion", "uvicorn", "starlette", "prometheus_client")


@pytest.fixture(scope="module")
def only_the_server_knows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory the CLI is never told about: only the server indexes it."""
    directory = tmp_path_factory.mktemp("server-models")
    write_model(qwen3(), directory / "mine.gguf")
    return directory


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private state directory and a home without model caches; the CLI's own flags and environment name no
    model directory. Returns the state directory."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("MEMFIT_STATE_DIR", str(state))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("MEMFIT_MODELS", "MEMFIT_TOKEN", "HF_HUB_CACHE", "HF_HOME", "LLAMA_CACHE", "OLLAMA_MODELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / ".cache"))
    return state


def _record(url: str, roots: Path, *, pid: int | None = None, margin: Fraction = Fraction(1, 10)) -> ServerRecord:
    return ServerRecord(
        url=url,
        pid=os.getpid() if pid is None else pid,
        roots=(Root(str(roots), RootKind.PLAIN),),
        margin=margin,
        budget=BudgetSetting.AVAILABLE,
        token_from_env=True,
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def fixed_server(only_the_server_knows: Path) -> Iterator[LiveServer]:
    """A real uvicorn server whose budget is fixed at 3 GiB: an answer worked out in the CLI's process (this
    machine's free memory) would differ from it."""
    service = build_service(
        [Root(str(only_the_server_knows), RootKind.PLAIN)],
        read_host=lambda: HostMemory(available=3 << 30, total=4 << 30),
        read_committed=lambda: 0,
    )
    service.index.refresh()
    service.listing.warm(service.index.artifacts())  # the catalog weighed and every header read: the listing the
    # tests compare is the settled one, not one the index's thread is still filling in
    with LiveServer(service) as server:
        yield server


def test_fit_plan_and_models_answer_as_the_running_server(
    world: Path,
    fixed_server: LiveServer,
    only_the_server_knows: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_record(str(world), _record(fixed_server.url, only_the_server_knows, margin=Fraction(1, 5)))
    monkeypatch.setenv("MEMFIT_TOKEN", TOKEN)
    ids = ["mine", CATALOG_ID]
    with fixed_server.client() as client:
        served_fit = WireFitVerdictBatch.model_validate(
            client.post("/v1/models/fit/batch", json=[{"modelId": m, "allocatedTokens": 8192} for m in ids]).json()
        )
        served_plan = WireFitPlanBatch.model_validate(
            client.post("/v1/models/fit/plan", json=[{"modelId": m, "streams": 2} for m in ids]).json()
        )
        served_models = WireModelList.model_validate(client.get("/v1/models").json())

    code, out, err = _run(capsys, "fit", *ids, "--tokens", "8192", "--json")
    assert err == "" and WireFitVerdictBatch.model_validate_json(out) == served_fit
    assert code == max({"good": 0, "tight": 3, "oversize": 4, "unknown": 5}[r.verdict] for r in served_fit.results)
    assert {r.budget.bytes for r in served_fit.results} == {3 << 30}  # the server's reading, not this process's
    code, out, err = _run(capsys, "plan", *ids, "--streams", "2", "--json")
    assert err == "" and WireFitPlanBatch.model_validate_json(out) == served_plan
    code, out, err = _run(capsys, "models", "--json")
    assert code == 0 and err == "" and WireModelList.model_validate_json(out) == served_models

    code, out, err = _run(capsys, "fit", "mine", "--tokens", "8192")  # the table, with the server's margin
    assert err == "" and out.splitlines()[2].startswith("mine ") and "budget 3.00 GiB" in out
    assert "20% margin" in out or "TIGHT" in out or "OVERSIZE" in out
    code, _, err = _run(capsys, "fit", "mine", "no/such-model")  # the hints come from the server's ids
    assert code == 6 and "not found: 'no/such-model'" in err and err.count("\n") == 1
    code, out, _ = _run(capsys, "models", "mine")
    assert code == 0 and out.splitlines()[2].startswith("mine ")


def test_flags_that_configure_the_estimator_answer_here(
    world: Path, fixed_server: LiveServer, only_the_server_knows: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_record(str(world), _record(fixed_server.url, only_the_server_knows))
    for flags in (["--local"], ["--no-usual-dirs"], ["--budget", "total"], ["--margin", "0.2"]):
        code, _, err = _run(capsys, "fit", "mine", *flags)
        assert code == 6 and "not found: 'mine'" in err, flags  # the server's directory is not this process's
    code, out, _ = _run(capsys, "fit", "mine", "--models", str(only_the_server_knows), "--json")
    assert code in (0, 3, 4, 5)
    assert WireFitVerdictBatch.model_validate_json(out).results[0].budget.bytes != 3 << 30


def test_a_stale_record_answers_here_with_the_recorded_directories(
    world: Path, only_the_server_knows: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{s.getsockname()[1]}"
    for pid, said in ((gone.pid, "is not running"), (os.getpid(), "cannot be reached (Connection refused)")):
        write_record(str(world), _record(refused, only_the_server_knows, pid=pid))
        code, out, err = _run(capsys, "fit", "mine")
        assert code in (0, 3, 4, 5) and out.splitlines()[2].startswith("mine ")
        assert err.count("\n") == 1 and said in err and "answering here with its model directories" in err
        assert "Traceback" not in err


def test_a_stale_record_answers_here_with_the_recorded_gpus(
    world: Path, only_the_server_knows: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server told to assume GPUs (--gpu, MEMFIT_GPUS) records them: an answer worked out here for it uses them,
    as the server would; --gpu here answers with this command's own."""
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    gpus = declared_gpus(["cuda:24GiB", "cuda:8GiB:6GiB"], {})
    record = replace(_record("http://127.0.0.1:9", only_the_server_knows, pid=gone.pid), gpus=gpus)
    write_record(str(world), record)
    assert read_record(str(world)) == replace(record, path=os.path.join(world, "server.json"))
    code, out, _ = _run(capsys, "fit", "mine", "--json")
    devices = WireFitVerdictBatch.model_validate_json(out).results[0].devices
    assert [(d.name, d.source, d.free_bytes, d.total_bytes) for d in devices[1:]] == [
        ("CUDA0", "declared", 24 << 30, 24 << 30),
        ("CUDA1", "declared", 6 << 30, 8 << 30),
    ]
    code, out, _ = _run(capsys, "fit", "mine", "--json", "--gpu", "metal:48GiB", "--models", str(only_the_server_knows))
    devices = WireFitVerdictBatch.model_validate_json(out).results[0].devices
    assert [(d.name, d.unified, d.free_bytes) for d in devices[1:]] == [("MTL0", True, 48 << 30)]


@pytest.mark.parametrize(
    "fault",
    ["not json", "another format", "an https url", "a symlink", "group-writable", "a directory", "a fifo", "huge"],
)
def test_a_record_that_cannot_be_used_is_said_and_the_flags_answer(
    world: Path, only_the_server_knows: Path, capsys: pytest.CaptureFixture[str], fault: str
) -> None:
    path = world / RECORD_FILE
    good = json.loads(Path(write_record(str(world), _record("http://127.0.0.1:9", only_the_server_knows))).read_text())
    path.unlink()
    if fault == "not json":
        path.write_text("{ not json")
    elif fault == "another format":
        path.write_text(json.dumps({**good, "format": 99}))
    elif fault == "an https url":
        path.write_text(json.dumps({**good, "url": "https://elsewhere.example:443"}))
    elif fault == "a symlink":
        target = world / "elsewhere.json"
        target.write_text(json.dumps(good))
        path.symlink_to(target)
    elif fault == "group-writable":
        path.write_text(json.dumps(good))
        path.chmod(0o664)
    elif fault == "a directory":
        path.mkdir()
    elif fault == "a fifo":
        os.mkfifo(path)
    else:
        path.write_text(json.dumps({**good, "pad": "x" * (1 << 17)}))
    if path.is_file() and not path.is_symlink() and fault != "group-writable":
        path.chmod(0o600)
    code, out, err = _run(capsys, "fit", CATALOG_ID)
    assert code in (0, 3, 4, 5) and out.splitlines()[2].startswith(CATALOG_ID)  # answered here, from the flags
    assert err.count("\n") == 1 and str(path) in err and "answering here, from the flags and environment" in err
    code, _, err = _run(capsys, "fit", "mine")  # the recorded directories are not used
    assert code == 6 and "Traceback" not in err


def test_a_refused_token_says_what_to_do_and_answers_here(
    world: Path,
    fixed_server: LiveServer,
    only_the_server_knows: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_record(str(world), _record(fixed_server.url, only_the_server_knows))  # started with MEMFIT_TOKEN
    (world / "token").write_text("not-the-servers-token\n")
    (world / "token").chmod(0o600)
    code, out, err = _run(capsys, "fit", "mine")
    assert code in (0, 3, 4, 5) and out.splitlines()[2].startswith("mine ")
    assert "did not prove it is this state directory's server" in err and "the token was not sent" in err
    assert "if it is memfit, it was started with MEMFIT_TOKEN: give this command the same MEMFIT_TOKEN" in err
    assert err.count("\n") == 1
    write_record(str(world), replace(_record(fixed_server.url, only_the_server_knows), token_from_env=False))
    _, _, err = _run(capsys, "fit", "mine")  # it read a token file that has changed since
    assert f"{world / 'token'} changed since it started: restart it" in err
    monkeypatch.setenv("MEMFIT_TOKEN", "not-the-servers-either")
    _, _, err = _run(capsys, "fit", "mine")
    assert f"it uses the token in {world / 'token'}: unset MEMFIT_TOKEN here" in err


class _FakeServer(http.server.BaseHTTPRequestHandler):
    """Answers a challenged /health with the proof for PROVEN_TOKEN (a server holding the token), and every other
    request with what the test sets: (status, content type, body, extra headers)."""

    protocol_version = "HTTP/1.1"  # the proof and the request share one connection
    answer: tuple[int, str, bytes, dict[str, str]] = (200, "text/plain", b"", {})
    seen: list[tuple[str, str | None]] = []

    def _reply(self) -> None:
        nonce = self.headers.get(CHALLENGE_HEADER)
        if self.path == "/health" and nonce:
            answer = proof(PROVEN_TOKEN, nonce, *self.connection.getsockname()[:2])
            self.send_response(200)
            self.send_header(PROOF_HEADER, answer)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        status, content_type, body, headers = type(self).answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _reply

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[tuple[str, type[_FakeServer]]]:
    handler = type("Handler", (_FakeServer,), {"seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_answers_that_are_not_memfit_s_fall_back_and_a_refusal_is_a_usage_error(
    world: Path,
    only_the_server_knows: Path,
    fake_server: tuple[str, type[_FakeServer]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, handler = fake_server
    monkeypatch.setenv("MEMFIT_TOKEN", PROVEN_TOKEN)
    write_record(str(world), _record(url, only_the_server_knows))
    problem = {"type": "invalidRequest", "title": "Bad Request", "status": 400, "detail": "at most 32 requests"}
    handler.answer = (400, "application/problem+json", json.dumps(problem).encode(), {})
    code, out, err = _run(capsys, "fit", "mine")
    assert (
        code == 2
        and out == ""
        and err.strip() == f"memfit fit: the server at {url} refused the request: at most 32 requests"
    )
    for answer, said in (
        ((200, "text/html", b"<html>hello</html>", {}), "answered something that is not memfit's"),
        ((503, "application/problem+json", b'{"type": "failed", "detail": "busy"}', {}), "answered 503 failed: busy"),
        ((307, "text/plain", b"", {"Location": "http://127.0.0.1:9/v1/models/fit/batch"}), "answered 307"),
    ):
        handler.answer = answer
        code, out, err = _run(capsys, "fit", "mine")
        assert code in (0, 3, 4, 5) and out.splitlines()[2].startswith("mine "), said
        assert said in err and err.count("\n") == 1 and "Traceback" not in err
    assert {auth for _, auth in handler.seen} == {f"Bearer {PROVEN_TOKEN}"}
    assert {path for path, _ in handler.seen} == {"/v1/models/fit/batch"}


def test_the_record_is_private_and_removed_only_by_its_own_server(world: Path, only_the_server_knows: Path) -> None:
    path = write_record(str(world), _record("http://127.0.0.1:9998", only_the_server_knows, pid=4242))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    record = read_record(str(world))
    assert (
        record is not None
        and record.pid == 4242
        and record.roots == (Root(str(only_the_server_knows), RootKind.PLAIN),)
    )
    remove_record(str(world), 4343)  # a server started since keeps its record
    assert os.path.exists(path)
    remove_record(str(world), 4242)
    assert not os.path.exists(path) and read_record(str(world)) is None
    assert client_url("0.0.0.0", 9998) == "http://127.0.0.1:9998" and client_url("::", 1) == "http://[::1]:1"
    assert client_url("192.168.1.5", 80) == "http://192.168.1.5:80"


def _memfit(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memfit.cli", *argv], capture_output=True, text=True, env=env, timeout=120
    )


def test_memfit_serve_records_itself_the_cli_asks_it_and_ctrl_c_removes_the_record(
    tmp_path: Path, only_the_server_knows: Path
) -> None:
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFIT_", "HF_", "LLAMA_", "OLLAMA_"))}
    env.update(
        MEMFIT_STATE_DIR=str(state),
        HOME=str(tmp_path),
        XDG_CACHE_HOME=str(tmp_path / ".cache"),
        PYTHONWARNINGS="ignore",
        HF_HUB_OFFLINE="1",  # a fresh machine without the network: the Hub is never asked
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "memfit.cli", "serve", "--port", str(port), "--models", str(only_the_server_knows)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    record = state / RECORD_FILE
    try:
        deadline = time.monotonic() + 60
        while not record.exists():
            assert server.poll() is None and time.monotonic() < deadline, "memfit serve wrote no record"
            time.sleep(0.1)
        doc = json.loads(record.read_text())
        assert doc["url"] == f"http://127.0.0.1:{port}" and doc["pid"] == server.pid
        assert stat.S_IMODE(record.stat().st_mode) == 0o600 and doc["tokenFromEnvironment"] is False
        token = (state / "token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}  # the first answer waits for the start (seconds on a busy machine)
        while "mine" not in httpx.get(f"{doc['url']}/v1/models", headers=auth, timeout=60).text:
            assert time.monotonic() < deadline, "memfit serve did not index its directory"
            time.sleep(0.1)

        asked = _memfit(env, "fit", "mine", "--json")  # no --models: the server's directory
        assert asked.returncode in (0, 3, 4, 5) and asked.stderr == ""
        assert WireFitVerdictBatch.model_validate_json(asked.stdout).results[0].model_id == "mine"
        assert _memfit(env, "fit", "mine", "--local").returncode == 6

        probe = (  # asking the server imports no server stack
            "import json, sys\n"
            "from memfit.cli import main\n"
            "code = main(['models', 'mine', '--json'])\n"
            "print(json.dumps([code, sorted({m.split('.')[0] for m in sys.modules})]))\n"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
        code, modules = json.loads(done.stdout.strip().splitlines()[-1])
        assert code == 0 and [m for m in SERVER_STACK if m in modules] == [] and done.stderr == ""
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0 and "Traceback" not in err
    assert not record.exists()  # a clean shutdown removes it
    gone = _memfit(env, "fit", "mine")  # nothing recorded: the flags and environment, which do not name it
    assert gone.returncode == 6 and "not found: 'mine'" in gone.stderr


def test_a_state_directory_others_can_write_is_not_trusted(
    world: Path, fixed_server: LiveServer, only_the_server_knows: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whoever can write the record says where the token goes: a state directory others can write is refused
    before any request is sent."""
    write_record(str(world), _record(fixed_server.url, only_the_server_knows))
    world.chmod(0o777)
    try:
        code, _, err = _run(capsys, "fit", "mine")
    finally:
        world.chmod(0o700)
    assert code == 6 and "is writable by its group or others" in err and "answering here, from the flags" in err
