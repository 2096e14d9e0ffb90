"""Tiny models of llama.cpp's attention families, measured in real llama.cpp (tests/data/results_attn.jsonl).

Each function returns the `Model` of one measured file: the same architecture, metadata, token count and
tensor infos as the file the ground-truth harness wrote with random weights and measured (node-llama-cpp
3.21.1, llama.cpp v0.4.0). `write_model` writes it with a sparse data region, and the memory llama.cpp
allocates depends only on the header, so it is a valid stand-in. All weights are F16 (norms and biases
F32) and every vocabulary has 512 tokens; the tokenizer's contents differ from the measured files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gguf

from tools.gguf_writers import (
    QT,
    Model,
    attention,
    embeddings,
    feed_forward,
    fused_gate_up,
    layer_norm,
    mla_attention,
    mla_kv,
    moe_feed_forward,
    nextn_tensors,
    transformer_kv,
)

F16, F32 = QT.F16, QT.F32
VOCAB = 512


def _model(arch: str, name: str, tokenizer: str = "llama", **hparams: Any) -> Model:
    """A 512-token F16 model with transformer_kv's hyperparameters (rope base 1e4, rms eps 1e-6 unless given)."""
    m = Model(arch, vocab=VOCAB, tokenizer=tokenizer)
    transformer_kv(m, name=name, file_type=gguf.LlamaFileType.MOSTLY_F16, **hparams)
    return m


def _dense(
    arch: str,
    name: str,
    tokenizer: str = "llama",
    *,
    embd: int,
    layers: int,
    ff: int,
    heads: int,
    heads_kv: int,
    head_dim: int | None = None,
    tied: bool,
    sandwich: bool = False,
    ffn_norm: bool = True,
    attn: dict[str, Any] | None = None,
    **hparams: Any,
) -> Model:
    """A dense transformer: embeddings and `layers` attention + SwiGLU blocks. sandwich: gemma's
    post-attention / post-FFN norms; ffn_norm=False: a parallel block (no ffn_norm); attn: attention options."""
    m = _model(
        arch,
        name,
        tokenizer,
        embd=embd,
        layers=layers,
        ff=ff,
        heads=heads,
        heads_kv=heads_kv,
        head_dim=head_dim,
        **hparams,
    )
    embeddings(m, embd, VOCAB, F16, tied=tied)
    for i in range(layers):
        attention(m, i, embd, heads, heads_kv, head_dim or embd // heads, F16, post_norm=sandwich, **(attn or {}))
        feed_forward(m, i, embd, ff, F16, post_norm=sandwich, norm=ffn_norm)
    return m


# --- dense / GQA ----------------------------------------------------------------------------------


def llama_hd96() -> Model:
    """llama with key_length 96 != n_embd / n_head (64) and a sliding_window key llama never reads:
    a full cache of head dim 96."""
    m = _dense(
        "llama",
        "tiny-llama-hd96",
        ctx=8192,
        embd=256,
        layers=4,
        ff=512,
        heads=4,
        heads_kv=2,
        head_dim=96,
        tied=False,
        rope_base=500000.0,
        eps=1e-5,
    )
    m.arch_kv(rope__dimension_count=96, attention__sliding_window=128, vocab_size=VOCAB)
    return m


def llama_embed() -> Model:
    """llama-embed (non-causal llama): not in create_memory's no-memory list, so a full KV cache is
    allocated although the graph never uses it."""
    m = _dense(
        "llama-embed",
        "tiny-llama-embed",
        ctx=8192,
        embd=256,
        layers=2,
        ff=512,
        heads=4,
        heads_kv=2,
        tied=True,
        rope_base=500000.0,
        eps=1e-5,
    )
    m.arch_kv(attention__causal=False, pooling_type=1)
    return m


def qwen2_bias() -> Model:
    """qwen2 with q/k/v biases and a sliding_window key qwen2 ignores: full cache."""
    m = _dense(
        "qwen2",
        "tiny-qwen2-bias",
        "gpt2",
        ctx=32768,
        embd=256,
        layers=4,
        ff=512,
        heads=4,
        heads_kv=2,
        tied=True,
        attn={"bias": True},
        rope_base=1000000.0,
    )
    m.arch_kv(attention__sliding_window=128)
    return m


def phi3_blocks(m: Model, *, E: int, F: int, L: int, H: int, Hkv: int, D: int, w: QT) -> None:
    """phi3's embeddings (untied) and blocks: a fused attn_qkv, one ffn_up 2 x F wide (gate and up)."""
    embeddings(m, E, m.vocab, w, tied=False)
    for i in range(L):
        attention(m, i, E, H, Hkv, D, w, fused=True)
        m.tensor(f"blk.{i}.ffn_norm.weight", [E], F32)
        m.tensor(f"blk.{i}.ffn_up.weight", [E, 2 * F], w)
        m.tensor(f"blk.{i}.ffn_down.weight", [F, E], w)


def phi3_swa() -> Model:
    """phi3 (fused attn_qkv, fused gate+up) with sliding_window 128: llama.cpp disables Phi SWA, full cache.
    (The name avoids "phi3", which makes llama-vocab look up phi-3 special tokens.)"""
    E, FF = 256, 512
    m = _model("phi3", "tiny-phi-three-swa", ctx=4096, embd=E, layers=4, ff=FF, heads=8, heads_kv=4, eps=1e-5)
    m.arch_kv(rope__dimension_count=32, attention__sliding_window=128)
    phi3_blocks(m, E=E, F=FF, L=4, H=8, Hkv=4, D=32, w=F16)
    return m


def _command_r(name: str, *, embd: int, layers: int, ff: int) -> Model:
    """command-r: LayerNorm, parallel block, output always tied, logit_scale; full cache, one KV head of four."""
    m = _dense(
        "command-r",
        name,
        "gpt2",
        ctx=8192,
        embd=embd,
        layers=layers,
        ff=ff,
        heads=4,
        heads_kv=1,
        tied=True,
        ffn_norm=False,
        eps=None,
    )
    m.arch_kv(attention__layer_norm_epsilon=1e-5, logit_scale=0.0625)
    return m


def command_r() -> Model:
    return _command_r("tiny-command-r", embd=256, layers=4, ff=512)


def command_r_64() -> Model:
    """command-r with 64 layers (Command R+'s count): from 64 layers its loader adds LayerNorms of Q and K per head
    ([head_dim, n_head] weights), which its builder applies before rope."""
    layers, embd, heads, heads_kv = 64, 64, 4, 1
    m = _command_r("tiny-command-r-64", embd=embd, layers=layers, ff=128)
    for i in range(layers):
        m.tensor(f"blk.{i}.attn_q_norm.weight", [embd // heads, heads], F32)
        m.tensor(f"blk.{i}.attn_k_norm.weight", [embd // heads, heads_kv], F32)
    return m


def granite() -> Model:
    """granite with logit / residual / embedding / attention scales; full cache."""
    m = _dense(
        "granite", "tiny-granite", ctx=131072, embd=256, layers=4, ff=512, heads=8, heads_kv=2, tied=True, eps=1e-5
    )
    m.arch_kv(logit_scale=8.0, residual_scale=0.22, embedding_scale=12.0, attention__scale=0.015625)
    return m


def deci_arr() -> Model:
    """deci (Nemotron-51B style) with per-layer head_count / head_count_kv / feed_forward_length arrays:
    an attention-free layer (3), a "linear attention" layer (2: heads, no kv heads), a layer without FFN (4)."""
    E, hd = 256, 32
    heads, heads_kv = [8, 8, 8, 0, 8, 8], [2, 1, 0, 0, 4, 2]
    ff = [512, 384, 512, 512, 0, 640]
    m = _model(
        "deci",
        "tiny-deci-arr",
        ctx=131072,
        embd=E,
        layers=6,
        ff=ff,
        heads=heads,
        heads_kv=heads_kv,
        rope_base=500000.0,
        eps=1e-5,
    )
    m.arch_kv(rope__dimension_count=hd, vocab_size=VOCAB)
    deci_blocks(m, E=E, D=hd, heads=heads, heads_kv=heads_kv, ff=ff, w=F16)
    return m


def deci_blocks(m: Model, *, E: int, D: int, heads: list[int], heads_kv: list[int], ff: list[int], w: QT) -> None:
    """deci's embeddings (untied) and blocks: attention where a layer has KV heads, attn_norm and a square wo alone
    where it has heads only ("linear attention"), nothing where it has none; a SwiGLU FFN where its width is > 0."""
    embeddings(m, E, m.vocab, w, tied=False)
    for i, (h, kv, f) in enumerate(zip(heads, heads_kv, ff, strict=True)):
        if kv:
            attention(m, i, E, h, kv, D, w)
        elif h:
            m.tensor(f"blk.{i}.attn_norm.weight", [E], F32)
            m.tensor(f"blk.{i}.attn_output.weight", [E, E], w)
        if f:
            feed_forward(m, i, E, f, w)


def openelm_arr() -> Model:
    """openelm: per-layer head_count / head_count_kv / feed_forward_length arrays (all > 0), fused qkv."""
    E, hd = 256, 64
    heads, heads_kv, ff = [4, 4, 6, 8], [1, 2, 2, 4], [256, 512, 512, 768]
    m = _model(
        "openelm", "tiny-openelm-arr", ctx=2048, embd=E, layers=4, ff=ff, heads=heads, heads_kv=heads_kv, head_dim=hd
    )
    m.arch_kv(rope__dimension_count=hd)
    openelm_blocks(m, E=E, D=hd, heads=heads, heads_kv=heads_kv, ff=ff, w=F16)
    return m


def openelm_blocks(m: Model, *, E: int, D: int, heads: list[int], heads_kv: list[int], ff: list[int], w: QT) -> None:
    """openelm's embeddings (tied) and blocks: a fused attn_qkv with q/k norms, a SwiGLU FFN, per-layer widths."""
    embeddings(m, E, m.vocab, w, tied=True)
    for i, (h, kv, f) in enumerate(zip(heads, heads_kv, ff, strict=True)):
        attention(m, i, E, h, kv, D, w, qk_norm=True, fused=True)
        feed_forward(m, i, E, f, w)


# --- sliding-window interleaves -------------------------------------------------------------------


def cohere2_swa() -> Model:
    """cohere2 without a pattern key: default period 4 (3 SWA : 1 full), window 128."""
    m = _dense(
        "cohere2",
        "tiny-cohere2-swa",
        "gpt2",
        ctx=131072,
        embd=256,
        layers=8,
        ff=512,
        heads=4,
        heads_kv=1,
        tied=True,
        ffn_norm=False,
        rope_base=50000.0,
        eps=None,
    )
    m.arch_kv(
        attention__layer_norm_epsilon=1e-5,
        attention__sliding_window=128,
        logit_scale=0.25,
        rope__dimension_count=64,
        vocab_size=VOCAB,
    )
    return m


def gptoss_swa_moe() -> Model:
    """gpt-oss: default pattern 2 (SWA, full, ...), window 128, attention sinks, MoE with biases,
    head_dim 64 != n_embd / n_head (24)."""
    E, H, HD, NE, FFE = 192, 8, 64, 4, 256
    m = _model(
        "gpt-oss",
        "tiny-gpt-oss",
        "gpt2",
        ctx=131072,
        embd=E,
        layers=4,
        ff=FFE,
        heads=H,
        heads_kv=2,
        head_dim=HD,
        rope_base=150000.0,
        eps=1e-5,
    )
    m.arch_kv(
        rope__dimension_count=HD,
        attention__sliding_window=128,
        expert_count=NE,
        expert_used_count=2,
        expert_feed_forward_length=FFE,
        rope__scaling__type="yarn",
        rope__scaling__factor=32.0,
        rope__scaling__original_context_length=4096,
    )
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(4):
        attention(m, i, E, H, 2, HD, F16, post_norm=True, bias=True, out_bias=True)
        m.tensor(f"blk.{i}.attn_sinks.weight", [H], F32)
        moe_feed_forward(m, i, E, FFE, NE, F16, norm=False)
        m.tensor(f"blk.{i}.ffn_gate_inp.bias", [NE], F32)
        for part, width in (("gate", FFE), ("up", FFE), ("down", E)):
            m.tensor(f"blk.{i}.ffn_{part}_exps.bias", [width, NE], F32)
    return m


def _gemma3(name: str, layers: int, pattern: int | list[bool]) -> Model:
    m = _dense(
        "gemma3",
        name,
        ctx=32768,
        embd=256,
        layers=layers,
        ff=512,
        heads=4,
        heads_kv=1,
        head_dim=64,
        tied=True,
        sandwich=True,
        attn={"qk_norm": True},
        rope_base=1000000.0,
    )
    m.arch_kv(attention__sliding_window=128, attention__sliding_window_pattern=pattern, rope__freq_base_swa=10000.0)
    return m


def gemma3_allswa() -> Model:
    """gemma3 with sliding_window_pattern 0: every layer SWA, the base cache is empty."""
    return _gemma3("tiny-gemma3-allswa", 4, 0)


def gemma3_dense() -> Model:
    """gemma3 with gemma-embedding's dense_2 / dense_3 and their width keys: gemma3's loader reads neither key, so it
    expects both projections 0 wide (create_tensor: wrong shape)."""
    m = _gemma3("tiny-gemma3-dense", 6, 6)
    dense_projections(m, 256, 512)
    return m


def gemma3_arrpat() -> Model:
    """gemma3 with the pattern written as a bool array: gemma3 reads the key as a scalar only, so the
    array is ignored and the default period 6 applies (layers 0-4 SWA, 5 full)."""
    return _gemma3("tiny-gemma3-arrpat", 6, [True, False] * 3)


# --- MLA: deepseek2 -------------------------------------------------------------------------------


def _deepseek2(name: str, mla: bool = True, nextn: int = 0, v3_routing: bool = False, mtp_block: bool = False) -> Model:
    """Layer 0 dense, layers 1-2 MoE with a shared expert; an MTP layer's tensors are left out (llama.cpp
    skips them) unless `mtp_block` (the MTP layer written whole: MLA, the experts, eh_proj and its norms).
    `v3_routing`: DeepSeek-V3's router (8 experts in 4 groups, the best 2 groups kept, sigmoid
    gating with exp_probs_b, the weights normalized and scaled by 2.5)."""
    E, H, QL, KVL, ROPE, NOPE, V, FF, NE, FFE, L = 256, 4, 64, 128, 32, 64, 64, 512, 4, 128, 3
    if v3_routing:
        NE = 8
    if mla:  # one MQA "head" holding the latent + rope part
        m = _model("deepseek2", name, "gpt2", ctx=163840, embd=E, layers=L + nextn, ff=FF, heads=H, heads_kv=1)
        mla_kv(m, kv_lora=KVL, rope=ROPE, k_head=NOPE + ROPE, v_head=V)
    else:  # legacy: plain MHA cache, K 96 / V 64
        m = _model(
            "deepseek2",
            name,
            "gpt2",
            ctx=163840,
            embd=E,
            layers=L + nextn,
            ff=FF,
            heads=H,
            heads_kv=H,
            head_dim=NOPE + ROPE,
        )
        m.arch_kv(attention__value_length=V, rope__dimension_count=ROPE, attention__kv_lora_rank=KVL)
    if nextn:
        m.arch_kv(nextn_predict_layers=nextn)
    m.arch_kv(
        attention__q_lora_rank=QL,
        leading_dense_block_count=1,
        expert_count=NE,
        expert_used_count=2,
        expert_shared_count=1,
        expert_feed_forward_length=FFE,
        expert_weights_scale=2.5 if v3_routing else 1.0,
        vocab_size=VOCAB,
    )
    if v3_routing:
        m.arch_kv(expert_group_count=4, expert_group_used_count=2, expert_gating_func=2, expert_weights_norm=True)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(L + (nextn if mtp_block else 0)):
        m.tensor(f"blk.{i}.attn_norm.weight", [E], F32)
        mla_attention(m, i, E, H, KVL, ROPE, NOPE + ROPE, V, F16, q_lora=QL, split_kv_b=mla)
        if i == 0:
            feed_forward(m, i, E, FF, F16)
        else:
            moe_feed_forward(m, i, E, FFE, NE, F16, shared_ff=FFE, probs_bias=v3_routing)
        if i >= L:
            nextn_tensors(m, i, E)
    return m


def deepseek2_mla() -> Model:
    """deepseek2 MLA (key_length_mla / value_length_mla present): K only, row kv_lora_rank + rope dim."""
    return _deepseek2("tiny-deepseek2-mla")


def deepseek2_mha() -> Model:
    """deepseek2 legacy (no *_mla keys, fused attn_kv_b): plain MHA cache, K 96 / V 64."""
    return _deepseek2("tiny-deepseek2-mha", mla=False)


def deepseek2_v3() -> Model:
    """deepseek2 MLA with DeepSeek-V3's router: group-limited selection on sigmoid probabilities biased by
    exp_probs_b, the chosen weights normalized and scaled."""
    return _deepseek2("tiny-deepseek2-v3", v3_routing=True)


def deepseek2_mla_nextn() -> Model:
    """deepseek2 MLA with nextn_predict_layers 1 (block_count = trunk + 1): the MTP layer still gets a KV slot."""
    return _deepseek2("tiny-deepseek2-mla-nextn", nextn=1)


def deepseek2_mla_mtp() -> Model:
    """deepseek2 MLA with DeepSeek-V3's router and its NextN/MTP layer written whole (as DeepSeek-V3 / R1's GGUFs
    with their MTP block are): llama-server's draft context under --spec-type draft-mtp builds on it."""
    return _deepseek2("tiny-deepseek2-mla-mtp", nextn=1, v3_routing=True, mtp_block=True)


def deepseek2_mla_mtp_fused() -> Model:
    """deepseek2-mla-mtp with each MoE layer's experts' gate and up in one ffn_gate_up_exps: the NextN layer's is
    loaded without load_mtp too (create_tensor_gate_up_exps probes it TENSOR_NOT_REQUIRED alone)."""
    return fused_gate_up(_deepseek2("tiny-deepseek2-mla-mtp-fused", nextn=1, v3_routing=True, mtp_block=True))


# --- shared-KV layers -----------------------------------------------------------------------------


def gemma3n_shared() -> Model:
    """gemma3n, 25 layers: layers >= 20 (hard-coded n_layer_kv_from_start) reuse the KV of layer 18 (SWA) /
    19 (full); the converter's bool-array pattern is ignored (scalar read), default period 5. n_altup 4,
    laurel rank 64 and the 256-wide per-layer input are hard-coded in llama.cpp, not read."""
    E, L, EALT, NALT, LAUREL = 128, 25, 256, 4, 64
    m = _dense(
        "gemma3n",
        "tiny-gemma3n-shared",
        ctx=32768,
        embd=E,
        layers=L,
        ff=256,
        heads=2,
        heads_kv=1,
        head_dim=64,
        tied=True,
        sandwich=True,
        attn={"qk_norm": True},
        rope_base=1000000.0,
    )
    m.arch_kv(
        attention__sliding_window=128,
        attention__sliding_window_pattern=[il % 5 < 4 for il in range(L)],
        attention__shared_kv_layers=5,
        altup__num_inputs=NALT,
        embedding_length_per_layer_input=EALT,
        rope__freq_base_swa=10000.0,
    )
    m.tensor("altup_proj.weight", [E, E, NALT - 1], F16)
    m.tensor("altup_unembd_proj.weight", [E, E, NALT - 1], F16)
    m.tensor("per_layer_token_embd.weight", [EALT * L, VOCAB], F16)
    m.tensor("per_layer_model_proj.weight", [E, EALT * L], F16)
    m.tensor("per_layer_proj_norm.weight", [EALT], F32)
    for i in range(L):
        for name, ne, qtype in (
            ("inp_gate", [E, EALT], F16),
            ("proj", [EALT, E], F16),
            ("post_norm", [E], F32),
            ("altup_correct_coef", [NALT, NALT], F32),
            ("altup_correct_scale", [E], F32),
            ("altup_predict_coef", [NALT, NALT * NALT], F32),
            ("altup_router", [E, NALT], F16),
            ("altup_router_norm", [E], F32),
            ("laurel_l", [E, LAUREL], F16),
            ("laurel_r", [LAUREL, E], F16),
            ("laurel_post_norm", [E], F32),
        ):
            m.tensor(f"blk.{i}.{name}.weight", ne, qtype)
    return m


def gemma4_shared() -> Model:
    """gemma4: bool-array pattern, SWA head size (key_length_swa 64) != full (128), per-layer head_count_kv,
    shared_kv_layers 2: layers 4 (SWA) and 5 (full) reuse layers 2 and 3."""
    E, H, FF, HD, HD_SWA = 256, 4, 512, 128, 64
    swa = [True, True, True, False, True, False]
    heads_kv = [1 if s else 2 for s in swa]
    m = _model(
        "gemma4",
        "tiny-gemma4-shared",
        ctx=131072,
        embd=E,
        layers=6,
        ff=FF,
        heads=H,
        heads_kv=heads_kv,
        head_dim=HD,
        rope_base=1000000.0,
    )
    m.arch_kv(
        attention__key_length_swa=HD_SWA,
        attention__value_length_swa=HD_SWA,
        rope__dimension_count=HD,
        rope__dimension_count_swa=HD_SWA,
        attention__sliding_window=128,
        attention__sliding_window_pattern=swa,
        attention__shared_kv_layers=2,
        embedding_length_per_layer_input=0,
        rope__freq_base_swa=10000.0,
    )
    embeddings(m, E, VOCAB, F16, tied=True)
    m.tensor("rope_freqs.weight", [HD // 2], F32)
    for i, is_swa in enumerate(swa):
        attention(m, i, E, H, heads_kv[i], HD_SWA if is_swa else HD, F16, qk_norm=True, post_norm=True)
        feed_forward(m, i, E, FF, F16, post_norm=True)
    return m


@dataclass(frozen=True)
class Gemma4Dims:
    """A gemma4's sizes: SWA heads of `head_swa` over `kv_swa` KV heads, full heads of `head` over `kv_full` (their V
    K's projection: no attn_v), every `period`-th layer full; `experts` (count, used, width) beside every layer's
    FFN; `per_layer` the per-layer embeddings' width (0: none); the last `shared` layers reuse earlier ones' KV."""

    embd: int = 256
    heads: int = 4
    head: int = 128
    head_swa: int = 64
    kv_full: int = 1
    kv_swa: int = 2
    period: int = 3
    window: int = 128
    vocab: int = VOCAB
    experts: tuple[int, int, int] | None = None
    per_layer: int = 0
    shared: int = 0
    qtype: QT = F16


def gemma4_model(name: str, layers: int, ff: int | list[int], d: Gemma4Dims) -> Model:
    """gemma4 as its converter writes it (conversion/gemma.py): `ff` the FFN width, or each layer's."""
    E, H = d.embd, d.heads
    widths = ff if isinstance(ff, list) else [ff] * layers
    swa = [il % d.period != d.period - 1 for il in range(layers)]
    heads_kv = [d.kv_swa if s else d.kv_full for s in swa]
    m = Model("gemma4", vocab=d.vocab, tokenizer="llama")
    transformer_kv(
        m,
        ctx=131072,
        embd=E,
        layers=layers,
        ff=ff,
        heads=H,
        heads_kv=heads_kv,
        head_dim=d.head,
        rope_base=1000000.0,
        name=name,
        file_type=gguf.LlamaFileType.MOSTLY_F16 if d.qtype == F16 else gguf.LlamaFileType.MOSTLY_Q4_0,
    )
    m.arch_kv(
        attention__key_length_swa=d.head_swa,
        attention__value_length_swa=d.head_swa,
        rope__dimension_count=d.head,
        rope__dimension_count_swa=d.head_swa,
        attention__sliding_window=d.window,
        attention__sliding_window_pattern=swa,
        attention__shared_kv_layers=d.shared,
        embedding_length_per_layer_input=d.per_layer,
        rope__freq_base_swa=10000.0,
        final_logit_softcapping=30.0,
    )
    if d.experts is not None:
        m.arch_kv(expert_count=d.experts[0], expert_used_count=d.experts[1], expert_feed_forward_length=d.experts[2])
    embeddings(m, E, d.vocab, d.qtype, tied=True)
    m.tensor("rope_freqs.weight", [d.head // 2], F32)
    if d.per_layer:
        m.tensor("per_layer_token_embd.weight", [d.per_layer * layers, d.vocab], d.qtype)
        m.tensor("per_layer_model_proj.weight", [E, d.per_layer * layers], d.qtype)
        m.tensor("per_layer_proj_norm.weight", [d.per_layer], F32)
    for i, is_swa in enumerate(swa):
        hd = d.head_swa if is_swa else d.head
        m.tensor(f"blk.{i}.attn_norm.weight", [E], F32)
        m.tensor(f"blk.{i}.attn_q.weight", [E, H * hd], d.qtype)
        m.tensor(f"blk.{i}.attn_k.weight", [E, heads_kv[i] * hd], d.qtype)
        if is_swa:
            m.tensor(f"blk.{i}.attn_v.weight", [E, heads_kv[i] * hd], d.qtype)
        m.tensor(f"blk.{i}.attn_output.weight", [H * hd, E], d.qtype)
        for norm, n in (("attn_q_norm", hd), ("attn_k_norm", hd), ("post_attention_norm", E)):
            m.tensor(f"blk.{i}.{norm}.weight", [n], F32)
        m.tensor(f"blk.{i}.layer_output_scale.weight", [1], F32)
        feed_forward(m, i, E, widths[i], d.qtype, post_norm=True)
        if d.experts is not None:
            n_exp, _, width = d.experts
            m.tensor(f"blk.{i}.ffn_gate_inp.weight", [E, n_exp], d.qtype)
            m.tensor(f"blk.{i}.ffn_gate_inp.scale", [E], F32)
            for norm in ("pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"):
                m.tensor(f"blk.{i}.{norm}.weight", [E], F32)
            m.tensor(f"blk.{i}.ffn_gate_up_exps.weight", [E, 2 * width, n_exp], d.qtype)
            m.tensor(f"blk.{i}.ffn_down_exps.weight", [width, E, n_exp], d.qtype)
            m.tensor(f"blk.{i}.ffn_down_exps.scale", [n_exp], F32)
        if d.per_layer:
            m.tensor(f"blk.{i}.inp_gate.weight", [E, d.per_layer], d.qtype)
            m.tensor(f"blk.{i}.proj.weight", [d.per_layer, E], d.qtype)
            m.tensor(f"blk.{i}.post_norm.weight", [E], F32)
    return m


def gemma4_moe() -> Model:
    """gemma4 like the 26B-A4B: 4 experts of 128 (2 used) beside every layer's FFN, full layers' V from K."""
    return gemma4_model("tiny-gemma4-moe", 6, 512, Gemma4Dims(experts=(4, 2, 128)))


def gemma4_ple() -> Model:
    """gemma4 like E2B / E4B: per-layer embeddings (64 wide), the last 3 of 9 layers reusing earlier KV with a
    double-wide FFN (use_double_wide_mlp), full layers' V from K."""
    return gemma4_model("tiny-gemma4-ple", 9, [512] * 6 + [1024] * 3, Gemma4Dims(per_layer=64, shared=3))


# --- embedding-only (non-causal, no memory module) ------------------------------------------------


def _bert_like(arch: str, name: str, nomic: bool) -> Model:
    """bert (separate biased q/k/v, learned positions, GELU FFN) or nomic-bert (fused qkv, rope, SwiGLU)."""
    E, FF = 128, 512
    m = _model(arch, name, "bert", ctx=512, embd=E, layers=2, ff=FF, heads=2, heads_kv=None, eps=None)
    m.arch_kv(attention__layer_norm_epsilon=1e-12, attention__causal=False, pooling_type=1)
    m.tensor("token_embd.weight", [E, VOCAB], F16)
    m.tensor("token_types.weight", [E, 2], F32)
    if not nomic:
        m.tensor("position_embd.weight", [E, 512], F16)
    layer_norm(m, "token_embd_norm", E)
    for i in range(2):
        attention(m, i, E, 2, 2, E // 2, F16, norm=False, fused=nomic, bias=not nomic, out_bias=True)
        layer_norm(m, f"blk.{i}.attn_output_norm", E)
        feed_forward(m, i, E, FF, F16, norm=False, gate=nomic)
        if not nomic:
            m.tensor(f"blk.{i}.ffn_up.bias", [FF], F32)
            m.tensor(f"blk.{i}.ffn_down.bias", [E], F32)
        layer_norm(m, f"blk.{i}.layer_output_norm", E)
    return m


def bert_embd() -> Model:
    """bert (non-causal embedding model): no memory module at all."""
    return _bert_like("bert", "tiny-bert", nomic=False)


def nomic_bert_embd() -> Model:
    """nomic-bert (fused qkv, rope): no memory module."""
    return _bert_like("nomic-bert", "tiny-nomic-bert", nomic=True)


def dense_projections(m: Model, e: int, dense: int, declared: int = 0) -> None:
    """The sentence-transformers projections after pooling: dense_2 to `dense` features, dense_3 back, and their
    width keys (`declared` features where given, else `dense`)."""
    m.tensor("dense_2.weight", [e, dense], QT.F16)
    m.tensor("dense_3.weight", [dense, e], QT.F16)
    width = declared or dense
    m.arch_kv(dense_2_feat_in=e, dense_2_feat_out=width, dense_3_feat_in=width, dense_3_feat_out=e)


def gemma_embedding(layers: int = 6, dense: int = 0, declared: int = 0, **shape: int) -> Callable[[], Model]:
    """gemma-embedding (EmbeddingGemma): gemma3's blocks without a cache or an LM head (a non-causal graph over the
    ubatch, sliding layers masked by window, every sixth global), mean pooling, and where `dense` is given the
    sentence-transformers projections after pooling (dense_projections)."""
    dims = {"embd": 256, "heads": 4, "heads_kv": 1, "head_dim": 64, "ff": 768, "vocab": 8192} | shape
    e, hd, vocab = dims["embd"], dims["head_dim"], dims["vocab"]

    def model() -> Model:
        m = Model("gemma-embedding", vocab=vocab)
        name = f"gemma-embedding-{layers}-{e}"
        transformer_kv(m, ctx=2048, embd=e, layers=layers, ff=dims["ff"], heads=dims["heads"],
                       heads_kv=dims["heads_kv"], head_dim=hd, rope_base=1000000.0, name=name,
                       file_type=gguf.LlamaFileType.MOSTLY_F16)  # fmt: skip
        m.arch_kv(attention__sliding_window=dims.get("window", 128), rope__freq_base_swa=10000.0, pooling_type=1)
        embeddings(m, e, vocab, QT.F16, tied=True)
        for i in range(layers):
            attention(m, i, e, dims["heads"], dims["heads_kv"], hd, QT.F16, qk_norm=True, post_norm=True)
            feed_forward(m, i, e, dims["ff"], QT.F16, post_norm=True)
        if dense:
            dense_projections(m, e, dense, declared)
        return m

    return model


GEMMA_EMBEDDING_MODELS = {
    "gemma-embedding": gemma_embedding(),
    "gemma-embedding-dense": gemma_embedding(dense=1024),
    # EmbeddingGemma-300M's published dimensions (sparse: its 262144-token vocabulary costs no disk)
    "embeddinggemma-300m-shape": gemma_embedding(
        24, 3072, embd=768, heads=3, heads_kv=1, head_dim=256, ff=1152, vocab=262144, window=512
    ),
}


# Files whose dense projections their loader expects in other widths (results_dense_refused.jsonl: llama.cpp
# refuses them, create_tensor's wrong shape)
DENSE_REFUSED_MODELS: dict[str, Callable[[], Model]] = {
    "gemma3-dense": gemma3_dense,
    "gemma-embedding-dense-declared-512": gemma_embedding(dense=1024, declared=512),
}


FAMILY_SET: dict[str, Callable[[], Model]] = {
    "llama-hd96": llama_hd96,
    "llama-embed": llama_embed,
    "qwen2-bias": qwen2_bias,
    "phi3-swa": phi3_swa,
    "command-r": command_r,
    "command-r-64": command_r_64,
    "granite": granite,
    "deci-arr": deci_arr,
    "openelm-arr": openelm_arr,
    "cohere2-swa": cohere2_swa,
    "gptoss-swa-moe": gptoss_swa_moe,
    "gemma3-allswa": gemma3_allswa,
    "gemma3-arrpat": gemma3_arrpat,
    "deepseek2-mla": deepseek2_mla,
    "deepseek2-mha": deepseek2_mha,
    "deepseek2-mla-nextn": deepseek2_mla_nextn,
    "deepseek2-v3": deepseek2_v3,
    "gemma3n-shared": gemma3n_shared,
    "gemma4-shared": gemma4_shared,
    "gemma4-moe": gemma4_moe,
    "gemma4-ple": gemma4_ple,
    "bert-embd": bert_embd,
    "nomic-bert-embd": nomic_bert_embd,
}

# Tiny models measured under --spec-type draft-mtp (results_mtp_ctx.jsonl), not family models of their own
MTP_MODELS: dict[str, Callable[[], Model]] = {"deepseek2-mla-mtp": deepseek2_mla_mtp}

# The NextN layer's fused ffn_gate_up_exps, which llama.cpp loads without load_mtp (results_mock_mtp_unskipped.jsonl)
FUSED_MTP_MODELS: dict[str, Callable[[], Model]] = {"deepseek2-mla-mtp-fused": deepseek2_mla_mtp_fused}
