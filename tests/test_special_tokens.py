"""The tokens llama-server's warmup decodes (common_init_from_params: the vocabulary's BOS and EOS, whichever it
has, else token 0), from the special tokens llama.cpp's vocabulary loader resolves."""

from __future__ import annotations

import pytest

from memfit.estimator.special_tokens import warmup_tokens

MODEL, BOS, EOS = "tokenizer.ggml.model", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"


@pytest.mark.parametrize(
    ("metadata", "n_tokens", "tokens"),
    [
        ({MODEL: "llama"}, 32000, 2),  # SPM: BOS 1, EOS 2
        ({MODEL: "bert"}, 30522, 1),  # WordPiece: BOS 101 ([CLS]), no EOS
        ({MODEL: "bert", EOS: 102}, 30522, 2),  # a conversion naming [SEP] its EOS
        ({MODEL: "bert"}, 100, 1),  # BOS 101 past the vocabulary: disabled, so token 0 alone
        ({MODEL: "t5"}, 32000, 1),  # no BOS, EOS 1
        ({MODEL: "rwkv"}, 65536, 1),  # neither: token 0
        ({MODEL: "none", BOS: 1, EOS: 2}, 32000, 1),  # no vocabulary: the keys are never read
        ({MODEL: "gpt2", "tokenizer.ggml.pre": "glm4"}, 151552, 1),  # glm4's pre-tokenizer drops the BOS
        ({MODEL: "gpt2", "tokenizer.ggml.pre": "qwen2"}, 151936, 2),  # BOS and EOS 11 by default
        ({MODEL: "gemma4", BOS: 2, EOS: 1}, 262144, 2),
        ({}, 32000, 0),  # no tokenizer model: not known
        ({MODEL: "llama"}, None, 0),  # no token count: not known
    ],
)
def test_the_warmup_decodes_the_bos_and_eos_the_vocabulary_has(metadata: dict, n_tokens: int, tokens: int) -> None:
    assert warmup_tokens(metadata, n_tokens) == tokens
