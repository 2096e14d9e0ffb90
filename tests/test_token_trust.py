"""The token reaches only memfit: the CLI sends it only to a process that has proved it holds it, the record names
the address the server bound, every way the server stops removes the record, a forged answer is never shown,
text from a server never reaches the terminal raw, a Host that does not name the server is refused, the access
log keeps no credential, and a token nothing could send stops `memfit serve` at start.

Real processes and real sockets on loopback: `memfit serve` subprocesses, listeners that are not memfit (they
record every byte they receive), the CLI in this process or in its own."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from memfit.cli import main
from memfit.estimator.budget import BudgetSetting
from memfit.generated.models import WireFitPlanBatch, WireFitVerdictBatch, WireModelList
from memfit.http.host import names_server
from memfit.readers.model_roots import Root, RootKind
from memfit.render import render_fit, render_models, render_plan
from memfit.server_record import RECORD_FILE, ServerRecord, process_alive, read_record, write_record
from memfit.service_builder import build_service
from tests.conftest import AUTH, TOKEN, LiveServer
from tools.gguf_writers import qwen3, write_model

FORGED_BUDGET = 7 << 40  # what no machine here has: shown only if the forged answer were used
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # every control character but the newline
HOSTILE = "\x1b[2J\x1b]0;owned\x07\x9b31m"  # clear the screen, set the title, a C1 CSI


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("trust-models")
    write_model(qwen3(), directory / "mine.gguf")
    return directory


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFIT_", "HF_", "LLAMA_", "OLLAMA_"))}
    env.update(
        MEMFIT_STATE_DIR=str(tmp_path / "state"),
        HOME=str(tmp_path),
        XDG_CACHE_HOME=str(tmp_path / ".cache"),
        PYTHONWARNINGS="ignore",
        HF_HUB_OFFLINE="1",  # a fresh machine without the network: the Hub is never asked
    )
    return env


def _free_port(*families: socket.AddressFamily) -> int:
    """A port free on 127.0.0.1 and, with AF_INET6, on ::1 too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if socket.AF_INET6 not in families:
            return port
        with socket.socket(socket.AF_INET6) as s6, contextlib.suppress(OSError):
            s6.bind(("::1", port))
            return port


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


class Eavesdropper:
    """A listener that is not memfit: it keeps every byte it receives and answers every request with `reply`."""

    def __init__(self, family: socket.AddressFamily, host: str, port: int, reply: bytes) -> None:
        self.reply = reply
        self.received = bytearray()
        self.sock = socket.socket(family)
        if family == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.sock.bind((host, port))
        self.sock.listen()
        self.port: int = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(30)
                while data := conn.recv(1 << 16):
                    self.received += data
                    if b"\r\n\r\n" in data:
                        conn.sendall(self.reply)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=10)


def _forged_reply(models_dir: Path, capsys: pytest.CaptureFixture[str]) -> bytes:
    """A memfit-shaped answer to `fit mine` (worked out here, then given a budget no machine has), as a listener
    that is not memfit would send it, with a made-up proof."""
    assert main(["fit", "mine", "--models", str(models_dir), "--no-usual-dirs", "--json"]) in (0, 3, 4, 5)
    doc = json.loads(capsys.readouterr().out)
    for result in doc["results"]:
        result["budget"]["bytes"] = FORGED_BUDGET
        result["verdict"] = "good"
    body = json.dumps(doc).encode()
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmemfit-proof: " + b"0" * 64 + b"\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def _record(url: str, models_dir: Path, pid: int) -> ServerRecord:
    return ServerRecord(
        url=url,
        pid=pid,
        roots=(Root(str(models_dir), RootKind.PLAIN),),
        margin=Fraction(1, 10),
        budget=BudgetSetting.AVAILABLE,
        token_from_env=True,
    )


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own state directory and home; the CLI's flags and environment name no model directory."""
    for name, value in _env(tmp_path).items():
        monkeypatch.setenv(name, value)
    for name in ("MEMFIT_MODELS", "MEMFIT_TOKEN", "HF_HUB_CACHE", "HF_HOME", "LLAMA_CACHE", "OLLAMA_MODELS"):
        monkeypatch.delenv(name, raising=False)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    return state


def test_a_stale_record_whose_pid_lives_sends_no_token_and_shows_no_forged_answer(
    world: Path, models_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server stopped without removing its record, its pid was reused (here: a `sleep` of this user's), and
    someone else listens on its port: that listener never receives the token, and its answer is never shown."""
    monkeypatch.setenv("MEMFIT_TOKEN", TOKEN)
    fake = Eavesdropper(socket.AF_INET, "127.0.0.1", 0, _forged_reply(models_dir, capsys))
    unrelated = subprocess.Popen(["sleep", "120"])
    try:
        write_record(str(world), _record(f"http://127.0.0.1:{fake.port}", models_dir, unrelated.pid))
        for argv in (["fit", "mine"], ["fit", "mine", "--json"]):
            code = main(argv)
            out, err = capsys.readouterr()
            assert code in (0, 3, 4, 5) and "did not prove it is this state directory's server" in err, err
            assert "the token was not sent" in err and "Traceback" not in err
            assert "7168.00 GiB" not in out and str(FORGED_BUDGET) not in out  # answered here, not by the forger
            assert "mine" in out
    finally:
        unrelated.kill()
        unrelated.wait()
        fake.close()
    assert b"GET /health" in fake.received  # it was asked for its proof
    assert TOKEN.encode() not in fake.received and b"authorization" not in fake.received.lower()


def _serve(env: dict[str, str], *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "memfit.cli", "serve", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_record(record: Path, server: subprocess.Popen[str]) -> dict[str, Any]:
    while not record.exists():
        assert server.poll() is None, f"memfit serve exited {server.returncode}: {server.communicate()}"
        time.sleep(0.05)
    doc: dict[str, Any] = json.loads(record.read_text())
    return doc


@pytest.mark.skipif(not _ipv6_loopback(), reason="no ::1 on this machine")
def test_a_listener_on_ipv6_loopback_never_gets_the_token_of_a_localhost_server(
    world: Path, models_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memfit serve --host localhost` binds 127.0.0.1; another user listens on [::1] at the same port, and this
    machine resolves localhost to ::1 first (Debian's /etc/hosts; made so here): the record names 127.0.0.1, and
    the ::1 listener receives nothing."""
    port = _free_port(socket.AF_INET, socket.AF_INET6)
    squatter = Eavesdropper(socket.AF_INET6, "::1", port, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
    server = _serve(dict(os.environ), "--host", "localhost", "--port", str(port), "--models", str(models_dir))
    real_getaddrinfo = socket.getaddrinfo

    def ipv6_first(host: Any, *args: Any, **kwargs: Any) -> list[Any]:
        answers = real_getaddrinfo(host, *args, **kwargs)
        if host == "localhost":
            answers = real_getaddrinfo("::1", *args, **kwargs) + answers
        return answers

    monkeypatch.setattr(socket, "getaddrinfo", ipv6_first)
    try:
        doc = _wait_for_record(world / RECORD_FILE, server)
        assert doc["url"] == f"http://127.0.0.1:{port}"  # the address bound, never the name
        code = main(["fit", "mine", "--json"])  # the token file's token, asked of the recorded server
        out, err = capsys.readouterr()
        assert code in (0, 3, 4, 5) and err == "", err
        assert WireFitVerdictBatch.model_validate_json(out).results[0].model_id == "mine"
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)
        squatter.close()
    token = (world / "token").read_text().strip()
    assert squatter.received == b"" and token.encode() not in squatter.received


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_stops_serve_cleanly_and_the_access_log_keeps_no_token(
    tmp_path: Path, models_dir: Path, stop: signal.Signals
) -> None:
    """`kill` and `systemctl stop` (SIGTERM) and a closed terminal (SIGHUP) stop the server as a Ctrl-C does: its
    record removed, exit 0. A token put in a query string is not accepted, and the access log does not keep it."""
    env = _env(tmp_path)
    port = _free_port()
    server = _serve(env, "--port", str(port), "--models", str(models_dir))
    record = tmp_path / "state" / RECORD_FILE
    try:
        _wait_for_record(record, server)
        token = (tmp_path / "state" / "token").read_text().strip()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", f"/v1/models?access_token={token}&limit=5")
        assert connection.getresponse().status == 401  # a token in the query is no token
        connection.close()
    finally:
        server.send_signal(stop)
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0 and "Traceback" not in err, err
    assert not record.exists()
    assert token not in out + err and "access_token=REDACTED&limit=5" in out + err


def test_a_failed_start_removes_the_record(
    world: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The app fails to build after the record was written: the record goes with it."""
    import memfit.app

    seen: list[ServerRecord | None] = []

    def broken(*args: object, **kwargs: object) -> None:
        seen.append(read_record(str(world)))
        raise RuntimeError("the app could not be built")

    monkeypatch.setattr(memfit.app, "create_app", broken)
    with pytest.raises(RuntimeError):
        main(["serve", "--port", str(_free_port()), "--models", str(models_dir)])
    assert seen and seen[0] is not None and seen[0].pid == os.getpid()  # it was written
    assert not (world / RECORD_FILE).exists()
    capsys.readouterr()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may signal every process")
def test_another_users_process_is_not_taken_for_the_server() -> None:
    assert process_alive(1) is False  # init: root's, never this user's server
    assert process_alive(os.getpid()) is True


def test_escape_sequences_from_a_real_server_never_reach_the_terminal_raw(
    world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real server one of whose models names its architecture (GGUF metadata) with ESC, OSC and C1 sequences:
    every table and every --json answer the CLI prints has them escaped, never raw."""
    directory = tmp_path / "hostile-models"
    directory.mkdir()
    hostile = qwen3()
    hostile.arch += HOSTILE
    write_model(hostile, directory / "evil.gguf")
    write_model(qwen3(), directory / "mine.gguf")
    service = build_service([Root(str(directory), RootKind.PLAIN)], state_dir=str(tmp_path / "server-state"))
    monkeypatch.setenv("MEMFIT_TOKEN", TOKEN)
    with LiveServer(service) as server:
        write_record(str(world), _record(server.url, directory, os.getpid()))
        for argv, shown in (
            (["models", "evil"], "qwen3\\x1b[2J\\x1b]0;owned\\x07\\x9b31m"),
            (["models", "--detail"], "qwen3\\x1b[2J"),
            (["models", "--json"], "qwen3\\u001b[2J\\u001b]0;owned\\u0007\\u009b31m"),
            (["fit", "evil", "mine", "--detail"], ""),
            (["fit", "evil", "mine", "--json"], ""),
            (["plan", "evil", "mine"], ""),
            (["plan", "evil", "mine", "--json"], ""),
        ):
            code = main(argv)
            out, err = capsys.readouterr()
            assert "answering here" not in err and code in (0, 3, 4, 5), (argv, err)  # the server's answer
            assert not CONTROL.search(out) and not CONTROL.search(err), (argv, out, err)
            assert shown in out, (argv, out)  # shown, escaped


def _each_string_made_hostile(doc: Any, validate: Any) -> Any:
    """`doc` with HOSTILE appended to every string the wire model accepts that way (enum fields refuse it)."""

    def strings(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        if isinstance(node, str):
            yield path
        elif isinstance(node, dict):
            for k, v in node.items():
                yield from strings(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                yield from strings(v, (*path, i))

    for path in list(strings(doc)):
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        before = parent[path[-1]]
        parent[path[-1]] = before + HOSTILE
        try:
            validate(doc)
        except ValueError:
            parent[path[-1]] = before
    return doc


def test_every_string_of_a_server_answer_is_rendered_printable(client: Any, public_models: Path) -> None:
    """Every string of a real answer made hostile (model ids, notes, missing parts, limits, revisions, roots): no
    table the CLI renders from it has a control character but its newlines."""
    fit = client.post(
        "/v1/models/fit/batch", json=[{"modelId": m} for m in ("qwen3-f16", "Qwen/Qwen3-8B-GGUF:Q4_K_M", "mamba2")]
    ).json()
    plan = client.post("/v1/models/fit/plan", json=[{"modelId": "Qwen/Qwen3-8B-GGUF"}]).json()
    listing = client.get("/v1/models").json()

    batch = WireFitVerdictBatch.model_validate(_each_string_made_hostile(fit, WireFitVerdictBatch.model_validate))
    plans = WireFitPlanBatch.model_validate(_each_string_made_hostile(plan, WireFitPlanBatch.model_validate))
    models = WireModelList.model_validate(_each_string_made_hostile(listing, WireModelList.model_validate))
    assert HOSTILE in batch.results[0].model_id and HOSTILE in (batch.results[0].estimate.parts[0].note or "")
    rendered = [
        render_fit(batch.results, Fraction(1, 10), detail=True, colour=True),
        render_plan(plans.results, colour=True),
        render_models(models, detail=True),
    ]
    for text in rendered:
        assert not CONTROL.search(re.sub(r"\x1b\[\d+m", "", text)), text  # our own colours only
        assert "\\x1b[2J" in text


def _raw(port: int, path: str, host: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.putrequest("GET", path, skip_host=True)
    connection.putheader("Host", host)
    connection.endheaders()
    response = connection.getresponse()
    answer = response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    connection.close()
    return answer


def test_a_host_that_does_not_name_the_server_is_refused_and_never_echoed(live: LiveServer) -> None:
    """DNS rebinding: a page at evil.example whose name points at 127.0.0.1 gets a 421 for every path, and no
    redirect names it; the Swagger UI answers from 127.0.0.1 and localhost."""
    for host in ("evil.example", f"evil.example:{live.port}", f"127.0.0.1:{live.port + 1}", "127.0.0.2"):
        for path in ("/v1/ui", "/", "/health", "/v1/models"):
            status, headers, body = _raw(live.port, path, host)
            assert status == 421 and "location" not in headers, (host, path, status, headers)
            assert json.loads(body)["type"] == "invalidRequest" and "evil" not in body.decode()
    for host in (f"127.0.0.1:{live.port}", f"localhost:{live.port}", f"LOCALHOST:{live.port}"):
        status, headers, _ = _raw(live.port, "/v1/ui", host)
        assert status == 307 and headers["location"] in ("/v1/ui/", f"http://{host}/v1/ui/"), (host, headers)
        status, headers, body = _raw(live.port, "/v1/ui/", host)
        assert status == 200 and b"swagger" in body.lower()


def test_which_hosts_name_the_server() -> None:
    loopback, v6, lan = ("127.0.0.1", 9998), ("::1", 9998), ("192.168.1.5", 80)
    assert names_server("127.0.0.1:9998", loopback) and names_server("localhost:9998", loopback)
    assert names_server("localhost.:9998", loopback) and names_server("[::1]:9998", v6)
    assert names_server("localhost:9998", v6) and names_server("[0:0::1]:9998", v6)
    assert names_server("192.168.1.5", lan) and names_server(socket.gethostname(), lan)
    assert names_server("testserver", ("testserver", 80))  # starlette's test client
    assert names_server("localhost", loopback)  # no port named: the name decides
    for host, server in (
        ("localhost:9999", loopback),
        ("localhost", lan),
        ("evil.example:9998", loopback),
        ("127.0.0.1.evil.example:9998", loopback),
        ("[::1]:9998", loopback),
        ("::1:9998", v6),
        ("127.0.0.1:99999", loopback),
        ("127.0.0.1:x", loopback),
        ("[::1", v6),
        ("", loopback),
    ):
        assert not names_server(host, server), host


def test_a_token_in_the_query_is_not_accepted(client: Any) -> None:
    assert client.get(f"/v1/models?access_token={TOKEN}", headers={"Authorization": ""}).status_code == 401
    assert client.get("/v1/models", headers=AUTH).status_code == 200


@pytest.mark.parametrize(
    ("source", "token"),
    [("env", " "), ("env", "pässwort"), ("env", ""), ("env", "two words"), ("file", "two words"), ("file", "pä")],
)
def test_a_token_no_client_could_send_stops_serve_at_start(tmp_path: Path, source: str, token: str) -> None:
    env = _env(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    if source == "env":
        env["MEMFIT_TOKEN"] = token
    else:
        (state / "token").write_text(token + "\n")
        (state / "token").chmod(0o600)
    server = _serve(env, "--port", str(_free_port()), "--no-usual-dirs")
    try:
        out, err = server.communicate(timeout=60)
    finally:
        server.kill()
    assert server.returncode == 2 and "Traceback" not in err, err
    where = "MEMFIT_TOKEN" if source == "env" else str(state / "token")
    assert f"the token {'in ' if source == 'file' else ''}{where}" in err and "no client could send it" in err
    assert "memfit serving" not in out and not (state / RECORD_FILE).exists()
