"""gemma3n's reserved graph (src/models/gemma3n.cpp), rebuilt node for node over DecoderGraph's attention pieces.

The residual stream is n_altup parallel copies [E, T, n_altup] (AltUp): before each block a router mixes them into
predictions, the active one goes through attention (q/k/v norms; the layers from n_layer_kv_from_start read an
earlier layer's KV and store none) and LAuReL beside it, then the FFN (its gate through gaussian_topk on the first
n_layer_sparsity blocks); a second router corrects every copy with the block's innovation, and the per-layer
input (its own token embeddings plus a projection of the embeddings, [E_altup, T, n_layer]) gates the others.
After the trunk the copies are unembedded and averaged, then the LM head with its final soft cap. Every op of the
builder is here, in place or not, so that ggml_build_forward_expand visits them in llama.cpp's order.
"""

from __future__ import annotations

from memfit.estimator.compute_graph import FLOAT, DecoderGraph, ubatch_outputs
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import (
    F32,
    I32,
    Graph,
    Tensor,
    cont,
    get_rows,
    in_layer,
    mul_mat,
    mul_mat_t,
    new_tensor,
    op,
    permute,
    reshape,
    same,
    same_shape,
    transpose,
    view,
)
from memfit.estimator.layout import GraphLayer, GraphShape
from memfit.estimator.tensor_list import GEMMA3N_ALTUP, GEMMA3N_LAUREL_RANK, GEMMA3N_PER_LAYER_EMBD

SPARSE_LAYERS = 10  # llama_model_gemma3n::graph::n_layer_sparsity: the blocks whose FFN gate runs gaussian_topk
ACTIVE = 0  # llama_hparams::i_altup_act: the AltUp copy that goes through the block


def reduced(x: Tensor, name: str) -> Tensor:
    """ggml_sum_rows / ggml_mean: one element per row."""
    return op(name, F32, (1, *x.ne[1:]), x)


def magnitude(x: Tensor) -> Tensor:
    """calc_magnitude: sqrt(sum_rows(sqr(x)))."""
    return same_shape(reduced(same_shape(x, "SQR"), "SUM_ROWS"), "SQRT")


def slice_of(x: Tensor, idx: int, count: int = 1) -> Tensor:
    """ggml_view_2d_slice (count 1) / the view_3d of `count` slices from `idx`: slices of x's third dimension."""
    e, t = x.ne[0], x.ne[1]
    return view(x, (e, t, count), (x.nb[1], x.nb[2]), idx * e * t * FLOAT)


def per_layer_inputs(graph: DecoderGraph, inp: Tensor, width: int) -> Tensor:
    """build_inp_per_layer (gemma3n.cpp, gemma4.cpp): its own tokens input, their rows of the per-layer token
    embeddings [width, n_layer, T] scaled, expanded; then project_per_layer_inputs: the embeddings' projection,
    scaled, normed, added to those rows, scaled, permuted to [width, T, n_layer] and made contiguous (not
    expanded: the first layer that reads its slice visits it)."""
    t, n_layer = graph.t, len(graph.shape.layers)
    tokens = new_tensor(I32, t, input=True)
    rows = graph.gf.expand(
        same_shape(reshape(get_rows("per_layer_token_embd", tokens, width * n_layer), width, n_layer, t), "SCALE")
    )
    proj = same_shape(mul_mat("per_layer_model_proj", inp, width * n_layer), "SCALE")
    proj = graph.norm(reshape(proj, width, n_layer, t), "per_layer_proj_norm")
    summed = same_shape(same_shape(proj, "ADD", rows), "SCALE")
    return cont(permute(summed, 0, 2, 1, 3))


class Gemma3nGraph(DecoderGraph):
    """llama_model_gemma3n::graph over llm_graph_context's inputs and attention (DecoderGraph's)."""

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int):
        super().__init__(shape, geometry, n_vocab)
        self.n_altup, self.e_altup = GEMMA3N_ALTUP, GEMMA3N_PER_LAYER_EMBD

    def build(self) -> Graph:
        gf, t, e = self.gf, self.t, self.shape.n_embd
        tokens = new_tensor(I32, t, input=True)  # build_inp_embd
        inp_l = gf.expand(get_rows(None, tokens, e))
        gf.expand(new_tensor(F32, e, t, input=True))  # inp_embd: the embeddings input, allocated, never read
        inp_l = same_shape(inp_l, "SCALE")  # inp_scaled
        self.pos = new_tensor(I32, t, input=True)  # build_inp_pos
        per_layer = per_layer_inputs(self, inp_l, self.e_altup)
        inp_l = self.stack(inp_l)
        for il, block in enumerate(self.shape.layers):
            in_layer(il)
            inp_l = self.block(il, block, inp_l, per_layer)
        in_layer(None)
        cur = self.merge(inp_l)
        out_ids = new_tensor(I32, ubatch_outputs(self.geometry), input=True)  # build_inp_out_ids, after the trunk
        result_norm = self.norm(get_rows(cur, out_ids, e), "output_norm")
        logits = same(mul_mat("output", result_norm, self.n_vocab), "SCALE", "TANH", "SCALE")  # final soft cap
        result_norm.output = logits.output = True
        gf.expand(logits)
        return gf

    def stack(self, inp: Tensor) -> Tensor:
        """The n_altup - 1 other copies: the embeddings repeated, altup_proj, rescaled to the embeddings'
        magnitude, concatenated after them: [E, T, n_altup]."""
        e, t, extra = self.shape.n_embd, self.t, self.n_altup - 1
        added = mul_mat("altup_proj", op("REPEAT", F32, (e, t, extra), inp), e)
        added = same_shape(same_shape(added, "MUL", magnitude(inp)), "DIV", magnitude(added))
        return op("CONCAT", F32, (e, t, self.n_altup), inp, added)

    def router(self, x: Tensor) -> Tensor:
        """altup_compute_router_modalities: normed, scaled, altup_router, tanh: [n_altup, T]."""
        return same_shape(
            mul_mat("altup_router", same_shape(self.norm(x, "altup_router_norm"), "SCALE"), self.n_altup), "TANH"
        )

    def predict(self, cur: Tensor) -> Tensor:
        """altup_predict: the copies mixed by the router's coefficients, plus themselves."""
        t, n = self.t, self.n_altup
        modalities = self.router(slice_of(cur, ACTIVE))
        coefs = reshape(mul_mat("altup_predict_coef", modalities, n * n), n, n, t)  # altup_predict_coef
        mixed = mul_mat_t(cont(permute(cur, 1, 2, 0, 3)), coefs)  # [E, n_altup, T]
        return same_shape(cont(permute(mixed, 0, 2, 1, 3)), "ADD", cur)

    def correct(self, predictions: Tensor, activated: Tensor) -> Tensor:
        """altup_correct: the innovation (block output - active prediction), repeated over the copies, times the
        router's coefficients + 1, plus the predictions."""
        e, t, n = self.shape.n_embd, self.t, self.n_altup
        modalities = self.router(activated)
        innovation = same_shape(activated, "SUB", slice_of(predictions, ACTIVE))
        coefs = same_shape(mul_mat("altup_correct_coef", modalities, n), "SCALE")  # altup_correct_coef, scale_bias + 1
        coefs = cont(transpose(coefs), 1, t, n)
        repeated = op("REPEAT", F32, (e, t, n), innovation)
        return same_shape(same_shape(repeated, "MUL", coefs), "ADD", predictions)

    def laurel(self, cur: Tensor) -> Tensor:
        """laurel: laurel_l, laurel_r, its norm, plus the input."""
        low = mul_mat("laurel_r", mul_mat("laurel_l", cur, GEMMA3N_LAUREL_RANK), self.shape.n_embd)
        return same_shape(self.norm(low, "laurel_post_norm"), "ADD", cur)

    def attend(self, il: int, b: GraphLayer, cur: Tensor) -> Tensor:
        """The block's attention: Q, K (normed, roped) and V (rms_norm) into build_attn, or from
        n_layer_kv_from_start Q alone over the KV an earlier layer stored."""
        t = self.t
        q = reshape(mul_mat("attn_q", cur, b.n_head * b.head_k), b.head_k, b.n_head, t)
        q = same_shape(self.norm(q, "attn_q_norm"), "ROPE", self.pos)
        inputs = self.cache_inputs(b)
        k_rot, v_rot = inputs.k_rot, inputs.v_rot
        start = self.shape.kv_from_start
        if start is not None and il >= start:  # hparams.has_kv(il) false: build_attn with Q only
            q = self.hadamard(q, k_rot) if k_rot is not None else q
            out = self.mha(b, self.gf.expand(q), inputs.mask)
            return mul_mat("attn_output", self.hadamard(out, v_rot) if v_rot is not None else out, self.shape.n_embd)
        k = reshape(mul_mat("attn_k", cur, b.n_head_kv * b.head_k), b.head_k, b.n_head_kv, t)
        k = same_shape(self.norm(k, "attn_k_norm"), "ROPE", self.pos)
        v = same_shape(reshape(mul_mat("attn_v", cur, b.n_head_kv * b.head_v), b.head_v, b.n_head_kv, t), "RMS_NORM")
        if k_rot is not None:
            q, k = self.hadamard(q, k_rot), self.hadamard(k, k_rot)
        if v_rot is not None:
            v = self.hadamard(v, v_rot)
        for x in (q, k, v):
            self.gf.expand(x)
        return self.store_and_attend(b, q, k, v, inputs)

    def feed_forward(self, il: int, b: GraphLayer, cur: Tensor) -> Tensor:
        """up * gelu(gate), the gate through gaussian_topk on the first blocks, then down."""
        up, gate = mul_mat("ffn_up", cur, b.n_ff), mul_mat("ffn_gate", cur, b.n_ff)
        if il < SPARSE_LAYERS:  # gaussian_topk: relu(x - (mean + std * k))
            mean = reduced(gate, "MEAN")
            spread = same(reduced(same_shape(same_shape(gate, "SUB", mean), "SQR"), "SUM_ROWS"), "SCALE", "SQRT")
            cutoff = same_shape(mean, "ADD", same_shape(spread, "SCALE"))
            gate = same_shape(same_shape(gate, "SUB", cutoff), "RELU")
        return mul_mat("ffn_down", same_shape(up, "MUL", same_shape(gate, "GELU")), self.shape.n_embd)

    def block(self, il: int, b: GraphLayer, inp: Tensor, per_layer: Tensor) -> Tensor:
        """One decoder layer over the AltUp copies [E, T, n_altup]."""
        e, t = self.shape.n_embd, self.t
        predictions = self.predict(inp)
        active = slice_of(predictions, ACTIVE)
        cur = self.norm(active, "attn_norm")
        laurel_out = self.laurel(cur)
        cur = same_shape(self.norm(self.attend(il, b, cur), "post_attention_norm"), "ADD", active)  # attn_gated
        attn_laurel = same_shape(same_shape(cur, "ADD", laurel_out), "SCALE")
        out = self.norm(self.feed_forward(il, b, self.norm(attn_laurel, "ffn_norm")), "post_ffw_norm")
        corrected = self.correct(predictions, same_shape(out, "ADD", attn_laurel))
        first, rest = slice_of(corrected, 0), slice_of(corrected, 1, self.n_altup - 1)
        gated = same_shape(slice_of(corrected, ACTIVE), "MUL", "altup_correct_scale")
        gated = same_shape(mul_mat("inp_gate", gated, self.e_altup), "GELU")  # per_layer_inp_gate
        gated = same_shape(gated, "MUL", slice_of(per_layer, il))  # this layer's input
        gated = self.norm(mul_mat("proj", gated, e), "post_norm")  # per_layer_proj, per_layer_post_norm
        return op("CONCAT", F32, (e, t, self.n_altup), first, same_shape(rest, "ADD", gated))

    def merge(self, cur: Tensor) -> Tensor:
        """The copies after the first unembedded (altup_unembd_proj), rescaled to the active one's magnitude,
        added to the first, averaged."""
        target = magnitude(slice_of(cur, ACTIVE))
        unembd = mul_mat("altup_unembd_proj", slice_of(cur, 1, self.n_altup - 1), self.shape.n_embd)
        unembd = same_shape(same_shape(unembd, "MUL", target), "DIV", magnitude(unembd))
        merged = slice_of(cur, 0)
        for i in range(self.n_altup - 1):
            merged = same_shape(merged, "ADD", slice_of(unembd, i))
        return same_shape(merged, "SCALE")


def build_gemma3n(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return Gemma3nGraph(shape, geometry, n_vocab).build()
