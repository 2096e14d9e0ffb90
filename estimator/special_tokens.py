"""The special tokens llama_vocab::impl::load resolves for a file's vocabulary (src/llama-vocab.cpp): its defaults by
tokenizer model, a BPE pre-tokenizer that drops the BOS, a default past the vocabulary disabled, and a
`tokenizer.ggml.*_token_id` key within it taking its place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memfit import gguf_constants as gguf
from memfit.integers import is_int

Keys = gguf.Keys
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


@dataclass(frozen=True)
class SpecialTokens:
    """A vocabulary's BOS, EOS and SEP token ids (None: LLAMA_TOKEN_NULL)."""

    bos: int | None
    eos: int | None
    sep: int | None

    @property
    def warmup(self) -> int:
        """The tokens common_init_from_params' warmup decodes: the BOS and the EOS, whichever the vocabulary has,
        else token 0 alone."""
        return max(1, (self.bos is not None) + (self.eos is not None))


def _special(metadata: Mapping, key: str, default: int | None, n_tokens: int) -> int | None:
    """One special token: the default, disabled past the vocabulary; the key's id where it is within it."""
    token = default if default is not None and default < n_tokens else None
    value = metadata.get(key)
    return value if is_int(value) and 0 <= value < n_tokens else token


def special_tokens(metadata: Mapping, n_tokens: int | None) -> SpecialTokens | None:
    """The vocabulary's special tokens as llama.cpp's loader resolves them; None where memfit does not know them (a
    tokenizer model it has no defaults for, no token count)."""
    model = metadata.get(Keys.Tokenizer.MODEL)
    if model in NO_VOCAB:
        return SpecialTokens(None, None, None)
    if not isinstance(model, str) or model not in DEFAULT_SPECIALS or n_tokens is None:
        return None
    bos, eos, sep = DEFAULT_SPECIALS[model]
    if model in BPE_MODELS and metadata.get(Keys.Tokenizer.PRE) in NO_BOS_PRE:
        bos = None
    return SpecialTokens(
        _special(metadata, Keys.Tokenizer.BOS_ID, bos, n_tokens),
        _special(metadata, Keys.Tokenizer.EOS_ID, eos, n_tokens),
        _special(metadata, Keys.Tokenizer.SEP_ID, sep, n_tokens),
    )


def warmup_tokens(metadata: Mapping, n_tokens: int | None) -> int:
    """The tokens common_init_from_params' warmup decodes with this vocabulary (SpecialTokens.warmup); 0 where the
    vocabulary is not known."""
    tokens = special_tokens(metadata, n_tokens)
    return tokens.warmup if tokens is not None else 0
