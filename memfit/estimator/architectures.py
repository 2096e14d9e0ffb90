"""llama.cpp's memory layout rules, one entry per architecture.

Each rule reads a model's hyperparameters the way llama.cpp's `llama_model::load_hparams` does and
states which layers own KV cells (and how wide they are, and whether they slide), and which keep a
recurrent state. An architecture that is not in `RULES` has no layout memfit will guess.
"""

from __future__ import annotations

from collections.abc import Callable

from gguf import Keys

from memfit.estimator.errors import EvidenceError
from memfit.estimator.vocabulary import Limit
from memfit.estimator.hparams import HParams
from memfit.estimator.layout import AttentionLayer, Layout

ATTN = Keys.Attention


def head_dims(hp: HParams) -> tuple[int, int]:
    """n_embd_head_k/v: `attention.key_length`/`value_length`, else n_embd / n_head (llama-model.cpp)."""
    n_embd = hp.require_int(Keys.LLM.EMBEDDING_LENGTH)
    n_head = hp.per_layer(ATTN.HEAD_COUNT)[0] if hp.n_layer else 0
    fallback = n_embd // n_head if n_head else 0
    return hp.optional_int(ATTN.KEY_LENGTH, fallback), hp.optional_int(ATTN.VALUE_LENGTH, fallback)


def kv_heads(hp: HParams) -> tuple[int, ...]:
    """n_head_kv(l): `attention.head_count_kv`, scalar or per layer, defaulting to n_head(l)."""
    if hp.has(ATTN.HEAD_COUNT_KV):
        return hp.per_layer(ATTN.HEAD_COUNT_KV)
    return hp.per_layer(ATTN.HEAD_COUNT)


def full_attention(hp: HParams) -> Layout:
    """Every layer with n_head_kv(l) > 0 caches K and V for the whole context."""
    head_k, head_v = head_dims(hp)
    layers = tuple(AttentionLayer(n * head_k, n * head_v) for n in kv_heads(hp) if n > 0)
    return Layout(attention=layers, recurrent=(), has_kv_cache=True, note="full-context attention on every layer")


Rule = Callable[[HParams], Layout]

RULES: dict[str, Rule] = {
    "llama": full_attention,
    "qwen3": full_attention,
    "qwen3moe": full_attention,
}


def derive_layout(metadata: dict, arch: str) -> Layout:
    """The layout of a model of architecture `arch`; EvidenceError when memfit has no rule for it."""
    rule = RULES.get(arch)
    if rule is None:
        raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"no layout rule for architecture {arch!r}")
    return rule(HParams(metadata, arch))
