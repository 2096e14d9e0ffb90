"""Tiny models of the llama-style decoders whose graph differs from llama's by a norm, a bias, a fused projection, a
residual or a router (tests/data/results_plain_families.jsonl, their reserved graphs in graph_dumps.jsonl).

Each function returns the `Model` of one measured file, with the tensors its llama.cpp loader requires (and the
optional ones whose presence changes the graph, in a variant of its own). All weights are F16 (norms and biases
F32), every vocabulary has 512 tokens and `write_model` writes the data region sparse: the memory llama.cpp allocates
depends only on the header.
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
    moe_feed_forward,
    transformer_kv,
)

F16, F32 = QT.F16, QT.F32
VOCAB = 512
E, H, HKV, HD, FF, L = 256, 4, 2, 64, 512, 4  # embedding, heads, KV heads, head size, FFN width, layers
NE, NU, FFE = 4, 2, 128  # experts, experts used, expert width


def _model(arch: str, name: str, tokenizer: str = "gpt2", *, ctx: int, **hparams: Any) -> Model:
    """A 512-token F16 model of L layers with transformer_kv's hyperparameters (E wide, H heads over HKV)."""
    m = Model(arch, vocab=VOCAB, tokenizer=tokenizer)
    hparams = {"ff": FF, "heads": H, "heads_kv": HKV} | hparams
    transformer_kv(m, ctx=ctx, embd=E, layers=L, name=name, file_type=gguf.LlamaFileType.MOSTLY_F16, **hparams)
    return m


def _stablelm(name: str, parallel: bool) -> Model:
    """stablelm: LayerNorms with biases, q/k/v biases, partial rope (a quarter of the head), SwiGLU; `parallel`:
    StableLM 2 12B's per-head Q/K LayerNorms and no ffn_norm (the FFN reads the attention's normed input)."""
    m = _model("stablelm", name, ctx=4096, eps=None)
    m.arch_kv(attention__layer_norm_epsilon=1e-5, rope__dimension_count=HD // 4)
    embeddings(m, E, VOCAB, F16, tied=False)
    m.tensor("output_norm.bias", [E], F32)
    for i in range(L):
        layer_norm(m, f"blk.{i}.attn_norm", E)
        attention(m, i, E, H, HKV, HD, F16, norm=False, bias=True)
        if parallel:
            m.tensor(f"blk.{i}.attn_q_norm.weight", [HD, H], F32)
            m.tensor(f"blk.{i}.attn_k_norm.weight", [HD, HKV], F32)
        else:
            layer_norm(m, f"blk.{i}.ffn_norm", E)
        feed_forward(m, i, E, FF, F16, norm=False)
    return m


def stablelm() -> Model:
    """stablelm as StableLM 2 1.6B is laid out: an ffn_norm in every layer, no Q/K norms."""
    return _stablelm("tiny-stablelm", parallel=False)


def stablelm_parallel() -> Model:
    """stablelm as StableLM 2 12B is laid out: Q/K LayerNorms, the parallel residual."""
    return _stablelm("tiny-stablelm-parallel", parallel=True)


def _internlm2(name: str, fused: bool) -> Model:
    """internlm2: llama's blocks; `fused`: Q, K and V in one attn_qkv (create_tensor_qkv's fused path)."""
    m = _model("internlm2", name, "llama", ctx=32768, rope_base=1000000.0)
    embeddings(m, E, VOCAB, F16, tied=False)
    for i in range(L):
        attention(m, i, E, H, HKV, HD, F16, fused=fused)
        feed_forward(m, i, E, FF, F16)
    return m


def internlm2() -> Model:
    """internlm2 as its converter writes it: wqkv split into attn_q, attn_k and attn_v."""
    return _internlm2("tiny-internlm2", fused=False)


def internlm2_qkv() -> Model:
    """internlm2 with one attn_qkv."""
    return _internlm2("tiny-internlm2-qkv", fused=True)


def _minicpm(name: str, moe: bool) -> Model:
    """minicpm (granite.cpp's graph, rope always on): embedding, residual and logit scales, a tied output; `moe`:
    MiniCPM-MoE's routed experts in every layer (no shared expert)."""
    m = _model("minicpm", name, "llama", ctx=4096, heads_kv=H, eps=1e-5)
    m.arch_kv(embedding_scale=12.0, residual_scale=1.4 / L**0.5, logit_scale=E / 256)
    if moe:
        m.arch_kv(expert_count=NE, expert_used_count=NU, feed_forward_length=FFE)
    embeddings(m, E, VOCAB, F16, tied=True)
    for i in range(L):
        attention(m, i, E, H, H, HD, F16)
        if moe:
            moe_feed_forward(m, i, E, FFE, NE, F16)
        else:
            feed_forward(m, i, E, FF, F16)
    return m


def minicpm() -> Model:
    """minicpm as MiniCPM-2B is laid out: dense SwiGLU FFNs."""
    return _minicpm("tiny-minicpm", moe=False)


def minicpm_moe() -> Model:
    """minicpm as MiniCPM-MoE-8x2B is laid out: 4 experts of 128, 2 used."""
    return _minicpm("tiny-minicpm-moe", moe=True)


FAMILY_SET: dict[str, Callable[[], Model]] = {
    "stablelm": stablelm,
    "stablelm-parallel": stablelm_parallel,
    "internlm2": internlm2,
    "internlm2-qkv": internlm2_qkv,
    "minicpm": minicpm,
    "minicpm-moe": minicpm_moe,
}
