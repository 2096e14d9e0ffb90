"""Parameter counts from a published layout, for catalog entries (a file on disk is measured instead).

The count is of weight matrices, block by block, as llama.cpp's loader creates them for the architecture:
those the quantizer stores in the recipe's types, and those it keeps in F32 (MoE routers, BERT's position and
token-type embeddings). 1-D tensors (norms, biases, scales) stay F32 too; they are a fraction of a percent of
any real model and are bounded from both sides: the norms every layer has, and all a layer may have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memfit.estimator.arch_rules import COUNTED, RULES
from memfit.estimator.architectures import layers_of
from memfit.estimator.errors import EvidenceError
from memfit.estimator.hparams import HParams
from memfit.estimator.vocabulary import Limit
from memfit.gguf_constants import Keys

ATTN, SSM = Keys.Attention, Keys.SSM


@dataclass(frozen=True)
class ParameterCount:
    quantized: int  # 2-D and 3-D weights the quantizer stores in the recipe's types
    f32: int  # 2-D weights kept in F32 whatever the quant
    vectors_min: int  # 1-D tensors every such model has (its norms)
    vectors_max: int  # 1-D tensors it may have (norms, biases, q/k and post norms, SSM scalars)

    @property
    def matrices(self) -> int:
        return self.quantized + self.f32

    @property
    def total(self) -> int:
        return self.matrices + self.vectors_min


class _Counter:
    def __init__(self, metadata: Mapping, arch: str) -> None:
        self.arch = arch
        self.rule = RULES[arch]
        self.shape = self.rule.parameters
        self.hp = HParams(metadata, arch)
        self.layers = layers_of(self.rule, self.hp)
        self.e = self.layers.n_embd

    def attention(self, il: int) -> tuple[int, int]:
        """(weights, the most 1-D parameters it may carry: biases, q/k and post norms)."""
        hp, ly, e = self.hp, self.layers, self.e
        heads, kv = ly.heads[il], ly.heads_kv[il]
        kv_lora = hp.optional_int(ATTN.KV_LORA_RANK, 0)
        if kv_lora:  # MLA: q (through q_lora), kv_a (latent + rope key), kv_b (per-head nope key and value), o
            rope = hp.optional_int(Keys.Rope.DIMENSION_COUNT, 0)
            k_head = hp.optional_int(ATTN.KEY_LENGTH_MLA, ly.head_k)
            v_head = hp.optional_int(ATTN.VALUE_LENGTH_MLA, ly.head_v)
            q_lora = hp.optional_int(ATTN.Q_LORA_RANK, 0)
            q = e * q_lora + q_lora * heads * k_head if q_lora else e * heads * k_head
            kv_b = kv_lora * heads * (k_head - rope + v_head)
            return q + e * (kv_lora + rope) + kv_b + heads * v_head * e, kv_lora + q_lora + 2 * e
        q_heads = 2 * heads if self.shape.gated_query else heads
        q, k, v = q_heads * ly.head_k, kv * ly.head_k, kv * ly.head_v
        return e * (q + k + v) + heads * ly.head_v * e, q + k + v + e + 2 * ly.head_k + 2 * e + heads

    def feed_forward(self, il: int) -> tuple[int, int, int]:
        """(quantized weights, F32 router weights, the most 1-D parameters it may carry)."""
        hp, e = self.hp, self.e
        experts = hp.optional_int(Keys.LLM.EXPERT_COUNT, 0)
        leading_dense = hp.optional_int(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, 0)
        if experts and il >= leading_dense:
            expert_ff = hp.optional_int(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, self.layers.ff[il])
            shared = hp.optional_int(Keys.LLM.EXPERT_SHARED_COUNT, 0) * expert_ff
            shared = hp.optional_int(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, shared)
            return (
                experts * 3 * e * expert_ff + 3 * e * shared,
                e * experts,
                experts * (2 * expert_ff + e + 1) + 2 * shared + e,
            )
        ff = self.layers.ff[il]
        return (3 if self.shape.gated_ffn else 2) * e * ff, 0, 2 * ff + e

    def recurrent(self) -> int:
        hp, e = self.hp, self.e
        l_cache = hp.optional_int(Keys.ShortConv.L_CACHE, 0)
        if l_cache:  # LFM2 short convolution: in (B, C, x), conv, out
            return e * 3 * e + l_cache * e + e * e
        return self.shape.ssm_weights(hp, e)  # Mamba-1, Mamba-2, gated delta net: the arch's rule

    def count(self, n_vocab: int, tied: bool) -> ParameterCount:
        ly, e = self.layers, self.e
        recurrent = ly.recurrent
        quantized, f32 = n_vocab * e * (1 if tied else 2), 0
        if self.shape.position_embeddings:  # learned positions and token types stay F32
            f32 += (self.hp.require_int(Keys.LLM.CONTEXT_LENGTH) + 2) * e
        vectors_min = vectors_max = e  # the output norm
        for il in range(ly.n_trunk):
            vectors_min += 2 * e  # a block's input and feed-forward norms
            if recurrent[il]:
                quantized += self.recurrent()
                vectors_max += 4 * self.hp.optional_int(SSM.INNER_SIZE, e) + 2 * e  # conv bias, dt, A, D, norm
            if not recurrent[il] or self.shape.attention_beside_ssm:
                weights, extra = self.attention(il)
                quantized, vectors_max = quantized + weights, vectors_max + extra
            if ly.ff[il] or self.hp.optional_int(Keys.LLM.EXPERT_COUNT, 0):
                weights, router, extra = self.feed_forward(il)
                quantized, f32, vectors_max = quantized + weights, f32 + router, vectors_max + extra
        return ParameterCount(quantized, f32, vectors_min, vectors_max + vectors_min)


def count_parameters(metadata: Mapping, arch: str, n_vocab: int, tied: bool) -> ParameterCount:
    """Parameters of a model of `arch` from its GGUF-style metadata (NextN/MTP layers excluded)."""
    if arch not in COUNTED:
        raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"memfit does not count {arch} parameters from a layout")
    return _Counter(metadata, arch).count(n_vocab, tied)
