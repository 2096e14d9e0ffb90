"""ggml-alloc's allocator replayed, and llama.cpp's reserved graph rebuilt, against llama.cpp's measured buffers."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit.estimator.architectures import derive_layout
from memfit.estimator.catalog import Catalog
from memfit.estimator.compute_buffer import REPLAY_SLACK_CHECKED, compute_bounds
from memfit.estimator.compute_graph import build_graph
from memfit.estimator.context import llama_geometry
from memfit.estimator.ggml_graph import F32 as T_F32
from memfit.estimator.ggml_graph import Graph, new_tensor, op, same_shape
from memfit.estimator.graph_alloc import FreeList, reserved_bytes
from memfit.estimator.layout import GraphShape
from memfit.readers.catalog_file import load_catalog_file
from memfit.service.artifact_cache import ArtifactCache
from tests.rebuilt_runs import RebuiltRun
from tools import accuracy
from tools.gguf_writers import Model, write_model

KiB = 1024


def test_best_fit_takes_the_smallest_free_block_that_fits_and_merges_on_free() -> None:
    heap = FreeList()
    a, b, c = heap.alloc(96 * KiB), heap.alloc(32 * KiB), heap.alloc(64 * KiB)
    assert (a, b, c, heap.size) == (0, 96 * KiB, 128 * KiB, 192 * KiB)
    heap.free(a, 96 * KiB)
    heap.free(c, 64 * KiB)  # two holes: 96 KiB at 0, 64 KiB at 128 KiB (the open end)
    assert heap.alloc(40 * KiB) == 0  # the hole before the end, not the end
    heap.free(b, 32 * KiB)  # joins the 56 KiB left at 40 KiB and the open end at 128 KiB: one block
    assert len(heap.blocks) == 1 and heap.blocks[0][0] == 40 * KiB
    assert heap.alloc(33) == 40 * KiB and heap.alloc(1) == 40 * KiB + 64  # 33 bytes take 64 (the alignment)
    assert heap.size == 192 * KiB


def test_an_in_place_op_reuses_its_only_source_and_outputs_are_never_freed() -> None:
    gf = Graph()
    x = new_tensor(T_F32, 1024, input=True)  # 4 KiB input
    y = op("MUL_MAT", T_F32, (2048,), x)  # 8 KiB
    z = same_shape(y, "SCALE")  # in place: y's only consumer
    out = op("MUL_MAT", T_F32, (1024,), z)  # 4 KiB: fits where x was (freed after y)
    out.output = True
    gf.expand(out)
    assert reserved_bytes(gf) == 12 * KiB


@pytest.fixture(scope="module")
def checked_runs(rebuilt: list[RebuiltRun]) -> list[RebuiltRun]:
    """Every measured run whose architecture's graph is rebuilt node for node."""
    return [r for r in rebuilt if r.graph.node_for_node]


def test_the_rebuilt_graph_gives_llama_cpps_buffer(checked_runs: list[RebuiltRun]) -> None:
    """On every measured run of an architecture checked node for node (ubatch 2048 and flash attention off
    included), the replayed buffer is llama.cpp's within the margin the bounds keep (REPLAY_SLACK_CHECKED), and to
    the byte on almost all of them."""
    assert len(checked_runs) > 1000
    exact = 0
    for checked in checked_runs:
        run = checked.run
        geometry = accuracy.run_geometry(run, checked.architecture, checked.causal)
        replayed = reserved_bytes(build_graph(checked.graph, geometry, checked.n_vocab))
        assert abs(replayed - run["compute_bytes"]) <= REPLAY_SLACK_CHECKED, checked.name
        exact += replayed == run["compute_bytes"]
    assert exact >= 0.95 * len(checked_runs), (exact, len(checked_runs))


def _graph_of(path: Path) -> GraphShape | None:
    facts = ArtifactCache().facts((str(path),))
    assert facts.layout is not None
    return facts.layout.graph


def test_falcon_h1_norms_the_mamba_output_only_where_the_file_has_ssm_norm(tmp_path: Path) -> None:
    """llama_model_falcon_h1 does not require ssm_norm: the tiny model has it, the published files (the 7B shape,
    the catalog's entries, whose tensor names are unknown) do not."""
    files = accuracy.write_models({"falcon-h1", "falcon-h1-7b-shape-f16"}, tmp_path)
    norms = {name: _graph_of(path) for name, path in files.items()}
    entry = next(e for e in Catalog(load_catalog_file()).entries if e.architecture == "falcon-h1")
    norms["catalog"] = derive_layout(entry.metadata, entry.architecture).graph
    grouped = {name: {b.ssm.grouped_norm for b in g.layers if b.ssm} for name, g in norms.items() if g is not None}
    assert grouped == {"falcon-h1": {True}, "falcon-h1-7b-shape-f16": {False}, "catalog": {False}}


def test_lfm2_serving_embeddings_has_no_head_and_projects_after_pooling(tmp_path: Path) -> None:
    """lfm2.cpp builds no LM head under cparams.embeddings, and build_dense_out projects t_embd (pooling none) or the
    pooled rows through the file's dense_2 and its bias (LFM2-ColBERT's conversion); without embeddings the head is
    there and the projection is not. results_dense_out.jsonl and graph_dumps_dense_out.jsonl hold the bytes and
    the nodes."""
    files = accuracy.write_models({"lfm2-f16", "lfm2-f16-dense"}, tmp_path)
    plain, dense = (_graph_of(files[name]) for name in ("lfm2-f16", "lfm2-f16-dense"))
    assert plain is not None and dense is not None
    assert not plain.dense_out.present and (dense.dense_out.dense_2_rows, dense.dense_out.dense_2_bias) == (64, True)
    serving = llama_geometry(2048, 1, embeddings=True, server=True)
    projected = build_graph(dense, serving, 8192).nodes[-2:]
    assert [(t.op, t.ne[0], t.output) for t in projected] == [("MUL_MAT", 64, False), ("ADD", 64, True)]
    head = build_graph(plain, llama_geometry(2048, 1), 8192).nodes[-1]
    assert (head.op, head.ne[0]) == ("MUL_MAT", 8192)  # the LM head
    headless = build_graph(plain, serving, 8192).nodes[-1]
    assert (headless.op, headless.ne[0], headless.output) == ("MUL", plain.n_embd, True)  # t_embd: the norm's weight


@pytest.mark.parametrize("name", ["lfm2moe", "nemotron-h-moe"])
def test_a_router_that_selects_expert_groups_is_rebuilt_with_its_groups(name: str, tmp_path: Path) -> None:
    """build_moe_ffn picks the experts among the best expert groups (expert_group_count > 1) for any builder: the
    group-limited selection (graph_ffn.best_groups, as bailingmoe3's published shape measures it) is in the graph of
    every architecture whose builder routes experts."""
    model = accuracy.model_writers()[name]()
    plain = _graph_of(write(model, tmp_path / "plain.gguf"))
    model.arch_kv(expert_group_count=2, expert_group_used_count=1)
    grouped = _graph_of(write(model, tmp_path / "grouped.gguf"))
    assert plain is not None and grouped is not None
    assert {(b.routing.groups, b.routing.groups_used) for b in grouped.layers if b.n_expert} == {(2, 1)}
    geometry = llama_geometry(4096, 1)
    fills = [sum(t.op == "FILL" for t in build_graph(g, geometry, 1000).nodes) for g in (plain, grouped)]
    assert fills == [0, sum(1 for b in grouped.layers if b.n_expert)]


def write(model: Model, path: Path) -> Path:
    write_model(model, path)
    return path


@pytest.mark.parametrize(
    ("change", "rebuilt"),
    [
        ({}, True),
        ({"attention__indexer__types": [0, 1, 0, 1]}, False),  # GGML_ASSERT: a shared layer before a full one
        ({"attention__indexer__key_length": 192}, False),  # k_rot is 64 wide: ggml_mul_mat's shapes do not match
        ({"rope__dimension_count": 96}, False),  # GGML_ASSERT(n_rot <= n_embd_indexer_head)
    ],
)
def test_a_dsa_graph_llama_cpp_aborts_building_has_no_workspace(change: dict, rebuilt: bool, tmp_path: Path) -> None:
    """glm-dsa.cpp (deepseek32.cpp alike) aborts building the graph where its indexer cannot run: memfit's layout
    then has no graph to rebuild (the workspace answers unknown), never one that llama.cpp does not build."""
    model = accuracy.model_writers()["glm-dsa-types"]()
    model.arch_kv(**change)
    assert (_graph_of(write(model, tmp_path / "dsa.gguf")) is not None) is rebuilt


def test_a_tensor_of_a_block_type_is_whole_blocks() -> None:
    """ggml_nbytes of a block type (deepseek4's concatenated K in a q8_0 cache's type): each row its blocks of 32
    elements, 34 bytes each; f16 and bf16 two bytes an element."""
    assert new_tensor("q8_0", 128, 1, 768, 4).nbytes == 4 * 768 * 4 * 34
    assert new_tensor("q4_0", 64, 1, 256).nbytes == 256 * 2 * 18
    assert new_tensor("bf16", 128, 768).nbytes == new_tensor("f16", 128, 768).nbytes == 128 * 768 * 2


@pytest.mark.parametrize(
    ("k_type", "flash", "derived"),
    [
        ("f16", True, True),
        ("f16", False, True),
        ("bf16", True, True),
        ("q8_0", True, True),
        ("q8_0", False, False),  # llama.cpp refuses it (V is K's type, a quantized V needs flash attention)
        ("f32", True, True),  # build_attn_mha casts an F32 K and V to F16 (graph_dumps_dsv4.jsonl)
        ("f32", False, True),
        ("", True, False),  # a caller that does not name the K type
    ],
)
def test_deepseek4_workspace_is_derived_for_the_k_cache_types_its_graph_sizes(
    k_type: str, flash: bool, derived: bool, tmp_path: Path
) -> None:
    """graph_dsv4 concatenates the raw and compressed K in the cache's type: the compute buffer is derived where that
    type's size is known and the graph around it rebuilt, unknown elsewhere."""
    graph = _graph_of(write(accuracy.model_writers()["deepseek4"](), tmp_path / "dsv4.gguf"))
    assert graph is not None
    quantized = k_type.startswith("q")
    geometry = llama_geometry(2048, 2, flash_attention=flash, quantized_k=quantized, k_type=k_type)
    assert (compute_bounds(graph, 4096, geometry) is not None) is derived


def test_deepseek4_workspace_is_derived_with_rollback_snapshots(tmp_path: Path) -> None:
    """n_rs_seq adds llama_kv_cache_dsv4's restore and snapshot rows of each compressor state to the graph
    (graph_dumps_dsv4.jsonl holds it node for node): derived, and more than the graph without them."""
    graph = _graph_of(write(accuracy.model_writers()["deepseek4"](), tmp_path / "dsv4.gguf"))
    assert graph is not None
    plain = compute_bounds(graph, 4096, llama_geometry(2048, 2, k_type="f16"))
    snapshots = compute_bounds(graph, 4096, llama_geometry(2048, 2, k_type="f16", rs_snapshots=2))
    assert plain is not None and snapshots is not None and snapshots[0] > plain[0]


def test_deepseek4_hash_routed_layers_have_a_derived_workspace(tmp_path: Path) -> None:
    """A deepseek4 file with hash_layer_count 1 (its first layer picks its experts by token, ffn_gate_tid2eid) is
    rebuilt: its workspace is derived (test_truth holds it to the recorded runs' compute buffers)."""
    graph = _graph_of(write(accuracy.model_writers()["deepseek4-hash"](), tmp_path / "dsv4-hash.gguf"))
    assert graph is not None
    assert compute_bounds(graph, 4096, llama_geometry(2048, 2, k_type="f16")) is not None


@pytest.mark.parametrize(
    "change",
    [
        {"hyper_connection__count": 2},  # build_hc_pre: GGML_ASSERT(hc == 4)
        {"attention__output_group_count": 3},  # GGML_ASSERT(n_head % n_groups == 0): 4 heads
    ],
)
def test_a_deepseek4_graph_not_built_or_not_rebuilt_has_no_workspace(change: dict, tmp_path: Path) -> None:
    """Where deepseek4.cpp aborts building its graph, or builds one memfit does not rebuild, memfit's layout has no
    graph: the workspace answers unknown."""
    model = accuracy.model_writers()["deepseek4"]()
    model.arch_kv(**change)
    assert _graph_of(write(model, tmp_path / "dsv4.gguf")) is None
