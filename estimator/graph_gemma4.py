"""gemma4's reserved graph (src/models/gemma4.cpp), rebuilt node for node over DecoderGraph's pieces.

A gemma block: attention (q/k norms, V's rms_norm, V as K's projection where the layer has no wv, Q alone over an
earlier layer's KV from n_layer_kv_from_start), its post norm and the residual; then either the dense GEGLU FFN, or
that FFN beside routed experts whose router reads the block's input through its own norm (build_moe_ffn with
probs_in: soft_max, the weights normalized, GELU experts); the FFN's post norm and the residual; then, where the
model has per-layer embeddings, the per-layer input gating the block's output (gemma3n's, without AltUp), and the
layer's output scale. After the trunk output_norm over every token is res->t_h_nextn, the output rows follow, then
the LM head and its soft cap. Each block's tensors are its layer's (in_layer) and name the weights gemma4.cpp reads,
so the backend scheduler places them (estimator/scheduler.py); scales and soft caps work in place and are left out.
"""

from __future__ import annotations

from memfit.estimator.compute_graph import DecoderGraph
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import Graph, Tensor, in_layer, mul_mat, same_shape
from memfit.estimator.graph_ffn import build_ffn, build_moe_ffn
from memfit.estimator.graph_gemma3n import per_layer_inputs, slice_of
from memfit.estimator.layout import GraphLayer, GraphShape


class Gemma4Graph(DecoderGraph):
    """llama_model_gemma4::graph over llm_graph_context's inputs, attention and FFNs (DecoderGraph's)."""

    def build(self) -> Graph:
        e = self.shape.n_embd
        inp_l, out_ids = self.embeddings()
        inp_l = same_shape(inp_l, "SCALE")  # inp_scaled: a new tensor, visited where the first layer reads it
        width = self.shape.per_layer_embd
        per_layer = per_layer_inputs(self, inp_l, width) if width else None
        for il, block in enumerate(self.shape.layers):
            in_layer(il)
            attn = self.attention(block, self.norm(inp_l, "attn_norm"))
            attn_out = same_shape(self.norm(attn, "post_attention_norm"), "ADD", inp_l)
            # ffn_post_norm: build_norm at il -1 (not pinned)
            ffn = self.norm(self.feed_forward(block, attn_out), "post_ffw_norm", pin=False)
            cur = same_shape(ffn, "ADD", attn_out)
            if per_layer is not None:  # the per-layer input: gate (GELU), times this layer's slice, proj, its norm
                gated = same_shape(same_shape(mul_mat("inp_gate", cur, width), "GELU"), "MUL", slice_of(per_layer, il))
                cur = same_shape(cur, "ADD", self.norm(mul_mat("proj", gated, e), "post_norm"))
            if block.out_scale:  # layer_scalar: the layer's output times layer_output_scale
                cur = same_shape(cur, "MUL", "layer_output_scale")
            inp_l = cur
        in_layer(None)
        return self.head(inp_l, out_ids, hidden=True)  # output_norm over every row is res->t_h_nextn

    def feed_forward(self, b: GraphLayer, attn_out: Tensor) -> Tensor:
        """ffn_norm and the GEGLU FFN; in an expert layer beside it (the routing's shared FFN, as wide as the
        layer's, after its post_ffw_norm_1) pre_ffw_norm_2 and the experts, whose router reads rms_norm(attn_out)
        (scaled in place, times ffn_gate_inp.scale), after their post_ffw_norm_2."""
        if not b.n_expert:
            return build_ffn(self.norm(attn_out, "ffn_norm"), b.n_ff, activation=b.activation)
        dense = build_ffn(self.norm(attn_out, "ffn_norm"), b.routing.shared_ff, activation=b.activation)
        dense = self.norm(dense, "post_ffw_norm_1")
        moe_in = self.norm(attn_out, "pre_ffw_norm_2")
        router_in = same_shape(same_shape(attn_out, "RMS_NORM"), "MUL", "ffn_gate_inp.scale")
        logits = mul_mat("ffn_gate_inp", router_in, b.n_expert)
        experts = self.norm(build_moe_ffn(self.gf, b, moe_in, logits), "post_ffw_norm_2")
        return same_shape(dense, "ADD", experts)


def build_gemma4(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return Gemma4Graph(shape, geometry, n_vocab).build()
