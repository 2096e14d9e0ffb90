"""The graph llama.cpp reserves for the delta-net families, rebuilt node for node: src/models/qwen3next.cpp,
qwen35.cpp and qwen35moe.cpp (gated delta nets beside gated attention), kimi-linear.cpp, kimi-k3.cpp and
bailingmoe3.cpp (Kimi delta attention beside multi-head latent attention), over src/models/delta-net-base.cpp.

A recurrent block projects its input to q, k and v, runs a short convolution over them after the conv state (its
last columns copied back into the cache), L2-normalizes q and k and computes the decay (g) and the mixing rate
(beta); on the CPU llama.cpp takes build_delta_net's fused path (cparams.fused_gdn_ar / fused_gdn_ch are on and the
CPU backend runs GGML_OP_GATED_DELTA_NET), one op whose output holds the tokens' results and then the new states
(copied back into the cache); the results are RMS-normed, gated and projected out. Ops in place on a tensor's only
consumer take no memory of their own; every view an op reads through is kept, since ggml-alloc never reuses
memory in place through a view. Weights, biases and the conv / recurrent caches are left out (not the compute
buffer's).
"""

from __future__ import annotations

from collections.abc import Callable

from memfit.estimator.compute_graph import FLOAT, DecoderGraph, output_gate
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
    new_tensor,
    op,
    permute,
    reshape,
    same,
    same_shape,
    transpose,
    view,
    viewed,
)
from memfit.estimator.graph_ffn import DENSE, SHARED, build_ffn, routed_experts, situ
from memfit.estimator.layout import DeltaNet, GraphLayer, GraphShape

IMROPE_POSITIONS = 4  # llama_hparams::n_pos_per_embd: qwen35's LLAMA_ROPE_TYPE_IMROPE reads four positions a token


class DeltaNetGraph(DecoderGraph):
    """The pieces the delta-net builders share: llm_build_delta_net_base, and DecoderGraph's inputs, caches and
    attention."""

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int):
        super().__init__(shape, geometry, n_vocab)
        assert shape.delta_net is not None
        self.dn: DeltaNet = shape.delta_net
        self.n = geometry.n_seq
        self.tokens = self.t // self.n  # ubatch.n_seq_tokens
        self.e = shape.n_embd

    # --- llm_build_delta_net_base -----------------------------------------------------------------------------

    def delta_net(
        self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor, slots: int = 1
    ) -> Tensor:
        """ggml_gated_delta_net over q, k, v [S, H, tokens, seqs], the gate, beta and the state, `slots` snapshots
        (build_delta_net_fused: one); [S_v * H_v, tokens * seqs + slots * S_v * seqs]: the tokens' results, then
        the new states (the newest first)."""
        dn, n = self.dn, self.n
        width = dn.head_v * dn.v_heads
        return op("GATED_DELTA_NET", F32, (width, self.tokens * n + slots * dn.head_v * n), q, k, v, g, beta, state)

    def results(self, out: Tensor) -> Tensor:
        """build_delta_net_fused's output: the tokens' results [S_v, H_v, tokens, seqs] (a view)."""
        sv, hv, row = self.dn.head_v, self.dn.v_heads, self.dn.head_v * FLOAT
        return view(out, (sv, hv, self.tokens, self.n), (row, row * hv, row * hv * self.tokens))

    def store_states(self, out: Tensor) -> None:
        """The new states (a view of the op's output past the results) copied into the recurrent cache."""
        dn, n = self.dn, self.n
        sv, hv, row = dn.head_v, dn.v_heads, dn.head_v * FLOAT
        states = view(out, (sv, sv, hv, n), (row, row * sv, row * sv * hv), row * hv * self.tokens * n)
        self.gf.expand(copy_into(states, new_tensor(F32, sv * sv * hv, n, external=True)))

    def recurrent_attn(self, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor) -> Tensor:
        """build_recurrent_attn: without rollback snapshots build_delta_net, the new states stored, the results;
        with them (n_rs_seq > 0) one ggml_gated_delta_net of n_rs_seq + 1 slots, the results, and the last
        min(tokens, slots) states copied into their rollback groups of the cache."""
        if self.rs_slots == 1:
            out = self.delta_net(q, k, v, g, beta, state)
            self.store_states(out)
            return self.results(out)
        out = self.delta_net(q, k, v, g, beta, state, self.rs_slots)
        results = self.results(out)
        dn, n = self.dn, self.n
        per_state = dn.head_v * dn.head_v * dn.v_heads  # D: S_v * S_v * H_v
        written, offset = self.snapshots(self.tokens), dn.head_v * dn.v_heads * self.tokens * n * FLOAT
        states = view(out, (per_state, n, written), (per_state * FLOAT, per_state * n * FLOAT), offset)
        self.gf.expand(copy_into(states, new_tensor(F32, per_state, n, written, external=True)))
        return results

    def state(self) -> Tensor:
        """build_rs of the delta net's state, reshaped [S_v, S_v, H_v, seqs]."""
        sv, hv = self.dn.head_v, self.dn.v_heads
        return reshape(self.state_rows(sv * sv * hv), sv, sv, hv, self.n)

    def conv_input(self, states: Tensor, x: Tensor, channels: int) -> Tensor:
        """build_conv_state's / the KDA builders' causal conv input: the conv state [d_conv - 1, channels, seqs]
        followed by the tokens (x transposed), its last d_conv - 1 columns copied back into the cache."""
        d, tokens, n = self.dn.d_conv - 1, self.tokens, self.n
        conv_x = op("CONCAT", F32, (d + tokens, channels, n), states, transpose(x))
        for slot in self.conv_slots():  # a rollback slot s: the columns s tokens before the last
            last = view(conv_x, (d, channels, n), (conv_x.nb[1], conv_x.nb[2]), max(0, tokens - slot) * FLOAT)
            self.gf.expand(copy_into(last, new_tensor(F32, d, channels, n, external=True)))
        return conv_x

    def conv_slots(self) -> range:
        """build_conv_state's conv-state slots, in the order it writes them: all n_rs_seq + 1, the oldest first."""
        return range(self.rs_slots - 1, -1, -1)

    def l2_norm(self, x: Tensor) -> Tensor:
        return op("L2_NORM", F32, x.ne, x)  # ggml_l2_norm: a new tensor


class QwenNextGraph(DeltaNetGraph):
    """llama_model_qwen3next::graph and llama_model_qwen35(moe)::graph: gated delta nets and gated attention, the
    attention's residual, the post-attention norm, the FFN (qwen3next's and qwen35moe's experts beside a
    sigmoid-gated shared expert), its residual; all rows through the trunk, then output_norm (t_h_nextn) and the
    output rows."""

    z_gate = "SILU"  # build_norm_gated: the results RMS-normed times silu(z)

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int, next_: bool):
        super().__init__(shape, geometry, n_vocab)
        self.next = next_  # qwen3next: beta and alpha in one matmul, q / k heads repeated to the value heads

    def build(self) -> Graph:
        inp_l, out_ids = self.embeddings(1 if self.next else IMROPE_POSITIONS)
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            inp_sa = inp_l
            cur = self.gf.expand(self.norm(inp_l, "attn_norm"))
            cur = self.linear_attn(cur) if b.recurrent_in else self.gated_attention(b, cur)
            ffn_residual = same_shape(cur, "ADD", inp_sa)
            out = self.ffn_out(b, self.norm(ffn_residual, "post_attention_norm"))
            inp_l = same_shape(out, "ADD", ffn_residual)
        in_layer(None)
        return self.head(inp_l, out_ids, hidden=True)

    def gated_attention(
        self, b: GraphLayer, cur: Tensor, attend: Callable[[GraphLayer, Tensor, Tensor, Tensor], Tensor] | None = None
    ) -> Tensor:
        """build_layer_attn: one wq of query and gate per head, q and k RMS-normed and roped, build_attn (or
        `attend`), the output times sigmoid(gate) (its view made contiguous), wo."""
        head, heads, t = b.head_k, b.n_head, self.t
        q_full = mul_mat("attn_q", cur, 2 * head * heads)
        nb = (2 * head * FLOAT, 2 * head * heads * FLOAT)
        q, gate = (view(q_full, (head, heads, t), nb, i * head * FLOAT) for i in (0, 1))
        k = reshape(mul_mat("attn_k", cur, b.n_head_kv * head), head, b.n_head_kv, t)
        v = reshape(mul_mat("attn_v", cur, b.n_head_kv * b.head_v), b.head_v, b.n_head_kv, t)
        q, k = (same_shape(self.norm(x, w), "ROPE", self.pos) for x, w in ((q, "attn_q_norm"), (k, "attn_k_norm")))
        out = (attend or self.build_attn)(b, q, k, v)
        gated = same_shape(out, "MUL", same_shape(cont(gate, head * heads, t), "SIGMOID"))
        return mul_mat("attn_output", gated, self.e)  # wo

    def qkvz(self, cur: Tensor, channels: int) -> tuple[Tensor, Tensor]:
        """build_qkvz: attn_qkv (q, k, v) and attn_gate (z); or qwen3next's legacy ssm_in with q, k, v, z side by
        side per k head: z made contiguous, q, k and v each flattened and concatenated."""
        dn, tokens, n = self.dn, self.tokens, self.n
        value = dn.head_v * dn.v_heads
        if not dn.legacy_qkvz:
            return reshape(mul_mat("attn_qkv", cur, channels), channels, tokens, n), mul_mat("attn_gate", cur, value)
        per_head = value // dn.k_heads  # head_v_dim * num_v_heads / num_k_heads
        mixed = reshape(mul_mat("ssm_in", cur, channels + value), 2 * dn.head_k + 2 * per_head, dn.k_heads, tokens, n)
        nb = mixed.nb[1:]
        widths = (dn.head_k, dn.head_k, per_head, per_head)
        starts = (0, dn.head_k, 2 * dn.head_k, 2 * dn.head_k + per_head)
        parts = zip(widths, starts, strict=True)
        q, k, v, z = (view(mixed, (w, dn.k_heads, tokens, n), nb, s * FLOAT) for w, s in parts)
        z = cont(z)
        key = dn.head_k * dn.k_heads
        q, k, v = (cont(x, w, tokens, n) for x, w in ((q, key), (k, key), (v, value)))
        qk = op("CONCAT", F32, (2 * key, tokens, n), q, k)
        return op("CONCAT", F32, (channels, tokens, n), qk, v), z

    def gate_and_beta(self, cur: Tensor) -> tuple[Tensor, Tensor]:
        """The decay g = softplus(alpha + dt_bias) * A and beta = sigmoid(b), each [1, H_v, tokens, seqs]:
        qwen3next's one ssm_beta_alpha matmul viewed per k head (b made contiguous, a flattened), or qwen35's
        ssm_beta and ssm_alpha."""
        dn, tokens, n = self.dn, self.tokens, self.n
        hv = dn.v_heads
        if self.next:
            per = hv // dn.k_heads
            mixed = reshape(mul_mat("ssm_ba", cur, 2 * hv), 2 * per, dn.k_heads, tokens, n)
            b_, a_ = (view(mixed, (per, dn.k_heads, tokens, n), mixed.nb[1:], i * per * FLOAT) for i in (0, 1))
            beta = same_shape(cont(b_), "SIGMOID")
            alpha = cont(a_, hv, tokens, n)
        else:
            beta = same_shape(reshape(mul_mat("ssm_beta", cur, hv), 1, hv, tokens, n), "SIGMOID")
            alpha = reshape(mul_mat("ssm_alpha", cur, hv), hv, tokens, n)
        gate = same_shape(same_shape(same_shape(alpha, "ADD", "ssm_dt.bias"), "SOFTPLUS"), "MUL", "ssm_a")
        return reshape(gate, 1, hv, tokens, n), reshape(beta, 1, hv, tokens, n)

    def linear_attn(self, cur: Tensor) -> Tensor:
        """build_layer_attn_linear: q k v and z, beta and the decay, the conv after its state, silu, q / k / v
        viewed, q and k L2-normed (qwen3next: repeated to the value heads), build_recurrent_attn, the gated norm
        (RMS-normed results times silu(z)), ssm_out."""
        dn, tokens, n = self.dn, self.tokens, self.n
        key, value = dn.head_k * dn.k_heads, dn.head_v * dn.v_heads
        channels = 2 * key + value
        qkv, z = self.qkvz(cur, channels)
        gate, beta = self.gate_and_beta(cur)
        states = reshape(self.state_rows((dn.d_conv - 1) * channels), dn.d_conv - 1, channels, n)
        conv_x = self.conv_input(states, qkv, channels)
        state = self.state()
        conv = same_shape(op("SSM_CONV", F32, (channels, tokens, n), conv_x, "ssm_conv1d"), "SILU")
        row = channels * FLOAT
        q, k = (view(conv, (dn.head_k, dn.k_heads, tokens, n), (dn.head_k * FLOAT, row, row * tokens), s * key * FLOAT)
                for s in (0, 1))  # fmt: skip
        v = view(conv, (dn.head_v, dn.v_heads, tokens, n), (dn.head_v * FLOAT, row, row * tokens), 2 * key * FLOAT)
        q, k = self.l2_norm(q), self.l2_norm(k)
        if self.next and dn.k_heads != dn.v_heads:  # repeated interleaved up to the value heads
            q, k = self.repeated(q), self.repeated(k)
        out = self.recurrent_attn(q, k, v, gate, beta, state)
        z = reshape(z, dn.head_v, dn.v_heads, tokens, n)
        normed = same_shape(self.norm(out, "ssm_norm"), "MUL", same_shape(z, self.z_gate))  # build_norm_gated
        out = mul_mat("ssm_out", reshape(normed, value, tokens, n), self.e)  # ssm_out
        return reshape(out, self.e, self.t)

    def repeated(self, x: Tensor) -> Tensor:
        """qwen3next's repeat interleave: [S, 1, H_k, T] repeated to [S, H_v / H_k, H_k, T], viewed per value head."""
        dn = self.dn
        rows = reshape(x, dn.head_k, 1, dn.k_heads, self.t)
        out = op("REPEAT", F32, (dn.head_k, dn.v_heads // dn.k_heads, dn.k_heads, self.t), rows)
        return reshape(out, dn.head_k, dn.v_heads, self.tokens, self.n)

    def ffn_out(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """build_layer_ffn: the dense FFN, or the experts plus the shared expert times sigmoid(its gate)."""
        if not b.n_expert:
            return build_ffn(cur, b.n_ff)
        out, width = routed_experts(self.gf, b, cur), b.routing.shared_ff
        if not width:
            return out
        shared = build_ffn(cur, width, weights=SHARED)
        gate = same_shape(mul_mat("ffn_gate_inp_shexp", cur, 1), "SIGMOID")
        return same_shape(out, "ADD", same_shape(shared, "MUL", gate))


class KdaGraph(DeltaNetGraph):
    """llama_model_kimi_linear::graph, llama_model_kimi_k3::graph and llama_model_bailingmoe3::graph: Kimi delta
    attention beside absorbed MLA (kimi-linear and kimi-k3: no rope; kimi-k3 and bailingmoe3: an output gate),
    leading dense FFNs then experts beside shared experts."""

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int, arch: str):
        super().__init__(shape, geometry, n_vocab)
        self.arch = arch
        self.checkpoints: Tensor | None = None  # kimi-k3's banked residual streams [E, checkpoints, T]

    def conv_slots(self) -> range:
        """bailingmoe3_causal_conv1d's slots (the others' conv keeps one): the last min(tokens, n_rs_seq + 1)."""
        return range(self.snapshots(self.tokens))

    def build(self) -> Graph:
        if self.arch == "kimi-k3":
            return self.build_k3()
        inp_l, out_ids = self.embeddings()
        last = len(self.shape.layers) - 1
        bailing = self.arch == "bailingmoe3"
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            inp_sa = inp_l
            cur = self.norm(inp_l, "attn_norm")
            if not bailing:  # bailingmoe3 does not expand the norm first: its conv states' rows come before it
                self.gf.expand(cur)
            cur = self.kda(cur) if b.recurrent_in else self.mla(b, cur)
            if il == last and not bailing:  # kimi-linear: the last layer keeps only the output rows
                cur, inp_sa = get_rows(cur, out_ids, self.e), get_rows(inp_sa, out_ids, self.e)
            ffn_inp = same_shape(cur, "ADD", inp_sa)
            cur = self.norm(ffn_inp, "ffn_norm")
            if b.n_expert:
                shared = build_ffn(cur, b.routing.shared_ff, clamped=b.clamped_ffn, weights=SHARED)
                out = same_shape(routed_experts(self.gf, b, cur), "ADD", shared)
            else:
                out = build_ffn(cur, b.n_ff, clamped=b.clamped_ffn)
            inp_l = same_shape(out, "ADD", ffn_inp)
        in_layer(None)
        return self.head(inp_l, out_ids if bailing else None, hidden=bailing)

    def build_k3(self) -> Graph:
        """kimi-k3's trunk: the residual stream (prefix_sum) first in each add; with attention residuals
        (attn_res.block_size), the block's and the FFN's inputs mixed from the banked streams, every block_size-th
        layer's input banked (the attention's output then restarting the stream); the output rows after the
        trunk's final mix."""
        inp_l, out_ids = self.embeddings()
        every = self.dn.attn_res
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            prefix_sum = inp_l
            cur = self.res_mix(prefix_sum, "attn_res_score") if every else prefix_sum
            banked = bool(every) and il % every == 0
            if banked:
                self.res_push(prefix_sum)
            cur = self.gf.expand(self.norm(cur, "attn_norm"))
            cur = self.kda(cur) if b.recurrent_in else self.mla(b, cur)
            prefix_sum = cur if banked else same_shape(prefix_sum, "ADD", cur)
            cur = self.res_mix(prefix_sum, "ffn_res_score") if every else prefix_sum
            inp_l = same_shape(prefix_sum, "ADD", self.ffn_k3(b, self.norm(cur, "ffn_norm")))
        in_layer(None)
        cur = self.res_mix(inp_l, "output_res_score") if every else inp_l
        return self.head(get_rows(cur, out_ids, self.e), None, hidden=False)

    def res_push(self, cur: Tensor) -> None:
        """llama_model_kimi_k3::graph::res_push: the stream [E, 1, T] appended to the checkpoints (ggml_concat)."""
        checkpoint = reshape(cur, self.e, 1, self.t)
        stack = self.checkpoints
        if stack is not None:
            checkpoint = op("CONCAT", F32, (self.e, stack.ne[1] + 1, self.t), stack, checkpoint)
        self.checkpoints = checkpoint

    def res_mix(self, cur: Tensor, score: str) -> Tensor:
        """llama_model_kimi_k3::graph::res_mix: every checkpoint and the stream scored (rms_norm, the score weight,
        sum_rows), softmax over the scores, ggml_dsv4_hc_pre of the checkpoints by theirs plus the stream times its
        own."""
        stack, t = self.checkpoints, self.t
        if stack is None:
            return cur
        n = stack.ne[1]
        scored = op("SUM_ROWS", F32, (1, n, t), same_shape(same_shape(stack, "RMS_NORM"), "MUL", score))
        own = op("SUM_ROWS", F32, (1, t), same_shape(same_shape(cur, "RMS_NORM"), "MUL", score))
        probs = same_shape(op("CONCAT", F32, (n + 1, t), reshape(scored, n, t), own), "SOFT_MAX")
        p_stack = cont(view(probs, (n, t), (probs.nb[1],)))
        p_own = cont(view(probs, (1, t), (probs.nb[1],), n * FLOAT))
        mixed = op("DSV4_HC_PRE", F32, (self.e, t), stack, p_stack)
        return same_shape(mixed, "ADD", same_shape(cur, "MUL", p_own))

    def conv(self, states: Tensor, i: int, cur: Tensor) -> Tensor:
        """causal_conv1d (kimi-linear), kimi_k3_conv1d, bailingmoe3_causal_conv1d: q, k or v (`i`) projected, after
        its part of the conv state, ssm_conv, silu (of a reshape: a new tensor), [head_dim, H, tokens, seqs]."""
        dn, tokens, n = self.dn, self.tokens, self.n
        width = dn.head_k * dn.k_heads
        size = (dn.d_conv - 1) * width
        part = view(states, (dn.d_conv - 1, width, n), ((dn.d_conv - 1) * FLOAT, 3 * size * FLOAT), i * size * FLOAT)
        x = reshape(mul_mat(("attn_q", "attn_k", "attn_v")[i], cur, width), width, tokens, n)
        kernel = viewed(("ssm_conv1d_q", "ssm_conv1d_k", "ssm_conv1d_v")[i])  # reshaped [d_conv, channels]
        conv = reshape(op("SSM_CONV", F32, (width, tokens, n), self.conv_input(part, x, width), kernel), width, self.t)
        return reshape(same_shape(conv, "SILU"), dn.head_k, dn.k_heads, tokens, n)

    def decay(self, cur: Tensor) -> Tensor:
        """g1 = f + dt_bias (f: kimi-linear's and kimi-k3's low-rank f_b(f_a(x)), bailingmoe3's full-rank f_a(x)),
        then softplus and times A (kimi-linear; kimi-k3 without a lower bound), or times A then bound * sigmoid(-x)
        (kimi-k3) or bound * sigmoid(x) (bailingmoe3)."""
        dn, t, bailing = self.dn, self.t, self.arch == "bailingmoe3"
        head, heads = dn.head_k, dn.k_heads
        low_rank = mul_mat("ssm_f_b", mul_mat("ssm_f_a", cur, head), head * heads)
        f = mul_mat("ssm_f_a", cur, head * heads) if bailing else low_rank
        f = same_shape(f, "ADD", "ssm_dt.bias")  # dt_bias
        if bailing or dn.lower_bound:
            g = same_shape(reshape(f, head, heads, t), "MUL", viewed("ssm_a"))  # A, reshaped
            g = same(g, "SIGMOID", "SCALE") if bailing else same(g, "SCALE", "SIGMOID", "SCALE")
        else:
            g = same_shape(reshape(same_shape(f, "SOFTPLUS"), head, heads, t), "MUL", viewed("ssm_a"))
        return reshape(g, head, heads, self.tokens, self.n)

    def kda(self, cur: Tensor) -> Tensor:
        """The KDA block: build_rs of the three conv states, q / k / v convolved, the decay and beta, build_rs of the
        state, q and k L2-normed, build_delta_net (bailingmoe3: build_recurrent_attn), its results made contiguous,
        RMS-normed and times sigmoid of the output gate (low-rank g_a g_b, full-rank ssm_g / g_a), wo."""
        dn, tokens, n, t = self.dn, self.tokens, self.n, self.t
        head, heads = dn.head_k, dn.k_heads
        width = head * heads
        states = self.state_rows(3 * (dn.d_conv - 1) * width)
        q, k, v = (self.conv(states, i, cur) for i in range(3))
        g = self.decay(cur)
        beta = same_shape(reshape(mul_mat("ssm_beta", cur, heads), 1, heads, tokens, n), "SIGMOID")
        if self.arch == "bailingmoe3":
            q, k = self.l2_norm(q), self.l2_norm(k)
            out = cont(self.recurrent_attn(q, k, v, g, beta, self.state()))
            out_gate = mul_mat("ssm_g_a", cur, width)
        else:
            state = self.state()
            q, k = self.l2_norm(q), self.l2_norm(k)
            result = self.delta_net(q, k, v, g, beta, state)
            out = cont(self.results(result))
            self.store_states(result)
            low_rank = self.arch == "kimi-linear"
            gate_a = mul_mat("ssm_g_a" if low_rank else "ssm_g", cur, head if low_rank else width)
            out_gate = mul_mat("ssm_g_b", gate_a, width) if low_rank else gate_a
        gate = same_shape(reshape(out_gate, head, heads, t), "SIGMOID")
        gated = same_shape(self.norm(reshape(out, head, heads, t), "ssm_norm"), "MUL", gate)
        return mul_mat("attn_output", cont(gated, width, t), self.e)  # wo

    def mla(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """The MLA block (wk_b / wv_b: the cache keeps the latent): q (low-rank where wq_a is), the latent and the
        key's rope part (roped by bailingmoe3 only: new tensors over views), the latent RMS-normed, q's no-rope part
        absorbed, build_attn with wv_b, the output gate (kimi-k3: per element; bailingmoe3: per head, over the
        output reshaped), wo."""
        t, dn = self.t, self.dn
        latent, rope, heads, head_k = b.kv_lora, b.n_rot, b.n_head, b.head_k
        nope = head_k - rope
        q = self.norm(mul_mat("attn_q_a", cur, dn.q_lora), "attn_q_a_norm") if dn.q_lora else cur
        q = mul_mat("attn_q_b" if dn.q_lora else "attn_q", q, heads * head_k)
        nb = (head_k * FLOAT, head_k * heads * FLOAT)
        q_nope, q_pe = view(q, (nope, heads, t), nb), view(q, (rope, heads, t), nb, nope * FLOAT)
        kv = mul_mat("attn_kv_a_mqa", cur, latent + rope)
        kv_cmpr = view(kv, (latent, t), (kv.nb[1],))
        k_pe = view(kv, (rope, 1, t), (kv.nb[1], kv.nb[1]), latent * FLOAT)
        if self.arch == "bailingmoe3":
            q_pe, k_pe = same_shape(q_pe, "ROPE", self.pos), same_shape(k_pe, "ROPE", self.pos)
        v = reshape(self.norm(kv_cmpr, "attn_kv_a_norm"), latent, 1, t)
        absorbed = permute(mul_mat("attn_k_b", permute(q_nope, 0, 2, 1, 3), latent), 0, 2, 1, 3)
        q = op("CONCAT", F32, (latent + rope, heads, t), absorbed, q_pe)
        k = op("CONCAT", F32, (latent + rope, 1, t), v, k_pe)
        out = self.mla_attend(b, q, k, v)
        if self.arch == "bailingmoe3":  # one gate a head: sigmoid (a node of its own) of wqkv_gate's [1, H, T]
            gate = same_shape(reshape(mul_mat("attn_gate", cur, heads), 1, heads, t), "SIGMOID")
            out = reshape(same_shape(reshape(out, out.ne[0] // heads, heads, t), "MUL", gate), out.ne[0], t)
        elif self.arch == "kimi-k3" and dn.attn_gate:  # its gate a node of its own: sigmoid of wqkv_gate's projection
            out = same_shape(out, "MUL", same_shape(mul_mat("attn_gate", cur, dn.attn_gate), "SIGMOID"))
        elif dn.attn_gate:
            out = output_gate(out, cur, dn.attn_gate, heads, "attn_gate")
        if self.arch == "bailingmoe3":  # its gated heads made contiguous (ggml_cont_2d) for wo
            out = cont(out)
        return mul_mat("attn_output", out, self.e)  # wo

    def ffn_k3(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """kimi-k3's FFN: a leading dense block with situ; else build_latent_moe (the experts with situ, in the latent
        where it has one) plus the shared experts with situ."""
        if not b.n_expert:
            return self.situ_ffn(cur, b.n_ff, DENSE)
        out, width = routed_experts(self.gf, b, cur), b.routing.shared_ff
        return same_shape(out, "ADD", self.situ_ffn(cur, width, SHARED)) if width else out

    def situ_ffn(self, cur: Tensor, n_ff: int, weights: tuple[str, str, str]) -> Tensor:
        """kimi-k3's dense and shared FFNs (`weights`: up's, gate's and down's names): gate and up, kimi_k3_situ,
        down."""
        up, gate, down = weights
        return mul_mat(down, situ(mul_mat(gate, cur, n_ff), mul_mat(up, cur, n_ff), self.dn.situ_linear), self.e)


def build_qwen3next(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return QwenNextGraph(shape, geometry, n_vocab, next_=True).build()


def build_qwen35(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return QwenNextGraph(shape, geometry, n_vocab, next_=False).build()


def build_kimi_linear(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return KdaGraph(shape, geometry, n_vocab, "kimi-linear").build()


def build_kimi_k3(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return KdaGraph(shape, geometry, n_vocab, "kimi-k3").build()


def build_bailingmoe3(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return KdaGraph(shape, geometry, n_vocab, "bailingmoe3").build()
