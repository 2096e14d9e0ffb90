"""Tiny models of the remaining llama.cpp attention architectures, measured in real llama.cpp
(tests/data/results_more.jsonl): sliding-window variants, MLA reusers, NextN / MTP layers in the main cache,
the DSA lightning indexer, plain dense archs.

Each function returns the `Model` of one measured file: the same architecture, metadata, token count and
tensor infos as the file the ground-truth harness wrote with random weights and measured (node-llama-cpp
3.21.1, llama.cpp v0.4.0). `write_model` writes it with a sparse data region, and the memory llama.cpp
allocates depends only on the header, so it is a valid stand-in. All weights are F16 (norms, biases and
sinks F32) and every vocabulary has 512 tokens; the tokenizer's contents differ from the measured files.
Three models are written on purpose to fail loading: mellum-nopat, muse-glimmer-nopat, mimo2-convpat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gguf

from tools.gguf_writers import (
    QT,
    Model,
    attention,
    embeddings,
    feed_forward,
    layer_norm,
    mla_attention,
    mla_kv,
    moe_feed_forward,
    nextn_tensors,
    transformer_kv,
)

F16, F32 = QT.F16, QT.F32
VOCAB = 512
E, H, HKV, HD, FF = 256, 4, 2, 64, 512  # the common shape: embedding, heads, KV heads, head dim, FFN width
NE, FFE = 4, 128  # 4 experts (2 used) of width 128; a shared expert has the same width
QL, KVL, ROPE, NOPE, V = 64, 128, 32, 64, 64  # latent attention: q / kv LoRA ranks, rope / nope / value head dims
IDX_HEADS, IDX_HD = 4, 64  # the DSA lightning indexer


def _model(
    arch: str,
    name: str,
    tokenizer: str = "gpt2",
    *,
    ctx: int,
    layers: int,
    embd: int = E,
    ff: int = FF,
    heads: int | list[int] = H,
    heads_kv: int | list[int] = HKV,
    **hparams: Any,
) -> Model:
    """A 512-token F16 model with transformer_kv's hyperparameters (rope base 1e4, rms eps 1e-6 unless given)."""
    m = Model(arch, vocab=VOCAB, tokenizer=tokenizer)
    transformer_kv(
        m,
        ctx=ctx,
        embd=embd,
        layers=layers,
        ff=ff,
        heads=heads,
        heads_kv=heads_kv,
        name=name,
        file_type=gguf.LlamaFileType.MOSTLY_F16,
        **hparams,
    )
    return m


def _swa(m: Model, window: int | None, pattern: int | list[bool] | None = None) -> None:
    """sliding_window and sliding_window_pattern (an int: scalar period, a list: per-layer bool array); None: no key."""
    if window is not None:
        m.arch_kv(attention__sliding_window=window)
    if pattern is not None:
        m.arch_kv(attention__sliding_window_pattern=pattern)


def _experts(m: Model, **kv: Any) -> None:
    """The expert keys (4 experts, 2 used, width 128) and further `<arch>.` keys."""
    m.arch_kv(expert_count=NE, expert_used_count=2, expert_feed_forward_length=FFE, **kv)


def _ffn(
    m: Model,
    i: int,
    moe: bool,
    *,
    norm: bool = True,
    shared: bool = True,
    probs_bias: bool = False,
    fused: bool = False,
) -> None:
    """Layer i's FFN: a SwiGLU of width FF, or (moe) the MoE, with a shared expert unless shared=False (`fused`:
    the experts' gate and up in one tensor)."""
    if moe:
        shared_ff = FFE if shared else 0
        moe_feed_forward(
            m, i, E, FFE, NE, F16, norm=norm, shared_ff=shared_ff, probs_bias=probs_bias, fused_gate_up=fused
        )
    else:
        feed_forward(m, i, E, FF, F16, norm=norm)


def _norm(m: Model, name: str, n: int = E) -> None:
    m.tensor(name, [n], F32)


def _attn_gate(m: Model, i: int, width: int) -> None:
    """An output gate: per element (width heads * head_dim) or per head (width heads)."""
    m.tensor(f"blk.{i}.attn_gate.weight", [E, width], F16)


def _sinks(m: Model, i: int) -> None:
    m.tensor(f"blk.{i}.attn_sinks.weight", [H], F32)


# --- sliding-window architectures -----------------------------------------------------------------


def olmo2_swa() -> Model:
    """olmo2 with sliding_window 200 and no pattern key: default period 4 (layers 3, 7 full)."""
    m = _model("olmo2", "tiny-olmo2-swa", ctx=4096, layers=8, rope_base=500000.0)
    _swa(m, 200)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(8):
        attention(m, i, E, H, HKV, HD, F16, post_norm=True, norm=False)
        _norm(m, f"blk.{i}.attn_q_norm.weight", H * HD)  # olmo2 normalizes the whole Q / K projections
        _norm(m, f"blk.{i}.attn_k_norm.weight", HKV * HD)
        feed_forward(m, i, E, FF, F16, post_norm=True, norm=False)
    return m


def _exaone4(name: str, layers: int, window: int | None, pattern: int | list[bool] | None) -> Model:
    """exaone4 (64-wide, 2 heads of 32, 1 KV head): SWA only for exactly 64 layers."""
    m = _model(
        "exaone4",
        name,
        ctx=65536,
        layers=layers,
        embd=64,
        ff=128,
        heads=2,
        heads_kv=1,
        head_dim=32,
        rope_base=1000000.0,
        eps=1e-5,
    )
    m.arch_kv(rope__dimension_count=32)
    _swa(m, window, pattern)
    embeddings(m, 64, VOCAB, F16, tied=True)
    for i in range(layers):
        attention(m, i, 64, 2, 1, 32, F16, qk_norm=True, post_norm=True, norm=False)
        feed_forward(m, i, 64, 128, F16, post_norm=True, norm=False)
    return m


def exaone4_64() -> Model:
    """exaone4, 64 layers, no sliding_window key: n_swa 4096; the converter's bool-array pattern is
    ignored (scalar read), default period 4."""
    return _exaone4("tiny-exaone4-64", 64, None, [True, False] * 32)


def exaone4_64_key() -> Model:
    """exaone4, 64 layers, sliding_window 256 (overrides 4096) and scalar pattern 2: even layers SWA."""
    return _exaone4("tiny-exaone4-64-key", 64, 256, 2)


def exaone4_4_key() -> Model:
    """exaone4, 4 layers with sliding_window 128: SWA only for 64-layer models, so a full cache."""
    return _exaone4("tiny-exaone4-4-key", 4, 128, None)


def exaone_moe_nextn() -> Model:
    """exaone-moe: always SWA (window 160 required), period 4; 4 trunk layers + 1 NextN layer whose
    tensors must be present (TENSOR_SKIP only) and which keeps a slot in the base cache."""
    L = 4
    m = _model(
        "exaone-moe", "tiny-exaone-moe-nextn", ctx=65536, layers=L + 1, head_dim=HD, rope_base=1000000.0, eps=1e-5
    )
    m.arch_kv(rope__dimension_count=HD, nextn_predict_layers=1)
    _swa(m, 160)
    _experts(m, expert_shared_count=1, expert_gating_func=2, leading_dense_block_count=1)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(L + 1):
        attention(m, i, E, H, HKV, HD, F16, qk_norm=True)
        _ffn(m, i, 0 < i < L)
    m.tensor(f"blk.{L}.nextn.eh_proj.weight", [2 * E, E], F16)
    _norm(m, f"blk.{L}.nextn.enorm.weight")
    _norm(m, f"blk.{L}.nextn.hnorm.weight")
    return m


def smallthinker_swa() -> Model:
    """smallthinker with sliding_window 128: n_swa forced to 4096, dense-first period 4 (layer 0 full)."""
    m = _model("smallthinker", "tiny-smallthinker-swa", ctx=32768, layers=4, rope_base=1500000.0)
    _swa(m, 128)
    _experts(m, expert_gating_func=1)  # without it the graph aborts
    embeddings(m, E, VOCAB, F16, tied=True)
    for i in range(4):
        attention(m, i, E, H, HKV, HD, F16)
        _ffn(m, i, True, shared=False)
    return m


def afmoe_swa() -> Model:
    """afmoe, window 300, default period 4; leading dense layer, shared expert, output gate."""
    m = _model("afmoe", "tiny-afmoe-swa", ctx=65536, layers=8, head_dim=HD, eps=1e-5)
    _swa(m, 300)
    _experts(m, leading_dense_block_count=1, expert_shared_count=1)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(8):
        attention(m, i, E, H, HKV, HD, F16, qk_norm=True, post_norm=True)
        _attn_gate(m, i, H * HD)
        _ffn(m, i, i >= 1, probs_bias=True)
        _norm(m, f"blk.{i}.post_ffw_norm.weight")
    return m


def laguna_swa() -> Model:
    """laguna, window 256, dense-first period 4 (layers 0, 4 full), per-layer head_count (6 full / 4 SWA)."""
    heads = [6 if i % 4 == 0 else 4 for i in range(8)]
    m = _model("laguna", "tiny-laguna-swa", ctx=131072, layers=8, heads=heads, head_dim=HD, rope_base=500000.0)
    m.arch_kv(rope__dimension_count=HD)
    _swa(m, 256)
    _experts(m, leading_dense_block_count=1, expert_shared_feed_forward_length=FFE)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i, h in enumerate(heads):
        attention(m, i, E, h, HKV, HD, F16, qk_norm=True)
        _attn_gate(m, i, h)
        _ffn(m, i, i >= 1, probs_bias=True)
    return m


def laguna_full() -> Model:
    """laguna like M.1: no sliding window (the plain KV cache input), an output gate per element, 3 leading dense
    layers, the experts' weights normalized."""
    m = _model("laguna", "tiny-laguna-full", ctx=131072, layers=5, head_dim=HD, rope_base=500000.0)
    m.arch_kv(rope__dimension_count=HD)
    _experts(m, leading_dense_block_count=3, expert_shared_feed_forward_length=FFE, expert_weights_norm=True)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(5):
        attention(m, i, E, H, HKV, HD, F16, qk_norm=True)
        _attn_gate(m, i, H * HD)
        _ffn(m, i, i >= 3, probs_bias=True)
    return m


def plamo3_swa() -> Model:
    """plamo3, window 128, no pattern key: default period 8 (layer 7 full); fused qkv and gate+up."""
    m = _model("plamo3", "tiny-plamo3-swa", ctx=8192, layers=8, head_dim=HD, rope_base=1000000.0)
    _swa(m, 128)
    m.arch_kv(rope__freq_base_swa=10000.0)
    embeddings(m, E, VOCAB, F16, tied=True)
    for i in range(8):
        attention(m, i, E, H, HKV, HD, F16, qk_norm=True, fused=True)
        for norm in ("post_attention_norm", "ffn_norm.weight", "post_ffw_norm"):  # plamo3's post norms lack ".weight"
            _norm(m, f"blk.{i}.{norm}")
        m.tensor(f"blk.{i}.ffn_up.weight", [E, 2 * FF], F16)
        m.tensor(f"blk.{i}.ffn_down.weight", [FF, E], F16)
    return m


def _mellum(name: str, pattern: int | list[bool] | None) -> Model:
    m = _model("mellum", name, ctx=32768, layers=6, rope_base=500000.0)
    _swa(m, 160, pattern)
    _experts(m)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(6):
        attention(m, i, E, H, HKV, HD, F16, qk_norm=True)
        _ffn(m, i, True, shared=False)
    return m


def mellum_scal() -> Model:
    """mellum, window 160, scalar pattern 3: layers 2, 5 full."""
    return _mellum("tiny-mellum-scal", 3)


def mellum_arr() -> Model:
    """mellum, window 160, bool-array pattern (layers 1, 4 full)."""
    return _mellum("tiny-mellum-arr", [True, False, True, True, False, True])


def mellum_nopat() -> Model:
    """mellum with a window but no pattern key: load error (the array read is required)."""
    return _mellum("tiny-mellum-nopat", None)


def _muse_glimmer(name: str, pattern: list[bool] | None) -> Model:
    m = _model("muse-glimmer", name, ctx=65536, layers=8, head_dim=HD, rope_base=1000000.0)
    _swa(m, 192, pattern)
    m.arch_kv(logit_scale=0.5, final_logit_softcapping=30.0)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(8):
        attention(m, i, E, H, HKV, HD, F16, qk_norm=True, post_norm=True)
        _attn_gate(m, i, H * HD)
        feed_forward(m, i, E, FF, F16, post_norm=True)
    return m


def muse_glimmer_arr() -> Model:
    """muse-glimmer (always SWA), window 192, the converter's bool array (layers 5, 7 full)."""
    return _muse_glimmer("tiny-muse-glimmer-arr", [True] * 5 + [False, True, False])


def muse_glimmer_nopat() -> Model:
    """muse-glimmer without a pattern key: load error."""
    return _muse_glimmer("tiny-muse-glimmer-nopat", None)


def _cohere2moe(name: str, pattern: int | list[bool], nextn: int, mtp_block: bool = False, rms: bool = False) -> Model:
    """cohere2moe: 8 trunk layers (+ nextn MTP layers, tensors left out unless `mtp_block`: load_block_mtp's
    attention, routed and shared experts, eh_proj, its norms and the shared head norm where not `rms`), LayerNorm
    eps (`rms`: an RMS eps, so LLM_NORM_RMS), parallel block."""
    m = _model("cohere2moe", name, ctx=131072, layers=8 + nextn, rope_base=50000.0, eps=1e-5 if rms else None)
    if not rms:
        m.arch_kv(attention__layer_norm_epsilon=1e-5)
    m.arch_kv(rope__dimension_count=HD, logit_scale=0.25)
    _swa(m, 128, pattern)
    _experts(m, leading_dense_block_count=1, expert_shared_count=1)
    if nextn:
        m.arch_kv(nextn_predict_layers=nextn)
    embeddings(m, E, VOCAB, F16, tied=True)
    for i in range(8 + nextn if mtp_block else 8):
        attention(m, i, E, H, HKV, HD, F16)
        _ffn(m, i, i >= 1, norm=False)
    if mtp_block:
        nextn_tensors(m, 8, E, shared_head_norm=not rms)
    return m


def cohere2moe_scal() -> Model:
    """cohere2moe, window 128, scalar pattern 4 with dense-first: layers 0, 4 full."""
    return _cohere2moe("tiny-cohere2moe-scal", 4, 0)


def cohere2moe_arr_nextn() -> Model:
    """cohere2moe, bool-array pattern (length n_layer: full 3, 7) and 1 MTP layer, kept in the base cache."""
    return _cohere2moe("tiny-cohere2moe-arr-nextn", [i % 4 != 3 for i in range(8)], 1)


def cohere2moe_mtp() -> Model:
    """cohere2moe-arr-nextn with its NextN/MTP layer written whole: llama-server's draft context under --spec-type
    draft-mtp builds on it (graph_mtp over llama_kv_cache_iswa's base half)."""
    return _cohere2moe("tiny-cohere2moe-mtp", [i % 4 != 3 for i in range(8)], 1, mtp_block=True)


def cohere2moe_mtp_rms() -> Model:
    """cohere2moe, scalar pattern 4 with dense-first, an RMS eps (LLM_NORM_RMS throughout) and its NextN/MTP layer
    written whole but for the shared head norm (graph_mtp's head then output_norm)."""
    return _cohere2moe("tiny-cohere2moe-mtp-rms", 4, 1, mtp_block=True, rms=True)


def _nextn(m: Model, i: int) -> None:
    """Layer i's NextN/MTP head tensors: eh_proj over the normed token row and hidden state, their norms, the
    shared head norm."""
    m.tensor(f"blk.{i}.nextn.eh_proj.weight", [2 * E, E], F16)
    for norm in ("enorm", "hnorm", "shared_head_norm"):
        _norm(m, f"blk.{i}.nextn.{norm}.weight")


def _mimo2(
    name: str,
    converter_pattern: bool,
    fused: bool = False,
    mtp: bool = False,
    mtp_fused: bool = True,
    mtp_moe: bool = False,
) -> Model:
    """mimo2: 6 trunk layers + 1 MTP layer (tensors left out unless `mtp`: its block as graph_mtp asserts it, one
    attn_qkv, sinks, a dense FFN, and its NextN head; or, as it does not: Q, K and V apart unless `mtp_fused`, routed
    experts where `mtp_moe`), K head 96 / V head 64, 2 KV heads on full layers and 4 on SWA layers (the MTP layer
    too), attention sinks."""
    swa = [False, True, True, False, True, True]
    heads_kv = [4 if s else 2 for s in swa + [True]]
    m = _model("mimo2", name, ctx=262144, layers=7, heads_kv=heads_kv, head_dim=96, rope_base=5000000.0, eps=1e-5)
    m.arch_kv(attention__value_length=64, rope__dimension_count=64, nextn_predict_layers=1, rope__freq_base_swa=10000.0)
    _swa(m, 128, swa + [True] if converter_pattern else swa)
    _experts(m)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(6):
        attention(m, i, E, H, heads_kv[i], 96, F16, v_head_dim=64, fused=fused)
        _sinks(m, i)
        _ffn(m, i, i >= 1, shared=False, probs_bias=True)
    if mtp:
        attention(m, 6, E, H, heads_kv[6], 96, F16, v_head_dim=64, fused=mtp_fused)
        _sinks(m, 6)
        _ffn(m, 6, mtp_moe, shared=False, probs_bias=True)
        _nextn(m, 6)
    return m


def mimo2_nextn() -> Model:
    """mimo2 with a pattern of length n_layer (trunk): the MTP layer is left out of the cache."""
    return _mimo2("tiny-mimo2-nextn", converter_pattern=False)


def mimo2_fused() -> Model:
    """mimo2 with Q, K and V in one attn_qkv (K heads of 96, V heads of 64): its builder's fused path."""
    return _mimo2("tiny-mimo2-fused", converter_pattern=False, fused=True)


def mimo2_mtp() -> Model:
    """mimo2-nextn with its MTP layer's tensors (llama-server's draft-mtp builds its DECODER_MTP graph on them); the
    pattern's n_layer entries leave that layer full, so the draft's iswa cache keeps it in its base cache."""
    return _mimo2("tiny-mimo2-mtp", converter_pattern=False, mtp=True)


def mimo2_mtp_unfused() -> Model:
    """mimo2-mtp whose MTP block keeps Q, K and V apart: graph_mtp's GGML_ASSERT(layer.wqkv) aborts the draft."""
    return _mimo2("tiny-mimo2-mtp-unfused", converter_pattern=False, mtp=True, mtp_fused=False)


def mimo2_mtp_moe() -> Model:
    """mimo2-mtp whose MTP block routes experts: graph_mtp's GGML_ASSERT on a dense FFN aborts the draft."""
    return _mimo2("tiny-mimo2-mtp-moe", converter_pattern=False, mtp=True, mtp_moe=True)


def mimo2_convpat() -> Model:
    """mimo2 as the converter writes it, a pattern of length block_count: load error "wrong array length"."""
    return _mimo2("tiny-mimo2-convpat", converter_pattern=True)


def step35_nextn() -> Model:
    """step35: pattern array of length block_count (MTP entry included), per-layer head_count (4 full / 6 SWA)
    and head_count_kv (2 / 1), per-head output gate; the MTP layer (tensors left out) is not in the cache."""
    return _step35("tiny-step35-nextn")


def step35_mtp() -> Model:
    """step35 whose MTP layer slides (its pattern entry true: 6 heads over 1 KV head) with its tensors written (q/k
    norms, the head-wise gate, the experts with a shared expert, the NextN head): the draft's iswa cache keeps it in
    its SWA cache."""
    return _step35("tiny-step35-mtp", mtp=True)


def step35_clamped() -> Model:
    """step35 with Step-3.5's per-layer SwiGLU clamps (swiglu_limits: the experts' on layers 1 and 3, the
    dense / shared FFN's on layers 0 and 3) and, on layer 2, no head-wise output gate."""
    return _step35(
        "tiny-step35-clamped", clamps=([0.0, 7.0, 0.0, 7.0, 0.0], [7.0, 0.0, 0.0, 16.0, 0.0]), gate=(0, 1, 3)
    )


def _step35(
    name: str,
    clamps: tuple[list[float], list[float]] | None = None,
    gate: tuple[int, ...] = (0, 1, 2, 3),
    mtp: bool = False,
) -> Model:
    swa = [False, True, True, True, mtp]
    heads, heads_kv = [6 if s else 4 for s in swa], [1 if s else 2 for s in swa]
    m = _model(
        "step35",
        name,
        ctx=65536,
        layers=5,
        heads=heads,
        heads_kv=heads_kv,
        head_dim=HD,
        rope_base=5000000.0,
        eps=1e-5,
    )
    m.arch_kv(rope__dimension_count=HD, nextn_predict_layers=1, rope__freq_base_swa=10000.0)
    _swa(m, 128, swa)
    _experts(m, expert_shared_feed_forward_length=FFE)
    if clamps is not None:
        m.arch_kv(swiglu_clamp_exp=clamps[0], swiglu_clamp_shexp=clamps[1])
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(4):
        attention(m, i, E, heads[i], heads_kv[i], HD, F16, qk_norm=True)
        if i in gate:
            _attn_gate(m, i, heads[i])
        _ffn(m, i, i >= 1, probs_bias=True)
    if mtp:
        attention(m, 4, E, heads[4], heads_kv[4], HD, F16, qk_norm=True)
        _attn_gate(m, 4, heads[4])
        _ffn(m, 4, True, probs_bias=True)
        _nextn(m, 4)
    return m


def granite_swa() -> Model:
    """granite_swa: the required bool-array pattern (the converter's fallback i % 4 != 0: full 0, 4),
    window 128, attention sinks, granite scales."""
    m = _model("granite_swa", "tiny-granite-swa", ctx=131072, layers=8, eps=1e-5)
    m.arch_kv(logit_scale=8.0, residual_scale=0.22, embedding_scale=12.0, attention__scale=0.015625)
    _swa(m, 128, [i % 4 != 0 for i in range(8)])
    embeddings(m, E, VOCAB, F16, tied=True)
    for i in range(8):
        attention(m, i, E, H, HKV, HD, F16)
        _sinks(m, i)
        feed_forward(m, i, E, FF, F16)
    return m


def _llama4(name: str, window: int | None) -> Model:
    """llama4, MoE (with a shared expert) on odd layers."""
    m = _model("llama4", name, ctx=10485760, layers=4, rope_base=500000.0, eps=1e-5)
    m.arch_kv(rope__dimension_count=HD, interleave_moe_layer_step=2)
    _experts(m)
    _swa(m, window)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(4):
        attention(m, i, E, H, HKV, HD, F16)
        _ffn(m, i, i % 2 == 1)
    return m


def llama4_chunked() -> Model:
    """llama4 without a sliding_window key: chunked attention, n_swa forced to 8192, period 4."""
    return _llama4("tiny-llama4-chunked", None)


def llama4_nochunk() -> Model:
    """llama4 with sliding_window 0: no chunking, a full cache (the first decode aborts)."""
    return _llama4("tiny-llama4-nochunk", 0)


# --- latent attention: MLA reusers, low-rank KV with a plain cache, the DSA indexer ----------------


def _mla_moe(
    arch: str,
    name: str,
    *,
    ctx: int,
    layers: int,
    nextn: int = 0,
    eps: float = 1e-6,
    probs_bias: bool = False,
    fused: bool = False,
    mtp_block: bool = False,
    **kv: Any,
) -> Model:
    """deepseek2-style MLA (one KV "head" of kv_lora + rope, q LoRA, split k_b / v_b): `layers` trunk layers
    (+ nextn MTP layers, tensors left out unless `mtp_block`: MLA, the experts, eh_proj and its norms), layer 0
    dense, the others MoE with a shared expert (`fused`: the experts' gate and up in one tensor)."""
    m = _model(arch, name, ctx=ctx, layers=layers + nextn, heads_kv=1, eps=eps)
    mla_kv(m, kv_lora=KVL, rope=ROPE, k_head=NOPE + ROPE, v_head=V)
    m.arch_kv(attention__q_lora_rank=QL, leading_dense_block_count=1, expert_shared_count=1, **kv)
    _experts(m)
    if nextn:
        m.arch_kv(nextn_predict_layers=nextn)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(layers + nextn if mtp_block else layers):
        _norm(m, f"blk.{i}.attn_norm.weight")
        mla_attention(m, i, E, H, KVL, ROPE, NOPE + ROPE, V, F16, q_lora=QL)
        _ffn(m, i, i >= 1, probs_bias=probs_bias, fused=fused)
        if i >= layers:
            nextn_tensors(m, i, E)
    return m


def mistral4_mla() -> Model:
    """mistral4 (the deepseek2 loader under "mistral4."): MLA, K only (row kv_lora + rope), no V."""
    return _mla_moe("mistral4", "tiny-mistral4-mla", ctx=262144, layers=3, expert_weights_scale=1.0, vocab_size=VOCAB)


def mistral4_fused() -> Model:
    """mistral4 as its converter writes Mistral 4's stacked experts: one ffn_gate_up_exps per MoE layer."""
    return _mla_moe(
        "mistral4", "tiny-mistral4-fused", ctx=262144, layers=3, expert_weights_scale=1.0, vocab_size=VOCAB, fused=True
    )


def _low_rank_mha(arch: str, name: str, tokenizer: str, *, ctx: int, eps: float, q_lora: int, gated_ffn: bool) -> Model:
    """Low-rank KV projections (fused attn_kv_b) without *_mla keys: a plain MHA cache, K nope+rope (96),
    V value_length (64), head_count_kv = head_count as the converter writes it."""
    m = _model(arch, name, tokenizer, ctx=ctx, layers=3, heads_kv=H, head_dim=NOPE + ROPE, eps=eps)
    m.arch_kv(attention__value_length=V, rope__dimension_count=ROPE)
    if q_lora:
        m.arch_kv(attention__q_lora_rank=q_lora)
    m.arch_kv(attention__kv_lora_rank=KVL)
    embeddings(m, E, VOCAB, F16, tied=True)
    for i in range(3):
        _norm(m, f"blk.{i}.attn_norm.weight")
        mla_attention(m, i, E, H, KVL, ROPE, NOPE + ROPE, V, F16, q_lora=q_lora, split_kv_b=False)
        feed_forward(m, i, E, FF, F16, gate=gated_ffn)
    return m


def minicpm3() -> Model:
    """minicpm3: q / kv LoRA ranks but a plain MHA cache."""
    return _low_rank_mha("minicpm3", "tiny-minicpm3", "llama", ctx=32768, eps=1e-5, q_lora=QL, gated_ffn=True)


def plm() -> Model:
    """plm: kv_lora_rank, a plain MHA cache (context creation aborts with flash attention on)."""
    return _low_rank_mha("plm", "tiny-plm", "gpt2", ctx=4096, eps=1e-6, q_lora=0, gated_ffn=False)


def glm4moe_nextn() -> Model:
    """glm4moe with nextn_predict_layers 1 (tensors left out): the MTP layer is kept in the main cache."""
    return _glm4moe("tiny-glm4moe-nextn")


def glm4moe_fused() -> Model:
    """glm4moe with Q, K and V in one attn_qkv (no biases): build_qkv's fused path."""
    return _glm4moe("tiny-glm4moe-fused", fused=True)


def glm4moe_mtp() -> Model:
    """glm4moe with Q/K norms (GLM-4.5 / 4.6's) and its NextN/MTP layer written whole (attention, the experts,
    eh_proj and its norms): llama-server's draft context under --spec-type draft-mtp builds on it."""
    return _glm4moe("tiny-glm4moe-mtp", qk_norm=True, mtp_block=True)


def glm4moe_mtp_headless() -> Model:
    """glm4moe-mtp without its NextN layer's nextn.eh_proj: glm4-moe.cpp's trunk-only probe makes the NextN tensors
    optional, so it loads; under draft-mtp the draft's graph asserts nextn.eh_proj."""
    m = _glm4moe("tiny-glm4moe-mtp-headless", qk_norm=True, mtp_block=True)
    m.tensors = [t for t in m.tensors if ".nextn.eh_proj" not in t[0]]
    return m


def hy_v3_mtp() -> Model:
    """hy_v3: Q/K norms, layer 0 dense (no router: hy-v3.cpp's leading dense block), MoE with exp_probs_b (named as
    its loader reads it) and a shared expert (expert_shared_feed_forward_length), the weights normalized and scaled
    by 2.5, and its NextN/MTP layer written whole: llama-server's draft context under --spec-type draft-mtp builds on
    it."""
    m = _model("hy_v3", "tiny-hy-v3-mtp", ctx=262144, layers=4, head_dim=HD, rope_base=1000000.0, eps=1e-5)
    m.arch_kv(nextn_predict_layers=1, expert_shared_feed_forward_length=FFE)
    m.arch_kv(expert_weights_norm=True, expert_weights_scale=2.5)
    _experts(m)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(4):
        attention(m, i, E, H, HKV, HD, F16, True)
        _ffn(m, i, i >= 1)
        if i >= 1:  # hy-v3.cpp's name for the router's bias: tn(LLM_TENSOR_FFN_EXP_PROBS_B, i), no ".bias"
            _norm(m, f"blk.{i}.exp_probs_b", NE)
    nextn_tensors(m, 3, E)
    return m


def _glm4moe(name: str, fused: bool = False, qk_norm: bool = False, mtp_block: bool = False) -> Model:
    """glm4moe: 3 trunk layers and one NextN/MTP layer, whose tensors are left out unless `mtp_block`."""
    m = _model("glm4moe", name, ctx=131072, layers=4, head_dim=HD, rope_base=1000000.0, eps=1e-5)
    m.arch_kv(
        rope__dimension_count=HD // 2,
        nextn_predict_layers=1,
        leading_dense_block_count=1,
        expert_shared_count=1,
        expert_weights_scale=1.0,
        expert_weights_norm=True,
    )
    _experts(m)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(4 if mtp_block else 3):
        attention(m, i, E, H, HKV, HD, F16, qk_norm, post_norm=True, bias=True, fused=fused)
        _ffn(m, i, i >= 1, norm=False, probs_bias=True)
    if mtp_block:
        nextn_tensors(m, 3, E)
    return m


def _dsa(
    arch: str,
    name: str,
    *,
    ctx: int,
    layers: int,
    nextn: int,
    eps: float,
    indexer: list[bool],
    mtp_block: bool = False,
    **kv: Any,
) -> Model:
    """MLA + the DSA lightning indexer (4 heads, key_length 64, top_k 256) on the layers marked in `indexer`;
    `mtp_block`: the NextN/MTP layers written whole, an indexer's tensors too (as DeepSeek-V3.2's and GLM-5's are)."""
    m = _mla_moe(
        arch,
        name,
        ctx=ctx,
        layers=layers,
        nextn=nextn,
        eps=eps,
        probs_bias=True,
        mtp_block=mtp_block,
        attention__indexer__head_count=IDX_HEADS,
        attention__indexer__key_length=IDX_HD,
        attention__indexer__top_k=256,
        expert_weights_scale=2.5,
        expert_weights_norm=True,
        **kv,
    )
    for i in (i for i, on in enumerate(indexer + [mtp_block] * nextn) if on):
        layer_norm(m, f"blk.{i}.indexer.k_norm", IDX_HD)
        m.tensor(f"blk.{i}.indexer.proj.weight", [E, IDX_HEADS], F16)
        m.tensor(f"blk.{i}.indexer.attn_k.weight", [E, IDX_HD], F16)
        m.tensor(f"blk.{i}.indexer.attn_q_b.weight", [QL, IDX_HEADS * IDX_HD], F16)
    return m


def _deepseek32(name: str, nextn: int, mtp_block: bool = False) -> Model:
    return _dsa(
        "deepseek32",
        name,
        ctx=163840,
        layers=3,
        nextn=nextn,
        eps=1e-6,
        indexer=[True] * 3,
        mtp_block=mtp_block,
        expert_gating_func=2,
        vocab_size=VOCAB,
    )


def deepseek32() -> Model:
    """deepseek32: an MLA cache and an indexer key cache of the same size, K only."""
    return _deepseek32("tiny-deepseek32", 0)


def deepseek32_nextn() -> Model:
    """deepseek32 with 1 MTP layer (tensors left out): left out of both caches."""
    return _deepseek32("tiny-deepseek32-nextn", 1)


def deepseek32_mtp() -> Model:
    """deepseek32 with its NextN/MTP layer written whole (MLA, the indexer, the experts, eh_proj and its norms):
    llama-server's draft context under --spec-type draft-mtp builds on it."""
    return _deepseek32("tiny-deepseek32-mtp", 1, mtp_block=True)


def glm_dsa_types(name: str = "tiny-glm-dsa-types", mtp_block: bool = False) -> Model:
    """glm-dsa with attention.indexer.types [1,0,0,1] and 1 MTP layer: the indexer cache holds layers 0, 3."""
    types = [1, 0, 0, 1]
    return _dsa(
        "glm-dsa",
        name,
        ctx=202752,
        layers=4,
        nextn=1,
        eps=1e-5,
        indexer=[bool(t) for t in types],
        mtp_block=mtp_block,
        attention__indexer__types=types,
    )


def glm_dsa_mtp() -> Model:
    """glm-dsa-types with its NextN/MTP layer written whole: llama-server's draft context under --spec-type
    draft-mtp builds on it."""
    return glm_dsa_types("tiny-glm-dsa-mtp", mtp_block=True)


def glm_dsa_52() -> Model:
    """glm-dsa with context_length 1048576 and no types key: the hard-coded GLM-5.2 indexer table
    (layers 0, 1, 2, 6 of 8)."""
    return _dsa(
        "glm-dsa",
        "tiny-glm-dsa-52",
        ctx=1048576,
        layers=8,
        nextn=0,
        eps=1e-5,
        indexer=[i < 3 or i % 4 == 2 for i in range(8)],
    )


# --- plain dense archs: every layer full ----------------------------------------------------------


def _dense(
    arch: str,
    name: str,
    tokenizer: str = "gpt2",
    *,
    ctx: int,
    tied: bool,
    heads_kv: int = HKV,
    head_dim: int | None = None,
    attn: dict[str, Any] | None = None,
    ffn: dict[str, Any] | None = None,
    **hparams: Any,
) -> Model:
    """4 layers of attention + FFN (attn / ffn: options of attention / feed_forward)."""
    m = _model(arch, name, tokenizer, ctx=ctx, layers=4, heads_kv=heads_kv, head_dim=head_dim, **hparams)
    embeddings(m, E, VOCAB, F16, tied=tied)
    for i in range(4):
        attention(m, i, E, H, heads_kv, head_dim or HD, F16, **(attn or {}))
        feed_forward(m, i, E, FF, F16, **(ffn or {}))
    return m


def smollm3() -> Model:
    """smollm3 (tied output; no RoPE every 4th layer, no KV effect)."""
    return _dense("smollm3", "tiny-smollm3", ctx=65536, tied=True, rope_base=5000000.0)


def mistral3() -> Model:
    """mistral3 with head_dim 96 != n_embd / n_head and a sliding_window key it never reads: full cache."""
    m = _dense(
        "mistral3", "tiny-mistral3", "llama", ctx=131072, tied=False, head_dim=96, rope_base=1000000000.0, eps=1e-5
    )
    m.arch_kv(rope__dimension_count=96, attention__sliding_window=128)
    return m


def gemma_hd96() -> Model:
    """gemma (v1) with key_length 96 != n_embd / n_head, 1 KV head, tied output."""
    return _dense("gemma", "tiny-gemma-hd96", "llama", ctx=8192, tied=True, heads_kv=1, head_dim=96)


def starcoder2() -> Model:
    """starcoder2: LayerNorms and biases everywhere, a GELU FFN without gate."""
    m = _dense(
        "starcoder2",
        "tiny-starcoder2",
        ctx=16384,
        tied=True,
        attn={"norm": False, "bias": True, "out_bias": True},
        ffn={"norm": False, "gate": False},
        rope_base=100000.0,
        eps=None,
    )
    m.arch_kv(attention__layer_norm_epsilon=1e-5)
    _norm(m, "output_norm.bias")
    for i in range(4):
        layer_norm(m, f"blk.{i}.attn_norm", E)
        layer_norm(m, f"blk.{i}.ffn_norm", E)
        _norm(m, f"blk.{i}.ffn_up.bias", FF)
        _norm(m, f"blk.{i}.ffn_down.bias")
    return m


FAMILY_SET: dict[str, Callable[[], Model]] = {
    "olmo2-swa": olmo2_swa,
    "exaone4-64": exaone4_64,
    "exaone4-64-key": exaone4_64_key,
    "exaone4-4-key": exaone4_4_key,
    "exaone-moe-nextn": exaone_moe_nextn,
    "smallthinker-swa": smallthinker_swa,
    "afmoe-swa": afmoe_swa,
    "laguna-swa": laguna_swa,
    "laguna-full": laguna_full,
    "plamo3-swa": plamo3_swa,
    "mellum-scal": mellum_scal,
    "mellum-arr": mellum_arr,
    "mellum-nopat": mellum_nopat,
    "muse-glimmer-arr": muse_glimmer_arr,
    "muse-glimmer-nopat": muse_glimmer_nopat,
    "cohere2moe-scal": cohere2moe_scal,
    "cohere2moe-arr-nextn": cohere2moe_arr_nextn,
    "mimo2-nextn": mimo2_nextn,
    "mimo2-convpat": mimo2_convpat,
    "mimo2-fused": mimo2_fused,
    "step35-nextn": step35_nextn,
    "step35-clamped": step35_clamped,
    "granite-swa": granite_swa,
    "llama4-chunked": llama4_chunked,
    "llama4-nochunk": llama4_nochunk,
    "mistral4-mla": mistral4_mla,
    "mistral4-fused": mistral4_fused,
    "minicpm3": minicpm3,
    "plm": plm,
    "glm4moe-nextn": glm4moe_nextn,
    "glm4moe-fused": glm4moe_fused,
    "deepseek32": deepseek32,
    "deepseek32-nextn": deepseek32_nextn,
    "glm-dsa-types": glm_dsa_types,
    "glm-dsa-52": glm_dsa_52,
    "smollm3": smollm3,
    "mistral3": mistral3,
    "gemma-hd96": gemma_hd96,
    "starcoder2": starcoder2,
}

# Tiny models measured under --spec-type draft-mtp (results_mtp_ctx.jsonl), not family models of their own
MTP_MODELS: dict[str, Callable[[], Model]] = {"glm4moe-mtp": glm4moe_mtp}
# The NextN writers with their MTP layer's tensors whose draft cache is llama_kv_cache_iswa (results_mtp_ctx_swa.jsonl)
MTP_ISWA_MODELS: dict[str, Callable[[], Model]] = {"mimo2-mtp": mimo2_mtp, "step35-mtp": step35_mtp}
# a NextN layer without its head (results_mtp_headless.jsonl): glm4moe's loader takes it as trunk-only
MTP_HEADLESS_MODELS: dict[str, Callable[[], Model]] = {"glm4moe-mtp-headless": glm4moe_mtp_headless}
# mimo2 files whose MTP block is not the one its graph_mtp asserts (results_mtp_ctx_asserts.jsonl: llama.cpp aborts)
MIMO2_MTP_ASSERTS: dict[str, Callable[[], Model]] = {
    "mimo2-mtp-unfused": mimo2_mtp_unfused,
    "mimo2-mtp-moe": mimo2_mtp_moe,
}

# cohere2moe with its MTP block written whole (results_mtp_ctx_cohere2moe.jsonl, graph_dumps_mtp_cohere2moe.jsonl)
COHERE2MOE_MTP_MODELS: dict[str, Callable[[], Model]] = {
    "cohere2moe-mtp": cohere2moe_mtp,
    "cohere2moe-mtp-rms": cohere2moe_mtp_rms,
}

# deepseek32 and glm-dsa with their MTP block written whole (results_mtp_ctx_dsa.jsonl, graph_dumps_mtp_dsa.jsonl)
DSA_MTP_MODELS: dict[str, Callable[[], Model]] = {"deepseek32-mtp": deepseek32_mtp, "glm-dsa-mtp": glm_dsa_mtp}

# hy_v3 with its MTP block written whole (results_mtp_ctx_hyv3.jsonl, graph_dumps_mtp_hyv3.jsonl)
HY_V3_MTP_MODELS: dict[str, Callable[[], Model]] = {"hy-v3-mtp": hy_v3_mtp}
