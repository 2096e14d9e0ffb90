"""The truth harness's pieces that need neither npm nor a compiler (tools/truth/): the settings matrices against
the recorded rows, the pinned releases, the CPU-variant backend folder, the probe's output flattened into a row,
the comparison `python -m tools.truth.regenerate` prints, and memfit's rebuilt graph against the recorded dumps of
llama.cpp's reserved graph (tests/data/graph_dumps.jsonl)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memfit.estimator.arch_rules import LLAMA_CPP_COMMIT
from memfit.estimator.compute_graph import build_graph
from memfit.estimator.ggml_graph import Graph
from memfit.estimator.graph_alloc import reserved_bytes
from memfit.estimator.mtp import draft_context, draft_geometry
from memfit.service.artifact_cache import ArtifactCache
from tools import accuracy
from tools.truth import DATA, load, run_id
from tools.truth.matrices import NOT_REGENERATED, RELEASE, TRUTH_FILES
from tools.truth.measure import parse_log, summarize, summarize_log
from tools.truth.regenerate import VOLATILE, differences, models_of, relabelled, runs_of
from tools.truth.variant import backend_dir, variants

HARNESS = Path(__file__).resolve().parent.parent / "tools" / "truth"
RELEASES = json.loads((HARNESS / "releases.json").read_text())


def _keys(rows: list[dict]) -> list[tuple[str, str]]:
    return [(r["model"], json.dumps(r["settings"], sort_keys=True)) for r in rows]


@pytest.mark.parametrize("name", sorted(TRUTH_FILES))
def test_the_matrices_are_the_recorded_runs(name: str) -> None:
    """Regenerating a file measures exactly the (model, settings) runs it records, each model from a writer in
    the repository, under the probe arguments and label the rows carry."""
    spec, rows = TRUTH_FILES[name], load(DATA / name)
    runs = {(m, json.dumps(s, sort_keys=True), e) for m in models_of(spec, name) for s, e in runs_of(spec, name, m)}
    assert runs == {(m, s, r.get("probe_extra") or "") for (m, s), r in zip(_keys(rows), rows, strict=True)}
    assert set(models_of(spec, name)) <= set(spec.models)
    assert {r["runtime_label"] for r in rows} == {spec.label}
    decoding = [r for r in rows if "error" not in r and "decode=0" not in r.get("probe_extra", "")]
    # a verification batch (verify=D) decodes its own tokens, an embedding batch (embeddings=1) n_batch of them,
    # llama-server's warmup (warmup=1) its vocabulary's BOS and EOS (tests/test_truth.py checks them), a run's own
    # prompt (decode=N) its N
    own = ("verify", "embeddings", "warmup", "decode")
    prompts = [r.get("decode_tokens", 0) for r in decoding if not any(k in r["settings"] for k in own)]
    assert set(prompts) == ({spec.decode} if prompts else set())
    assert all(r["decode_tokens"] == r["settings"]["decode"] for r in decoding if "decode" in r["settings"])


def test_every_measured_file_from_writers_has_a_recipe() -> None:
    """A results file whose models come from tools/ writers is one TRUTH_FILES regenerates (the scale files
    came from llama-cpp-python's libllama, the catalog from published files)."""
    writers = {n for spec in TRUTH_FILES.values() for n in spec.models}
    made_here = {
        p.name
        for p in DATA.glob("results_*.jsonl")
        if {r["model"] for r in load(p)} <= writers and "scale" not in p.name
    }
    assert made_here - set(NOT_REGENERATED) <= set(TRUTH_FILES)


def test_the_pinned_releases_name_their_llama_cpp_commits() -> None:
    assert set(RELEASES) == {"3.21.1", "3.22.1"} and RELEASE in RELEASES
    for pinned in RELEASES.values():
        assert re.fullmatch(r"v\d+\.\d+\.\d+", pinned["llama_cpp_tag"])
        assert re.fullmatch(r"[0-9a-f]{40}", pinned["llama_cpp_commit"])
    assert len({p["llama_cpp_commit"] for p in RELEASES.values()}) == len(RELEASES)
    # the runs' label names the release and the tag it bundles
    tag = RELEASES[RELEASE]["llama_cpp_tag"]
    assert all(f"node-llama-cpp {RELEASE} " in s.label for s in TRUTH_FILES.values())
    # rows measured with another pinned release say so
    other = next(v for v in RELEASES if v != RELEASE)
    label = relabelled(TRUTH_FILES["results_probe.jsonl"], other).label
    assert f"node-llama-cpp {other} " in label and RELEASES[other]["llama_cpp_tag"] in label and tag not in label
    # what answers cite as the llama.cpp they mirror is the commit the recorded runs measured
    assert LLAMA_CPP_COMMIT == RELEASES[RELEASE]["llama_cpp_commit"]


def test_the_harness_names_no_machine_path() -> None:
    for path in HARNESS.iterdir():
        if path.suffix in (".py", ".sh", ".cpp", ".json"):
            assert not re.search(r"/(work|home|tmp|root|Users)/", path.read_text()), path.name


def test_a_backend_folder_holds_only_the_variant(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libggml-cpu-haswell.so", "libggml-cpu-skylakex.so", "libggml-base.so", "libllama.so"):
        (lib / name).write_bytes(name.encode())
    assert variants(lib) == ["haswell", "skylakex"]
    dest = backend_dir(lib, "skylakex", tmp_path / "be")
    dest = backend_dir(lib, "haswell", dest)  # reused: the earlier variant is gone
    assert [p.name for p in dest.iterdir()] == ["libggml-cpu-haswell.so"]
    assert (dest / "libggml-cpu-haswell.so").read_bytes() == b"libggml-cpu-haswell.so"
    with pytest.raises(ValueError, match="sapphirerapids"):
        backend_dir(lib, "sapphirerapids", tmp_path / "be2")


def test_the_probe_output_makes_the_recorded_row() -> None:
    """tools/truth/probe.cpp's output for one run (recorded in tests/data/probe_run.json), flattened, is the row
    the earlier harness recorded for the same run in results_probe.jsonl, but for the process's RSS."""
    run = json.loads((DATA / "probe_run.json").read_text())
    row = summarize(json.loads(run["stdout"])) | summarize_log(parse_log(run["stderr"]))
    recorded = next(
        r for r in load(DATA / "results_probe.jsonl") if r["model"] == run["model"] and r["settings"] == run["settings"]
    )
    stable = [k for k in recorded if not k.startswith(VOLATILE) and k not in ("model", "file_bytes", "runtime")]
    stable = [k for k in stable if k not in ("runtime_label", "settings")]
    assert len(stable) > 30
    assert {k: row[k] for k in stable} == {k: recorded[k] for k in stable}


def test_differences_name_the_changed_field_and_ignore_rss() -> None:
    rows = load(DATA / "results_probe.jsonl")[:3]
    changed = [dict(r) for r in rows]
    changed[1] = changed[1] | {"compute_bytes": changed[1]["compute_bytes"] + 32, "rss_growth_ctx": 1}
    assert differences(rows, changed) == [
        f"{run_id(rows[1])}: compute_bytes {rows[1]['compute_bytes']!r} != {rows[1]['compute_bytes'] + 32!r}"
    ]
    assert differences(rows, changed[:2]) == [f"{run_id(rows[2])}: not measured"] + differences(rows[:2], changed[:2])
    failed = [rows[0], rows[1], {k: rows[2][k] for k in ("model", "settings", "n_ubatch")} | {"error": "exit 1"}]
    assert f"{run_id(rows[2])}: compute_bytes not measured" in differences(rows, failed)


# Architectures whose rebuilt graph (estimator/compute_graph.py) follows llama.cpp's node order in the recorded dumps.
NODE_FOR_NODE = (
    "llama-gqa-f16", "mamba2-f16", "granitehybrid-f16", "command-r", "mamba", "jamba", "gemma3n-shared", "phi3-swa",
    "openelm-arr", "deci-arr", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "qwen3next", "qwen35", "qwen35moe",
    "qwen35-mtp", "kimi-linear", "kimi-k3", "bailingmoe3", "qwen3next-legacy", "kimi-k3-res", "bailingmoe3-clamp",
    "falcon-h1", "nemotron-h", "nemotron-h-moe", "nemotron-h-moe-latent", "plamo2", "lfm2moe",
    "deepseek2-mla", "deepseek2-mha", "deepseek2-mla-nextn", "deepseek2-v3", "mistral4-mla", "mistral4-fused",
    "minicpm3", "mimo2-nextn", "mimo2-fused", "step35-nextn", "step35-clamped", "glm4moe-nextn", "glm4moe-fused",
    "starcoder2", "smollm3", "olmo2-swa", "cohere2-swa", "cohere2moe-scal", "gemma4-shared", "gemma4-moe", "gemma4-ple",
    "exaone4-64-key", "exaone4-4-key", "llama4-chunked", "llama4-nochunk", "afmoe-swa", "laguna-swa", "laguna-full",
    "llama-embed", "plm", "stablelm", "stablelm-parallel", "internlm2", "internlm2-qkv", "minicpm", "minicpm-moe",
    "qwen4exp", "qwen4exp-ple", "qwen4exp-qsa",
    "deepseek32", "deepseek32-nextn", "glm-dsa-types", "glm-dsa-52", "minimax01", "deepseek4",
    "deepseek4-hash", "qwen3-f16-rank", "bert-embd-rank", "lfm2-f16-dense", "lfm2-f16-dense-mean", "gemma-embedding",
    "gemma-embedding-dense",
)  # fmt: skip


# The recorded dumps: every model's at two settings, deepseek4's beside them (rollback snapshots, an F32 cache), and
# the rerankers' under rank and mean pooling (build_pooling's classification head), LFM2's projection after pooling
# (build_dense_out) serving embeddings.
GRAPH_DUMPS = (
    "graph_dumps.jsonl",
    "graph_dumps_dsv4.jsonl",
    "graph_dumps_pooling.jsonl",
    "graph_dumps_dense_out.jsonl",
    "graph_dumps_gemma_embedding.jsonl",
)


@pytest.fixture(scope="module")
def dumped_graphs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict, Graph]]:
    """Each recorded graph dump of NODE_FOR_NODE's models, beside memfit's graph rebuilt for the same run."""
    # (plm's run with flash attention aborts in llama.cpp: its row records the failure, no graph)
    dumps = [r for name in GRAPH_DUMPS for r in load(DATA / name)]
    rows = [r for r in dumps if r["model"] in NODE_FOR_NODE and "graph" in r]
    files = accuracy.write_models(set(NODE_FOR_NODE), tmp_path_factory.mktemp("models"))
    cache, out = ArtifactCache(), []
    for r in rows:
        facts = cache.facts((str(files[r["model"]]),))
        assert facts.layout is not None and facts.layout.graph is not None and facts.n_vocab is not None
        geometry = accuracy.run_geometry(r, facts.architecture, facts.layout.causal)
        out.append((r, build_graph(facts.layout.graph, geometry, facts.n_vocab)))
    return out


def test_the_rebuilt_graph_is_llama_cpps_node_for_node(dumped_graphs: list[tuple[dict, Graph]]) -> None:
    """Every node memfit's rebuilt graph allocates appears in llama.cpp's reserved graph, in the same order, with
    the same op and shape (memfit leaves out views and in-place ops that take no memory of their own), and
    replaying the allocator over it reaches the top llama.cpp's allocation reached in the compute buffer."""
    assert {r["model"] for r, _ in dumped_graphs} == set(NODE_FOR_NODE) and len(dumped_graphs) >= 6
    for r, graph in dumped_graphs:
        real = [(n["op"], n["ne"]) for n in r["graph"]]
        at = 0
        for t in graph.nodes:
            if t.view_src is not None or t.external:
                continue
            want = (t.op, list(t.ne))
            assert want in real[at:], (run_id(r), want, at)
            at += real[at:].index(want) + 1
        top = max(n["offset"] + n["nbytes"] for n in r["graph"] if n["offset"] >= 0)
        assert reserved_bytes(graph) == top == r["compute_bytes"], run_id(r)


@pytest.mark.parametrize("run", load(DATA / "graph_dumps_mtp_swa.jsonl"), ids=run_id)
def test_the_iswa_mtp_draft_graph_is_llama_cpps_node_for_node(run: dict, tmp_path: Path) -> None:
    """mimo2's and step35's DECODER_MTP graph over their iswa draft cache (graph_dumps_mtp_swa.jsonl), as
    test_the_mtp_draft_graph_is_llama_cpps_node_for_node holds the others'."""
    test_the_mtp_draft_graph_is_llama_cpps_node_for_node(run, tmp_path)


def _in_order(graph: Graph, dump: list[dict]) -> list[tuple[str, list[int]]]:
    """The rebuilt graph's nodes that take memory (no view, no cache tensor) not found in `dump`'s nodes in the same
    order with the same op and shape: empty where every one is."""
    real, at, missing = [(n["op"], n["ne"]) for n in dump], 0, []
    for t in graph.nodes:
        if t.view_src is not None or t.external:
            continue
        want = (t.op, list(t.ne))
        if want in real[at:]:
            at += real[at:].index(want) + 1
        else:
            missing.append(want)
    return missing


@pytest.mark.parametrize(
    "run",
    load(DATA / "graph_dumps_mtp.jsonl")
    + load(DATA / "graph_dumps_mtp_dsa.jsonl")
    + load(DATA / "graph_dumps_mtp_nemotron.jsonl")
    + load(DATA / "graph_dumps_mtp_hyv3.jsonl")
    + load(DATA / "graph_dumps_mtp_cohere2moe.jsonl")
    + load(DATA / "graph_dumps_mtp_dsv4.jsonl"),
    ids=run_id,
)
def test_the_mtp_draft_graph_is_llama_cpps_node_for_node(run: dict, tmp_path: Path) -> None:
    """llama-server's MTP draft context's reserved DECODER_MTP graph (graph_dumps_mtp.jsonl: qwen35, qwen35moe,
    bailingmoe3, deepseek2 and glm4moe; graph_dumps_mtp_dsa.jsonl: deepseek32 and glm-dsa, the indexer left out;
    graph_dumps_mtp_dsv4.jsonl: deepseek4's hyper-connected block over its K-only iswa cache;
    the probe's mtp_ctx=1 graph=1): estimator/graph_mtp.py's rebuilt graph has
    llama.cpp's nodes in order, op and shape, and replaying the allocator over it reaches the top of llama.cpp's
    compute buffer."""
    d = run["draft_ctx"]
    files = accuracy.write_models({run["model"]}, tmp_path)
    facts = ArtifactCache().facts((str(files[run["model"]]),))
    assert facts.layout is not None and facts.n_vocab is not None
    draft = draft_context(facts.architecture, facts.layout)
    assert draft is not None
    geometry = draft_geometry(accuracy.run_geometry(run, facts.architecture, facts.layout.causal))
    graph = build_graph(draft.graph, geometry, facts.n_vocab)
    assert _in_order(graph, d["graph"]) == []
    top = max(n["offset"] + n["nbytes"] for n in d["graph"] if n["offset"] >= 0)
    assert reserved_bytes(graph) == top == d["compute_bytes"]


@pytest.mark.parametrize(
    "run",
    load(DATA / "graph_dumps_mtp_hyv3.jsonl")
    + load(DATA / "graph_dumps_mtp_dsv4.jsonl")
    + load(DATA / "graph_dumps_mtp_cohere2moe.jsonl"),
    ids=run_id,
)
def test_the_target_trunk_beside_an_mtp_draft_is_llama_cpps_node_for_node(run: dict, tmp_path: Path) -> None:
    """hy_v3's own reserved graph (graph_dumps_mtp_hyv3.jsonl, the target's beside its draft's: no other dump
    holds hy_v3), cohere2moe's (graph_dumps_mtp_cohere2moe.jsonl: the RMS-eps file's, which no other dump holds, and
    the LayerNorm one's with its NextN layer loaded), and deepseek4's trunk of a file with its NextN layer
    (graph_dumps_mtp_dsv4.jsonl: the trunk's compress ratios, the NextN layer's left out): the rebuilt graph has
    llama.cpp's nodes in order, op and shape, and replaying the allocator over it reaches the top of llama.cpp's
    compute buffer."""
    files = accuracy.write_models({run["model"]}, tmp_path)
    facts = ArtifactCache().facts((str(files[run["model"]]),))
    assert facts.layout is not None and facts.layout.graph is not None and facts.n_vocab is not None
    geometry = accuracy.run_geometry(run, facts.architecture, facts.layout.causal)
    graph = build_graph(facts.layout.graph, geometry, facts.n_vocab)
    assert _in_order(graph, run["graph"]) == []
    top = max(n["offset"] + n["nbytes"] for n in run["graph"] if n["offset"] >= 0)
    assert reserved_bytes(graph) == top == run["compute_bytes"]
