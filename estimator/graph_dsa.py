"""DeepSeek-V3.2's sparse attention (DSA) rebuilt node for node: src/models/deepseek32.cpp and glm-dsa.cpp over
llm_graph_context::build_attn(llm_graph_input_attn_k_dsa *) (src/llama-graph.cpp) and llama_kv_cache_dsa.

Each block is deepseek2's absorbed MLA (DecoderGraph.mla_attention) with a lightning indexer beside it: from the
block's normed input the indexer's keys (LayerNorm with a bias, rope, the Hadamard rotation) go into their own K
cache, its queries (from the query's low-rank latent: roped, rotated) and per-head weights (scaled) score every
cached key (ggml_lightning_indexer: the context's fused_lid is always on, so its mask is F16), and the best top_k
keys of each token are kept (ggml_top_k, made contiguous). build_attn then unmasks those keys in a copy of the KQ mask
filled with -inf (zeros written over it by set_rows) and adds the cache's own mask to it: MLA attends over that.
GLM-5.2's "shared" indexer layers run no indexer and reuse the top-k of the last layer that did. The trunk, the
routed and shared experts and the LM head are DecoderGraph's.
"""

from __future__ import annotations

from dataclasses import dataclass

from memfit.estimator.compute_graph import DecoderGraph, cache_type, rotation_size
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import (
    F16,
    F32,
    I32,
    I64,
    Graph,
    Tensor,
    cont,
    mul_mat,
    mul_mat_t,
    new_tensor,
    op,
    reshape,
    same_shape,
    set_rows,
    view,
)
from memfit.estimator.kv_cache import window_cells
from memfit.estimator.layout import GraphLayer, GraphShape, Indexer


@dataclass(frozen=True)
class IndexerInputs:
    """build_attn_inp_k_dsa's inputs of the indexer's cache: k_idxs_lid, the KQ mask (F16: fused_lid) and the
    Hadamard rotation (attn_rot_k, always on for the DSA architectures' indexer caches)."""

    k_idxs: Tensor
    mask: Tensor
    rot: Tensor


class DsaGraph(DecoderGraph):
    """llama_model_deepseek32::graph and llama_model_glm_dsa::graph."""

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int):
        super().__init__(shape, geometry, n_vocab)
        assert shape.indexer is not None
        self.indexer: Indexer = shape.indexer
        self.il = 0  # the block mla_attention is called for (DecoderGraph.build calls it once per block, in order)
        self.top_k: Tensor | None = None  # the last full indexer layer's top-k (glm-dsa.cpp's prev_top_k)
        self.lid: IndexerInputs | None = None

    def mla_attention(self, b: GraphLayer, cur: Tensor, q: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """The block's attention: qr (wq_a, q_a_norm), the indexer on a full layer, the query (wq_b over qr), then
        MLA over the top-k mask."""
        qr = self.norm(mul_mat("attn_q_a", cur, b.q_lora), "attn_q_a_norm")
        if self.indexer.full[self.il]:
            self.top_k = self.lightning_indexer(cur, qr)
        self.il += 1
        assert self.top_k is not None  # GGML_ASSERT: a shared indexer layer follows a full one
        q = reshape(mul_mat("attn_q_b", qr, b.n_head * b.head_k), b.head_k, b.n_head, self.t)
        return super().mla_attention(b, cur, q, self.top_k_mask(b, self.top_k))

    def indexer_inputs(self) -> IndexerInputs:
        """build_attn_inp_k_dsa_impl's indexer part (made once, read by every full layer)."""
        if self.lid is None:
            g, t, ix = self.geometry, self.t, self.indexer
            mask = new_tensor(F16, window_cells(None, g), t // g.n_stream, 1, g.n_stream, input=True)
            n = rotation_size(ix.head)  # llama_kv_cache::build_input_k_rot
            self.lid = IndexerInputs(new_tensor(I64, t, input=True), mask, new_tensor(F32, n, n, input=True))
        return self.lid

    def lightning_indexer(self, cur: Tensor, qr: Tensor) -> Tensor:
        """deepseek32.cpp's lightning indexer with fused_lid: the keys into the indexer's cache (cpy_k, expanded
        first), the scores of every cached key (ggml_lightning_indexer [n_kv, T/ns, 1, ns] over the queries, the
        cache's keys, the weights and the mask) and their top-k indices, made contiguous (I32 [min(n_kv, top_k),
        T/ns, 1, ns])."""
        g, t, ix, inputs = self.geometry, self.t, self.indexer, self.indexer_inputs()
        ns, n_kv = g.n_stream, window_cells(None, g)
        q = reshape(mul_mat("indexer.attn_q_b", qr, ix.n_head * ix.head), ix.head, ix.n_head, t)
        q = same_shape(q, "ROPE", self.pos)
        k = self.layer_norm(mul_mat("indexer.attn_k", cur, ix.head), "indexer.k_norm")
        k = same_shape(k, "ADD", "indexer.k_norm.bias")
        k = same_shape(reshape(k, ix.head, 1, t), "ROPE", self.pos)
        q, k = mul_mat_t(inputs.rot, q), mul_mat_t(inputs.rot, k)  # the Hadamard transform
        kind = cache_type(g.k_type)  # llama_kv_cache_dsa: the indexer's cache takes type_k as the MLA cache
        cache = new_tensor(kind, ix.head, n_kv, ns, external=True)
        self.gf.expand(set_rows(cache, view(k, (ix.head, t), (k.nb[2],)), inputs.k_idxs))  # mctx_lid->cpy_k
        weights = mul_mat("indexer.proj", cur, ix.n_head)
        q = view(q, (ix.head, ix.n_head, t // ns, ns), (q.nb[1], q.nb[2], q.nb[3] // ns))
        weights = view(weights, (ix.n_head, t // ns, 1, ns), (weights.nb[1], weights.nb[2] // ns, weights.nb[3] // ns))
        keys = new_tensor(kind, ix.head, 1, n_kv, ns, external=True)  # mctx_lid->get_k: the cache's view
        weights = same_shape(weights, "SCALE")
        score = op("LIGHTNING_INDEXER", F32, (n_kv, t // ns, 1, ns), q, keys, weights, inputs.mask)
        return cont(op("TOP_K", I32, (min(n_kv, ix.top_k), *score.ne[1:]), score))

    def top_k_mask(self, b: GraphLayer, top_k: Tensor) -> Tensor:
        """build_attn (llm_graph_input_attn_k_dsa)'s mask: the MLA cache's KQ mask filled with -inf (a copy), zeros
        written at the top-k keys of each token (set_rows of a zero-filled [1, top_k, T/ns, ns]), plus the mask
        itself (ggml_add in the mask's type)."""
        mask = self.cache_inputs(b).mask
        n_kv, rows, ns = mask.ne[0], mask.ne[1], mask.ne[3]
        k = top_k.ne[0]
        zeros = op("FILL", F32, (1, k, rows, ns), new_tensor(F32, 1, k, rows, ns))
        top_k_3d = view(top_k, (k, rows, ns, 1), (top_k.nb[1], top_k.nb[2], top_k.ne[3] * top_k.nb[3]))
        filled = op("FILL", mask.type, mask.ne, mask)  # kq_mask_all
        as_rows = view(filled, (1, n_kv, rows, ns), (filled.nb[0], filled.nb[1], filled.nb[2]))
        unmasked = set_rows(as_rows, zeros, top_k_3d)
        back = view(unmasked, mask.ne, (unmasked.nb[2], unmasked.nb[3], unmasked.nb[3]))
        return op("ADD", mask.type, mask.ne, back, mask)


def build_dsa(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return DsaGraph(shape, geometry, n_vocab).build()
