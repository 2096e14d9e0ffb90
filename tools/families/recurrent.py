"""Tiny models of llama.cpp's recurrent and hybrid families, measured in real llama.cpp (tests/data/results_rec.jsonl).

Each function returns the `Model` of one measured file: the same architecture, metadata, token count and
tensor infos as the file the ground-truth harness wrote with random weights and measured (node-llama-cpp
3.21.1, llama.cpp v0.4.0). `write_model` writes it with a sparse data region, and the memory llama.cpp
allocates depends only on the header, so it is a valid stand-in. All weights are F16 (norms, biases and
conv kernels F32) and every vocabulary has 4096 tokens. Every recurrent hyperparameter has a distinct value
(d_conv != l_cache, n_group > 1, ...), so a formula that confuses two keys gives a different number.
Three measured models (mamba2-f16, granitehybrid-f16, lfm2-f16) are the public set's, from tools.gguf_writers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import gguf
import numpy as np

from tools.gguf_writers import (
    PUBLIC_SET,
    QT,
    Model,
    attention,
    embeddings,
    feed_forward,
    fused_gate_up,
    layer_norm,
    mamba2_block,
    mla_attention,
    mla_kv,
    moe_feed_forward,
    nextn_tensors,
    ssm_kv,
    transformer_kv,
)

F16, F32 = QT.F16, QT.F32
VOCAB = 4096


def _model(
    arch: str,
    name: str,
    *,
    ctx: int = 131072,
    eps: float | None = 1e-5,
    rope_base: float | None = None,
    vocab: int = VOCAB,
    **hparams: Any,
) -> Model:
    """A `vocab`-token F16 model with transformer_kv's hyperparameters and vocab_size (no rope base unless given)."""
    m = Model(arch, vocab=vocab)
    transformer_kv(
        m, ctx=ctx, name=name, file_type=gguf.LlamaFileType.MOSTLY_F16, rope_base=rope_base, eps=eps, **hparams
    )
    m.arch_kv(vocab_size=vocab)
    return m


def _norm(m: Model, name: str, n: int) -> None:
    m.tensor(name, [n], F32)


def _experts(m: Model, count: int, used: int, ff: int | None = None, shared_ff: int | None = None, **kv: Any) -> None:
    m.arch_kv(expert_count=count, expert_used_count=used, **kv)
    if ff is not None:
        m.arch_kv(expert_feed_forward_length=ff)
    if shared_ff is not None:
        m.arch_kv(expert_shared_feed_forward_length=shared_ff)


# --- pure recurrent: llama_memory_recurrent only, no KV cache -------------------------------------


def _mamba1(
    m: Model, i: int, embd: int, d_inner: int, d_state: int, dt_rank: int, d_conv: int, bc_norms: bool = False
) -> None:
    """Mamba-1 mixer (mamba, jamba; bc_norms: jamba's dt / B / C norms)."""
    m.tensor(f"blk.{i}.ssm_in.weight", [embd, 2 * d_inner], F16)
    m.tensor(f"blk.{i}.ssm_conv1d.weight", [d_conv, d_inner], F32)
    m.tensor(f"blk.{i}.ssm_conv1d.bias", [d_inner], F32)
    m.tensor(f"blk.{i}.ssm_x.weight", [d_inner, dt_rank + 2 * d_state], F16)
    if bc_norms:
        for part, n in (("dt", dt_rank), ("b", d_state), ("c", d_state)):
            _norm(m, f"blk.{i}.ssm_{part}_norm.weight", n)
    m.tensor(f"blk.{i}.ssm_dt.weight", [dt_rank, d_inner], F16)
    m.tensor(f"blk.{i}.ssm_dt.bias", [d_inner], F32)
    m.tensor(f"blk.{i}.ssm_a", [d_state, d_inner], F32)
    m.tensor(f"blk.{i}.ssm_d", [d_inner], F32)
    m.tensor(f"blk.{i}.ssm_out.weight", [d_inner, embd], F16)


def mamba(
    name: str = "tiny-mamba", *, E: int = 256, L: int = 4, DTR: int = 16, V: int = VOCAB, dt_b_c_rms: bool = False
) -> Model:
    """Mamba-1, no ssm.group_count: R = (d_conv-1)*d_inner, S = d_state*d_inner (d_inner 2 E, d_state 16, d_conv
    4); dt_b_c_rms: FalconMamba's RMS norms on dt, B and C (a key, no weights)."""
    DI, DS, DC = 2 * E, 16, 4
    m = _model("mamba", name, ctx=1048576, embd=E, layers=L, ff=0, heads=0, heads_kv=None, vocab=V)
    ssm_kv(m, d_conv=DC, d_inner=DI, d_state=DS, heads=DTR, groups=None)
    if dt_b_c_rms:
        m.arch_kv(ssm__dt_b_c_rms=True)
    embeddings(m, E, V, F16, tied=True)
    for i in range(L):
        _norm(m, f"blk.{i}.attn_norm.weight", E)
        _mamba1(m, i, E, DI, DS, DTR, DC)
    return m


def mamba2_ng2() -> Model:
    """Mamba-2 with n_group 2, d_conv 3, d_inner 1.5 * n_embd."""
    E, DI, DS, NG, NH, DC = 256, 384, 48, 2, 6, 3
    m = _model("mamba2", "tiny-mamba2-ng2", ctx=1048576, embd=E, layers=4, ff=0, heads=0, heads_kv=None)
    ssm_kv(m, d_conv=DC, d_inner=DI, d_state=DS, heads=NH, groups=NG)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(4):
        mamba2_block(m, i, E, DI, DS, NG, NH, DC, F16)
    return m


def _rwkv_ln_model(arch: str, name: str, embd: int, ff: int, layers: int = 4, vocab: int = VOCAB) -> Model:
    """RWKV-6 / RWKV-7 with LayerNorms: token_embd_norm, biased output_norm, two norms per layer."""
    m = _model(arch, name, ctx=1048576, embd=embd, layers=layers, ff=ff, heads=0, heads_kv=None, eps=None, vocab=vocab)
    m.arch_kv(attention__layer_norm_epsilon=1e-5)
    embeddings(m, embd, vocab, F16, tied=False)
    m.tensor("output_norm.bias", [embd], F32)
    layer_norm(m, "token_embd_norm", embd)
    for i in range(layers):
        layer_norm(m, f"blk.{i}.attn_norm", embd)
        layer_norm(m, f"blk.{i}.attn_norm_2", embd)
    return m


def _rwkv6_time_mix(m: Model, i: int, E: int, head_size: int, tm: int, td: int, kv: int, qwen2: bool = False) -> None:
    m.tensor(f"blk.{i}.time_mix_w1.weight", [E, tm * 5], F16)
    m.tensor(f"blk.{i}.time_mix_w2.weight", [tm, E, 5], F16)
    m.tensor(f"blk.{i}.time_mix_lerp_x.weight", [E, 1, 1], F32)
    m.tensor(f"blk.{i}.time_mix_lerp_fused.weight", [E, 1, 1, 5], F32)
    m.tensor(f"blk.{i}.time_mix_decay.weight", [E], F32)
    m.tensor(f"blk.{i}.time_mix_decay_w1.weight", [E, td], F16)
    m.tensor(f"blk.{i}.time_mix_decay_w2.weight", [td, E], F16)
    for part, width in (("key", kv), ("value", kv), ("receptance", E), ("gate", E), ("output", E)):
        m.tensor(f"blk.{i}.time_mix_{part}.weight", [E, width], F16)
    if not qwen2:
        m.tensor(f"blk.{i}.time_mix_first.weight", [head_size, E // head_size], F32)
        layer_norm(m, f"blk.{i}.time_mix_ln", E)


def rwkv6(
    name: str = "tiny-rwkv6",
    E: int = 256,
    HS: int = 32,
    FF: int = 512,
    TM: int = 16,
    TD: int = 32,
    layers: int = 4,
    vocab: int = VOCAB,
) -> Model:
    """RWKV-6 (Finch), token_shift_count 2 (default): R = 2*n_embd, S = n_embd*head_size."""
    m = _rwkv_ln_model("rwkv6", name, E, FF, layers, vocab)
    m.arch_kv(wkv__head_size=HS, time_mix_extra_dim=TM, time_decay_extra_dim=TD, rescale_every_n_layers=6)
    for i in range(layers):
        _rwkv6_time_mix(m, i, E, HS, TM, TD, E)
        m.tensor(f"blk.{i}.channel_mix_lerp_k.weight", [E, 1, 1], F32)
        m.tensor(f"blk.{i}.channel_mix_lerp_r.weight", [E, 1, 1], F32)
        m.tensor(f"blk.{i}.channel_mix_key.weight", [E, FF], F16)
        m.tensor(f"blk.{i}.channel_mix_value.weight", [FF, E], F16)
        m.tensor(f"blk.{i}.channel_mix_receptance.weight", [E, E], F16)
    return m


def rwkv6qwen2(
    name: str = "tiny-rwkv6qwen2",
    E: int = 256,
    HS: int = 64,
    FF: int = 512,
    TM: int = 16,
    TD: int = 32,
    HKV: int = 2,
    layers: int = 4,
    vocab: int = VOCAB,
) -> Model:
    """RWKV6-Qwen2: token_shift_count 1, GQA k/v; head_count / head_count_kv are set, but a pure-recurrent
    arch gets no KV cache."""
    m = _model("rwkv6qwen2", name, ctx=1048576, embd=E, layers=layers, ff=FF, heads=E // HS, heads_kv=HKV, vocab=vocab)
    m.arch_kv(wkv__head_size=HS, time_mix_extra_dim=TM, time_decay_extra_dim=TD, token_shift_count=1)
    embeddings(m, E, vocab, F16, tied=False)
    for i in range(layers):
        _norm(m, f"blk.{i}.attn_norm.weight", E)
        _rwkv6_time_mix(m, i, E, HS, TM, TD, HKV * HS, qwen2=True)
        feed_forward(m, i, E, FF, F16)
    return m


_RWKV7_LORA = {"decay": 32, "iclr": 16, "value_residual_mix": 24, "gate": 48}


def _rwkv7_kv(m: Model, head_size: int, lora: dict[str, int]) -> None:
    m.arch_kv(wkv__head_size=head_size, **{f"attention__{key}_lora_rank": rank for key, rank in lora.items()})


def _rwkv7_time_mix(m: Model, i: int, E: int, lora: dict[str, int], ln: bool = True) -> None:
    v_rank = lora["iclr"] if i == 0 else lora["value_residual_mix"]
    for x, rank in (("w", lora["decay"]), ("a", lora["iclr"]), ("v", v_rank), ("g", lora["gate"])):
        if x != "g":
            m.tensor(f"blk.{i}.time_mix_{x}0.weight", [E], F32)
        m.tensor(f"blk.{i}.time_mix_{x}1.weight", [E, rank], F16)
        m.tensor(f"blk.{i}.time_mix_{x}2.weight", [rank, E], F16)
    m.tensor(f"blk.{i}.time_mix_lerp_fused.weight", [E, 1, 1, 6], F32)
    for vec in ("k_k", "k_a", "r_k"):
        m.tensor(f"blk.{i}.time_mix_{vec}.weight", [E], F32)
    for part in ("key", "value", "receptance", "output"):
        m.tensor(f"blk.{i}.time_mix_{part}.weight", [E, E], F16)
    if ln:
        layer_norm(m, f"blk.{i}.time_mix_ln", E)


def rwkv7(
    name: str = "tiny-rwkv7",
    E: int = 256,
    FF: int = 1024,
    HS: int = 64,
    lora: dict[str, int] = _RWKV7_LORA,
    layers: int = 4,
    vocab: int = VOCAB,
) -> Model:
    """RWKV-7 (Goose), token_shift_count 2: R = 2*n_embd, S = n_embd*head_size."""
    m = _rwkv_ln_model("rwkv7", name, E, FF, layers, vocab)
    _rwkv7_kv(m, HS, lora)
    for i in range(layers):
        _rwkv7_time_mix(m, i, E, lora)
        m.tensor(f"blk.{i}.channel_mix_lerp_k.weight", [E, 1, 1], F32)
        m.tensor(f"blk.{i}.channel_mix_key.weight", [E, FF], F16)
        m.tensor(f"blk.{i}.channel_mix_value.weight", [FF, E], F16)
    return m


def arwkv7(
    name: str = "tiny-arwkv7",
    E: int = 256,
    FF: int = 512,
    HS: int = 32,
    lora: dict[str, int] = _RWKV7_LORA,
    layers: int = 4,
    vocab: int = VOCAB,
) -> Model:
    """ARWKV-7 (RWKV-7 time mix + SwiGLU FFN): token_shift_count 1."""
    m = _model("arwkv7", name, ctx=1048576, embd=E, layers=layers, ff=FF, heads=0, heads_kv=None, vocab=vocab)
    _rwkv7_kv(m, HS, lora)
    m.arch_kv(token_shift_count=1)
    embeddings(m, E, vocab, F16, tied=False)
    for i in range(layers):
        _norm(m, f"blk.{i}.attn_norm.weight", E)
        _rwkv7_time_mix(m, i, E, lora, ln=False)
        feed_forward(m, i, E, FF, F16)
    return m


# --- hybrids: llama_memory_hybrid = KV cache (attention layers) + recurrent state (the others) ------


def jamba(
    name: str = "tiny-jamba",
    *,
    E: int = 256,
    H: int = 8,
    FF: int = 512,
    NE: int = 4,
    DTR: int = 16,
    heads_kv: tuple[int, ...] = (0, 0, 0, 2, 0, 4),
    V: int = VOCAB,
) -> Model:
    """Jamba: recurrent iff head_count_kv[il] == 0 (Mamba-1 with dt/B/C norms, d_inner 2 E); the tiny one's layers
    3 and 5 attention with different kv widths; MoE (NE experts, 2 used) on odd layers."""
    DI, DS, DC = 2 * E, 16, 4
    m = _model(
        "jamba", name, ctx=262144, embd=E, layers=len(heads_kv), ff=FF, heads=H, heads_kv=list(heads_kv), vocab=V
    )
    ssm_kv(m, d_conv=DC, d_inner=DI, d_state=DS, heads=DTR, groups=None)
    _experts(m, NE, 2)
    embeddings(m, E, V, F16, tied=False)
    for i, kv in enumerate(heads_kv):
        if kv:
            attention(m, i, E, H, kv, E // H, F16)
        else:
            _norm(m, f"blk.{i}.attn_norm.weight", E)
            _mamba1(m, i, E, DI, DS, DTR, DC, bc_norms=True)
        if i % 2:
            moe_feed_forward(m, i, E, FF, NE, F16)
        else:
            feed_forward(m, i, E, FF, F16)
    return m


@dataclass(frozen=True)
class Sizes:
    """What a tiny writer's model is as wide as, the tiny models' by default (a published shape passes its own): the
    trunk, attention `heads` over `heads_kv` of `head`, the dense FFN, the routed experts (`experts_used` of them,
    `expert_ff` wide, beside a shared one `shared_ff` wide), the vocabulary. A family's own sizes extend it."""

    embd: int = 256
    heads: int = 4
    heads_kv: int = 2
    head: int = 64
    ff: int = 512
    experts: int = 4
    experts_used: int = 2
    expert_ff: int = 128
    shared_ff: int = 256
    vocab: int = VOCAB


@dataclass(frozen=True)
class Hybrid(Sizes):
    """The Mamba / short-convolution hybrids' (falcon-h1, nemotron-h, plamo2, lfm2): the Mamba mixer's d_inner,
    d_state, groups and ssm_heads; each family's tiny model's in its TINY_* (falcon-h1's by default)."""

    d_inner: int = 384
    d_state: int = 32
    groups: int = 2
    ssm_heads: int = 6


TINY_FALCON_H1 = Hybrid()
TINY_NEMOTRON_H = Hybrid(heads=8, head=32, d_inner=512, groups=4, ssm_heads=8)
TINY_PLAMO2 = Hybrid(d_inner=512, d_state=24, groups=0, ssm_heads=8)
TINY_LFM2 = Hybrid(heads=8)
HYBRID_D_CONV = 4  # ssm.conv_kernel of every hybrid writer


def falcon_h1(
    name: str = "tiny-falcon-h1", layers: int = 4, s: Hybrid = TINY_FALCON_H1, ssm_norm: bool = True
) -> Model:
    """Falcon-H1: every layer has both a Mamba-2 mixer (recurrent state) and attention (KV); ssm_norm False: no
    grouped norm (the published files have none)."""
    E, DC = s.embd, HYBRID_D_CONV
    m = _model(
        "falcon-h1",
        name,
        ctx=262144,
        embd=E,
        layers=layers,
        ff=s.ff,
        heads=s.heads,
        heads_kv=s.heads_kv,
        head_dim=s.head,
        rope_base=1e6,
        vocab=s.vocab,
    )
    ssm_kv(m, d_conv=DC, d_inner=s.d_inner, d_state=s.d_state, heads=s.ssm_heads, groups=s.groups)
    embeddings(m, E, s.vocab, F16, tied=False)
    for i in range(layers):
        mamba2_block(m, i, E, s.d_inner, s.d_state, s.groups, s.ssm_heads, DC, F16, ssm_norm=ssm_norm)
        attention(m, i, E, s.heads, s.heads_kv, s.head, F16, norm=False)
        _norm(m, f"blk.{i}.ffn_norm", E)  # falcon-h1 asks for "blk.%d.ffn_norm", without ".weight"
        feed_forward(m, i, E, s.ff, F16, norm=False)
    return m


def _nemotron_h(
    arch: str,
    name: str,
    heads_kv: list[int],
    ff: list[int],
    s: Hybrid = TINY_NEMOTRON_H,
    moe: bool = False,
    nextn: int = 1,
    routing: dict[str, Any] | None = None,
    latent: int = 0,
) -> Model:
    """Three layer kinds from two per-layer arrays: mamba2 (kv 0, ff 0), attention (kv > 0, ff 0) and MLP or
    MoE (ff > 0). With moe, a last NextN/MTP block (ff > 0 and kv > 0) follows the trunk unless nextn is 0;
    routing: the router's keys (expert_weights_norm / _scale); latent: moe_latent_size (0: none)."""
    E, DC = s.embd, HYBRID_D_CONV
    m = _model(
        arch, name, ctx=262144, embd=E, layers=len(ff), ff=ff, heads=s.heads, heads_kv=heads_kv, head_dim=s.head,
        vocab=s.vocab,
    )  # fmt: skip
    m.arch_kv(attention__layer_norm_epsilon=1e-5)
    ssm_kv(m, d_conv=DC, d_inner=s.d_inner, d_state=s.d_state, heads=s.ssm_heads, groups=s.groups)
    nextn = nextn if moe else 0
    if moe:
        more = {"nextn_predict_layers": nextn} if nextn else {}
        _experts(m, s.experts, s.experts_used, s.expert_ff, s.shared_ff, expert_shared_count=1, **more)
        m.arch_kv(**(routing or {}))
        if latent:
            m.arch_kv(moe_latent_size=latent)
    embeddings(m, E, s.vocab, F16, tied=False)
    trunk = len(ff) - nextn
    for i in range(trunk):
        if ff[i]:
            _norm(m, f"blk.{i}.attn_norm.weight", E)
            if moe:
                _nemotron_moe(m, i, ff[i], s, latent)
            else:
                feed_forward(m, i, E, ff[i], F16, norm=False, gate=False)
        elif heads_kv[i]:
            attention(m, i, E, s.heads, heads_kv[i], s.head, F16)
        else:
            mamba2_block(m, i, E, s.d_inner, s.d_state, s.groups, s.ssm_heads, DC, F16)
    if nextn:
        nextn_tensors(m, trunk, E)
        attention(m, trunk, E, s.heads, heads_kv[trunk], s.head, F16, post_norm=True)
        _nemotron_moe(m, trunk, ff[trunk], s, latent)
    return m


def _nemotron_moe(m: Model, i: int, ff: int, s: Hybrid, latent: int) -> None:
    """A Nemotron-H MoE block: up and down experts (`latent` wide between ffn_latent_down and _up, where set), the
    router's exp_probs_b, a relu^2 shared expert."""
    E, n, shared = s.embd, s.experts, s.shared_ff
    if not latent:
        moe_feed_forward(m, i, E, ff, n, F16, norm=False, gate=False, shared_ff=shared, probs_bias=True)
        return
    m.tensor(f"blk.{i}.ffn_gate_inp.weight", [E, n], F32)
    m.tensor(f"blk.{i}.ffn_latent_down.weight", [E, latent], F16)
    m.tensor(f"blk.{i}.ffn_latent_up.weight", [latent, E], F16)
    m.tensor(f"blk.{i}.ffn_up_exps.weight", [latent, ff, n], F16)
    m.tensor(f"blk.{i}.ffn_down_exps.weight", [ff, latent, n], F16)
    m.tensor(f"blk.{i}.exp_probs_b.bias", [n], F32)
    m.tensor(f"blk.{i}.ffn_up_shexp.weight", [E, shared], F16)
    m.tensor(f"blk.{i}.ffn_down_shexp.weight", [shared, E], F16)


def nemotron_h() -> Model:
    """Nemotron-H; layer 4 is an MLP layer with head_count_kv > 0: the cache filter (n_ff == 0) gives it no KV."""
    return _nemotron_h("nemotron_h", "tiny-nemotron-h", [0, 0, 2, 0, 2, 2], [0, 768, 0, 0, 768, 0])


def nemotron_h_moe() -> Model:
    """Nemotron-H MoE with one NextN/MTP block (block_count 6 + 1): the MTP block has ff > 0 and
    head_count_kv > 0, so the main context's filter (n_ff == 0) gives it no KV."""
    return _nemotron_h(
        "nemotron_h_moe", "tiny-nemotron-h-moe", [0, 0, 2, 0, 0, 2, 2], [0, 128, 0, 0, 128, 0, 128], moe=True
    )


NORMED_SCALED = {"expert_weights_norm": True, "expert_weights_scale": 2.5}  # the router's weights normalized, scaled


def nemotron_h_moe_latent() -> Model:
    """Nemotron-H MoE with its experts in a 64-wide latent (moe_latent_size: ffn_latent_down / _up, as Nemotron 3
    Super), 3 of 4 experts used, the weights normalized and scaled by 2.5; no NextN block."""
    heads_kv, ff, s = [0, 0, 2, 0, 0, 2], [0, 128, 0, 0, 128, 0], replace(TINY_NEMOTRON_H, experts_used=3)
    return _nemotron_h(
        "nemotron_h_moe",
        "tiny-nemotron-h-moe-latent",
        heads_kv,
        ff,
        s,
        moe=True,
        nextn=0,
        routing=NORMED_SCALED,
        latent=64,
    )


def nemotron_h_moe_latent_mtp(block_latent: bool) -> Callable[[], Model]:
    """nemotron-h-moe-latent with its NextN/MTP block written whole (as Nemotron 3 Super's): its experts in the
    latent too, and its ffn_latent_down / _up where `block_latent`."""

    def model() -> Model:
        heads_kv, ff, s = [0, 0, 2, 0, 0, 2, 2], [0, 128, 0, 0, 128, 0, 128], replace(TINY_NEMOTRON_H, experts_used=3)
        name = "tiny-nemotron-h-moe-latent-mtp" + ("" if block_latent else "-bare")
        m = _nemotron_h("nemotron_h_moe", name, heads_kv, ff, s, moe=True, routing=NORMED_SCALED, latent=64)
        if not block_latent:
            m.tensors = [t for t in m.tensors if not t[0].startswith(("blk.6.ffn_latent_down", "blk.6.ffn_latent_up"))]
        return m

    return model


@dataclass(frozen=True)
class QwenNext(Sizes):
    """The qwen3next / qwen35 / qwen4exp sizes (tiny: gated attention 4 heads (2 kv) of 64, rope on a quarter of the
    head; gated delta-net d_state 32 with 2 k / 4 v heads; experts with a shared one)."""

    rope_dims: int = 16
    d_state: int = 32  # the delta net's head size (k and v)
    k_heads: int = 2
    v_heads: int = 4
    d_conv: int = 4
    ctx: int = 262144
    sections: tuple[int, ...] = (4, 2, 2, 0)  # rope.dimension_sections (qwen35's IMRoPE)


TINY_QWEN_NEXT = QwenNext()


def _gated_delta_net(m: Model, i: int, s: QwenNext, ba_fused: bool) -> None:
    """The gated delta-net block of the qwen3next / qwen35 / qwen4exp family."""
    E, key_dim, value_dim = s.embd, s.d_state * s.k_heads, s.d_state * s.v_heads
    m.tensor(f"blk.{i}.attn_qkv.weight", [E, 2 * key_dim + value_dim], F16)
    m.tensor(f"blk.{i}.attn_gate.weight", [E, value_dim], F16)
    m.tensor(f"blk.{i}.ssm_conv1d.weight", [s.d_conv, 2 * key_dim + value_dim], F32)
    m.tensor(f"blk.{i}.ssm_dt.bias", [s.v_heads], F32)
    m.tensor(f"blk.{i}.ssm_a", [s.v_heads], F32)
    if ba_fused:
        m.tensor(f"blk.{i}.ssm_ba.weight", [E, 2 * s.v_heads], F16)
    else:
        m.tensor(f"blk.{i}.ssm_beta.weight", [E, s.v_heads], F16)
        m.tensor(f"blk.{i}.ssm_alpha.weight", [E, s.v_heads], F16)
    _norm(m, f"blk.{i}.ssm_norm.weight", s.d_state)
    m.tensor(f"blk.{i}.ssm_out.weight", [value_dim, E], F16)


def _qwen_next_model(
    arch: str, name: str, layers: int, moe: bool = True, sections: bool = True, s: QwenNext = TINY_QWEN_NEXT
) -> Model:
    """The qwen3next / qwen35 / qwen4exp hyperparameters of `s`."""
    m = _model(
        arch,
        name,
        ctx=s.ctx,
        embd=s.embd,
        layers=layers,
        ff=s.ff,
        heads=s.heads,
        heads_kv=s.heads_kv,
        head_dim=s.head,
        eps=1e-6,
        rope_base=1e7,
        vocab=s.vocab,
    )
    m.arch_kv(rope__dimension_count=s.rope_dims)
    if sections:
        m.arch_kv(rope__dimension_sections=list(s.sections))
    if moe:
        _experts(m, s.experts, s.experts_used, s.expert_ff, s.shared_ff)
    d_inner = s.d_state * s.v_heads
    ssm_kv(m, d_conv=s.d_conv, d_inner=d_inner, d_state=s.d_state, heads=s.v_heads, groups=s.k_heads)
    return m


def _qwen_next_ffn(m: Model, i: int, moe: bool, s: QwenNext = TINY_QWEN_NEXT) -> None:
    if moe:
        moe_feed_forward(
            m, i, s.embd, s.expert_ff, s.experts, F16, norm=False, shared_ff=s.shared_ff, shared_gate_inp=True
        )
    else:
        feed_forward(m, i, s.embd, s.ff, F16, norm=False)


def _qwen_next_layer(m: Model, i: int, recurrent: bool, moe: bool, ba_fused: bool, s: QwenNext) -> None:
    _norm(m, f"blk.{i}.attn_norm.weight", s.embd)
    _norm(m, f"blk.{i}.post_attention_norm.weight", s.embd)
    if recurrent:
        _gated_delta_net(m, i, s, ba_fused)
    else:
        attention(m, i, s.embd, s.heads, s.heads_kv, s.head, F16, qk_norm=True, norm=False, gated=True)
    _qwen_next_ffn(m, i, moe, s)


def qwen3next(name: str = "tiny-qwen3next", layers: int = 6, interval: int = 3, s: QwenNext = TINY_QWEN_NEXT) -> Model:
    """Qwen3-Next: gated delta-net + gated attention, full_attention_interval 3 (layers 2 and 5 attention)."""
    m = _qwen_next_model("qwen3next", name, layers, sections=False, s=s)
    m.arch_kv(full_attention_interval=interval)
    embeddings(m, s.embd, s.vocab, F16, tied=False)
    for i in range(layers):
        _qwen_next_layer(m, i, (i + 1) % interval != 0, moe=True, ba_fused=True, s=s)
    return m


def _qwen35(
    name: str,
    recurrent: list[bool] | None = None,
    interval: int | None = None,
    nextn: int = 0,
    moe: bool = False,
    layers: int = 4,
    s: QwenNext = TINY_QWEN_NEXT,
    tied: bool = False,
) -> Model:
    m = _qwen_next_model("qwen35moe" if moe else "qwen35", name, layers + nextn, moe=moe, s=s)
    if nextn:
        m.arch_kv(nextn_predict_layers=nextn)
    if recurrent is not None:
        m.arch_kv(attention__recurrent_layers=recurrent + [False] * nextn)
    if interval is not None:
        m.arch_kv(full_attention_interval=interval)
    recurrent = recurrent or [(i + 1) % (interval or 4) != 0 for i in range(layers)]
    embeddings(m, s.embd, s.vocab, F16, tied=tied)
    for i in range(layers):
        _qwen_next_layer(m, i, recurrent[i], moe, False, s)
    for i in range(layers, layers + nextn):
        _qwen_next_layer(m, i, False, moe, False, s)
        nextn_tensors(m, i, s.embd)
    return m


def qwen35() -> Model:
    """Qwen3.5 dense: recurrent layers from the bool array attention.recurrent_layers [1,0,1,1], against
    the default interval 4."""
    return _qwen35("tiny-qwen35", recurrent=[True, False, True, True])


def qwen35moe() -> Model:
    """Qwen3.5-MoE with neither recurrent_layers nor full_attention_interval: default interval 4."""
    return _qwen35("tiny-qwen35moe", moe=True)


def qwen35_mtp() -> Model:
    """Qwen3.5 with one NextN/MTP block (block_count 4 + 1): the MTP layer is not recurrent, but the main
    context's attention filter (il < n_layer()) keeps it out of the KV cache."""
    return _qwen35("tiny-qwen35-mtp", interval=2, nextn=1)


def qwen35_mtp_headless() -> Model:
    """qwen35-mtp without its NextN layer's nextn.eh_proj (its other tensors kept): under load_mtp the loader
    requires it, and the draft's graph asserts it."""
    m = _qwen35("tiny-qwen35-mtp-headless", interval=2, nextn=1)
    m.tensors = [t for t in m.tensors if not t[0].startswith("blk.4.nextn.eh_proj")]
    return m


def qwen35moe_mtp() -> Model:
    """Qwen3.5-MoE with one NextN/MTP block (block_count 4 + 1): the MTP layer's FFN is the MoE one."""
    return _qwen35("tiny-qwen35moe-mtp", interval=2, nextn=1, moe=True)


def qwen35moe_mtp_fused() -> Model:
    """qwen35moe-mtp with each layer's experts' gate and up in one ffn_gate_up_exps: the NextN layer's is loaded
    without load_mtp too (create_tensor_gate_up_exps probes it TENSOR_NOT_REQUIRED alone)."""
    return fused_gate_up(_qwen35("tiny-qwen35moe-mtp-fused", interval=2, nextn=1, moe=True))


def _lfm2(
    arch: str, name: str, heads_kv: list[int], l_cache: int, dense_layers: int | None = None, s: Hybrid = TINY_LFM2
) -> Model:
    """LFM2: short-conv layers (head_count_kv 0) and attention; after `dense_layers` dense layers, MoE."""
    E, H = s.embd, s.heads
    m = _model(
        arch, name, ctx=128000, embd=E, layers=len(heads_kv), ff=s.ff, heads=H, heads_kv=heads_kv, rope_base=1e6,
        vocab=s.vocab,
    )  # fmt: skip
    m.tensor("token_embd.weight", [E, s.vocab], F16)
    _norm(m, "token_embd_norm.weight", E)  # LFM2's final norm is stored under this name
    for i, kv in enumerate(heads_kv):
        if kv:
            attention(m, i, E, H, kv, E // H, F16, qk_norm=True)
        else:
            _norm(m, f"blk.{i}.attn_norm.weight", E)
            m.tensor(f"blk.{i}.shortconv.conv.weight", [l_cache, E], F32)
            m.tensor(f"blk.{i}.shortconv.in_proj.weight", [E, 3 * E], F16)
            m.tensor(f"blk.{i}.shortconv.out_proj.weight", [E, E], F16)
        if dense_layers is not None and i >= dense_layers:
            moe_feed_forward(m, i, E, s.expert_ff, s.experts, F16, probs_bias=True)
        else:
            feed_forward(m, i, E, s.ff, F16)
    m.arch_kv(shortconv__l_cache=l_cache)
    return m


def lfm2moe(
    name: str = "tiny-lfm2moe", heads_kv: tuple[int, ...] = (0, 0, 2, 0, 4, 0), l_cache: int = 4, s: Hybrid = TINY_LFM2
) -> Model:
    """LFM2-MoE: 2 leading dense layers, then MoE (sigmoid gating); shortconv.l_cache 4: R = (l_cache-1)*n_embd,
    S = 0."""
    m = _lfm2("lfm2moe", name, list(heads_kv), l_cache, dense_layers=2, s=s)
    m.arch_kv(leading_dense_block_count=2)
    _experts(m, s.experts, s.experts_used, s.expert_ff, expert_gating_func=2)
    return m


def lfm2_swa() -> Model:
    """LFM2 with attention.sliding_window 300: every attention layer SWA, memory llama_memory_hybrid_iswa."""
    m = _lfm2("lfm2", "tiny-lfm2-swa", [0, 2, 0, 0, 2, 0], 5)
    m.arch_kv(attention__sliding_window=300)
    return m


def plamo2(name: str = "tiny-plamo2", heads_kv: tuple[int, ...] = (0, 2, 0, 1), s: Hybrid = TINY_PLAMO2) -> Model:
    """PLaMo-2: Mamba layers (head_count_kv 0) + attention; ssm.group_count present and 0:
    R = (d_conv-1)*d_inner, S = d_state*d_inner."""
    E, H, HD, DI, DS, NH, DC = s.embd, s.heads, s.head, s.d_inner, s.d_state, s.ssm_heads, HYBRID_D_CONV
    dt = max(64, E // 16)
    m = _model(
        "plamo2", name, ctx=32768, embd=E, layers=len(heads_kv), ff=s.ff, heads=H, heads_kv=list(heads_kv),
        head_dim=HD, eps=1e-6, vocab=s.vocab,
    )  # fmt: skip
    ssm_kv(m, d_conv=DC, d_inner=DI, d_state=DS, heads=NH, groups=0)
    embeddings(m, E, s.vocab, F16, tied=False)
    for i, kv in enumerate(heads_kv):
        _norm(m, f"blk.{i}.attn_norm.weight", E)
        if kv:
            attention(m, i, E, H, kv, HD, F16, norm=False, fused=True)
            m.tensor(f"blk.{i}.attn_q_norm.weight", [HD, H], F32)
            m.tensor(f"blk.{i}.attn_k_norm.weight", [HD, kv], F32)
        else:
            m.tensor(f"blk.{i}.ssm_in.weight", [E, 2 * DI], F16)
            m.tensor(f"blk.{i}.ssm_conv1d.weight", [DC, DI], F32)
            m.tensor(f"blk.{i}.ssm_x.weight", [DI, dt + 2 * DS], F16)
            m.tensor(f"blk.{i}.ssm_dt.weight", [dt, NH], F16)
            for vec in ("ssm_dt.bias", "ssm_a", "ssm_d"):
                m.tensor(f"blk.{i}.{vec}", [NH], F32)
            m.tensor(f"blk.{i}.ssm_out.weight", [DI, E], F16)
            for part, n in (("dt", dt), ("b", DS), ("c", DS)):
                _norm(m, f"blk.{i}.ssm_{part}_norm", n)  # plamo2 asks for these without ".weight"
        _norm(m, f"blk.{i}.post_attention_norm", E)
        _norm(m, f"blk.{i}.ffn_norm.weight", E)
        m.tensor(f"blk.{i}.ffn_down.weight", [s.ff, E], F16)
        m.tensor(f"blk.{i}.ffn_up.weight", [E, 2 * s.ff], F16)
        _norm(m, f"blk.{i}.post_ffw_norm", E)
    return m


def minimax01() -> Model:
    """MiniMax-Text-01: lightning attention + softmax attention every 8th layer (default interval, no key);
    no ssm keys: R = 0 bytes, S = head_dim^2 * n_head."""
    E, H, HKV, HD, FF, NE = 256, 4, 2, 96, 256, 4
    m = _model(
        "minimax-01",
        "tiny-minimax01",
        ctx=1048576,
        embd=E,
        layers=8,
        ff=FF,
        heads=H,
        heads_kv=HKV,
        head_dim=HD,
        rope_base=1e7,
    )
    m.arch_kv(residual_scale=1.0)
    _experts(m, NE, 2)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(8):
        if (i + 1) % 8:  # lightning attention: fused qkv (all heads), a second norm and an output gate
            attention(m, i, E, H, H, HD, F16, fused=True)
            _norm(m, f"blk.{i}.attn_norm_2.weight", H * HD)
            m.tensor(f"blk.{i}.attn_gate.weight", [E, H * HD], F16)
        else:
            attention(m, i, E, H, HKV, HD, F16)
        moe_feed_forward(m, i, E, FF, NE, F16)
    return m


@dataclass(frozen=True)
class KdaMla(Sizes):
    """The kimi-linear / kimi-k3 / bailingmoe3 sizes beside the KDA head (tiny: 4 heads over 256, MLA with a 96-wide
    latent, a 32-wide rope part, 64 / 32 heads; experts of 128 with a shared one as wide)."""

    kv_lora: int = 96
    rope: int = 32
    k_head: int = 64
    v_head: int = 32


TINY_KDA_MLA = KdaMla()


def _kda(m: Model, i: int, E: int, H: int, hd: int, d_conv: int, style: str) -> None:
    """Kimi Delta Attention. style: "kimi-linear" (low-rank f and g), "bailingmoe3" (full-rank f and g),
    "kimi-k3" (low-rank f, full-rank g); width d = hd * n_head."""
    d = hd * H
    for x in "qkv":
        m.tensor(f"blk.{i}.ssm_conv1d_{x}.weight", [d_conv, 1, d, 1], F32)
        m.tensor(f"blk.{i}.attn_{x}.weight", [E, d], F16)
    if style == "bailingmoe3":
        m.tensor(f"blk.{i}.ssm_f_a.weight", [E, d], F16)
        m.tensor(f"blk.{i}.ssm_g_a.weight", [E, d], F16)
    else:
        m.tensor(f"blk.{i}.ssm_f_a.weight", [E, hd], F16)
        m.tensor(f"blk.{i}.ssm_f_b.weight", [hd, d], F16)
    if style == "kimi-linear":
        m.tensor(f"blk.{i}.ssm_g_a.weight", [E, hd], F16)
        m.tensor(f"blk.{i}.ssm_g_b.weight", [hd, d], F16)
    if style == "kimi-k3":
        m.tensor(f"blk.{i}.ssm_g.weight", [E, d], F16)
    m.tensor(f"blk.{i}.ssm_beta.weight", [E, H], F16)
    m.tensor(f"blk.{i}.ssm_a", {"kimi-linear": [1, H, 1, 1], "bailingmoe3": [1, H], "kimi-k3": [H]}[style], F32)
    m.tensor(f"blk.{i}.ssm_dt.bias", [d], F32)
    _norm(m, f"blk.{i}.ssm_norm.weight", hd)
    m.tensor(f"blk.{i}.attn_output.weight", [d, E], F16)


def _kda_mla(
    arch: str,
    name: str,
    heads_kv: list[int],
    kda_head: int,
    d_conv: int,
    nextn: int = 0,
    q_lora: int = 0,
    gate: int = 0,
    s: KdaMla = TINY_KDA_MLA,
    routing: dict[str, Any] | None = None,
    **hparams: Any,
) -> Model:
    """KDA layers (head_count_kv 0, recurrent: R = 3*(d_conv-1)*n_head*kda.head_dim, S = kda.head_dim^2*n_head)
    and MLA attention (K cache only, kv_lora_rank + rope wide); layer 0 dense, then MoE with a shared expert.
    gate: the attn_gate width of gated MLA (0: none); routing: more expert keys (scale, groups). An MTP block (last
    layer) is built here as an MLA + MoE layer; its nextn tensors are the caller's."""
    E, H = s.embd, s.heads
    m = _model(arch, name, embd=E, layers=len(heads_kv), ff=s.ff, heads=H, heads_kv=heads_kv, vocab=s.vocab, **hparams)
    mla_kv(m, kv_lora=s.kv_lora, rope=s.rope, k_head=s.k_head, v_head=s.v_head)
    if q_lora:
        m.arch_kv(attention__q_lora_rank=q_lora)
    m.arch_kv(ssm__conv_kernel=d_conv, kda__head_dim=kda_head)
    shared = dict(expert_shared_count=1, leading_dense_block_count=1, expert_gating_func=2)
    _experts(m, s.experts, s.experts_used, s.expert_ff, **shared, **(routing or {}))
    embeddings(m, E, s.vocab, F16, tied=False)
    for i, kv in enumerate(heads_kv):
        _norm(m, f"blk.{i}.attn_norm.weight", E)
        if kv:
            mla_attention(m, i, E, H, s.kv_lora, s.rope, s.k_head, s.v_head, F16, q_lora=q_lora)
            if gate:
                m.tensor(f"blk.{i}.attn_gate.weight", [E, gate], F16)
        else:
            _kda(m, i, E, H, kda_head, d_conv, arch)
        if i == 0:
            feed_forward(m, i, E, s.ff, F16)
        else:
            moe_feed_forward(m, i, E, s.expert_ff, s.experts, F16, shared_ff=s.expert_ff, probs_bias=True)
    return m


def kimi_linear(
    name: str = "tiny-kimi-linear",
    heads_kv: tuple[int, ...] = (0, 0, 0, 1),
    kda_head: int = 32,
    s: KdaMla = TINY_KDA_MLA,
    routing: dict[str, Any] | None = None,
) -> Model:
    """Kimi-Linear: KDA + MLA attention (head_count_kv 1) on layer 3."""
    return _kda_mla("kimi-linear", name, list(heads_kv), kda_head, 4, s=s, routing=routing, ctx=1048576, rope_base=5e4)


def kimi_k3() -> Model:
    """Kimi-K3: KDA + gated MLA, the same state rule as kimi-linear; no attention residuals."""
    m = _kda_mla("kimi-k3", "tiny-kimi-k3", [0, 1, 0, 0], 16, 5, q_lora=96, gate=4 * 32, ctx=1048576, rope_base=5e4)
    m.arch_kv(attn_res__block_size=0, activation__situ_beta=1.0, activation__situ_linear_beta=0.0)
    return m


def bailingmoe3(
    name: str = "tiny-bailingmoe3",
    heads_kv: tuple[int, ...] = (0, 0, 0, 1, 1),
    kda_head: int = 32,
    nextn: int = 1,
    q_lora: int = 96,
    d_conv: int = 3,
    s: KdaMla = TINY_KDA_MLA,
    routing: dict[str, Any] | None = None,
    **hparams: Any,
) -> Model:
    """Ling/Ring 2.5-style bailingmoe3: KDA + gated MLA and (nextn) one NextN/MTP block; the hybrid memory's
    default attention filter (!is_recr over all layers) gives the MTP block a K cache in the main context."""
    m = _kda_mla(
        "bailingmoe3", name, list(heads_kv), kda_head, d_conv, q_lora=q_lora, gate=s.heads, s=s, routing=routing,
        rope_base=1e6, **hparams,
    )  # fmt: skip
    m.arch_kv(kda__gate_lower_bound=-5.0)
    if nextn:
        last = len(heads_kv) - 1
        m.arch_kv(nextn_predict_layers=nextn)
        nextn_tensors(m, last, s.embd, shared_head_norm=False)
        _norm(m, f"blk.{last}.layer_output_norm.weight", s.embd)
    return m


def _qwen4exp(name: str, ple_layer: int | None = None, ratio: int = 0, ple_conv: QT = F32) -> Model:
    """qwen4exp: the qwen3next layers with hyper-connections (2 streams, rank 32) and a sparse-attention
    indexer on the attention layers (full_attention_interval 2); optionally a PLE n-gram hash embedding (its conv
    kernel `ple_conv`) and (`ratio`) the converter's attention.compress_ratios: QSA on the attention layers."""
    E, HC, LR, IDX_H, IDX_D = 256, 2, 32, 2, 96
    NGRAM, K, PLE_VOCAB = 3, 4, 512
    hc = HC * E
    m = _qwen_next_model("qwen4exp", name, 4)
    m.arch_kv(
        full_attention_interval=2,
        hyper_connection__count=HC,
        hyper_connection__low_rank=LR,
        attention__indexer__head_count=IDX_H,
        attention__indexer__key_length=IDX_D,
        attention__indexer__top_k=256,
    )
    if ratio:
        m.arch_kv(attention__compress_ratios=[0, ratio, 0, ratio])
    ple_heads = NGRAM - 1  # (ngram_size - 1) * heads_per_ngram
    ple_hd = E // ple_heads  # the graph needs ple_head_dim * ple_n_heads == n_embd
    if ple_layer is not None:
        m.arch_kv(
            ple__layers=[ple_layer],
            ple__ngram_size=NGRAM,
            ple__heads_per_ngram=1,
            ple__conv_kernel=K,
            ple__eos_token_id=2,
            embedding_length_per_layer_input=ple_hd,
            ple__layer_multipliers=np.array([1000003, 999983, 998117], dtype=np.uint64),
            ple__head_offsets=np.array([h * PLE_VOCAB for h in range(ple_heads)], dtype=np.uint64),
            ple__head_vocab_sizes=np.array([PLE_VOCAB] * ple_heads, dtype=np.uint64),
        )
        m.tensor("per_layer_token_embd.weight", [ple_hd, ple_heads * PLE_VOCAB], F16)
    m.tensor("token_embd.weight", [E, VOCAB], F16)
    m.tensor("output.weight", [E, VOCAB], F16)
    _hyper_connection(m, "output_hc", hc, LR, inject=0)
    for i in range(4):
        for mixer in ("attn", "ffn"):
            _hyper_connection(m, f"blk.{i}.hc_{mixer}", hc, LR, inject=HC)
        if i % 2 == 0:
            _gated_delta_net(m, i, TINY_QWEN_NEXT, ba_fused=False)
        else:
            attention(m, i, E, 4, 2, 64, F16, qk_norm=True, norm=False, gated=True)
            m.tensor(f"blk.{i}.indexer.q_proj.weight", [E, IDX_H * IDX_D], F16)
            m.tensor(f"blk.{i}.indexer.k_proj.weight", [E, IDX_D], F16)
            _norm(m, f"blk.{i}.indexer.q_norm.weight", IDX_D)
            _norm(m, f"blk.{i}.indexer.k_norm.weight", IDX_D)
        if i == ple_layer:
            m.tensor(f"blk.{i}.ple_key.weight", [E, hc], F16)
            m.tensor(f"blk.{i}.ple_value.weight", [E, E], F16)
            for norm in ("key", "query", "conv"):
                _norm(m, f"blk.{i}.ple_norm_{norm}.weight", hc)
            m.tensor(f"blk.{i}.ple_conv1d.weight", [K, hc], ple_conv)
        _qwen_next_ffn(m, i, moe=True)
    return m


def _hyper_connection(m: Model, prefix: str, width: int, rank: int, inject: int) -> None:
    """qwen4exp's hyper-connection mixer: norm, low-rank down / up, and (inject > 0) an injection matrix."""
    _norm(m, f"{prefix}_norm.weight", width)
    m.tensor(f"{prefix}_down.weight", [width, rank], F16)
    m.tensor(f"{prefix}_up.weight", [rank, width], F16)
    if inject:
        m.tensor(f"{prefix}_inject.weight", [width, inject], F16)


def qwen4exp() -> Model:
    """qwen4exp: memory llama_memory_hybrid_idx, attention KV + recurrent state + an indexer cache (one kv
    head: K width indexer.key_length, V width the attention value head dim) on the attention layers."""
    return _qwen4exp("tiny-qwen4exp")


def qwen4exp_ple() -> Model:
    """qwen4exp with a PLE n-gram hash embedding on recurrent layer 2: that layer's recurrent cache gets a
    third tensor of (ple.conv_kernel-1)*ple.ngram_size*hyper_connection.count*n_embd floats per row."""
    return _qwen4exp("tiny-qwen4exp-ple", ple_layer=2)


def qwen4exp_qsa() -> Model:
    """qwen4exp as its converter writes Qwen3.8-Flash-Next: attention.compress_ratios 4 on the attention layers
    (QSA: the indexer scores blocks of 4 cached keys, the attention mask keeps the best), and the PLE embedding
    on layer 2 with its conv kernel in F16 (the file type: the graph casts it)."""
    return _qwen4exp("tiny-qwen4exp-qsa", ple_layer=2, ratio=4, ple_conv=F16)


def deepseek4(hash_layers: int = 0) -> Model:
    """DeepSeek-V4: hybrid by name, but create_memory builds llama_kv_cache_dsv4: a K-only sliding-window
    cache on every layer, K-only compressed caches for ratio-4 (CSA) and ratio-128 (HCA) layers, a
    lightning-indexer K cache and F32 compressor states per compressed layer. compress_ratios [4, 128, 4, 0].
    The first `hash_layers` layers pick their experts by token: ffn_gate_tid2eid (I32 [n_expert_used, n_vocab],
    zeros: expert 0) instead of exp_probs_b."""
    return _deepseek4(f"tiny-deepseek4-hash{hash_layers}" if hash_layers else "tiny-deepseek4", hash_layers)


def deepseek4_mtp() -> Model:
    """deepseek4 with its NextN/MTP layer written whole after the 4 trunk layers (nextn_predict_layers 1, its
    compress ratio 0 as graph_mtp asserts): the block as the trunk's (hyper-connections, attention, routed and
    shared experts with exp_probs_b) and its NextN head (eh_proj, enorm, hnorm, shared_head_norm); llama-server's
    draft context under --spec-type draft-mtp builds on it."""
    return _deepseek4("tiny-deepseek4-mtp", nextn=1)


def deepseek4_mtp_headless() -> Model:
    """deepseek4-mtp without its NextN head (no blk.4.nextn.* tensors): deepseek4's load_arch_hparams finds no
    nextn.eh_proj and sets n_layer_nextn 0, so every block is a trunk layer."""
    m = _deepseek4("tiny-deepseek4-mtp-headless", nextn=1)
    m.tensors = [t for t in m.tensors if not t[0].startswith("blk.4.nextn.")]
    return m


def deepseek4_nextn_missing() -> Model:
    """deepseek4 naming a NextN layer (nextn_predict_layers 1, block_count 5) whose tensors are all left out: without
    nextn.eh_proj its loader makes block 4 a trunk layer, whose tensors it then requires (a load failure)."""
    m = _deepseek4("tiny-deepseek4-nextn-missing", nextn=1)
    m.tensors = [t for t in m.tensors if not t[0].startswith("blk.4.")]
    return m


def _deepseek4(name: str, hash_layers: int = 0, nextn: int = 0) -> Model:
    """deepseek4's writer: 4 trunk layers and `nextn` NextN layers (ratio 0, their head tensors written)."""
    E, H, HD, QL, NE, K, FFE = 256, 4, 128, 64, 4, 2, 128
    OG, OL, HC, IDX_H, IDX_D = 2, 32, 4, 2, 64  # the graph asserts hyper_connection.count == 4
    ratios = [4, 128, 4, 0] + [0] * nextn
    m = _model(
        "deepseek4",
        name,
        ctx=1048576,
        embd=E,
        layers=len(ratios),
        ff=512,
        heads=H,
        heads_kv=1,
        head_dim=HD,
        eps=1e-6,
        rope_base=1e4,
    )
    m.arch_kv(rope__dimension_count=64, attention__q_lora_rank=QL, attention__sliding_window=128)
    if nextn:
        m.arch_kv(nextn_predict_layers=nextn)
    _experts(
        m,
        NE,
        K,
        FFE,
        expert_shared_count=1,
        expert_weights_scale=1.5,
        expert_weights_norm=True,
        swiglu_clamp_exp=10.0,
        expert_gating_func=4,
    )  # sqrt-softplus, the only gating accepted
    m.arch_kv(
        attention__indexer__head_count=IDX_H,
        attention__indexer__key_length=IDX_D,
        attention__indexer__top_k=64,
        attention__output_group_count=OG,
        attention__output_lora_rank=OL,
        attention__compress_rope_freq_base=160000.0,
        hyper_connection__count=HC,
        hyper_connection__sinkhorn_iterations=20,
        hyper_connection__epsilon=1e-6,
        hash_layer_count=hash_layers,
        attention__compress_ratios=ratios,
    )
    hc, hc_mix = HC * E, (2 + HC) * HC
    embeddings(m, E, VOCAB, F16, tied=False)
    m.tensor("output_hc_fn.weight", [hc, HC], F16)
    _norm(m, "output_hc_base.weight", HC)
    _norm(m, "output_hc_scale.weight", 1)
    for i, r in enumerate(ratios):
        _norm(m, f"blk.{i}.attn_norm.weight", E)
        _norm(m, f"blk.{i}.attn_sinks.weight", H)
        m.tensor(f"blk.{i}.attn_q_a.weight", [E, QL], F16)
        _norm(m, f"blk.{i}.attn_q_a_norm.weight", QL)
        m.tensor(f"blk.{i}.attn_q_b.weight", [QL, H * HD], F16)
        m.tensor(f"blk.{i}.attn_kv.weight", [E, HD], F16)
        _norm(m, f"blk.{i}.attn_kv_a_norm.weight", HD)
        m.tensor(f"blk.{i}.attn_output_a.weight", [H * HD // OG, OL * OG], F16)
        m.tensor(f"blk.{i}.attn_output_b.weight", [OG * OL, E], F16)
        for mixer in ("attn", "ffn"):
            m.tensor(f"blk.{i}.hc_{mixer}_fn.weight", [hc, hc_mix], F16)
            _norm(m, f"blk.{i}.hc_{mixer}_base.weight", hc_mix)
            _norm(m, f"blk.{i}.hc_{mixer}_scale.weight", 3)
        if r:
            _compressor(m, f"blk.{i}.attn_compressor", E, HD, r)
        if r == 4:
            m.tensor(f"blk.{i}.indexer.proj.weight", [E, IDX_H], F16)
            m.tensor(f"blk.{i}.indexer.attn_q_b.weight", [QL, IDX_H * IDX_D], F16)
            _compressor(m, f"blk.{i}.indexer_compressor", E, IDX_D, r)
        moe_feed_forward(m, i, E, FFE, NE, F16, shared_ff=FFE, probs_bias=i >= hash_layers)
        if i < hash_layers:
            m.tensor(f"blk.{i}.ffn_gate_tid2eid.weight", [K, VOCAB], QT.I32)
        if i >= len(ratios) - nextn:
            nextn_tensors(m, i, E)
    return m


def _compressor(m: Model, prefix: str, E: int, head: int, ratio: int) -> None:
    """deepseek4's KV compressor: overlapping (x2) windows for ratio 4, plain ones otherwise."""
    width = (2 if ratio == 4 else 1) * head
    m.tensor(f"{prefix}_kv.weight", [E, width], F16)
    m.tensor(f"{prefix}_gate.weight", [E, width], F16)
    m.tensor(f"{prefix}_ape.weight", [width, ratio], F32)
    _norm(m, f"{prefix}_norm.weight", head)


FAMILY_SET: dict[str, Callable[[], Model]] = {
    "mamba": mamba,
    "mamba2-ng2": mamba2_ng2,
    "rwkv6": rwkv6,
    "rwkv6qwen2": rwkv6qwen2,
    "rwkv7": rwkv7,
    "arwkv7": arwkv7,
    "jamba": jamba,
    "falcon-h1": falcon_h1,
    "nemotron-h": nemotron_h,
    "qwen3next": qwen3next,
    "qwen35": qwen35,
    "qwen35moe": qwen35moe,
    "qwen35-mtp": qwen35_mtp,
    "lfm2moe": lfm2moe,
    "lfm2-swa": lfm2_swa,
    "plamo2": plamo2,
    "minimax01": minimax01,
    "kimi-linear": kimi_linear,
    "nemotron-h-moe": nemotron_h_moe,
    "nemotron-h-moe-latent": nemotron_h_moe_latent,
    "bailingmoe3": bailingmoe3,
    "kimi-k3": kimi_k3,
    "qwen4exp": qwen4exp,
    "qwen4exp-ple": qwen4exp_ple,
    "deepseek4": deepseek4,
    **{name: PUBLIC_SET[name] for name in ("mamba2-f16", "granitehybrid-f16", "lfm2-f16")},
}

# Nemotron 3 Super's layout with its MTP block written whole (results_mtp_ctx_nemotron_latent.jsonl): the block's
# experts in the latent, with and without its own ffn_latent_down / _up
NEMOTRON_LATENT_MTP_MODELS: dict[str, Callable[[], Model]] = {
    "nemotron-h-moe-latent-mtp": nemotron_h_moe_latent_mtp(True),
    "nemotron-h-moe-latent-mtp-bare": nemotron_h_moe_latent_mtp(False),
}
# Published Mamba-1 dimensions, for llama.cpp's dry runs (sparse files): state-spaces/mamba-2.8b (64 layers of
# 2560, vocabulary padded to 50280), tiiuae/falcon-mamba-7b (64 of 4096, dt / B / C norms) and one attention
# period (8 of 32 layers) of ai21labs/AI21-Jamba-1.5-Mini (4096 wide, attention at layer 4 of every 8 with 32
# heads over 8 KV heads, 16 experts of 14336, MoE on odd layers).
SHAPE_SET: dict[str, Callable[[], Model]] = {
    "mamba-2.8b-shape-f16": lambda: mamba("mamba-2.8b", E=2560, L=64, DTR=160, V=50280),
    "falcon-mamba-7b-shape-f16": lambda: mamba("falcon-mamba-7b", E=4096, L=64, DTR=256, V=65024, dt_b_c_rms=True),
    "jamba-1.5-mini-shape-f16": lambda: jamba(
        "jamba-1.5-mini", E=4096, H=32, FF=14336, NE=16, DTR=256, heads_kv=(0, 0, 0, 0, 8, 0, 0, 0), V=65536
    ),
}


def qwen3next_legacy() -> Model:
    """Qwen3-Next as its first conversions wrote it: one ssm_in (q, k, v and z side by side per key head) in place of
    attn_qkv and attn_gate (build_qkvz's legacy path), and each layer's experts' gate and up in one
    ffn_gate_up_exps (build_moe_ffn's fused matmul)."""
    m, s = fused_gate_up(qwen3next("tiny-qwen3next-legacy")), TINY_QWEN_NEXT
    qkvz = 2 * s.d_state * s.k_heads + 2 * s.d_state * s.v_heads
    tensors = []
    for name, ne, qtype in m.tensors:
        if name.endswith("attn_gate.weight"):
            continue
        if name.endswith("attn_qkv.weight"):
            name, ne = name.replace("attn_qkv", "ssm_in"), (s.embd, qkvz)
        tensors.append((name, ne, qtype))
    m.tensors = tensors
    return m


def kimi_k3_res() -> Model:
    """Kimi-K3 with attention residuals (attn_res.block_size 2: layers 0, 2 and 4 bank their input), latent
    experts (expert_latent_length 64: ffn_routed_down, ffn_routed_norm, ffn_routed_up, the experts 64 wide), situ
    with a linear beta and a KDA gate lower bound."""
    E, latent = TINY_KDA_MLA.embd, 64
    m = _kda_mla(
        "kimi-k3", "tiny-kimi-k3-res", [0, 1, 0, 0, 1], 16, 5, q_lora=96, gate=4 * 32, ctx=1048576, rope_base=5e4
    )
    m.arch_kv(attn_res__block_size=2, activation__situ_beta=1.0, activation__situ_linear_beta=2.0)
    m.arch_kv(expert_latent_length=latent, kda__gate_lower_bound=-5.0)
    tensors = []
    for name, ne, qtype in m.tensors:
        if name.endswith(("ffn_gate_exps.weight", "ffn_up_exps.weight")):
            ne = (latent, *ne[1:])
        if name.endswith("ffn_down_exps.weight"):
            ne = (ne[0], latent, ne[2])
        tensors.append((name, ne, qtype))
        if name.endswith("ffn_gate_inp.weight"):
            prefix = name.removesuffix("ffn_gate_inp.weight")
            tensors += [(f"{prefix}ffn_routed_down.weight", (E, latent), F16)]
            tensors += [
                (f"{prefix}ffn_routed_up.weight", (latent, E), F16),
                (f"{prefix}ffn_routed_norm.weight", (latent,), F32),
            ]
    m.tensors = tensors
    _norm(m, "output_res_score.weight", E)
    for i in range(5):
        _norm(m, f"blk.{i}.attn_res_score.weight", E)
        _norm(m, f"blk.{i}.ffn_res_score.weight", E)
    return m


def bailingmoe3_clamp() -> Model:
    """bailingmoe3 with SwiGLU limits (swiglu_clamp_exp / _shexp, as its converter writes expert_swiglu_limit_list
    and share_expert_swiglu_limit_list): the experts clamped on layers 1 and 3, the shared experts and the leading
    dense FFN on layers 0 and 2."""
    m = bailingmoe3("tiny-bailingmoe3-clamp")
    m.arch_kv(swiglu_clamp_exp=[0.0, 7.0, 0.0, 7.0, 7.0], swiglu_clamp_shexp=[7.0, 0.0, 7.0, 0.0, 0.0])
    return m


# The delta-net builders' variants no tiny model of results_rec.jsonl has, measured in graph_dumps.jsonl and
# results_delta_net_ubatch.jsonl.
DELTA_NET_VARIANTS: dict[str, Callable[[], Model]] = {
    "qwen3next-legacy": qwen3next_legacy,
    "kimi-k3-res": kimi_k3_res,
    "bailingmoe3-clamp": bailingmoe3_clamp,
}
# qwen4exp as Qwen3.8-Flash-Next is converted (the family set's two have neither QSA nor an F16 PLE kernel)
QWEN4EXP_VARIANTS: dict[str, Callable[[], Model]] = {"qwen4exp-qsa": qwen4exp_qsa}
# deepseek4 with its first layer hash-routed (DeepSeek-V4's converter writes hash_layer_count, the loader requires it)
DEEPSEEK4_VARIANTS: dict[str, Callable[[], Model]] = {"deepseek4-hash": partial(deepseek4, 1)}
# deepseek4 with its NextN/MTP layer, measured in results_mtp_ctx_dsv4.jsonl (the target and its MTP draft context)
DEEPSEEK4_MTP_MODELS: dict[str, Callable[[], Model]] = {"deepseek4-mtp": deepseek4_mtp}
# deepseek4 whose NextN layer has no head: llama.cpp loads it as a trunk layer (results_dsv4_headless.jsonl)
DEEPSEEK4_HEADLESS_MODELS: dict[str, Callable[[], Model]] = {
    "deepseek4-mtp-headless": deepseek4_mtp_headless,
    "deepseek4-nextn-missing": deepseek4_nextn_missing,
}
# another architecture's NextN layer without its head: loaded without MTP, refused under it (results_mtp_headless.jsonl)
MTP_HEADLESS_MODELS: dict[str, Callable[[], Model]] = {"qwen35-mtp-headless": qwen35_mtp_headless}


# Published delta-net shapes, full size (sparse), measured in llama.cpp's dry run
# (tests/data/results_delta_net_dryrun.jsonl): Qwen/Qwen3-Next-80B-A3B (the catalog entry's keys), Qwen/Qwen3.5-4B
# (dense, tied embeddings) and Qwen/Qwen3.5-35B-A3B (experts), moonshotai/Kimi-Linear-48B-A3B (MLA on layers
# 4, 8, ..., 24 and 27 of 27, sigmoid routing scaled by 2.446) and inclusionAI/Ling-3.0-tiny (bailingmoe3: MLA on
# every fourth of 24 layers, low-rank Q, experts in 8 groups of which 4 are kept).
_QWEN35 = QwenNext(
    heads=16, heads_kv=4, head=256, rope_dims=64, d_state=128, k_heads=16, v_heads=32, vocab=248320,
    sections=(11, 11, 10, 0),
)  # fmt: skip
DELTA_NET_SHAPES: dict[str, Callable[[], Model]] = {
    "qwen3next-80b-a3b-shape": partial(
        qwen3next,
        "qwen3next-80b-a3b",
        layers=48,
        interval=4,
        s=replace(
            _QWEN35,
            embd=2048,
            heads_kv=2,
            ff=5120,
            experts=512,
            experts_used=10,
            expert_ff=512,
            shared_ff=512,
            vocab=151936,
        ),
    ),
    "qwen3.5-4b-shape": partial(_qwen35, "qwen3.5-4b", layers=32, tied=True, s=replace(_QWEN35, embd=2560, ff=9216)),
    "qwen3.5-35b-a3b-shape": partial(
        _qwen35,
        "qwen3.5-35b-a3b",
        moe=True,
        layers=40,
        s=replace(_QWEN35, embd=2048, heads_kv=2, ff=512, experts=256, experts_used=8, expert_ff=512, shared_ff=512),
    ),
    "kimi-linear-48b-a3b-shape": partial(
        kimi_linear,
        "kimi-linear-48b-a3b",
        heads_kv=tuple(int(il + 1 in (4, 8, 12, 16, 20, 24, 27)) for il in range(27)),
        kda_head=128,
        s=KdaMla(
            2304,
            32,
            ff=9216,
            experts=256,
            experts_used=8,
            expert_ff=1024,
            kv_lora=512,
            rope=64,
            k_head=192,
            v_head=128,
            vocab=163840,
        ),
        routing={"expert_weights_scale": 2.446},
    ),
    "ling-3.0-tiny-shape": partial(
        bailingmoe3,
        "ling-3.0-tiny",
        heads_kv=tuple(int((il + 1) % 4 == 0) for il in range(24)),
        kda_head=128,
        nextn=0,
        q_lora=256,
        d_conv=4,
        s=KdaMla(
            1536,
            16,
            ff=4608,
            experts=128,
            experts_used=8,
            expert_ff=512,
            kv_lora=512,
            rope=64,
            k_head=192,
            v_head=128,
            vocab=157184,
        ),
        routing={
            "expert_weights_scale": 2.5,
            "expert_weights_norm": True,
            "expert_group_count": 8,
            "expert_group_used_count": 4,
            "expert_shared_feed_forward_length": 512,
        },
        ctx=131072,
    ),
}


# Published RWKV shapes, full size (sparse), measured in llama.cpp's dry run (tests/data/results_rwkv_dryrun.jsonl):
# RWKV-6 World 1.6B, RWKV-7 World 1.5B (conversion/rwkv.py's LoRA ranks for n_embd 2048), QRWKV6-7B (Qwen2.5-7B's
# widths, 4 k/v heads) and ARWKV-7 over Qwen2.5-1.5B (the converter's ranks, gated).
RWKV_SHAPES: dict[str, Callable[[], Model]] = {
    name: partial(writer, name, **sizes)
    for name, writer, sizes in (
        ("rwkv6-1.6b-shape", rwkv6, dict(E=2048, HS=64, FF=7168, TM=32, TD=64, layers=24, vocab=65536)),
        (
            "rwkv7-1.5b-shape",
            rwkv7,
            dict(
                E=2048,
                FF=8192,
                HS=64,
                lora={"decay": 96, "iclr": 96, "value_residual_mix": 64, "gate": 256},
                layers=24,
                vocab=65536,
            ),
        ),
        ("qrwkv6-7b-shape", rwkv6qwen2, dict(E=3584, HS=128, FF=18944, TM=32, TD=64, HKV=4, layers=28, vocab=152064)),
        (
            "arwkv7-1.5b-shape",
            arwkv7,
            dict(
                E=1536,
                FF=8960,
                HS=64,
                lora={"decay": 64, "iclr": 64, "value_residual_mix": 32, "gate": 128},
                layers=28,
                vocab=151936,
            ),
        ),
    )
}


def _blocks(pattern: str, heads_kv: int, ff: int) -> tuple[list[int], list[int]]:
    """Nemotron-H's hybrid_override_pattern as the converter writes it: per layer head_count_kv (attention, `*`) and
    feed_forward_length (an MLP `-` or experts `E`); a Mamba-2 layer (`M`) has neither."""
    return [heads_kv if c == "*" else 0 for c in pattern], [ff if c in "-E" else 0 for c in pattern]


NEMOTRON_H_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"  # nvidia/Nemotron-H-8B-Base-8K
NEMOTRON_3_NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"  # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B
# Published hybrid dimensions, for llama.cpp's dry runs (sparse files, tests/data/results_hybrid_shapes_dryrun.jsonl):
# tiiuae/Falcon-H1-7B (44 layers of 3072, 12 heads over 2 KV heads of 128, FFN 12288, 24 Mamba-2 heads of 128,
# d_state 256, one group, 130,048 tokens) and Falcon-H1-34B (72 of 5120, 20 heads over 4 KV heads, FFN 21504, 32
# Mamba-2 heads of 128, 261,120 tokens), both without the grouped norm as published; Nemotron-H-8B (52 layers of
# 4096: 24 Mamba-2 with 128 heads of 64, d_state 128, 8 groups; 4 attention with 32 heads over 8 KV heads; 24
# relu^2 MLPs of 21504); Nemotron-3-Nano-30B-A3B (52 of 2688: 23 Mamba-2 with 64 heads of 64; 6 attention with 32
# heads over 2 KV heads; 23 MoE with 128 experts of 1856, 6 used, a shared expert of 3712, sigmoid routing with the
# weights normalized and scaled by 2.5); PLaMo-2-8B (32 of 4096, attention on every second layer with 32 heads over
# 4 KV heads of 128, 64 Mamba heads of 128, d_state 64, FFN 16384, 100,000 tokens) and LFM2-8B-A1B (24 of 2048,
# attention at layers 2, 6, 10, 14, 18 and 21 with 32 heads over 8 KV heads, l_cache 3, 2 dense layers of 7168, then
# 32 experts of 1792, 4 used, 65,536 tokens).
_FALCON_H1_7B = Hybrid(3072, 12, head=128, ff=12288, vocab=130048, d_inner=3072, d_state=256, groups=1, ssm_heads=24)
_NEMOTRON_H_8B = Hybrid(4096, 32, head=128, d_inner=8192, d_state=128, groups=8, ssm_heads=128, vocab=131072)
HYBRID_SHAPES: dict[str, Callable[[], Model]] = {
    "falcon-h1-7b-shape-f16": partial(falcon_h1, "falcon-h1-7b", 44, _FALCON_H1_7B, ssm_norm=False),
    "falcon-h1-34b-shape-f16": partial(
        falcon_h1,
        "falcon-h1-34b",
        72,
        replace(_FALCON_H1_7B, embd=5120, heads=20, heads_kv=4, ff=21504, d_inner=4096, ssm_heads=32, vocab=261120),
        ssm_norm=False,
    ),
    "nemotron-h-8b-shape-f16": partial(
        _nemotron_h, "nemotron_h", "nemotron-h-8b", *_blocks(NEMOTRON_H_8B, 8, 21504), _NEMOTRON_H_8B
    ),
    "nemotron-3-nano-30b-a3b-shape-f16": partial(
        _nemotron_h,
        "nemotron_h_moe",
        "nemotron-3-nano-30b-a3b",
        *_blocks(NEMOTRON_3_NANO, 2, 1856),
        replace(
            _NEMOTRON_H_8B,
            embd=2688,
            d_inner=4096,
            ssm_heads=64,
            experts=128,
            experts_used=6,
            expert_ff=1856,
            shared_ff=3712,
        ),
        moe=True,
        nextn=0,
        routing=NORMED_SCALED,
    ),
    "plamo-2-8b-shape-f16": partial(
        plamo2,
        "plamo-2-8b",
        (0, 4) * 16,
        Hybrid(4096, 32, head=128, ff=16384, d_inner=8192, d_state=64, ssm_heads=64, vocab=100000),
    ),
    "lfm2-8b-a1b-shape-f16": partial(
        lfm2moe,
        "lfm2-8b-a1b",
        tuple(8 if i in (2, 6, 10, 14, 18, 21) else 0 for i in range(24)),
        3,
        Hybrid(2048, 32, ff=7168, experts=32, experts_used=4, expert_ff=1792, vocab=65536),
    ),
}


# A tiny model measured beside the family's MTP ones (results_mtp_ctx.jsonl), not a family model of its own
MTP_MODELS: dict[str, Callable[[], Model]] = {"qwen35moe-mtp": qwen35moe_mtp}

# The NextN layer's fused ffn_gate_up_exps, which llama.cpp loads without load_mtp (results_mock_mtp_unskipped.jsonl)
FUSED_MTP_MODELS: dict[str, Callable[[], Model]] = {"qwen35moe-mtp-fused": qwen35moe_mtp_fused}


def _with_mtp_block(shape: Callable[[], Model], name: str, **more: Any) -> Callable[[], Model]:
    """A published shape with one NextN/MTP block appended (its tensors written), named `name`."""
    assert isinstance(shape, partial)
    return partial(shape.func, name, *shape.args[1:], **(shape.keywords | {"nextn": 1} | more))


# Published shapes with their NextN/MTP block (the MTP layer's tensors written, so llama-server's draft context can
# be made on them): Qwen3.5-4B, Qwen3.5-35B-A3B (an MoE MTP layer) and Ling-3.0-tiny's bailingmoe3 (an MLA MTP layer
# appended after its 24 trunk layers).
MTP_SHAPES: dict[str, Callable[[], Model]] = {
    "qwen3.5-4b-mtp-shape": _with_mtp_block(DELTA_NET_SHAPES["qwen3.5-4b-shape"], "qwen3.5-4b-mtp"),
    "qwen3.5-35b-a3b-mtp-shape": _with_mtp_block(DELTA_NET_SHAPES["qwen3.5-35b-a3b-shape"], "qwen3.5-35b-a3b-mtp"),
    "ling-3.0-tiny-mtp-shape": _with_mtp_block(
        DELTA_NET_SHAPES["ling-3.0-tiny-shape"],
        "ling-3.0-tiny-mtp",
        heads_kv=tuple(int((il + 1) % 4 == 0) for il in range(24)) + (1,),
    ),
}
