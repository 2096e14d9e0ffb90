"""The graph llama.cpp reserves for the RWKV families: src/models/rwkv6.cpp, rwkv6qwen2.cpp, rwkv7.cpp and arwkv7.cpp
over llm_build_rwkv6_base / llm_build_rwkv7_base and llama-graph.cpp's build_rwkv_token_shift_load / _store.

Each block loads its token shift (the last normed row of the sequence's previous ubatch) and its WKV state with
build_rs; x_prev is the shift followed by the normed input less its last row; the time mix runs LoRAs over the
token-shifted inputs, then ggml_rwkv_wkv6 / ggml_gated_linear_attn / ggml_rwkv_wkv7, whose one output holds the
tokens' results and then the new states (copied back into the cache, as the last normed rows are into the token
shift); then the channel mix (rwkv6, rwkv7: LayerNorms, a two-row shift) or a SwiGLU FFN (rwkv6qwen2, arwkv7: RMS
norms, a one-row shift). ggml_norm and ggml_l2_norm are not in place; every view a source is read through is kept,
since ggml-alloc never reuses memory in place through a view. Weights and biases are not sources (they take no memory
of the compute buffer), but each op names the weights it reads as the builders read them (time_mix_w2 and
time_mix_r_k through a view), and each block's tensors are made in its layer (token_embd_norm's norm in layer 0, as
build_norm's il 0), so the backend scheduler (estimator/scheduler.py) places the split graph on each backend.
"""

from __future__ import annotations

from collections.abc import Callable

from memfit.estimator.ggml_graph import (
    ELEMENT_BYTES,
    F32,
    NORM_PIN,
    Graph,
    Source,
    Tensor,
    cont,
    copy_into,
    get_rows,
    in_layer,
    mul_mat,
    new_tensor,
    op,
    permute,
    pinned,
    reshape,
    same_shape,
    view,
    viewed,
)
from memfit.estimator.layout import GraphLayer, GraphShape, Wkv

FLOAT = ELEMENT_BYTES[F32]
StateRows = Callable[[int], Tensor]  # build_rs with get_rows: a recurrent state's rows, one per sequence
Ffn = Callable[[Tensor, int, bool], Tensor]  # build_ffn: the dense FFN over its input, of a width, gated or not
RWKV6_LERPS = 5  # llama_model_rwkv6: time_mix_lerp_fused [n_embd, 1, 1, 5] (w k v r g)
WKV7_LERPS = 5  # llama_model_rwkv7: time_mix_lerp_fused [n_embd, 1, 1, 5] (r w k v a), and g when gated


def whole(wkv: Wkv | None, n_embd: int) -> bool:
    """Sizes the RWKV loaders accept: every rank set, n_embd a multiple of the head size (and of the k / v heads)."""
    if wkv is None or wkv.head_size <= 0 or n_embd % wkv.head_size or wkv.decay_rank <= 0:
        return False
    if wkv.version == 6:
        heads = n_embd // wkv.head_size
        return wkv.mix_rank > 0 and (not wkv.n_head_kv or heads % wkv.n_head_kv == 0)
    return wkv.iclr_rank > 0 and wkv.value_rank > 0


class RwkvGraph:
    """The trunk and head of an RWKV graph, from build_inp_embd's rows and build_inp_out_ids' ids on."""

    def __init__(self, shape: GraphShape, gf: Graph, tokens: int, n_seq: int, state_rows: StateRows, ffn: Ffn):
        self.shape, self.gf, self.t, self.n_seq = shape, gf, tokens, n_seq
        self.state_rows, self.ffn = state_rows, ffn
        self.e = shape.n_embd
        self.seq_tokens = tokens // n_seq  # ubatch.n_seq_tokens

    def build(self, inp_l: Tensor, out_ids: Tensor, n_vocab: int) -> Graph:
        layer_norms = any(b.wkv is not None and b.wkv.channel_mix for b in self.shape.layers)
        if layer_norms:  # rwkv6 / rwkv7: token_embd_norm (LLM_NORM), created for layer 0 and normed as its (il 0)
            in_layer(0)
            inp_l = self.norm(inp_l, "token_embd_norm", layer_norms)
        v_first: Tensor | None = None  # rwkv7: the first layer's value, mixed into the others'
        last = len(self.shape.layers) - 1
        for il, block in enumerate(self.shape.layers):
            in_layer(il)
            inp_l, v_first = self.block(block, inp_l, out_ids if il == last else None, v_first)
        in_layer(None)
        result_norm = self.norm(inp_l, "output_norm", layer_norms)
        logits = mul_mat("output", result_norm, n_vocab)  # result_output
        result_norm.output = logits.output = True  # llm_graph_result: t_embd and t_logits are graph outputs
        self.gf.expand(logits)
        return self.gf

    @staticmethod
    def norm(x: Tensor, weight: str, layer_norm: bool) -> Tensor:
        """build_norm: LLM_NORM's ggml_norm (a new tensor), then `weight` and its bias; or rms_norm, then `weight`
        (the norm named "norm": pinned)."""
        if layer_norm:
            normed = pinned(op("NORM", F32, x.ne, x), NORM_PIN)
            return same_shape(same_shape(normed, "MUL", weight), "ADD", f"{weight}.bias")
        return same_shape(pinned(same_shape(x, "RMS_NORM"), NORM_PIN), "MUL", weight)

    def shifted(self, shift: Tensor, normed: Tensor) -> Tensor:
        """x_prev: ggml_concat of the token shift and the normed rows but each sequence's last, along the tokens."""
        rows = view(normed, (self.e, self.seq_tokens - 1, self.n_seq), (normed.nb[1], normed.nb[2]))
        return op("CONCAT", F32, (self.e, self.seq_tokens, self.n_seq), shift, rows)

    def last_rows(self, normed: Tensor) -> Tensor:
        """The normed rows the token shift keeps: each sequence's last (a view)."""
        offset = (self.seq_tokens - 1) * self.e * FLOAT
        return view(normed, (self.e, 1, self.n_seq), (normed.nb[1], normed.nb[2]), offset)

    def store(self, src: Tensor, width: int, offset: int = 0) -> None:
        """ggml_cpy of `width` elements per sequence of `src` (from `offset`) into the cache's rows."""
        n = width * self.n_seq
        self.gf.expand(copy_into(view(src, (n,), (), offset), new_tensor(F32, n, external=True)))

    def block(
        self, b: GraphLayer, inp_l: Tensor, out_ids: Tensor | None, v_first: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """One layer of the model's builder: the token shift, the time mix, the channel mix or the FFN."""
        w = b.wkv
        assert w is not None
        e, t, n = self.e, self.t, self.n_seq
        inp = reshape(inp_l, e, self.seq_tokens, n)
        shifts = 2 if w.channel_mix else 1  # token_shift_count: 2 (rwkv6, rwkv7), n_embd_r == n_embd (the others)
        token_shift = reshape(self.state_rows(shifts * e), e, shifts, n)  # build_rwkv_token_shift_load
        nb = (token_shift.nb[1], token_shift.nb[2])
        att_shift = view(token_shift, (e, 1, n), nb) if w.channel_mix else token_shift
        att_norm = self.norm(inp, "attn_norm", bool(w.channel_mix))
        cur, v_first = self.time_mix(w, att_norm, self.shifted(att_shift, att_norm), v_first)
        if not w.channel_mix:  # rwkv6qwen2 / arwkv7: the shift stored, then the FFN
            self.store(self.last_rows(att_norm), e)
            ffn_inp = reshape(same_shape(cur, "ADD", inp), e, t)
            if out_ids is not None:
                ffn_inp = get_rows(ffn_inp, out_ids, e)
            return same_shape(self.ffn(self.norm(ffn_inp, "ffn_norm", False), b.n_ff, True), "ADD", ffn_inp), v_first
        ffn_inp = same_shape(cur, "ADD", inp)
        ffn_norm = self.norm(ffn_inp, "attn_norm_2", True)
        x_prev = self.shifted(view(token_shift, (e, 1, n), nb, e * FLOAT), ffn_norm)
        shift = op("CONCAT", F32, (e, 2, n), self.last_rows(att_norm), self.last_rows(ffn_norm))
        self.store(shift, 2 * e)  # build_rwkv_token_shift_store
        ffn_inp, ffn_norm, x_prev = (reshape(x, e, t) for x in (ffn_inp, ffn_norm, x_prev))
        if out_ids is not None:  # the last layer keeps only the output rows
            ffn_inp, ffn_norm, x_prev = (get_rows(x, out_ids, e) for x in (ffn_inp, ffn_norm, x_prev))
        return same_shape(self.channel_mix(w, ffn_norm, x_prev), "ADD", ffn_inp), v_first

    def channel_mix(self, w: Wkv, cur: Tensor, x_prev: Tensor) -> Tensor:
        """build_rwkv6_channel_mix / build_rwkv7_channel_mix: k = relu(key(lerp))^2, then value (times
        sigmoid(receptance(lerp)) for rwkv6)."""
        sx = same_shape(x_prev, "SUB", cur)
        rwkv6 = w.version == 6
        xr = same_shape(same_shape(sx, "MUL", "channel_mix_lerp_r"), "ADD", cur) if rwkv6 else None
        r = same_shape(mul_mat("channel_mix_receptance", xr, self.e), "SIGMOID") if xr is not None else None
        xk = same_shape(same_shape(sx, "MUL", "channel_mix_lerp_k"), "ADD", cur)
        k = same_shape(same_shape(mul_mat("channel_mix_key", xk, w.channel_mix), "RELU"), "SQR")
        out = mul_mat("channel_mix_value", k, self.e)
        return same_shape(r, "MUL", out) if r is not None else out

    def time_mix(self, w: Wkv, cur: Tensor, x_prev: Tensor, v_first: Tensor | None) -> tuple[Tensor, Tensor | None]:
        if w.version == 6:
            return self.time_mix6(w, cur, x_prev), v_first
        return self.time_mix7(w, cur, x_prev, v_first)

    def wkv_state(self, w: Wkv, op_name: str, *srcs: Source) -> Tensor:
        """build_rs of the WKV state, the op (ne = [n_embd, n_tokens + head_size * n_seqs]: the tokens' results,
        then the states), the states copied back; its results as [n_embd, n_tokens], group-normed if the layer has
        time_mix_ln."""
        e, t, hs = self.e, self.t, w.head_size
        state = self.state_rows(e * hs)  # n_embd_s = n_embd * wkv_head_size
        out = op(op_name, F32, (e, t + hs * self.n_seq), *srcs, state)
        self.store(out, e * hs, e * t * FLOAT)
        cur = view(out, (e * t,))
        if not w.group_norm:
            return reshape(cur, e, t)
        normed = op("NORM", F32, (hs, e // hs, t), reshape(cur, hs, e // hs, t))  # group norm: one group a head
        return same_shape(same_shape(reshape(normed, e, t), "MUL", "time_mix_ln"), "ADD", "time_mix_ln.bias")

    def time_mix6(self, w: Wkv, cur: Tensor, x_prev: Tensor) -> Tensor:
        """build_rwkv6_time_mix with time_mix_lerp_fused: the five-way LoRA, r k v g, the decay, the WKV."""
        e, t, hs = self.e, self.t, w.head_size
        heads = e // hs
        sx = reshape(same_shape(x_prev, "SUB", cur), e, t)
        cur = reshape(cur, e, t)
        xxx = same_shape(same_shape(sx, "MUL", "time_mix_lerp_x"), "ADD", cur)
        xxx = same_shape(mul_mat("time_mix_w1", xxx, RWKV6_LERPS * w.mix_rank), "TANH")
        xxx = cont(permute(reshape(xxx, w.mix_rank, 1, RWKV6_LERPS, t), 0, 1, 3, 2))
        xxx = mul_mat(viewed("time_mix_w2"), xxx, e)  # time_mix_w2 reshaped [rank, n_embd, 1, 5]: one per lerp
        xxx = same_shape(xxx, "ADD", "time_mix_lerp_fused")
        xxx = same_shape(same_shape(xxx, "MUL", reshape(sx, e, 1, t)), "ADD", reshape(cur, e, 1, t))
        xw, xk, xv, xr, xg = (view(xxx, (e, t), (xxx.nb[1],), i * e * t * FLOAT) for i in range(RWKV6_LERPS))
        kv = w.n_head_kv * hs if w.n_head_kv else e  # time_mix_key / value: attn_key_value_size
        r, k = mul_mat("time_mix_receptance", xr, e), mul_mat("time_mix_key", xk, kv)
        v = mul_mat("time_mix_value", xv, kv)
        g = same_shape(mul_mat("time_mix_gate", xg, e), "SIGMOID" if w.gated_linear else "SILU")
        if w.n_head_kv and w.n_head_kv != heads:  # ggml_repeat of the k / v heads up to n_head
            group = (hs, heads // w.n_head_kv, w.n_head_kv, t)
            k, v = (op("REPEAT", F32, group, reshape(x, hs, 1, w.n_head_kv, t)) for x in (k, v))
        k, v, r = (reshape(x, hs, heads, t) for x in (k, v, r))
        decay = mul_mat("time_mix_decay_w2", same_shape(mul_mat("time_mix_decay_w1", xw, w.decay_rank), "TANH"), e)
        decay = same_shape(decay, "ADD", "time_mix_decay")
        for name in ("EXP", "NEG", "EXP"):  # exp(-exp(w + time_mix_decay)), in place
            decay = same_shape(decay, name)
        decay = reshape(decay, hs, heads, t)
        if w.gated_linear:  # k = k * (1 - w); ggml_gated_linear_attn
            k = same_shape(k, "SUB", same_shape(k, "MUL", decay))
            out = self.wkv_state(w, "GATED_LINEAR_ATTN", k, v, r, decay)
        else:
            out = self.wkv_state(w, "RWKV_WKV6", k, v, r, "time_mix_first", decay)
        return reshape(mul_mat("time_mix_output", same_shape(out, "MUL", g), e), e, self.seq_tokens, self.n_seq)

    def time_mix7(self, w: Wkv, cur: Tensor, x_prev: Tensor, v_first: Tensor | None) -> tuple[Tensor, Tensor]:
        """build_rwkv7_time_mix: the lerps (sx repeated), r, the decay, k, v (with the first layer's value mixed
        in after the first), the gate, a, kk = l2_norm(k * k_k), the WKV, the bonus v * sum(k * r * r_k)."""
        e, t, hs = self.e, self.t, w.head_size
        heads = e // hs
        lerps = WKV7_LERPS + (1 if w.gate_rank else 0)
        sx = op("REPEAT", F32, (e, self.seq_tokens, self.n_seq, lerps), same_shape(x_prev, "SUB", cur))
        xxx = same_shape(same_shape(sx, "MUL", "time_mix_lerp_fused"), "ADD", cur)
        xr, xw, xk, xv, xa, *xg = (view(xxx, (e, t), (xxx.nb[1],), i * e * t * FLOAT) for i in range(lerps))
        r = mul_mat("time_mix_receptance", xr, e)
        decay = mul_mat("time_mix_w2", same_shape(mul_mat("time_mix_w1", xw, w.decay_rank), "TANH"), e)
        decay = same_shape(decay, "ADD", "time_mix_w0")
        for name in ("SIGMOID", "SCALE", "EXP"):  # exp(-0.606531 * sigmoid(w0 + w)), in place
            decay = same_shape(decay, name)
        k, v = mul_mat("time_mix_key", xk, e), mul_mat("time_mix_value", xv, e)
        if v_first is None:
            v_first = v
        else:
            mix = mul_mat("time_mix_v2", mul_mat("time_mix_v1", xv, w.value_rank), e)
            mix = same_shape(same_shape(mix, "ADD", "time_mix_v0"), "SIGMOID")
            v = same_shape(v, "ADD", same_shape(same_shape(v_first, "SUB", v), "MUL", mix))
        g = None
        if xg:
            g = mul_mat("time_mix_g2", same_shape(mul_mat("time_mix_g1", xg[0], w.gate_rank), "SIGMOID"), e)
        a = mul_mat("time_mix_a2", mul_mat("time_mix_a1", xa, w.iclr_rank), e)
        a = same_shape(same_shape(a, "ADD", "time_mix_a0"), "SIGMOID")
        kk = op("L2_NORM", F32, (hs, heads, t), reshape(same_shape(k, "MUL", "time_mix_k_k"), hs, heads, t))
        ka = same_shape(k, "MUL", "time_mix_k_a")
        k = same_shape(k, "ADD", same_shape(same_shape(a, "MUL", ka), "SUB", ka))
        r, decay, k, v, a = (reshape(x, hs, heads, t) for x in (r, decay, k, v, a))
        srcs = (r, decay, k, v, same_shape(kk, "NEG"), same_shape(kk, "MUL", a))
        out = self.wkv_state(w, "RWKV_WKV7", *srcs)
        rk = same_shape(same_shape(k, "MUL", r), "MUL", viewed("time_mix_r_k"))  # r_k reshaped [head_size, heads]
        rk = op("SUM_ROWS", F32, (1, heads, t), rk)
        out = same_shape(out, "ADD", reshape(same_shape(v, "MUL", rk), e, t))
        if g is not None:
            out = same_shape(out, "MUL", g)
        return reshape(mul_mat("time_mix_output", out, e), e, self.seq_tokens, self.n_seq), v_first
