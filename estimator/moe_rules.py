"""build_moe_ffn's arguments as each architecture's builder passes them (src/models/<arch>.cpp over
llm_graph_context::build_moe_ffn): one `Routing` per block that routes experts, read from the file's keys and, where
known, its tensor names. A rule returns None where the builder would pass what build_moe_ffn does not know (a gating
function it aborts on): the graph is then not derived.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from memfit.estimator.gguf_file import Value
from memfit.estimator.hparams import HParams, Key, Layers
from memfit.estimator.layout import FfnOp, Gating, Routing
from memfit.gguf_constants import MODEL_TENSOR, TENSOR_NAMES
from memfit.integers import is_int

SWIGLU_CLAMP_EPS = 1e-6  # build_ffn / build_moe_ffn: a swiglu clamp limit counts above this
GATE_EXPS = TENSOR_NAMES[MODEL_TENSOR.FFN_GATE_EXP] + ".weight"  # blk.{bid}.ffn_gate_exps.weight
GATE_UP_EXPS = TENSOR_NAMES[MODEL_TENSOR.FFN_GATE_UP_EXP] + ".weight"  # blk.{bid}.ffn_gate_up_exps.weight
GATE_EXPS = TENSOR_NAMES[MODEL_TENSOR.FFN_GATE_EXP] + ".weight"  # blk.{bid}.ffn_gate_exps.weight
DOWN_EXPS_SCALE = TENSOR_NAMES[MODEL_TENSOR.FFN_DOWN_EXP] + ".scale"  # blk.{bid}.ffn_down_exps.scale
SHARED_UP = TENSOR_NAMES[MODEL_TENSOR.FFN_UP_SHEXP] + ".weight"  # blk.{bid}.ffn_up_shexp.weight
ROUTER_BIAS = TENSOR_NAMES[MODEL_TENSOR.FFN_EXP_PROBS_B] + ".bias"  # blk.{bid}.exp_probs_b.bias
UP_SHEXP = TENSOR_NAMES[MODEL_TENSOR.FFN_UP_SHEXP] + ".weight"  # blk.{bid}.ffn_up_shexp.weight
HY_V3_ROUTER_BIAS = TENSOR_NAMES[MODEL_TENSOR.FFN_EXP_PROBS_B]  # blk.{bid}.exp_probs_b: hy-v3.cpp's tn(), no suffix
ROUTED_NORM = "blk.{bid}.ffn_routed_norm.weight"  # LLM_TENSOR_FFN_ROUTED_NORM (kimi-k3)
GLM_LITE_VOCAB, GLM_LITE_TRUNKS = 154880, (47, 48)  # GLM 4.7 Lite's shape, which deepseek2's loader routes by sigmoid

# (the model's layers, the block, the vocabulary's size where known) -> the block's build_moe_ffn call
RoutingRule = Callable[[Layers, int, int | None], Routing | None]


def layer_tensor(ly: Layers, template: str, il: int) -> bool | None:
    # a tensor the loader creates TENSOR_NOT_REQUIRED: in the file or not (None: the file's names are unknown)
    return None if ly.tensors is None else template.format(bid=il) in ly.tensors


def file_gating(ly: Layers, absent: Gating | None = None) -> Gating | None:
    # llama_model_<arch>::load_arch_hparams: expert_gating_func, `absent` where the file has none (0); a value
    # build_moe_ffn does not know aborts it
    value = ly.hp.expert_gating_func
    return absent if value == 0 else next((g for g in Gating if g.value == value), None)


def file_norm(ly: Layers) -> bool:
    # llama_model_<arch>::load_arch_hparams: expert_weights_norm (false when absent)
    return ly.hp.expert_weights_norm


def file_scale(ly: Layers) -> bool:
    # build_moe_ffn scales the weights where expert_weights_scale (0 when absent or unread) is neither 0 nor 1
    return (ly.hp.expert_weights_scale or 0.0) not in (0.0, 1.0)


def biased(ly: Layers, il: int, unknown: bool) -> bool:
    # ffn_exp_probs_b (TENSOR_NOT_REQUIRED in some loaders): where the layer holds it, `unknown` where the file's
    # names are not known
    present = layer_tensor(ly, ROUTER_BIAS, il)
    return unknown if present is None else present


def swiglu_clamped(ly: Layers, field: Key[Value | None], il: int) -> bool:
    # get_key_or_arr(LLM_KV_SWIGLU_CLAMP_EXP / _SHEXP): one limit for every layer or one per layer (0 when absent);
    # build_moe_ffn / build_ffn clamp where the layer's exceeds 1e-6
    value = ly.hp.value(field)
    limits = value if isinstance(value, tuple) else (value,) * ly.n_all
    limit = limits[il] if il < len(limits) else None
    return (is_int(limit) or isinstance(limit, float)) and float(limit) > SWIGLU_CLAMP_EPS


def expert_width(ly: Layers, il: int) -> int:
    # llama_hparams::n_ff_exp: expert_feed_forward_length, else the layer's feed_forward_length
    return ly.hp.n_ff_exp or ly.ff[il]


def shared_width(ly: Layers, il: int, count: int = 0) -> int:
    # llama_model_<arch>::load_arch_tensors: the shared experts expert_shared_feed_forward_length wide, else
    # n_expert_shared (`count` where the file has none) x n_ff_exp
    width = ly.hp.n_ff_shexp
    shared = ly.hp.n_expert_shared if ly.hp.has(HParams.n_expert_shared) else count
    return width or shared * expert_width(ly, il)


def shared(ly: Layers, il: int, call: Routing) -> Routing:
    # what every builder's build_moe_ffn call shares beside its own arguments: hparams.n_expert_groups / n_group_used
    # (llama_model_base::load_hparams, any architecture) and create_tensor_gate_up_exps's merged experts where the
    # layer holds them; and the shared experts beside the call, by the loaders' usual width (shared_width)
    groups = ly.hp.n_expert_groups
    return replace(
        call,
        groups=groups if groups > 1 else 0,
        groups_used=ly.hp.n_group_used if groups > 1 else 0,
        fused_gate_up=layer_tensor(ly, GATE_UP_EXPS, il) is True,
        shared_ff=shared_width(ly, il),
    )


def scaled_experts(ly: Layers, il: int, call: Routing) -> Routing:
    # the builders that pass build_moe_ffn ffn_down_exps_s (llama_model_base creates it, not required, for every
    # layer with experts): where the layer holds it
    return replace(call, down_scale=layer_tensor(ly, DOWN_EXPS_SCALE, il) is True)


def shared_of_count(ly: Layers, il: int, width: int) -> int:
    # kimi's and ling's loaders: the shared experts n_ff_exp * max(1, n_expert_shared) wide (ffn_*_shexp not
    # required: none where the layer has no ffn_up_shexp)
    count = max(1, ly.hp.n_expert_shared)
    return width * count if layer_tensor(ly, SHARED_UP, il) is not False else 0


def _from_file(ly: Layers, il: int, gating: Gating | None, probs_bias: bool) -> Routing | None:
    # the calls that pass the file's expert_weights_norm and _scale
    call = Routing(gating, probs_bias, norm=file_norm(ly), scale=file_scale(ly)) if gating else None
    return shared(ly, il, call) if call else None


def plain_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # build_moe_ffn as the plain MoE builders call it (llama.cpp, qwen3moe.cpp): softmax, SwiGLU experts, the
    # weights as they are
    return shared(ly, il, Routing())


def gpt_oss_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # openai-moe.cpp: build_moe_ffn with ffn_gate_inp_b and the experts' biases, SOFTMAX_WEIGHT, no norm_w
    return shared(ly, il, Routing(Gating.SOFTMAX_WEIGHT, biases=True))


def normed_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # qwen3moe.cpp, granite.cpp, granite-hybrid.cpp: build_moe_ffn(..., LLM_FFN_SILU, norm_w = true, ...), softmax
    return shared(ly, il, Routing(norm=True))


def deepseek2_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_deepseek2::load_arch_hparams: no expert_gating_func is softmax (V2, V2.5), or sigmoid on GLM 4.7
    # Lite's shape (47 or 48 trunk layers, 154880 tokens); expert_weights_norm, _scale; exp_probs_b on the grouped
    # routers (tensor_list.tensors_deepseek2) where the file's names are unknown
    lite_glm = ly.n_trunk in GLM_LITE_TRUNKS and n_vocab == GLM_LITE_VOCAB
    gating = file_gating(ly, Gating.SIGMOID if lite_glm else Gating.SOFTMAX)
    return _from_file(ly, il, gating, biased(ly, il, ly.hp.n_expert_groups > 1))


def _dsa(ly: Layers, il: int, call: Routing | None) -> Routing | None:
    # llama_model_deepseek32 / _glm_dsa: the experts' scales passed on; the shared experts n_ff_exp * n_expert_shared
    # wide (their loaders read no expert_shared_feed_forward_length)
    if call is None:
        return None
    width = ly.hp.n_expert_shared * expert_width(ly, il)
    return replace(scaled_experts(ly, il, call), shared_ff=width)


def deepseek32_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_deepseek32::load_arch_hparams: expert_gating_func (required; none aborts build_moe_ffn),
    # expert_weights_norm, _scale; exp_probs_b where the layer has it (DeepSeek-V3.2's checkpoints carry it)
    return _dsa(ly, il, _from_file(ly, il, file_gating(ly), biased(ly, il, True)))


def glm_dsa_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_glm_dsa::load_arch_hparams: expert_gating_func, sigmoid when absent; as deepseek32's otherwise
    return _dsa(ly, il, _from_file(ly, il, file_gating(ly, Gating.SIGMOID), biased(ly, il, True)))


def deepseek4_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_deepseek4: sqrt-softplus gating (the loader refuses any other), exp_probs_b on the layers past
    # hash_layer_count (the first ones pick by token: ffn_gate_tid2eid's rows, no bias), expert_weights_norm and
    # _scale; build_moe_ffn and build_ffn clamp with one ggml_swiglu_clamp; the shared experts n_ff_exp *
    # n_expert_shared wide
    if file_gating(ly) is not Gating.SQRT_SOFTPLUS:
        return None
    hashed = il < ly.hp.n_hash_layers
    return Routing(
        Gating.SQRT_SOFTPLUS,
        probs_bias=not hashed,
        by_token=hashed,
        norm=file_norm(ly),
        scale=file_scale(ly),
        clamped=swiglu_clamped(ly, HParams.swiglu_clamp_exp, il),
        fused_clamp=True,
        shared_ff=ly.hp.n_expert_shared * expert_width(ly, il),
    )


def minimax01_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # minimax-01.cpp: build_moe_ffn(..., softmax, norm_w = true, expert_weights_scale (never read: 0)); no
    # exp_probs_b, no merged or shared experts; ffn_gate_exps not required (without it up alone, then silu)
    call = shared(ly, il, Routing(norm=True, gated=layer_tensor(ly, GATE_EXPS, il) is not False))
    return replace(call, fused_gate_up=False, shared_ff=0)


def sigmoid_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_glm4_moe / _step35 / _afmoe::load_arch_hparams: expert_gating_func, sigmoid when absent;
    # expert_weights_norm, _scale; exp_probs_b (required by glm4moe's and afmoe's loaders, carried by Step-3.5's
    # checkpoints)
    return _from_file(ly, il, file_gating(ly, Gating.SIGMOID), biased(ly, il, True))


def exaone_moe_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_exaone_moe::load_arch_hparams: expert_gating_func (required), expert_weights_norm, _scale;
    # exp_probs_b (TENSOR_NOT_REQUIRED) where the layer holds it, as the checkpoints carry it where names are unknown
    return _from_file(ly, il, file_gating(ly), biased(ly, il, True))


def smallthinker_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # smallthinker.cpp: build_moe_ffn(..., LLM_FFN_RELU, norm_w = true, w_scale unread (0), the file's
    # expert_gating_func (NONE when absent: build_moe_ffn aborts), the router's logits given (probs_in)
    gating = file_gating(ly)
    return shared(ly, il, Routing(gating, norm=True, activation=FfnOp.RELU)) if gating else None


def step35_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_step35::load_arch_hparams: as glm4moe's, and the layer's swiglu_clamp_exp
    call = sigmoid_routing(ly, il, n_vocab)
    return replace(call, clamped=swiglu_clamped(ly, HParams.swiglu_clamp_exp, il)) if call else None


def hy_v3_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_hy_v3: expert_gating_func, sigmoid when absent; expert_weights_norm, _scale; exp_probs_b (not
    # required) under its loader's name, without the ".bias" suffix; the shared expert (not required) where the layer
    # holds it, expert_shared_feed_forward_length wide, else n_ff_exp
    bias = layer_tensor(ly, HY_V3_ROUTER_BIAS, il)
    call = _from_file(ly, il, file_gating(ly, Gating.SIGMOID), bias is not False)
    if call is None:
        return None
    held = layer_tensor(ly, UP_SHEXP, il) is not False
    return replace(call, shared_ff=(ly.hp.n_ff_shexp or expert_width(ly, il)) if held else 0)


def mimo2_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # mimo2.cpp: build_moe_ffn(..., ffn_exp_probs_b, norm_w = true, expert_weights_scale, SIGMOID)
    call = _from_file(ly, il, Gating.SIGMOID, biased(ly, il, True))
    return replace(call, norm=True) if call else None


def minicpm_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # granite.cpp's build_layer_ffn as llama_model_minicpm runs it: softmax, norm_w true, expert_weights_scale and
    # n_ff_shexp never read by its loader (no scaling, no shared experts); ffn_gate_exps not required (up alone)
    call = Routing(norm=True, gated=layer_tensor(ly, GATE_EXPS, il) is not False)
    return replace(shared(ly, il, call), shared_ff=0)


def lfm2moe_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_lfm2::graph build_moe_feed_forward: expert_gating_func (required), exp_probs_b (required), norm_w
    # true; w_scale is expert_weights_scale, which llama_model_lfm2moe::load_arch_hparams never reads (0)
    gating = file_gating(ly)
    return shared(ly, il, Routing(gating, probs_bias=True, norm=True)) if gating else None


def nemotron_h_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_nemotron_h::graph::build_ffn_layer: sigmoid, exp_probs_b (required), norm_w and w_scale from
    # expert_weights_norm / _scale, up experts (no gate) with relu^2; in moe_latent_size (ffn_latent_down / _up)
    call = _from_file(ly, il, Gating.SIGMOID, True)
    latent = ly.hp.moe_latent_size
    projections = ("ffn_latent_down", "ffn_latent_up")
    return (
        replace(call, gated=False, activation=FfnOp.RELU_SQR, latent=latent, latent_weights=projections)
        if call
        else None
    )


def qwen_next_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_qwen3next / _qwen35moe::graph: softmax, no exp_probs_b, norm_w true (expert_weights_scale unread),
    # the experts' scales; load_block_trunk: the shared expert expert_shared_feed_forward_length wide, else n_ff
    width = ly.hp.n_ff_shexp or (ly.ff[0] if ly.n_all else 0)
    return replace(scaled_experts(ly, il, shared(ly, il, Routing(norm=True))), shared_ff=width)


def qwen4exp_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_qwen4exp::graph::build_layer_ffn: qwen3.5's experts and sigmoid-gated shared expert; its loader's
    # n_ff_exp where the file has no expert_feed_forward_length (n_ff / n_expert_used) is not rebuilt
    return qwen_next_routing(ly, il, n_vocab) if ly.hp.has(HParams.n_ff_exp) else None


def kimi_linear_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_kimi_linear::graph: expert_gating_func, exp_probs_b, norm_w true, expert_weights_scale
    call = _from_file(ly, il, file_gating(ly), True)
    width = shared_of_count(ly, il, ly.hp.n_ff_exp)
    return replace(call, norm=True, shared_ff=width) if call else None


def kimi_k3_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_kimi_k3::graph::build_latent_moe: the file's gating, norm and scale, exp_probs_b, situ (with
    # situ_linear_beta), the experts in expert_latent_length (ffn_routed_down / _up; ffn_routed_norm not required)
    call, hp = _from_file(ly, il, file_gating(ly), True), ly.hp
    latent = hp.expert_latent_length
    situ_linear = (hp.situ_linear_beta or 0.0) > 0.0
    latent_norm = latent > 0 and layer_tensor(ly, ROUTED_NORM, il) is not False
    width = shared_of_count(ly, il, hp.n_ff_exp)
    if call is None:
        return None
    return replace(
        call, activation=FfnOp.SITU, situ_linear=situ_linear, latent=latent, latent_norm=latent_norm, shared_ff=width
    )


def bailingmoe3_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_bailingmoe3::graph: the file's gating, norm and scale, exp_probs_b; the layer's swiglu_clamp_exp;
    # the shared experts expert_shared_feed_forward_length wide, else n_ff_exp * max(1, n_expert_shared)
    call, hp = _from_file(ly, il, file_gating(ly), True), ly.hp
    width = hp.n_ff_shexp or hp.n_ff_exp * max(1, hp.n_expert_shared)
    return replace(call, clamped=swiglu_clamped(ly, HParams.swiglu_clamp_exp, il), shared_ff=width) if call else None


def laguna_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama_model_laguna::load_arch_hparams: afmoe's and glm4moe's router (sigmoid_routing); n_expert_shared 1 where
    # the file has none
    call = sigmoid_routing(ly, il, n_vocab)
    return replace(call, shared_ff=shared_width(ly, il, count=1)) if call else None


def cohere2moe_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # cohere2moe.cpp: no exp_probs_b; expert_gating_func (sigmoid when absent), expert_weights_norm, _scale; the
    # file's gate_up_exps and the experts' scales passed on
    call = _from_file(ly, il, file_gating(ly, Gating.SIGMOID), False)
    return scaled_experts(ly, il, call) if call else None


def llama4_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # llama4.cpp: build_moe_ffn(..., norm_w = false, expert_weights_scale, SIGMOID) under LLM_ARCH_LLAMA4's
    # branches (weight_before_ffn); llama_model_llama4::load_arch_tensors: a shared expert n_ff_exp wide
    call = shared(ly, il, Routing(Gating.SIGMOID, scale=file_scale(ly), weight_before_ffn=True))
    return replace(call, shared_ff=expert_width(ly, il))


def gemma4_routing(ly: Layers, il: int, n_vocab: int | None) -> Routing | None:
    # gemma4.cpp: build_moe_ffn(..., LLM_FFN_GELU, norm_w = true, w_scale = 1.0f, SOFTMAX, probs_in, gate_up_exps,
    # the experts' scales); the layer's own FFN (n_ff(il)) beside the experts
    call = shared(ly, il, Routing(norm=True, activation=FfnOp.GELU))
    return replace(scaled_experts(ly, il, call), shared_ff=ly.ff[il])
