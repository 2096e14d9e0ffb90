"""memfit's numbers against what real llama.cpp allocated, run by run.

Every run in tests/data/results_*.jsonl (the ground-truth harness's measurements: the public set, real-scale
shapes, and every architecture family written and measured for memfit) names a model that tools/ can write
and the llama.cpp settings it was loaded with. memfit's kvCache and recurrentState must equal llama.cpp's
buffers to the byte, and its weights floor and ceiling must hold what llama.cpp allocated.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memfit import wire
from memfit.estimator.arch_rules import RULES, Memory
from memfit.estimator.artifact import ArtifactFacts, weights_on
from memfit.estimator.compute_buffer import replayed
from memfit.estimator.cpu_variant import BY_NAME
from memfit.estimator.errors import EvidenceError
from memfit.estimator.kv_cache import GGML_CACHE_TYPES, cache_type_problem
from memfit.estimator.machine import HostMemory
from memfit.estimator.mtp import draft_context, draft_geometry, draft_kv_bytes, draft_output_bytes
from memfit.estimator.vocabulary import Limit
from memfit.estimator.workspace import output_buffer
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.model_roots import Root, RootKind
from memfit.service.artifact_cache import ArtifactCache
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.accuracy import (
    CATALOG_TRUTH,
    SHAPES_TRUTH,
    BoundsRow,
    architecture,
    by_architecture,
    check_bounds,
    compare,
    file_bounds,
    measured_workspace,
    model_writers,
    own_weights,
    recorded_bounds,
    recorded_truth,
    run_geometry,
    settings,
    unmodelled,
    write_models,
)
from tools.truth import DATA, ELEMENT_BYTES, load, measured_variant, run_id
from tools.truth.matrices import TRUTH_FILES

# Every run but the shapes' dry runs (checked below), weights byte-exact under the CPU variant it was measured on
RUNS = [r for path in sorted(DATA.glob("results_*.jsonl")) if path != SHAPES_TRUTH for r in load(path)]
MODELLED = [r for r in RUNS if unmodelled(r) is None]
CACHE = ArtifactCache()
NON_CAUSAL = {arch for arch, rule in RULES.items() if rule.memory is Memory.NONE}


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every model the truth files name (the full-size shapes sparse), written once."""
    names = {r["model"] for path in recorded_truth() if path != CATALOG_TRUTH for r in load(path)}
    return write_models(names, tmp_path_factory.mktemp("truth-models"))


@pytest.mark.parametrize("run", MODELLED, ids=run_id)
def test_parts_equal_llama_cpp(run: dict, model_files: dict[str, Path]) -> None:
    row = compare(run, model_files[run["model"]], CACHE)
    assert row.status == "ok", (row.kv, row.measured_kv, row.recurrent, row.measured_recurrent)
    if not own_weights(run):  # under the variant it was measured on (haswell, or sapphirerapids on the AMX host)
        assert row.weights == (run["weights_bytes"], run["weights_bytes"])


LOAD_FAILURES = [r for r in RUNS if r.get("error") == "model load failed"]
TYPE_REFUSALS = [r for r in RUNS if "different K" in r.get("stderr_tail", "")]


@pytest.mark.parametrize("run", LOAD_FAILURES, ids=run_id)
def test_models_llama_cpp_cannot_load_are_unreadable(run: dict, model_files: dict[str, Path]) -> None:
    """A file llama.cpp failed to load is artifactUnreadable: refused whole (a tensor's shape or count its loader
    refuses), or read without a layout because of hyperparameters its loader refuses (a required key missing, an
    array of another length)."""
    try:
        facts = CACHE.facts((str(model_files[run["model"]]),))
    except EvidenceError as refused:
        assert refused.limit == Limit.ARTIFACT_UNREADABLE and "llama.cpp" in str(refused)
    else:
        assert facts.layout is None and facts.layout_error is not None
        assert facts.layout_error.limit == Limit.ARTIFACT_UNREADABLE, facts.layout_error


@pytest.mark.parametrize("run", TYPE_REFUSALS, ids=run_id)
def test_cache_types_llama_cpp_refuses_are_flagged(run: dict, model_files: dict[str, Path]) -> None:
    facts = CACHE.facts((str(model_files[run["model"]]),))
    s = settings(run)
    assert facts.layout is not None
    assert cache_type_problem(facts.layout, GGML_CACHE_TYPES[s["type_k"]], GGML_CACHE_TYPES[s["type_v"]])


def test_only_settings_memfit_does_not_model_are_left_out() -> None:
    reasons = {unmodelled(r) for r in RUNS} - {None}
    assert reasons == {"llama.cpp refused these settings"}
    assert len(MODELLED) > 2200 and len(LOAD_FAILURES) >= 3 and len(TYPE_REFUSALS) >= 5


def test_every_family_of_the_issue_is_measured() -> None:
    archs = {r["model_desc"].split()[0] for r in MODELLED if "model_desc" in r}
    expected = {
        "llama",
        "qwen2",
        "qwen3",
        "phi3",
        "command-r",
        "granite",
        "gemma2",
        "gemma3",
        "cohere2",
        "gpt-oss",
        "deepseek2",
        "qwen3moe",
        "mamba",
        "mamba2",
        "rwkv6",
        "rwkv7",
        "jamba",
        "lfm2",
        "granitehybrid",
        "falcon-h1",
        "nemotron_h",
        "qwen3next",
        "gemma3n",
        "bert",
    }
    assert expected <= archs, expected - archs


def test_accuracy_script_fails_on_a_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tools.accuracy import main

    run = next(r for r in MODELLED if r["model"] == "qwen3-f16")
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(json.dumps(run) + "\n")
    bad.write_text(json.dumps({**run, "memory_bytes": run["memory_bytes"] + 2}) + "\n")
    assert main([str(good)]) == 0
    assert main([str(bad)]) == 1
    assert "MISMATCH" in capsys.readouterr().out


WORKSPACE_RUNS = [r for r in MODELLED if "compute_bytes" in r]


def _check(row: BoundsRow) -> None:
    assert row.kv_exact and row.output_exact
    if row.status.startswith("unknown"):
        return
    assert row.holds, (row.status, row.real, row.lower, row.upper, row.workspace, row.real_workspace)


@pytest.fixture(scope="module")
def recorded(model_files: dict[str, Path]) -> dict[str, list[BoundsRow]]:
    """Every run of every truth file held against memfit's bounds (scripts/accuracy --bounds), once."""
    return recorded_bounds(recorded_truth(), model_files)


# Why a recorded run has no bounds to compare: llama.cpp refused it, memfit does not model its settings, or memfit
# answers unknown (no layout, no rebuilt graph)
UNKNOWN_REASONS = {
    "unknown: llama.cpp refused these settings",
    "unknown: no layout",
    "unknown: graph not derived",
    "unknown: workload not derived",
}


def test_every_recorded_run_is_compared_or_unknown_with_its_reason(recorded: dict[str, list[BoundsRow]]) -> None:
    for path in recorded_truth():
        assert len(recorded[path.name]) == len(load(path)), path.name
    rows = [r for group in recorded.values() for r in group]
    reasons = Counter(r.status for r in rows if not r.compared)
    assert set(reasons) <= UNKNOWN_REASONS, reasons
    assert sum(r.compared for r in rows) > 3000
    assert sum(r.status == "inside" for r in recorded[CATALOG_TRUTH.name]) > 700
    derived = {a for a, group in by_architecture(rows).items() if any(r.compared for r in group)}
    assert derived <= {a for a, rule in RULES.items() if rule.graph is not None} and len(derived) > 55


def test_full_size_sliding_caches_are_answered_where_the_graph_is_rebuilt(
    recorded: dict[str, list[BoundsRow]],
) -> None:
    """llama.cpp's swa_full (every sliding cache as large as the context): each run of a rebuilt graph is compared
    (its masks and score matrices over the whole context), none answers unknown."""
    rows = recorded["results_attn_swafull.jsonl"]
    rebuilt = [r for r in rows if RULES[architecture(r.record)].graph is not None]
    assert len(rebuilt) >= 57 and all(r.status == "inside" for r in rebuilt)


def test_rollback_snapshots_are_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """llama.cpp's n_rs_seq (recurrent-state snapshots for a speculative rollback): every recorded run with them is
    compared, its memory exact (R and S rows times 1 + n_rs_seq where the architecture keeps them, as they were on
    the others) and the snapshots the graph writes inside tight bounds (deepseek4's: llama_kv_cache_dsv4's restore
    and snapshot rows of each compressor state, results_dsv4_dryrun.jsonl)."""
    rows = [r for group in recorded.values() for r in group if settings(r.record).get("n_rs_seq")]
    assert len(rows) >= 68 and all(r.kv_exact and r.output_exact for r in rows)
    assert sum(architecture(r.record) == "deepseek4" for r in rows) >= 12
    assert all(r.compared and r.tight for r in rows)


def _broken(rows: list[BoundsRow], holds: Callable[[BoundsRow], bool]) -> dict[str, list[str]]:
    """The compared runs where `holds` fails, by architecture."""
    found = {
        a: [run_id(r.record) for r in group if r.compared and not holds(r)]
        for a, group in by_architecture(rows).items()
    }
    return {a: ids for a, ids in found.items() if ids}


def test_bounds_hold_within_tolerance_on_every_recorded_run(recorded: dict[str, list[BoundsRow]]) -> None:
    """scripts/accuracy --bounds over all of tests/data: on every compared run KV + recurrent state and the output
    buffer exact, compute + output inside the workspace's bounds, the whole allocation inside [lower, upper], and
    both bounds within max(2%, 16 MiB) of it."""
    broken = _broken([r for group in recorded.values() for r in group], lambda r: r.holds)
    assert not broken, f"bounds broken on {', '.join(broken)}: {broken}"


# The architectures that meet the goal on every compared run: both bounds within max(1%, 8 MiB) of llama.cpp's
# whole allocation and the workspace's within 8 MiB of its compute + output buffers: every architecture whose graph
# is rebuilt (scripts/accuracy --bounds counts the others, whose workspace is not derived)
TIGHT = {
    "afmoe", "arwkv7", "bailingmoe3", "bert", "cohere2", "cohere2moe", "command-r", "deci", "deepseek2", "exaone-moe",
    "exaone4", "falcon-h1", "gemma", "gemma2", "gemma3", "gemma3n", "gemma4", "glm4moe", "gpt-oss", "granite",
    "granite_swa", "granitehybrid", "internlm2", "jamba", "kimi-k3", "kimi-linear", "laguna", "lfm2", "lfm2moe",
    "llama", "llama-embed", "llama4", "mamba", "mamba2", "mellum", "mimo2", "minicpm", "minicpm3", "mistral3",
    "mistral4", "muse-glimmer", "nemotron_h", "nemotron_h_moe", "nomic-bert", "olmo2", "openelm", "phi3", "plamo2",
    "plamo3", "plm", "qwen2", "qwen3", "qwen35", "qwen35moe", "qwen3moe", "qwen3next", "qwen4exp", "rwkv6",
    "rwkv6qwen2", "rwkv7", "smallthinker", "smollm3", "stablelm", "starcoder2", "step35",
    "deepseek32", "glm-dsa", "minimax-01",  # the sparse-attention families (estimator/graph_dsa.py, graph_minimax.py)
    "deepseek4",  # its compressed caches and hyper-connections (estimator/graph_dsv4.py)
}  # fmt: skip


def test_the_goal_holds_on_the_architectures_that_meet_it(recorded: dict[str, list[BoundsRow]]) -> None:
    rows = [r for group in recorded.values() for r in group]
    assert TIGHT <= {a for a, group in by_architecture(rows).items() if any(r.compared for r in group)}
    broken = _broken([r for r in rows if architecture(r.record) in TIGHT], lambda r: r.tight)
    assert not broken, f"beyond max(1%, 8 MiB) on {', '.join(broken)}: {broken}"


def test_accuracy_bounds_fail_naming_the_architecture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run whose compute buffer lies above memfit's ceiling fails --bounds, its architecture named."""
    from tools.accuracy import main

    run = next(r for r in WORKSPACE_RUNS if r["model"] == "qwen3-f16")
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(json.dumps(run) + "\n")
    bad.write_text(json.dumps({**run, "compute_bytes": run["compute_bytes"] + (64 << 20)}) + "\n")
    assert main(["--bounds", str(good)]) == 0
    capsys.readouterr()
    assert main(["--bounds", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "bounds broken (max(2%, 16 MiB)) on: qwen3" in out and run_id(run) in out


SHAPE_RUNS = load(SHAPES_TRUTH)


@pytest.fixture(scope="module")
def shape_facts(model_files: dict[str, Path]) -> dict[str, ArtifactFacts]:
    """Each full-size shape's header read (its layout, architecture, vocabulary)."""
    return {r["model"]: CACHE.facts((str(model_files[r["model"]]),)) for r in SHAPE_RUNS}


def _shape_bounds(run: dict, facts: ArtifactFacts, weights: tuple[int, int] | None) -> BoundsRow:
    """check_bounds for a shape whose header gave its layout and vocabulary."""
    assert facts.layout is not None and facts.n_vocab is not None
    return check_bounds(run, facts.layout, facts.architecture, facts.n_vocab, weights)


@pytest.mark.parametrize("run", SHAPE_RUNS, ids=run_id)
def test_shape_dry_runs_within_the_bounds(run: dict, shape_facts: dict[str, ArtifactFacts]) -> None:
    """llama.cpp's dry runs of full-size shapes chosen to stress the workspace rule, on its AMX CPU variant:
    weights byte-exact under sapphirerapids, KV + recurrent state and the output buffer exact, compute + output
    between the workspace floor and ceiling wherever memfit derives it; a cache type llama.cpp refused is
    flagged."""
    facts = shape_facts[run["model"]]
    s = settings(run)
    if unmodelled(run):
        assert facts.layout is not None
        assert cache_type_problem(facts.layout, GGML_CACHE_TYPES[s["type_k"]], GGML_CACHE_TYPES[s["type_v"]])
        return
    floor, slack, _ = weights_on(facts, (measured_variant(run),))
    assert measured_variant(run).name == "sapphirerapids" and (floor, slack) == (run["weights_bytes"], 0)
    _check(_shape_bounds(run, facts, (floor, floor + slack)))


AMX_RUNS = [r for name in ("results_amx_probe.jsonl", "results_amx_scale_dryrun.jsonl") for r in load(DATA / name)]


def test_the_amx_rows_need_their_variant(model_files: dict[str, Path]) -> None:
    """The public AMX set (shared/groundtruth's results_amx_*.jsonl, measured on an Intel host with AMX by
    node-llama-cpp 3.21.1's default, sapphirerapids): exact under sapphirerapids (test_parts_equal_llama_cpp),
    and under haswell, the AVX2 host's variant, memfit's ceiling would lie below the truth of every model with a
    Q8_0 matrix or a tied F16 embedding."""
    assert len(AMX_RUNS) == 284 and {measured_variant(r).name for r in AMX_RUNS} == {"sapphirerapids"}
    below = set()
    for run in AMX_RUNS:
        if own_weights(run):
            continue
        row = compare(run, model_files[run["model"]], CACHE, BY_NAME["haswell"])
        if row.weights is not None and row.weights[1] < run["weights_bytes"]:
            below.add(run["model"])
    # the models whose measured weights exceed their tensor bytes beyond what haswell adds (model_tensor_bytes)
    assert below == {"gemma2-swa-f16", "gemma3-swa-f16", "granitehybrid-f16", "lfm2-f16", "llama-gqa-q8_0", "qwen3-f16"}


def test_shape_dry_runs_are_mostly_derived(shape_facts: dict[str, ArtifactFacts]) -> None:
    modelled = [r for r in SHAPE_RUNS if unmodelled(r) is None]
    facts = [shape_facts[r["model"]] for r in modelled]
    rows = [_shape_bounds(r, f, None) for r, f in zip(modelled, facts, strict=True)]
    assert len(SHAPE_RUNS) == 168 and len(rows) == 165
    assert sum(r.status == "inside" for r in rows) >= 126


# llama.cpp's dry runs on its haswell CPU variant (tests/data/results_floors_dryrun.jsonl): 7 sequences over real-scale
# shapes (the ubatch rounded up to 518 / 2051 tokens, the outputs 512 / 2048), granite-4.0-h without rope
# (rope.scaling.finetuned false) with flash attention off at ubatch 256-2048, phi-4, Phi-4-mini, OpenELM-3B and a
# Nemotron-51B-style deci at ubatch 128-4096, and the settings llama.cpp refused.
# Each row: the models from tools.accuracy.write_models, then the harness's probe (node-llama-cpp 3.21.1's libllama)
# `mem_probe_nlc MODEL.gguf n_ctx=N n_seq=S type_k=K type_v=V fa=F unified=0 mmap=0 n_ubatch=U decode=0
# no_alloc=1 backend_dir=DIR` (DIR: links to that release's libs with libggml-cpu-haswell.so the only CPU
# variant), its JSON summarised by the harness's measure.summarize_probe, as measure.py does.
FLOORS_TRUTH = DATA / "results_floors_dryrun.jsonl"
FLOORS_RUNS = [r for r in load(FLOORS_TRUTH) if "error" not in r]


@pytest.mark.parametrize("run", FLOORS_RUNS, ids=run_id)
def test_rounded_ubatches_and_nope_attention_within_the_bounds(run: dict, model_files: dict[str, Path]) -> None:
    """The floor and the ceiling hold llama.cpp's compute + output buffers and its whole allocation, byte for byte
    where the graph is checked node for node: rows of the rounded-up ubatch are no outputs, and a NoPE layer's Q and
    K stay views of their projections."""
    (row,) = file_bounds([run], model_files)
    assert row.status == "inside"
    _check(row)
    floor, ceiling = row.workspace
    assert ceiling - row.real_workspace == row.real_workspace - floor  # the replay is llama.cpp's buffer


# llama.cpp's dry runs (haswell CPU variant) of the MLA and next-token-prediction decoders at published scale
# (tools/families/shapes.py: DeepSeek-V3 and R1 with its MTP layer, DeepSeek-V2-Lite's legacy MHA form, a Mistral
# Small 4 with fused experts, MiniCPM3-4B, MiMo-V2-Flash, Step-3.5-Flash, GLM-4.5-Air) over ubatch 128 to 4096 asked,
# flash attention on and off, 1 to 8 streams, q8_0 and unified caches, a context below the ubatch.
MLA_SHAPE_RUNS = load(DATA / "results_mla_shapes_dryrun.jsonl")


@pytest.mark.parametrize("run", MLA_SHAPE_RUNS, ids=run_id)
def test_published_mla_and_nextn_shapes_replay_llama_cpps_buffer(run: dict, model_files: dict[str, Path]) -> None:
    """The rebuilt graph of each real-scale shape (grouped and biased routers, the decompressed latent, fused
    experts, head-wise gates, SwiGLU clamps) gives llama.cpp's compute buffer to the byte, its bounds the goal's."""
    (row,) = file_bounds([run], model_files)
    assert row.status == "inside" and row.tight, run_id(run)
    floor, ceiling = row.workspace
    assert ceiling - row.real_workspace == row.real_workspace - floor  # the replay is llama.cpp's buffer


# llama.cpp's refusals of a setting (llama_init_from_model, llama_context): its message, and memfit's limit note
REFUSAL_MESSAGES = {
    "quantized V cache requires flash_attn to be enabled": "quantized V cache requires flash_attn",
    "n_seq_max must be <= 256": "n_seq_max must be <= 256",
    "does not divide n_embd_head_k": "its blocks do not divide the head size",
    "GGML_ASSERT(a->ne[0] == b->ne[0])": "aborts building plm's graph with flash attention on",
    "GGML_ASSERT(ggml_nelements(a) == ne0*ne1)": "aborts building plm's graph with flash attention on",
    "GGML_ASSERT(f_attn_temp_scale != 0.0f)": "aborts at the first decode (llama-server's warmup) of a llama4 model",
}
DSV4_TRUTH = DATA / "results_dsv4_dryrun.jsonl"  # deepseek4's quantized caches with flash attention off among them
FA_ABORT_TRUTH = DATA / "results_fa_abort.jsonl"  # plm's graph with flash attention on, one token a ubatch or more
DECODE_ABORT_TRUTH = DATA / "results_decode_abort.jsonl"  # llama4 without chunked attention: its first decode aborts
REFUSED_RUNS = [
    r for path in (FLOORS_TRUTH, DSV4_TRUTH, FA_ABORT_TRUTH, DECODE_ABORT_TRUTH) for r in load(path) if "error" in r
]
# the runs llama.cpp accepted beside those aborts: plm's flash attention off or over one token, llama4's chunked
BESIDE_ABORTS = [r for path in (FA_ABORT_TRUTH, DECODE_ABORT_TRUTH) for r in load(path) if "error" not in r]


def test_every_refusal_measured_is_one_memfit_names() -> None:
    assert len(REFUSED_RUNS) >= 14 and sum(r["model"].startswith("deepseek4") for r in REFUSED_RUNS) >= 4
    for run in REFUSED_RUNS:
        assert any(message in run["stderr_tail"] for message in REFUSAL_MESSAGES), run_id(run)


def _run_request(run: dict) -> dict:
    """A fit request for a run's model, context, sequences and cache types."""
    s = settings(run)
    return {
        "modelId": run["model"],
        "allocatedTokens": s["n_ctx"] // s["n_seq"],
        "streams": s["n_seq"],
        "keyElementBytes": ELEMENT_BYTES[s["type_k"]],
        "valueElementBytes": ELEMENT_BYTES[s["type_v"]],
    }


@pytest.mark.parametrize("run", REFUSED_RUNS, ids=run_id)
def test_settings_llama_cpp_refused_answer_unknown(run: dict, refused_service: Any) -> None:
    """Each setting llama.cpp refused in a dry run, asked of memfit: unknown + workloadUnsupported, no upper bound,
    the refusal named in the note."""
    s = settings(run)
    workload = WireFitVerdictRequest.model_validate(
        _run_request(run)
        | {
            "flashAttention": s["fa"],
            "ubatchTokens": s.get("n_ubatch", 512),  # llama.cpp's default where a run does not set it
        }
    )
    answer = wire.fit_one(refused_service, workload)
    assert answer is not None
    result = json.loads(answer.model_dump_json(by_alias=True))
    assert result["verdict"] == "unknown" and result["estimate"]["upperBoundBytes"] is None
    if result["estimate"]["refusal"] == "contextExceedsModelLimit":  # memfit's own refusal comes first
        assert s["n_ctx"] // s["n_seq"] > refused_service.subject(run["model"]).context_limit
        return
    assert "workloadUnsupported" in result["limits"]
    (note,) = (n for m, n in REFUSAL_MESSAGES.items() if m in run["stderr_tail"])
    assert any(note in p["note"] for p in result["estimate"]["parts"] if p["basis"] == "unknown")


@pytest.fixture(scope="module")
def refused_service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tmp_path_factory.mktemp("refused-models")
    write_models({r["model"] for r in REFUSED_RUNS + BESIDE_ABORTS}, directory)
    built = build_service(  # a terabyte free: the verdict is the refusal's, not this host's free memory's
        [Root(str(directory), RootKind.PLAIN)],
        state_dir=str(tmp_path_factory.mktemp("state")),
        read_host=lambda: HostMemory(available=1 << 40, total=1 << 40),
        read_committed=lambda: 0,
    )
    built.index.refresh()
    return built


@pytest.mark.parametrize("run", BESIDE_ABORTS, ids=run_id)
def test_runs_beside_an_abort_that_llama_cpp_accepted_are_answered(run: dict, refused_service: Any) -> None:
    """plm with flash attention off, or on over a one-token ubatch of one sequence (results_fa_abort.jsonl); llama4
    with chunked attention (results_decode_abort.jsonl): llama.cpp built the graph and decoded, so memfit answers
    with both bounds."""
    s = settings(run)
    workload = WireFitVerdictRequest.model_validate(
        _run_request(run) | {"flashAttention": s["fa"], "ubatchTokens": s.get("n_ubatch", 512)}
    )
    answer = wire.fit_one(refused_service, workload)
    assert answer is not None
    result = json.loads(answer.model_dump_json(by_alias=True))
    assert result["estimate"]["upperBoundBytes"] is not None and "workloadUnsupported" not in result["limits"]


ROLLBACK_RUNS = [r for r in load(DATA / "results_rec.jsonl") if settings(r).get("n_rs_seq")]


def _service_over(models: set[str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A service over the writers' files of `models`, its index read."""
    directory = tmp_path_factory.mktemp("models")
    write_models(models, directory)
    built = build_service([Root(str(directory), RootKind.PLAIN)], state_dir=str(tmp_path_factory.mktemp("state")))
    built.index.refresh()
    return built


@pytest.fixture(scope="module")
def rollback_service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _service_over({r["model"] for r in ROLLBACK_RUNS}, tmp_path_factory)


@pytest.mark.parametrize("run", ROLLBACK_RUNS, ids=run_id)
def test_rollback_snapshots_asked_on_the_wire(run: dict, rollback_service: Any) -> None:
    """A fit request's rollbackSnapshots is llama.cpp's n_rs_seq: kvCache + recurrentState are llama.cpp's memory
    module to the byte (snapshots kept or, on an architecture without rollback, ignored), the workspace's bounds
    hold its compute and output buffers, and the answer echoes the setting as requested."""
    s = settings(run)
    request = {
        "modelId": run["model"],
        "allocatedTokens": s["n_ctx"] // s["n_seq"],
        "streams": s["n_seq"],
        "cpuVariant": "haswell",
        "flashAttention": "on" if run["flash_attn"] else "off",  # as llama.cpp resolved it
        "rollbackSnapshots": s["n_rs_seq"],
    }
    answer = wire.fit_one(rollback_service, WireFitVerdictRequest.model_validate(request))
    assert answer is not None
    estimate = json.loads(answer.model_dump_json(by_alias=True))["estimate"]
    parts = {p["component"]: p for p in estimate["parts"]}
    assert parts["kvCache"]["bytes"] + parts["recurrentState"]["bytes"] == run["memory_bytes"]
    assert estimate["workload"]["rollbackSnapshots"] == s["n_rs_seq"]
    source = {x["setting"]: x["source"] for x in estimate["workload"]["settings"]}["rollbackSnapshots"]
    assert source == "request"
    workspace = run["compute_bytes"] + run["output_buffer_bytes_init"]
    assert parts["workspace"]["bytes"] <= workspace <= parts["workspace"]["upperBytes"]


MTP_RUNS = load(DATA / "results_mtp.jsonl")
NO_MTP_LAYERS_MODEL = "qwen35"  # recurrent.FAMILY_SET: qwen35's layers with no NextN layer (nextn_predict_layers 0)


def test_multi_token_prediction_is_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """llama-server's target under --spec-type draft-mtp (results_mtp.jsonl: load_mtp and unmasked nextn embeddings
    set after init, as llama-server sets them): every run compared, KV + recurrent state exact, the output buffer
    exact as the decode's output_reserve grew it, and both bounds within max(1%, 8 MiB) of the whole allocation,
    the NextN layers' weights in it."""
    rows = [r for group in recorded.values() for r in group if settings(r.record).get("mtp")]
    rows = [r for r in rows if not settings(r.record).get("mtp_ctx") and "error" not in r.record]  # the target alone
    # results_mtp.jsonl's, and the latent-expert nemotron_h_moe's that loaded (results_mtp_ctx_nemotron_latent.jsonl)
    latent = [r for r in NEMOTRON_LATENT_RUNS if settings(r).get("mtp") and not settings(r).get("mtp_ctx")]
    assert len(rows) == len(MTP_RUNS) + len([r for r in latent if "error" not in r]) == 21
    assert all(r.compared and r.kv_exact and r.output_exact and r.tight for r in rows)


MTP_CTX_RUNS = load(DATA / "results_mtp_ctx.jsonl") + load(DATA / "results_mtp_ctx_dryrun.jsonl")
MTP_DRAFT_RUNS = [r for r in MTP_CTX_RUNS if "error" not in r]
# cohere2moe's draft context (results_mtp_ctx_cohere2moe.jsonl: 3.21.1's create_memory filters no layer for it, so its
# llama_kv_cache_iswa holds every layer) beside its trunk-only file, whose draft graph aborts
COHERE2MOE_MTP_RUNS = load(DATA / "results_mtp_ctx_cohere2moe.jsonl")
COHERE2MOE_DRAFT_RUNS = [r for r in COHERE2MOE_MTP_RUNS if "error" not in r]
# deepseek2, glm4moe, mimo2 and cohere2moe files without the NextN tensors
TRUNK_ONLY = [r for r in MTP_CTX_RUNS + COHERE2MOE_MTP_RUNS if "error" in r]


def test_mtp_draft_context_is_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """The target and llama-server's MTP draft context beside it (results_mtp_ctx*.jsonl, the probe's mtp_ctx=1):
    every run made compared, both memory modules exact, and both bounds of the whole (the two contexts' buffers)
    within max(1%, 8 MiB); the runs on files without the NextN tensors are llama.cpp's refusals."""
    rows = recorded["results_mtp_ctx.jsonl"] + recorded["results_mtp_ctx_dryrun.jsonl"]
    compared = [r for r in rows if r.compared]
    assert all(settings(r.record).get("mtp_ctx") for r in rows)
    assert len(rows) == len(MTP_CTX_RUNS) and len(compared) == len(MTP_DRAFT_RUNS) == 54
    assert all(r.kv_exact and r.output_exact and r.tight for r in compared)
    assert {r.status for r in rows if not r.compared} == {"unknown: llama.cpp refused these settings"}


# deepseek32's and glm-dsa's draft context (results_mtp_ctx_dsa*.jsonl: tiny files and DeepSeek-V3.2 / GLM-5 shapes
# with the NextN block written whole: dense MLA without the DSA indexer) and nemotron_h_moe's
# (results_mtp_ctx_nemotron.jsonl: its NoPE attention and experts): a plain cache of the NextN layer; deepseek4's
# (results_mtp_ctx_dsv4.jsonl: its own create_memory branch, a llama_kv_cache_iswa of its sliding NextN layer, no
# compressed caches or compressor states)
NEXTN_ONLY_FILES = {
    "results_mtp_ctx_dsa.jsonl": 12,
    "results_mtp_ctx_dsa_dryrun.jsonl": 8,
    "results_mtp_ctx_nemotron.jsonl": 6,
    "results_mtp_ctx_hyv3.jsonl": 6,
    "results_mtp_ctx_dsv4.jsonl": 6,
}
NEXTN_ONLY_RUNS = [r for name in NEXTN_ONLY_FILES for r in load(DATA / name)]


@pytest.mark.parametrize("name", NEXTN_ONLY_FILES)
def test_nextn_only_mtp_draft_context_is_held(name: str, recorded: dict[str, list[BoundsRow]]) -> None:
    """The target and llama-server's MTP draft context of deepseek32, glm-dsa and nemotron_h_moe: every run made and
    compared, both memory modules and the output buffers exact, and both bounds of the whole within
    max(1%, 8 MiB)."""
    rows = recorded[name]
    assert all(settings(r.record).get("mtp_ctx") for r in rows)
    assert len(rows) == len(load(DATA / name)) == NEXTN_ONLY_FILES[name]
    assert not any("error" in r for r in load(DATA / name))
    assert all(r.compared and r.kv_exact and r.output_exact and r.tight for r in rows)


# The draft context under its own settings (results_mtp_draft_settings.jsonl: --spec-draft-type-k/-v, the draft's
# sampling on the host); the runs whose draft context llama.cpp refused apart
DRAFT_SETTING_RUNS = load(DATA / "results_mtp_draft_settings.jsonl")
DRAFT_REFUSED = [r for r in DRAFT_SETTING_RUNS if "error" in r["draft_ctx"]]


@pytest.mark.parametrize(
    "run",
    MTP_DRAFT_RUNS
    + NEXTN_ONLY_RUNS
    + COHERE2MOE_DRAFT_RUNS
    + [r for r in DRAFT_SETTING_RUNS if r not in DRAFT_REFUSED],
    ids=run_id,
)
def test_mtp_draft_context_is_llama_cpps(run: dict, model_files: dict[str, Path]) -> None:
    """The draft context's parts as llama.cpp made them: its KV cache of the NextN layer (deepseek32's and glm-dsa's
    too, without the indexer's, and nemotron_h_moe's; deepseek2's and glm4moe's of every layer; f16, or the types the
    run named), its DECODER_MTP graph's compute buffer replayed to the byte, its output buffer after the draft step
    (logits, masked nextn embeddings and, with each sequence's sampler on the backend as llama-server sets it by
    default, the backend sampling's rows, one a sequence), and the sizes it shares with the target."""
    facts = CACHE.facts((str(model_files[run["model"]]),))
    assert facts.layout is not None and facts.n_vocab is not None
    draft = draft_context(facts.architecture, facts.layout)
    assert draft is not None
    geometry = run_geometry(run, facts.architecture, facts.layout.causal, facts.layout.nextn_width)
    d, s = run["draft_ctx"], settings(run)
    assert (d["n_ctx"], d["n_ctx_seq"], d["n_seq_max"], d["type_k"], d["type_v"]) == (
        run["n_ctx"],
        run["n_ctx_seq"],
        run["n_seq_max"],
        s.get("type_k_draft", "f16"),
        s.get("type_v_draft", "f16"),
    )
    assert d["backend_samplers"] == (run["n_seq_max"] if s.get("draft_sampling", 1) else 0)
    assert sum(draft_kv_bytes(draft, geometry)) == d["memory_bytes"] > 0
    assert replayed(draft.graph, facts.n_vocab, draft_geometry(geometry)).size == d["compute_bytes"]
    if "output_buffer_bytes_after_decode" in d:
        assert d["decode_rc"] == 0 and d["compute_bytes_after_decode"] == d["compute_bytes"]
        assert (
            draft_output_bytes(facts.n_vocab, facts.layout.nextn_width, geometry)
            == d["output_buffer_bytes_after_decode"]
        )
    assert draft_output_bytes(facts.n_vocab, 0, geometry) == d["output_buffer_bytes_init"]


def test_multi_token_prediction_is_what_the_runs_measured(model_files: dict[str, Path]) -> None:
    """Without draft-mtp memfit's weights would leave out the NextN layers' tensors of the two files that hold them
    (qwen35-mtp's MTP block, bailingmoe3's) and keep the three trunk-only files' (deepseek2, glm4moe, mimo2: llama.cpp
    does not require the tensors there), and its output buffer would be the one llama.cpp made at init, short of
    the one the decode grew by the nextn embeddings."""
    short = set()
    for run in MTP_RUNS:
        plain = dict(run, settings={k: v for k, v in run["settings"].items() if k != "mtp"})
        row = compare(plain, model_files[run["model"]], CACHE)
        assert row.weights is not None and row.weights[1] <= run["weights_bytes"]
        if row.weights[1] < run["weights_bytes"]:
            short.add(run["model"])
        facts = CACHE.facts((str(model_files[run["model"]]),))
        assert facts.layout is not None and facts.n_vocab is not None
        at_init = output_buffer(facts.n_vocab, run_geometry(run, facts.architecture, facts.layout.causal))
        assert at_init == run["output_buffer_bytes_init"] < run["output_buffer_bytes_after_decode"]
    assert short == {"qwen35-mtp", "bailingmoe3"}


@pytest.fixture(scope="module")
def mtp_service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    made = [
        r
        for name in ("results_mtp_ctx.jsonl", "results_mtp_ctx_dsa.jsonl", "results_mtp_ctx_nemotron.jsonl")
        + ("results_mtp_ctx_hyv3.jsonl", "results_mtp_ctx_cohere2moe.jsonl", "results_mtp_ctx_dsv4.jsonl")
        for r in load(DATA / name)
    ]
    tiny = {r["model"] for r in made + DRAFT_SETTING_RUNS}
    return _service_over({r["model"] for r in MTP_RUNS} | tiny | {NO_MTP_LAYERS_MODEL}, tmp_path_factory)


def _mtp_estimate(service: Any, request: dict) -> dict:
    answer = wire.fit_one(service, WireFitVerdictRequest.model_validate(request))
    assert answer is not None
    return dict(json.loads(answer.model_dump_json(by_alias=True)))


def _mtp_request(run: dict) -> dict:
    """The fit request for an MTP run: llama-server's draft-mtp at the run's sizes and flash attention, no
    verification batch, the draft context's own settings where the run named them."""
    s = settings(run)
    draft = {
        "draftKeyElementBytes": ELEMENT_BYTES[s["type_k_draft"]] if "type_k_draft" in s else None,
        "draftValueElementBytes": ELEMENT_BYTES[s["type_v_draft"]] if "type_v_draft" in s else None,
        "draftBackendSampling": bool(s["draft_sampling"]) if "draft_sampling" in s else None,
    }
    return (
        _run_request(run)
        | {
            "ubatchTokens": run["n_ubatch"],
            "cpuVariant": "haswell",
            "flashAttention": "on" if run["flash_attn"] else "off",  # as llama.cpp resolved it
            "multiTokenPrediction": True,
            "draftTokens": 0,  # the probe decoded a prompt, one output: no verification batch
            "kvUnified": bool(s.get("unified")),
        }
        | {k: v for k, v in draft.items() if v is not None}
    )


@pytest.mark.parametrize(
    "run",
    [
        r
        for r in MTP_DRAFT_RUNS + NEXTN_ONLY_RUNS + COHERE2MOE_DRAFT_RUNS + DRAFT_SETTING_RUNS
        if "decode_tokens" in r.get("draft_ctx", r)
    ],
    ids=run_id,
)
def test_multi_token_prediction_asked_on_the_wire(run: dict, mtp_service: Any) -> None:
    """A fit request's multiTokenPrediction is llama-server's draft-mtp: the weights llama.cpp loaded with load_mtp
    to the byte, kvCache + recurrentState the target's memory module and the MTP draft context's (in the draft's own
    cache types where asked), the workspace's bounds around both contexts' compute and output buffers after their
    decodes (the draft's sampling on the backend or not), and the settings echoed as requested."""
    request = _mtp_request(run)
    estimate = _mtp_estimate(mtp_service, request)["estimate"]
    parts = {p["component"]: p for p in estimate["parts"]}
    assert parts["weights"]["bytes"] == parts["weights"]["upperBytes"] == run["weights_bytes"]
    d = run["draft_ctx"]
    assert parts["kvCache"]["bytes"] + parts["recurrentState"]["bytes"] == run["memory_bytes"] + d["memory_bytes"]
    workspace = run["compute_bytes_after_decode"] + run["output_buffer_bytes_after_decode"]
    workspace += d["compute_bytes_after_decode"] + d["output_buffer_bytes_after_decode"]
    assert parts["workspace"]["bytes"] <= workspace <= parts["workspace"]["upperBytes"]
    assert "MTP draft context" in parts["kvCache"]["note"] and "MTP draft context" in parts["workspace"]["note"]
    assert estimate["workload"]["multiTokenPrediction"] is True
    sources = {x["setting"]: x["source"] for x in estimate["workload"]["settings"]}
    assert sources["multiTokenPrediction"] == "request"
    for name in ("draftKeyElementBytes", "draftValueElementBytes", "draftBackendSampling"):
        asked = request.get(name)
        assert estimate["workload"][name] == (
            asked if asked is not None else {"draftBackendSampling": True}.get(name, 2)
        )
        assert sources[name] == ("request" if asked is not None else "default")


def test_mtp_draft_settings_are_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """The draft context under its own cache types and host-side sampling (results_mtp_draft_settings.jsonl): every
    run llama.cpp made compared, both memory modules exact, both bounds within max(1%, 8 MiB); the runs it refused
    are a quantized draft V with flash attention off, and bailingmoe3's (MLA) and deepseek4's K and V types
    differing."""
    rows = recorded["results_mtp_draft_settings.jsonl"]
    assert len(rows) == len(DRAFT_SETTING_RUNS) == 18
    assert all(r.kv_exact and r.output_exact and r.tight for r in rows if r.compared)
    refused = {run_id(r.record) for r in rows if not r.compared}
    assert refused == {run_id(r) for r in DRAFT_REFUSED}
    for run in DRAFT_SETTING_RUNS:
        s = settings(run)
        k, v = s.get("type_k_draft", "f16"), s.get("type_v_draft", "f16")
        expected = (v == "q8_0" and s["fa"] == "off") or (run["model"] in ("bailingmoe3", "deepseek4-mtp") and k != v)
        assert (run in DRAFT_REFUSED) == expected, run_id(run)


@pytest.mark.parametrize("run", DRAFT_REFUSED, ids=run_id)
def test_mtp_draft_types_llama_cpp_refused_are_unsupported(run: dict, mtp_service: Any) -> None:
    """A draft context llama.cpp refused (llama-server stops: "failed to create MTP context"): under the same request
    memfit answers unknown with workloadUnsupported, the draft's types named; with f16 draft types it answers."""
    request = _mtp_request(run)
    refused = _mtp_estimate(mtp_service, request)
    plain = _mtp_estimate(mtp_service, request | {"draftKeyElementBytes": 2, "draftValueElementBytes": 2})
    assert "workloadUnsupported" in refused["limits"] and "workloadUnsupported" not in plain["limits"]
    parts = {p["component"]: p for p in refused["estimate"]["parts"]}
    assert {parts[c]["basis"] for c in ("kvCache", "workspace")} == {"unknown"}
    assert "--spec-draft-type-k/-v" in parts["kvCache"]["note"]


@pytest.mark.parametrize("model", sorted({r["model"] for r in TRUNK_ONLY}))
def test_multi_token_prediction_without_nextn_tensors_is_unsupported(model: str, mtp_service: Any) -> None:
    """A file with NextN layers but none of their tensors (results_mtp_ctx.jsonl, results_mtp_ctx_cohere2moe.jsonl:
    llama-server's draft context on it aborts in the MTP graph's GGML_ASSERT on nextn.eh_proj): under draft-mtp the
    answer is unknown with workloadUnsupported; without it the same request is answered."""
    assert all("nextn.eh_proj" in r["stderr_tail"] for r in TRUNK_ONLY if r["model"] == model)
    request: dict = {"modelId": model, "allocatedTokens": 2048, "cpuVariant": "haswell"}
    plain = _mtp_estimate(mtp_service, request)
    refused = _mtp_estimate(mtp_service, request | {"multiTokenPrediction": True})
    assert "workloadUnsupported" not in plain["limits"] and "workloadUnsupported" in refused["limits"]
    parts = {p["component"]: p for p in refused["estimate"]["parts"]}
    assert {parts[c]["basis"] for c in ("kvCache", "workspace")} == {"unknown"}
    assert "nextn.eh_proj" in parts["kvCache"]["note"]


# mimo2's and step35's MTP draft context (llama_kv_cache_iswa over the NextN layer): the tiny writers and the shapes
MTP_SWA_RUNS = load(DATA / "results_mtp_ctx_swa.jsonl") + load(DATA / "results_mtp_ctx_swa_dryrun.jsonl")
MTP_SWA_DRAFT_RUNS = [r for r in MTP_SWA_RUNS if "error" not in r]
# where llama.cpp put each file's NextN layer in its draft's cache pair (the draft_ctx kv_caches' roles): mimo2's
# pattern covers the trunk only, so its NextN layer is full; step35's pattern covers it, and it slides
NEXTN_CACHE_ROLE = {"mimo2": "base", "step35": "swa", "deepseek4": "swa"}


# the files of the draft contexts over a llama_kv_cache_iswa, and the runs each group compares
ISWA_DRAFT_FILES = {
    ("results_mtp_ctx_swa.jsonl", "results_mtp_ctx_swa_dryrun.jsonl"): 20,
    ("results_mtp_ctx_cohere2moe.jsonl",): 12,
}


@pytest.mark.parametrize("names", ISWA_DRAFT_FILES, ids="+".join)
def test_mtp_iswa_draft_context_is_held(names: tuple[str, ...], recorded: dict[str, list[BoundsRow]]) -> None:
    """mimo2's and step35's target and MTP draft context (results_mtp_ctx_swa*.jsonl), and cohere2moe's
    (results_mtp_ctx_cohere2moe.jsonl): every run made compared, both memory modules exact and both bounds within
    max(1%, 8 MiB); the trunk-only step35 and cohere2moe files' runs llama.cpp's refusals."""
    rows = [r for name in names for r in recorded[name]]
    made = [r for name in names for r in load(DATA / name) if "error" not in r]
    compared = [r for r in rows if r.compared]
    assert len(compared) == len(made) == ISWA_DRAFT_FILES[names] < len(rows)
    assert all(r.kv_exact and r.output_exact and r.tight for r in compared)
    assert {r.status for r in rows if not r.compared} == {"unknown: llama.cpp refused these settings"}


@pytest.mark.parametrize("run", MTP_SWA_DRAFT_RUNS, ids=run_id)
def test_mtp_iswa_draft_context_is_llama_cpps(run: dict, model_files: dict[str, Path]) -> None:
    """mimo2's and step35's draft context's parts as llama.cpp made them (test_mtp_draft_context_is_llama_cpps)."""
    test_mtp_draft_context_is_llama_cpps(run, model_files)


@pytest.mark.parametrize("run", MTP_SWA_DRAFT_RUNS + load(DATA / "results_mtp_ctx_dsv4.jsonl"), ids=run_id)
def test_mtp_iswa_draft_cache_is_the_nextn_layers_half(run: dict, model_files: dict[str, Path]) -> None:
    """The draft's llama_kv_cache_iswa (create_memory's filter il >= n_layer(); deepseek4's own branch the same)
    holds the NextN layer in the half is_swa(il) names, with that half's cells (n_ctx_seq, or the SWA cache's padded
    window) and the layer's own KV heads; the other half holds no layer."""
    facts = CACHE.facts((str(model_files[run["model"]]),))
    assert facts.layout is not None
    draft = draft_context(facts.architecture, facts.layout)
    assert draft is not None
    geometry = run_geometry(run, facts.architecture, facts.layout.causal, facts.layout.nextn_width)
    held = [c for c in run["draft_ctx"]["kv_caches"] if c["n_layer"]]
    assert [c["role"] for c in held] == [NEXTN_CACHE_ROLE[facts.architecture]]
    assert ("swa" if draft.window else "base") == held[0]["role"]
    assert (held[0]["cells"], held[0]["n_layer"]) == (draft.cells(geometry), draft.layers)
    assert (held[0]["k_bytes"], held[0]["v_bytes"]) == draft_kv_bytes(draft, geometry)


@pytest.fixture(scope="module")
def mtp_swa_service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _service_over({r["model"] for r in load(DATA / "results_mtp_ctx_swa.jsonl")}, tmp_path_factory)


@pytest.mark.parametrize("run", [r for r in MTP_SWA_DRAFT_RUNS if "decode_tokens" in r], ids=run_id)
def test_multi_token_prediction_over_an_iswa_draft_asked_on_the_wire(run: dict, mtp_swa_service: Any) -> None:
    """mimo2's and step35's runs asked on the wire (test_multi_token_prediction_asked_on_the_wire)."""
    test_multi_token_prediction_asked_on_the_wire(run, mtp_swa_service)


def test_multi_token_prediction_on_trunk_only_step35_is_unsupported(mtp_swa_service: Any) -> None:
    """step35's trunk-only file (results_mtp_ctx_swa.jsonl: its draft graph aborts on nextn.eh_proj) stays
    workloadUnsupported under draft-mtp (test_multi_token_prediction_without_nextn_tensors_is_unsupported)."""
    trunk_only = {r["model"] for r in MTP_SWA_RUNS if "error" in r}
    assert trunk_only == {"step35-nextn"}
    assert all("nextn.eh_proj" in r["stderr_tail"] for r in MTP_SWA_RUNS if "error" in r)
    test_multi_token_prediction_without_nextn_tensors_is_unsupported("step35-nextn", mtp_swa_service)


DENSE_REFUSED_RUNS = load(DATA / "results_dense_refused.jsonl")
# check_tensor_dims' message: "tensor 'dense_2.weight' has wrong shape; expected    256,      0, got ..."
WRONG_SHAPE = re.compile(r"tensor '([^']+)' has wrong shape; expected ([\d, ]+), got")


@pytest.mark.parametrize("run", DENSE_REFUSED_RUNS, ids=lambda r: r["model"])
def test_dense_projections_their_loader_does_not_expect_are_unreadable(run: dict, model_files: dict[str, Path]) -> None:
    """A dense_2 wider than its loader expects (results_dense_refused.jsonl: gemma3 reads no width key, so expects it 0
    wide; gemma-embedding's key names another width): llama.cpp refuses the file, and memfit answers
    artifactUnreadable naming the tensor and the shape llama.cpp expected."""
    found = WRONG_SHAPE.search(run["stderr_tail"])
    assert run["error"] == "model load failed" and found is not None
    name, expected = found.group(1), [int(n) for n in found.group(2).replace(" ", "").split(",")]
    with pytest.raises(EvidenceError) as caught:
        ArtifactCache().facts([str(model_files[run["model"]])])
    assert caught.value.limit == Limit.ARTIFACT_UNREADABLE
    assert f"{name!r} has shape" in str(caught.value) and f"make it {expected}" in str(caught.value)


# MTP blocks graph_mtp aborts on: mimo2's not the one it asserts (Q, K and V apart; routed experts), nemotron_h_moe's
# latent experts without the block's own latent projections; its file with them llama.cpp does not load at all
NEMOTRON_LATENT_RUNS = load(DATA / "results_mtp_ctx_nemotron_latent.jsonl")
MTP_ASSERT_RUNS = (
    load(DATA / "results_mtp_ctx_asserts.jsonl")
    + [r for r in NEMOTRON_LATENT_RUNS if r["model"].endswith("-bare") and "error" in r]
    + [r for r in load(DATA / "results_mtp_headless.jsonl") if r["model"] == "glm4moe-mtp-headless" and "error" in r]
)
LOAD_REFUSED_RUNS = [r for r in NEMOTRON_LATENT_RUNS if r.get("error") == "model load failed"]
MTP_ASSERTED = {
    "mimo2-mtp-unfused": ("fused attn_qkv", "Q, K and V apart"),
    "mimo2-mtp-moe": ("dense FFN", "routed experts"),
    "nemotron-h-moe-latent-mtp-bare": ("as->ne[0] == b->ne[0]", "moe_latent_size"),
    "glm4moe-mtp-headless": ("nextn.eh_proj", "nextn.eh_proj"),  # loaded trunk-only, the draft's graph asserts it
}


def test_nemotron_3_supers_mtp_block_with_its_latent_projections_is_unreadable(model_files: dict[str, Path]) -> None:
    """nemotron_h_moe's loader creates no ffn_latent_down / _up for the NextN block (results_mtp_ctx_nemotron_latent
    .jsonl: the file holding them failed every run, MTP or not, "wrong number of tensors"): memfit answers
    artifactUnreadable naming both; the same file without them is read."""
    assert {r["model"] for r in LOAD_REFUSED_RUNS} == {"nemotron-h-moe-latent-mtp"} and len(LOAD_REFUSED_RUNS) == 4
    assert all("wrong number of tensors" in r["stderr_tail"] for r in LOAD_REFUSED_RUNS)
    with pytest.raises(EvidenceError) as caught:
        ArtifactCache().facts([str(model_files["nemotron-h-moe-latent-mtp"])])
    assert caught.value.limit == Limit.ARTIFACT_UNREADABLE and "wrong number of tensors" in str(caught.value)
    assert all(f"'blk.6.ffn_latent_{d}.weight'" in str(caught.value) for d in ("down", "up"))
    assert ArtifactCache().facts([str(model_files["nemotron-h-moe-latent-mtp-bare"])]).layout is not None


@pytest.mark.parametrize("run", MTP_ASSERT_RUNS, ids=lambda r: f"{r['model']}-{settings(r)['n_ctx']}")
def test_multi_token_prediction_on_a_block_graph_mtp_asserts_against_is_unsupported(
    run: dict, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """mimo2's graph_mtp asserts a fused attn_qkv and a dense FFN on the NextN block (results_mtp_ctx_asserts.jsonl:
    each run aborted there), nemotron_h_moe's runs latent experts on n_embd-wide rows, glm4moe's (every one's)
    asserts the NextN layer's nextn.eh_proj (results_mtp_headless.jsonl): under draft-mtp at the run's settings the
    answer is unknown with workloadUnsupported, the assert's subject named; without draft-mtp the same request is
    answered."""
    asserted, named = MTP_ASSERTED[run["model"]]
    assert "error" in run and asserted in run["stderr_tail"] and "GGML_ASSERT" in run["stderr_tail"]
    service = _service_over({run["model"]}, tmp_path_factory)
    s = settings(run)
    request = _run_request(run) | {"cpuVariant": "haswell", "flashAttention": s["fa"]}
    plain = _mtp_estimate(service, request)
    refused = _mtp_estimate(service, request | {"multiTokenPrediction": True, "draftTokens": 0})
    assert "workloadUnsupported" not in plain["limits"] and plain["estimate"]["upperBoundBytes"] is not None
    assert "workloadUnsupported" in refused["limits"] and refused["estimate"]["upperBoundBytes"] is None
    parts = {p["component"]: p for p in refused["estimate"]["parts"]}
    assert {parts[c]["basis"] for c in ("kvCache", "workspace")} == {"unknown"}
    assert "GGML_ASSERT" in parts["kvCache"]["note"] and named in parts["kvCache"]["note"]


@pytest.mark.parametrize("run", COHERE2MOE_DRAFT_RUNS, ids=run_id)
def test_cohere2moes_draft_cache_holds_every_layer_in_its_half(run: dict, model_files: dict[str, Path]) -> None:
    """The draft's llama_kv_cache_iswa holds what the target's does, layer for layer and half for half (the NextN
    layer in the base half: is_swa is false past n_layer()), in the draft's own types: memfit's cells of each layer
    are its half's, and its K and V bytes each half's sum."""
    facts = CACHE.facts((str(model_files[run["model"]]),))
    assert facts.layout is not None
    draft = draft_context(facts.architecture, facts.layout)
    assert draft is not None and draft.all_layers
    geometry = run_geometry(run, facts.architecture, facts.layout.causal, facts.layout.nextn_width)
    held = run["draft_ctx"]["kv_caches"]
    assert [(c["role"], c["layers"], c["cells"]) for c in held] == [
        (c["role"], c["layers"], c["cells"]) for c in run["kv_caches"]
    ]
    assert sorted(il for c in held for il in c["layers"]) == list(range(draft.layers))
    nextn = draft.layers - 1
    assert [c["role"] for c in held if nextn in c["layers"]] == ["base"] and draft.windows[nextn] is None
    cells = draft.layer_cells(geometry)
    assert all({cells[il] for il in c["layers"]} == {c["cells"]} for c in held)
    assert draft_kv_bytes(draft, geometry) == (sum(c["k_bytes"] for c in held), sum(c["v_bytes"] for c in held))


HEADLESS_RUNS = load(DATA / "results_dsv4_headless.jsonl")


def test_a_deepseek4_nextn_layer_without_its_head_is_a_trunk_layer(tmp_path_factory: pytest.TempPathFactory) -> None:
    """deepseek4's load_arch_hparams sets n_layer_nextn 0 where the NextN layer has no nextn.eh_proj
    (results_dsv4_headless.jsonl: llama.cpp loaded all 5 blocks as the trunk, weights and memory exact through
    test_parts_equal_llama_cpp, and refused the MTP draft context): memfit reads no NextN layer, and under draft-mtp
    answers workloadUnsupported for a model without them."""
    (refused,) = [r for r in HEADLESS_RUNS if settings(r).get("mtp_ctx") and r["model"] == "deepseek4-mtp-headless"]
    assert refused["draft_ctx"] == {"error": "draft context init failed"}
    service = _service_over({refused["model"]}, tmp_path_factory)
    request: dict = {"modelId": refused["model"], "allocatedTokens": 1000, "cpuVariant": "haswell"}
    answer = _mtp_estimate(service, request | {"multiTokenPrediction": True})
    parts = {p["component"]: p for p in answer["estimate"]["parts"]}
    assert "workloadUnsupported" in answer["limits"] and "doesn't contain MTP layers" in parts["kvCache"]["note"]
    assert parts["weights"]["bytes"] == refused["weights_bytes"]


def test_multi_token_prediction_without_nextn_layers_is_unsupported(mtp_service: Any) -> None:
    """A model without NextN layers under draft-mtp: llama_init_from_model refuses the MTP context and llama-server
    stops, so past the weights the answer is unknown, with workloadUnsupported; without it the same request is
    answered."""
    request: dict = {"modelId": NO_MTP_LAYERS_MODEL, "allocatedTokens": 2048, "cpuVariant": "haswell"}
    plain = _mtp_estimate(mtp_service, request)
    refused = _mtp_estimate(mtp_service, request | {"multiTokenPrediction": True})
    assert "workloadUnsupported" not in plain["limits"] and "workloadUnsupported" in refused["limits"]
    parts = {p["component"]: p for p in refused["estimate"]["parts"]}
    assert parts["weights"]["bytes"] == {p["component"]: p for p in plain["estimate"]["parts"]}["weights"]["bytes"]
    assert {parts[c]["basis"] for c in ("kvCache", "recurrentState", "workspace")} == {"unknown"}
    assert "MTP" in parts["kvCache"]["note"]


TINY_REAL = [r for r in RUNS if r["model"].endswith("-rw")]


def test_tiny_random_weight_models_allocated_and_decoded_in_every_family(tmp_path: Path) -> None:
    """tests/data/results_tiny_real.jsonl: a random-weight model per family whose graph differs, each run a real
    allocation followed by a decode; its writer gives the sparse family model's header with finite random data."""
    import gguf
    import numpy as np

    from tools.families import tiny_real
    from tools.gguf_writers import write_model

    assert {r["family"] for r in TINY_REAL} == set(tiny_real.FAMILIES)
    assert {r["model"] for r in TINY_REAL} == set(tiny_real.FAMILY_SET)
    assert len(TINY_REAL) == len(tiny_real.FAMILY_SET) * len(tiny_real.SETTINGS)
    for run in TINY_REAL:
        assert "error" not in run and run["no_alloc"] == 0 and run["compute_bytes"] > 0
        assert (run["decode_rc"], run["decode_tokens"]) == (0, tiny_real.DECODE)
    random, sparse = tmp_path / "rw.gguf", tmp_path / "sparse.gguf"
    write_model(tiny_real.FAMILY_SET["bert-embd-rw"](), random)
    write_model(tiny_real._BASE["bert-embd"](), sparse)
    reader = gguf.GGUFReader(random)
    assert random.read_bytes()[: reader.data_offset] == sparse.read_bytes()[: reader.data_offset]
    for tensor in reader.tensors:
        data = np.asarray(tensor.data)
        assert np.isfinite(data).all() and data.any(), tensor.name


VARIANT_RUNS = load(DATA / "results_variants_dryrun.jsonl")


def test_a_tied_q2_k_embedding_is_kept_twice_only_under_avx512(model_files: dict[str, Path]) -> None:
    """tests/data/results_variants_dryrun.jsonl: the Gemma-3-4B shape in Q2_K, dry runs with only
    libggml-cpu-haswell.so, then only libggml-cpu-skylakex.so, in backend_dir (this project's AVX-512 host runs
    both). skylakex's CPU_REPACK takes Q2_K, so its output copy of the tied embedding is a second tensor;
    haswell's does not. Each is exact under its own variant (test_parts_equal_llama_cpp); under the other, the
    bounds miss it."""
    assert {r["cpu_variant"] for r in VARIANT_RUNS} == {"haswell", "skylakex"} and len(VARIANT_RUNS) == 16
    for run in VARIANT_RUNS:
        other = BY_NAME["haswell" if run["cpu_variant"] == "skylakex" else "skylakex"]
        floor, ceiling = compare(run, model_files[run["model"]], CACHE, other).weights or (0, 0)
        assert not floor <= run["weights_bytes"] <= ceiling
        assert ("CPU_REPACK" in run["weights_buffers"]) == (run["cpu_variant"] == "skylakex")


DRAFT_RUNS = load(DATA / "results_draft.jsonl")


def test_draft_verification_is_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """llama-server's verification batch (results_draft.jsonl: each sequence's sampled token and draft decoded with
    logits): every run compared, the output buffer exact as the decode's output_reserve grew it, the bounds tight."""
    rows = recorded["results_draft.jsonl"]
    assert len(rows) == len(DRAFT_RUNS) == 16
    assert all(r.compared and r.kv_exact and r.output_exact and r.tight for r in rows)


@pytest.mark.parametrize("run", DRAFT_RUNS, ids=run_id)
def test_a_verification_grows_the_output_buffer_to_its_outputs(run: dict) -> None:
    """What llama.cpp measured is output_reserve's rule: n_vocab floats a row, n_seq_max rows at init, then one per
    output of the verification batch, min(n_batch, n_seq x (1 + draft)) (the probe caps the batch at n_batch as
    llama-server's output limit does)."""
    s = settings(run)
    n_vocab = TRUTH_FILES["results_draft.jsonl"].models[run["model"]]().vocab  # the writer's vocabulary
    assert run["output_buffer_bytes_init"] == n_vocab * 4 * s["n_seq"]
    rows = min(run["n_batch"], s["n_seq"] * (1 + s["verify"]))
    assert run["decode_rc"] == 0 and run["decode_tokens"] == rows
    assert run["output_buffer_bytes_after_decode"] == n_vocab * 4 * rows


@pytest.fixture(scope="module")
def draft_service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _service_over({r["model"] for r in DRAFT_RUNS}, tmp_path_factory)


@pytest.mark.parametrize("run", DRAFT_RUNS, ids=run_id)
def test_draft_tokens_asked_on_the_wire(run: dict, draft_service: Any) -> None:
    """A fit request's draftTokens is the draft a slot's verification carries: the workspace's bounds around
    llama.cpp's compute buffer and the output buffer the verification grew, the setting echoed as requested."""
    s = settings(run)
    request = _run_request(run) | {
        "ubatchTokens": run["n_ubatch"],
        "cpuVariant": "haswell",
        "flashAttention": "on" if run["flash_attn"] else "off",  # as llama.cpp resolved it
        "kvUnified": bool(s.get("unified")),
        "draftTokens": s["verify"],
    }
    estimate = _mtp_estimate(draft_service, request)["estimate"]
    parts = {p["component"]: p for p in estimate["parts"]}
    workspace = run["compute_bytes_after_decode"] + run["output_buffer_bytes_after_decode"]
    assert parts["workspace"]["bytes"] <= workspace <= parts["workspace"]["upperBytes"]
    assert estimate["workload"]["draftTokens"] == s["verify"]


OUTPUT_CAP_DRY = load(DATA / "results_output_cap_dryrun.jsonl")
OUTPUT_CAP_DECODED = load(DATA / "results_output_cap.jsonl")
OUTPUT_CAP_FILES = ("results_output_cap_dryrun.jsonl", "results_output_cap.jsonl")


def test_llama_servers_output_cap_is_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """llama-server's n_outputs_max (the probe's outputs_max=N, results_output_cap*.jsonl: real-scale dense,
    sliding-window, MoE, recurrent and hybrid shapes in dry runs, tiny models decoded, 1 and 4 sequences, caps of
    drafts 0 and 3, ubatch 512 and 2048, flash attention on and off; a few uncapped runs beside them): every run
    compared, the caches and the output buffer exact, both workspace bounds within max(1%, 8 MiB)."""
    rows = [r for name in OUTPUT_CAP_FILES for r in recorded[name]]
    assert len(rows) == len(OUTPUT_CAP_DRY) + len(OUTPUT_CAP_DECODED) == 118
    assert all(r.compared and r.kv_exact and r.output_exact and r.tight for r in rows)
    assert sum("outputs_max" in settings(r.record) for r in rows) == 108


def _server_cap(run: dict) -> bool:
    """A run llama-server would make: its cap is its own rule's for the run's sequences and draft (server_output_limits:
    min(n_batch, n_parallel x (1 + n_draft)))."""
    s = settings(run)
    return s.get("outputs_max") == min(run["n_batch"], s["n_seq"] * (1 + s.get("verify", 0)))


SERVER_CAPPED = [r for r in OUTPUT_CAP_DRY + OUTPUT_CAP_DECODED if _server_cap(r)]
UNCAPPED = [r for r in OUTPUT_CAP_DRY if "outputs_max" not in settings(r)]


@pytest.fixture(scope="module")
def cap_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A live memfit server over the output-cap runs' models (the real-scale shapes sparse)."""
    service = _service_over({r["model"] for r in OUTPUT_CAP_DRY + OUTPUT_CAP_DECODED}, tmp_path_factory)
    with LiveServer(service) as server, server.client() as client:
        yield client


def _cap_workspace(client: httpx.Client, run: dict, profile: str) -> tuple[int, int, dict]:
    """The workspace bounds memfit answers over the wire for a run's settings under `profile`."""
    s = settings(run)
    body = _run_request(run) | {
        "profile": profile,
        "ubatchTokens": run["n_ubatch"],
        "cpuVariant": "haswell",
        "flashAttention": "on" if run["flash_attn"] else "off",  # as llama.cpp resolved it
        "kvUnified": bool(s.get("unified")),
        "draftTokens": s.get("verify", 0),
    }
    (result,) = client.post("/v1/models/fit/batch", json=[body]).json()["results"]
    parts = {p["component"]: p for p in result["estimate"]["parts"]}
    return parts["workspace"]["bytes"], parts["workspace"]["upperBytes"], result["estimate"]["workload"]


def _tight(floor: int, truth: int, ceiling: int) -> bool:
    """floor <= truth <= ceiling, both within max(1%, 8 MiB) of it."""
    slack = max(truth // 100, 8 << 20)
    return truth - slack <= floor <= truth <= ceiling <= truth + slack


@pytest.mark.parametrize("run", SERVER_CAPPED, ids=run_id)
def test_the_llama_server_profile_reserves_the_capped_graph(run: dict, cap_server: httpx.Client) -> None:
    """Under the llamaServer profile the reserved prompt graph has llama-server's output limit: the workspace's
    bounds hold llama.cpp's compute and output buffers as measured with that cap (after the decode where the run
    verified a draft), both tight."""
    floor, ceiling, workload = _cap_workspace(cap_server, run, "llamaServer")
    assert _tight(floor, measured_workspace(run), ceiling)
    assert workload["profile"] == "llamaServer"


def test_every_llama_server_profile_is_capped(cap_server: httpx.Client) -> None:
    """Ollama's and LM Studio's launches, and a running llama-server (none runs here: its defaults), cap the graph
    as llama-server does: the same settings give the capped buffers under each."""
    run = next(r for r in SERVER_CAPPED if r["model"] == "llama31-8b-shape-q4_0" and settings(r)["n_seq"] == 4)
    for profile in ("ollama", "lmStudio", "running"):
        floor, ceiling, _ = _cap_workspace(cap_server, run, profile)
        assert _tight(floor, measured_workspace(run), ceiling), profile


@pytest.mark.parametrize("run", UNCAPPED, ids=run_id)
def test_the_custom_profile_stays_a_plain_context(run: dict, cap_server: httpx.Client) -> None:
    """memfit's custom profile is a plain llama.cpp context (n_outputs_max = n_batch: every token of the reserved
    ubatch an output): its bounds hold the uncapped run; llama-server's at the same settings lie below it."""
    floor, ceiling, _ = _cap_workspace(cap_server, run, "custom")
    assert _tight(floor, measured_workspace(run), ceiling)
    _, server_ceiling, _ = _cap_workspace(cap_server, run, "llamaServer")
    assert server_ceiling < measured_workspace(run)


EMBEDDING_DRY = load(DATA / "results_embedding_dryrun.jsonl")
EMBEDDING_DECODED = load(DATA / "results_embedding.jsonl")
EMBEDDING_FILES = ("results_embedding_dryrun.jsonl", "results_embedding.jsonl")
SERVING_EMBEDDINGS = [r for r in EMBEDDING_DRY + EMBEDDING_DECODED if settings(r).get("embeddings")]


def test_llama_server_serving_embeddings_is_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """llama-server serving embeddings (the probe's embeddings=1, results_embedding*.jsonl: real-scale dense,
    sliding-window and MoE shapes without a pooling of their own and with last, mean and cls, BERT encoders, in dry
    runs; tiny decoders, a non-causal llama and BERTs decoded, every token of a prompt an output): every run
    compared, the caches and the output buffer exact (after the decode where one ran), the bounds tight; the
    pooling's nodes replayed."""
    rows = [r for name in EMBEDDING_FILES for r in recorded[name]]
    assert len(rows) == len(EMBEDDING_DRY) + len(EMBEDDING_DECODED) == 56
    assert all(r.compared and r.kv_exact and r.output_exact and r.tight for r in rows)
    assert len(SERVING_EMBEDDINGS) == 49


def _writer_widths(run: dict) -> tuple[int, int]:
    """The run's model's vocabulary and n_embd as its writer wrote them."""
    model = model_writers()[run["model"]]()
    return model.vocab, int(model.kv[f"{model.arch}.embedding_length"])


@pytest.mark.parametrize("run", EMBEDDING_DECODED, ids=run_id)
def test_an_embedding_decode_outputs_every_token(run: dict) -> None:
    """What llama.cpp measured is output_reserve's rule under cparams.embeddings: n_vocab logits and n_embd_out
    embeddings a row, n_seq_max rows at init, then one per token of the decode (all outputs: "pooled embedding
    requires that all tokens are output"), n_batch of them (llama-server's, the ubatch)."""
    n_vocab, n_embd = _writer_widths(run)
    assert run["output_buffer_bytes_init"] == (n_vocab + n_embd) * 4 * settings(run)["n_seq"]
    assert run["decode_rc"] == 0 and run["decode_tokens"] == run["n_batch"] == run["n_ubatch"]
    assert run["output_buffer_bytes_after_decode"] == (n_vocab + n_embd) * 4 * run["n_batch"]


ENCODED = load(DATA / "results_encode.jsonl")


def test_a_model_without_memory_decoded_is_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """A model without a memory module decoded through encode() (results_encode.jsonl: BERTs, nomic-bert and
    bert-large's shape, a plain context's n_batch over a 512 and a 256 ubatch, 1 and 4 sequences, without embeddings
    and with): every run compared, the output buffer exact as the decode grew it, the bounds tight."""
    rows = recorded["results_encode.jsonl"]
    assert len(rows) == len(ENCODED) == 24
    assert all(r.compared and r.kv_exact and r.output_exact and r.tight for r in rows)


@pytest.mark.parametrize("run", ENCODED, ids=run_id)
def test_an_encode_outputs_every_token_of_its_ubatch(run: dict) -> None:
    """What llama.cpp measured is encode()'s rule: n_vocab logits a row (and n_embd_out embeddings under
    cparams.embeddings), n_seq_max rows at init, then one per token of the prompt, which is one ubatch at most
    (encode() asserts n_ubatch >= n_tokens), however large n_batch is; every token an output, embeddings or not."""
    n_vocab, n_embd = _writer_widths(run)
    row = n_vocab + (n_embd if settings(run).get("embeddings") else 0)
    assert run["output_buffer_bytes_init"] == row * 4 * settings(run)["n_seq"]
    assert run["decode_rc"] == 0 and run["decode_tokens"] == run["n_ubatch"] < run["n_batch"] == 2048
    assert run["output_buffer_bytes_after_decode"] == row * 4 * run["n_ubatch"]


ENCODED_UNDER_SERVER = load(DATA / "results_encode_server.jsonl")
WARMED = [r for r in ENCODED_UNDER_SERVER if "error" not in r]
ABORTED = [r for r in ENCODED_UNDER_SERVER if "error" in r]


def _warmup_tokens(run: dict) -> int:
    """The tokens of the run's warmup as its writer's vocabulary names them: the WordPiece writers' BOS, and their
    -eos variants' EOS too (tools/truth/matrices.py)."""
    return 2 if run["model"].endswith("-eos") else 1


def test_a_model_without_memory_under_llama_server_is_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """The same models under llama-server without embeddings (results_encode_server.jsonl: its output limit, its
    warmup the only decode): every run that warmed up compared, the output buffer exact as the warmup left it, the
    bounds tight; the four runs a two-token warmup aborted (one slot's limit of one output) not compared."""
    rows = recorded["results_encode_server.jsonl"]
    assert len(rows) == len(ENCODED_UNDER_SERVER) == 30 and (len(WARMED), len(ABORTED)) == (26, 4)
    assert all(r.compared and r.kv_exact and r.output_exact and r.tight for r in rows if "error" not in r.record)
    for run in ABORTED:
        assert _warmup_tokens(run) == 2 and settings(run)["outputs_max"] == 1
        assert "GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) failed" in run["stderr_tail"]


@pytest.mark.parametrize("run", WARMED, ids=run_id)
def test_llama_server_warmup_outputs_its_tokens(run: dict) -> None:
    """What llama.cpp measured: the warmup decodes the vocabulary's BOS and EOS, whichever it names, and encode()
    keeps n_seq_max rows or one per token of it, whichever is more (not a ubatch's: the server's completions and
    embedding tasks never decode on such a model); no compute buffer grows past the one reserved under the limit."""
    n_vocab, _ = _writer_widths(run)
    s = settings(run)
    assert run["decode_rc"] == 0 and run["decode_tokens"] == _warmup_tokens(run) <= s["outputs_max"]
    assert run["output_buffer_bytes_init"] == n_vocab * 4 * s["n_seq"]
    assert run["output_buffer_bytes_after_decode"] == n_vocab * 4 * max(s["n_seq"], _warmup_tokens(run))
    assert run["compute_bytes_after_decode"] == run["compute_bytes"]


@pytest.fixture(scope="module")
def encode_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A live memfit server over the memoryless runs' models (bert-large's shape sparse)."""
    service = _service_over({r["model"] for r in ENCODED_UNDER_SERVER}, tmp_path_factory)
    with LiveServer(service) as server, server.client() as client:
        yield client


@pytest.mark.parametrize("run", ENCODED_UNDER_SERVER, ids=run_id)
def test_the_llama_server_profile_holds_a_model_without_memory(run: dict, encode_server: httpx.Client) -> None:
    """Asked over the wire under the llamaServer profile (its slots the run's sequences, the draft its output limit
    names), a BERT's workspace bounds hold the compute and output buffers after the server's warmup, both tight:
    the output rows are the slots' or the warmup's, not the ubatch's a plain context's first decode would take.
    Where the warmup aborted, the answer is unknown past the weights, workloadUnsupported, naming the warmup."""
    s = settings(run)
    body = _run_request(run) | {
        "profile": "llamaServer",
        "ubatchTokens": s["n_ubatch"],
        "cpuVariant": "haswell",
        "flashAttention": "on" if run.get("flash_attn", 1) else "off",  # as llama.cpp resolved it, where it ran
        "draftTokens": s["outputs_max"] // s["n_seq"] - 1,
    }
    (result,) = encode_server.post("/v1/models/fit/batch", json=[body]).json()["results"]
    parts = {p["component"]: p for p in result["estimate"]["parts"]}
    if run in ABORTED:
        assert parts["workspace"]["basis"] == "unknown" and result["estimate"]["upperBoundBytes"] is None
        assert "workloadUnsupported" in result["limits"] and "warmup" in parts["workspace"]["note"]
        return
    floor, ceiling = parts["workspace"]["bytes"], parts["workspace"]["upperBytes"]
    assert _tight(floor, measured_workspace(run), ceiling)


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A live memfit server over the embedding runs' models (the real-scale shapes sparse)."""
    service = _service_over({r["model"] for r in EMBEDDING_DRY + EMBEDDING_DECODED}, tmp_path_factory)
    with LiveServer(service) as server, server.client() as client:
        yield client


def _within_trained_context(run: dict) -> bool:
    """Whether a run's context per sequence is within its model's trained context (memfit refuses a request past it:
    contextExceedsModelLimit; llama.cpp ran bert-large's 8192 dry)."""
    model = model_writers()[run["model"]]()
    s = settings(run)
    return s["n_ctx"] // s["n_seq"] <= int(model.kv[f"{model.arch}.context_length"])


def _served_workspace(run: dict) -> int:
    """llama.cpp's compute and output buffers once llama-server has decoded an embedding batch: as measured after
    the decode, or for a dry run its compute buffer and the output buffer a decode grows (the rows
    test_an_embedding_decode_outputs_every_token holds, of the writer's widths)."""
    if "output_buffer_bytes_after_decode" in run:
        return int(run["compute_bytes_after_decode"] + run["output_buffer_bytes_after_decode"])
    model = model_writers()[run["model"]]()
    n_embd = int(model.kv[f"{model.arch}.embedding_length"])
    return int(run["compute_bytes"]) + (model.vocab + n_embd) * 4 * run["n_batch"]


def _server_request(run: dict) -> dict:
    """A fit request under the llamaServer profile for a run's settings: its ubatch, the CPU variant measured,
    flash attention as llama.cpp resolved it, its unified cache."""
    return _run_request(run) | {
        "profile": "llamaServer",
        "ubatchTokens": run["n_ubatch"],
        "cpuVariant": "haswell",
        "flashAttention": "on" if run["flash_attn"] else "off",
        "kvUnified": bool(settings(run).get("unified")),
    }


@pytest.mark.parametrize("run", [r for r in SERVING_EMBEDDINGS if _within_trained_context(r)], ids=run_id)
def test_the_llama_server_profile_serves_embeddings(run: dict, embedding_server: httpx.Client) -> None:
    """Under the llamaServer profile with embeddings llama-server's n_batch is the ubatch and its output limit that
    n_batch: the workspace's bounds hold llama.cpp's compute buffer (every token of the ubatch an output, the
    model's pooling) and the output buffer an embedding batch grows, both tight. Without embeddings (llama-server's
    cap at its slots, n_seq rows of logits) the profile answers less, and at real scale its ceiling lies below,
    but for a model without a memory module, whose encode() outputs the ubatch's rows of logits either way."""
    body = _server_request(run)
    answers = embedding_server.post("/v1/models/fit/batch", json=[body | {"embeddings": True}, body]).json()
    serving, plain = ({p["component"]: p for p in r["estimate"]["parts"]} for r in answers["results"])
    assert _tight(serving["workspace"]["bytes"], _served_workspace(run), serving["workspace"]["upperBytes"])
    assert answers["results"][0]["estimate"]["workload"]["embeddings"] is True
    assert plain["workspace"]["bytes"] < serving["workspace"]["bytes"]
    if run in EMBEDDING_DRY and architecture(run) not in NON_CAUSAL:  # the real-scale decoders
        assert plain["workspace"]["upperBytes"] < _served_workspace(run)


POOLED_DRY = load(DATA / "results_pooling_dryrun.jsonl")
POOLED_DECODED = load(DATA / "results_pooling.jsonl")
POOLED = POOLED_DRY + POOLED_DECODED


def test_llama_server_pooling_is_held(recorded: dict[str, list[BoundsRow]]) -> None:
    """llama-server's --pooling (the probe's pooling=NAME, results_pooling*.jsonl: Llama-3.1-8B's and bert-large's
    shapes, one with a classification head, every pooling named over the model's own at a 512 and a 2048 ubatch,
    and a pooling without embeddings; a tiny Qwen3 reranker decoded): every run compared, the caches and the output
    buffer exact, the bounds tight (the compute buffer the graph replay of the pooling named)."""
    rows = [r for name in ("results_pooling_dryrun.jsonl", "results_pooling.jsonl") for r in recorded[name]]
    assert len(rows) == len(POOLED) == 34
    assert all(r.compared and r.kv_exact and r.output_exact and r.tight for r in rows)
    assert {settings(r)["pooling"] for r in POOLED} == {"none", "mean", "cls", "last", "rank"}


def test_a_named_pooling_is_what_the_graph_reserves() -> None:
    """What llama.cpp measured: with embeddings the compute buffer follows the pooling named, not the model's own
    (Llama-3.1-8B's shape names none: mean and cls reserve more than none); without embeddings a pooling changes no
    graph (the plain one of the same ubatch, every token a logits row)."""
    dry = {(r["model"], r["n_ubatch"], settings(r)["pooling"], settings(r).get("embeddings")): r for r in POOLED_DRY}
    llama = "llama31-8b-shape-q4_0"
    none, mean, cls = (dry[llama, 512, name, 1]["compute_bytes"] for name in ("none", "mean", "cls"))
    assert none < cls < mean
    assert dry[llama, 512, "mean", None]["compute_bytes"] == none


@pytest.fixture(scope="module")
def pooling_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A live memfit server over the pooling runs' models (the real-scale shapes sparse)."""
    service = _service_over({r["model"] for r in POOLED}, tmp_path_factory)
    with LiveServer(service) as server, server.client() as client:
        yield client


def _pooled_workspace(run: dict) -> int:
    """llama.cpp's compute and output buffers as llama-server runs a run's settings: serving embeddings, once it has
    decoded an embedding batch (_served_workspace); a pooling alone, as allocated (its prompts' last tokens only
    have logits, n_seq rows)."""
    if settings(run).get("embeddings"):
        return _served_workspace(run)
    return int(run["compute_bytes"] + run["output_buffer_bytes_init"])


@pytest.mark.parametrize("run", [r for r in POOLED if _within_trained_context(r)], ids=run_id)
def test_the_llama_server_profile_pools_as_named(run: dict, pooling_server: httpx.Client) -> None:
    """Under the llamaServer profile with `pooling` the workspace's bounds hold llama.cpp's compute and output
    buffers, both tight: with embeddings the graph pools as named; without, llama-server's output limit is its
    n_batch (every ubatch token a logits row) and no embeddings are computed. The same request without `pooling`
    (the model's own pooling, llama-server's capped limit) lies below where the pooling named changes the graph,
    and answering a pooling alone as serving embeddings (1.20.0's answer) lies above it."""
    s = settings(run)
    body = _server_request(run) | {"embeddings": bool(s.get("embeddings"))}
    requests = [body | {"pooling": s["pooling"]}, body, body | {"embeddings": True}]
    answers = pooling_server.post("/v1/models/fit/batch", json=requests).json()["results"]
    pooled, own, serving = ({p["component"]: p for p in r["estimate"]["parts"]} for r in answers)
    truth = _pooled_workspace(run)
    assert _tight(pooled["workspace"]["bytes"], truth, pooled["workspace"]["upperBytes"])
    assert answers[0]["estimate"]["workload"]["pooling"] == s["pooling"]
    if run["model"] == "llama31-8b-shape-q4_0" and s["pooling"] != "none":  # its own pooling is none
        assert own["workspace"]["upperBytes"] < truth
    if not s.get("embeddings"):
        assert serving["workspace"]["bytes"] > truth
