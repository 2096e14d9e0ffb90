"""The graph llama-server's MTP draft context reserves (LLM_GRAPH_TYPE_DECODER_MTP), rebuilt node for node:
llama_model_qwen35::graph_mtp, llama_model_qwen35moe::graph_mtp, llama_model_qwen3next::graph_mtp,
llama_model_bailingmoe3::graph_mtp, llama_model_deepseek2::graph_mtp, llama_model_glm4_moe::graph_mtp,
llama_model_mimo2::graph_mtp, llama_model_step35::graph_mtp, llama_model_deepseek32::graph_mtp,
llama_model_glm_dsa::graph_mtp, llama_model_nemotron_h_moe::graph_mtp, llama_model_hy_v3::graph_mtp,
llama_model_cohere2moe::graph_mtp and llama_model_deepseek4::graph_mtp.

Each runs the one appended NextN block over the ubatch: the token rows (get_rows) and the target's hidden state (an
input) each RMS-normed, concatenated and projected (eh_proj), then the block as the trunk builds an attention layer
of its architecture (qwen's gated attention, bailingmoe3's gated MLA, deepseek2's MLA (deepseek32's and glm-dsa's
too: dense, no DSA indexer), glm4moe's and hy_v3's attention, nemotron_h_moe's NoPE attention, mimo2's and step35's
attention over their sliding-window cache pair, deepseek4's hyper-connected block over its K-only sliding cache) and
its FFN over every row (nemotron_h_moe's over the output rows alone), the head norm (the graph's t_h_nextn, an
output), the output rows, the LM head (t_logits); mimo2, step35 and deepseek4 take the output rows first (t_h_nextn)
and norm those (deepseek4 after build_hc_head). The block's weights are the trunk's last attention layer's (the NextN
layer repeats its shape; nemotron_h_moe's FFN the last routed experts'), the NextN layer's own for mimo2, step35 and
deepseek4 (GraphShape.nextn: their per-layer heads and window). Its attention reads the draft's own KV cache
(estimator/mtp.py): the KQ mask and K/V views span that cache's cells at reserve, as the target's do.

cohere2moe's runs its NextN layer's own block (GraphShape.nextn) as its trunk builds one: its norms LayerNorm where the
file has no RMS eps, hnorm's before enorm's, the parallel block (attention and the experts both on attn_norm), Q and K
roped whatever the layer's sliding pattern says, the head norm over every row (t_h_nextn) before the output rows.
"""

from __future__ import annotations

from dataclasses import replace

from memfit.estimator.compute_graph import DecoderGraph, ubatch_outputs
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import (
    F32,
    I32,
    Graph,
    Tensor,
    get_rows,
    in_layer,
    mul_mat,
    new_tensor,
    op,
    reshape,
    same_shape,
)
from memfit.estimator.graph_delta_net import IMROPE_POSITIONS, KdaGraph, QwenNextGraph
from memfit.estimator.graph_dsv4 import Dsv4Graph
from memfit.estimator.graph_ffn import SHARED, build_ffn, routed_experts
from memfit.estimator.layout import GraphLayer, GraphShape


def _inputs(g: DecoderGraph, pos_per_token: int, h_width: int = 0) -> tuple[Tensor, Tensor]:
    """llm_graph_input_embd_h: the token ids (their rows of tok_embd) and the hidden-state input mtp_h_input
    (`h_width` wide: n_embd_out(), n_embd where 0); build_inp_pos and build_inp_out_ids (the draft's n_outputs_max
    rows). The unused embeddings input of the qwen and deepseek4 builders is never expanded, so it is not in the
    graph. Returns (the rows, the hidden state)."""
    t, e = g.t, g.shape.n_embd
    g.token_ids = new_tensor(I32, t, input=True)
    tok = get_rows(None, g.token_ids, e)
    h = new_tensor(F32, h_width or e, t, input=True)
    g.pos = new_tensor(I32, t * pos_per_token, input=True)
    return tok, h


def _eh_proj(g: DecoderGraph, tok: Tensor, h: Tensor) -> Tensor:
    """enorm(rows) and hnorm(hidden) concatenated on dim 0, times eh_proj: [n_embd, T]."""
    e = g.shape.n_embd
    in_layer(g.shape.mtp_layer)  # the NextN layer's tensors (llama.cpp's il = n_layer()) from its norms on
    joined = op("CONCAT", F32, (2 * e, g.t), g.norm(tok, "nextn.enorm"), g.norm(h, "nextn.hnorm"))
    # named (blk.N.nextn.eh_proj): a dense FFN's ffn_down of n_ff = 2 x n_embd has its shape, in another buffer type
    # where the fitter overflows the NextN layer's FFN to the next device
    return mul_mat("nextn.eh_proj", joined, e)


def _head(g: DecoderGraph, cur: Tensor, out_ids: Tensor, n_vocab: int, norm: str = "nextn.shared_head_norm") -> Graph:
    """The head norm over every row (res->t_h_nextn, an output; `norm` its name in the NextN layer), its output rows,
    the LM head (t_logits)."""
    cur = g.norm(cur, norm)
    cur.output = True
    in_layer(None)  # the LM head: the model's output (il -1)
    logits = mul_mat(None, get_rows(cur, out_ids, g.shape.n_embd), n_vocab)
    logits.output = True
    g.gf.expand(logits)
    return g.gf


class QwenMtpGraph(QwenNextGraph):
    """qwen3next.cpp / qwen35.cpp / qwen35moe.cpp graph_mtp: eh_proj, attn_norm, build_layer_attn's gated attention,
    its residual, attn_post_norm, the FFN (dense, or the experts plus the sigmoid-gated shared expert), its
    residual, the head."""

    def build(self) -> Graph:
        tok, h = _inputs(self, 1 if self.next else IMROPE_POSITIONS)
        out_ids = new_tensor(I32, _outputs(self), input=True)
        (b,) = self.shape.layers
        inp_sa = _eh_proj(self, tok, h)
        cur = self.gated_attention(b, self.norm(inp_sa, "attn_norm"))
        ffn_residual = same_shape(cur, "ADD", inp_sa)
        out = self.ffn_out(b, self.norm(ffn_residual, "post_attention_norm"))
        return _head(self, same_shape(out, "ADD", ffn_residual), out_ids, self.n_vocab)


class BailingMtpGraph(KdaGraph):
    """bailingmoe3.cpp graph_mtp: eh_proj, attn_norm, the gated MLA block, its residual, ffn_norm, the experts plus
    the shared expert, the residual, the head (shared_head_norm)."""

    def build(self) -> Graph:
        tok, h = _inputs(self, 1)
        out_ids = new_tensor(I32, _outputs(self), input=True)
        (b,) = self.shape.layers
        inp_sa = _eh_proj(self, tok, h)
        cur = self.mla(b, self.norm(inp_sa, "attn_norm"))
        ffn_inp = same_shape(cur, "ADD", inp_sa)
        cur = self.norm(ffn_inp, "ffn_norm")
        if b.n_expert:
            shared = build_ffn(cur, b.routing.shared_ff, weights=SHARED)
            out = same_shape(routed_experts(self.gf, b, cur), "ADD", shared)
        else:
            out = build_ffn(cur, b.n_ff)
        # its head norm: shared_head_norm, LLM_TENSOR_LAYER_OUT_NORM's blk.N.layer_output_norm
        return _head(self, same_shape(out, "ADD", ffn_inp), out_ids, self.n_vocab, "layer_output_norm")


class NextnMtpGraph(DecoderGraph):
    """deepseek2.cpp / glm4-moe.cpp / hy-v3.cpp graph_mtp (deepseek32.cpp's and glm-dsa.cpp's are deepseek2's):
    eh_proj, attn_norm, the block's attention as the trunk builds it (deepseek2's absorbed MLA over its K-only cache;
    glm4moe's biased Q, K and V with the Q and K norms where the file holds them), its residual, ffn_norm (glm4moe's
    attn_post_norm), the experts plus the shared expert, the residual,
    the head (shared_head_norm, else output_norm)."""

    def build(self) -> Graph:
        out, out_ids = self.block()
        return _head(self, out, out_ids, self.n_vocab)

    def block(self) -> tuple[Tensor, Tensor]:
        """The inputs, eh_proj and the NextN block over every row: (its output, the output rows' ids)."""
        tok, h = _inputs(self, 1)
        out_ids = new_tensor(I32, _outputs(self), input=True)
        (b,) = self.shape.layers
        inp_sa = _eh_proj(self, tok, h)
        ffn_inp = same_shape(self.attention(b, self.norm(inp_sa)), "ADD", inp_sa)
        return same_shape(self.ffn(b, self.norm(ffn_inp)), "ADD", ffn_inp), out_ids


class IswaMtpGraph(NextnMtpGraph):
    """mimo2.cpp / step35.cpp graph_mtp: eh_proj, attn_norm, the block's attention as the trunk builds it (mimo2's
    fused QKV views and sinks, step35's Q/K norms and head-wise gate) over llm_graph_input_attn_kv_iswa, its
    residual, ffn_norm, the FFN (mimo2's dense one, step35's dense or experts plus shared expert), its residual; then
    the output rows (res->t_h_nextn, an output), the head norm over them, the LM head (t_logits)."""

    def build(self) -> Graph:
        out, out_ids = self.block()
        rows = get_rows(out, out_ids, self.shape.n_embd)
        rows.output = True
        normed = self.norm(rows)
        in_layer(None)  # the LM head: the model's output (il -1)
        logits = mul_mat(None, normed, self.n_vocab)
        logits.output = True
        self.gf.expand(logits)
        return self.gf

    def v_width_max(self) -> int:
        """hparams.n_embd_v_gqa_max(): over every layer of the model, not the NextN block's alone."""
        return max(super().v_width_max(), self.shape.v_width_all)


class Cohere2MoeMtpGraph(IswaMtpGraph):
    """cohere2moe.cpp graph_mtp: hnorm over the hidden state, then enorm over the token rows (LayerNorm where the file
    has no RMS eps, as the trunk's), concatenated, eh_proj; the parallel block as the trunk builds it (attn_norm read
    by attention and by the experts plus the shared expert, both outputs and eh_proj's added), its attention over
    llm_graph_input_attn_kv_iswa roped whatever the layer's sliding pattern says; the head norm over every row
    (shared_head_norm, else output_norm: t_h_nextn, an output), the output rows, the LM head (t_logits; the logit
    scale in place)."""

    def build(self) -> Graph:
        tok, h = _inputs(self, 1)
        out_ids = new_tensor(I32, _outputs(self), input=True)
        (b,) = self.shape.layers
        in_layer(self.shape.mtp_layer)
        hidden = self.block_norm(h)
        joined = op("CONCAT", F32, (2 * self.shape.n_embd, self.t), self.block_norm(tok), hidden)
        cur = self.parallel_block(replace(b, rope=True), mul_mat(None, joined, self.shape.n_embd), None)
        cur = self.block_norm(cur)
        cur.output = True
        in_layer(None)  # the LM head: the model's output (il -1)
        logits = mul_mat(None, get_rows(cur, out_ids, self.shape.n_embd), self.n_vocab)
        logits.output = True
        self.gf.expand(logits)
        return self.gf


class NemotronMtpGraph(DecoderGraph):
    """nemotron-h-moe.cpp graph_mtp: eh_proj (no positions: the block's attention is NoPE), attn_norm, the block's
    attention, its residual, whose output rows alone go on (crop_before_ffn: the draft's nextn embeddings are masked,
    and unset at reserve), attn_post_norm, the experts beside the relu^2 shared expert, the residual, the head's
    LayerNorm (shared_head_norm, il -1: t_h_nextn, an output), the LM head (model.output, il -1)."""

    def build(self) -> Graph:
        tok, h = _inputs(self, 1)  # its positions' input is never read, so not in the graph
        out_ids = new_tensor(I32, _outputs(self), input=True)
        (b,) = self.shape.layers
        inp_sa = _eh_proj(self, tok, h)
        cur = same_shape(self.attention(b, self.norm(inp_sa)), "ADD", inp_sa)
        ffn_residual = get_rows(cur, out_ids, self.shape.n_embd)
        out = self.ffn(b, self.norm(ffn_residual))
        cur = same_shape(out, "ADD", ffn_residual)
        # the head's LayerNorm is built with il -1 (graph_get_cb pins no "norm" of il -1), its weight the NextN
        # layer's nextn.shared_head_norm
        cur = same_shape(op("NORM", F32, cur.ne, cur), "MUL", None)
        cur.output = True
        in_layer(None)  # the LM head: model.output (nemotron_h_moe loads no nextn.shared_head_head), il -1
        logits = mul_mat(None, cur, self.n_vocab)
        logits.output = True
        self.gf.expand(logits)
        return self.gf


class Dsv4MtpGraph(Dsv4Graph):
    """deepseek4.cpp graph_mtp: the hidden state's streams [n_embd, hc, T] RMS-normed (hnorm), the token rows normed
    (enorm) and repeated over the streams, both concatenated and projected (eh_proj) into the streams; the block as
    the trunk builds one (hyper-connections, its attention, routed and shared experts), its attention build_attn over
    llm_graph_input_attn_k_iswa (the K-only sliding cache of llama_kv_cache_iswa: K stored, V a view of it); the
    output rows of the flattened streams (res->t_h_nextn, an output), build_hc_head, the head norm, the LM head."""

    expands_ffn_mixes = False

    @staticmethod
    def memory_geometry(geometry: ContextGeometry) -> ContextGeometry:
        """llama_kv_cache_iswa's streams and windows: the context's own."""
        return geometry

    def build(self) -> Graph:
        e, t, hc = self.e, self.t, self.d.hc
        tok, h = _inputs(self, 1, e * hc)
        out_ids = new_tensor(I32, _outputs(self), input=True)
        in_layer(self.shape.mtp_layer)  # the NextN layer's tensors (llama.cpp's il = n_layer())
        h_norm = self.norm(reshape(h, e, hc, t))  # hnorm over mtp_h_state
        e_norm = op("REPEAT", F32, (e, hc, t), reshape(self.norm(tok), e, 1, t))  # enorm, repeated
        res = mul_mat(None, op("CONCAT", F32, (2 * e, hc, t), e_norm, h_norm), e)  # eh_proj
        (b,) = self.shape.layers
        return self.hc_output(self.block(0, b, res), out_ids, hidden=True)


def _outputs(g: DecoderGraph) -> int:
    """build_inp_out_ids' rows: min(n_tokens, n_outputs_max) (the draft's n_outputs_max, its n_parallel)."""
    return ubatch_outputs(g.geometry)


def build_qwen3next_mtp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return QwenMtpGraph(shape, geometry, n_vocab, next_=True).build()


def build_qwen35_mtp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return QwenMtpGraph(shape, geometry, n_vocab, next_=False).build()


def build_bailingmoe3_mtp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return BailingMtpGraph(shape, geometry, n_vocab, "bailingmoe3").build()


def build_nextn_mtp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return NextnMtpGraph(shape, geometry, n_vocab).build()


def build_iswa_mtp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return IswaMtpGraph(shape, geometry, n_vocab).build()


def build_cohere2moe_mtp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return Cohere2MoeMtpGraph(shape, geometry, n_vocab).build()


def build_nemotron_h_moe_mtp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return NemotronMtpGraph(shape, geometry, n_vocab).build()


def build_deepseek4_mtp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return Dsv4MtpGraph(shape, geometry, n_vocab).build()


# llama_model::build_graph under LLM_GRAPH_TYPE_DECODER_MTP, by architecture: the MTP graphs rebuilt here
MTP_BUILDERS = {
    "qwen3next": build_qwen3next_mtp,
    "qwen35": build_qwen35_mtp,
    "qwen35moe": build_qwen35_mtp,
    "bailingmoe3": build_bailingmoe3_mtp,
    "deepseek2": build_nextn_mtp,
    "glm4moe": build_nextn_mtp,
    "mimo2": build_iswa_mtp,
    "step35": build_iswa_mtp,
    "deepseek32": build_nextn_mtp,
    "glm-dsa": build_nextn_mtp,
    "nemotron_h_moe": build_nemotron_h_moe_mtp,
    "hy_v3": build_nextn_mtp,
    "cohere2moe": build_cohere2moe_mtp,
    "deepseek4": build_deepseek4_mtp,
}


def nextn_block(shape: GraphShape) -> GraphLayer | None:
    """The NextN block's shape: the first NextN layer's own where the shape derives it (graph_mtp runs
    nextn_layer_offset 0: il = n_layer()), else the trunk's last attention layer (not recurrent), or None where it
    has none (or its first NextN block does not attend); where that layer has no FFN (nemotron-h's blocks each do
    one thing) with the last routed experts' FFN (without a latent: the NextN block's build_moe_ffn runs on its
    input), None where the trunk has none."""
    if shape.nextn:
        return shape.nextn[0] if shape.nextn[0].n_head else None
    attention = [b for b in shape.layers if not b.recurrent_in and (b.n_head or b.kv_lora)]
    if not attention or attention[-1].n_ff or attention[-1].n_expert:
        return attention[-1] if attention else None
    experts = [b for b in shape.layers if b.n_expert and not b.routing.latent]
    if not experts:
        return None
    e = experts[-1]
    return replace(
        attention[-1],
        n_expert=e.n_expert,
        n_expert_used=e.n_expert_used,
        n_ff_exp=e.n_ff_exp,
        activation=e.activation,
        clamped_ffn=e.clamped_ffn,
        routing=e.routing,
    )


def mtp_graph_shape(arch: str, shape: GraphShape) -> GraphShape | None:
    """The draft context's graph: the trunk's shape with the NextN block alone and the architecture's MTP builder
    (no DSA indexer: deepseek32's and glm-dsa's draft head runs dense MLA); None where that builder is not rebuilt
    here."""
    builder, block = MTP_BUILDERS.get(arch), nextn_block(shape)
    if builder is None or block is None:
        return None
    v_width_all = max(b.n_head_kv * b.head_v for b in shape.layers + shape.nextn)
    dsv4 = None if shape.dsv4 is None else replace(shape.dsv4, ratios=shape.dsv4.nextn_ratios[:1])  # its ratio
    return replace(
        shape,
        layers=(block,),
        nextn=(),
        v_width_all=v_width_all,
        builder=builder,
        mtp_layer=len(shape.layers),
        indexer=None,
        dsv4=dsv4,
    )
