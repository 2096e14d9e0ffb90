"""PLaMo-2's reserved graph (src/models/plamo2.cpp), rebuilt node for node over DecoderGraph's pieces.

Every block norms its input, runs attention (a fused QKV with q/k norms) or PLaMo-2's own Mamba mixer, norms the
mixer's output and adds the residual; then the FFN (one up projection, swiglu over its halves) between two norms,
and the residual again. The Mamba mixer (build_plamo2_mamba_layer) differs from build_mamba2_layer: the
in-projection is only z and x, permuted and made contiguous per head; x is a contiguous copy; the convolution has
no bias; a second projection (ssm_x) gives B, C and a dt of its own width, each RMS-normed; dt's projection to the
heads and the scan follow Mamba-1's order (x, dt, B, C, one group).
"""

from __future__ import annotations

from memfit.estimator.compute_graph import FLOAT, DecoderGraph, ssm_scan
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import (
    F32,
    Graph,
    Tensor,
    cont,
    copy_into,
    get_rows,
    glu,
    in_layer,
    mul_mat,
    new_tensor,
    op,
    permute,
    reshape,
    same_shape,
    transpose,
    view,
    viewed,
)
from memfit.estimator.layout import GraphLayer, GraphShape

DT_DIM_MIN, DT_DIM_DIVISOR = 64, 16  # llama_model_plamo2: dt_dim = max(64, n_embd / 16)


class Plamo2Graph(DecoderGraph):
    """llama_model_plamo2::graph."""

    def build(self) -> Graph:
        inp_l, out_ids = self.embeddings()
        e, last = self.shape.n_embd, len(self.shape.layers) - 1
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            residual = inp_l
            cur = self.norm(inp_l, "attn_norm")  # pre_mixer_norm
            cur = self.mamba_mixer(b, cur) if b.recurrent_in else self.attention(b, cur)
            residual = same_shape(self.norm(cur, "post_attention_norm"), "ADD", residual)  # the residual
            cur = self.norm(self.ffn(b, self.norm(residual, "ffn_norm")), "post_ffw_norm")  # the FFN between norms
            if il == last:  # the last block keeps only the output rows
                cur, residual = get_rows(cur, out_ids, e), get_rows(residual, out_ids, e)
            inp_l = same_shape(cur, "ADD", residual)
        in_layer(None)
        return self.head(inp_l)

    def mamba_mixer(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """build_plamo2_mamba_layer: the conv state (build_rs), in_proj to z and x per head (permuted, made
        contiguous), x copied out and after the conv state, ssm_conv and silu; ssm_x to B, C and dt, each RMS-normed,
        dt projected to the heads (its bias in place); ssm_scan into y and the new states; y + x*D, swiglu(z, y),
        out_proj. The conv state's last columns and the scan's states go back into the cache (copies)."""
        assert b.ssm is not None
        t, n, ssm, e = self.t, self.geometry.n_seq, b.ssm, self.shape.n_embd
        tokens, d_inner, d_conv = t // n, ssm.d_inner, ssm.d_conv - 1
        head_dim, heads = d_inner // ssm.n_head, ssm.n_head
        conv = reshape(self.state_rows(d_conv * d_inner), d_conv, d_inner, n)
        zx = mul_mat("ssm_in", reshape(cur, e, tokens, n), 2 * d_inner)
        zx = cont(permute(zx, 0, 2, 1, 3), 2 * head_dim, heads, tokens, n)
        zx_nb = (zx.nb[1], zx.nb[2], zx.nb[3])
        x = cont(view(zx, (head_dim, heads, tokens, n), zx_nb, head_dim * FLOAT), d_inner, tokens, n)
        z = view(zx, (head_dim, heads, tokens, n), zx_nb)
        conv_x = op("CONCAT", F32, (d_conv + tokens, d_inner, n), conv, transpose(x))
        last = view(conv_x, (d_conv, d_inner, n), (conv_x.nb[1], conv_x.nb[2]), tokens * FLOAT)
        self.gf.expand(copy_into(last, new_tensor(F32, d_conv * d_inner * n, external=True)))
        x = same_shape(op("SSM_CONV", F32, (d_inner, tokens, n), conv_x, "ssm_conv1d"), "SILU")
        dt_dim = max(DT_DIM_MIN, e // DT_DIM_DIVISOR)
        bcdt = mul_mat("ssm_x", x, dt_dim + 2 * ssm.d_state)
        nb = (bcdt.nb[1], bcdt.nb[2])
        b_, c_ = (
            self.norm(view(bcdt, (ssm.d_state, tokens, n), nb, i * ssm.d_state * FLOAT), w)
            for i, w in ((0, "ssm_b_norm"), (1, "ssm_c_norm"))
        )
        dt = self.norm(view(bcdt, (dt_dim, tokens, n), nb, 2 * ssm.d_state * FLOAT), "ssm_dt_norm")
        dt = same_shape(mul_mat("ssm_dt", dt, heads), "ADD", "ssm_dt.bias")
        x = view(x, (head_dim, heads, tokens, n), (head_dim * FLOAT, d_inner * FLOAT, d_inner * tokens * FLOAT))
        b_, c_ = (view(s, (ssm.d_state, 1, tokens, n), (ssm.d_state * FLOAT, s.nb[1], s.nb[2])) for s in (b_, c_))
        states = ssm.d_state * d_inner
        scan = self.recurrent_rows(
            states,
            ssm_scan((ssm.d_state, head_dim, heads, n), d_inner * t + states * n, x, dt, b_, c_, viewed("ssm_a")),
        )
        kept = view(scan, (states * n,), (), d_inner * t * FLOAT)
        self.gf.expand(copy_into(kept, new_tensor(F32, states * n, external=True)))
        y = view(scan, (head_dim, heads, tokens, n), x.nb[1:])
        y = glu(cont(z), same_shape(y, "ADD", op("MUL", F32, x.ne, x, viewed("ssm_d"))))  # y + x * D (reshaped)
        y = view(y, (d_inner, tokens, n), (y.nb[2], y.nb[3]))
        return reshape(mul_mat("ssm_out", y, e), e, t)


def build_plamo2(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return Plamo2Graph(shape, geometry, n_vocab).build()
