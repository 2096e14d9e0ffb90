"""The settings each truth file in tests/data was measured with, and the model writers that make its files.

`TRUTH_FILES` names, per file, the models (tools/gguf_writers.py, tools/families/), the settings matrix, the probe's
extra arguments, the tokens decoded after allocating and the row's label. A file whose models were measured under
different settings each (`settings=None`) is regenerated with the settings its recorded rows name.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tools.families import attention, attn_scale, more, plain, recurrent, shapes, tiny_real
from tools.gguf_writers import PUBLIC_SET, QT, SHAPE_SET, Model

Settings = dict[str, Any]
RELEASE = "3.21.1"
LABEL = "node-llama-cpp 3.21.1 prebuilt libllama (llama.cpp v0.4.0)"


def _s(n_ctx: int, n_seq: int, t: str = "f16", fa: str = "auto", **more_: int) -> Settings:
    return dict(n_ctx=n_ctx, n_seq=n_seq, type_k=t, type_v=t, fa=fa, unified=0, mmap=0) | more_


def _full() -> list[Settings]:
    """The tiny models' 24 runs: 1 and 4 streams at three contexts and two cache types, flash attention off,
    a unified cache, odd contexts, a 128-token ubatch with and without flash attention, and mmap."""
    runs = [_s(c, n, t) for c, n, t in itertools.product((512, 2048, 8192), (1, 4), ("f16", "q8_0"))]
    runs += [_s(c, n, fa="off") for c, n in itertools.product((512, 2048, 8192), (1, 4))]
    runs += [_s(8192, 4, unified=1), _s(1000, 1), _s(1000, 3)]
    runs += [_s(4096, 1, n_ubatch=128), _s(4096, 1, fa="off", n_ubatch=128), _s(2048, 1, mmap=1)]
    return runs


FULL = _full()
# The recurrent families' extra runs: three streams (cells per stream), a q4_0 K cache, rollback snapshots.
RECURRENT_EXTRA = [
    _s(2048, 3),
    _s(2048, 3, "q8_0"),
    _s(8192, 3),
    _s(8192, 3, "q8_0"),
    _s(2048, 2) | dict(type_k="q4_0", type_v="q8_0"),
    _s(2048, 2, n_rs_seq=2),
]
# The Mamba-1 families' ubatches beside FULL's 128 and 512: 64 to 4096 (4096 asks past n_batch's 2048, which caps
# it), flash attention on and off, 1 to 8 sequences (3 rounds the ubatch up to a multiple of 3), a context below the
# ubatch, and a q8_0 cache (jamba's attention rotations).
MAMBA1_UBATCHES = [
    _s(c, n, t, fa, n_ubatch=ub)
    for c, n, t, fa, ub in (
        *((8192, n, "f16", fa, ub) for ub in (1024, 2048, 4096) for n in (1, 4) for fa in ("auto", "off")),
        (2048, 1, "f16", "auto", 64),
        (2048, 4, "f16", "off", 64),
        (4096, 2, "f16", "auto", 256),
        (8192, 8, "f16", "auto", 2048),
        (8192, 8, "f16", "off", 1024),
        (3000, 3, "f16", "off", 2048),
        (1500, 5, "f16", "auto", 4096),
        (8192, 4, "q8_0", "auto", 1024),
    )
]
# The delta-net families' ubatches beside FULL's 128 and 512: 64 to 4096 (4096 asks past n_batch's 2048, which caps
# it), flash attention on and off, 1 to 8 sequences (3, 5 and 7 round the ubatch up to a multiple), a context below
# the ubatch, a q8_0 cache (the attention layers' Hadamard rotations) and a unified cache.
DELTA_NET_UBATCHES = [
    _s(c, n, t, fa, n_ubatch=ub, **more_)
    for c, n, t, fa, ub, more_ in (
        *((8192, n, "f16", fa, ub, {}) for ub in (1024, 2048, 4096) for n in (1, 4) for fa in ("auto", "off")),
        (2048, 1, "f16", "auto", 64, {}),
        (2048, 4, "f16", "off", 64, {}),
        (4096, 2, "f16", "auto", 256, {}),
        (8192, 8, "f16", "auto", 2048, {}),
        (8192, 8, "f16", "off", 1024, {}),
        (3000, 3, "f16", "off", 2048, {}),
        (1500, 5, "f16", "auto", 4096, {}),
        (4096, 7, "f16", "auto", 1024, {}),
        (8192, 4, "q8_0", "auto", 1024, {}),
        (8192, 2, "q8_0", "auto", 4096, {}),
        (8192, 4, "f16", "auto", 2048, {"unified": 1}),
    )
]
# The Mamba / short-convolution hybrids' ubatches: the Mamba-1 families' runs, then 7 sequences (the ubatch rounded up
# to a multiple of 7), unified caches with flash attention on and off, a q8_0 K cache with flash attention off (a
# quantized V needs flash attention) and a context below a 2048-token ubatch over one sequence.
HYBRID_UBATCHES = MAMBA1_UBATCHES + [
    _s(7000, 7, n_ubatch=1024),
    _s(8192, 7, fa="off", n_ubatch=2048),
    _s(8192, 4, unified=1, n_ubatch=2048),
    _s(8192, 8, fa="off", unified=1, n_ubatch=512),
    _s(8192, 4, fa="off", n_ubatch=2048) | dict(type_k="q8_0"),
    _s(1000, 1, fa="off", n_ubatch=2048),
]
# Ubatches beyond FULL's (64 to 2048 tokens; 4096 asked, which llama.cpp caps at n_batch 2048) with flash attention
# on and off, 1 to 8 streams, a q8_0 cache and a context below the ubatch: where the rebuilt graph answers and the
# phase rule it replaced (deleted) did not.
ATTN_UBATCH = [
    _s(8192, 1, n_ubatch=64),
    _s(8192, 1, fa="off", n_ubatch=64),
    _s(8192, 1, n_ubatch=1024),
    _s(8192, 4, fa="off", n_ubatch=1024),
    _s(8192, 1, n_ubatch=2048),
    _s(8192, 1, fa="off", n_ubatch=2048),
    _s(8192, 4, "q8_0", n_ubatch=2048),
    _s(8192, 8, n_ubatch=2048),
    _s(8192, 8, fa="off", n_ubatch=2048),
    _s(8192, 1, n_ubatch=4096),
    _s(16384, 8, fa="off", n_ubatch=4096),
    _s(3000, 3, n_ubatch=4096),
]
# The MLA and next-token-prediction decoders' runs: ATTN_UBATCH's, then a context below the ubatch over 5 streams
# (the ubatch rounded up to a multiple of 5), 7 streams with flash attention off, a unified cache and a q8_0 cache
# at ubatch 1024.
MLA_UBATCH = ATTN_UBATCH + [
    _s(1500, 5, n_ubatch=4096),
    _s(8192, 7, fa="off", n_ubatch=1024),
    _s(8192, 4, unified=1, n_ubatch=2048),
    _s(8192, 1, "q8_0", n_ubatch=1024),
]
MLA_MODELS = ("deepseek2-mla", "deepseek2-mha", "deepseek2-v3")
NEXTN_MODELS = (
    "mistral4-mla",
    "mistral4-fused",
    "minicpm3",
    "mimo2-nextn",
    "mimo2-fused",
    "step35-nextn",
    "step35-clamped",
    "glm4moe-nextn",
    "glm4moe-fused",
)
# Their published shapes' dry runs (tools/families/shapes.py): the default context and ubatch, a q8_0 cache and a
# unified one over 32k, flash attention off at ubatch 512 and 2048, ubatch 2048, 8 streams asking 4096, a context
# below the ubatch over 3 streams, a 128-token ubatch over 2 streams.
MLA_SHAPE_RUNS = [
    _s(4096, 1),
    _s(32768, 1, "q8_0"),
    _s(32768, 4, unified=1),
    _s(4096, 1, fa="off"),
    _s(32768, 1, fa="off", n_ubatch=2048),
    _s(4096, 1, n_ubatch=2048),
    _s(32768, 8, n_ubatch=4096),
    _s(1500, 3, n_ubatch=4096),
    _s(8192, 2, fa="off", n_ubatch=128),
]
MLA_SHAPES = (
    "deepseek-v3-shape",
    "deepseek-r1-nextn-shape",
    "deepseek-v2-lite-mha-shape",
    "mistral-small-4-shape",
    "minicpm3-4b-shape",
    "mimo-v2-flash-shape",
    "step-3.5-flash-shape",
    "glm-4.5-air-shape",
)
# The attention families rebuilt node for node after phi3, openelm and deci: ubatches 64 to 4096 (4096 asks past
# n_batch's 2048), flash attention on and off, 1 to 8 sequences (3, 5 and 7 round the ubatch up), a context below the
# ubatch, q8_0 caches, a unified cache, and full-size sliding windows (swa_full: the same as without for full ones).
ATTN_FAMILY_UBATCH = [
    _s(8192, 1, n_ubatch=64),
    _s(8192, 2, fa="off", n_ubatch=64),
    _s(8192, 3, n_ubatch=256),
    _s(8192, 5, fa="off", n_ubatch=1024),
    _s(8192, 1, n_ubatch=2048),
    _s(8192, 4, fa="off", n_ubatch=2048),
    _s(16384, 8, n_ubatch=2048),
    _s(16384, 7, fa="off", n_ubatch=4096),
    _s(32768, 2, n_ubatch=4096),
    _s(1000, 3, n_ubatch=2048),
    _s(8192, 4, "q8_0", n_ubatch=1024),
    _s(16384, 1, "q8_0", n_ubatch=2048),
    _s(8192, 4, unified=1, n_ubatch=1024),
    _s(8192, 4, fa="off", unified=1, n_ubatch=2048),
    _s(8192, 1, swa_full=1, n_ubatch=2048),
    _s(8192, 4, fa="off", swa_full=1, n_ubatch=1024),
]
ATTN_FAMILY_MODELS = (
    "starcoder2", "smollm3", "olmo2-swa", "cohere2moe-scal", "cohere2moe-arr-nextn", "exaone4-64", "llama4-chunked",
    "afmoe-swa", "laguna-swa", "laguna-full",
)  # fmt: skip
# The llama-style decoders rebuilt after the attention families (tools/families/plain.py, and plm): FULL's runs, then
# ATTN_FAMILY_UBATCH's without swa_full (none of them slides): ubatch 64 to 4096, flash attention on and off, 1 to 8
# sequences, a context below the ubatch, q8_0 and unified caches.
PLAIN_RUNS = FULL + [s for s in ATTN_FAMILY_UBATCH if not s.get("swa_full")]
# The attention families' real-scale shapes in dry runs (no_alloc=1): contexts 1500 to 65536, 1 to 8 sequences,
# ubatch 512 to 4096 (capped at n_batch 2048), flash attention on and off, q8_0, a unified cache, swa_full.
ATTN_SHAPE_RUNS = [
    _s(4096, 1),
    _s(32768, 1, "q8_0"),
    _s(32768, 4, fa="off"),
    _s(32768, 1, n_ubatch=2048),
    _s(32768, 4, fa="off", n_ubatch=2048),
    _s(65536, 8, n_ubatch=4096),
    _s(8192, 3, n_ubatch=1024),
    _s(16384, 2, unified=1, n_ubatch=1024),
    _s(32768, 1, swa_full=1, n_ubatch=2048),
    _s(1500, 1, n_ubatch=2048),
]
# FULL's 512- and 8192-token runs with swa_full=1: the sliding-window families' full-size SWA cache; then flash
# attention off (the score matrices over the whole context) and ubatches 1024 and 2048, 1 and 4 streams.
SWA_FULL = [s for s in FULL[:12] if s["n_ctx"] != 2048] + [
    _s(512, 1, fa="off"),
    _s(8192, 1, fa="off"),
    _s(8192, 4, fa="off"),
]
SWA_FULL += [_s(8192, n, fa=fa, n_ubatch=u) for n, fa, u in itertools.product((1, 4), ("auto", "off"), (1024, 2048))]
# Ubatches 64-2048 (a larger request is capped by n_batch 2048), flash attention on and off, 1 and 4 streams.
WIDE = [
    _s(c, n, fa=fa, n_ubatch=u)
    for (c, n), fa, u in itertools.product(((4096, 1), (8192, 4)), ("auto", "off"), (64, 1024, 2048))
]
# The full-size shapes' dry runs (no_alloc=1): contexts to 32k, 1-4 streams, ubatch 128-2048.
SHAPES = [
    _s(c, n, t, fa, unified=u, n_ubatch=ub)
    for c, n, t, fa, u, ub in (
        (4096, 1, "f16", "auto", 0, 512),
        (4096, 1, "q8_0", "auto", 0, 512),
        (32768, 1, "f16", "auto", 0, 512),
        (32768, 1, "q8_0", "auto", 0, 512),
        (32768, 4, "f16", "auto", 0, 512),
        (32768, 4, "f16", "auto", 1, 512),
        (4096, 1, "f16", "off", 0, 512),
        (32768, 1, "f16", "off", 0, 512),
        (32768, 4, "f16", "off", 0, 512),
        (4096, 1, "f16", "auto", 0, 2048),
        (32768, 1, "q8_0", "auto", 0, 2048),
        (32768, 1, "f16", "off", 0, 2048),
        (1024, 3, "f16", "auto", 0, 512),
        (8192, 2, "f16", "off", 0, 128),
    )
]
# The recurrent shapes' dry runs past SHAPES' ubatches: 1024 over 32k tokens, a 4096 request (capped at n_batch 2048)
# over 4 sequences with flash attention off, 8 sequences at 2048.
SHAPES_PAST_512 = [_s(32768, 1, n_ubatch=1024), _s(32768, 4, fa="off", n_ubatch=4096), _s(32768, 8, n_ubatch=2048)]

# Ubatches past 512 (to 4096) with flash attention on and off and 1, 3 and 4 streams, as launchers pass `-ub`:
# dry runs of the families whose graph is rebuilt node for node.
WIDE_UBATCH = [
    _s(c, n, fa=fa, n_ubatch=ub)
    for ub in (1024, 2048, 4096)
    for c, n, fa in ((8192, 1, "auto"), (8192, 4, "off"), (4096, 3, "auto"), (16384, 1, "off"))
]


# The RWKV families' ubatches: 64-2048 tokens (llama.cpp's default n_batch, the most memfit forecasts), 1, 3, 4
# and 8 sequences, flash attention off, and odd contexts whose ubatch is the context rounded to the sequences.
RWKV_UBATCHES = [
    _s(8192, n, fa=fa, n_ubatch=ub)
    for ub in (64, 128, 256, 512, 1024, 2048)
    for n, fa in ((1, "auto"), (3, "auto"), (4, "auto"), (8, "auto"), (1, "off"), (8, "off"))
] + [_s(1000, 3, n_ubatch=1024), _s(1000, 7, n_ubatch=2048)]
RWKV = ("rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7")
# The delta-net families (src/models/delta-net-base.cpp's users): gated delta net and Kimi delta attention.
DELTA_NET = ("qwen3next", "qwen35", "qwen35moe", "qwen35-mtp", "kimi-linear", "kimi-k3", "bailingmoe3")
HYBRIDS = ("falcon-h1", "nemotron-h", "nemotron-h-moe", "nemotron-h-moe-latent", "plamo2", "lfm2moe")  # Mamba hybrids
# The published RWKV shapes' dry runs: the default context and ubatch, 4 and 8 sequences, a 2048-token ubatch over
# 32k tokens, a 128-token ubatch, and a 4096-token request (capped at n_batch 2048).
RWKV_SHAPE_RUNS = [
    _s(4096, 1),
    _s(4096, 4),
    _s(32768, 1, fa="off", n_ubatch=2048),
    _s(32768, 8, n_ubatch=2048),
    _s(8192, 2, n_ubatch=128),
    _s(8192, 1, n_ubatch=4096),
]
# The attention decoders rebuilt node for node after the first ones: their tiny models' graph dumps.
ATTN_DUMPS = ("cohere2-swa", "gemma4-shared", "gemma4-moe", "gemma4-ple", "llama-embed")
MORE_DUMPS = (
    "starcoder2", "smollm3", "olmo2-swa", "cohere2moe-scal", "exaone4-64-key", "exaone4-4-key", "llama4-chunked",
    "llama4-nochunk", "afmoe-swa", "laguna-swa", "laguna-full",
)  # fmt: skip
# The sparse-attention families: DeepSeek-V3.2's and GLM-5's lightning indexer (DSA), MiniMax-01's lightning attention;
# their graph dumps, and their runs at MLA_UBATCH's ubatches, streams and caches (allocated: MiniMax-01's last reserve,
# over one sequence, is not in a no_alloc dry run's size); the published shapes of DeepSeek-V3.2 and MiniMax-Text-01 in
# MLA_SHAPE_RUNS' dry runs (MiniMax-Text-01's over one sequence only, where the dry run's reserve is the last one's)
DSA_MODELS = ("deepseek32", "deepseek32-nextn", "glm-dsa-types", "glm-dsa-52")
LIGHTNING_MODELS = ("minimax01",)
# qwen4exp's (tools/families/recurrent.py: dense attention, the PLE embedding, Qwen3.8-Flash-Next's QSA): FULL's runs
# and the delta-net families' ubatches.
QWEN4EXP_RUNS = FULL + DELTA_NET_UBATCHES
# The published delta-net shapes' dry runs: the default context and ubatch with f16 and q8_0 caches, 4 and 8
# sequences over 32k tokens at ubatches 1024-2048, flash attention off, a 128-token ubatch, a 4096-token request
# (capped at n_batch 2048), and 3 sequences over a context below the ubatch.
DELTA_NET_SHAPE_RUNS = [
    _s(4096, 1),
    _s(4096, 1, "q8_0"),
    _s(32768, 1, fa="off", n_ubatch=2048),
    _s(32768, 4, n_ubatch=2048),
    _s(32768, 8, n_ubatch=1024),
    _s(32768, 4, fa="off"),
    _s(8192, 2, n_ubatch=128),
    _s(8192, 1, n_ubatch=4096),
    _s(1000, 3, n_ubatch=2048),
]
# Rollback snapshots (n_rs_seq, llama-server's draft length under MTP / EAGLE3 / DFlash / DSpark speculation) on the
# published shapes of the architectures that keep them, in dry runs: 1 to 4 snapshots, 1 to 4 sequences, ubatches
# 8 to 1024 (8 over 4 sequences: fewer tokens a sequence than slots), flash attention on and off.
ROLLBACK_MODELS = (
    "qwen3.5-4b-shape",
    "qwen3.5-35b-a3b-shape",
    "ling-3.0-tiny-shape",
    "nemotron-h-8b-shape-f16",
    "nemotron-3-nano-30b-a3b-shape-f16",
    "lfm2-8b-a1b-shape-f16",
)
ROLLBACK_RUNS = [
    _s(4096, 1, n_rs_seq=1),
    _s(4096, 1, n_rs_seq=4),
    _s(8192, 2, n_ubatch=1024, n_rs_seq=2),
    _s(8192, 2, fa="off", n_rs_seq=3),
    _s(4096, 4, n_ubatch=8, n_rs_seq=4),
]
# deepseek4's settings beyond results_rec's: rollback snapshots (llama_kv_cache_dsv4's restore and snapshot inputs)
# at 1 to 3 snapshots, 1 to 4 sequences, ubatches 512 to 2048, flash attention on and off, a q8_0 cache; an F32
# cache (build_attn_mha casts K and V to F16 under flash attention) with flash attention on and off; and a q8_0
# cache with flash attention off, which llama.cpp refuses (deepseek4's K and V types must match: a quantized V).
DSV4_RUNS = [
    _s(4096, 1, n_rs_seq=1),
    _s(8192, 4, fa="off", n_rs_seq=3),
    _s(8192, 2, "q8_0", n_rs_seq=2),
    _s(4096, 3, n_ubatch=1024, n_rs_seq=1),
    _s(8192, 1, n_ubatch=2048, n_rs_seq=2),
    _s(2048, 1, "f32"),
    _s(8192, 4, "f32"),
    _s(4096, 2, "f32", fa="off"),
    _s(8192, 2, "f32", n_ubatch=1024),
    _s(4096, 2, "f32", n_rs_seq=2),
    _s(4096, 1, "q8_0", fa="off"),
    _s(8192, 2, "q8_0", fa="off", n_ubatch=1024),
]
# Their reserved graphs node by node: snapshots with flash attention on and off, an F32 cache with it on and off.
DSV4_DUMPS = [_s(2048, 2, n_rs_seq=2), _s(2048, 4, "f32"), _s(4096, 2, "f32", fa="off", n_rs_seq=1)]
# The four real-scale shapes of the first measurements.
SCALE_SHAPES = ("llama31-8b-shape-q4_0", "gemma3-4b-shape-q4_0", "qwen3-30b-a3b-shape-q4_0", "mamba2-2.7b-shape-f16")


# One sequence's saved state after T tokens (probe state_tokens=T): llama_state_seq_get_size, a llama-server prompt
# cache entry, and llama_state_seq_get_size_ext(PARTIAL_ONLY), a context checkpoint. T below and past the sliding
# windows, 1 to 4 streams (each stream's cell count is in the state), a unified cache, flash attention off (V
# transposed) and q8_0 caches.
STATE_SEQ = [
    _s(2048, 1, state_tokens=700),
    _s(4096, 4, fa="off", state_tokens=1000),
    _s(4096, 2, "q8_0", state_tokens=300),
    _s(4096, 4, unified=1, state_tokens=900),
    _s(8192, 1, state_tokens=3000),
]
STATE_SEQ_MODELS = (
    # plain and MoE, MLA, sliding (standard and chunked), hybrids (M-RoPE's cell positions: qwen35), recurrent
    ("public", ("llama-gqa-f16", "llama-gqa-q8_0", "qwen3-f16", "qwen3moe-f16", "gemma3-swa-f16", "gemma2-swa-f16")),
    ("public", ("granitehybrid-f16", "lfm2-f16", "mamba2-f16")),
    ("attention", ("deepseek2-mla", "cohere2-swa", "phi3-swa")),
    ("more", ("llama4-chunked",)),
    ("recurrent", ("jamba", "qwen35", "qwen3next", "mamba", "rwkv6", "rwkv7", "falcon-h1")),
)


# llama.cpp's fitter (common_fit_params, probe fit_used=B): the context llama-server's --fit chooses for n_ctx 0 when
# the host may use B bytes (its margin the rest of the host's memory): 4 streams over a unified cache and 2 split
# streams, B from below the minimum context's projection to above the trained context's.
FIT = [
    _s(2048, 4, unified=1, fit_used=48 << 20),
    _s(2048, 4, unified=1, fit_used=128 << 20),
    _s(2048, 2, fit_used=96 << 20),
    _s(2048, 2, fit_used=384 << 20),
]
# The same under --spec-type draft-mtp (mtp_ctx=1): common_init_result fits the MTP draft context with the model
# (common_fit_extra_model, its context and compute at each n_ctx tried, the weights shared), over budgets that keep,
# reduce and give up.
FIT_MTP = [s | {"mtp": 1, "mtp_ctx": 1} for s in [*FIT, _s(2048, 1, fit_used=16 << 20), _s(2048, 1, fit_used=2 << 30)]]
FIT_MODELS = (
    ("public", ("llama-gqa-f16", "llama-gqa-q4_0", "qwen3-f16", "gemma3-swa-f16", "granitehybrid-f16", "mamba2-f16")),
    ("attention", ("deepseek2-mla",)),
)


def _models(groups: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, Callable[[], Model]]:
    """The writers of the models `groups` names, by family set."""
    sets = {"public": PUBLIC_SET, "attention": attention.FAMILY_SET, "more": more.FAMILY_SET}
    sets["recurrent"] = recurrent.FAMILY_SET
    return {n: sets[where][n] for where, names in groups for n in names}


def _subset(models: dict[str, Callable[[], Model]], *names: str) -> dict[str, Callable[[], Model]]:
    return {n: models[n] for n in names}


PLAIN_MODELS = plain.FAMILY_SET | _subset(more.FAMILY_SET, "plm")  # the models of PLAIN_RUNS


@dataclass(frozen=True)
class TruthFile:
    """How one tests/data file was measured."""

    models: dict[str, Callable[[], Model]]
    settings: list[Settings] | None  # None: each model's recorded settings
    extra: str = ""
    decode: int = 32
    label: str = LABEL
    cpu_variant: str = "haswell"  # the AVX2 host the tiny models were measured on loaded this one
    tags: Callable[[str, Settings], dict[str, Any]] | None = None  # a row's own fields, by model and settings


# llama-server's target under --spec-type draft-mtp (mtp=1, the probe's: loaded with load_mtp, nextn embeddings unmasked
# after init, the output buffer and the compute buffer read after decoding a 512-token prompt, the first
# output_reserve and graph that see them): two models whose files hold their NextN layer's tensors (qwen35's MTP
# block, bailingmoe3's) and three whose files hold the trunk only (llama.cpp does not require the NextN tensors
# there; deepseek2's, glm4moe's and mimo2's graphs keep every row of the last layer under unmasked nextn
# embeddings); contexts below and above n_batch's 2048 (n_batch capped by the context), 1 to 4 sequences, a q8_0
# cache, flash attention off, a 128-token ubatch.
MTP_RUNS = [
    _s(1000, 1, mtp=1),
    _s(4096, 2, mtp=1),
    _s(8192, 4, "q8_0", mtp=1),
    _s(2048, 1, fa="off", n_ubatch=128, mtp=1),
]

# llama-server's MTP draft context beside that target (mtp_ctx=1, the probe's: common_speculative_init_result's
# second context on the same model, ctx_type MTP, the target's n_ctx, no rollback snapshots; its memory module (the
# NextN layer's KV cache only), its compute buffer, and its output buffer after a draft step (each sequence one token
# with logits, masked nextn embeddings)): MTP_RUNS' settings, a unified cache and a 2048-token ubatch beside them.
MTP_CTX_RUNS = [s | {"mtp_ctx": 1} for s in MTP_RUNS] + [
    _s(8192, 4, unified=1, mtp=1, mtp_ctx=1),
    _s(4096, 1, n_ubatch=2048, mtp=1, mtp_ctx=1),
]
# The draft context's own settings (llama-server's --spec-draft-type-k/-v, alias --cache-type-k-draft/-v-draft, and
# --no-spec-draft-backend-sampling; the probe's type_k_draft, type_v_draft, draft_sampling=0): q8_0 and f32 caches,
# a q8_0 K beside an f16 V with flash attention off (accepted), a q8_0 V with it off (the draft context refused:
# llama-server stops), the draft's sampling left on the host, 1 to 4 sequences.
MTP_DRAFT_SETTING_RUNS = [
    _s(4096, 2, mtp=1, mtp_ctx=1) | dict(type_k_draft="q8_0", type_v_draft="q8_0"),
    _s(8192, 4, mtp=1, mtp_ctx=1) | dict(type_k_draft="q8_0", type_v_draft="q8_0", draft_sampling=0),
    _s(2048, 1, mtp=1, mtp_ctx=1) | dict(type_k_draft="f32", type_v_draft="f32"),
    _s(2048, 1, fa="off", mtp=1, mtp_ctx=1) | dict(type_k_draft="q8_0"),
    _s(2048, 1, fa="off", mtp=1, mtp_ctx=1) | dict(type_v_draft="q8_0"),
    _s(4096, 2, mtp=1, mtp_ctx=1, draft_sampling=0),
]
# An F32 cache: both types f32 and K alone, 1 and 4 streams, flash attention on and off, a unified cache.
F32_CACHE_RUNS = [
    _s(2048, 1, "f32"),
    _s(8192, 4, "f32"),
    _s(4096, 2, "f32", fa="off"),
    _s(8192, 4, "f32", unified=1),
    _s(4096, 1) | dict(type_k="f32"),
]
# The same on published shapes with their MTP block (dry runs): contexts 4k to 64k, 1 to 4 sequences, a q8_0 cache,
# flash attention off, ubatches 512 to 2048.
MTP_CTX_SHAPE_RUNS = [
    _s(4096, 1, mtp=1, mtp_ctx=1),
    _s(32768, 4, "q8_0", mtp=1, mtp_ctx=1),
    _s(8192, 2, fa="off", n_ubatch=1024, mtp=1, mtp_ctx=1),
    _s(65536, 1, n_ubatch=2048, mtp=1, mtp_ctx=1),
]
# The draft's reserved graph dumped (graph=1): a 512-token ubatch of one sequence, 128-token ubatches over four without
# flash attention
MTP_DUMPS = [_s(512, 1, mtp=1, mtp_ctx=1), _s(2048, 4, fa="off", n_ubatch=128, mtp=1, mtp_ctx=1)]


def _mtp_ctx(models: dict[str, Callable[[], Model]], whose: str) -> TruthFile:
    """`whose` target and its MTP draft context at MTP_CTX_RUNS, a 512-token prompt decoded, then a draft step."""
    label = f"{LABEL}, {whose} target and MTP draft context under --spec-type draft-mtp"
    return TruthFile(models, MTP_CTX_RUNS, decode=512, label=label)


# llama-server's verification batch (verify=D, the probe's: each sequence's sampled token and D draft tokens decoded
# together, every one with logits, at most n_batch tokens; the output buffer read after the decode, whose
# output_reserve(n_outputs_all) grows it): 1 to 16 sequences, drafts of 3 to 200 tokens, a unified cache, and 16 x
# 201 outputs past n_batch's 2048, which caps the batch.
DRAFT_RUNS = [
    _s(4096, 4, verify=3),
    _s(2048, 1, verify=16),
    _s(8192, 4, unified=1, verify=8),
    _s(32768, 16, verify=200),
]


# llama-server's output limit (outputs_max=N, the probe's: llama_context_params.n_outputs_max as server_output_limits
# sets it before the context is made, min(n_batch, n_parallel x (1 + n_draft))), so llama_context::sched_reserve
# reserves the prompt graph with min(n_ubatch, N) outputs instead of every token's: one sequence, and four over a
# unified cache (llama-server's -np auto), drafts of 0 and 3 tokens (caps 1, 4 and 16), ubatch 512 and 2048, flash
# attention on and off; two uncapped runs (a plain context's n_batch) beside them.
OUTPUT_CAP_RUNS = [
    _s(8192, n_seq, fa=fa, unified=unified, n_ubatch=ub, outputs_max=n_seq * (1 + draft))
    for (n_seq, unified), draft, ub, fa in itertools.product(((1, 0), (4, 1)), (0, 3), (512, 2048), ("auto", "off"))
] + [_s(8192, 4, unified=1), _s(8192, 4, unified=1, n_ubatch=2048)]
# The same cap over real allocation and a decode: a prompt (one output), or llama-server's verification batch
# (verify=3) under the cap it sets for it, the compute and output buffers read after the decode.
OUTPUT_CAP_DECODES = [
    _s(4096, 1, outputs_max=1),
    _s(4096, 1, fa="off", outputs_max=1),
    _s(4096, 1, verify=3, outputs_max=4),
    _s(4096, 4, unified=1, outputs_max=4),
    _s(4096, 4, n_ubatch=2048, outputs_max=4),
    _s(4096, 4, unified=1, verify=3, outputs_max=16),
    _s(4096, 4, unified=1, fa="off", n_ubatch=2048, verify=3, outputs_max=16),
]


# llama-server serving embeddings (embeddings=1, the probe's: llama_context_params.embeddings as --embedding sets it,
# with llama-server's n_batch cut to the ubatch (server.cpp) and its output limit that n_batch (server_output_limits:
# { n_batch, 1 }), so every token of the reserved ubatch is an output): one sequence and four over a unified cache,
# flash attention off, a 2048 ubatch; llama-server's plain output limit beside them (no embeddings, four slots).
EMBEDDING_RUNS = [
    _s(8192, 1, n_batch=512, outputs_max=512, embeddings=1),
    _s(8192, 4, unified=1, n_batch=512, outputs_max=512, embeddings=1),
    _s(8192, 1, fa="off", n_batch=512, outputs_max=512, embeddings=1),
    _s(8192, 4, unified=1, n_batch=2048, n_ubatch=2048, outputs_max=2048, embeddings=1),
    _s(8192, 4, unified=1, outputs_max=4),
]
# The same over real allocation, every token of a prompt of n_batch tokens decoded as an output (the probe sets
# them all, as llama-server does for an embedding task), the output buffer read after the decode.
EMBEDDING_DECODES = [
    _s(4096, 1, n_batch=512, outputs_max=512, embeddings=1),
    _s(4096, 4, unified=1, n_batch=512, outputs_max=512, embeddings=1),
    _s(4096, 1, fa="off", n_batch=256, n_ubatch=256, outputs_max=256, embeddings=1),
]


# A model without a memory module (llama_model::create_memory returns none), decoded through llama_context::encode:
# a plain context (n_batch 2048, uncapped by a non-causal model's context) with a 512 and a 256 ubatch, one and four
# sequences (512 cells each, the BERTs' trained context), without embeddings and with (embeddings=1); each run a
# prompt of a whole ubatch (decode=N: encode() takes the batch in one ubatch, every token an output), the output
# buffer read after the decode.
ENCODE_DECODES = [
    _s(512 * n_seq, n_seq, n_ubatch=ub, decode=ub) | more_
    for more_, n_seq, ub in itertools.product(({}, {"embeddings": 1}), (1, 4), (512, 256))
]
# The same models under llama-server without --embedding: its output limit is its slots' outputs (outputs_max=n_seq,
# server_output_limits), so the graph llama.cpp reserves has that many outputs; it refuses every completion of a
# model without memory ("the current context does not logits computation") and every embedding task, so the one
# decode such a server makes is common_init_from_params' warmup (warmup=1: the vocabulary's BOS and EOS, whichever
# it has), the output buffer read after it. One slot (a limit of one output), and one slot drafting three tokens
# (four) and four slots (four); ubatch 512 and 256. The writers' WordPiece vocabulary names a BOS and no EOS (one
# token); a conversion's (convert_hf_to_gguf's special vocabulary takes BERT's [SEP] as its EOS) names both, and
# two tokens past a limit of one abort in output_reserve (GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)).
ENCODE_SERVER_DECODES = [
    _s(512 * n_seq, n_seq, n_ubatch=ub, outputs_max=limit, warmup=1)
    for (n_seq, limit), ub in itertools.product(((1, 1), (1, 4), (4, 4)), (512, 256))
]


def _with_eos(make: Callable[[], Model]) -> Callable[[], Model]:
    """A WordPiece writer's model whose vocabulary names an EOS too, its [SEP] (id 3), as a BERT's conversion does."""

    def model() -> Model:
        m = make()
        m.kv["tokenizer.ggml.eos_token_id"] = 3
        return m

    return model


ENCODE_MODELS = _subset(attention.FAMILY_SET, "bert-embd", "nomic-bert-embd") | _subset(
    shapes.FAMILY_SET, "bert-large-shape"
)
ENCODE_SERVER_MODELS = ENCODE_MODELS | {
    "bert-embd-eos": _with_eos(attention.FAMILY_SET["bert-embd"]),
    "bert-large-shape-eos": _with_eos(shapes.FAMILY_SET["bert-large-shape"]),
}


def _pooled(make: Callable[[], Model], pooling: int) -> Callable[[], Model]:
    """A writer's model with `<arch>.pooling_type` set (llama_pooling_type: 1 mean, 2 cls, 3 last, 4 rank), as an
    embedding model's conversion writes it (Qwen3-Embedding's last, a mean-pooled decoder)."""

    def model() -> Model:
        m = make()
        m.arch_kv(pooling_type=pooling)
        return m

    return model


EMBEDDING_SHAPES = (
    _subset(SHAPE_SET, "llama31-8b-shape-q4_0", "gemma3-4b-shape-q4_0")
    | {
        "llama31-8b-shape-q4_0-last": _pooled(SHAPE_SET["llama31-8b-shape-q4_0"], 3),
        "llama31-8b-shape-q4_0-mean": _pooled(SHAPE_SET["llama31-8b-shape-q4_0"], 1),
        "qwen3-30b-a3b-shape-q4_0-cls": _pooled(SHAPE_SET["qwen3-30b-a3b-shape-q4_0"], 2),
    }
    | _subset(shapes.FAMILY_SET, "bert-large-shape", "nomic-bert-shape")
)
EMBEDDING_MODELS = (
    _subset(PUBLIC_SET, "qwen3-f16", "llama-gqa-q8_0")
    | {
        "qwen3-f16-last": _pooled(PUBLIC_SET["qwen3-f16"], 3),
        "qwen3-f16-mean": _pooled(PUBLIC_SET["qwen3-f16"], 1),
    }
    | _subset(attention.FAMILY_SET, "llama-embed", "bert-embd", "nomic-bert-embd")
)


# llama-server's --pooling (the probe's pooling=NAME: llama_context_params.pooling_type, as
# common_context_params_to_llama copies it), in dry runs: serving embeddings (embeddings=1, n_batch the ubatch, the
# output limit that n_batch) with every pooling named over the model's own, at a 512 ubatch (one sequence) and a 2048
# one (four over a unified cache); and a pooling alone (embeddings=0): server_output_limits lifts the output limit to
# llama-server's n_batch, 2048, which server.cpp leaves uncut without --embedding, and cparams.embeddings stays false.
POOLING_NAMES = ("none", "mean", "cls", "last", "rank")
POOLING_RUNS = (
    [_s(8192, 1, n_batch=512, outputs_max=512, embeddings=1) | {"pooling": name} for name in POOLING_NAMES]
    + [
        _s(8192, 4, unified=1, n_batch=2048, n_ubatch=2048, outputs_max=2048, embeddings=1) | {"pooling": name}
        for name in ("mean", "cls", "rank")
    ]
    + [
        _s(8192, 4, unified=1, outputs_max=2048) | {"pooling": "mean"},
        _s(8192, 4, unified=1, n_ubatch=2048, outputs_max=2048) | {"pooling": "rank"},
    ]
)
# The same over real allocation (a prompt of n_batch tokens, every one an output under embeddings): --rerank's rank
# and a mean over the model's own, and a pooling alone (its prompt decoded with the last token's logits).
POOLING_DECODES = [
    _s(4096, 1, n_batch=512, outputs_max=512, embeddings=1) | {"pooling": "rank"},
    _s(4096, 4, unified=1, n_batch=512, outputs_max=512, embeddings=1) | {"pooling": "rank"},
    _s(4096, 1, n_batch=512, outputs_max=512, embeddings=1) | {"pooling": "mean"},
    _s(4096, 4, unified=1, outputs_max=2048) | {"pooling": "last"},
]


def _rank_head(make: Callable[[], Model], labels: int, cls: bool) -> Callable[[], Model]:
    """A writer's model with the classification head a reranker's conversion writes: cls and cls.output with their
    biases (a BERT reranker's, `cls`), or cls.output alone (Qwen3-Reranker's), `labels` classifier outputs
    (`<arch>.classifier.output_labels`, hparams.n_cls_out)."""

    def model() -> Model:
        m = make()
        n_embd = int(m.kv[f"{m.arch}.embedding_length"])
        if cls:
            m.tensor("cls.weight", [n_embd, n_embd], QT.F16)
            m.tensor("cls.bias", [n_embd], QT.F32)
        m.tensor("cls.output.weight", [n_embd, labels], QT.F16)
        if cls:
            m.tensor("cls.output.bias", [labels], QT.F32)
        m.arch_kv(classifier__output_labels=[f"LABEL_{i}" for i in range(labels)])
        return m

    return model


def _dense_out(make: Callable[[], Model], width: int) -> Callable[[], Model]:
    """A writer's model with the dense projection a sentence-transformers conversion writes after pooling (LFM2-ColBERT:
    dense_2 and its bias, `width` outputs, `<arch>.embedding_length_out`, hparams.n_embd_out_impl)."""

    def model() -> Model:
        m = make()
        n_embd = int(m.kv[f"{m.arch}.embedding_length"])
        m.tensor("dense_2.weight", [n_embd, width], QT.F16)
        m.tensor("dense_2.bias", [width], QT.F32)
        m.arch_kv(embedding_length_out=width)
        return m

    return model


# build_dense_out after pooling (lfm2 creates dense_2 and its bias TENSOR_NOT_REQUIRED): a tiny LFM2 with a
# 64-wide projection, its own pooling (none: every token projected) and mean, served as embeddings
DENSE_OUT_MODELS = {
    "lfm2-f16-dense": _dense_out(PUBLIC_SET["lfm2-f16"], 64),
    "lfm2-f16-dense-mean": _pooled(_dense_out(PUBLIC_SET["lfm2-f16"], 64), 1),
}
POOLING_SHAPES = _subset(SHAPE_SET, "llama31-8b-shape-q4_0") | {
    "bert-large-shape": shapes.FAMILY_SET["bert-large-shape"],
    "bert-large-shape-rank": _rank_head(shapes.FAMILY_SET["bert-large-shape"], 2, cls=True),
}
POOLING_MODELS = {"qwen3-f16-rank": _rank_head(PUBLIC_SET["qwen3-f16"], 1, cls=False)}
# The reserved graph node by node under rank (Qwen3-Reranker's head and soft_max; a BERT reranker's cls and
# cls.output, two labels) and mean, one sequence and four
POOLING_DUMP_MODELS = POOLING_MODELS | {"bert-embd-rank": _rank_head(attention.FAMILY_SET["bert-embd"], 2, cls=True)}
POOLING_DUMPS = [
    _s(512, 1, n_batch=512, outputs_max=512, embeddings=1) | {"pooling": name} for name in ("rank", "mean")
] + [_s(2048, 4, unified=1, n_batch=512, outputs_max=512, embeddings=1) | {"pooling": "rank"}]


def _graph_dumps(models: dict[str, Callable[[], Model]], settings: list[Settings]) -> TruthFile:
    """The reserved prompt graph node by node (probe graph=1: op, type, shape, view, offset in the compute buffer)."""
    return TruthFile(models, settings, extra="graph=1", decode=0, label=LABEL + ", reserved graph")


DSV4_SET = _subset(recurrent.FAMILY_SET, "deepseek4") | recurrent.DEEPSEEK4_VARIANTS  # plain and hash-routed
# Measured files regenerate does not make: several CPU variants in one file (each row's label names its own).
NOT_REGENERATED = ("results_variants_dryrun.jsonl",)
TRUTH_FILES: dict[str, TruthFile] = {
    "results_probe.jsonl": TruthFile(PUBLIC_SET, FULL, label=LABEL.replace("(llama.cpp ", "(llama.cpp tag ")),
    "results_skylakex_probe.jsonl": TruthFile(
        PUBLIC_SET,
        FULL,
        label=LABEL + ", default CPU variant on an AVX-512 host (skylakex)",
        cpu_variant="skylakex",
        tags=lambda model, settings: {"cpu_variant": "skylakex"},
    ),
    "results_amx_probe.jsonl": TruthFile(
        PUBLIC_SET,
        FULL,
        decode=8,
        label="node-llama-cpp 3.21.1 default CPU variant (sapphirerapids, AMX)",
        cpu_variant="sapphirerapids",
    ),
    "results_attn.jsonl": TruthFile(attention.FAMILY_SET, FULL),
    "results_attn_ubatch.jsonl": TruthFile(
        _subset(attention.FAMILY_SET, "phi3-swa", "openelm-arr", "deci-arr"), ATTN_UBATCH
    ),
    "results_mla_ubatch.jsonl": TruthFile(
        _subset(attention.FAMILY_SET, *MLA_MODELS) | _subset(more.FAMILY_SET, *NEXTN_MODELS), MLA_UBATCH
    ),
    "results_mla_shapes_dryrun.jsonl": TruthFile(
        _subset(shapes.FAMILY_SET, *MLA_SHAPES),
        MLA_SHAPE_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_sparse_ubatch.jsonl": TruthFile(
        _subset(more.FAMILY_SET, *DSA_MODELS) | _subset(recurrent.FAMILY_SET, *LIGHTNING_MODELS), MLA_UBATCH
    ),
    "results_sparse_shapes_dryrun.jsonl": TruthFile(
        _subset(shapes.FAMILY_SET, "deepseek-v3.2-shape"),
        MLA_SHAPE_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_lightning_shapes_dryrun.jsonl": TruthFile(
        _subset(shapes.FAMILY_SET, "minimax-text-01-shape"),
        [s for s in MLA_SHAPE_RUNS if s["n_seq"] == 1],
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_attn_family_ubatch.jsonl": TruthFile(
        _subset(attention.FAMILY_SET, "cohere2-swa", "gemma4-shared", "llama-embed", "gemma4-moe", "gemma4-ple")
        | _subset(more.FAMILY_SET, *ATTN_FAMILY_MODELS),
        ATTN_FAMILY_UBATCH,
    ),
    "results_plain_families.jsonl": TruthFile(PLAIN_MODELS, PLAIN_RUNS),
    "results_attn_swafull.jsonl": TruthFile(
        _subset(attention.FAMILY_SET, "gemma3n-shared", "gemma4-shared", "gptoss-swa-moe", "cohere2-swa"),
        SWA_FULL,
        extra="swa_full=1",
    ),
    "results_rec.jsonl": TruthFile(recurrent.FAMILY_SET | recurrent.DEEPSEEK4_VARIANTS, FULL + RECURRENT_EXTRA),
    "results_mamba1_ubatch.jsonl": TruthFile(_subset(recurrent.FAMILY_SET, "mamba", "jamba"), MAMBA1_UBATCHES),
    "results_hybrid_ubatch.jsonl": TruthFile(_subset(recurrent.FAMILY_SET, *HYBRIDS), HYBRID_UBATCHES),
    "results_more.jsonl": TruthFile(more.FAMILY_SET, None),
    "results_delta_net_ubatch.jsonl": TruthFile(
        _subset(recurrent.FAMILY_SET, *DELTA_NET) | recurrent.DELTA_NET_VARIANTS, DELTA_NET_UBATCHES
    ),
    "results_qwen4exp_ubatch.jsonl": TruthFile(
        _subset(recurrent.FAMILY_SET, "qwen4exp", "qwen4exp-ple") | recurrent.QWEN4EXP_VARIANTS, QWEN4EXP_RUNS
    ),
    "results_rwkv.jsonl": TruthFile(_subset(recurrent.FAMILY_SET, *RWKV), RWKV_UBATCHES),
    "results_rwkv_dryrun.jsonl": TruthFile(
        recurrent.RWKV_SHAPES,
        RWKV_SHAPE_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_delta_net_dryrun.jsonl": TruthFile(
        recurrent.DELTA_NET_SHAPES,
        DELTA_NET_SHAPE_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_shapes_dryrun.jsonl": TruthFile(
        _subset(SHAPE_SET, *SCALE_SHAPES) | _subset(shapes.FAMILY_SET, *list(shapes.FAMILY_SET)[:8]),
        SHAPES,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", no_alloc dry run",
        cpu_variant="sapphirerapids",
    ),
    "results_mamba1_shapes_dryrun.jsonl": TruthFile(
        recurrent.SHAPE_SET,
        SHAPES + SHAPES_PAST_512,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_hybrid_shapes_dryrun.jsonl": TruthFile(
        recurrent.HYBRID_SHAPES,
        SHAPES + SHAPES_PAST_512 + [_s(16384, 7, fa="off", n_ubatch=1024)],
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_rollback_dryrun.jsonl": TruthFile(
        _subset(recurrent.DELTA_NET_SHAPES | recurrent.HYBRID_SHAPES, *ROLLBACK_MODELS),
        ROLLBACK_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_floors_dryrun.jsonl": TruthFile(
        _subset(SHAPE_SET, *SCALE_SHAPES) | shapes.FAMILY_SET,
        None,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_attn_family_dryrun.jsonl": TruthFile(
        attn_scale.SHAPES,
        ATTN_SHAPE_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "graph_dumps.jsonl": _graph_dumps(
        _subset(PUBLIC_SET, "llama-gqa-f16", "gemma3-swa-f16", "qwen3moe-f16", "mamba2-f16", "granitehybrid-f16")
        | _subset(attention.FAMILY_SET, "command-r")
        | _subset(recurrent.FAMILY_SET, "mamba", "jamba")
        | _subset(attention.FAMILY_SET, "gemma3n-shared")
        | _subset(attention.FAMILY_SET, "phi3-swa", "openelm-arr", "deci-arr")
        | _subset(recurrent.FAMILY_SET, *RWKV)
        | _subset(recurrent.FAMILY_SET, *DELTA_NET)
        | recurrent.DELTA_NET_VARIANTS
        | _subset(recurrent.FAMILY_SET, *HYBRIDS)
        | _subset(attention.FAMILY_SET, *MLA_MODELS, "deepseek2-mla-nextn")
        | _subset(more.FAMILY_SET, *NEXTN_MODELS)
        | _subset(attention.FAMILY_SET, *ATTN_DUMPS)
        | _subset(more.FAMILY_SET, *MORE_DUMPS)
        | _subset(more.FAMILY_SET, *DSA_MODELS)
        | _subset(recurrent.FAMILY_SET, *LIGHTNING_MODELS)
        | PLAIN_MODELS
        | _subset(recurrent.FAMILY_SET, "qwen4exp", "qwen4exp-ple")
        | recurrent.QWEN4EXP_VARIANTS
        | DSV4_SET,
        [_s(512, 1), _s(2048, 4, fa="off")],
    ),
    "graph_dumps_dsv4.jsonl": _graph_dumps(DSV4_SET, DSV4_DUMPS),
    # the MTP draft context's reserved DECODER_MTP graph beside the target's (mtp_ctx=1 graph=1)
    "graph_dumps_mtp.jsonl": _graph_dumps(
        _subset(recurrent.FAMILY_SET, "qwen35-mtp", "bailingmoe3")
        | recurrent.MTP_MODELS
        | attention.MTP_MODELS
        | more.MTP_MODELS,
        [_s(512, 1, mtp=1, mtp_ctx=1), _s(2048, 4, fa="off", n_ubatch=128, mtp=1, mtp_ctx=1)],
    ),
    # the same for mimo2 and step35, whose draft caches are llama_kv_cache_iswa (their NextN layer full, sliding)
    "graph_dumps_mtp_swa.jsonl": _graph_dumps(
        more.MTP_ISWA_MODELS, [_s(512, 1, mtp=1, mtp_ctx=1), _s(2048, 4, fa="off", n_ubatch=128, mtp=1, mtp_ctx=1)]
    ),
    # the same for deepseek32 and glm-dsa (their draft's NextN-only cache, dense MLA without the indexer)
    "graph_dumps_mtp_dsa.jsonl": _graph_dumps(more.DSA_MTP_MODELS, MTP_DUMPS),
    # the same for nemotron_h_moe (its draft's NextN-only cache, the NoPE attention and the experts)
    "graph_dumps_mtp_nemotron.jsonl": _graph_dumps(_subset(recurrent.FAMILY_SET, "nemotron-h-moe"), MTP_DUMPS),
    # the same for hy_v3 (its draft's NextN-only cache, q/k-normed attention and the experts)
    "graph_dumps_mtp_hyv3.jsonl": _graph_dumps(more.HY_V3_MTP_MODELS, MTP_DUMPS),
    # the same for cohere2moe (its draft's llama_kv_cache_iswa, the NextN layer in the base half; the parallel block)
    "graph_dumps_mtp_cohere2moe.jsonl": _graph_dumps(more.COHERE2MOE_MTP_MODELS, MTP_DUMPS),
    # the same for deepseek4 (its draft's llama_kv_cache_iswa of the NextN layer, K-only attention, hyper-connections)
    "graph_dumps_mtp_dsv4.jsonl": _graph_dumps(recurrent.DEEPSEEK4_MTP_MODELS, MTP_DUMPS),
    "graph_dumps_pooling.jsonl": _graph_dumps(POOLING_DUMP_MODELS, POOLING_DUMPS),
    "graph_dumps_dense_out.jsonl": _graph_dumps(DENSE_OUT_MODELS, EMBEDDING_DECODES[:2]),
    "results_dsv4_dryrun.jsonl": TruthFile(
        DSV4_SET,
        DSV4_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run",
    ),
    "results_wide_ubatch_dryrun.jsonl": TruthFile(
        _subset(attention.FAMILY_SET, "command-r", "command-r-64"),
        WIDE_UBATCH,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", no_alloc dry run",
    ),
    "results_mtp.jsonl": TruthFile(
        _subset(recurrent.FAMILY_SET, "qwen35-mtp", "bailingmoe3")
        | _subset(attention.FAMILY_SET, "deepseek2-mla-nextn")
        | _subset(more.FAMILY_SET, "glm4moe-nextn", "mimo2-nextn"),
        MTP_RUNS,
        decode=512,
        label=LABEL + ", llama-server's target under --spec-type draft-mtp (load_mtp, nextn embeddings)",
    ),
    "results_mtp_ctx.jsonl": TruthFile(
        _subset(recurrent.FAMILY_SET, "qwen35-mtp", "bailingmoe3")
        | recurrent.MTP_MODELS
        | _subset(attention.FAMILY_SET, "deepseek2-mla-nextn")
        | _subset(more.FAMILY_SET, "glm4moe-nextn", "mimo2-nextn")
        | attention.MTP_MODELS
        | more.MTP_MODELS,
        MTP_CTX_RUNS,
        decode=512,
        label=LABEL + ", llama-server's target and its MTP draft context under --spec-type draft-mtp",
    ),
    "results_mtp_ctx_dryrun.jsonl": TruthFile(
        recurrent.MTP_SHAPES | shapes.MTP_SHAPES,
        MTP_CTX_SHAPE_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run, the target and its MTP draft context",
    ),
    "results_mtp_ctx_dsa.jsonl": _mtp_ctx(more.DSA_MTP_MODELS, "deepseek32's and glm-dsa's"),
    "results_mtp_ctx_dsa_dryrun.jsonl": TruthFile(
        shapes.DSA_MTP_SHAPES,
        MTP_CTX_SHAPE_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run, DeepSeek-V3.2's and GLM-5's MTP draft context",
    ),
    "results_mtp_ctx_nemotron.jsonl": _mtp_ctx(_subset(recurrent.FAMILY_SET, "nemotron-h-moe"), "nemotron_h_moe's"),
    "results_mtp_ctx_nemotron_latent.jsonl": TruthFile(
        recurrent.NEMOTRON_LATENT_MTP_MODELS,
        [_s(2048, 1), _s(1000, 1, mtp=1), *MTP_CTX_RUNS[:1], *MTP_CTX_RUNS[3:4]],
        decode=512,
        label=LABEL + ", Nemotron 3 Super's latent experts, the target and its MTP draft context under draft-mtp",
    ),
    "results_mtp_ctx_hyv3.jsonl": _mtp_ctx(more.HY_V3_MTP_MODELS, "hy_v3's"),
    # cohere2moe's, beside its trunk-only file, whose draft graph aborts (GGML_ASSERT on nextn.eh_proj)
    "results_mtp_ctx_cohere2moe.jsonl": _mtp_ctx(
        more.COHERE2MOE_MTP_MODELS | _subset(more.FAMILY_SET, "cohere2moe-arr-nextn"), "cohere2moe's"
    ),
    "results_mtp_ctx_dsv4.jsonl": _mtp_ctx(recurrent.DEEPSEEK4_MTP_MODELS, "deepseek4's"),
    # llama.cpp without load_mtp (no draft-mtp) on files holding their NextN layer: the tensors of it each loader
    # creates without TENSOR_SKIP loaded all the same (ArchRule.nextn_unskipped: deepseek32's and glm-dsa's
    # exp_probs_b, hy_v3's and step35's FFN, cohere2moe's NextN head, a fused ffn_gate_up_exps), the rest skipped
    "results_mtp_unskipped.jsonl": TruthFile(
        more.DSA_MTP_MODELS
        | more.HY_V3_MTP_MODELS
        | _subset(more.MTP_ISWA_MODELS, "step35-mtp")
        | more.COHERE2MOE_MTP_MODELS
        | recurrent.FUSED_MTP_MODELS
        | attention.FUSED_MTP_MODELS,
        [_s(2048, 1), _s(4096, 2, "q8_0"), _s(1000, 1, fa="off", n_ubatch=128)],
    ),
    "results_mtp_headless.jsonl": TruthFile(
        recurrent.MTP_HEADLESS_MODELS | more.MTP_HEADLESS_MODELS, [_s(2048, 1), *MTP_CTX_RUNS[:1]], decode=512
    ),
    # its NextN layer without the head: every block a trunk layer (load_arch_hparams' n_layer_nextn 0), MTP refused
    "results_dsv4_headless.jsonl": TruthFile(
        recurrent.DEEPSEEK4_HEADLESS_MODELS,
        [_s(2048, 1), _s(8192, 4, "q8_0"), _s(4096, 2, fa="off", n_ubatch=128), *MTP_CTX_RUNS[:1]],
        decode=512,
    ),
    # an F32 KV cache (the contract's 4 bytes an element): with flash attention build_attn_mha casts each K and V
    # view to F16 (a copy of the whole view); without it the copies made of a V view keep F32
    "results_f32_cache.jsonl": TruthFile(
        _subset(PUBLIC_SET, "qwen3-f16", "llama-gqa-q8_0", "gemma3-swa-f16")
        | _subset(attention.FAMILY_SET, "deepseek2-mla", "deepseek2-mha"),
        F32_CACHE_RUNS,
    ),
    "results_mtp_draft_settings.jsonl": TruthFile(
        _subset(recurrent.FAMILY_SET, "qwen35-mtp", "bailingmoe3") | recurrent.DEEPSEEK4_MTP_MODELS,
        MTP_DRAFT_SETTING_RUNS,
        decode=512,
        label=LABEL + ", the MTP draft context under its own cache types and host-side sampling",
    ),
    # mimo2's and step35's MTP draft context (llama_kv_cache_iswa over the NextN layer) beside step35's trunk-only
    # file, whose draft graph aborts; and on MiMo-V2-Flash's and Step-3.5-Flash's shapes with their MTP block
    "results_mtp_ctx_swa.jsonl": TruthFile(
        more.MTP_ISWA_MODELS | _subset(more.FAMILY_SET, "step35-nextn"),
        MTP_CTX_RUNS,
        decode=512,
        label=LABEL + ", llama-server's target and its MTP draft context under --spec-type draft-mtp",
    ),
    # plm's flash attention: its V reaches the cache flattened over the tokens, which llama_kv_cache::cpy_v's
    # set_rows asserts on unless the reserved ubatch is one token (the FA probe's n_seq tokens, then the prompt's)
    "results_fa_abort.jsonl": TruthFile(
        _subset(more.FAMILY_SET, "plm"),
        [
            _s(2048, 1, fa="on"),
            _s(2048, 1, fa="on", n_ubatch=1),
            _s(2048, 1, fa="auto", n_ubatch=1),
            _s(2048, 2, fa="auto", n_ubatch=1),
            _s(2048, 2, fa="on", n_ubatch=1),
            _s(2048, 2, fa="off"),
        ],
    ),
    # llama4 without chunked attention (sliding_window 0): the context is made, its first decode aborts (the
    # temperature scale load_arch_hparams leaves 0); with chunked attention the same settings decode
    "results_decode_abort.jsonl": TruthFile(
        _subset(more.FAMILY_SET, "llama4-nochunk", "llama4-chunked"),
        [_s(2048, 1), _s(4096, 2, fa="off"), _s(1000, 1, n_ubatch=128)],
    ),
    # dense projections wider than their loader expects (gemma3 reads no width key; a key that contradicts the file)
    "results_dense_refused.jsonl": TruthFile(attention.DENSE_REFUSED_MODELS, [_s(2048, 1)]),
    # mimo2 files whose MTP block graph_mtp does not build on (Q, K and V apart; routed experts): the draft aborts
    "results_mtp_ctx_asserts.jsonl": TruthFile(
        more.MIMO2_MTP_ASSERTS,
        [_s(1000, 1, mtp=1, mtp_ctx=1), _s(2048, 1, fa="off", n_ubatch=128, mtp=1, mtp_ctx=1)],
        decode=512,
        label=LABEL + ", llama-server's target and its MTP draft context under --spec-type draft-mtp",
    ),
    "results_mtp_ctx_swa_dryrun.jsonl": TruthFile(
        shapes.MTP_ISWA_SHAPES,
        MTP_CTX_SHAPE_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run, the target and its MTP draft context",
    ),
    "results_draft.jsonl": TruthFile(
        _subset(PUBLIC_SET, "qwen3-f16", "llama-gqa-q8_0", "gemma3-swa-f16")
        | _subset(recurrent.FAMILY_SET, "qwen35-mtp"),
        DRAFT_RUNS,
        label=LABEL + ", llama-server's verification batch (every sequence's draft decoded with logits)",
    ),
    # real-scale shapes, dense, sliding-window, MoE, recurrent and hybrid
    "results_output_cap_dryrun.jsonl": TruthFile(
        _subset(SHAPE_SET, *SCALE_SHAPES) | _subset(shapes.FAMILY_SET, "granite-4.0-h-tiny-shape"),
        OUTPUT_CAP_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run, llama-server's n_outputs_max",
    ),
    "results_output_cap.jsonl": TruthFile(
        _subset(PUBLIC_SET, "qwen3-f16", "gemma3-swa-f16", "qwen3moe-f16", "granitehybrid-f16"),
        OUTPUT_CAP_DECODES,
        label=LABEL + ", llama-server's n_outputs_max (its output limit)",
    ),
    # real-scale shapes, without a pooling of their own, with last, mean and cls, and BERT encoders (mean)
    "results_embedding_dryrun.jsonl": TruthFile(
        EMBEDDING_SHAPES,
        EMBEDDING_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run, llama-server serving embeddings",
    ),
    "results_embedding.jsonl": TruthFile(
        EMBEDDING_MODELS,
        EMBEDDING_DECODES,
        decode=512,
        label=LABEL + ", llama-server serving embeddings (a prompt decoded, every token an output)",
    ),
    "results_gemma_embedding.jsonl": TruthFile(
        attention.GEMMA_EMBEDDING_MODELS,
        ENCODE_DECODES,
        decode=512,
        label=LABEL + ", gemma-embedding: no memory module, each run a ubatch encoded",
    ),
    "graph_dumps_gemma_embedding.jsonl": _graph_dumps(
        _subset(attention.GEMMA_EMBEDDING_MODELS, "gemma-embedding", "gemma-embedding-dense"),
        [_s(512, 1, embeddings=1), _s(1024, 4, n_ubatch=256)],
    ),
    "results_dense_out.jsonl": TruthFile(
        DENSE_OUT_MODELS,
        EMBEDDING_DECODES,
        decode=512,
        label=LABEL + ", llama-server serving embeddings through a dense projection after pooling",
    ),
    "results_pooling_dryrun.jsonl": TruthFile(
        POOLING_SHAPES,
        POOLING_RUNS,
        extra="no_alloc=1",
        decode=0,
        label=LABEL + ", haswell CPU variant, no_alloc dry run, llama-server's --pooling",
    ),
    "results_pooling.jsonl": TruthFile(
        POOLING_MODELS,
        POOLING_DECODES,
        decode=512,
        label=LABEL + ", llama-server's --pooling (a prompt decoded)",
    ),
    "results_encode.jsonl": TruthFile(
        ENCODE_MODELS,
        ENCODE_DECODES,
        label=LABEL + ", a model without a memory module decoded (encode(): one ubatch, every token an output)",
    ),
    "results_encode_server.jsonl": TruthFile(
        ENCODE_SERVER_MODELS,
        ENCODE_SERVER_DECODES,
        label=LABEL + ", a model without a memory module under llama-server without embeddings (its warmup decoded)",
    ),
    "results_wide_gemma3n.jsonl": TruthFile(_subset(attention.FAMILY_SET, "gemma3n-shared"), WIDE),
    "results_state_seq.jsonl": TruthFile(
        _models(STATE_SEQ_MODELS),
        STATE_SEQ,
        decode=0,
        label=LABEL + ", one sequence's state after T tokens",
    ),
    "results_fit.jsonl": TruthFile(
        _models(FIT_MODELS),
        FIT,
        decode=0,
        label=LABEL + ", the context common_fit_params chooses",
    ),
    "results_fit_mtp.jsonl": TruthFile(
        _subset(recurrent.FAMILY_SET, "qwen35-mtp", "bailingmoe3") | recurrent.MTP_MODELS,
        FIT_MTP,
        decode=0,
        label=LABEL + ", the context common_fit_params chooses with llama-server's MTP draft context",
    ),
    "results_tiny_real.jsonl": TruthFile(
        tiny_real.FAMILY_SET,
        [s for _, s in tiny_real.SETTINGS],
        decode=tiny_real.DECODE,
        label=tiny_real.LABEL,
        cpu_variant=tiny_real.CPU_VARIANT,
        tags=tiny_real.tags,
    ),
}
