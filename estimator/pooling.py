"""What llama-server refuses of a pooling: common_init_from_params (common/common.cpp) fails the load where the
context pools by rank (llama_pooling_type(lctx) == LLAMA_POOLING_TYPE_RANK, whether --pooling/--rerank named it or
the model's own pooling_type is rank) and the vocabulary has no BOS token, or none of an EOS token, a SEP token and
a rerank chat template (the special tokens as llama.cpp's loader resolves them: estimator/special_tokens.py)."""

from __future__ import annotations

from collections.abc import Mapping

from memfit import gguf_constants as gguf
from memfit.estimator.context import POOLING_TYPES
from memfit.estimator.layout import Layout
from memfit.estimator.special_tokens import special_tokens
from memfit.estimator.workload import Workload

Keys = gguf.Keys
COMMON_CPP = "llama.cpp common/common.cpp common_init_from_params"
RERANK_TEMPLATE = f"{Keys.Tokenizer.CHAT_TEMPLATE}.rerank"  # llama_model_chat_template(model, "rerank")


def rank_refusal(metadata: Mapping, n_tokens: int | None) -> str:
    """Why common_init_from_params fails a context that pools by rank with this file's vocabulary; "" where it does
    not, or where the vocabulary is not known (no tokenizer model memfit knows, no token count)."""
    tokens = special_tokens(metadata, n_tokens)
    if tokens is None:
        return ""
    if tokens.bos is None:
        return f"llama-server refuses rank pooling: the vocabulary has no BOS token ({COMMON_CPP})"
    if tokens.eos is None and tokens.sep is None and not isinstance(metadata.get(RERANK_TEMPLATE), str):
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
