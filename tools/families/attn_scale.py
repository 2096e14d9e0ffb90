"""Real-scale shapes of the attention families rebuilt node for node after phi3, openelm and deci, measured in
llama.cpp's dry run (no_alloc=1, tests/data/results_attn_family_dryrun.jsonl).

Each function returns the `Model` of one measured file: a published model's widths (heads, head sizes, FFN,
vocabulary, sliding window and pattern) in fewer layers where the layer count changes neither the graph's widest
phase nor a layer rule (exaone4 slides only at 64 layers; smollm3 and llama4 skip rope every 4th layer; gemma4's
pattern keeps its period). Weights are Q4_0 (norms and biases F32); `write_model` writes them sparse. Where the
published config was not at hand the shape says "-style": its sizes are the family's as announced, not a copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tools.families.attention import Gemma4Dims, gemma4_model
from tools.families.shapes import decoder
from tools.gguf_writers import (
    QT,
    Model,
    attention,
    embeddings,
    feed_forward,
    layer_norm,
    moe_feed_forward,
    transformer_kv,
)

W, F32 = QT.Q4_0, QT.F32


def starcoder2(name: str, *, E: int, F: int, L: int, H: int, Hkv: int, V: int) -> Model:
    """starcoder2: LayerNorms with biases, q/k/v/o biases, a GELU FFN (up, down) with biases."""
    m = Model("starcoder2", vocab=V, tokenizer="gpt2")
    transformer_kv(m, ctx=16384, embd=E, layers=L, ff=F, heads=H, heads_kv=Hkv, eps=None, name=name)
    m.arch_kv(attention__layer_norm_epsilon=1e-5, rope__dimension_count=E // H)
    embeddings(m, E, V, W, tied=False)
    m.tensor("output_norm.bias", [E], F32)
    for i in range(L):
        layer_norm(m, f"blk.{i}.attn_norm", E)
        attention(m, i, E, H, Hkv, E // H, W, norm=False, bias=True, out_bias=True)
        layer_norm(m, f"blk.{i}.ffn_norm", E)
        feed_forward(m, i, E, F, W, norm=False, gate=False)
        m.tensor(f"blk.{i}.ffn_up.bias", [F], F32)
        m.tensor(f"blk.{i}.ffn_down.bias", [E], F32)
    return m


def olmo2(name: str, *, E: int, F: int, L: int, H: int, V: int, window: int | None = None) -> Model:
    """olmo2 (OLMo 2, and OLMo 3 with a sliding window): no pre-norms, norms of the whole Q and K projections,
    post norms."""
    m = decoder("olmo2", name, E=E, F=F, L=L, H=H, Hkv=H, V=V, tied=False, pre_norm=False, post_norm=True, eps=1e-6)
    if window is not None:
        m.arch_kv(attention__sliding_window=window)
    for i in range(L):
        m.tensor(f"blk.{i}.attn_q_norm.weight", [H * 128], F32)
        m.tensor(f"blk.{i}.attn_k_norm.weight", [H * 128], F32)
    return m


def cohere2(name: str, *, E: int, F: int, L: int, H: int, Hkv: int, V: int) -> Model:
    """cohere2 (Command R7B, Command A): LayerNorm, the parallel block (no ffn_norm), window 4096, period 4."""
    m = decoder("cohere2", name, E=E, F=F, L=L, H=H, Hkv=Hkv, V=V, tied=True, eps=None, ffn_norm=False)
    m.arch_kv(attention__layer_norm_epsilon=1e-5, attention__sliding_window=4096, logit_scale=0.25)
    return m


def llama4(name: str, *, E: int, F: int, Fe: int, experts: int, L: int, H: int, Hkv: int, V: int, step: int) -> Model:
    """llama4: chunked attention (no sliding_window key), experts (one used) with a shared expert every `step`-th
    layer, dense FFNs between."""
    m = Model("llama4", vocab=V, tokenizer="gpt2")
    transformer_kv(m, ctx=10485760, embd=E, layers=L, ff=F, heads=H, heads_kv=Hkv, eps=1e-5, name=name)
    m.arch_kv(rope__dimension_count=128, interleave_moe_layer_step=step, vocab_size=V)
    m.arch_kv(expert_count=experts, expert_used_count=1, expert_feed_forward_length=Fe)
    embeddings(m, E, V, W, tied=False)
    for i in range(L):
        attention(m, i, E, H, Hkv, 128, W)
        if (i + 1) % step == 0:
            moe_feed_forward(m, i, E, Fe, experts, W, shared_ff=Fe)
        else:
            feed_forward(m, i, E, F, W)
    return m


def llama_embed(name: str, *, E: int, F: int, L: int, H: int, Hkv: int, V: int) -> Model:
    """llama-embed: a llama with non-causal attention (no cache in its graph, no LM head)."""
    m = decoder("llama-embed", name, E=E, F=F, L=L, H=H, Hkv=Hkv, V=V, tied=True)
    m.arch_kv(attention__causal=False, pooling_type=1)
    return m


_GEMMA4 = Gemma4Dims(head=512, head_swa=256, vocab=262144, qtype=W)  # what the three share

SHAPES: dict[str, Callable[[], Model]] = {
    # StarCoder2-15B: 6144 wide, 48 heads over 4 KV heads of 128, FFN 24576, 49152 tokens
    "starcoder2-15b-shape": lambda: starcoder2("sc2-15b", E=6144, F=24576, L=4, H=48, Hkv=4, V=49152),
    # SmolLM3-3B: 2048 wide, 16 heads over 4, FFN 11008, 128256 tokens, tied; no rope every 4th layer
    "smollm3-3b-shape": lambda: decoder("smollm3", "smol3b", E=2048, F=11008, L=8, H=16, Hkv=4, V=128256, tied=True),
    # OLMo-2-1124-13B: 5120 wide, 40 heads of 128 (no GQA), FFN 13824, 100352 tokens
    "olmo2-13b-shape": lambda: olmo2("olmo2-13b", E=5120, F=13824, L=4, H=40, V=100352),
    # OLMo-3-7B-style: OLMo 2's 7B widths with a 4096-token window on 3 layers in 4
    "olmo3-7b-style-shape": lambda: olmo2("olmo3-7b", E=4096, F=11008, L=8, H=32, V=100352, window=4096),
    # Command A (c4ai-command-a-03-2025): 12288 wide, 96 heads over 8, FFN 36864, 256000 tokens
    "command-a-shape": lambda: cohere2("cmd-a", E=12288, F=36864, L=8, H=96, Hkv=8, V=256000),
    # Command R7B: 4096 wide, 32 heads over 8, FFN 14336
    "command-r7b-shape": lambda: cohere2("cmd-r7b", E=4096, F=14336, L=8, H=32, Hkv=8, V=256000),
    # EXAONE-4.0-32B: 5120 wide, 40 heads over 8, FFN 27392, 102400 tokens; its 64 layers (it slides only at 64)
    "exaone4-32b-shape": lambda: decoder(
        "exaone4",
        "exa4-32b",
        E=5120,
        F=27392,
        L=64,
        H=40,
        Hkv=8,
        V=102400,
        tied=False,
        pre_norm=False,
        post_norm=True,
        qk_norm=True,
        attention__sliding_window=4096,
    ),  # fmt: skip
    # Llama-4-Scout-17B-16E: 5120 wide, 40 heads over 8, 16 experts of 8192 (1 used) and a shared one in every
    # layer, 202048 tokens
    "llama4-scout-shape": lambda: llama4(
        "scout", E=5120, F=16384, Fe=8192, experts=16, L=8, H=40, Hkv=8, V=202048, step=1
    ),
    # Llama-4-Maverick-style: 128 experts in every other layer, dense FFNs of 16384 between
    "llama4-maverick-style-shape": lambda: llama4(
        "maverick", E=5120, F=16384, Fe=8192, experts=128, L=8, H=40, Hkv=8, V=202048, step=2
    ),
    # Gemma-4-31B-style: 5376 wide, 32 heads (SWA 256 over 16 KV heads, full 512 over 4, V from K), FFN 21504,
    # window 1024, 5 sliding in 6
    "gemma4-31b-style-shape": lambda: gemma4_model(
        "g4-31b", 12, 21504, replace(_GEMMA4, embd=5376, heads=32, kv_full=4, kv_swa=16, period=6, window=1024)
    ),
    # Gemma-4-26B-A4B-style: 2816 wide, 16 heads (8 / 2 KV heads), 128 experts of 704 (8 used) beside an FFN of 2112
    "gemma4-26b-a4b-style-shape": lambda: gemma4_model(
        "g4-26b",
        12,
        2112,
        replace(_GEMMA4, embd=2816, heads=16, kv_full=2, kv_swa=8, period=6, window=1024, experts=(128, 8, 704)),
    ),  # fmt: skip
    # Gemma-4-E2B-style: 1536 wide, 8 heads over 1, per-layer embeddings of 256, the last 20 of 35 layers reusing
    # earlier KV with a double-wide FFN, window 512, 4 sliding in 5
    "gemma4-e2b-style-shape": lambda: gemma4_model(
        "g4-e2b",
        35,
        [6144] * 15 + [12288] * 20,
        replace(_GEMMA4, embd=1536, heads=8, kv_full=1, kv_swa=1, period=5, window=512, per_layer=256, shared=20),
    ),  # fmt: skip
    # llama-embed-nemotron-8b-style: Llama-3.1-8B's widths, non-causal
    "llama-embed-8b-style-shape": lambda: llama_embed("embed-8b", E=4096, F=14336, L=4, H=32, Hkv=8, V=128256),
}
