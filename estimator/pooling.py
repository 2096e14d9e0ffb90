"""What llama-server refuses of a pooling: common_init_from_params (common/common.cpp) fails the load where the
context pools by rank (llama_pooling_type(lctx) == LLAMA_POOLING_TYPE_RANK, whether --pooling/--rerank named it or
the model's own pooling_type is rank) and the vocabulary has no BOS token, or none of an EOS token, a SEP token and
a rerank chat template. The special tokens are llama_vocab::impl::load's: its defaults by tokenizer model, a default
past the vocabulary disabled, a `tokenizer.ggml.*_token_id` key within it taking its place."""

from __future__ import annotations

from collections.abc import Mapping

from memfit import gguf_constants as gguf
from memfit.estimator.context import POOLING_TYPES
from memfit.estimator.layout import Layout
from memfit.estimator.workload import Workload
from memfit.integers import is_int

Keys = gguf.Keys
COMMON_CPP = "llama.cpp common/common.cpp common_init_from_params"
# llama_vocab::impl::load: the default (BOS, EOS, SEP) of each tokenizer model (None: LLAMA_TOKEN_NULL)
DEFAULT_SPECIALS: dict[str, tuple[int | None, int | None, int | None]] = {
    "llama": (1, 2, None),
    "bert": (101, None, 102),
    "gpt2": (11, 11, None),
    "hybriddna": (11, 11, None),
    "whitespace": (11, 11, None),
    "t5": (None, 1, None),
    "rwkv": (None, None, None),
    "plamo2": (1, 2, None),
    "gemma4": (None, None, None),
}
NO_VOCAB = frozenset({"no_vocab", "none"})  # LLAMA_VOCAB_TYPE_NONE: no special token, the keys never read
BPE_MODELS = frozenset({"gpt2", "hybriddna", "whitespace"})
NO_BOS_PRE = frozenset({"glm4", "chatglm-bpe"})  # a BPE pre-tokenizer that sets special_bos_id = LLAMA_TOKEN_NULL
RERANK_TEMPLATE = f"{Keys.Tokenizer.CHAT_TEMPLATE}.rerank"  # llama_model_chat_template(model, "rerank")


def _special(metadata: Mapping, key: str, default: int | None, n_tokens: int) -> int | None:
    """One special token: the default, disabled past the vocabulary; the key's id where it is within it."""
    token = default if default is not None and default < n_tokens else None
    value = metadata.get(key)
    return value if is_int(value) and 0 <= value < n_tokens else token


def rank_refusal(metadata: Mapping, n_tokens: int | None) -> str:
    """Why common_init_from_params fails a context that pools by rank with this file's vocabulary; "" where it does
    not, or where the vocabulary is not known (no tokenizer model memfit knows, no token count)."""
    model = metadata.get(Keys.Tokenizer.MODEL)
    if model in NO_VOCAB:
        return f"llama-server refuses rank pooling: the vocabulary ({model}) has no BOS token ({COMMON_CPP})"
    if not isinstance(model, str) or model not in DEFAULT_SPECIALS or n_tokens is None:
        return ""
    bos, eos, sep = DEFAULT_SPECIALS[model]
    if model in BPE_MODELS and metadata.get(Keys.Tokenizer.PRE) in NO_BOS_PRE:
        bos = None
    bos = _special(metadata, Keys.Tokenizer.BOS_ID, bos, n_tokens)
    eos = _special(metadata, Keys.Tokenizer.EOS_ID, eos, n_tokens)
    sep = _special(metadata, Keys.Tokenizer.SEP_ID, sep, n_tokens)
    if bos is None:
        return f"llama-server refuses rank pooling: the vocabulary has no BOS token ({COMMON_CPP})"
    if eos is None and sep is None and not isinstance(metadata.get(RERANK_TEMPLATE), str):
        return (
            "llama-server refuses rank pooling: the vocabulary has no EOS token, SEP token or rerank prompt"
            f" ({COMMON_CPP})"
        )
    return ""


def pooling_refusal(layout: Layout | None, workload: Workload) -> str | None:
    """Why llama-server does not start with this model under the workload's pooling (the context's: as named, else
    the model's own), or None; a plain llama.cpp context (the custom profile, llama_init_from_model) makes no such
    check."""
    if layout is None or not layout.rank_refusal or not workload.under_llama_server:
        return None
    pooling = layout.pooling if workload.pooling is None else POOLING_TYPES[workload.pooling]
    return layout.rank_refusal if pooling == POOLING_TYPES["rank"] else None
