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
    moe_feed_forward,
    ssm_kv,
    transformer_kv,
)


def dense(
    name: str,
    *,
    E: int,
    F: int,
    L: int,
    H: int,
    Hkv: int,
    D: int,
    V: int,
    w: QT = QT.Q4_0,
) -> Model:
    """A llama: E embedding, F FFN width, L layers, H / Hkv heads of D, V tokens, untied output."""
    m = Model("llama", vocab=V, tokenizer="llama")
    head_dim = None if D == E // H else D
    transformer_kv(m, ctx=131072, embd=E, layers=L, ff=F, heads=H, heads_kv=Hkv, eps=1e-5, name=name, head_dim=head_dim)
    m.arch_kv(rope__dimension_count=D, vocab_size=V)
    embeddings(m, E, V, w, tied=False)
    for i in range(L):
        attention(m, i, E, H, Hkv, D, w)
        feed_forward(m, i, E, F, w)
    return m


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
}
