"""MiniMax-01's reserved graph (src/models/minimax-01.cpp), rebuilt node for node over DecoderGraph's pieces.

Every block norms its input (the residual is that norm's output, scaled), runs softmax attention (build_qkv, rope,
build_attn over the hybrid memory's KV cache) or lightning attention, adds the scaled residual, norms the sum and
runs the routed experts, whose output is added to the scaled norm. Lightning attention (linear attention with a
per-head decay) reads its conv state through build_rs and never uses it; one fused QKV projection, silu, split into
heads; the state [head, head, H] read through build_rs; the decays (exp of the scaled q / k / diagonal decay
inputs); the output is the old state times the decayed Q plus the intra-ubatch part (QK^T times the diagonal decay,
times V), and the new state (the old one decayed over the ubatch plus the decayed K^T V) is copied back; the output
RMS-normed, gated by sigmoid(wg), projected by wo. The last block keeps the output rows of the attention's output
and of the residual (llama.cpp takes the block input's rows too, but nothing reads them: they are not in the graph).

llama_context::sched_reserve reserves MiniMax-01's prompt graph a last time with one sequence (its diagonal decay
grows with the square of a sequence's tokens), and ggml-alloc's buffer only grows: the buffer is the larger of the
graph over every sequence and the graph over one (n_tokens not rounded to the sequences; the recurrent states of
the others copied by build_rs; the KV cache's streams still every sequence's). A no_alloc dry run reports the first
reserve's size alone.
"""

from __future__ import annotations

from memfit.estimator.compute_graph import FLOAT, DecoderGraph, reserved_tokens
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import (
    F32,
    Graph,
    Tensor,
    cont,
    copy_into,
    get_rows,
    in_layer,
    mul_mat,
    mul_mat_t,
    new_tensor,
    permute,
    reshape,
    same,
    same_shape,
    view,
)
from memfit.estimator.graph_alloc import replay
from memfit.estimator.layout import GraphLayer, GraphShape, Lightning


class MinimaxGraph(DecoderGraph):
    """llama_model_minimax_01::graph over a ubatch of `seqs` sequences (every one, or one)."""

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int, seqs: int):
        super().__init__(shape, geometry, n_vocab)
        assert shape.lightning is not None
        self.la: Lightning = shape.lightning
        self.la_inputs: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
        self.seqs = seqs
        if seqs == 1:  # graph_reserve(n_tokens, 1, ...): n_tokens is not rounded up to the sequences
            self.t = reserved_tokens(geometry)

    def ubatch_seqs(self) -> int:
        return self.seqs

    def build(self) -> Graph:
        inp_l, out_ids = self.embeddings()
        e, last = self.shape.n_embd, len(self.shape.layers) - 1
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            residual = self.norm(inp_l, "attn_norm")
            cur = self.lightning(b, residual) if b.recurrent_in else self.attention(b, residual)
            if il == last:  # the output rows (the block input's rows are taken too, and never read)
                cur, residual = get_rows(cur, out_ids, e), get_rows(residual, out_ids, e)
            ffn_inp = same_shape(cur, "ADD", same_shape(residual, "SCALE"))  # residual_scaled_attn
            cur = self.norm(ffn_inp, "ffn_norm")
            inp_l = same_shape(self.ffn(b, cur), "ADD", same_shape(cur, "SCALE"))  # residual_scaled_ffn
        in_layer(None)
        return self.head(inp_l)

    def decay_inputs(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """llm_graph_input_la: slopes [H], q_decay and k_decay [1, H, tokens, n_seqs], diag_decay [tokens, tokens,
        H, n_seqs] (made once, read by every lightning block)."""
        if self.la_inputs is None:
            n, h = self.seqs, self.la.n_head
            tokens = self.t // n
            self.la_inputs = (
                new_tensor(F32, h, input=True),
                new_tensor(F32, 1, h, tokens, n, input=True),
                new_tensor(F32, 1, h, tokens, n, input=True),
                new_tensor(F32, tokens, tokens, h, n, input=True),
            )
        return self.la_inputs

    def lightning(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """The lightning attention block over the normed input `cur`, to its output [n_embd, T]."""
        t, e, n, h, d = self.t, self.shape.n_embd, self.seqs, self.la.n_head, self.la.head
        tokens = t // n
        self.state_rows(self.la.conv)  # build_rs of the conv states: read, never used
        slopes, q_decay_exp, k_decay_exp, diag_decay_exp = self.decay_inputs()
        slope_rate = same_shape(slopes, "SCALE")
        x = reshape(cur, e, tokens, 1, n)
        qkv = reshape(same_shape(mul_mat("attn_qkv", x, 3 * d * h), "SILU"), 3 * d, h, tokens, n)  # wqkv, silu
        q, k, v = (view(qkv, (d, h, tokens, n), qkv.nb[1:], i * d * FLOAT) for i in range(3))
        kv_old = reshape(self.state_rows(d * d * h), d, d, h, n)  # build_rs of the states
        q_s = same_shape(q, "MUL", same(q_decay_exp, "SCALE", "EXP"))
        none_diag = mul_mat_t(kv_old, permute(q_s, 0, 2, 1, 3))  # [d, tokens, H, n]
        qk = mul_mat_t(permute(k, 0, 2, 1, 3), permute(q, 0, 2, 1, 3))  # [tokens, tokens, H, n]
        qk = same_shape(qk, "MUL", same(diag_decay_exp, "SCALE", "EXP"))
        v_trans = cont(permute(v, 1, 2, 0, 3))  # [tokens, d, H, n]
        out = self.gf.expand(same_shape(none_diag, "ADD", mul_mat_t(v_trans, qk)))  # qkv
        block_decay = reshape(same(same_shape(slope_rate, "SCALE"), "EXP"), 1, 1, h)
        k_decayed = same_shape(k, "MUL", same(k_decay_exp, "SCALE", "EXP"))
        kv_cur = mul_mat_t(cont(permute(k_decayed, 1, 2, 0, 3)), v_trans)  # [d, d, H, n]
        kv_new = same_shape(same_shape(kv_old, "MUL", block_decay), "ADD", kv_cur)
        self.gf.expand(copy_into(kv_new, new_tensor(F32, d * d * h * n, external=True)))  # into the states
        out = reshape(cont(permute(out, 0, 2, 1, 3)), d * h, tokens, 1, n)
        gate = same_shape(mul_mat("attn_gate", x, d * h), "SIGMOID")  # wg
        out = same_shape(gate, "MUL", self.norm(out, "attn_norm_2"))
        return reshape(mul_mat("attn_output", out, e), e, t)  # wo


def reserved_sequences(geometry: ContextGeometry) -> tuple[int, ...]:
    """The sequences of each prompt reserve llama_context::sched_reserve makes for MiniMax-01: every one, then
    (its last reserve, LLM_ARCH_MINIMAX_01) one."""
    return tuple(dict.fromkeys((geometry.n_seq, 1)))


def build_minimax(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    """The graph of the reserve that sizes the buffer: whichever of reserved_sequences' ggml-alloc needs more for."""
    graphs = [MinimaxGraph(shape, geometry, n_vocab, seqs).build() for seqs in reserved_sequences(geometry)]
    return max(graphs, key=lambda graph: replay(graph).size)
