"""`memfit models` and `memfit fit`: the API's answers at a terminal, from the same estimator."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from memfit.cli import main
from memfit.generated.models import WireFitVerdictBatch, WireFitVerdictResult, WireModelList
from memfit.render import explain, render_models, size, use_colour
from tools.truth import records

EXIT_FOR_WORD = {"GOOD": 0, "TIGHT": 3, "OVERSIZE": 4, "UNKNOWN": 5}  # the README's exit codes


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_fit_prints_a_table_for_a_local_file_and_a_catalog_id(
    public_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(
        capsys,
        "fit",
        "qwen3-f16",
        "Qwen/Qwen3-8B-GGUF:Q8_0",
        "--tokens",
        "8192",
        "--models",
        str(public_models),
        "--no-usual-dirs",
    )
    header, rule, local, local_why, catalog, catalog_why, budget = out.splitlines()
    # the 9 GiB catalog model's verdict is this host's free memory's: the exit code is the worst row's
    assert code == max(EXIT_FOR_WORD[local.split()[-1]], EXIT_FOR_WORD[catalog.split()[-1]])
    assert header.split() == ["MODEL", "TOKENS", "x", "STREAMS", "FLOOR..CEILING", "GPU", "VERDICT"]
    assert local.split()[:4] == ["qwen3-f16", "8192", "x", "1"] and local.endswith("GOOD")
    assert local_why.startswith("  GOOD: the ceiling") and catalog.startswith("Qwen/Qwen3-8B-GGUF:Q8_0 ")
    assert "GiB.." in catalog and budget.startswith("budget ") and "hostAvailable" in budget


def test_fit_json_is_the_api_answer(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys,
        "fit",
        "llama-gqa-f16",
        "--streams",
        "2",
        "--key-bytes",
        "1",
        "--json",
        "--models",
        str(public_models),
        "--no-usual-dirs",
    )
    batch = WireFitVerdictBatch.model_validate_json(out)
    assert code == 0 and batch.results[0].estimate.workload.streams == 2
    assert batch.results[0].estimate.workload.key_element_bytes == 1


def test_fit_takes_the_cpu_variant(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--cpu-variant: echoed; a name ggml ships no variant of is unknown + workloadUnsupported; `any` holds the
    Q8_0 model's packing where the host runs sapphirerapids."""
    answers = {}
    for variant in ("any", "pentium", "x64"):
        code, out, _ = _run(
            capsys,
            "fit",
            "llama-gqa-q8_0",
            "--cpu-variant",
            variant,
            "--json",
            "--models",
            str(public_models),
            "--no-usual-dirs",
        )
        (answers[variant],) = WireFitVerdictBatch.model_validate_json(out).results
        assert answers[variant].estimate.workload.cpu_variant == variant
    assert "workloadUnsupported" in answers["pentium"].limits and answers["pentium"].verdict == "unknown"
    x64 = next(r["weights_bytes"] for r in records("results_probe.jsonl") if r["model"] == "llama-gqa-q8_0")
    weights = next(p for p in answers["x64"].estimate.parts if p.component == "weights")
    assert (
        weights.bytes == x64 and answers["any"].estimate.lower_bound_bytes == answers["x64"].estimate.lower_bound_bytes
    )
    code, _, err = _run(capsys, "measure", "llama-gqa-q8_0", "--cpu-variant", "haswell", "--no-usual-dirs")
    assert code != 0 and ("--cpu-variant" in err or "llama-cpp-python" in err)


def test_fit_says_which_ids_it_does_not_know(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(
        capsys, "fit", "qwen3-f16", "no/such-model", "--models", str(public_models), "--no-usual-dirs"
    )
    assert code == 6 and "not found: 'no/such-model'" in err and out.splitlines()[2].startswith("qwen3-f16 ")


def test_fit_shows_a_refusal(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "fit", "llama-gqa-f16", "--tokens", "100000", "--models", str(public_models), "--no-usual-dirs"
    )
    # the writer's llama.context_length (tools/gguf_writers.py): the refusal says the limit it met
    assert code == 5 and "refused (contextExceedsModelLimit): the limit is 8192 per stream" in out
    assert "UNKNOWN" in out


def test_models_lists_local_then_catalog(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "models", "--models", str(public_models), "--no-usual-dirs")
    lines = out.split("\n\n")[0].splitlines()  # the table, then a line per unreadable file
    assert code == 0 and lines[0].split()[:3] == ["MODEL", "SOURCE", "ARCH"]
    sources = [line.split()[1] for line in lines[2:]]
    assert sources[0] == "local" and sources[-1] == "catalog" and sources == sorted(sources, key="local".__ne__)
    code, out, _ = _run(capsys, "models", "--json", "--models", str(public_models), "--no-usual-dirs")
    listing = WireModelList.model_validate(json.loads(out))
    assert any(m.model_id == "qwen3-f16" and m.source == "local" for m in listing.models)


def test_catalog_rows_show_the_weights_a_fit_counts(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`SIZE ?` on every catalog row, though `fit` knew the weights: a catalog row shows them, marked `~`."""
    model_id = "Qwen/Qwen3-0.6B-GGUF:Q8_0"
    code, out, _ = _run(capsys, *_args(public_models, "models", model_id))
    row = next(line for line in out.splitlines() if line.startswith(model_id))
    code, fit, _ = _run(capsys, *_args(public_models, "fit", model_id, "--json"))
    parts = json.loads(fit)["results"][0]["estimate"]["parts"]
    weights = next(p["bytes"] for p in parts if p["component"] == "weights")
    assert code == 0 and f" ~{size(weights)} " in row
    assert "~ the weights llama.cpp would load here" in out
    _, local, _ = _run(capsys, *_args(public_models, "models", "qwen3-f16"))
    assert "~" not in local


def test_a_row_still_being_read_says_so() -> None:
    entry: dict[str, object] = {
        "modelId": "m0",
        "source": "local",
        "root": "/m",
        "architecture": "",
        "quant": "",
        "revision": "",
    }
    entry |= {"artifactBytes": None, "contextLimit": None, "hasProjector": False, "reading": True}
    out = render_models(WireModelList.model_validate({"models": [entry]}), width=80)
    assert out.splitlines()[2].split()[:3] == ["m0", "local", "(reading)"]
    assert "(reading): the server has not read the header of 1 of these files yet; ask again" in " ".join(out.split())


def _args(public_models: Path, *argv: str) -> list[str]:
    return [*argv, "--models", str(public_models), "--no-usual-dirs"]


def test_fit_detail_shows_each_part_in_human_units(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, *_args(public_models, "fit", "qwen3-f16", "Qwen/Qwen3-8B-GGUF:Q8_0", "--detail"))
    assert code in EXIT_FOR_WORD.values() and "PART" in out and "measuredArtifact" in out and "derivedLayout" in out
    assert not re.search(r"\d{4,} bytes", out) and "--detail shows" not in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and line.split()}
    size = r"\d+\.\d\d [KMG]iB"
    assert re.match(rf"  workspace +{size}\.\.{size} ", rows["workspace"])  # floor .. ceiling: the slack is here
    assert re.match(rf"  kvCache +{size} +derivedLayout", rows["kvCache"])  # exact: one number


@pytest.mark.parametrize("detail", [False, True], ids=["summary", "detail"])
@pytest.mark.parametrize(
    "ids",
    [["qwen3-f16"], ["qwen3-f16", "llama-gqa-f16", "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q8_0"]],
    ids=["one", "several"],
)
def test_fit_fits_100_columns(
    public_models: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, ids: list, detail: bool
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = _run(capsys, *_args(public_models, "fit", *ids, *(["--detail"] if detail else [])))
    assert code != 2 and out.count("VERDICT") == 1
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert "\033[" not in out  # not a terminal: no colour


def test_models_fits_100_columns(
    public_models: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    for detail in ([], ["--detail"]):
        code, out, _ = _run(capsys, *_args(public_models, "models", *detail))
        assert code == 0 and max(len(line) for line in out.splitlines()) <= 100


def test_colour_only_on_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(Tty()) and not use_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())


def test_fit_names_unknown_ids_with_the_nearest_known(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo, lower, quant = "Qwen/Qwen3-8B-GUF:Q4_K_M", "qwen/qwen3-8b-gguf:q4_k_m", "Qwen/Qwen3-8B-GGUF:Q3_K_XL"
    code, out, err = _run(capsys, *_args(public_models, "fit", "qwen3-f16", typo, lower, quant))
    assert code == 6 and out.startswith("MODEL") and "qwen3-f16" in out
    assert lower in out  # the Hub's ids ignore case: found, and shown as asked
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("memfit: not found: ") for line in lines)
    assert typo in lines[0] and "did you mean Qwen/Qwen3-8B-GGUF:Q4_K_M" in lines[0]
    assert "Qwen/Qwen3-8B-GGUF has Q4_K_M, Q5_K_M, Q6_K, Q8_0" in lines[1]


def test_fit_refuses_more_than_32_ids(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "fit", *["qwen3-f16"] * 33, "--no-usual-dirs")
    assert code == 2 and out == "" and "at most 32 models, got 33" in err


def _result(public_models: Path, capsys: pytest.CaptureFixture[str], model: str) -> WireFitVerdictResult:
    _, out, _ = _run(capsys, *_args(public_models, "fit", model, "--json"))
    return WireFitVerdictBatch.model_validate_json(out).results[0]


def test_each_verdict_says_what_decided_it(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = _result(public_models, capsys, "qwen3-f16")
    floor, ceiling = r.estimate.lower_bound_bytes, r.estimate.upper_bound_bytes
    assert ceiling is not None

    def said(verdict: str, budget: int, **estimate: object) -> str:
        changed = r.model_copy(
            update={
                "verdict": verdict,
                "budget": r.budget.model_copy(update={"bytes": budget}),
                "estimate": r.estimate.model_copy(update=estimate),
            }
        )
        return explain(changed, Fraction(1, 10))

    assert said("good", ceiling * 2).startswith("GOOD: the ceiling") and "10% margin" in said("good", ceiling * 2)
    assert said("tight", ceiling).startswith("TIGHT: fits, but within the 10% margin")
    oversize = said("oversize", floor - (1 << 20))
    assert oversize.startswith("OVERSIZE: even the floor") and oversize.endswith("by 1.00 MiB")
    assert "the ceiling" in said("unknown", ceiling - 1) and "does not" in said("unknown", ceiling - 1)
    parts = [
        p.model_copy(update={"bytes": None, "basis": "unknown"}) if p.component == "workspace" else p
        for p in r.estimate.parts
    ]
    unknown = said("unknown", ceiling * 2, upper_bound_bytes=None, parts=parts)
    assert "the ceiling is unknown" in unknown and "workspace" in unknown


def test_models_takes_a_filter(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, *_args(public_models, "models", "QWEN3-8b"))
    ids = [line.split()[0] for line in out.split("\n\n")[0].splitlines()[2:]]  # the table, then its notes
    assert code == 0 and ids and all("qwen3-8b" in i.lower() for i in ids)
    code, out, _ = _run(capsys, *_args(public_models, "models", "*8B*:q8_0"))
    ids = [line.split()[0] for line in out.split("\n\n")[0].splitlines()[2:]]  # the table, then its notes
    assert code == 0 and ids and all(i.endswith(":Q8_0") and "8b" in i.lower() for i in ids)
    code, _, err = _run(capsys, *_args(public_models, "models", "no-such-thing"))
    assert code == 6 and "no model id matches" in err


def test_models_flags_an_unreadable_file(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, *_args(public_models, "models", "broken/"))
    assert code == 0 and "UNREADABLE" in out and "broken/garbage is unreadable: " in out
    _, out, _ = _run(capsys, *_args(public_models, "models", "--json"))
    entries = {m.model_id: m for m in WireModelList.model_validate_json(out).models}
    assert entries["broken/garbage"].unreadable and entries["qwen3-f16"].unreadable is None


def test_models_path_that_is_a_file_or_missing(
    public_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "models", "--models", str(public_models / "qwen3-f16.gguf"), "--no-usual-dirs")
    assert code == 2 and "is a file, not a directory" in err
    code, _, err = _run(capsys, "models", "--models", str(tmp_path / "nowhere"), "--no-usual-dirs")
    assert code == 0 and "does not exist" in err


def test_bare_memfit_prints_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys)
    assert code == 2 and "usage: memfit" in err and "exit codes" in err
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out.startswith("memfit ")
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "the address to listen on" in out and "1-65535" in out


def test_a_port_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["serve", "--port", "99999"])
    assert exit.value.code == 2 and "a port is 1-65535, got 99999" in capsys.readouterr().err


def test_a_busy_port_is_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = _run(capsys, "serve", "--port", str(port), "--no-usual-dirs")
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}: the address is already in use" in err
    assert "serving" not in out  # said only once the port is bound


def _memfit(*argv: str, sigint_ignored: bool = False) -> subprocess.Popen:
    """`memfit ARGV` in a new process; `sigint_ignored`: started as a shell starts a background job."""
    return subprocess.Popen(
        [sys.executable, "-m", "memfit.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )


def test_a_closed_pipe_exits_quietly(public_models: Path) -> None:
    proc = _memfit(*_args(public_models, "models", "--detail"))
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head` that has read enough
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 1 and "Traceback" not in err and "BrokenPipe" not in err


def test_ctrl_c_on_serve_stops_it_cleanly() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _memfit("serve", "--port", str(port), "--no-usual-dirs")
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith("memfit serving")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until it answers
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            break
        time.sleep(0.1)
    try:
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        assert proc.wait(timeout=30) == 0 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    finally:
        proc.kill()  # a server that did not stop is no later test's child


def test_a_ctrl_c_before_uvicorn_runs_stops_a_background_serve(tmp_path: Path) -> None:
    """A shell starts `memfit serve &` with SIGINT ignored; a SIGINT sent once the record is written, before uvicorn
    installs its own handler, was lost, and the server ran on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _memfit("serve", "--port", str(port), "--no-usual-dirs", sigint_ignored=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        while not (line := proc.stdout.readline()).startswith("server record:"):
            assert line, "serve ended before it wrote its record"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert "Traceback" not in proc.stderr.read()


SERVER_STACK = ("connexion", "uvicorn", "starlette", "prometheus_client")


def test_fit_of_a_catalog_id_imports_no_server_stack_and_no_numpy() -> None:
    """`memfit fit <id>` starts fast: the server's libraries, pydantic (the table is built with the generated
    dataclasses), numpy with the whole gguf package, and huggingface_hub (offline: the Hub is not asked), stay out."""
    probe = (
        "import json, sys\n"
        "from memfit.cli import main\n"
        "code = main(['fit', 'Qwen/Qwen3-8B-GGUF:Q4_K_M', '--no-usual-dirs', '--offline'])\n"
        "print(json.dumps([code, sorted({m.split('.')[0] for m in sys.modules})]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    code, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert code in (0, 3, 4, 5)  # a verdict (it depends on this machine's free memory)
    assert [m for m in SERVER_STACK if m in modules] == []
    assert "pydantic" not in modules and "importlib.metadata" not in modules
    assert "numpy" not in modules and "gguf" in modules  # gguf.constants alone (memfit.gguf_constants)
    assert "huggingface_hub" not in modules and "httpx2" not in modules


@pytest.mark.parametrize(
    "args",
    [["plan", "Qwen/Qwen3-8B-GGUF:Q4_K_M", "--no-usual-dirs", "--offline"], ["models", "--no-usual-dirs", "--offline"]],
    ids=["plan", "models"],
)
def test_the_plan_and_model_tables_import_no_pydantic(args: list[str]) -> None:
    """`memfit plan` and `memfit models` print their tables from the generated dataclasses too: no pydantic, no
    server stack."""
    probe = (
        "import json, sys\n"
        "from memfit.cli import main\n"
        f"code = main({args!r})\n"
        "print(json.dumps([code, sorted({m.split('.')[0] for m in sys.modules})]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    code, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert code in (0, 3, 4, 5) and "MODEL" in done.stdout  # a table was printed (a verdict's exit code for plan)
    assert [m for m in SERVER_STACK if m in modules] == [] and "pydantic" not in modules


def test_gguf_constants_are_gguf_s_own_once_gguf_is_imported() -> None:
    import gguf

    from memfit import gguf_constants

    assert gguf_constants.GGMLQuantizationType is gguf.GGMLQuantizationType and gguf_constants.Keys is gguf.Keys


def test_plan_prints_each_quant_with_its_maxima_and_marks_the_best(
    public_models: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # wide enough for the whole ids
    code, out, err = _run(
        capsys, "plan", "Qwen/Qwen3-8B-GGUF", "qwen3-f16", "no/such", "--tokens", "8192",
        "--models", str(public_models), "--no-usual-dirs",
    )  # fmt: skip
    assert code == 6 and "not found: 'no/such'" in err
    header, rule, *rows = out.splitlines()
    assert header.split() == ["MODEL", "TOKENSxS", "FLOOR..CEILING", "MAX", "GOOD/TIGHT/POSSIBLE", "VERDICT"]
    quants = [r for r in rows if "Qwen/Qwen3-8B-GGUF:" in r]
    assert [r.strip("* ").split()[0] for r in quants] == [
        f"Qwen/Qwen3-8B-GGUF:{q}" for q in ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M")
    ]
    assert sum(r.startswith("*") for r in rows) <= 1 and any(r.strip().startswith("qwen3-f16 ") for r in rows)
    assert all(re.fullmatch(r"(\d+|-)/(\d+|-)/(\d+|-)", r.split()[-2]) for r in quants)
    code, out, _ = _run(
        capsys, "plan", "Qwen/Qwen3-8B-GGUF", "--json", "--models", str(public_models), "--no-usual-dirs"
    )
    (result,) = json.loads(out)["results"]
    assert [q["quant"] for q in result["quants"]] == ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M"]
    best = next((q["quant"] for q in result["quants"] if (q["maxAllocatedTokens"]["good"] or 0) >= 4096), None)
    assert result["bestQuant"] == best


def _fields(value: object) -> object:
    """A wire answer as plain data, whichever models built it (pydantic's, or the generated dataclasses)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _fields(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=False)
    if isinstance(value, (list, tuple)):
        return [_fields(v) for v in value]
    return value


def test_the_tables_show_the_same_answers_the_api_gives(public_models: Path) -> None:
    """The generated dataclasses, which the tables are printed from, hold every field of the generated pydantic
    models with the same values: fit (local, catalog, refused), plan, and the model listing."""
    from memfit import wire
    from memfit.config import model_roots
    from memfit.estimator.machine import HostMemory
    from memfit.generated import plain_models
    from memfit.generated.models import WireFitVerdictRequest
    from memfit.readers.nvml import NvmlReader
    from memfit.service_builder import build_service

    no_gpu = ModuleType("pynvml")  # a driver that sees no GPU
    vars(no_gpu).update(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 0, NVMLError=OSError)
    service = build_service(  # a fixed budget: each build reads the environment afresh
        model_roots([str(public_models)], usual=False),
        read_host=lambda: HostMemory(available=12 << 30, total=16 << 30),
        read_committed=lambda: 0,
        nvml=NvmlReader(no_gpu),
    )
    service.index.refresh()
    asked: list[dict[str, Any]] = [
        {"model_id": "qwen3-f16", "allocated_tokens": 8192},
        {"model_id": "llama-gqa-f16", "streams": 2, "key_element_bytes": 1, "flash_attention": "off"},
        {"model_id": "Qwen/Qwen3-8B-GGUF:Q8_0", "ubatch_tokens": 1024, "kv_unified": True},
        {"model_id": "qwen3-f16", "allocated_tokens": -1},
    ]
    requests = [WireFitVerdictRequest(**a) for a in asked]
    plain_requests = [
        plain_models.WireFitVerdictRequest(**WireFitVerdictRequest(**a).model_dump(by_alias=False)) for a in asked
    ]
    with_pydantic = wire.fit_batch(service, requests)
    assert len(with_pydantic.results) == 4
    in_plain = wire.fit_batch(service, plain_requests, plain=True)
    assert _fields(in_plain) == with_pydantic.model_dump(by_alias=False)
    plans = wire.fit_plan(service, requests[:3])
    plans_in_plain = wire.fit_plan(service, plain_requests[:3], plain=True)
    assert _fields(plans_in_plain) == plans.model_dump(by_alias=False)
    assert _fields(wire.model_list(service, plain=True)) == wire.model_list(service).model_dump(by_alias=False)


def test_serve_with_two_workers_answers_from_both_and_shares_the_history(public_models: Path, tmp_path: Path) -> None:
    """`memfit serve --workers 2`: one token file made by the parent, batches answered, both worker processes
    answering on the one port, an observation recorded through one seen through every connection (the history is
    the state directory's, not a worker's), and Ctrl-C stopping the parent and its workers."""
    import httpx
    import psutil

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MEMFIT_STATE_DIR": str(state)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memfit.cli", "serve", "--workers", "2", "--port", str(port)]
        + ["--models", str(public_models), "--no-usual-dirs"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        assert "2 worker processes" in proc.stdout.readline()
        token = (state / "token").read_text().strip()
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until both workers have started
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    if len(psutil.Process(proc.pid).children()) >= 2:
                        break
            time.sleep(0.2)
        body = [{"modelId": "qwen3-f16", "allocatedTokens": 1024 * (1 + i % 4)} for i in range(32)]
        observation = {
            "modelId": "qwen3-f16",
            "revision": "",
            "quant": "F16",
            "artifactBytes": None,
            "workload": {
                "allocatedTokens": 4096,
                "streams": 1,
                "keyElementBytes": 2,
                "valueElementBytes": 2,
                "mode": "fullGpu",
            },
            "parts": {"workspace": 300_000_000},
            "runtime": "llama.cpp test build",
        }
        recorded = httpx.post(f"{url}/v1/models/observations", json=observation, headers=headers)
        assert recorded.status_code == 201, recorded.text
        pids: set[str] = set()
        seen: list[int] = []
        while time.monotonic() < deadline and (len(pids) < 2 or len(seen) < 8):
            with httpx.Client(base_url=url, headers=headers, timeout=30) as client:  # a new connection each time
                batch = client.post("/v1/models/fit/batch", json=body)
                assert batch.status_code == 200 and len(batch.json()["results"]) == 32
                seen.append(len(client.get("/v1/models/observations").json()["observations"]))
                metrics = client.get("/metrics").text
            pids.add(next(line.split()[1] for line in metrics.splitlines() if line.startswith("memfit_process_id ")))
        assert len(pids) == 2 and set(seen) == {1}
        workers = [p for p in psutil.Process(proc.pid).children() if "resource_tracker" not in " ".join(p.cmdline())]
        assert len(workers) == 2
    finally:
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        code = proc.wait(timeout=60)
    assert code == 0 and "Traceback" not in err and "KeyboardInterrupt" not in err
    assert psutil.wait_procs(workers, timeout=10)[1] == []  # the workers have exited too
