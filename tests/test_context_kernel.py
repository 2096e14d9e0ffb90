"""The kernel the fit and the plan's search both ask (estimator/context_kernel.py), through each of them, against
llama.cpp's recorded memory module (KV caches, compressed and indexer caches, recurrent state: every cache, to
the byte) for the attention, sliding-window, MLA, embedding, recurrent, hybrid and compressed-cache families."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from memfit.estimator.context_kernel import ContextKernel
from memfit.estimator.cpu_variant import BY_NAME
from memfit.estimator.forecast import forecast_parts
from memfit.estimator.mtp import NO_MTP_HEAD, NO_MTP_TENSORS, draft_context, draft_kv_bytes, mtp_refusal
from memfit.estimator.plan import Estimator, Probes
from memfit.estimator.subject import Subject
from memfit.estimator.workload import Workload, WorkloadRequest, resolve_workload
from memfit.service.artifact_cache import ArtifactCache
from tools.accuracy import file_subject, write_models
from tools.families.recurrent import deepseek4_mtp
from tools.gguf_writers import write_model
from tools.truth import ELEMENT_BYTES, measured_variant, records, run_id

RUNS = [
    r
    for name in ("results_attn.jsonl", "results_rec.jsonl")
    for r in records(name)
    if r["settings"]["n_ctx"] % r["settings"]["n_seq"] == 0
]
CACHE = ArtifactCache()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_models({r["model"] for r in RUNS}, tmp_path_factory.mktemp("kernel-models"))


def _workload(run: dict) -> Workload:
    """The run's llama.cpp settings as a workload: the context per sequence, the sequences, the cache types, flash
    attention as llama.cpp resolved it, its ubatch and full-size SWA cache."""
    s = run["settings"]
    request = WorkloadRequest(
        allocated_tokens=s["n_ctx"] // s["n_seq"],
        streams=s["n_seq"],
        key_element_bytes=ELEMENT_BYTES[s["type_k"]],
        value_element_bytes=ELEMENT_BYTES[s["type_v"]],
        flash_attention="on" if run["flash_attn"] else "off",
        ubatch_tokens=run["n_ubatch"],
        swa_full=bool(s.get("swa_full")),
    )
    return resolve_workload(request, None)


def _memory(subject: Subject, workload: Workload) -> tuple[int | None, int | None]:
    """(the fit's kvCache + recurrentState, the plan's floor less the fit's other parts) at the workload's context."""
    weights, kv, recurrent, *others = forecast_parts(subject, workload)[0]
    floor = Estimator(subject, workload, Probes()).bounds(workload.allocated_tokens)[0]
    fit = None if kv.bytes is None or recurrent.bytes is None else kv.bytes + recurrent.bytes
    return fit, floor - sum(p.bytes or 0 for p in (weights, *others))


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_the_fit_and_the_plan_hold_llama_cpp_memory_module(run: dict, model_files: dict[str, Path]) -> None:
    subject = file_subject(model_files[run["model"]], measured_variant(run), CACHE)
    assert _memory(subject, _workload(run)) == (run["memory_bytes"], run["memory_bytes"])


MTP_CTX = [r for r in records("results_mtp_ctx.jsonl") if "draft_ctx" in r]


@pytest.mark.parametrize("run", MTP_CTX, ids=run_id)
def test_the_fit_and_the_plan_hold_the_mtp_draft_contexts_memory_too(run: dict, tmp_path: Path) -> None:
    """Under multiTokenPrediction (results_mtp_ctx.jsonl: the target and llama-server's MTP draft context) the fit's
    kvCache + recurrentState and the plan's floor both hold the two contexts' memory modules, to the byte."""
    files = write_models({run["model"]}, tmp_path)
    subject = file_subject(files[run["model"]], measured_variant(run), CACHE)
    workload = replace(_workload(run), multi_token_prediction=True)
    both = run["memory_bytes"] + run["draft_ctx"]["memory_bytes"]
    assert _memory(subject, workload) == (both, both)


MTP_CTX_SWA = [
    r
    for name in (
        "results_mtp_ctx_swa.jsonl",
        "results_mtp_ctx_swa_dryrun.jsonl",
        "results_mtp_ctx_cohere2moe.jsonl",
        "results_mtp_ctx_dsv4.jsonl",
    )
    for r in records(name)
    if "draft_ctx" in r
]


@pytest.mark.parametrize("run", MTP_CTX_SWA, ids=run_id)
def test_the_fit_and_the_plan_hold_the_iswa_mtp_draft_too(run: dict, tmp_path: Path) -> None:
    """mimo2's, step35's and deepseek4's draft (results_mtp_ctx_swa*.jsonl, results_mtp_ctx_dsv4.jsonl:
    llama_kv_cache_iswa over the NextN layer; deepseek4's target llama_kv_cache_dsv4) and cohere2moe's
    (results_mtp_ctx_cohere2moe.jsonl: over every layer), as
    test_the_fit_and_the_plan_hold_the_mtp_draft_contexts_memory_too holds the others'."""
    test_the_fit_and_the_plan_hold_the_mtp_draft_contexts_memory_too(run, tmp_path)


def test_mimo2s_draft_needs_the_blocks_graph_mtp_asserts(tmp_path: Path) -> None:
    """mimo2.cpp's graph_mtp asserts a fused attn_qkv and a dense FFN on the NextN block: mimo2-mtp's block (both)
    gives a draft; the same block unfused, or routing experts, gives none (llama.cpp aborts: not derived)."""
    files = write_models({"mimo2-mtp"}, tmp_path)
    subject = file_subject(files["mimo2-mtp"], BY_NAME["haswell"], CACHE)
    assert subject.layout is not None and subject.layout.graph is not None
    (block,) = subject.layout.graph.nextn
    assert block.fused_qkv and block.n_ff and not block.n_expert
    assert draft_context("mimo2", subject.layout) is not None
    for other in (replace(block, fused_qkv=False), replace(block, n_ff=0, n_expert=4, n_expert_used=2)):
        layout = replace(subject.layout, graph=replace(subject.layout.graph, nextn=(other,)))
        assert draft_context("mimo2", layout) is None


def test_deepseek4s_draft_needs_the_block_graph_mtp_asserts(tmp_path: Path) -> None:
    """deepseek4.cpp's graph_mtp asserts a NextN block that compresses nothing (GGML_ASSERT(inp_dsv4 || ratio == 0):
    its draft has no llama_kv_cache_dsv4) and routes no expert by token (il >= dsv4_hash_layer_count):
    deepseek4-mtp's block (ratio 0, exp_probs_b) gives a draft; the same block with a CSA or HCA ratio, or hash
    routed, gives none (llama.cpp aborts: not derived)."""
    files = write_models({"deepseek4-mtp"}, tmp_path)
    subject = file_subject(files["deepseek4-mtp"], BY_NAME["haswell"], CACHE)
    layout = subject.layout
    assert layout is not None and layout.graph is not None and layout.graph.dsv4 is not None
    (block,) = layout.graph.nextn
    assert layout.graph.dsv4.nextn_ratios == (0,) and not block.routing.by_token
    assert draft_context("deepseek4", layout) is not None
    for ratio in (4, 128):
        dsv4 = replace(layout.graph.dsv4, nextn_ratios=(ratio,))
        assert draft_context("deepseek4", replace(layout, graph=replace(layout.graph, dsv4=dsv4))) is None
    hashed = replace(block, routing=replace(block.routing, by_token=True, probs_bias=False))
    assert draft_context("deepseek4", replace(layout, graph=replace(layout.graph, nextn=(hashed,)))) is None


def test_deepseek4_under_draft_mtp_without_its_nextn_tensors_is_refused(tmp_path: Path) -> None:
    """deepseek4-mtp's file under draft-mtp gives a draft; without its NextN head (no nextn.eh_proj: deepseek4's
    load_arch_hparams drops the NextN layer, llama_init_from_model refuses the MTP context) or without the NextN
    layer's tensors at all (every graph_mtp asserts nextn.eh_proj), llama-server stops: mtp_refusal says why."""
    files: dict[str, Path] = {}
    for name, keep in (
        ("whole", lambda tensor: True),
        ("headless", lambda tensor: ".nextn." not in tensor),
        ("trunk-only", lambda tensor: not tensor.startswith("blk.4.")),
    ):
        model = deepseek4_mtp()
        model.tensors = [t for t in model.tensors if keep(t[0])]
        files[name] = tmp_path / f"{name}.gguf"
        write_model(model, files[name])
    workload = replace(resolve_workload(WorkloadRequest(allocated_tokens=2048), None), multi_token_prediction=True)
    subjects = {name: file_subject(path, BY_NAME["haswell"], CACHE) for name, path in files.items()}
    refusals = {name: mtp_refusal(subject, workload) for name, subject in subjects.items()}
    assert refusals == {"whole": None, "headless": NO_MTP_HEAD, "trunk-only": NO_MTP_TENSORS}


def test_a_draft_context_memfit_does_not_derive_leaves_the_kernels_workspace_unknown(tmp_path: Path) -> None:
    """exaone-moe with a NextN layer under draft-mtp: its builder has no graph_mtp (llama_model_exaone_moe builds its
    trunk's graph whatever the graph type), and memfit derives no draft for it, so the kernel derives no draft and no
    workspace, where the same workload without MTP has one."""
    run = next(r for r in records("results_more.jsonl") if r["model"] == "exaone-moe-nextn")
    files = write_models({run["model"]}, tmp_path)
    subject = file_subject(files[run["model"]], measured_variant(run), CACHE)
    assert subject.layout is not None
    plain = _workload(run)
    kernels = [
        ContextKernel(subject.layout, subject.n_vocab, subject.architecture, w)
        for w in (plain, replace(plain, multi_token_prediction=True))
    ]
    geometry = kernels[1].geometry(plain.allocated_tokens)
    assert (kernels[0].draft_unknown, kernels[1].draft_unknown, kernels[1].draft) == (False, True, None)
    assert kernels[0].workspace(geometry) is not None and kernels[1].workspace(geometry) is None


ALL_LAYERS = [r for r in MTP_CTX if r["model"] in ("deepseek2-mla-mtp", "glm4moe-mtp")]


@pytest.mark.parametrize("run", ALL_LAYERS, ids=run_id)
def test_the_draft_cache_of_deepseek2_and_glm4moe_holds_every_layer(run: dict, tmp_path: Path) -> None:
    """llama_model::create_memory gives deepseek2 and glm4moe no layer filter under ctx_type MTP: the draft
    context's KV cache holds the trunk's layers and the NextN one, as the target's does (its recorded caches' layers),
    in f16 whatever the target's cache types; deepseek2's MLA cache K only. K and V to the byte."""
    files = write_models({run["model"]}, tmp_path)
    subject = file_subject(files[run["model"]], measured_variant(run), CACHE)
    assert subject.layout is not None
    draft = draft_context(subject.architecture, subject.layout)
    assert draft is not None and draft.all_layers
    (cache,) = run["draft_ctx"]["kv_caches"]
    assert draft.layers == len(cache["layers"]) == sum(len(c["layers"]) for c in run["kv_caches"])
    workload = _workload(run)
    kernel = ContextKernel(subject.layout, subject.n_vocab, subject.architecture, workload)
    geometry = kernel.geometry(workload.allocated_tokens)
    assert draft_kv_bytes(draft, geometry) == (cache["k_bytes"], cache["v_bytes"])
    assert (cache["v_bytes"] == 0) == (subject.architecture == "deepseek2")


NEXTN_ONLY = [
    r
    for name in ("results_mtp_ctx_dsa.jsonl", "results_mtp_ctx_nemotron.jsonl", "results_mtp_ctx_hyv3.jsonl")
    for r in records(name)
]


@pytest.mark.parametrize("run", NEXTN_ONLY, ids=run_id)
def test_the_draft_cache_of_deepseek32_glm_dsa_and_nemotron_h_moe_holds_the_nextn_layer_alone(
    run: dict, tmp_path: Path
) -> None:
    """llama_model::create_memory gives deepseek32 and glm-dsa (their own branch) and nemotron_h_moe (the default
    branch's mtp_on_hybrid_nemotron) under ctx_type MTP a plain llama_kv_cache filtered to il >= n_layer(): the NextN
    layer alone, past every layer the target's memory module holds; no indexer cache beside deepseek32's and
    glm-dsa's MLA row (K only: the draft head runs dense MLA), no recurrent state beside nemotron_h_moe's; in f16
    whatever the target's types. K and V to the byte."""
    files = write_models({run["model"]}, tmp_path)
    subject = file_subject(files[run["model"]], measured_variant(run), CACHE)
    assert subject.layout is not None
    draft = draft_context(subject.architecture, subject.layout)
    assert draft is not None and not draft.all_layers and draft.layers == 1
    (cache,) = run["draft_ctx"]["kv_caches"]
    # the target's attention layers (the DSA cache is not introspected: its log's MLA layer count)
    target = [il for c in run["kv_caches"] for il in c["layers"]] or range(run["log_kv_caches"][0]["layers"])
    assert len(cache["layers"]) == 1 and cache["layers"][0] > max(target)
    assert (cache["v_bytes"] == 0) == (subject.architecture in ("deepseek32", "glm-dsa"))
    workload = _workload(run)
    kernel = ContextKernel(subject.layout, subject.n_vocab, subject.architecture, workload)
    geometry = kernel.geometry(workload.allocated_tokens)
    assert draft_kv_bytes(draft, geometry) == (cache["k_bytes"], cache["v_bytes"])
