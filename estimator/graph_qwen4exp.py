"""The graph llama.cpp reserves for qwen4exp (src/models/qwen4exp.cpp, Qwen3.8-Flash-Next), rebuilt node for node.

qwen3.5's gated delta nets and gated attention, with hyper-connections in place of every norm: the residual is
`count` parallel streams [n_embd, count, T] (the embedding repeated); before each mixer and each FFN
build_hc_mix RMS-norms the streams, gates them through a low-rank projection and averages them into the block's
input, and build_hc_combine adds the block's output back into every stream, weighted by an injection of the same
normed streams. The attention layers with a compress ratio run QSA: an indexer scores blocks of `ratio` cached keys
(its own K cache, mean-pooled, RMS-normed and roped) against its queries, and the attention mask keeps the best
`top_k` cells (the attention itself stays dense over that mask). One layer may add the PLE n-gram embedding: rows
gathered per token, a gate from their key and the streams, and a dilated causal conv over its own conv history.
Ops in place on a tensor's only consumer take no memory of their own; weights and the caches are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from memfit.estimator.compute_graph import FLOAT, cache_type
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import (
    F16,
    F32,
    I32,
    I64,
    Graph,
    Tensor,
    cont,
    copy_into,
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
    set_rows,
    transpose,
    view,
    viewed,
)
from memfit.estimator.graph_delta_net import IMROPE_POSITIONS, QwenNextGraph
from memfit.estimator.kv_cache import window_cells
from memfit.estimator.layout import GraphLayer, GraphShape, HyperConnections


@dataclass(frozen=True)
class QsaInputs:
    """llm_graph_input_qsa, one per compress ratio: the indexer cache's k_idxs, each cell's block, each block's
    cells and positions, the per-block bias."""

    k_idxs: Tensor
    cell_blk: Tensor
    blk_cells: Tensor
    blk_pos: Tensor
    bias: Tensor


class Qwen4expGraph(QwenNextGraph):
    """llama_model_qwen4exp::graph over llm_build_delta_net_base (QwenNextGraph's delta nets and gated attention)."""

    z_gate = "SIGMOID"  # build_norm_gated: sigmoid, not qwen3.5's silu

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int):
        super().__init__(shape, geometry, n_vocab, next_=False)
        assert shape.hyper is not None
        self.hc: HyperConnections = shape.hyper
        self.qsa: dict[int, QsaInputs] = {}

    def build(self) -> Graph:
        hc, e, t = self.hc, self.e, self.t
        inp_l, out_ids = self.embeddings(IMROPE_POSITIONS)
        ple = self.ple_embedding() if hc.ple_layer >= 0 else None
        res = op("REPEAT", F32, (e, hc.count, t), reshape(inp_l, e, 1, t))  # hc_init
        last = len(self.shape.layers) - 1
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            if il == hc.ple_layer and ple is not None:
                res = self.ple(ple, res)
            cur, inject = self.mix(res, "hc_attn")
            self.gf.expand(cur)
            cur = self.linear_attn(cur) if b.recurrent_in else self.layer_attn(b, il, cur)
            if il == last:  # every row after this is per token: only the output rows go on
                outs = out_ids.ne[0]
                cur, inject = get_rows(cur, out_ids, e), get_rows(inject, out_ids, hc.count)
                res = reshape(get_rows(reshape(res, e * hc.count, t), out_ids, e * hc.count), e, hc.count, outs)
            res = self.combine(res, cur, inject)
            cur, inject = self.mix(res, "hc_ffn")
            res = self.combine(res, self.ffn_out(b, cur), inject)
        in_layer(None)
        cur, _ = self.mix(res, "output_hc", inject=False)  # the final mixer is the output norm
        cur.output = True  # t_embd
        logits = mul_mat("output", cur, self.n_vocab)
        logits.output = True  # t_logits
        self.gf.expand(logits)
        return self.gf

    # --- hyper-connections ------------------------------------------------------------------------------------

    def mix(self, x: Tensor, weights: str, inject: bool = True) -> tuple[Tensor, Tensor]:
        """build_hc_mix: the streams RMS-normed (the [count * n_embd] weight in place), a low-rank gate (down,
        scale, silu, up, sigmoid) times them, their mean; `inject`: the streams' injection weights [count, T];
        `weights`: the module's names' stem (hc_attn, hc_ffn, output_hc: its _norm, _down, _up, _inject)."""
        hc, e, nt = self.hc, self.e, x.ne[2]
        xn = same_shape(reshape(same_shape(x, "RMS_NORM"), e * hc.count, nt), "MUL", f"{weights}_norm")
        low = same(mul_mat(f"{weights}_down", xn, hc.rank), "SCALE", "SILU")
        gate = same_shape(mul_mat(f"{weights}_up", low, e * hc.count), "SIGMOID")
        gated = reshape(same_shape(xn, "MUL", gate), e, hc.count, nt)
        row = (e * FLOAT * hc.count,)
        mixed = cont(view(gated, (e, nt), row))
        for c in range(1, hc.count):
            mixed = same_shape(mixed, "ADD", view(gated, (e, nt), row, c * e * FLOAT))
        injected = mul_mat(f"{weights}_inject", xn, hc.count) if inject else xn
        return same_shape(mixed, "SCALE"), injected

    def combine(self, residual: Tensor, out: Tensor, inject: Tensor) -> Tensor:
        """build_hc_combine: the block's output repeated over the streams, times 2 * sigmoid(inject / count), added
        to the residual streams."""
        hc, e, nt = self.hc, self.e, residual.ne[2]
        w = reshape(same(inject, "SCALE", "SIGMOID", "SCALE"), 1, hc.count, nt)
        b = op("REPEAT", F32, (e, hc.count, nt), reshape(out, e, 1, nt))
        return same_shape(residual, "ADD", same_shape(b, "MUL", w))

    # --- the delta net's conv state -----------------------------------------------------------------------------

    def conv_input(self, states: Tensor, x: Tensor, channels: int) -> Tensor:
        return self.conv_state_at(states, x, channels)

    def conv_state_at(self, states: Tensor, x: Tensor, channels: int) -> Tensor:
        """build_conv_state_at: the state's columns [cols, channels, seqs] followed by the tokens (x transposed);
        for each of the n_rs_seq + 1 slots, the `cols` columns ending `slot` tokens before the last made contiguous
        and copied back into the slot's row."""
        cols, tokens, n = states.ne[0], self.tokens, self.n
        conv_x = op("CONCAT", F32, (cols + tokens, channels, n), states, transpose(x))
        for slot in range(self.rs_slots):
            tail = view(conv_x, (cols, channels, n), (conv_x.nb[1], conv_x.nb[2]), max(0, tokens - slot) * FLOAT)
            self.gf.expand(copy_into(cont(tail), new_tensor(F32, cols * channels, n, external=True)))
        return conv_x

    # --- attention: dense or QSA ------------------------------------------------------------------------------

    def layer_attn(self, b: GraphLayer, il: int, cur: Tensor) -> Tensor:
        """build_layer_attn: QSA where the layer has a compress ratio (the indexer's top-k before the query), else
        qwen3.5's gated attention."""
        ratio = self.hc.ratios[il] if il < len(self.hc.ratios) else 0
        if not ratio:
            return self.gated_attention(b, cur)
        top_k = self.qsa_top_k(b, cur, ratio)
        return self.gated_attention(b, cur, partial(self.attn_qsa, top_k=top_k))

    def qsa_inputs(self, ratio: int, blocks: int, n_kv: int) -> QsaInputs:
        """llm_graph_input_qsa for a compress ratio, made once: the per-block half of the bias where the mask holds
        the rest (a causal mask of n_kv cells)."""
        if ratio not in self.qsa:
            ns, per = self.geometry.n_stream, self.t // self.geometry.n_stream
            self.qsa[ratio] = QsaInputs(
                new_tensor(I64, self.t, input=True),  # the indexer cache's build_input_k_idxs
                new_tensor(I32, n_kv, ns, input=True),
                new_tensor(I32, ratio * blocks, ns, input=True),
                new_tensor(I32, 4 * blocks * ns, input=True),
                new_tensor(F32, blocks, per, ns, input=True),
            )
        return self.qsa[ratio]

    def qsa_top_k(self, b: GraphLayer, cur: Tensor, ratio: int) -> Tensor:
        """build_qsa_top_k: the raw indexer key into its cache; each block's cached keys mean-pooled, RMS-normed
        and roped; the indexer queries (normed, roped) score the blocks (relu, summed over the heads, the block
        bias added); each cell takes its block's score plus the mask; the best top_k + ratio - 1 cells."""
        hc, t, g = self.hc, self.t, self.geometry
        ns, per, head = g.n_stream, t // g.n_stream, hc.idx_head
        n_kv = window_cells(None, g)
        blocks = (n_kv + ratio - 1) // ratio
        inp = self.qsa_inputs(ratio, blocks, n_kv)
        k_raw = reshape(mul_mat("indexer.k_proj", cur, head), head, 1, t)
        kind = cache_type(g.k_type)  # llama_memory_hybrid_idx: the indexer's cache takes type_k as the attention's
        cache = new_tensor(kind, head, n_kv, ns, external=True)
        self.gf.expand(set_rows(cache, view(k_raw, (head, t), (k_raw.nb[2],)), inp.k_idxs))
        members = get_rows(new_tensor(kind, head, n_kv, ns, external=True), inp.blk_cells, head)
        members = reshape(members, head, ratio, blocks, ns)
        pooled: Tensor | None = None
        for i in range(ratio):
            piece = cont(view(members, (head, blocks, ns), (members.nb[2], members.nb[3]), i * members.nb[1]))
            pooled = piece if pooled is None else same_shape(pooled, "ADD", piece)
        assert pooled is not None
        pooled = self.norm(reshape(same_shape(pooled, "SCALE"), head, blocks * ns, 1), "indexer.k_norm")
        pooled = reshape(same_shape(reshape(pooled, head, 1, blocks * ns), "ROPE", inp.blk_pos), head, blocks, ns)
        q = reshape(mul_mat("indexer.q_proj", cur, hc.idx_heads * head), head, hc.idx_heads, t)
        q = same_shape(self.norm(q, "indexer.q_norm"), "ROPE", self.pos)
        score = mul_mat_t(pooled, reshape(q, head, hc.idx_heads * per, ns))
        score = same_shape(reshape(score, blocks, hc.idx_heads, per, ns), "RELU")
        summed: Tensor | None = None
        for h in range(hc.idx_heads):
            piece = view(score, (blocks, per, ns), (score.nb[2], score.nb[3]), h * score.nb[1])
            summed = cont(piece) if summed is None else same_shape(summed, "ADD", piece)
        assert summed is not None
        score = same_shape(summed, "ADD", inp.bias)
        expanded = get_rows(cont(permute(score, 1, 0, 2, 3)), inp.cell_blk, per)
        expanded = cont(permute(expanded, 1, 0, 2, 3))
        mask = self.cache_inputs(b).mask
        if mask.type != F32:  # flash attention keeps the mask in F16: cast
            mask = op("CPY", F32, mask.ne, mask)
        expanded = same_shape(expanded, "ADD", reshape(mask, n_kv, per, ns))
        width = min(n_kv, hc.idx_top_k + ratio - 1)
        return reshape(cont(op("TOP_K", I32, (width, per, ns), expanded)), width, per, 1, ns)

    def attn_qsa(self, b: GraphLayer, q: Tensor, k: Tensor, v: Tensor, top_k: Tensor) -> Tensor:
        """build_attn_qsa: the rotations of a quantized cache, Q, V, K expanded, K and V into the cache; the mask
        filled with -inf, the top_k cells' entries zeroed (set_rows from a zero-filled leaf), the mask added back;
        build_attn_mha over it."""
        inputs = self.cache_inputs(b)
        if inputs.k_rot is not None:
            q, k = self.hadamard(q, inputs.k_rot), self.hadamard(k, inputs.k_rot)
        if inputs.v_rot is not None:
            v = self.hadamard(v, inputs.v_rot)
        for x in (q, v, k):
            self.gf.expand(x)
        self.store_kv(b, k, v, inputs)
        mask, width, per, ns = inputs.mask, top_k.ne[0], top_k.ne[1], top_k.ne[3]
        n_kv, el = mask.ne[0], mask.nb[0]
        filled = op("FILL", mask.type, mask.ne, mask)
        cells = view(filled, (1, n_kv, per, ns), (el, el * n_kv, el * n_kv * per))
        rows = view(top_k, (width, per, ns, 1), (top_k.nb[1], top_k.nb[2], ns * top_k.nb[3]))
        zeros = op("FILL", F32, (1, width, per, ns), new_tensor(F32, 1, width, per, ns))
        kept = set_rows(cells, zeros, rows)
        kept = view(kept, (n_kv, per, 1, ns), (kept.nb[2], kept.nb[3], kept.nb[3]))
        cur = self.mha(b, q, op("ADD", mask.type, kept.ne, kept, mask))
        return self.hadamard(cur, inputs.v_rot) if inputs.v_rot is not None else cur

    # --- the PLE n-gram embedding -----------------------------------------------------------------------------

    def ple_embedding(self) -> Tensor:
        """build_inp_ple: ple_heads rows of per_layer_token_embd per token, flattened [ple_head * heads, T]."""
        hc, t = self.hc, self.t
        rows = new_tensor(I32, hc.ple_heads * t, input=True)
        emb = reshape(get_rows("per_layer_token_embd", rows, hc.ple_head), hc.ple_head * hc.ple_heads, t)
        return self.gf.expand(emb)

    def grouped(self, x: Tensor, weight: str) -> Tensor:
        """build_ple's grouped norm: RMS over each stream, the [count * n_embd] weight (`weight`) in place,
        [n_embd, count, T]."""
        hc, e, t = self.hc, self.e, self.t
        normed = reshape(same_shape(reshape(x, e, hc.count, t), "RMS_NORM"), e * hc.count, t)
        return reshape(same_shape(normed, "MUL", weight), e, hc.count, t)

    def ple(self, emb: Tensor, hidden: Tensor) -> Tensor:
        """build_ple: the rows' key against the streams (a per-stream dot product, its signed square root's
        sigmoid) gates their value over the streams; the gated value normed and convolved (a causal conv dilated
        by the n-gram size over its own conv history, each tap a contiguous shift times its kernel column, then
        silu); both added to the streams."""
        hc, e, t, n = self.hc, self.e, self.t, self.n
        width = e * hc.count
        key = self.grouped(mul_mat("ple_key", emb, width), "ple_norm_key")
        value = mul_mat("ple_value", emb, e)
        query = self.grouped(hidden, "ple_norm_query")
        s = same_shape(op("SUM_ROWS", F32, (1, hc.count, t), same_shape(key, "MUL", query)), "SCALE")
        magnitude = same(same_shape(s, "ABS"), "CLAMP", "SQRT")
        gate = same_shape(same_shape(same_shape(s, "SGN"), "MUL", magnitude), "SIGMOID")
        gated = same_shape(op("REPEAT", F32, (e, hc.count, t), reshape(value, e, 1, t)), "MUL", gate)
        normalized = reshape(self.grouped(reshape(gated, width, t), "ple_norm_conv"), width, t)
        history = (hc.ple_kernel - 1) * hc.ple_dilation
        states = reshape(self.state_rows(history * width), history, width, n)
        padded = self.conv_state_at(states, reshape(normalized, width, self.tokens, n), width)
        kernel_type = F32 if hc.ple_conv_f32 else F16  # ple_conv1d [kernel, width], in the file's type
        conv: Tensor | None = None
        for k in range(hc.ple_kernel):
            start = history - (hc.ple_kernel - 1 - k) * hc.ple_dilation
            shift = view(padded, (self.tokens, width, n), (padded.nb[1], padded.nb[2]), start * FLOAT)
            # the kernel's column k: a view of the weight (ggml_view_2d) made contiguous
            column = reshape(op("CONT", kernel_type, (1, width), viewed("ple_conv1d")), width)
            if kernel_type != F32:  # this kernel keeps the file's type: cast
                column = op("CPY", F32, column.ne, column)
            term = same_shape(cont(transpose(shift)), "MUL", column)
            conv = term if conv is None else same_shape(conv, "ADD", term)
        assert conv is not None
        conv = reshape(cont(same_shape(conv, "SILU")), e, hc.count, t)
        return same_shape(hidden, "ADD", same_shape(gated, "ADD", conv))


def build_qwen4exp(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return Qwen4expGraph(shape, geometry, n_vocab).build()
