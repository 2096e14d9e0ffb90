"""llama-server's pooling: which vocabularies common_init_from_params refuses rank pooling with (llama_vocab's special
tokens: the tokenizer model's defaults, a default past the vocabulary disabled, a key within it taking its place),
and the classification head build_pooling reads from a file's tensors."""

from __future__ import annotations

import pytest

from memfit.estimator.architectures import rank_head
from memfit.estimator.layout import RankHead
from memfit.estimator.pooling import rank_refusal

BOS, EOS, SEP = "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.seperator_token_id"


@pytest.mark.parametrize(
    ("metadata", "n_tokens", "refused"),
    [
        ({"tokenizer.ggml.model": "llama"}, 32000, ""),  # SPM: BOS 1, EOS 2
        ({"tokenizer.ggml.model": "none"}, 32000, "BOS"),  # LLAMA_VOCAB_TYPE_NONE: no special token, keys unread
        ({"tokenizer.ggml.model": "no_vocab", BOS: 1, EOS: 2}, 32000, "BOS"),
        ({"tokenizer.ggml.model": "t5"}, 32000, "BOS"),  # T5's default: no BOS
        ({"tokenizer.ggml.model": "t5", BOS: 0}, 32000, ""),  # a BOS named, EOS 1 by default
        ({"tokenizer.ggml.model": "bert"}, 30522, ""),  # WPM: BOS 101, SEP 102, no EOS
        ({"tokenizer.ggml.model": "bert"}, 100, "BOS"),  # both defaults past the vocabulary: disabled
        ({"tokenizer.ggml.model": "bert", BOS: 2}, 100, "EOS"),  # no EOS, SEP disabled, no rerank prompt
        ({"tokenizer.ggml.model": "bert", BOS: 2, SEP: 3}, 100, ""),
        ({"tokenizer.ggml.model": "bert", BOS: 2, "tokenizer.chat_template.rerank": "{{ query }}"}, 100, ""),
        ({"tokenizer.ggml.model": "bert", BOS: 200}, 100, "BOS"),  # a key past the vocabulary keeps the default
        ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2"}, 151936, ""),  # BPE: BOS and EOS 11
        ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "glm4"}, 151552, "BOS"),  # glm4's pre: no BOS
        ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "chatglm-bpe", BOS: 5}, 151552, ""),
        ({"tokenizer.ggml.model": "gemma4"}, 262144, "BOS"),  # every special token unset by default
        ({"tokenizer.ggml.model": "gemma4", BOS: 2}, 262144, "EOS"),
        ({"tokenizer.ggml.model": "gemma4", BOS: 2, EOS: 1}, 262144, ""),
        ({}, 32000, ""),  # no tokenizer model: not known here (llama.cpp's load fails on its own)
        ({"tokenizer.ggml.model": "llama"}, None, ""),  # no token count: not known
    ],
)
def test_rank_pooling_needs_a_bos_and_an_eos_sep_or_rerank_prompt(metadata: dict, n_tokens: int, refused: str) -> None:
    """common_init_from_params: no BOS token fails; no EOS token, no SEP token and no rerank chat template fails."""
    found = rank_refusal(metadata, n_tokens)
    assert (found != "", refused in found) == (bool(refused), True)


def test_the_classification_head_is_the_files() -> None:
    """build_pooling's RANK head: cls (its output rows), cls.bias, cls.norm, cls.output (n_cls_out rows) and its
    bias as the file holds them; modern-bert pools by mean first, qwen3 and qwen3vl end with a soft_max."""
    bert = {"cls.weight": (1024, 1024), "cls.bias": (1024,), "cls.output.weight": (1024, 2), "cls.output.bias": (2,)}
    assert rank_head("bert", bert) == RankHead(cls_rows=1024, cls_bias=True, out_rows=2, out_bias=True)
    assert rank_head("jina-bert-v2", {"cls.weight": (768,), "cls.bias": (1,)}) == RankHead(cls_rows=1, cls_bias=True)
    modern = {"cls.weight": (768, 768), "cls.norm.weight": (768,), "cls.output.weight": (768, 1)}
    assert rank_head("modern-bert", modern) == RankHead(cls_rows=768, cls_norm=True, out_rows=1, mean_first=True)
    assert rank_head("qwen3", {"cls.output.weight": (1024, 1)}) == RankHead(out_rows=1, softmax=True)
    assert rank_head("qwen3", None) == RankHead(softmax=True)  # a catalog entry: no tensors, no head
