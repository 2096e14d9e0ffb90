"""gemma4's reserved graph (src/models/gemma4.cpp), rebuilt node for node over DecoderGraph's pieces.

A gemma block: attention (q/k norms, V's rms_norm, V as K's projection where the layer has no wv, Q alone over an
earlier layer's KV from n_layer_kv_from_start), its post norm and the residual; then either the dense GEGLU FFN, or
that FFN beside routed experts whose router reads the block's input through its own norm (build_moe_ffn with
probs_in: soft_max, the weights normalized, GELU experts); the FFN's post norm and the residual; then, where the
model has per-layer embeddings, the per-layer input gating the block's output (gemma3n's, without AltUp). After the
trunk output_norm over every token is res->t_h_nextn, the output rows follow, then the LM head and its soft cap.
Norms' weights, scales and soft caps work in place and are left out.
"""

from __future__ import annotations

from memfit.estimator.compute_graph import DecoderGraph
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import Graph, Tensor, mul_mat, same_shape
from memfit.estimator.graph_ffn import build_ffn, build_moe_ffn
from memfit.estimator.graph_gemma3n import per_layer_inputs, slice_of
from memfit.estimator.layout import GraphLayer, GraphShape


class Gemma4Graph(DecoderGraph):
    """llama_model_gemma4::graph over llm_graph_context's inputs, attention and FFNs (DecoderGraph's)."""

    def build(self) -> Graph:
        e = self.shape.n_embd
        inp_l, out_ids = self.embeddings()  # the embeddings' scale in place
        width = self.shape.per_layer_embd
        per_layer = per_layer_inputs(self, inp_l, width) if width else None
        for il, block in enumerate(self.shape.layers):
            attn_out = same_shape(self.attention(block, self.norm(inp_l)), "ADD", inp_l)  # after attn_post_norm
            cur = same_shape(self.feed_forward(block, attn_out), "ADD", attn_out)  # after ffn_post_norm
            if per_layer is not None:  # the per-layer input: gate (GELU), times this layer's slice, proj
                gated = same_shape(same_shape(mul_mat(None, cur, width), "GELU"), "MUL", slice_of(per_layer, il))
                cur = same_shape(cur, "ADD", mul_mat(None, gated, e))  # per_layer_post_norm in place
            inp_l = cur
        return self.head(inp_l, out_ids, hidden=True)  # output_norm over every row is res->t_h_nextn

    def feed_forward(self, b: GraphLayer, attn_out: Tensor) -> Tensor:
        """ffn_norm and the GEGLU FFN; in an expert layer beside it (the routing's shared FFN, as wide as the
        layer's) pre_norm_2 and the experts, whose router reads rms_norm(attn_out) (scaled in place), added after
        the FFN's post_norm_1 and the experts' post_norm_2."""
        if not b.n_expert:
            return build_ffn(self.norm(attn_out), b.n_ff, activation=b.activation)
        logits = mul_mat(None, same_shape(attn_out, "RMS_NORM"), b.n_expert)  # ffn_gate_inp
        experts = build_moe_ffn(self.gf, b, self.norm(attn_out), logits)
        dense = build_ffn(self.norm(attn_out), b.routing.shared_ff, activation=b.activation)
        return same_shape(dense, "ADD", experts)


def build_gemma4(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return Gemma4Graph(shape, geometry, n_vocab).build()
