"""Full-size shapes chosen to stress the workspace rule, measured in llama.cpp's dry run (no_alloc=1,
tests/data/results_shapes_dryrun.jsonl, with tools/gguf_writers.py's four scale shapes): a wide FFN with a
small vocabulary, a large vocabulary, a 70B-width model with a tiny vocabulary, two MoE layouts (256 experts,
64 wide experts), BERT-large, nomic-bert and a granite hybrid.

Each function returns the `Model` of one measured file (published-style dimensions, fewer layers where the
layer count does not change the workspace); `write_model` writes it with a sparse data region, so a
several-GB shape costs no disk. The runs used llama.cpp's AMX CPU variant: their weights buffers are not a
plain CPU's, so tools/accuracy.py checks these runs with llama.cpp's own weights on both sides.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from tools.families.attention import deci_blocks, openelm_blocks, phi3_blocks
from tools.gguf_writers import (
    QT,
    Model,
    attention,
    embeddings,
    feed_forward,
    layer_norm,
    mamba2_block,
    mla_attention,
    mla_kv,
    moe_feed_forward,
    nextn_tensors,
    ssm_kv,
    transformer_kv,
)


def decoder(
    arch: str,
    name: str,
    *,
    E: int,
    F: int,
    L: int,
    H: int,
    Hkv: int,
    V: int,
    tied: bool,
    D: int = 128,
    eps: float | None = 1e-5,
    pre_norm: bool = True,
    post_norm: bool = False,
    qk_norm: bool = False,
    ffn_norm: bool = True,
    tokenizer: str = "gpt2",
    w: QT = QT.Q4_0,
    **kv: Any,
) -> Model:
    """A llama-style decoder of `arch`: E embedding, F FFN width, L layers, H / Hkv heads of D, V tokens; RMS
    pre-norms (pre_norm / ffn_norm False: none), post norms, per-head q/k norms, SwiGLU FFNs; `kv`: the
    architecture's further keys."""
    m = Model(arch, vocab=V, tokenizer=tokenizer)
    head_dim = None if D == E // H else D
    transformer_kv(m, ctx=131072, embd=E, layers=L, ff=F, heads=H, heads_kv=Hkv, eps=eps, name=name, head_dim=head_dim)
    m.arch_kv(rope__dimension_count=D, vocab_size=V, **kv)
    embeddings(m, E, V, w, tied=tied)
    for i in range(L):
        attention(m, i, E, H, Hkv, D, w, qk_norm=qk_norm, post_norm=post_norm, norm=pre_norm)
        feed_forward(m, i, E, F, w, post_norm=post_norm, norm=pre_norm and ffn_norm)
    return m


def dense(name: str, *, E: int, F: int, L: int, H: int, Hkv: int, D: int, V: int, w: QT = QT.Q4_0) -> Model:
    """A llama: E embedding, F FFN width, L layers, H / Hkv heads of D, V tokens, untied output."""
    return decoder("llama", name, E=E, F=F, L=L, H=H, Hkv=Hkv, V=V, tied=False, D=D, tokenizer="llama", w=w)


def moe(name: str, *, E: int, Fe: int, nexp: int, k: int, L: int, H: int, Hkv: int, D: int, V: int) -> Model:
    """A qwen3moe: `nexp` experts of width Fe, `k` used per token."""
    w = QT.Q4_0
    m = Model("qwen3moe", vocab=V, tokenizer="gpt2")
    transformer_kv(
        m, ctx=40960, embd=E, layers=L, ff=Fe * 4, heads=H, heads_kv=Hkv, head_dim=D, rope_base=1e6, name=name
    )
    m.arch_kv(expert_count=nexp, expert_used_count=k, expert_feed_forward_length=Fe)
    embeddings(m, E, V, w, tied=False)
    for i in range(L):
        attention(m, i, E, H, Hkv, D, w, qk_norm=True)
        moe_feed_forward(m, i, E, Fe, nexp, w)
    return m


def bert(name: str, *, E: int, F: int, L: int, H: int, V: int, nomic: bool, ctx: int) -> Model:
    """BERT (learned positions, biases, GELU FFN) or nomic-bert (rope, fused QKV, gated FFN), all F16."""
    arch = "nomic-bert" if nomic else "bert"
    m = Model(arch, vocab=V, tokenizer="bert")
    transformer_kv(m, ctx=ctx, embd=E, layers=L, ff=F, heads=H, heads_kv=None, eps=None, name=name)
    m.arch_kv(attention__layer_norm_epsilon=1e-12, attention__causal=False, pooling_type=1)
    m.tensor("token_embd.weight", [E, V], QT.F16)
    m.tensor("token_types.weight", [E, 2], QT.F32)
    if not nomic:
        m.tensor("position_embd.weight", [E, ctx], QT.F16)
    layer_norm(m, "token_embd_norm", E)
    for i in range(L):
        attention(m, i, E, H, H, E // H, QT.F16, norm=False, fused=nomic, bias=not nomic, out_bias=True)
        layer_norm(m, f"blk.{i}.attn_output_norm", E)
        feed_forward(m, i, E, F, QT.F16, norm=False, gate=nomic)
        if not nomic:
            m.tensor(f"blk.{i}.ffn_up.bias", [F], QT.F32)
            m.tensor(f"blk.{i}.ffn_down.bias", [E], QT.F32)
        layer_norm(m, f"blk.{i}.layer_output_norm", E)
    return m


def granitehybrid(
    name: str,
    *,
    E: int,
    F: int,
    L: int,
    attn_every: int,
    H: int,
    Hkv: int,
    V: int,
    d_inner: int,
    d_state: int,
    ssm_heads: int,
    attn_at: int | None = None,
    experts: tuple[int, int, int] | None = None,
    nope: bool = False,
) -> Model:
    """Mamba-2 layers with an attention layer every `attn_every`-th (the one at `attn_at` in each run of them, the
    last by default), an FFN in every layer (dense of width F, or `experts` = (count, used, shared width) experts
    of width F), tied output; `nope`: rope.scaling.finetuned false, no rope (granite-4.0-h's published GGUFs)."""
    w = QT.Q4_0
    at = attn_every - 1 if attn_at is None else attn_at
    heads_kv = [Hkv if i % attn_every == at else 0 for i in range(L)]
    m = Model("granitehybrid", vocab=V)
    transformer_kv(m, ctx=131072, embd=E, layers=L, ff=F, heads=H, heads_kv=heads_kv, eps=1e-5, name=name)
    ssm_kv(m, d_conv=4, d_inner=d_inner, d_state=d_state, heads=ssm_heads, groups=1)
    m.arch_kv(logit_scale=1.0, residual_scale=1.0, embedding_scale=1.0, attention__scale=1.0 / 32)
    if nope:
        m.arch_kv(rope__scaling__finetuned=False)
    if experts is not None:
        m.arch_kv(expert_count=experts[0], expert_used_count=experts[1], expert_shared_feed_forward_length=experts[2])
    embeddings(m, E, V, w, tied=True)
    for i, kv in enumerate(heads_kv):
        if kv == 0:
            mamba2_block(m, i, E, d_inner, d_state, 1, ssm_heads, 4, w)
        else:
            attention(m, i, E, H, kv, E // H, w)
        if experts is None:
            feed_forward(m, i, E, F, w)
        else:
            moe_feed_forward(m, i, E, F, experts[0], w, shared_ff=experts[2])
    return m


def phi3(name: str, *, E: int, F: int, L: int, H: int, Hkv: int, D: int, V: int, rope: int) -> Model:
    """A phi3 (fused attn_qkv, one ffn_up for gate and up), Q4_0, rope over `rope` of each head's D."""
    m = Model("phi3", vocab=V, tokenizer="llama")
    head_dim = None if D == E // H else D
    transformer_kv(m, ctx=131072, embd=E, layers=L, ff=F, heads=H, heads_kv=Hkv, eps=1e-5, name=name, head_dim=head_dim)
    m.arch_kv(rope__dimension_count=rope)
    phi3_blocks(m, E=E, F=F, L=L, H=H, Hkv=Hkv, D=D, w=QT.Q4_0)
    return m


def per_layer(arch: str, name: str, *, E: int, D: int, V: int, layers: list[tuple[int, int, int]]) -> Model:
    """An openelm (fused QKV, q/k norms, tied) or a deci (attention-free, wo-only and FFN-free layers), Q4_0,
    each layer's (heads, KV heads, FFN width) its own."""
    heads, heads_kv, ff = (list(column) for column in zip(*layers, strict=True))
    m = Model(arch, vocab=V, tokenizer="llama")
    transformer_kv(m, ctx=131072, embd=E, layers=len(ff), ff=ff, heads=heads, heads_kv=heads_kv, eps=1e-5, name=name)
    m.arch_kv(rope__dimension_count=D, attention__key_length=D, attention__value_length=D, vocab_size=V)
    blocks = openelm_blocks if arch == "openelm" else deci_blocks
    blocks(m, E=E, D=D, heads=heads, heads_kv=heads_kv, ff=ff, w=QT.Q4_0)
    return m


def deepseek2(
    name: str,
    *,
    E: int,
    L: int,
    dense: int,
    F: int,
    H: int,
    q_lora: int,
    kv_lora: int,
    nope: int,
    rope: int,
    v: int,
    experts: tuple[int, int, int, int],
    V: int,
    routing: dict[str, Any],
    mla: bool = True,
    nextn: int = 0,
    fused_gate_up: bool = False,
    arch: str = "deepseek2",
    mtp_block: bool = False,
    probs_bias: bool = False,
) -> Model:
    """A deepseek2 (or mistral4): `dense` leading dense blocks of width F, then MoE blocks of `experts` = (count,
    used, width, shared count); latent attention of rank kv_lora (q_lora 0: one wq), MLA's split k_b / v_b or
    (mla False) the legacy fused kv_b over a plain cache; `routing`: the router's keys (gating, groups, weights);
    nextn MTP layers' tensors left out unless `mtp_block` (MLA, the experts, eh_proj and its norms); `probs_bias`:
    the router's exp_probs_b without expert groups; Q4_0 weights."""
    w, (n_exp, used, ff_exp, shared) = QT.Q4_0, experts
    m = Model(arch, vocab=V, tokenizer="gpt2")
    heads_kv = 1 if mla else H
    transformer_kv(m, ctx=163840, embd=E, layers=L + nextn, ff=F, heads=H, heads_kv=heads_kv, name=name)
    if mla:
        mla_kv(m, kv_lora=kv_lora, rope=rope, k_head=nope + rope, v_head=v)
    else:
        m.arch_kv(attention__key_length=nope + rope, attention__value_length=v, attention__kv_lora_rank=kv_lora)
        m.arch_kv(rope__dimension_count=rope)
    if q_lora:
        m.arch_kv(attention__q_lora_rank=q_lora)
    m.arch_kv(leading_dense_block_count=dense, expert_count=n_exp, expert_used_count=used, vocab_size=V)
    m.arch_kv(expert_feed_forward_length=ff_exp, expert_shared_count=shared, **routing)
    if nextn:
        m.arch_kv(nextn_predict_layers=nextn)
    embeddings(m, E, V, w, tied=False)
    for i in range(L + nextn if mtp_block else L):
        m.tensor(f"blk.{i}.attn_norm.weight", [E], QT.F32)
        mla_attention(m, i, E, H, kv_lora, rope, nope + rope, v, w, q_lora=q_lora, split_kv_b=mla)
        if i < dense:
            feed_forward(m, i, E, F, w)
        else:
            bias = probs_bias or routing.get("expert_group_count", 1) > 1
            moe_feed_forward(
                m, i, E, ff_exp, n_exp, w, shared_ff=shared * ff_exp, probs_bias=bias, fused_gate_up=fused_gate_up
            )
        if i >= L:
            nextn_tensors(m, i, E, w)
    return m


def deepseek32(
    name: str, *, idx_heads: int, idx_head: int, top_k: int, arch: str = "deepseek32", **shape: Any
) -> Model:
    """A deepseek32 (DeepSeek-V3.2; `arch` glm-dsa: GLM-5): deepseek2's MLA and experts, and on every layer (the
    NextN one too where its block is written) DSA's lightning indexer of idx_heads heads of idx_head (its keys
    LayerNormed, Q from the query's latent), keeping the top_k keys."""
    m = deepseek2(name, arch=arch, **shape)
    m.arch_kv(attention__indexer__head_count=idx_heads, attention__indexer__key_length=idx_head)
    m.arch_kv(attention__indexer__top_k=top_k)
    E, q_lora = shape["E"], shape["q_lora"]
    for i in range(shape["L"] + (shape.get("nextn", 0) if shape.get("mtp_block") else 0)):
        layer_norm(m, f"blk.{i}.indexer.k_norm", idx_head)
        m.tensor(f"blk.{i}.indexer.proj.weight", [E, idx_heads], QT.F32)
        m.tensor(f"blk.{i}.indexer.attn_k.weight", [E, idx_head], QT.Q4_0)
        m.tensor(f"blk.{i}.indexer.attn_q_b.weight", [q_lora, idx_heads * idx_head], QT.Q4_0)
    return m


def minimax01(name: str, *, E: int, L: int, H: int, Hkv: int, D: int, F: int, experts: int, used: int, V: int) -> Model:
    """A minimax-01 (MiniMax-Text-01): lightning attention (one fused QKV of H heads of D, a second norm and an
    output gate) on every layer but each 8th, which runs softmax attention over Hkv KV heads; E wide, `experts`
    of F (`used` of them) on every layer; Q4_0 weights."""
    w = QT.Q4_0
    m = Model("minimax-01", vocab=V, tokenizer="gpt2")
    transformer_kv(m, ctx=1048576, embd=E, layers=L, ff=F, heads=H, heads_kv=Hkv, head_dim=D, name=name, rope_base=1e7)
    m.arch_kv(rope__dimension_count=D, residual_scale=1.0, expert_count=experts, expert_used_count=used, vocab_size=V)
    embeddings(m, E, V, w, tied=False)
    for i in range(L):
        if (i + 1) % 8:
            attention(m, i, E, H, H, D, w, fused=True)
            m.tensor(f"blk.{i}.attn_norm_2.weight", [H * D], QT.F32)
            m.tensor(f"blk.{i}.attn_gate.weight", [E, H * D], w)
        else:
            attention(m, i, E, H, Hkv, D, w)
        moe_feed_forward(m, i, E, F, experts, w)
    return m


def minicpm3(
    name: str, *, E: int, L: int, F: int, H: int, q_lora: int, kv_lora: int, nope: int, rope: int, V: int
) -> Model:
    """A minicpm3: low-rank Q and KV over a plain MHA cache (K nope + rope, V n_embd / n_head: its converter writes
    no value_length), tied output, Q4_0."""
    m = Model("minicpm3", vocab=V, tokenizer="llama")
    transformer_kv(m, ctx=32768, embd=E, layers=L, ff=F, heads=H, heads_kv=H, eps=1e-5, name=name)
    m.arch_kv(attention__key_length=nope + rope, rope__dimension_count=rope, vocab_size=V)
    m.arch_kv(attention__q_lora_rank=q_lora, attention__kv_lora_rank=kv_lora)
    embeddings(m, E, V, QT.Q4_0, tied=True)
    for i in range(L):
        m.tensor(f"blk.{i}.attn_norm.weight", [E], QT.F32)
        mla_attention(m, i, E, H, kv_lora, rope, nope + rope, E // H, QT.Q4_0, q_lora=q_lora, split_kv_b=False)
        feed_forward(m, i, E, F, QT.Q4_0)
    return m


def swa_moe(
    arch: str,
    name: str,
    *,
    E: int,
    swa: list[bool],
    H: tuple[int, int],
    Hkv: tuple[int, int],
    D: tuple[int, int],
    window: int,
    F: int,
    dense: int,
    experts: tuple[int, int, int, int],
    V: int,
    extra: dict[str, Any],
    nextn: int = 1,
    mtp: bool = False,
) -> Model:
    """A mimo2 or step35: `swa` marks the sliding layers (window tokens), H / Hkv / D = (full, sliding) heads,
    KV heads and (K, V) head sizes; `dense` leading dense blocks of width F, then `experts` = (count, used, width,
    shared width) with exp_probs_b; step35's q/k norms and head-wise gate; nextn MTP layers' tensors left out
    unless `mtp` (their pattern entries written where the converter writes them: step35's); Q4_0."""
    w, (n_exp, used, ff_exp, shared) = QT.Q4_0, experts
    L = len(swa)
    heads, heads_kv = [H[s] for s in swa], [Hkv[s] for s in swa]
    pattern = swa + [True] * nextn if arch == "step35" else swa
    m = Model(arch, vocab=V, tokenizer="gpt2")
    heads_all, heads_kv_all = heads + [H[1]] * nextn, heads_kv + [Hkv[1]] * nextn  # MTP layers: sliding ones'
    transformer_kv(
        m, ctx=262144, embd=E, layers=L + nextn, ff=F, heads=heads_all, heads_kv=heads_kv_all, name=name, eps=1e-5
    )
    m.arch_kv(attention__key_length=D[0], attention__value_length=D[1], nextn_predict_layers=nextn)
    m.arch_kv(attention__sliding_window=window, attention__sliding_window_pattern=pattern, vocab_size=V)
    m.arch_kv(expert_count=n_exp, expert_used_count=used, expert_feed_forward_length=ff_exp, **extra)
    embeddings(m, E, V, w, tied=False)
    for i in range(L):
        attention(m, i, E, heads[i], heads_kv[i], D[0], w, qk_norm=arch == "step35", v_head_dim=D[1])
        if arch == "step35":
            m.tensor(f"blk.{i}.attn_gate.weight", [E, heads[i]], w)
        else:
            m.tensor(f"blk.{i}.attn_sinks.weight", [heads[i]], QT.F32)
        if i < dense:
            feed_forward(m, i, E, F, w)
        else:
            moe_feed_forward(m, i, E, ff_exp, n_exp, w, shared_ff=shared, probs_bias=True)
    for i in range(L, L + nextn if mtp else L):  # the MTP blocks graph_mtp builds on: mimo2's fused and dense
        step35 = arch == "step35"
        attention(m, i, E, H[1], Hkv[1], D[0], w, qk_norm=step35, fused=not step35, v_head_dim=D[1])
        if step35:
            m.tensor(f"blk.{i}.attn_gate.weight", [E, H[1]], w)
            moe_feed_forward(m, i, E, ff_exp, n_exp, w, shared_ff=shared, probs_bias=True)
        else:
            m.tensor(f"blk.{i}.attn_sinks.weight", [H[1]], QT.F32)
            feed_forward(m, i, E, F, w)
        m.tensor(f"blk.{i}.nextn.eh_proj.weight", [2 * E, E], w)
        for norm in ("enorm", "hnorm", "shared_head_norm"):
            m.tensor(f"blk.{i}.nextn.{norm}.weight", [E], QT.F32)
    return m


def glm4moe(
    name: str,
    *,
    E: int,
    L: int,
    F: int,
    H: int,
    Hkv: int,
    D: int,
    experts: tuple[int, int, int],
    V: int,
    dense: int = 1,
    qk_norm: bool = False,
    mtp_block: bool = False,
) -> Model:
    """A glm4moe: biased Q/K/V (`qk_norm`: with Q and K norms), partial rope, `dense` leading dense blocks of width
    F, `experts` = (count, used, width) beside one shared expert, sigmoid routing with exp_probs_b and normalized
    weights, one MTP layer (its tensors left out unless `mtp_block`: attention, the experts, eh_proj and its norms),
    Q4_0."""
    w, (n_exp, used, ff_exp) = QT.Q4_0, experts
    m = Model("glm4moe", vocab=V, tokenizer="gpt2")
    transformer_kv(m, ctx=131072, embd=E, layers=L + 1, ff=F, heads=H, heads_kv=Hkv, head_dim=D, name=name, eps=1e-5)
    m.arch_kv(rope__dimension_count=D // 2, nextn_predict_layers=1, leading_dense_block_count=dense, vocab_size=V)
    m.arch_kv(expert_count=n_exp, expert_used_count=used, expert_feed_forward_length=ff_exp, expert_shared_count=1)
    m.arch_kv(expert_weights_scale=1.0, expert_weights_norm=True, expert_gating_func=2)
    embeddings(m, E, V, w, tied=False)
    for i in range(L + 1 if mtp_block else L):
        attention(m, i, E, H, Hkv, D, w, qk_norm, post_norm=True, bias=True)
        if i < dense:
            feed_forward(m, i, E, F, w, norm=False)
        else:
            moe_feed_forward(m, i, E, ff_exp, n_exp, w, norm=False, shared_ff=ff_exp, probs_bias=True)
    if mtp_block:
        nextn_tensors(m, L, E, w)
    return m


# DeepSeek-V3's router (its config: sigmoid scoring, e_score_correction_bias, 8 groups of which 4 kept, top-8
# normalized and scaled by 2.5), as its GGUFs carry it
_V3_ROUTING: dict[str, Any] = dict(
    expert_gating_func=2,
    expert_group_count=8,
    expert_group_used_count=4,
    expert_weights_norm=True,
    expert_weights_scale=2.5,
)
_DEEPSEEK_V3: dict[str, Any] = dict(
    E=7168, L=5, dense=3, F=18432, H=128, q_lora=1536, kv_lora=512, nope=128, rope=64, v=128,
    experts=(256, 8, 2048, 1), V=129280, routing=_V3_ROUTING,
)  # fmt: skip
_GLM_5: dict[str, Any] = dict(
    E=6144, L=5, dense=3, F=12288, H=64, q_lora=2048, kv_lora=512, nope=192, rope=64, v=256,
    experts=(256, 8, 2048, 1), V=154880, probs_bias=True,
    routing=dict(expert_gating_func=2, expert_weights_norm=True, expert_weights_scale=2.5),
)  # fmt: skip
_GLM_45_AIR: dict[str, Any] = dict(E=4096, L=4, F=10944, H=96, Hkv=8, D=128, experts=(128, 8, 1408), V=151552)
_GLM_4_6: dict[str, Any] = dict(
    E=5120, L=4, F=12288, H=96, Hkv=8, D=128, experts=(160, 8, 1536), V=151552, dense=3, qk_norm=True
)  # fmt: skip
_OPENELM_3B = [(12, 3, 1536), (16, 4, 3584), (16, 4, 5632), (20, 5, 7680), (20, 5, 9984), (24, 6, 12288)]
_DECI_51B = [(64, 8, 28672), (64, 8, 14336), (64, 0, 5376), (0, 0, 11264), (64, 8, 0), (64, 8, 28672)]
_GRANITE_H_1B: dict[str, Any] = dict(
    E=1536, F=4096, L=40, attn_every=10, attn_at=5, H=12, Hkv=4, V=100352, d_inner=3072, d_state=128, ssm_heads=48
)
_GRANITE_H_SMALL: dict[str, Any] = dict(
    E=4096,
    F=896,
    L=40,
    attn_every=10,
    attn_at=5,
    H=32,
    Hkv=8,
    V=100352,
    d_inner=8192,
    d_state=128,
    ssm_heads=128,
    experts=(72, 10, 8192),
)

FAMILY_SET: dict[str, Callable[[], Model]] = {
    # wide FFN (6x) with a small vocabulary: the FFN phase should dominate the logits
    "llama-wideff-6x-v32k": lambda: dense("wideff", E=4096, F=24576, L=8, H=32, Hkv=8, D=128, V=32000),
    # FFN 4x with a large vocabulary
    "llama-ff4x-v128k": lambda: dense("ff4x", E=3072, F=12288, L=8, H=24, Hkv=8, D=128, V=128256),
    # a 70B-width model with a tiny vocabulary: attention and FFN dominate
    "llama-70b-v8k": lambda: dense("l70", E=8192, F=28672, L=4, H=64, Hkv=8, D=128, V=8192),
    # MoE: many experts with a small vocabulary, and fewer wide experts
    "qwen3moe-256x8-v32k": lambda: moe("moe256", E=2048, Fe=1536, nexp=256, k=8, L=8, H=32, Hkv=4, D=128, V=32000),
    "qwen3moe-64x8-wide": lambda: moe("moe64", E=4096, Fe=4096, nexp=64, k=8, L=4, H=32, Hkv=8, D=128, V=16384),
    # embedding models
    "bert-large-shape": lambda: bert("bertL", E=1024, F=4096, L=24, H=16, V=30522, nomic=False, ctx=512),
    "nomic-bert-shape": lambda: bert("nomic", E=768, F=3072, L=12, H=12, V=30522, nomic=True, ctx=8192),
    # hybrid Mamba-2 + attention
    "granitehybrid-shape": lambda: granitehybrid(
        "gh", E=2560, F=8192, L=16, attn_every=4, H=32, Hkv=8, V=100352, d_inner=5120, d_state=128, ssm_heads=80
    ),
    # granite-4.0-h-1b and -tiny (memfit/data/catalog.json's published configs): 4 attention layers in 40, 12 heads
    # of 128 over 4 KV heads; the 1B a dense FFN, the tiny 64 experts of 512 (6 used) beside a shared 1024
    "granite-4.0-h-1b-shape": lambda: granitehybrid("gh1b", **_GRANITE_H_1B),
    "granite-4.0-h-tiny-shape": lambda: granitehybrid(
        "ghtiny", **{**_GRANITE_H_1B, "F": 512, "experts": (64, 6, 1024)}
    ),
    # granite-4.0-h-small (the Granite 4.0 model card's table): 4096 wide, 32 heads over 8 KV, 128 Mamba-2 heads
    # of 64, 72 experts of 896 (10 used) beside a shared 8192
    "granite-4.0-h-small-shape": lambda: granitehybrid("ghsmall", **_GRANITE_H_SMALL),
    # the same two without rope, as granite-4.0-h's published GGUFs are
    "granite-4.0-h-small-nope-shape": lambda: granitehybrid("ghsmall", **_GRANITE_H_SMALL, nope=True),
    "granite-4.0-h-1b-nope-shape": lambda: granitehybrid("gh1b", **_GRANITE_H_1B, nope=True),
    # phi-4 (40 layers of 5120, 40 heads over 10 KV heads of 128, FFN 17920, 100352 tokens) in 4 layers
    "phi-4-shape": lambda: phi3("phi-four", E=5120, F=17920, L=4, H=40, Hkv=10, D=128, V=100352, rope=128),
    # Phi-4-mini: 24 heads of 128 over 8 (rope over 96 of them: partial rotary), a 200064-token vocabulary
    "phi-4-mini-shape": lambda: phi3("phi-four-mini", E=3072, F=8192, L=4, H=24, Hkv=8, D=128, V=200064, rope=96),
    # OpenELM-3B (3072 wide, heads of 128): six of its 36 layers' ramps, 12 to 24 heads over 3 to 6, FFN 0.5x to 4x
    "openelm-3b-shape": lambda: per_layer("openelm", "oelm3b", E=3072, D=128, V=32000, layers=_OPENELM_3B),
    # Llama-3_1-Nemotron-51B-style deci (8192 wide, 64 heads of 128): attention over 8 KV heads, a "linear
    # attention" layer, an attention-free one and an FFN-free one (Ultra-253B), FFN widths 5376 to 28672
    "deci-51b-shape": lambda: per_layer("deci", "deci51b", E=8192, D=128, V=128256, layers=_DECI_51B),
    # DeepSeek-V3 / R1 (671B: 61 layers of 7168, 3 of them dense, 128 heads, MLA of rank 512 over Q of rank 1536,
    # 256 experts of 2048, 8 used, one shared) in 5 layers; R1 as its newer GGUFs are, with one MTP layer
    "deepseek-v3-shape": lambda: deepseek2("dsv3", **_DEEPSEEK_V3),
    "deepseek-r1-nextn-shape": lambda: deepseek2("dsr1", **_DEEPSEEK_V3, nextn=1),
    # DeepSeek-V3.2 (V3's shape with DSA's lightning indexer on every layer: 64 heads of 128, the top 2048 keys)
    "deepseek-v3.2-shape": lambda: deepseek32("dsv32", **_DEEPSEEK_V3, idx_heads=64, idx_head=128, top_k=2048),
    # MiniMax-Text-01 (80 layers of 6144, 64 heads of 128, softmax attention over 8 KV heads every 8th layer, 32
    # experts of 9216, 2 used, 200064 tokens) in 8 layers
    "minimax-text-01-shape": lambda: minimax01(
        "mmt01", E=6144, L=8, H=64, Hkv=8, D=128, F=9216, experts=32, used=2, V=200064
    ),
    # DeepSeek-V2-Lite (27 layers of 2048, the lite shape: one wq; 16 heads, 64 experts of 1408, 6 used, 2 shared)
    # as its legacy GGUFs are: no *_mla keys, the latent decompressed by a fused kv_b over a plain cache
    "deepseek-v2-lite-mha-shape": lambda: deepseek2(
        "dsv2lite",
        E=2048,
        L=27,
        dense=1,
        F=10944,
        H=16,
        q_lora=0,
        kv_lora=512,
        nope=128,
        rope=64,
        v=128,
        experts=(64, 6, 1408, 2),
        V=102400,
        routing=dict(expert_weights_scale=1.0),
        mla=False,
    ),
    # Mistral-Small-4-style mistral4 (36 layers of 4096, 32 heads, MLA of rank 256 over Q of rank 1024, 128 experts
    # of 2048 in 8 groups with one kept, 4 used, one shared, no dense block) in 4 layers, its stacked experts fused
    "mistral-small-4-shape": lambda: deepseek2(
        "ms4",
        E=4096,
        L=4,
        dense=0,
        F=12288,
        H=32,
        q_lora=1024,
        kv_lora=256,
        nope=64,
        rope=64,
        v=128,
        experts=(128, 4, 2048, 1),
        V=131072,
        arch="mistral4",
        fused_gate_up=True,
        routing=dict(
            expert_group_count=8, expert_group_used_count=1, expert_weights_norm=True, expert_weights_scale=1.0
        ),
    ),
    # MiniCPM3-4B (62 layers of 2560, 40 heads, Q rank 768, KV rank 256, K 64 + 32 rope, V 64, FFN 6400) in 4 layers
    "minicpm3-4b-shape": lambda: minicpm3(
        "minicpm3-4b", E=2560, L=4, F=6400, H=40, q_lora=768, kv_lora=256, nope=64, rope=32, V=73448
    ),
    # MiMo-V2-Flash-style mimo2 (4096 wide, 64 heads: full layers over 4 KV heads, sliding ones over 8, K heads of
    # 192, V of 128, a 128-token window at 5 sliding : 1 full, the first block dense, 256 experts of 2048, 8 used)
    # in 7 layers
    "mimo-v2-flash-shape": partial(
        swa_moe,
        "mimo2",
        "mimo2flash",
        E=4096,
        swa=[False, True, True, True, True, True, False],
        H=(64, 64),
        Hkv=(4, 8),
        D=(192, 128),
        window=128,
        F=16384,
        dense=1,
        experts=(256, 8, 2048, 0),
        V=152576,
        extra=dict(rope__dimension_count=64, attention__value_scale=0.707),
    ),
    # Step-3.5-Flash-style step35 (4096 wide, heads of 128: 64 on full layers over 8 KV heads, 96 on sliding
    # ones over 8, a 512-token window at 3 sliding : 1 full, 3 dense blocks, 288 experts of 1280 beside a shared
    # 1280, 8 used, SwiGLU clamps on the later layers) in 6 layers
    "step-3.5-flash-shape": partial(
        swa_moe,
        "step35",
        "step35flash",
        E=4096,
        swa=[False, True, True, True, False, True],
        H=(64, 96),
        Hkv=(8, 8),
        D=(128, 128),
        window=512,
        F=11264,
        dense=3,
        experts=(288, 8, 1280, 1280),
        V=128896,
        extra=dict(
            rope__dimension_count=128,
            expert_shared_feed_forward_length=1280,
            leading_dense_block_count=3,
            expert_weights_norm=True,
            expert_weights_scale=3.0,
            swiglu_clamp_exp=[0.0] * 4 + [7.0] * 3,
            swiglu_clamp_shexp=[0.0] * 4 + [16.0] * 3,
        ),
    ),
    # GLM-4.5-Air (46 layers of 4096, 96 heads of 128 over 8, one dense block of 10944, 128 experts of 1408, 8
    # used, one shared, one MTP layer) in 4 layers
    "glm-4.5-air-shape": lambda: glm4moe("glm45air", **_GLM_45_AIR),
}

# Published shapes with their NextN/MTP block written whole (llama-server's draft context under --spec-type draft-mtp
# is made on them): DeepSeek-V3 / R1 (671B) with its MTP layer, GLM-4.5-Air, and GLM-4.6 (92 layers of 5120, 96 heads
# of 128 over 8 with Q/K norms, three dense blocks of 12288, 160 experts of 1536, 8 used, one shared) in 4 layers
MTP_SHAPES: dict[str, Callable[[], Model]] = {
    "deepseek-r1-mtp-shape": lambda: deepseek2("dsr1mtp", **_DEEPSEEK_V3, nextn=1, mtp_block=True),
    "glm-4.5-air-mtp-shape": lambda: glm4moe("glm45airmtp", **_GLM_45_AIR, mtp_block=True),
    "glm-4.6-mtp-shape": lambda: glm4moe("glm46mtp", **_GLM_4_6, mtp_block=True),
}


def _with_mtp(shape: Callable[[], Model], name: str) -> Callable[[], Model]:
    """A swa_moe shape with its MTP layers' tensors written, named `name`."""
    assert isinstance(shape, partial)
    return partial(shape.func, shape.args[0], name, *shape.args[2:], **(shape.keywords | {"mtp": True}))


# MiMo-V2-Flash's and Step-3.5-Flash's shapes with their MTP block (llama-server's MTP draft context: mimo2's a dense
# one over the sliding layers' heads, full in llama.cpp's pattern; step35's a sliding MoE one)
MTP_ISWA_SHAPES: dict[str, Callable[[], Model]] = {
    "mimo-v2-flash-mtp-shape": _with_mtp(FAMILY_SET["mimo-v2-flash-shape"], "mimo2flash-mtp"),
    "step-3.5-flash-mtp-shape": _with_mtp(FAMILY_SET["step-3.5-flash-shape"], "step35flash-mtp"),
}


# DeepSeek-V3.2 and GLM-5 (78 layers of 6144, 64 heads, q_lora 2048, kv_lora 512, nope 192, rope 64, V 256, three
# dense blocks of 12288, 256 experts of 2048, 8 used, one shared; a 32-head indexer of 128 keeping 2048 keys) with
# their NextN/MTP block written whole (results_mtp_ctx_dsa_dryrun.jsonl); GLM-5's in 5 layers, its context 163840
# (below GLM-5.2's 1048576: every layer's indexer full, as GLM-5's)
DSA_MTP_SHAPES: dict[str, Callable[[], Model]] = {
    "deepseek-v3.2-mtp-shape": lambda: deepseek32(
        "dsv32mtp", **_DEEPSEEK_V3, idx_heads=64, idx_head=128, top_k=2048, nextn=1, mtp_block=True
    ),
    "glm-5-mtp-shape": lambda: deepseek32(
        "glm5mtp", arch="glm-dsa", **_GLM_5, idx_heads=32, idx_head=128, top_k=2048, nextn=1, mtp_block=True
    ),
}
