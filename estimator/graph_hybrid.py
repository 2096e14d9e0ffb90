"""The reserved graphs of two Mamba-2 hybrids whose blocks DecoderGraph's loop does not lay out:
src/models/falcon-h1.cpp (attention and a Mamba-2 mixer side by side in every block, each over its own norm of the
block's input, then the FFN) and src/models/nemotron-h.cpp (each block one of a Mamba-2 mixer, attention or an FFN,
dense or routed, added to the residual; the output norm over every row is the graph's t_h_nextn, the output rows
taken after it). The pieces (attention, build_mamba2_layer, build_ffn, build_moe_ffn) are DecoderGraph's.
"""

from __future__ import annotations

from memfit.estimator.compute_graph import DecoderGraph
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import Graph, Tensor, get_rows, in_layer, same_shape
from memfit.estimator.layout import GraphLayer, GraphShape


class FalconH1Graph(DecoderGraph):
    """llama_model_falcon_h1::graph."""

    def build(self) -> Graph:
        inp_l, out_ids = self.embeddings()
        last = len(self.shape.layers) - 1
        for il, block in enumerate(self.shape.layers):
            in_layer(il)
            inp_l = self.block(block, inp_l, out_ids if il == last else None)
        in_layer(None)
        return self.head(inp_l)

    def block(self, b: GraphLayer, inp_l: Tensor, out_ids: Tensor | None) -> Tensor:
        """attn_norm then attention; attn_norm again (a second norm) then the Mamba-2 mixer; their sum plus the
        residual is the FFN's input (the last block keeps its output rows: the sum's own rows are taken too, but
        nothing reads them, so they are not in the graph); the FFN, plus its input."""
        attn_out = self.attention(b, self.norm(inp_l, "attn_norm"))
        ssm_out = self.mamba2(b, self.norm(inp_l, "attn_norm"))
        ffn_inp = same_shape(same_shape(attn_out, "ADD", ssm_out), "ADD", inp_l)
        if out_ids is not None:
            ffn_inp = get_rows(ffn_inp, out_ids, self.shape.n_embd)
        return same_shape(self.ffn(b, self.norm(ffn_inp, "ffn_norm")), "ADD", ffn_inp)


class NemotronHGraph(DecoderGraph):
    """llama_model_nemotron_h::graph (nemotron_h_moe's main graph too), with embeddings_nextn_masked false (the
    context's default): no block takes the output rows."""

    def build(self) -> Graph:
        inp_l, out_ids = self.embeddings()
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            cur = self.norm(inp_l, "attn_norm")  # every block's
            if b.recurrent_in:
                cur = self.mamba2(b, cur)
            elif b.n_head:
                cur = self.attention(b, cur)
            else:  # build_ffn_layer: an MLP, or routed experts beside a shared expert
                cur = self.ffn(b, cur)
            inp_l = same_shape(cur, "ADD", inp_l)
        in_layer(None)
        return self.head(inp_l, out_ids, hidden=True)  # the output norm is res->t_h_nextn, then the output rows


def build_falcon_h1(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return FalconH1Graph(shape, geometry, n_vocab).build()


def build_nemotron_h(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return NemotronHGraph(shape, geometry, n_vocab).build()
