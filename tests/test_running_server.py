"""The `running` profile and GET /v1/models' `loadedBy`: a llama-server running on this host, as its command line
names its settings and as it answers GET /props and GET /slots.

A real process stands in for llama-server: an executable script named llama-server (so the process table names it
so), started with llama-server's flags, listening on 127.0.0.1 and answering /props and /slots in the shape of the
pinned llama.cpp's tools/server/server-context.cpp (get_res_props; server_slot::to_json for each slot). Every expected
value is written out from the fake server's settings and the tiny model's shape, not computed by memfit.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from memfit import wire
from memfit.estimator.bounds import Part
from memfit.estimator.profiles import LaunchFacts, resolve_profile, resolved_workload
from memfit.estimator.server_args import RunningServer, props_settings, server_args, slots_settings
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, Component, SettingSource
from memfit.estimator.workload import WorkloadRequest
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers import llama_servers
from memfit.readers.llama_servers import LlamaServers, http_json, listening, llama_server_processes, loopback
from memfit.readers.model_roots import Root, RootKind
from memfit.render import render_models
from memfit.service_builder import build_service
from tools.gguf_writers import qwen3, write_model

MIB = 1 << 20

# The fake server: its answers are read from the file its environment names (not its command line, which must
# look like llama-server's), and it serves until killed.
FAKE = """
import http.server, json, os, sys
answers = json.load(open(os.environ["FAKE_ANSWERS"]))
port = int(sys.argv[sys.argv.index("--port") + 1])

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(answers[self.path]).encode() if self.path in answers else b"{}"
        self.send_response(200 if self.path in answers else 404)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def props(total_slots: int, slot_n_ctx: int, model_path: str) -> dict[str, Any]:
    """GET /props as the pinned server-context.cpp get_res_props writes it (the sampling params abridged)."""
    return {
        "default_generation_settings": {"params": {"seed": 4294967295, "temperature": 0.8}, "n_ctx": slot_n_ctx},
        "total_slots": total_slots,
        "model_alias": "tiny-qwen3",
        "model_ftype": "F16",
        "model_path": model_path,
        "modalities": {"vision": False, "video": False, "audio": False},
        "media_marker": "<__media__>",
        "endpoint_slots": True,
        "endpoint_props": False,
        "endpoint_metrics": False,
        "ui": True,
        "ui_settings": {},
        "chat_template": "{{ messages }}",
        "chat_template_caps": {},
        "bos_token": "",
        "eos_token": "<|im_end|>",
        "build_info": "b1-0000000",
        "is_sleeping": False,
        "cors_proxy_enabled": False,
    }


def slots(count: int, n_ctx: int) -> list[dict[str, Any]]:
    """GET /slots: server_slot::to_json of idle slots that ran no task."""
    return [{"id": i, "n_ctx": n_ctx, "speculative": False, "is_processing": False} for i in range(count)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the fake llama-server never listened on {port}")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-qwen3: 4 layers, 4 KV heads of 64, trained context 32768 (tools/gguf_writers.py qwen3)."""
    path = tmp_path_factory.mktemp("models") / "tiny-qwen3.gguf"
    write_model(qwen3(), path)
    return path


@pytest.fixture
def fake_server(tmp_path: Path, model: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    """LLAMA_ARG_CTX_CHECKPOINTS=8 llama-server -m <model> -np 2 -c 8192 -ctk q8_0 -ctv q8_0 -fa on -ub 256
    --cache-ram 1024: two slots of a split cache, so a slot's n_ctx is 8192 / 2 = 4096 (llama_n_ctx_seq)."""
    script = tmp_path / "bin" / "llama-server"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{FAKE}")
    script.chmod(0o755)
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"/props": props(2, 4096, str(model)), "/slots": slots(2, 4096)}))
    port = free_port()
    flags = ["-np", "2", "-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-ub", "256"]
    flags += ["--cache-ram", "1024", "--port", str(port)]
    process = subprocess.Popen(
        [str(script), "-m", str(model), *flags],
        env={"FAKE_ANSWERS": str(answers), "LLAMA_ARG_CTX_CHECKPOINTS": "8"},
        cwd=tmp_path,
    )
    try:
        wait_listening(port)
        yield process, port
    finally:
        process.kill()
        process.wait()


def test_the_command_line_names_the_settings_that_change_memory() -> None:
    args = server_args(
        ["llama-server", "-m", "m.gguf", "--ctx_size", "8192", "-np", "2", "-ctk", "q8_0", "--cache-type-v", "f16"]
        + ["-fa", "off", "-ub", "256", "--swa-full", "--no-mmap", "--cache-ram", "0", "--ctx-checkpoints", "4"]
        + ["--alias", "x", "--port", "9090", "-ub", "128"]  # named twice: the last wins (common/arg.cpp)
    )
    assert {wire: n.value for wire, n in args.named.items()} == {
        "keyElementBytes": 1,  # q8_0: the contract's one byte per element
        "valueElementBytes": 2,
        "flashAttention": "off",
        "ubatchTokens": 128,
        "swaFull": True,
        "loadMode": "none",  # --no-mmap: LLAMA_LOAD_MODE_NONE
        "cacheRamMib": 0,
        "contextCheckpoints": 4,
    }
    assert (args.ctx_size, args.parallel, args.model, args.port, args.unread) == (8192, 2, "m.gguf", 9090, ())
    assert "-ctk q8_0" in args.named["keyElementBytes"].detail


@pytest.mark.parametrize(
    ("argv", "env", "snapshots", "unread"),
    [
        (["--spec-type", "draft-mtp"], {}, 3, ()),  # common.h: draft.n_max = 3
        (["--spec-type", "draft-eagle3", "--spec-draft-n-max", "5"], {}, 5, ()),
        (["--spec-type", "ngram-mod"], {"LLAMA_ARG_SPEC_TYPE": "draft-dspark"}, 3, ()),  # the two lists add up
        (["--spec-type", "ngram-mod", "--spec-draft-n-max", "5"], {}, 0, ()),  # a type that does not roll back
        (["--spec-type", "draft-dflash,none"], {}, 0, ()),  # `none` in a list leaves only it
        (["-md", "draft.gguf"], {}, None, ("--spec-draft-model",)),  # the type read from the draft's metadata
        (["--spec-type", "draft-mtp", "--spec-draft-n-max", "1000"], {}, None, ("--spec-draft-n-max",)),
        ([], {}, None, ()),  # no speculation: llama-server's n_rs_seq 0, its default
    ],
)
def test_speculative_flags_decide_the_rollback_snapshots(
    argv: list[str], env: dict[str, str], snapshots: int | None, unread: tuple[str, ...]
) -> None:
    """common_context_params_to_llama: n_rs_seq = need_n_rs_seq(), the draft length under draft-mtp, -eagle3,
    -dflash or -dspark (common/common.h), 0 under other types; a draft model with no type named has its types
    inferred from its own metadata, which memfit does not read."""
    args = server_args(["llama-server", "-m", "m.gguf", *argv], env)
    named = args.named.get("rollbackSnapshots")
    assert (None if named is None else named.value, args.unread) == (snapshots, unread)


@pytest.mark.parametrize(
    ("argv", "env", "mtp"),
    [
        (["--spec-type", "draft-mtp"], {}, True),
        (["--spec-type", "ngram-mod"], {"LLAMA_ARG_SPEC_TYPE": "draft-mtp"}, True),  # the two lists add up
        (["--spec-type", "draft-eagle3", "--spec-draft-n-max", "5"], {}, False),  # a draft type that is not MTP
        (["--spec-type", "draft-mtp,none"], {}, False),  # `none` in a list leaves only it
        (["-md", "draft.gguf"], {}, None),  # the type read from the draft's metadata: unread (rollbackSnapshots)
        ([], {}, None),  # no speculation: llama-server's load_mtp false, its default
    ],
)
def test_speculative_flags_decide_the_multi_token_prediction(
    argv: list[str], env: dict[str, str], mtp: bool | None
) -> None:
    """common_model_params_to_llama: load_mtp where the --spec-type list names draft-mtp (common/common.cpp)."""
    named = server_args(["llama-server", "-m", "m.gguf", *argv], env).named.get("multiTokenPrediction")
    assert (None if named is None else named.value) == mtp


@pytest.mark.parametrize(
    ("argv", "env", "draft", "unread"),
    [
        (["--spec-type", "draft-mtp"], {}, 3, ()),  # common_params_speculative_draft::n_max = 3
        (["--spec-type", "draft-simple", "--spec-draft-n-max", "8"], {}, 8, ()),
        (["--spec-type", "draft-eagle3"], {"LLAMA_ARG_SPEC_DRAFT_N_MAX": "5"}, 5, ()),
        (["--spec-type", "draft-dflash", "--spec-draft-n-max", "0"], {}, 0, ()),
        (["--spec-type", "ngram-mod"], {}, 64, ()),  # common_params_speculative_ngram_mod::n_max = 64
        (["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "16"], {}, 16, ()),
        (["--spec-type", "ngram-simple"], {}, 48, ()),  # common_params_speculative_ngram_map::size_m = 48
        (["--spec-type", "ngram-map-k4v", "--spec-ngram-map-k4v-size-m", "20"], {}, 20, ()),
        (["--spec-type", "ngram-cache"], {}, 8, ()),  # common_speculative_n_max: 8 for ngram-cache
        (["--spec-type", "draft-mtp,ngram-map-k", "--spec-ngram-map-k-size-m", "2"], {}, 3, ()),  # the longest
        (["--spec-type", "draft-mtp,none"], {}, 0, ()),  # `none` in a list leaves only it
        (["--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "1000"], {}, None, ("--spec-type",)),  # past 256
        (["--spec-type", "draft-mtp", "--spec-draft-n-max", "x"], {}, None, ("--spec-draft-n-max",)),
        (["-md", "draft.gguf"], {}, None, ("--spec-draft-model",)),  # the types read from the draft's metadata
        ([], {}, None, ()),  # no speculation: llama-server's default, no draft
    ],
)
def test_speculative_flags_decide_the_draft_tokens(
    argv: list[str], env: dict[str, str], draft: int | None, unread: tuple[str, ...]
) -> None:
    """server_output_limits sizes a batch's outputs by common_speculative_n_max (common/speculative.cpp): the
    longest draft any named type makes, --spec-draft-n-max for the draft types, size_m for the ngram
    map types, n_max for ngram-mod, 8 for ngram-cache."""
    args = server_args(["llama-server", "-m", "m.gguf", *argv], env)
    named = args.named.get("draftTokens")
    assert (None if named is None else named.value, args.unread) == (draft, unread)


def test_the_running_profile_takes_the_servers_draft_length() -> None:
    """A running llama-server's --spec-type and --spec-draft-n-max are the workload's draftTokens; a request's own
    value wins; with no speculation named, llama-server's default: 0, or 3 under draft-mtp."""
    spec = ["-np", "2", "-c", "8192", "--spec-type", "draft-simple", "--spec-draft-n-max", "6"]
    resolution = resolve_profile(WorkloadRequest(profile="running"), running(spec), subject())
    assert resolution.request.draft_tokens == 6
    assert resolution.sources["draftTokens"].source is SettingSource.RUNNING
    asked = resolve_profile(WorkloadRequest(profile="running", draft_tokens=1), running(spec), subject())
    assert asked.request.draft_tokens == 1 and "draftTokens" not in asked.sources
    plain = resolve_profile(WorkloadRequest(profile="running"), running(["-np", "2"]), subject())
    assert plain.request.draft_tokens == 0 and plain.sources["draftTokens"].source is SettingSource.PROFILE
    mtp = resolve_profile(WorkloadRequest(profile="llamaServer", multi_token_prediction=True), LaunchFacts(), subject())
    assert mtp.request.draft_tokens == 3 and mtp.sources["draftTokens"].source is SettingSource.PROFILE


@pytest.mark.parametrize(
    ("argv", "env", "embeddings", "pooling", "unread"),
    [
        (["--embedding"], {}, True, None, ()),
        (["--embeddings"], {}, True, None, ()),
        (["--rerank"], {}, True, "rank", ()),  # params.embedding = true, pooling rank
        (["--reranking", "--pooling", "none"], {}, True, "none", ()),  # embedding stays set, the later pooling wins
        (["--pooling", "mean", "--rerank"], {}, True, "rank", ()),  # --rerank parsed later: rank
        (["--pooling", "mean"], {}, None, "mean", ()),  # the output limit lifted, but no cparams.embeddings
        (["--pooling", "none"], {}, None, "none", ()),
        (["--pooling", "cls", "--embedding"], {}, True, "cls", ()),
        (["--pooling", "max"], {}, None, None, ("--pooling",)),  # not a pooling type llama.cpp knows
        ([], {"LLAMA_ARG_EMBEDDINGS": "1"}, True, None, ()),
        ([], {"LLAMA_ARG_RERANKING": "true"}, True, "rank", ()),
        ([], {"LLAMA_ARG_POOLING": "cls"}, None, "cls", ()),
        ([], {"LLAMA_ARG_POOLING": "cls", "LLAMA_ARG_RERANKING": "1"}, True, "rank", ()),  # declared after --pooling
        (["--pooling", "last"], {"LLAMA_ARG_RERANKING": "1"}, True, "last", ()),  # the command line after
        ([], {"LLAMA_ARG_EMBEDDINGS": "0"}, None, None, ()),  # a switch's variable counts only when truthy
        ([], {}, None, None, ()),  # none named: llama-server's default, no embeddings, the model's pooling
    ],
)
def test_embedding_and_pooling_flags(
    argv: list[str], env: dict[str, str], embeddings: bool | None, pooling: str | None, unread: tuple[str, ...]
) -> None:
    """params.embedding (--embedding; --rerank sets it, common/arg.cpp) is cparams.embeddings; params.pooling_type is
    the last of --pooling and --rerank parsed (the environment in arg.cpp's order, then the command line)."""
    args = server_args(["llama-server", "-m", "m.gguf", *argv], env)
    named = {wire: n.value for wire, n in args.named.items()}
    assert (named.get("embeddings"), named.get("pooling"), args.unread) == (embeddings, pooling, unread)


@pytest.mark.parametrize(
    ("argv", "env", "draft"),
    [
        (
            ["-ctkd", "q8_0", "--cache-type-v-draft", "f32"],
            {},
            {"draftKeyElementBytes": 1, "draftValueElementBytes": 4},
        ),
        (["--spec-draft-type-k", "f32"], {"LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K": "q8_0"}, {"draftKeyElementBytes": 4}),
        ([], {"LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V": "q8_0"}, {"draftValueElementBytes": 1}),
        (["--no-spec-draft-backend-sampling"], {}, {"draftBackendSampling": False}),
        ([], {"LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING": "0"}, {"draftBackendSampling": False}),
        (
            ["--spec-draft-backend-sampling"],
            {"LLAMA_ARG_NO_SPEC_DRAFT_BACKEND_SAMPLING": ""},
            {"draftBackendSampling": True},
        ),
        ([], {}, {}),  # llama-server's defaults: f16 caches, the draft sampled on the backend
    ],
)
def test_the_draft_contexts_own_flags(argv: list[str], env: dict[str, str], draft: dict[str, object]) -> None:
    """common_params_speculative_draft's cache_type_k/v (--spec-draft-type-k/-v, -ctkd/-ctvd, --cache-type-k/v-draft)
    and backend_sampling (--spec-draft-backend-sampling, --no-...) and their LLAMA_ARG_ variables, the command line
    over the environment."""
    args = server_args(["llama-server", "-m", "m.gguf", "--spec-type", "draft-mtp", *argv], env)
    named = {wire: n.value for wire, n in args.named.items() if wire.startswith("draft") and wire != "draftTokens"}
    assert (named, args.unread) == (draft, ())


def test_the_running_profile_takes_the_draft_contexts_settings() -> None:
    """A running llama-server's -ctkd and --no-spec-draft-backend-sampling are the workload's draft settings, the
    ones it does not name llama-server's defaults (f16, sampled on the backend); a request's own value wins."""
    argv = ["--spec-type", "draft-mtp", "-ctkd", "q8_0", "--no-spec-draft-backend-sampling"]
    resolution = resolve_profile(WorkloadRequest(profile="running"), running(argv), subject())
    r = resolution.request
    assert (r.draft_key_element_bytes, r.draft_value_element_bytes, r.draft_backend_sampling) == (1, 2, False)
    assert resolution.sources["draftKeyElementBytes"].source is SettingSource.RUNNING
    assert resolution.sources["draftValueElementBytes"].source is SettingSource.PROFILE
    asked = resolve_profile(
        WorkloadRequest(profile="running", draft_key_element_bytes=4), running(argv), subject()
    ).request
    assert asked.draft_key_element_bytes == 4


def test_the_running_profile_takes_the_servers_embeddings() -> None:
    """A running llama-server's --embedding is the workload's embeddings; a request's own value wins; with none
    named, llama-server's default: false."""
    serving = ["-np", "2", "-c", "8192", "--embedding"]
    resolution = resolve_profile(WorkloadRequest(profile="running"), running(serving), subject())
    assert resolution.request.embeddings is True
    assert resolution.sources["embeddings"].source is SettingSource.RUNNING
    asked = resolve_profile(WorkloadRequest(profile="running", embeddings=False), running(serving), subject())
    assert asked.request.embeddings is False and "embeddings" not in asked.sources
    plain = resolve_profile(WorkloadRequest(profile="running"), running(["-np", "2"]), subject())
    assert plain.request.embeddings is False and plain.sources["embeddings"].source is SettingSource.PROFILE


def test_the_running_profile_takes_the_servers_pooling() -> None:
    """A running llama-server's --pooling (or --rerank's rank) is the workload's pooling, without embeddings where
    --embedding is not named; a request's own value wins; with none named, unspecified (the model's own)."""
    pooled = resolve_profile(WorkloadRequest(profile="running"), running(["-np", "2", "--pooling", "mean"]), subject())
    assert (pooled.request.pooling, pooled.request.embeddings) == ("mean", False)
    assert pooled.sources["pooling"].source is SettingSource.RUNNING
    reranking = resolve_profile(WorkloadRequest(profile="running"), running(["--rerank"]), subject())
    assert (reranking.request.pooling, reranking.request.embeddings) == ("rank", True)
    asked = resolve_profile(WorkloadRequest(profile="running", pooling="cls"), running(["--rerank"]), subject())
    assert asked.request.pooling == "cls" and "pooling" not in asked.sources
    plain = resolve_profile(WorkloadRequest(profile="running"), running(["-np", "2"]), subject())
    assert plain.request.pooling is None and plain.sources["pooling"].source is SettingSource.PROFILE


def test_a_value_memfit_cannot_express_is_left_unread() -> None:
    args = server_args(["llama-server", "-ctk", "q4_0", "-c", "lots", "-fa", "maybe", "-kvu", "-ub", "0", "-ub", "64"])
    assert args.unread == ("-ctk", "-c", "-fa")  # -ub's second value is read: the last one counts
    assert args.ctx_size is None and {wire: n.value for wire, n in args.named.items()} == {
        "kvUnified": True,
        "ubatchTokens": 64,
    }


def test_its_llama_arg_variables_count_and_its_command_line_overrides_them() -> None:
    env = {
        "LLAMA_ARG_CACHE_TYPE_K": "q8_0",
        "LLAMA_ARG_CACHE_TYPE_V": "q8_0",
        "LLAMA_ARG_NO_MMAP": "",  # set at all: --no-mmap (common_arg::get_value_from_env)
        "LLAMA_ARG_N_PARALLEL": "3",
        "LLAMA_ARG_SWA_FULL": "false",  # a switch without a negative form: only truthy sets it
        "LLAMA_ARG_KV_UNIFIED": "enabled",
        "LLAMA_ARG_PORT": "8181",
    }
    args = server_args(["llama-server", "-ctv", "f16"], env)
    assert {wire: n.value for wire, n in args.named.items()} == {
        "keyElementBytes": 1,
        "valueElementBytes": 2,  # -ctv f16 over LLAMA_ARG_CACHE_TYPE_V
        "loadMode": "none",
        "kvUnified": True,
    }
    assert (args.parallel, args.port, args.unread) == (3, 8181, ())
    assert args.named["loadMode"].detail.startswith("its environment: LLAMA_ARG_NO_MMAP")


def test_props_and_slots_are_taken_only_in_the_pinned_shape() -> None:
    assert props_settings(props(4, 16384, "/m.gguf")) == (4, 16384, "/m.gguf")
    assert slots_settings(slots(3, 2048)) == (3, 2048)
    hostile = {"total_slots": True, "default_generation_settings": {"n_ctx": 1e9}, "model_path": "a\0b"}
    assert props_settings(hostile) == (None, None, None)
    assert props_settings({"total_slots": 1 << 40, "default_generation_settings": "4096"}) == (None, None, None)
    assert props_settings([1, 2]) == (None, None, None)
    assert slots_settings([{"n_ctx": 4096}, {"n_ctx": 8192}]) == (2, None)  # slots that disagree name no context
    assert slots_settings({"n_ctx": 4096}) == (None, None)


def subject(trained: int = 32768) -> Subject:
    weights = Part(Component.WEIGHTS, 100 * MIB, Basis.MEASURED_ARTIFACT, "")
    return Subject("m", "", "", None, trained, None, None, None, weights, Part.not_applicable(Component.COMPANIONS, ""))


def running(argv: list[str], slots: int | None = None, n_ctx: int | None = None) -> LaunchFacts:
    server = RunningServer(1, 8080, server_args(["llama-server", *argv]), None, n_ctx is not None, slots, n_ctx)
    return LaunchFacts(running=server)


def test_np_auto_runs_four_slots_over_a_unified_cache_whose_slot_is_the_whole_context() -> None:
    # no -np: server.cpp sets n_parallel 4 and kv_unified; a slot's n_ctx is then the whole context
    resolution = resolve_profile(WorkloadRequest(profile="running"), running([], 4, 16384), subject())
    r = resolution.request
    assert (r.streams, r.kv_unified, r.key_element_bytes, r.cache_ram_mib) == (4, True, 2, 8192)
    assert resolution.context is not None and resolution.context[0] == 16384 and not resolution.fit
    assert resolution.sources["streams"].source is SettingSource.RUNNING
    assert resolution.sources["keyElementBytes"].source is SettingSource.PROFILE  # not reported: the default


def test_a_slot_context_capped_to_the_trained_one_takes_the_command_lines_context() -> None:
    # -c 65536 -np 2 over a 32768-token model: n_ctx_slot is min(32768, 32768) (server-context.cpp), the cache 65536
    workload = resolved_workload(
        WorkloadRequest(profile="running"), subject(), running(["-c", "65536", "-np", "2"], 2, 32768)
    )
    assert (workload.allocated_tokens, workload.streams, workload.kv_unified) == (32768, 2, False)


def test_without_an_answer_the_command_line_and_then_the_fitter_decide() -> None:
    resolution = resolve_profile(WorkloadRequest(profile="running"), running(["-np", "3", "-c", "6144"]), subject())
    assert (resolution.request.streams, resolution.request.kv_unified) == (3, False)
    assert resolution.context is not None and resolution.context[0] == 6144
    unsized = resolve_profile(WorkloadRequest(profile="running"), running([]), subject())
    assert unsized.context is None and unsized.fit  # no -c, no answer: --fit chose it
    nothing = resolve_profile(WorkloadRequest(profile="running"), LaunchFacts(), subject())
    assert nothing.request.streams == 4 and nothing.sources["streams"].source is SettingSource.PROFILE


def test_the_process_table_finds_it_and_it_answers_on_its_port(fake_server: tuple[subprocess.Popen, int]) -> None:
    process, port = fake_server
    assert process.pid in {p.pid for p in llama_server_processes()}
    (server,) = LlamaServers(find=lambda: [psutil.Process(process.pid)]).read()
    assert (server.pid, server.port, server.answered, server.total_slots, server.slot_tokens) == (
        process.pid,
        port,
        True,
        2,
        4096,
    )


def test_a_running_server_marks_its_model_and_a_fit_takes_its_settings(
    fake_server: tuple[subprocess.Popen, int], model: Path
) -> None:
    process, port = fake_server
    service = build_service([Root(str(model.parent), RootKind.PLAIN)])
    service.index.refresh()
    listing = wire.model_list(service).model_dump(by_alias=True)["models"]
    (entry,) = [m for m in listing if m["source"] == "local"]
    assert entry["loadedBy"] == [{"pid": process.pid, "port": port}]
    table = render_models(wire.model_list(service), width=200).splitlines()
    assert table[0].split()[-1] == "LOADED" and table[2].split()[-1] == f":{port}"  # the local model is listed first

    request = WireFitVerdictRequest(model_id=entry["modelId"], profile="running")
    (result,) = wire.fit_batch(service, [request]).model_dump(by_alias=True)["results"]
    w = result["estimate"]["workload"]
    assert "runningServerUnread" not in result["limits"]
    assert (w["profile"], w["streams"], w["kvUnified"], w["allocatedTokens"], w["slotTokens"]) == (
        "running",
        2,  # /props total_slots
        False,  # -np 2 and no --kv-unified
        4096,  # a slot's n_ctx: one stream each
        4096,
    )
    assert (w["keyElementBytes"], w["valueElementBytes"], w["flashAttention"], w["ubatchTokens"]) == (1, 1, "on", 256)
    assert (w["cacheRamMib"], w["contextCheckpoints"], w["loadMode"]) == (1024, 8, "auto")
    sources = {s["setting"]: s for s in w["settings"]}
    assert {k: sources[k]["source"] for k in ("streams", "allocatedTokens", "keyElementBytes", "loadMode")} == {
        "streams": "running",
        "allocatedTokens": "running",
        "keyElementBytes": "running",
        "loadMode": "profile",  # its command line names none: llama-server's default
    }
    assert f"port {port}" in sources["streams"]["detail"] and "total_slots 2" in sources["streams"]["detail"]
    assert sources["contextCheckpoints"]["detail"].startswith("its environment: LLAMA_ARG_CTX_CHECKPOINTS=8")
    parts = {p["component"]: p for p in result["estimate"]["parts"]}
    # 4 layers x (2 slots x 4096 cells) x (K and V rows of 4 heads x 64 = 256 q8_0 elements: 8 blocks of 34 bytes)
    assert parts["kvCache"]["bytes"] == 4 * 8192 * 2 * (8 * 34)
    assert parts["promptCache"]["upperBytes"] == 1024 * MIB  # --cache-ram 1024


def test_a_fit_of_a_model_no_server_runs_says_so(model: Path) -> None:
    service = build_service([Root(str(model.parent), RootKind.PLAIN)], read_running=lambda: ())
    service.index.refresh()
    (entry,) = [m for m in wire.model_list(service).models if m.source == "local"]
    assert entry.loaded_by is None
    request = WireFitVerdictRequest(model_id=entry.model_id, profile="running")
    (result,) = wire.fit_batch(service, [request]).results
    assert "runningServerUnread" in result.limits
    assert result.estimate.workload.streams == 4  # llama-server's defaults


def serve_once(behaviour: str) -> tuple[int, threading.Thread]:
    """A server on loopback that never answers, trickles bytes, answers more than the cap, or keeps the connection
    open after a whole answer."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def run() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            conn.recv(4096)
            if behaviour == "trickle":
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n")
                for _ in range(40):
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        return
                    time.sleep(0.05)
            elif behaviour == "keepalive":  # a whole answer on a connection it keeps open
                body = json.dumps({"total_slots": 4}).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                time.sleep(2)
            elif behaviour == "huge":
                try:
                    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n[" + b"1," * (llama_servers.MOST_BYTES // 2 + 1))
                except OSError:
                    return
            else:
                time.sleep(2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return int(listener.getsockname()[1]), thread


@pytest.mark.parametrize("behaviour", ["silent", "trickle", "huge"])
def test_a_hostile_server_is_dropped_by_its_deadline(behaviour: str) -> None:
    port, thread = serve_once(behaviour)
    started = time.monotonic()
    assert http_json("127.0.0.1", port, "/props", time.monotonic() + 0.5) is None
    assert time.monotonic() - started < 1.0
    thread.join(timeout=3)


def test_a_whole_answer_is_read_without_waiting_for_the_connection_to_close() -> None:
    port, thread = serve_once("keepalive")
    started = time.monotonic()
    assert http_json("127.0.0.1", port, "/props", time.monotonic() + 1.5) == {"total_slots": 4}
    assert time.monotonic() - started < 1.0
    thread.join(timeout=3)


@pytest.mark.parametrize(
    ("address", "asked"),
    [("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("::1", "::1"), ("192.168.1.7", None)],
)
def test_a_server_is_asked_on_loopback_only(address: str, asked: str | None) -> None:
    assert loopback(address) == asked


def test_the_port_is_the_one_its_socket_listens_on_not_the_one_its_command_line_says() -> None:
    listener = "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
    listener += " print(s.getsockname()[1], flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", listener], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        assert listening(psutil.Process(child.pid), None, 8080) == ("127.0.0.1", port)
    finally:
        child.kill()
        child.wait()
