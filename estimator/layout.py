"""What a model keeps per token and per sequence, layer by layer: the input of the memory arithmetic."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memfit.estimator.context import ContextGeometry
    from memfit.estimator.ggml_graph import Graph


@dataclass(frozen=True)
class AttentionLayer:
    """A layer that owns KV cells (a layer that reuses another layer's KV is not listed)."""

    k_width: int  # elements of K per cell: n_head_kv(l) * head_dim_k(l), or the MLA latent + rope key
    v_width: int  # elements of V per cell with flash attention on
    window: int | None = None  # sliding-window size for an SWA layer, None for a full-context layer
    has_v: bool = True  # False for MLA: the cache keeps K only
    ratio: int = 0  # a compressed cache's positions per cell (deepseek4's CSA / HCA / indexer caches; 0: one each)


@dataclass(frozen=True)
class RecurrentLayer:
    """A layer that keeps a fixed-size state per sequence, independent of the context."""

    r_elements: int  # conv / token-shift state (llama.cpp's R tensor), F32
    s_elements: int  # SSM / WKV state (llama.cpp's S tensor), F32
    p_elements: int = 0  # qwen4exp's PLE conv history (its own cache_ple_r tensor, R's type), on a PLE layer


@dataclass(frozen=True)
class KvCache:
    """One of llama.cpp's KV caches: its layers, and the V row width a transposed (flash-attention-off)
    V uses on every one of them (n_embd_v_gqa_max over all the model's layers)."""

    layers: tuple[AttentionLayer, ...]
    v_width_max: int = 0
    # the model layer (il) of each of its layers, where the layout knows it (the device that holds each: the cache's
    # tensors of layer il are in dev_layer(il)'s buffer type, llama_kv_cache's constructor); empty: not known
    layer_ids: tuple[int, ...] = ()


class SwaType(Enum):
    """llama_swa_type of a model with a KV cache: how a sliding-window layer masks the positions behind the newest
    one (llama_hparams::is_masked_swa; SYMMETRIC is only set for architectures without a cache)."""

    STANDARD = "standard"  # p1 - p0 >= n_swa is masked
    CHUNKED = "chunked"  # positions before the newest one's chunk are masked (llama4)


class Mixer(Enum):
    """The kind of a model's recurrent blocks: the builder function llama.cpp makes them with."""

    NONE = ""  # no recurrent blocks
    MAMBA2 = "mamba2"  # llm_build_mamba_base::build_mamba2_layer (rebuilt)
    SHORT_CONV = "short_conv"  # lfm2.cpp's build_shortconv_block (rebuilt; the block adds to the residual first)
    MAMBA = "mamba"  # llm_build_mamba_base::build_mamba_layer (rebuilt)
    GATED_DELTA_NET = "gated_delta_net"  # qwen3next / qwen35 (rebuilt: estimator/graph_delta_net.py)
    KDA = "kda"  # kimi-linear's delta attention (rebuilt: estimator/graph_delta_net.py)
    RWKV = "rwkv"  # the RWKV time and channel mixes (rebuilt: estimator/graph_rwkv.py)
    PLAMO2 = "plamo2"  # plamo2.cpp's own Mamba mixer (rebuilt: estimator/graph_plamo2.py)
    LIGHTNING = "lightning"  # minimax-01.cpp's lightning attention (rebuilt: estimator/graph_minimax.py)


@dataclass(frozen=True)
class Ssm:
    """A Mamba mixer's sizes (llama_hparams ssm_*)."""

    d_inner: int
    d_state: int
    n_group: int  # 0 for Mamba-1 (its loaders never read it)
    n_head: int  # ssm_dt_rank (Mamba-1: the rank of dt)
    d_conv: int
    norms: bool = False  # Mamba-1: RMS norms on dt, B and C (ssm_dt_b_c_rms, or jamba's dt / B / C norm weights)
    norm_weights: bool = False  # the norms' weights (jamba's); FalconMamba's ssm_dt_b_c_rms norms have none
    grouped_norm: bool = True  # Mamba-2: ssm_norm, the grouped RMS norm of y (falcon-h1's loader does not require it)


@dataclass(frozen=True)
class Wkv:
    """An RWKV block's sizes and variant (llama_hparams wkv_head_size and LoRA ranks; src/models/rwkv*.cpp)."""

    version: int  # 6: llm_build_rwkv6_base::build_rwkv6_time_mix, 7: llm_build_rwkv7_base::build_rwkv7_time_mix
    head_size: int
    decay_rank: int  # the decay LoRA: time_decay_extra_dim (6), decay_lora_rank (7)
    mix_rank: int = 0  # 6: time_mix_extra_dim, the five-way token-shift LoRA
    iclr_rank: int = 0  # 7: the in-context learning rate's (a) LoRA
    value_rank: int = 0  # 7: the value residual's LoRA (every layer after the first mixes in its value)
    gate_rank: int = 0  # 7: the output gate's LoRA (0: no gate)
    n_head_kv: int = 0  # 6: k and v heads, repeated up to n_embd / head_size when fewer (0: as many)
    gated_linear: bool = False  # 6 without time_mix_first (QRWKV): ggml_gated_linear_attn, a sigmoid gate
    group_norm: bool = True  # time_mix_ln: the WKV output's group norm
    channel_mix: int = 0  # the channel mix's width (LayerNorms, a two-row token shift); 0: RMS norms, a SwiGLU FFN


class Gating(Enum):
    """llama_expert_gating_func_type: how build_moe_ffn turns the router's logits into probabilities."""

    SOFTMAX = 1
    SIGMOID = 2
    SOFTMAX_WEIGHT = 3  # the logits select; a softmax over the picked experts' logits weighs them
    SQRT_SOFTPLUS = 4


class FfnOp(Enum):
    """llm_ffn_op_type, as build_ffn and build_moe_ffn run it."""

    SILU = "silu"  # with a gate: swiglu (clamped where the layer has a limit); without: silu
    GELU = "gelu"  # with a gate: geglu (ggml_geglu_split, gemma4); without: gelu
    RELU_SQR = "relu_sqr"  # no gate: relu, then sqr
    RELU = "relu"  # with a gate: reglu (ggml_reglu_split); without: relu
    SITU = "situ"  # build_moe_ffn (kimi-k3): beta * tanh(gate / beta) * sigmoid(gate), times up


@dataclass(frozen=True)
class Routing:
    """One block's call of llm_graph_context::build_moe_ffn beyond the widths (n_expert, n_expert_used, n_ff_exp):
    how the router's logits become probabilities and the experts are picked, what is done to the picked weights,
    how the experts run, the latent a builder runs them in, and the shared experts its build_ffn runs beside them."""

    gating: Gating = Gating.SOFTMAX  # gating_op
    probs_bias: bool = False  # exp_probs_b: the experts picked on probs + bias (a new tensor; the weights from probs)
    by_token: bool = False  # selected_experts given: deepseek4's hash layers pick by token (ffn_gate_tid2eid's rows)
    groups: int = 0  # hparams.n_expert_groups (more than 1: the experts picked in the n_group_used best groups)
    groups_used: int = 0
    norm: bool = False  # norm_w: the picked weights divided by their clamped sum
    scale: bool = False  # w_scale neither 0 nor 1: the weights scaled
    fused_gate_up: bool = False  # gate_up_exps: one expert matmul 2 x n_ff_exp wide, gate and up its views
    gated: bool = True  # gate_exps (or gate_up_exps); False: up_exps alone, then the activation
    activation: FfnOp = FfnOp.SILU  # type_op
    situ_linear: bool = False  # FfnOp.SITU with hparams.situ_linear_beta > 0: the up branch transformed too
    clamped: bool = False  # hparams.swiglu_clamp_exp[il] > 1e-6: silu(gate) and up clamped (FfnOp.SILU)
    fused_clamp: bool = False  # the clamp as one ggml_swiglu_clamp (build_moe_ffn / build_ffn for LLM_ARCH_DEEPSEEK4)
    latent: int = 0  # the experts' width where the builder projects their input into a latent and back (0: none)
    latent_norm: bool = False  # the experts' output RMS-normed in the latent (kimi-k3's ffn_routed_norm)
    latent_weights: tuple[str | None, str | None] = (None, None)  # the projections' names (down, up) where named
    weight_before_ffn: bool = False  # LLM_ARCH_LLAMA4: picked on the logits, the weights times the experts' input
    down_scale: bool = False  # down_exps_s: build_lora_mm_id scales each picked expert's output
    biases: bool = False  # gate_inp_b added to the logits, up/gate/down_exps_b to each picked expert's (ADD_ID)
    shared_ff: int = 0  # the shared experts' width: build_ffn beside the routed experts, its output added (0: none)


@dataclass(frozen=True)
class DeltaNet:
    """A delta-net model's recurrent blocks and the builder's choices around them (src/models/delta-net-base.cpp's
    users: qwen3next, qwen35, qwen35moe with gated delta nets; kimi-linear, kimi-k3, bailingmoe3 with Kimi delta
    attention), the same for every block (estimator/graph_delta_net.py rebuilds them)."""

    head_k: int  # S_k: ssm_d_state (gated delta net), kda.head_dim (KDA)
    k_heads: int  # H_k: ssm_n_group, n_head
    head_v: int  # S_v: ssm_d_inner / ssm_dt_rank, kda.head_dim
    v_heads: int  # H_v: ssm_dt_rank, n_head
    d_conv: int  # ssm_d_conv
    legacy_qkvz: bool = False  # qwen3next: one ssm_in (q, k, v, z per k head) instead of attn_qkv and attn_gate
    q_lora: int = 0  # MLA: the query's low-rank width (wq_a, q_a_norm, wq_b; 0: one wq)
    lower_bound: bool = False  # kimi-k3: kda.gate_lower_bound set (the decay bound * sigmoid(-x), not softplus(x))
    attn_gate: int = 0  # the MLA output gate's width per token (0: none; n_head: one per head; else per element)
    situ_linear: bool = False  # kimi-k3's situ activation with a linear beta: the up branch transformed too
    attn_res: int = 0  # kimi-k3: attn_res.block_size (0: no attention residuals)
    not_rebuilt: str = ""  # what the rebuilt graph leaves out, where the model has it

    @property
    def buildable(self) -> bool:
        """Sizes the loaders accept (every size set, the value heads a multiple of the key heads, S_k == S_v) and
        nothing the rebuilt graph leaves out."""
        sizes = (self.head_k, self.k_heads, self.head_v, self.v_heads, self.d_conv)
        whole = min(sizes) > 0 and self.v_heads % self.k_heads == 0 and self.head_k == self.head_v
        return whole and not self.not_rebuilt


@dataclass(frozen=True)
class Indexer:
    """DeepSeek-V3.2's lightning indexer (DSA: src/models/deepseek32.cpp, glm-dsa.cpp): its sizes (llama_hparams
    indexer_n_head, indexer_head_size, indexer_top_k) and the trunk layers that run it (GLM-5.2's others reuse the
    top-k of the last layer that did; estimator/graph_dsa.py rebuilds it)."""

    n_head: int
    head: int
    top_k: int
    full: tuple[bool, ...]  # llama_hparams::is_indexer_full(il) for every trunk layer


@dataclass(frozen=True)
class Lightning:
    """MiniMax-01's lightning attention blocks (src/models/minimax-01.cpp; estimator/graph_minimax.py rebuilds them):
    the heads every block splits its fused QKV into (hparams.n_head(), n_embd_head_la), and the conv state build_rs
    still reads (n_embd_r(): 0 without ssm keys)."""

    n_head: int
    head: int
    conv: int


@dataclass(frozen=True)
class GraphLayer:
    """One trunk block of llama.cpp's compute graph, as its widths (per token unless stated)."""

    n_head: int = 0  # 0: the block does not attend (recurrent, conv, FFN-only)
    n_head_kv: int = 0
    head_k: int = 0
    head_v: int = 0
    window: int | None = None  # the sliding window of the cache it reads (None: the whole context)
    n_ff: int = 0  # dense FFN width (0: none)
    gated: bool = True  # gate and up (SwiGLU / GeGLU), else up and an activation
    n_expert: int = 0  # routed experts (0: no MoE in this block)
    n_expert_used: int = 0
    n_ff_exp: int = 0
    recurrent_in: int = 0  # the recurrent in-projection's width (0: not recurrent)
    recurrent_state: int = 0  # F32 elements of state per sequence (R + S)
    fused_qkv: bool = False  # one attn_qkv matmul whose output stays alive under the Q/K/V views
    kv_lora: int = 0  # MLA: the latent's width (kv_lora_rank; 0: not MLA); head_k, head_v are the MLA heads
    q_lora: int = 0  # MLA: the query's low-rank width (0: one wq)
    n_rot: int = 0  # MLA: the rope part of each key head
    ssm: Ssm | None = None  # a Mamba block's sizes
    wkv: Wkv | None = None  # an RWKV block's sizes
    rope: bool = True  # rope on Q and K (llama_hparams::has_rope; False: no position encoding, NoPE)
    qk_layer_norm: bool = False  # LayerNorm (ggml_norm: new tensors) of Q and K per head before rope
    qk_norm: bool = False  # RMS norms on Q and K (over a fused QKV's views: a new tensor each, openelm)
    fused_up: bool = False  # one ffn_up 2 x n_ff wide, its halves gated by swiglu (phi3)
    wo_only: bool = False  # deci's "linear attention" (heads, no KV heads): attn_norm and wo alone
    activation: FfnOp = FfnOp.SILU  # build_ffn's type_op: with a gate its GLU (SILU: swiglu, GELU: geglu), else itself
    clamped_ffn: bool = False  # hparams.swiglu_clamp_shexp[il] > 1e-6: build_ffn's SwiGLU clamped (dense, shared)
    routing: Routing = Routing()  # build_moe_ffn's call and the shared experts beside it (n_expert > 0)
    low_rank_kv: int = 0  # the latent of a decompressed low-rank KV (kv_lora_rank; wkv_b to K nope and V per head)
    attn_gate: int = 0  # wqkv_gate's width: the gate on attention's output, n_head (one per head) or per element
    qk_norm_whole: bool = False  # RMS norms over the whole Q and K projections, before the heads' reshape (olmo2)
    v_norm: bool = False  # ggml_rms_norm of V, without a weight (gemma4)
    kv_shared: bool = False  # hparams.has_kv(il) false: Q alone attends over the KV an earlier layer stored
    v_from_k: bool = False  # no wv: V is K's projection (gemma4's use_alternative_attention)
    parallel_residual: bool = False  # the FFN reads the attention's normed input, not a norm of its sum (stablelm)
    # the weights whose bias the builder adds in place after them (build_qkv's wq_b, wk_b, wv_b, build_attn's wo_b,
    # build_ffn's up_b, gate_b, down_b, build_norm's attn_norm_b, ffn_norm_b): their names in the layer
    biases: frozenset[str] = frozenset()
    sinks: bool = False  # attn_sinks: build_attn_mha's attention sinks (flash attention's fifth source)
    out_scale: bool = False  # layer_output_scale: the layer's output times it (gemma4.cpp's layer_scalar)


@dataclass(frozen=True)
class HyperConnections:
    """qwen4exp's parallel residual streams and the modules beside them (src/models/qwen4exp.cpp): the streams'
    mixers, the attention layers' QSA indexer, the per-layer n-gram embedding (PLE)."""

    count: int  # hyper_connection.count: residual streams, each n_embd wide
    rank: int  # hyper_connection.low_rank: a mixer's gate projects hc * n_embd through this width
    ratios: tuple[int, ...] = ()  # attention.compress_ratios per layer (0: dense attention; > 0: QSA, blocks of it)
    idx_heads: int = 0  # attention.indexer.head_count
    idx_head: int = 0  # attention.indexer.key_length
    idx_top_k: int = 0  # attention.indexer.top_k
    ple_layer: int = -1  # the one layer of ple.layers (-1: no PLE)
    ple_heads: int = 0  # (ple.ngram_size - 1) * ple.heads_per_ngram: rows gathered per token
    ple_head: int = 0  # embedding_length_per_layer_input: a gathered row's width
    ple_kernel: int = 0  # ple.conv_kernel
    ple_dilation: int = 0  # ple.ngram_size: the conv's dilation
    ple_conv_f32: bool = True  # ple_conv1d is F32 (else the graph casts each tap's kernel column to F32)


@dataclass(frozen=True)
class Dsv4:
    """DeepSeek-V4's blocks beside their attention heads and experts (src/models/deepseek4.cpp; estimator/graph_dsv4.py
    rebuilds them): the hyper-connection streams, each trunk layer's compress ratio (0: the raw sliding cache alone; 4:
    CSA with the lightning indexer; 128: HCA), the low-rank query and grouped low-rank output, and the lightning
    indexer's sizes."""

    hc: int  # hyper_connection.count: residual streams, each n_embd wide
    ratios: tuple[int, ...]  # attention.compress_ratios over the trunk
    q_lora: int  # attention.q_lora_rank
    o_groups: int  # attention.output_group_count
    o_lora: int  # attention.output_lora_rank
    idx_heads: int  # attention.indexer.head_count
    idx_head: int  # attention.indexer.key_length
    idx_top_k: int  # attention.indexer.top_k
    nextn_ratios: tuple[int, ...] = ()  # attention.compress_ratios of the NextN/MTP layers (graph_mtp asserts 0)


# A builder of an architecture's own graph: the shape, the workload, the vocabulary -> the reserved graph
GraphBuilder = Callable[["GraphShape", "ContextGeometry", int], "Graph"]


@dataclass(frozen=True)
class RankHead:
    """The classification head llm_graph_context::build_pooling applies under LLAMA_POOLING_TYPE_RANK, as the model
    file holds it (the models' create_tensor of cls, cls_b, cls_norm, cls_out, cls_out_b: each TENSOR_NOT_REQUIRED)."""

    cls_rows: int = 0  # cls.weight's output rows (ne[1]; n_embd, or 1 in jina-bert-v2); 0: no cls
    cls_bias: bool = False  # cls.bias
    cls_norm: bool = False  # cls.norm.weight (modern-bert's head norm)
    out_rows: int = 0  # cls.output.weight's output rows (hparams.n_cls_out); 0: no cls_out
    out_bias: bool = False  # cls.output.bias
    mean_first: bool = False  # LLM_ARCH_MODERN_BERT: mean pooling before the head, and gelu instead of tanh
    softmax: bool = False  # LLM_ARCH_QWEN3, LLM_ARCH_QWEN3VL: a soft_max over the scores


@dataclass(frozen=True)
class DenseOut:
    """The dense projections llm_graph_context::build_dense_out applies after pooling under cparams.embeddings, as
    the model file holds them (a sentence-transformers conversion's dense_2 and dense_3, each TENSOR_NOT_REQUIRED)."""

    dense_2_rows: int = 0  # dense_2.weight's output rows (ne[1]); 0: no dense_2
    dense_2_bias: bool = False  # dense_2.bias
    dense_3_rows: int = 0  # dense_3.weight's output rows; 0: no dense_3

    @property
    def present(self) -> bool:
        return bool(self.dense_2_rows or self.dense_2_bias or self.dense_3_rows)


@dataclass(frozen=True)
class GraphShape:
    """What llama.cpp's reserved graph is made of (llama-graph.cpp), for the compute buffer."""

    n_embd: int
    layers: tuple[GraphLayer, ...]
    logits: bool = True  # False: an embedding graph, no LM head (build_pooling's output instead)
    cache_attention: bool = True  # False: build_attn_inp_no_cache, keys are the ubatch itself
    hidden_output: bool = False  # the last hidden state is a graph output, output rows selected after the trunk
    node_for_node: bool = False  # estimator/compute_graph.py rebuilds llama.cpp's graph exactly (checked)
    bert_block: bool = False  # BERT's blocks: LayerNorm after each residual add (src/models/bert.cpp)
    learned_positions: bool = False  # a position embedding table read by position (BERT), not rope
    mixer: Mixer = Mixer.NONE  # the recurrent blocks' kind
    layer_norm: bool = False  # the trunk's norms are LayerNorm (LLM_NORM: ggml_norm), not RMS norm
    parallel_block: bool = False  # attention and FFN side by side on one normed input (command-r.cpp)
    kv_from_start: int | None = None  # n_layer_kv_from_start: the later layers read an earlier layer's KV
    builder: GraphBuilder | None = None  # the architecture's own builder (src/models/<arch>.cpp), if it has one
    deci_blocks: bool = False  # src/models/deci.cpp: blocks without attention or without FFN (see DecoderGraph)
    residual_first: bool = False  # ffn_inp = ggml_add(residual, the mixer's output), not (output, residual)
    ffn_residual_first: bool = False  # the block's output = ggml_add(ffn_inp, FFN's output), not (output, ffn_inp)
    iswa: bool = False  # llama_kv_cache_iswa (swa_type set): build_attn expands Q, K, V in that order
    head_scale: bool = False  # the final norm (an output) scaled before the LM head: a new tensor (minicpm3.cpp)
    headless_embeddings: bool = False  # no LM head under cparams.embeddings (lfm2.cpp): the graph ends at t_embd
    pre_norm: bool = True  # False: attention and the FFN read the residual stream itself (olmo2, exaone4: post norms)
    normed_hidden_output: bool = False  # with hidden_output: res->t_h_nextn is the output norm's result, rows after
    attn_temperature: bool = False  # llama4.cpp: Q of a layer without rope times the attn_scale input [1, 1, T]
    gate_op: str = "SIGMOID"  # the unary op on attention's output gate (a node of its own; laguna.cpp: SOFTPLUS)
    per_layer_embd: int = 0  # gemma4's per-layer embeddings' width (n_embd_per_layer; 0: none)
    delta_net: DeltaNet | None = None  # a delta-net model's recurrent blocks (estimator/graph_delta_net.py)
    indexer: Indexer | None = None  # DSA's lightning indexer (estimator/graph_dsa.py)
    lightning: Lightning | None = None  # MiniMax-01's lightning attention (estimator/graph_minimax.py)
    hyper: HyperConnections | None = None  # qwen4exp's residual streams (estimator/graph_qwen4exp.py)
    dsv4: Dsv4 | None = None  # DeepSeek-V4's streams, compressors and indexer (estimator/graph_dsv4.py)
    post_norms: bool = False  # a norm of the mixer's and of the FFN's output before each residual add (gemma2/3)
    attn_post_norm_first: bool = False  # with post_norms: the mixer's post norm before the output rows (afmoe)
    post_norm_pins: tuple[bool, bool] = (True, False)  # with post_norms: whether each is pinned (build_norm's il)
    embd_norm: bool = False  # a norm without weight over the token rows (muse-glimmer.cpp's embd_norm)
    router_from_input: bool = False  # the router's logits from the block's input, its rows kept (smallthinker)
    embedding_scale: bool = False  # build_inp_embd scales the token rows (granite's f_embedding_scale)
    rs_rollback: bool = False  # llm_arch_supports_rs_rollback: the recurrent blocks write n_rs_seq + 1 state slots
    # the model's llama_pooling_type (hparams.pooling_type; 0 NONE): what build_pooling adds under cparams.embeddings
    pooling: int = 0
    rank_head: RankHead = RankHead()  # build_pooling's classification head under RANK (none by default)
    dense_out: DenseOut = DenseOut()  # build_dense_out's projections after pooling (none by default)
    # the NextN/MTP layers' blocks (il >= n_layer(): not in the trunk's graph) where the architecture's graph_mtp is
    # rebuilt on their own shapes (arch_rules.Graph.nextn_blocks; estimator/graph_mtp.py)
    nextn: tuple[GraphLayer, ...] = ()
    # hparams.n_embd_v_gqa_max() where it exceeds the layers' own (an MTP draft graph of one NextN block): the width
    # of a transposed V cache and of its v_idxs (0: the layers' widest)
    v_width_all: int = 0
    # an MTP draft graph's block runs as this layer (hparams.n_layer(): the first NextN layer), its weights and cache
    # that layer's (the scheduler places them by it); 0 for the trunk's graphs
    mtp_layer: int = 0

    @cached_property
    def distinct_layers(self) -> tuple[GraphLayer, ...]:
        """The blocks, each distinct one once (identical blocks have identical phases), in order of appearance."""
        return tuple(dict.fromkeys(self.layers))

    def __hash__(self) -> int:
        """The fields' hash, once per shape: a plan looks its shape up in the compute buffer's caches hundreds of
        times, and hashing every layer each time was most of a plan's work."""
        found = self.__dict__.get("_hash")
        if found is None:
            found = self.__dict__["_hash"] = hash(tuple(getattr(self, f.name) for f in fields(self)))
        return found

    def __getstate__(self) -> dict[str, object]:
        """Pickled without its hash: another process salts strings' hashes differently."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@dataclass(frozen=True)
class Layout:
    caches: tuple[KvCache, ...]  # the model's KV caches (an indexer cache beside the main one, for some)
    recurrent: tuple[RecurrentLayer, ...]
    has_kv_cache: bool  # False for embedding-only and pure recurrent models
    note: str = ""  # the rule that produced this layout, in a few words
    head_dims: tuple[tuple[int, int], ...] = ()  # the distinct (K, V) head sizes of the trunk layers
    same_cache_types: bool = False  # llama.cpp refuses different K and V cache types (MLA)
    causal: bool = True  # False for embedding models: llama.cpp does not cap their batch by the context
    memory: bool = True  # False: llama_model::create_memory makes no memory module (decode calls encode())
    graph: GraphShape | None = None  # None: the architecture's compute graph is not derived
    swa_type: SwaType = SwaType.STANDARD  # how the sliding layers mask (estimator/seq_state.py)
    cell_ext: bool = False  # llama_kv_cache::has_cell_ext: each cell keeps a 2-D position (M-RoPE)
    streams_per_sequence: bool = False  # one KV stream per sequence even in a unified cache (llama_kv_cache_dsv4)
    rs_rollback: bool = False  # llm_arch_supports_rs_rollback: the recurrent state keeps n_rs_seq snapshots
    # hparams.n_embd_out() where the model has NextN/MTP layers (n_layer_nextn > 0): the width of a row of the
    # target context's nextn embeddings under llama-server's --spec-type draft-mtp; 0: no NextN layers
    nextn_width: int = 0
    # hparams.n_layer_nextn: the NextN/MTP layers appended after the trunk (llama-server's MTP draft context's
    # KV cache holds them: estimator/mtp.py)
    nextn_layers: int = 0
    # hparams.n_embd_out(): the floats of a row of embeddings llama_context::output_reserve keeps per output under
    # cparams.embeddings (llama-server's --embedding); 0: not derived
    embd_width: int = 0
    pooling: int = 0  # hparams.pooling_type (llama_pooling_type; 0 NONE): the context's where none is named
    pooling_named: bool = False  # the file holds a pooling_type key (Ollama's embedding capability)
    # Ollama's PredictServerVRAM (llm/llama_server.go): the f16 K and V bytes a context token adds to its estimate,
    # 2 x block_count x the least head_count_kv (1 where 0) x embedding_length / the most head_count x 2
    ollama_kv_row: int = 0
    # why llama-server refuses a context that pools by rank with this vocabulary (estimator/pooling.py); "": it does
    # not, or it is not known
    rank_refusal: str = ""
    # why llama.cpp aborts at the model's first decode whatever the settings (ArchRule.decode_abort); "": it decodes
    decode_abort: str = ""
    # the tokens common_init_from_params' warmup decodes (estimator/special_tokens.py), read for a model without a
    # memory module, whose only decode under llama-server it is; 0: the vocabulary is not known
    warmup_tokens: int = 0

    @property
    def attention(self) -> tuple[AttentionLayer, ...]:
        return tuple(layer for cache in self.caches for layer in cache.layers)
