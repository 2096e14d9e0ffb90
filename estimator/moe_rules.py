"""build_moe_ffn's arguments as each architecture's builder passes them (src/models/<arch>.cpp over
llm_graph_context::build_moe_ffn): one `Routing` per block that routes experts, read from the file's keys and, where
known, its tensor names. A router returns None where the builder would pass what build_moe_ffn does not know (a
gating function it aborts on): the graph is then not derived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from memfit.estimator.hparams import Layers, NewerKeys
from memfit.estimator.layout import FfnOp, Gating, Routing
from memfit.gguf_constants import MODEL_TENSOR, TENSOR_NAMES, Keys
from memfit.integers import is_int

LLM = Keys.LLM
SWIGLU_CLAMP_EPS = 1e-6  # build_ffn / build_moe_ffn: a swiglu clamp limit counts above this
GATE_UP_EXPS = TENSOR_NAMES[MODEL_TENSOR.FFN_GATE_UP_EXP] + ".weight"  # blk.{bid}.ffn_gate_up_exps.weight
ROUTED_NORM = "blk.{bid}.ffn_routed_norm.weight"  # LLM_TENSOR_FFN_ROUTED_NORM (kimi-k3)

Router = Callable[[Layers, int], Routing | None]  # (the model's layers, the block) -> its build_moe_ffn call


def layer_tensor(ly: Layers, template: str, il: int) -> bool | None:
    # a tensor the loader creates TENSOR_NOT_REQUIRED: in the file or not (None: the file's names are unknown)
    return None if ly.tensors is None else template.format(bid=il) in ly.tensors


def file_gating(ly: Layers) -> Gating | None:
    # llama_model_<arch>::load_arch_hparams: expert_gating_func as the file has it (build_moe_ffn aborts on others)
    value = ly.hp.optional_int(LLM.EXPERT_GATING_FUNC, 0)
    return Gating(value) if value in {g.value for g in Gating} else None


def file_norm(ly: Layers) -> bool:
    # llama_model_<arch>::load_arch_hparams: expert_weights_norm (false when absent)
    return ly.hp.optional_bool(LLM.EXPERT_WEIGHTS_NORM, False)


def file_scale(ly: Layers) -> bool:
    # build_moe_ffn scales the weights where expert_weights_scale (0 when absent or unread) is neither 0 nor 1
    return (ly.hp.optional_float(LLM.EXPERT_WEIGHTS_SCALE) or 0.0) not in (0.0, 1.0)


def swiglu_clamped(ly: Layers, key: str, il: int) -> bool:
    # get_key_or_arr(LLM_KV_SWIGLU_CLAMP_EXP / _SHEXP): one limit for every layer or one per layer (0 when absent);
    # build_moe_ffn / build_ffn clamp where the layer's exceeds 1e-6
    value = ly.hp.metadata.get(ly.hp.key(key))
    limits = value if isinstance(value, tuple) else (value,) * ly.n_all
    limit = limits[il] if il < len(limits) else None
    return (is_int(limit) or isinstance(limit, float)) and float(limit) > SWIGLU_CLAMP_EPS


def routing(ly: Layers, il: int, call: Routing) -> Routing:
    # what every builder's build_moe_ffn call shares beside its own arguments: hparams.n_expert_groups / n_group_used
    # (llama_model_base::load_hparams, any architecture) and create_tensor_gate_up_exps's merged experts where the
    # layer holds them
    groups = ly.hp.optional_int(LLM.EXPERT_GROUP_COUNT, 0)
    return replace(
        call,
        groups=groups if groups > 1 else 0,
        groups_used=ly.hp.optional_int(LLM.EXPERT_GROUP_USED_COUNT, 0) if groups > 1 else 0,
        fused_gate_up=layer_tensor(ly, GATE_UP_EXPS, il) is True,
    )


def softmax_router(ly: Layers, il: int) -> Routing | None:
    # build_moe_ffn as most builders call it (llama.cpp, qwen3moe.cpp): softmax, SwiGLU experts, the weights as
    # they are
    return routing(ly, il, Routing())


def lfm2moe_router(ly: Layers, il: int) -> Routing | None:
    # llama_model_lfm2::graph build_moe_feed_forward: expert_gating_func (required), exp_probs_b (required), norm_w
    # true; w_scale is expert_weights_scale, which llama_model_lfm2moe::load_arch_hparams never reads (0)
    gating = file_gating(ly)
    return routing(ly, il, Routing(gating, probs_bias=True, norm=True)) if gating else None


def nemotron_h_router(ly: Layers, il: int) -> Routing | None:
    # llama_model_nemotron_h::graph::build_ffn_layer: sigmoid, exp_probs_b (required), norm_w and w_scale from
    # expert_weights_norm / _scale, up experts (no gate) with relu^2; in moe_latent_size (ffn_latent_down / _up)
    latent = ly.hp.optional_int(LLM.MOE_LATENT_SIZE, 0)
    call = Routing(Gating.SIGMOID, True, norm=file_norm(ly), scale=file_scale(ly), gated=False, latent=latent)
    return routing(ly, il, replace(call, activation=FfnOp.RELU_SQR))


def qwen_next_router(ly: Layers, il: int) -> Routing | None:
    # llama_model_qwen3next / _qwen35moe::graph: softmax, no exp_probs_b, norm_w true; expert_weights_scale unread
    return routing(ly, il, Routing(norm=True))


def _file_routing(ly: Layers, il: int) -> Routing | None:
    # the kimi and bailingmoe3 calls: the file's expert_gating_func, norm and scale, exp_probs_b
    gating = file_gating(ly)
    return routing(ly, il, Routing(gating, True, norm=file_norm(ly), scale=file_scale(ly))) if gating else None


def kimi_linear_router(ly: Layers, il: int) -> Routing | None:
    # llama_model_kimi_linear::graph: as kimi-k3's and bailingmoe3's, but norm_w true
    call = _file_routing(ly, il)
    return replace(call, norm=True) if call else None


def kimi_k3_router(ly: Layers, il: int) -> Routing | None:
    # llama_model_kimi_k3::graph::build_latent_moe: situ (situ_linear_beta), the experts in expert_latent_length
    # (ffn_routed_down / _up; ffn_routed_norm not required)
    call, hp = _file_routing(ly, il), ly.hp
    latent = hp.optional_int(NewerKeys.EXPERT_LATENT_LENGTH, 0)
    situ_linear = (hp.optional_float(NewerKeys.SITU_LINEAR_BETA) or 0.0) > 0.0
    latent_norm = latent > 0 and layer_tensor(ly, ROUTED_NORM, il) is not False
    if call is None:
        return None
    return replace(call, activation=FfnOp.SITU, situ_linear=situ_linear, latent=latent, latent_norm=latent_norm)


def bailingmoe3_router(ly: Layers, il: int) -> Routing | None:
    # llama_model_bailingmoe3::graph: the layer's swiglu_clamp_exp
    call = _file_routing(ly, il)
    return replace(call, clamped=swiglu_clamped(ly, LLM.SWIGLU_CLAMP_EXP, il)) if call else None
