"""The architecture table names only architectures llama.cpp names, and states each fact once."""

from __future__ import annotations

import gguf

from memfit.estimator.arch_rules import RULES

# Architectures LLAMA_CPP_RELEASE loads that the pinned gguf package (0.19.0) does not list yet.
NEWER_THAN_GGUF = {
    "bailingmoe3",  # Ling/Ring 2.5: Kimi delta attention + MLA hybrid, measured (results_rec.jsonl)
    "cohere2moe",  # Command A MoE: sliding window, period or per-layer array, NextN layers, measured
    "deepseek32",  # DeepSeek V3.2: MLA plus a DSA indexer cache, measured (results_more.jsonl)
    "deepseek4",  # DeepSeek-V4: a K-only sliding cache, compressed K caches and compressor states, measured
    "granite_swa",  # Granite with a required per-layer sliding-window array, measured
    "hy_v3",  # Hunyuan v3: a plain KV cache over the trunk, NextN layers excluded (create_memory's filter)
    "kimi-k3",  # Kimi K3: Kimi delta attention + MLA hybrid, measured
    "laguna",  # Laguna: dense-first periodic sliding window, per-layer head counts, measured
    "mellum",  # Mellum: sliding window from a period or a per-layer array, measured
    "minimax-01",  # MiniMax-Text-01: lightning attention with softmax attention every 8th layer, measured
    "muse-glimmer",  # Muse Glimmer: always-sliding with a required pattern, measured
    "qwen4exp",  # Qwen next-generation hybrid with an indexer cache beside its attention layers, measured
    "talkie",  # a plain KV cache through create_memory's default branch, like llama
}


def test_every_entry_is_a_gguf_architecture_or_a_newer_one() -> None:
    known = set(gguf.MODEL_ARCH_NAMES.values())
    assert set(RULES) - known <= NEWER_THAN_GGUF, sorted(set(RULES) - known - NEWER_THAN_GGUF)


def test_the_allow_list_holds_only_names_gguf_lacks() -> None:
    assert not NEWER_THAN_GGUF & set(gguf.MODEL_ARCH_NAMES.values())  # drop a name once gguf lists it
    assert NEWER_THAN_GGUF <= set(RULES)
