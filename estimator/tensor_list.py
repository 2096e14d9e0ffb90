"""The tensors llama.cpp's loader requires for a model, from its published hyperparameters (catalog entries).

Each `tensors_<family>` function mirrors `load_arch_tensors` in llama.cpp's src/models/<arch>.cpp (the release
of arch_rules.LLAMA_CPP_RELEASE) and returns the tensors a conversion of the model holds: ggml order (ne[0] is
the row length), and the type convert_hf_to_gguf.py stores them in (F16 weights; F32 where `source_type` says).
Optional tensors (TENSOR_NOT_REQUIRED) are listed only where the published checkpoints have them (biases).
Which function an architecture uses is its `tensors` field in the architecture table (estimator/arch_rules.py).
Checked by loading every catalog entry's list in llama.cpp, and against published parameter counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from memfit.estimator.hparams import HParams, Layers
from memfit.gguf_constants import GGMLQuantizationType as QT
from memfit.gguf_constants import Keys

LLM, ATTN, SSM = Keys.LLM, Keys.Attention, Keys.SSM

# names convert_hf_to_gguf.py (conversion/base.py) stores as F32 besides 1-D tensors, norms and non-weights
_F32_NAMES = (
    "ffn_gate_inp.weight",
    "ffn_gate_inp_shexp.weight",
    "position_embd.weight",
    "token_types.weight",
    "ssm_conv1d.weight",
    "shortconv.conv.weight",
    "altup_correct_coef.weight",
    "altup_predict_coef.weight",
)

# hyperparameters llama.cpp sizes every block with, whatever the GGUF says (llama_hparams: gemma3n)
GEMMA3N_ALTUP, GEMMA3N_LAUREL_RANK, GEMMA3N_PER_LAYER_EMBD = 4, 64, 256


class Tensor(NamedTuple):
    name: str
    ne: tuple[int, ...]
    source: QT  # its type in the converted (unquantized) file


def source_type(name: str, ne: tuple[int, ...]) -> QT:
    """convert_hf_to_gguf.py's type rule (prepare_tensors): F32 for 1-D tensors, norms, routers, convolutions,
    position / token-type embeddings and non-`.weight` tensors; F16 otherwise."""
    if len(ne) <= 1 or name.endswith("_norm.weight") or name.endswith(_F32_NAMES) or not name.endswith(".weight"):
        return QT.F32
    return QT.F16


class Shape:
    """What a tensor list reads of a model: its one hyperparameter record (HParams, with llama_model_base::
    load_hparams' per-layer arrays and defaults), its vocabulary, and whether its output is tied to token_embd."""

    def __init__(self, hp: HParams, n_vocab: int, tied: bool) -> None:
        ly = Layers(hp)
        self.record, self.n_vocab, self.tied = hp, n_vocab, tied
        self.n_layer, self.n_trunk, self.n_embd = (
            hp.n_layer,
            ly.n_trunk,
            ly.n_embd,
        )  # n_trunk: NextN/MTP layers excluded
        self._heads, self._heads_kv, self._ff = ly.heads, ly.heads_kv, ly.ff
        self.head_dim = self.n_embd // self._heads[0] if self._heads[0] else 0  # n_embd / n_head(0)
        self.head_k, self.head_v = ly.head_k, ly.head_v
        self.n_rot = self.head_k if hp.n_rot is None else hp.n_rot
        self.n_expert = hp.n_expert

    def n_head(self, il: int = 0) -> int:
        return self._heads[il]

    def n_head_kv(self, il: int = 0) -> int:
        return self._heads_kv[il]

    def n_ff(self, il: int = 0) -> int:
        return self._ff[il]


class _Builder:
    def __init__(self) -> None:
        self.tensors: list[Tensor] = []

    def add(self, name: str, *ne: int) -> None:
        self.tensors.append(Tensor(name, ne, source_type(name, ne)))

    def blk(self, il: int, name: str, *ne: int) -> None:
        self.add(f"blk.{il}.{name}", *ne)

    def embeddings(self, hp: Shape, norm: str = "output_norm") -> None:
        """token_embd, the final norm, and output.weight unless the model ties it to token_embd."""
        self.add("token_embd.weight", hp.n_embd, hp.n_vocab)
        self.add(f"{norm}.weight", hp.n_embd)
        if not hp.tied:
            self.add("output.weight", hp.n_embd, hp.n_vocab)

    def qkv(self, il: int, n_embd: int, q: int, k: int, v: int, bias: bool = False) -> None:
        # llama_model_base::create_tensor_qkv: separate Q, K, V (optional biases)
        for part, width in (("q", q), ("k", k), ("v", v)):
            self.blk(il, f"attn_{part}.weight", n_embd, width)
            if bias:
                self.blk(il, f"attn_{part}.bias", width)

    def gqa(self, hp: Shape, il: int, bias: bool = False) -> None:
        """Q, K, V and the output projection of grouped-query attention with key_length-wide heads."""
        hk, heads, kv = hp.head_k, hp.n_head(il), hp.n_head_kv(il)
        self.qkv(il, hp.n_embd, hk * heads, hk * kv, hp.head_v * kv, bias)
        self.blk(il, "attn_output.weight", hk * heads, hp.n_embd)

    def normed_gqa(self, hp: Shape, il: int, bias: bool = False) -> None:
        """The pre-attention norm, then grouped-query attention."""
        self.blk(il, "attn_norm.weight", hp.n_embd)
        self.gqa(hp, il, bias)

    def fused_up(self, il: int, n_embd: int, n_ff: int) -> None:
        """An FFN without ffn_gate: ffn_up twice n_ff wide (gate and up), swiglu over its halves."""
        self.blk(il, "ffn_down.weight", n_ff, n_embd)
        self.blk(il, "ffn_up.weight", n_embd, 2 * n_ff)

    def swiglu(self, il: int, n_embd: int, n_ff: int) -> None:
        self.blk(il, "ffn_gate.weight", n_embd, n_ff)
        self.blk(il, "ffn_down.weight", n_ff, n_embd)
        self.blk(il, "ffn_up.weight", n_embd, n_ff)

    def experts(self, il: int, n_embd: int, n_ff_exp: int, n_expert: int) -> None:
        self.blk(il, "ffn_gate_inp.weight", n_embd, n_expert)
        self.blk(il, "ffn_gate_exps.weight", n_embd, n_ff_exp, n_expert)
        self.blk(il, "ffn_down_exps.weight", n_ff_exp, n_embd, n_expert)
        self.blk(il, "ffn_up_exps.weight", n_embd, n_ff_exp, n_expert)

    def shared_expert(self, il: int, n_embd: int, n_ff_sh: int) -> None:
        self.blk(il, "ffn_gate_shexp.weight", n_embd, n_ff_sh)
        self.blk(il, "ffn_down_shexp.weight", n_ff_sh, n_embd)
        self.blk(il, "ffn_up_shexp.weight", n_embd, n_ff_sh)

    def mamba2(self, hp: Shape, il: int, norm: bool = True) -> None:
        # the Mamba-2 mixer of mamba2.cpp / granite-hybrid.cpp / falcon-h1.cpp: ssm_in projects z, xBC and dt
        d_inner, d_state, groups = hp.record.ssm_d_inner, hp.record.ssm_d_state, hp.record.ssm_n_group
        heads, conv_dim = hp.record.ssm_dt_rank, d_inner + 2 * groups * d_state
        self.blk(il, "ssm_in.weight", hp.n_embd, d_inner + conv_dim + heads)
        self.blk(il, "ssm_conv1d.weight", hp.record.ssm_d_conv, conv_dim)
        self.blk(il, "ssm_conv1d.bias", conv_dim)
        self.blk(il, "ssm_dt.bias", heads)
        self.blk(il, "ssm_a", 1, heads)
        self.blk(il, "ssm_d", 1, heads)
        if norm:
            self.blk(il, "ssm_norm.weight", d_inner // groups, groups)
        self.blk(il, "ssm_out.weight", d_inner, hp.n_embd)


TensorList = Callable[[Shape], list[Tensor]]


def _decoder(hp: Shape, norm: str = "output_norm") -> _Builder:
    """A builder that holds a decoder's embeddings: token_embd, the final norm, and the output unless tied."""
    b = _Builder()
    b.embeddings(hp, norm)
    return b


# --- dense decoders -------------------------------------------------------------------------------------------


def tensors_llama(hp: Shape) -> list[Tensor]:
    # src/models/llama.cpp (mistral3, minicpm, smollm3, internlm2: the same blocks); experts when expert_count > 0
    return _llama_blocks(hp, shared=0)


def tensors_granite(hp: Shape) -> list[Tensor]:
    # src/models/granite.cpp (granite, granitemoe): llama's blocks; with experts, a shared expert when
    # expert_shared_feed_forward_length > 0 (Granite MoE Shared)
    return _llama_blocks(hp, shared=hp.record.n_ff_shexp)


def _llama_blocks(hp: Shape, shared: int) -> list[Tensor]:
    b = _decoder(hp)
    for il in range(hp.n_layer):
        b.normed_gqa(hp, il)
        b.blk(il, "ffn_norm.weight", hp.n_embd)
        if not hp.n_expert:
            b.swiglu(il, hp.n_embd, hp.n_ff(il))
            continue
        b.experts(il, hp.n_embd, hp.n_ff(il), hp.n_expert)
        if shared:
            b.shared_expert(il, hp.n_embd, shared)
    return b.tensors


def tensors_qwen2(hp: Shape) -> list[Tensor]:
    # src/models/qwen2.cpp: llama blocks with Q/K/V biases
    return _qwen2_blocks(hp, moe=False)


def tensors_qwen2moe(hp: Shape) -> list[Tensor]:
    # src/models/qwen2moe.cpp: qwen2's attention; every layer routed experts (expert_feed_forward_length wide, else
    # n_ff / n_expert_used) and a shared expert (expert_shared_feed_forward_length, else n_ff) with its 1-D gate
    return _qwen2_blocks(hp, moe=True)


def _qwen2_blocks(hp: Shape, moe: bool) -> list[Tensor]:
    b = _decoder(hp)
    e = hp.n_embd
    for il in range(hp.n_layer):
        b.normed_gqa(hp, il, bias=True)
        b.blk(il, "ffn_norm.weight", e)
        if not moe:
            b.swiglu(il, e, hp.n_ff(il))
            continue
        used = hp.record.n_expert_used
        b.experts(il, e, hp.record.n_ff_exp or hp.n_ff(il) // used, hp.n_expert)
        b.blk(il, "ffn_gate_inp_shexp.weight", e)
        b.shared_expert(il, e, hp.record.n_ff_shexp or hp.n_ff(il))
    return b.tensors


def tensors_qwen3(hp: Shape) -> list[Tensor]:
    # src/models/qwen3.cpp and qwen3moe.cpp: per-head Q/K norms; experts when expert_count > 0
    b = _decoder(hp)
    for il in range(hp.n_layer):
        b.normed_gqa(hp, il)
        b.blk(il, "attn_k_norm.weight", hp.head_k)
        b.blk(il, "attn_q_norm.weight", hp.head_k)
        b.blk(il, "ffn_norm.weight", hp.n_embd)
        if hp.n_expert:
            b.experts(il, hp.n_embd, hp.record.n_ff_exp, hp.n_expert)
        else:
            b.swiglu(il, hp.n_embd, hp.n_ff(il))
    return b.tensors


def tensors_olmo2(hp: Shape) -> list[Tensor]:
    # src/models/olmo2.cpp: no pre-norms, full-width Q/K norms, post-attention and post-FFN norms
    return _post_normed(hp, whole_qk_norms=True)


def tensors_glm4(hp: Shape) -> list[Tensor]:
    # src/models/glm4.cpp: Q/K/V with biases, post-attention and post-FFN norms, ffn_up twice n_ff wide (gate and
    # up), no ffn_gate; NextN layers' tensors are skipped (TENSOR_SKIP), so only the trunk's are listed
    b = _decoder(hp)
    e = hp.n_embd
    for il in range(hp.n_trunk):
        b.normed_gqa(hp, il, bias=True)
        b.blk(il, "post_attention_norm.weight", e)
        b.blk(il, "ffn_norm.weight", e)
        b.fused_up(il, e, hp.n_ff(il))
        b.blk(il, "post_ffw_norm.weight", e)
    return b.tensors


def tensors_exaone4(hp: Shape) -> list[Tensor]:
    # src/models/exaone4.cpp: olmo2's blocks with per-head Q/K norms
    return _post_normed(hp, whole_qk_norms=False)


def _post_normed(hp: Shape, whole_qk_norms: bool) -> list[Tensor]:
    b = _decoder(hp)
    e = hp.n_embd
    for il in range(hp.n_layer):
        b.gqa(hp, il)
        b.blk(il, "attn_q_norm.weight", e if whole_qk_norms else hp.head_k)
        b.blk(il, "attn_k_norm.weight", hp.n_head_kv(il) * hp.head_k if whole_qk_norms else hp.head_k)
        b.blk(il, "post_attention_norm.weight", e)
        b.swiglu(il, e, hp.n_ff(il))
        b.blk(il, "post_ffw_norm.weight", e)
    return b.tensors


def tensors_phi3(hp: Shape) -> list[Tensor]:
    # src/models/phi3.cpp: fused attn_qkv; ffn_up twice n_ff wide (gate and up), no ffn_gate
    b = _decoder(hp)
    e = hp.n_embd
    for il in range(hp.n_layer):
        b.blk(il, "attn_norm.weight", e)
        b.blk(il, "attn_qkv.weight", e, e + 2 * hp.head_dim * hp.n_head_kv(il))
        b.blk(il, "attn_output.weight", e, e)
        b.blk(il, "ffn_norm.weight", e)
        b.fused_up(il, e, hp.n_ff(il))
    return b.tensors


def tensors_command_r(hp: Shape) -> list[Tensor]:
    # src/models/command-r.cpp: one norm per (parallel) block; Q/K norms only from 64 layers on
    b = _decoder(hp)
    for il in range(hp.n_layer):
        b.blk(il, "attn_norm.weight", hp.n_embd)
        if hp.n_layer >= 64:
            b.blk(il, "attn_q_norm.weight", hp.head_dim, hp.n_head(il))
            b.blk(il, "attn_k_norm.weight", hp.head_dim, hp.n_head_kv(il))
        b.gqa(hp, il)
        b.swiglu(il, hp.n_embd, hp.n_ff(il))
    return b.tensors


def tensors_cohere2(hp: Shape) -> list[Tensor]:
    # llama_model_cohere2::load_arch_tensors: command-r's parallel blocks without Q/K norms; the output tied to
    # token_embd
    b = _decoder(hp)
    for il in range(hp.n_layer):
        b.normed_gqa(hp, il)
        b.swiglu(il, hp.n_embd, hp.n_ff(il))
    return b.tensors


def _layer_norm(b: _Builder, name: str, n: int) -> None:
    b.add(f"{name}.weight", n)
    b.add(f"{name}.bias", n)


def tensors_starcoder2(hp: Shape) -> list[Tensor]:
    # src/models/starcoder2.cpp: LayerNorms with biases, biased Q/K/V/O, a GELU MLP (up, down and biases)
    b = _decoder(hp)
    e, ff = hp.n_embd, hp.n_ff()
    b.add("output_norm.bias", e)
    for il in range(hp.n_layer):
        _layer_norm(b, f"blk.{il}.attn_norm", e)
        b.gqa(hp, il, bias=True)
        b.blk(il, "attn_output.bias", e)
        _layer_norm(b, f"blk.{il}.ffn_norm", e)
        b.blk(il, "ffn_down.weight", ff, e)
        b.blk(il, "ffn_up.weight", e, ff)
        b.blk(il, "ffn_down.bias", e)
        b.blk(il, "ffn_up.bias", ff)
    return b.tensors


def tensors_stablelm(hp: Shape) -> list[Tensor]:
    # src/models/stablelm.cpp: LayerNorms with biases, Q/K/V biases, SwiGLU
    b = _decoder(hp)
    e = hp.n_embd
    b.add("output_norm.bias", e)
    for il in range(hp.n_layer):
        _layer_norm(b, f"blk.{il}.attn_norm", e)
        b.gqa(hp, il, bias=True)
        _layer_norm(b, f"blk.{il}.ffn_norm", e)
        b.swiglu(il, e, hp.n_ff(il))
    return b.tensors


def _gemma(hp: Shape, post_norms: bool, qk_norms: bool) -> list[Tensor]:
    b = _decoder(hp)
    e = hp.n_embd
    for il in range(hp.n_layer):
        b.normed_gqa(hp, il)
        if post_norms:
            b.blk(il, "post_attention_norm.weight", e)
        if qk_norms:
            b.blk(il, "attn_k_norm.weight", hp.head_k)
            b.blk(il, "attn_q_norm.weight", hp.head_k)
        b.blk(il, "ffn_norm.weight", e)
        b.swiglu(il, e, hp.n_ff(il))
        if post_norms:
            b.blk(il, "post_ffw_norm.weight", e)
    return b.tensors


def tensors_gemma(hp: Shape) -> list[Tensor]:
    # src/models/gemma.cpp: tied output, pre-norms only
    return _gemma(hp, post_norms=False, qk_norms=False)


def tensors_gemma2(hp: Shape) -> list[Tensor]:
    # src/models/gemma2.cpp: post-attention and post-FFN norms
    return _gemma(hp, post_norms=True, qk_norms=False)


def tensors_gemma3(hp: Shape) -> list[Tensor]:
    # src/models/gemma3.cpp: gemma2 blocks with per-head Q/K norms
    return _gemma(hp, post_norms=True, qk_norms=True)


def optional_gemma3(hp: Shape) -> list[Tensor]:
    # src/models/gemma3.cpp: dense_2 {n_embd, dense_2_feat_out} and dense_3 {dense_3_feat_in, n_embd}, neither key
    # read by gemma3's load_arch_hparams (both 0)
    return _dense_out(hp.n_embd, 0, 0)


def optional_gemma_embedding(hp: Shape) -> list[Tensor]:
    # src/models/gemma-embedding.cpp: dense_2 {n_embd, dense_2_feat_out}, dense_3 {dense_3_feat_in, n_embd}
    return _dense_out(hp.n_embd, hp.record.dense_2_feat_out, hp.record.dense_3_feat_in)


def _dense_out(n_embd: int, dense_2_out: int, dense_3_in: int) -> list[Tensor]:
    b = _Builder()
    b.add("dense_2.weight", n_embd, dense_2_out)
    b.add("dense_3.weight", dense_3_in, n_embd)
    return b.tensors


def optional_lfm2(hp: Shape) -> list[Tensor]:
    # src/models/lfm2.cpp: dense_2 {n_embd, n_embd_out()} and its bias {n_embd_out()}
    out = hp.record.n_embd_out_impl or hp.n_embd
    b = _Builder()
    b.add("dense_2.weight", hp.n_embd, out)
    b.add("dense_2.bias", out)
    return b.tensors


def tensors_gemma3n(hp: Shape) -> list[Tensor]:
    # src/models/gemma3n.cpp: gemma3 blocks plus AltUp, LAuReL and per-layer inputs (sizes fixed in llama_hparams)
    n_altup, e_alt = GEMMA3N_ALTUP, GEMMA3N_PER_LAYER_EMBD
    b = _decoder(hp)
    e = hp.n_embd
    b.add("altup_proj.weight", e, e, n_altup - 1)
    b.add("altup_unembd_proj.weight", e, e, n_altup - 1)
    b.add("per_layer_token_embd.weight", e_alt * hp.n_layer, hp.n_vocab)
    b.add("per_layer_model_proj.weight", e, e_alt * hp.n_layer)
    b.add("per_layer_proj_norm.weight", e_alt)
    for il in range(hp.n_layer):
        b.normed_gqa(hp, il)
        b.blk(il, "attn_q_norm.weight", hp.head_k)
        b.blk(il, "attn_k_norm.weight", hp.head_k)
        b.blk(il, "post_attention_norm.weight", e)
        b.blk(il, "ffn_norm.weight", e)
        b.swiglu(il, e, hp.n_ff(0))  # every layer's FFN is sized with n_ff() (layer 0)
        b.blk(il, "post_ffw_norm.weight", e)
        b.blk(il, "inp_gate.weight", e, e_alt)
        b.blk(il, "proj.weight", e_alt, e)
        b.blk(il, "post_norm.weight", e)
        b.blk(il, "altup_correct_coef.weight", n_altup, n_altup)
        b.blk(il, "altup_correct_scale.weight", e)
        b.blk(il, "altup_predict_coef.weight", n_altup, n_altup * n_altup)
        b.blk(il, "altup_router.weight", e, n_altup)
        b.blk(il, "altup_router_norm.weight", e)
        b.blk(il, "laurel_l.weight", e, GEMMA3N_LAUREL_RANK)
        b.blk(il, "laurel_r.weight", GEMMA3N_LAUREL_RANK, e)
        b.blk(il, "laurel_post_norm.weight", e)
    return b.tensors


def tensors_bert(hp: Shape) -> list[Tensor]:
    # src/models/bert.cpp: learned positions (n_ctx_train rows), 2 token types, biased Q/K/V/O, post-LayerNorms,
    # a GELU MLP with biases; no output matrix
    b = _Builder()
    e, ff = hp.n_embd, hp.n_ff()
    b.add("token_embd.weight", e, hp.n_vocab)
    b.add("token_types.weight", e, 2)
    b.add("position_embd.weight", e, hp.record.n_ctx_train)
    _layer_norm(b, "token_embd_norm", e)
    for il in range(hp.n_layer):
        b.qkv(il, e, e, e, e, bias=True)
        b.blk(il, "attn_output.weight", e, e)
        b.blk(il, "attn_output.bias", e)
        _layer_norm(b, f"blk.{il}.attn_output_norm", e)
        b.blk(il, "ffn_up.weight", e, ff)
        b.blk(il, "ffn_up.bias", ff)
        b.blk(il, "ffn_down.weight", ff, e)
        b.blk(il, "ffn_down.bias", e)
        _layer_norm(b, f"blk.{il}.layer_output_norm", e)
    return b.tensors


def tensors_nomic_bert(hp: Shape) -> list[Tensor]:
    # llama_model_bert::load_arch_tensors for nomic-bert: rotary positions (no position_embd), 2 token types, a
    # fused QKV without bias, a biased output projection, post-LayerNorms, a SwiGLU MLP without biases; no output
    b = _Builder()
    e = hp.n_embd
    b.add("token_embd.weight", e, hp.n_vocab)
    b.add("token_types.weight", e, 2)
    _layer_norm(b, "token_embd_norm", e)
    for il in range(hp.n_layer):
        b.blk(il, "attn_qkv.weight", e, 3 * e)
        b.blk(il, "attn_output.weight", e, e)
        b.blk(il, "attn_output.bias", e)
        _layer_norm(b, f"blk.{il}.attn_output_norm", e)
        b.swiglu(il, e, hp.n_ff(il))
        _layer_norm(b, f"blk.{il}.layer_output_norm", e)
    return b.tensors


# --- experts and latent attention ---------------------------------------------------------------------------


def tensors_gpt_oss(hp: Shape) -> list[Tensor]:
    # src/models/openai-moe.cpp: biased attention with sinks, post-attention norm, biased experts
    b = _decoder(hp)
    e, rot, n_expert, ff_exp = hp.n_embd, hp.n_rot, hp.n_expert, hp.record.n_ff_exp
    for il in range(hp.n_layer):
        heads, kv = hp.n_head(il), hp.n_head_kv(il)
        b.blk(il, "attn_norm.weight", e)
        b.blk(il, "post_attention_norm.weight", e)
        b.qkv(il, e, heads * rot, kv * rot, kv * rot, bias=True)
        b.blk(il, "attn_output.weight", heads * rot, e)
        b.blk(il, "attn_sinks.weight", heads)
        b.experts(il, e, ff_exp, n_expert)
        b.blk(il, "attn_output.bias", e)
        b.blk(il, "ffn_gate_inp.bias", n_expert)
        b.blk(il, "ffn_gate_exps.bias", ff_exp, n_expert)
        b.blk(il, "ffn_down_exps.bias", e, n_expert)
        b.blk(il, "ffn_up_exps.bias", ff_exp, n_expert)
    return b.tensors


def tensors_deepseek2(hp: Shape) -> list[Tensor]:
    # src/models/deepseek2.cpp: MLA (attn_k_b / attn_v_b when key_length_mla is present, else attn_kv_b), low-rank
    # Q except on lite models, leading dense blocks, routed and shared experts, exp_probs_b on grouped routers
    b = _decoder(hp)
    e = hp.n_embd
    q_lora = 0 if hp.record.deepseek2_lite(hp.n_vocab) else hp.record.n_lora_q
    kv_lora, rope = hp.record.n_lora_kv, hp.n_rot
    split_kv_b = hp.record.has(HParams.n_embd_head_k_mla)
    k_mla = hp.record.n_embd_head_k_mla if split_kv_b else hp.head_k
    v_mla = hp.record.n_embd_head_v_mla if hp.record.has(HParams.n_embd_head_v_mla) else hp.head_v
    nope = k_mla - rope
    n_dense, ff_exp = hp.record.n_layer_dense_lead, hp.record.n_ff_exp
    for il in range(hp.n_layer):
        heads = hp.n_head(il)
        b.blk(il, "attn_norm.weight", e)
        if q_lora:
            b.blk(il, "attn_q_a_norm.weight", q_lora)
        b.blk(il, "attn_kv_a_norm.weight", kv_lora)
        if q_lora:
            b.blk(il, "attn_q_a.weight", e, q_lora)
            b.blk(il, "attn_q_b.weight", q_lora, heads * k_mla)
        else:
            b.blk(il, "attn_q.weight", e, heads * k_mla)
        b.blk(il, "attn_kv_a_mqa.weight", e, kv_lora + rope)
        if split_kv_b:
            b.blk(il, "attn_k_b.weight", nope, kv_lora, heads)
            b.blk(il, "attn_v_b.weight", kv_lora, v_mla, heads)
        else:
            b.blk(il, "attn_kv_b.weight", kv_lora, heads * (nope + v_mla))
        b.blk(il, "attn_output.weight", heads * v_mla, e)
        b.blk(il, "ffn_norm.weight", e)
        if il < n_dense:
            b.swiglu(il, e, hp.n_ff(il))
            continue
        b.experts(il, e, ff_exp, hp.n_expert)
        if hp.record.n_expert_groups > 1:
            b.blk(il, "exp_probs_b.bias", hp.n_expert)
        b.shared_expert(il, e, ff_exp * hp.record.n_expert_shared)
    return b.tensors


# --- recurrent and hybrid -----------------------------------------------------------------------------------


def tensors_lfm2(hp: Shape) -> list[Tensor]:
    # src/models/lfm2.cpp: short-conv layers where head_count_kv is 0, GQA with Q/K norms elsewhere; the final
    # norm is named token_embd_norm
    b = _decoder(hp, norm="token_embd_norm")
    e = hp.n_embd
    for il in range(hp.n_layer):
        b.blk(il, "ffn_norm.weight", e)
        b.swiglu(il, e, hp.n_ff(il))
        b.blk(il, "attn_norm.weight", e)
        if hp.n_head_kv(il):
            b.blk(il, "attn_q_norm.weight", hp.head_dim)
            b.blk(il, "attn_k_norm.weight", hp.head_dim)
            b.gqa(hp, il)
        else:
            b.blk(il, "shortconv.conv.weight", hp.record.n_shortconv_l_cache, e)
            b.blk(il, "shortconv.in_proj.weight", e, 3 * e)
            b.blk(il, "shortconv.out_proj.weight", e, e)
    return b.tensors


def tensors_mamba(hp: Shape) -> list[Tensor]:
    # src/models/mamba.cpp: every layer a Mamba-1 mixer: ssm_in (x and z), the convolution, x_proj (dt, B, C),
    # dt_proj, A and D, out; no FFN
    b = _decoder(hp)
    e = hp.n_embd
    rec = hp.record
    d_conv, d_inner, d_state, rank = rec.ssm_d_conv, rec.ssm_d_inner, rec.ssm_d_state, rec.ssm_dt_rank
    for il in range(hp.n_layer):
        b.blk(il, "attn_norm.weight", e)
        b.blk(il, "ssm_in.weight", e, 2 * d_inner)
        b.blk(il, "ssm_conv1d.weight", d_conv, d_inner)
        b.blk(il, "ssm_conv1d.bias", d_inner)
        b.blk(il, "ssm_x.weight", d_inner, rank + 2 * d_state)
        b.blk(il, "ssm_dt.weight", rank, d_inner)
        b.blk(il, "ssm_dt.bias", d_inner)
        b.blk(il, "ssm_a", d_state, d_inner)
        b.blk(il, "ssm_d", d_inner)
        b.blk(il, "ssm_out.weight", d_inner, e)
    return b.tensors


def tensors_mamba2(hp: Shape) -> list[Tensor]:
    # src/models/mamba2.cpp: every layer a Mamba-2 mixer with a grouped RMS norm, no FFN
    b = _decoder(hp)
    for il in range(hp.n_layer):
        b.blk(il, "attn_norm.weight", hp.n_embd)
        b.mamba2(hp, il)
    return b.tensors


def tensors_granitehybrid(hp: Shape) -> list[Tensor]:
    # src/models/granite-hybrid.cpp: Mamba-2 where head_count_kv is 0, attention elsewhere; then a SwiGLU FFN, or
    # routed experts and a shared expert when expert_count > 0
    b = _decoder(hp)
    e = hp.n_embd
    for il in range(hp.n_layer):
        b.blk(il, "attn_norm.weight", e)
        if hp.n_head_kv(il) == 0:
            b.mamba2(hp, il)
        else:
            b.qkv(il, e, hp.head_dim * hp.n_head(il), hp.head_dim * hp.n_head_kv(il), hp.head_dim * hp.n_head_kv(il))
            b.blk(il, "attn_output.weight", hp.head_dim * hp.n_head(il), e)
        b.blk(il, "ffn_norm.weight", e)
        if not hp.n_expert:
            b.swiglu(il, e, hp.n_ff(il))
            continue
        b.experts(il, e, hp.n_ff(il), hp.n_expert)
        if shared := hp.record.n_ff_shexp:
            b.shared_expert(il, e, shared)
    return b.tensors


def tensors_falcon_h1(hp: Shape) -> list[Tensor]:
    # src/models/falcon-h1.cpp: a Mamba-2 mixer (no grouped norm) beside GQA in every layer, then a SwiGLU FFN;
    # the FFN norm's name has no `.weight` suffix (tn(LLM_TENSOR_FFN_NORM, i))
    b = _decoder(hp)
    e, hk = hp.n_embd, hp.head_k
    for il in range(hp.n_layer):
        b.mamba2(hp, il, norm=False)
        b.qkv(il, e, hk * hp.n_head(0), hk * hp.n_head_kv(0), hp.head_v * hp.n_head_kv(0))
        b.blk(il, "attn_output.weight", hk * hp.n_head(0), e)
        b.blk(il, "attn_norm.weight", e)
        b.blk(il, "ffn_norm", e)
        b.swiglu(il, e, hp.n_ff(0))
    return b.tensors


def tensors_qwen3next(hp: Shape) -> list[Tensor]:
    # src/models/qwen3next.cpp: gated DeltaNet layers with a gated-attention layer every full_attention_interval
    # (Q doubled for the gate); every layer routed experts and a gated shared expert
    b = _decoder(hp)
    e, hk = hp.n_embd, hp.head_k
    interval = 4 if hp.record.full_attn_interval is None else hp.record.full_attn_interval
    d_state, n_k, n_v = hp.record.ssm_d_state, hp.record.ssm_n_group, hp.record.ssm_dt_rank
    key_dim, value_dim = d_state * n_k, d_state * n_v
    shared = hp.record.n_ff_shexp or hp.n_ff()
    for il in range(hp.n_layer):
        b.blk(il, "attn_norm.weight", e)
        b.blk(il, "post_attention_norm.weight", e)
        if (il + 1) % interval == 0:
            b.qkv(il, e, hk * hp.n_head(il) * 2, hk * hp.n_head_kv(il), hp.head_v * hp.n_head_kv(il))
            b.blk(il, "attn_output.weight", hk * hp.n_head(il), e)
            b.blk(il, "attn_q_norm.weight", hk)
            b.blk(il, "attn_k_norm.weight", hk)
        else:
            b.blk(il, "attn_qkv.weight", e, 2 * key_dim + value_dim)
            b.blk(il, "attn_gate.weight", e, value_dim)
            b.blk(il, "ssm_conv1d.weight", hp.record.ssm_d_conv, 2 * key_dim + value_dim)
            b.blk(il, "ssm_dt.bias", n_v)
            b.blk(il, "ssm_a", n_v)
            b.blk(il, "ssm_ba.weight", e, 2 * n_v)
            b.blk(il, "ssm_norm.weight", d_state)
            b.blk(il, "ssm_out.weight", value_dim, e)
        b.experts(il, e, hp.record.n_ff_exp, hp.n_expert)
        b.blk(il, "ffn_gate_inp_shexp.weight", e)
        b.shared_expert(il, e, shared)
    return b.tensors


@dataclass(frozen=True)
class ParameterCount:
    """A tensor list's parameters, split as llama-quantize treats them."""

    quantized: int  # in tensors the conversion stores in F16: the quantizer gives them the recipe's types
    f32: int  # in tensors it keeps in F32 whatever the quant (norms, biases, routers, convolutions, embeddings)

    @property
    def total(self) -> int:
        return self.quantized + self.f32


def count_parameters(tensors: list[Tensor]) -> ParameterCount:
    quantized = sum(math.prod(t.ne) for t in tensors if t.source != QT.F32)
    return ParameterCount(quantized, sum(math.prod(t.ne) for t in tensors) - quantized)
