"""The graph llama.cpp reserves for DeepSeek-V4 (src/models/deepseek4.cpp), rebuilt node for node.

The residual is `hc` parallel streams [n_embd, hc, T] (the embedding repeated). Before each block's attention and FFN
build_hc_pre RMS-norms the flattened streams and projects them to the mixes: the pre weights (sigmoid, plus eps) mix
the streams into the block's input (the fused ggml_dsv4_hc_pre), the post weights (2 * sigmoid) and the Sinkhorn
combination (the fused ggml_dsv4_hc_comb) put the block's output back into every stream (ggml_dsv4_hc_post). Each
block attends over llama_kv_cache_dsv4's raw sliding cache with a low-rank query (q_lora), one K head that is also V,
attention sinks and a grouped low-rank output (wo_a, wo_b); a ratio-4 block (CSA) also compresses its keys into the
CSA cache, runs the lightning indexer over its own compressed cache and attends over the raw keys and the indexer's
top-k compressed ones; a ratio-128 block (HCA) over the raw keys and every compressed one. The compressors keep their
kv and score rows in llama_dsv4_comp_state and read them back as llama_kv_cache_dsv4's reserve plan sizes them
(dsv4_build_reserve_comp_plan); with rollback snapshots (n_rs_seq) each state's rows are first restored from their
snapshot plane (dsv4_build_state_restore) and, once the compressed rows are written, the planes rewritten from the
restored state and the ubatch's rows (dsv4_build_state_snapshot). The FFN is build_moe_ffn (sqrt-softplus routing,
ggml_swiglu_clamp) beside the shared experts' build_ffn; the head mixes the streams with build_hc_head. The context's
fused DSV4 ops and fused_lid are on (the CPU backend runs them). Ops in place on a tensor's only consumer take no
memory of their own; weights, the caches and the compressor states are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memfit.estimator.compute_graph import DecoderGraph, fattn_f16_extra, rotation_size
from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import (
    CACHE_TYPES,
    F16,
    F32,
    I32,
    I64,
    KQV_PIN,
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
    pinned,
    reshape,
    same,
    same_shape,
    set_rows,
    transpose,
    view,
    viewed,
)
from memfit.estimator.graph_ffn import SHARED, build_ffn, build_moe_ffn
from memfit.estimator.kv_cache import group_cells, window_cells
from memfit.estimator.layout import Dsv4, GraphLayer, GraphShape

CSA, HCA = 4, 128  # llama-kv-cache-dsv4.cpp: DSV4_CSA_RATIO, DSV4_HCA_RATIO
RATIOS = {"csa": CSA, "lid": CSA, "hca": HCA}  # each compressor's ratio (the indexer's is CSA's)
FLOAT = 4


def sized(geometry: ContextGeometry) -> bool:
    """Whether the graph is rebuilt for this K cache type: the raw and compressed K concatenated keep the cache's
    type in the compute buffer (f32, f16, bf16, a block type under flash attention); not a block type without it
    (llama.cpp refuses it: deepseek4's V type is its K type, and a quantized V needs flash attention), nor a type
    the caller does not name."""
    block = 1 if geometry.k_type == F32 else CACHE_TYPES.get(geometry.k_type, (0, 0))[0]
    return block == 1 or block > 1 and geometry.flash_attention


@dataclass(frozen=True)
class CompInputs:
    """dsv4_build_comp_inputs over dsv4_build_reserve_comp_plan: one compressor's (csa, hca or lid) inputs."""

    state_pos: Tensor  # I32 [T]
    persist_src: Tensor  # I32 [min(T, state rows)]
    persist_dst: Tensor
    restore: tuple[Tensor, Tensor] | None  # I32 [state rows] src, dst: with rollback snapshots (n_rs_seq > 0)
    snapshot: tuple[Tensor, Tensor] | None  # I32 [n_rs_seq * state rows] src, dst
    read_idxs: Tensor  # I32 [(2 if overlapping) * ratio * n_blocks]
    write_idxs: Tensor  # I64 [n_blocks]
    write_pos: Tensor  # I32 [n_blocks]
    mask: Tensor  # [n_kv, T / ns, 1, ns]
    rot: Tensor | None  # build_input_k_rot of its cache


class Dsv4Graph(DecoderGraph):
    """llama_model_deepseek4::graph."""

    # the trunk's builder expands each block's FFN residual, post and comb before its ffn_norm (graph_mtp does not)
    expands_ffn_mixes = True

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int):
        super().__init__(shape, self.memory_geometry(geometry), n_vocab)
        assert shape.dsv4 is not None and sized(geometry)
        self.d: Dsv4 = shape.dsv4
        self.k_type = geometry.k_type  # the caches' K type
        self.e = shape.n_embd
        self.comp: dict[str, CompInputs] = {}
        self.raw: tuple[Tensor, Tensor, Tensor | None] | None = None  # k_idxs, kq mask, k_rot

    @staticmethod
    def memory_geometry(geometry: ContextGeometry) -> ContextGeometry:
        """llama_kv_cache_dsv4: every cache and state one stream per sequence, each window one sequence's."""
        return replace(geometry, n_stream=geometry.n_seq, swa_seqs=1)

    # --- inputs ----------------------------------------------------------------------------------------------

    def raw_inputs(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """build_inp_dsv4's raw part: k_idxs, the KQ mask (dsv4_build_raw_kq_mask: F16 under flash attention) over
        the raw cache's cells, the rotation of a quantized cache."""
        if self.raw is None:
            g, t, b = self.geometry, self.t, self.shape.layers[0]
            ns = g.n_stream
            mask_type = F16 if g.flash_attention else F32
            mask = new_tensor(mask_type, window_cells(b.window, g), t // ns, 1, ns, input=True)
            self.raw = (new_tensor(I64, t, input=True), mask, self.rotation(b.head_k))
        return self.raw

    def rotation(self, head: int) -> Tensor | None:
        """llama_kv_cache::build_input_k_rot: a quantized K cache's rotation where the head is a multiple of 64, and
        always where the cache's head is the indexer's (the DSA architectures' indexer caches)."""
        if not (self.geometry.quantized_k and head % 64 == 0 or head == self.d.idx_head):
            return None
        n = rotation_size(head)
        return new_tensor(F32, n, n, input=True)

    def comp_inputs(self, name: str) -> CompInputs:
        """dsv4_build_comp_inputs for the csa, hca or lid compressor (made once): the reserve plan's n_blocks =
        T / ratio + n_seqs, state rows state_size x streams (2 x ratio overlapping, else ratio), its cache's cells;
        with n_rs_seq snapshots the restore indices (the state rows) and the snapshot ones (n_rs_seq x the rows)."""
        if name not in self.comp:
            g, t, d = self.geometry, self.t, self.d
            ns, ratio = g.n_stream, RATIOS[name]
            overlap = 1 if name == "hca" else 2
            blocks, rows = t // ratio + g.n_seq, overlap * ratio * ns
            persist = min(t, rows)
            f16 = name == "lid" or g.flash_attention  # the lid mask follows fused_lid (on), the others flash attention
            cells = group_cells(None, ratio, g)  # plan.n_kv: the compressed cache's cells
            head = d.idx_head if name == "lid" else self.shape.layers[0].head_k
            snapshots = g.rs_snapshots
            self.comp[name] = CompInputs(
                new_tensor(I32, t, input=True),
                new_tensor(I32, persist, input=True),
                new_tensor(I32, persist, input=True),
                self.index_pair(rows) if snapshots else None,
                self.index_pair(snapshots * rows) if snapshots else None,
                new_tensor(I32, overlap * ratio * blocks, input=True),
                new_tensor(I64, blocks, input=True),
                new_tensor(I32, blocks, input=True),
                new_tensor(F16 if f16 else F32, cells, t // ns, 1, ns, input=True),
                self.rotation(head),
            )
        return self.comp[name]

    @staticmethod
    def index_pair(n: int) -> tuple[Tensor, Tensor]:
        """A plan's source and destination row indices: two I32 [n] inputs."""
        return new_tensor(I32, n, input=True), new_tensor(I32, n, input=True)

    def comp_state_rows(self, name: str) -> int:
        """llama_dsv4_comp_state::get_n_rows(): state_size x streams (the CSA and indexer states 2 x ratio, HCA's
        ratio)."""
        return (HCA if name == "hca" else 2 * CSA) * self.geometry.n_stream

    def state_view(self, name: str, width: int) -> Tensor:
        """llama_dsv4_comp_state::get_kv_all / get_score_all: the layer's state (its own buffer), its rows and
        each snapshot plane's: get_n_rows() x (1 + n_rs_seq)."""
        return new_tensor(F32, width, self.comp_state_rows(name) * (1 + self.geometry.rs_snapshots), external=True)

    # --- the graph -----------------------------------------------------------------------------------------------

    def build(self) -> Graph:
        gf, e, t, hc = self.gf, self.e, self.t, self.d.hc
        inp_l, out_ids = self.embeddings()
        gf.expand(self.raw_inputs()[1])  # ggml_build_forward_expand(gf, inp_attn->self_kq_mask)
        res = op("REPEAT", F32, (e, hc, t), reshape(inp_l, e, 1, t))  # hc_init
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            res = self.block(il, b, res)
        return self.hc_output(res, out_ids)

    def block(self, il: int, b: GraphLayer, res: Tensor) -> Tensor:
        """One block over the streams [n_embd, hc, T]: hc_pre, attn_norm, the attention (the ratio of `il`'s),
        hc_post; hc_pre (the residual, post and comb expanded where expands_ffn_mixes), ffn_norm, the routed experts
        plus the shared ones, hc_post."""
        gf = self.gf
        cur, post, comb = self.hc_pre(res, "hc_attn")
        cur = self.block_attention(il, b, self.norm(cur, "attn_norm"))
        res = self.hc_post(cur, res, post, comb)
        cur, post, comb = self.hc_pre(res, "hc_ffn")
        for x in (res, post, comb) if self.expands_ffn_mixes else ():
            gf.expand(x)
        cur = self.norm(cur, "ffn_norm")
        shexp = build_ffn(
            cur, b.routing.shared_ff, clamped=b.clamped_ffn, weights=SHARED, fused_clamp=b.routing.fused_clamp
        )
        return self.hc_post(same_shape(self.routed(b, cur), "ADD", shexp), res, post, comb)

    def hc_output(self, res: Tensor, out_ids: Tensor, hidden: bool = False) -> Graph:
        """The streams flattened, their output rows (res->t_h_nextn, an output, where `hidden`: the MTP graph's),
        build_hc_head, the head norm (t_embd), the LM head (t_logits)."""
        gf, e, t, hc = self.gf, self.e, self.t, self.d.hc
        in_layer(None)
        flat = get_rows(reshape(res, e * hc, t), out_ids, e * hc)
        flat.output = hidden
        cur = self.norm(self.hc_head(reshape(flat, e, hc, out_ids.ne[0])), "output_norm")
        cur.output = True  # t_embd
        logits = mul_mat("output", cur, self.n_vocab)
        logits.output = True  # t_logits
        gf.expand(logits)
        return gf

    def routed(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """build_moe_ffn; a hash layer's experts given (deepseek4.cpp: selected_experts = ggml_get_rows of
        ffn_gate_tid2eid, I32 [n_expert_used, n_vocab], by res->t_inp_tokens; exp_probs_b nullptr)."""
        if not b.routing.by_token:
            return build_moe_ffn(self.gf, b, cur)
        picked = op("GET_ROWS", I32, (b.n_expert_used, self.t), "ffn_gate_tid2eid", self.token_ids)
        return build_moe_ffn(self.gf, b, cur, picked=picked)

    # --- hyper-connections -----------------------------------------------------------------------------------

    def mixes(self, x: Tensor, width: int, weights: str) -> Tensor:
        """build_hc_pre / build_hc_head: the streams flattened, RMS-normed, projected by `weights`_fn (hc_attn_fn,
        hc_ffn_fn, output_hc_fn)."""
        nt = x.ne[2]
        return mul_mat(f"{weights}_fn", same_shape(reshape(x, self.e * self.d.hc, nt), "RMS_NORM"), width)

    def weights(self, mixes: Tensor, at: int, weights: str, *ops: str) -> Tensor:
        """A [hc, T] view of the mixes at column `at`, times its scale, plus its base (views of `weights`_scale and
        _base: dsv4_view_1d), then `ops` (sigmoid and the scale)."""
        hc, nt = self.d.hc, mixes.ne[1]
        x = view(mixes, (hc, nt), (mixes.nb[1],), at * FLOAT)
        scaled = same_shape(x, "MUL", viewed(f"{weights}_scale"))
        return same(same_shape(scaled, "ADD", viewed(f"{weights}_base")), *ops)

    def hc_pre(self, x: Tensor, weights: str) -> tuple[Tensor, Tensor, Tensor]:
        """build_hc_pre with the fused ops: the block's input ggml_dsv4_hc_pre(x, pre), the post weights, the
        combination ggml_dsv4_hc_comb(mixes, scale, base); `weights`: the module's names' stem (hc_attn, hc_ffn)."""
        hc, nt = self.d.hc, x.ne[2]
        mixes = self.mixes(x, (2 + hc) * hc, weights)
        pre = self.weights(mixes, 0, weights, "SIGMOID", "SCALE")
        post = self.weights(mixes, hc, weights, "SIGMOID", "SCALE")
        comb = op("DSV4_HC_COMB", F32, (hc, hc, nt), mixes, f"{weights}_scale", f"{weights}_base")
        return op("DSV4_HC_PRE", F32, (self.e, nt), x, pre), post, comb

    def hc_post(self, x: Tensor, residual: Tensor, post: Tensor, comb: Tensor) -> Tensor:
        """build_hc_post, fused: ggml_dsv4_hc_post(x, residual, post, comb) [n_embd, hc, T]."""
        return op("DSV4_HC_POST", F32, residual.ne, x, residual, post, comb)

    def hc_head(self, x: Tensor) -> Tensor:
        """build_hc_head: the mixes (hc wide) times the scale, plus the base, sigmoid, plus eps; build_hc_pre's
        unfused loop (il < 0): each stream's view times its weight's view, summed."""
        hc, nt = self.d.hc, x.ne[2]
        scaled = same_shape(self.mixes(x, hc, "output_hc"), "MUL", "output_hc_scale")
        pre = same(same_shape(scaled, "ADD", "output_hc_base"), "SIGMOID", "SCALE")
        result: Tensor | None = None
        for ih in range(hc):
            xh = view(x, (self.e, nt), (x.nb[2],), ih * x.nb[1])
            wh = view(pre, (1, nt), (pre.nb[1],), ih * pre.nb[0])
            cur = op("MUL", F32, (self.e, nt), xh, wh)
            result = cur if result is None else same_shape(result, "ADD", cur)
        assert result is not None
        return result

    # --- attention ---------------------------------------------------------------------------------------------

    def block_attention(self, il: int, b: GraphLayer, cur: Tensor) -> Tensor:
        """build_attention_impl: qr (wq_a, q_a_norm), Q (wq_b, RMS-normed per head, roped), the one K/V head (wkv,
        kv_norm, roped); the block's compressors; attention over its caches; the output de-roped (rope_back), wo_a
        per group and wo_b."""
        t, hd, heads, d = self.t, b.head_k, b.n_head, self.d
        qr = self.norm(mul_mat("attn_q_a", cur, d.q_lora), "attn_q_a_norm")
        q = same_shape(reshape(mul_mat("attn_q_b", qr, heads * hd), hd, heads, t), "RMS_NORM")  # ggml_rms_norm
        q = same_shape(q, "ROPE", self.pos)
        kv = self.norm(mul_mat("attn_kv", cur, hd), "attn_kv_a_norm")
        kv = same_shape(reshape(kv, hd, 1, t), "ROPE", self.pos)
        ratio = d.ratios[il]
        if ratio == CSA:
            self.compress(cur, "csa", 2 * hd, hd)
            self.compress(cur, "lid", 2 * d.idx_head, d.idx_head)
            out = self.csa_attention(b, q, kv, qr, cur)
        elif ratio == HCA:
            self.compress(cur, "hca", hd, hd)
            out = self.attend(b, q, kv, "hca")
        else:
            out = self.attend(b, q, kv, None)
        out = same_shape(reshape(out, hd, heads, t), "ROPE_BACK", self.pos)  # attn_derope
        out = permute(reshape(out, hd * heads // d.o_groups, d.o_groups, t), 0, 2, 1, 3)
        oa = op("MUL_MAT", F32, (d.o_lora, t, d.o_groups, 1), "attn_output_a", out)  # wo_a: [o_lora, T, groups]
        oa = cont(permute(oa, 0, 2, 1, 3), d.o_lora * d.o_groups, t)
        return mul_mat("attn_output_b", oa, self.e)  # wo_b

    def compress(self, cur: Tensor, name: str, width: int, head: int) -> None:
        """The block's compressor of `name` (csa, lid: overlapping windows; hca): its kv (comp_wkv) and score
        (comp_wgate plus the ape rows of each token's position) of every token after the state's rows; the windows
        the plan reads, soft-maxed over their positions and pooled, normed and roped; the result (rotated where the
        cache rotates) into the compressed cache; the snapshot planes rewritten where there are snapshots; the last
        tokens' rows persisted into the state."""
        gf, inp = self.gf, self.comp_inputs(name)
        weights = "indexer_compressor" if name == "lid" else "attn_compressor"  # its _kv, _gate, _ape, _norm
        state_kv = mul_mat(f"{weights}_kv", cur, width)
        ape = get_rows(f"{weights}_ape", inp.state_pos, width)
        state_score = same_shape(mul_mat(f"{weights}_gate", cur, width), "ADD", ape)
        rows = state_kv, state_score
        restored = [self.restored(name, width) for _ in rows]
        source_kv, source_score = (self.with_state(name, x, r) for x, r in zip(rows, restored, strict=True))
        if name == "hca":
            comp = self.hca_pool(source_kv, source_score, inp.read_idxs, head)
        else:
            comp = self.overlap_pool(source_kv, source_score, inp.read_idxs, head)
        comp = same_shape(self.norm(comp, f"{weights}_norm"), "ROPE", inp.write_pos)
        if inp.rot is not None:
            comp = self.hadamard(comp, inp.rot)
        cache = new_tensor(self.k_type, head, comp.ne[2], external=True)
        gf.expand(set_rows(cache, view(comp, (head, comp.ne[2]), (comp.nb[2],)), inp.write_idxs))  # cpy_k
        if inp.snapshot is not None:  # dsv4_build_state_snapshot: the restored planes and the ubatch's rows
            src, dst = inp.snapshot
            sources = [op("CONCAT", F32, (width, r.ne[1] + x.ne[1]), r, x) for r, x in zip(restored, rows, strict=True)]
            for source in sources:
                gf.expand(set_rows(self.state_view(name, width), get_rows(source, src, width), dst))
        for x in rows:  # the persisted rows: get_rows, then cpy_kv / cpy_score
            gf.expand(set_rows(self.state_view(name, width), get_rows(x, inp.persist_src, width), inp.persist_dst))

    def restored(self, name: str, width: int) -> Tensor:
        """dsv4_build_state_restore: the state's planes; with snapshots, the rows to restore read (get_rows) and
        written back over them (cpy_kv / cpy_score: set_rows, a view of the state)."""
        state, restore = self.state_view(name, width), self.comp_inputs(name).restore
        if restore is None:
            return state
        return set_rows(self.state_view(name, width), get_rows(state, restore[0], width), restore[1])

    def with_state(self, name: str, rows: Tensor, restored: Tensor) -> Tensor:
        """The state's rows (a view of the restored planes) followed by the ubatch's (ggml_concat along the rows)."""
        n = self.comp_state_rows(name)
        base = view(restored, (rows.ne[0], n), (restored.nb[1],))
        return op("CONCAT", F32, (rows.ne[0], n + rows.ne[1]), base, rows)

    def pooled(self, kv: Tensor, score: Tensor) -> Tensor:
        """The windows' values and scores transposed (made contiguous), the scores soft-maxed over the positions,
        their product summed, transposed back: [head, 1, n_blocks]."""
        values = cont(permute(kv, 1, 0, 2, 3))
        weights = same_shape(cont(permute(score, 1, 0, 2, 3)), "SOFT_MAX")
        comp = same_shape(values, "MUL", weights)
        comp = op("SUM_ROWS", F32, (1, *comp.ne[1:]), comp)
        return cont(permute(comp, 1, 0, 2, 3))

    def hca_pool(self, kv: Tensor, score: Tensor, idxs: Tensor, head: int) -> Tensor:
        """build_hca_compressed_kv_from_state: 128 rows a block, read from the state and the ubatch."""
        blocks = idxs.ne[0] // HCA
        kv = reshape(get_rows(kv, idxs, head), head, HCA, blocks)
        score = reshape(get_rows(score, idxs, head), head, HCA, blocks)
        return self.pooled(kv, score)

    def overlap_pool(self, kv: Tensor, score: Tensor, idxs: Tensor, head: int) -> Tensor:
        """build_overlap_compressed_kv_from_state: a zero row (score -inf) appended to each source; the read rows'
        previous window (the first half of each row) and current window (the second half of the later rows), each
        made contiguous, concatenated per block."""
        n_read = idxs.ne[0] // 2
        blocks = n_read // CSA
        halves = []
        for x in (kv, score):
            row = reshape(same_shape(view(x, (x.ne[0],)), "SCALE"), x.ne[0], 1)  # dsv4_append_zero_row
            rows = get_rows(op("CONCAT", F32, (x.ne[0], x.ne[1] + 1), x, row), idxs, x.ne[0])
            prev = reshape(cont(view(rows, (head, n_read), (rows.nb[1],))), head, CSA, blocks)
            at = n_read * rows.nb[1] + head * FLOAT
            cur = reshape(cont(view(rows, (head, n_read), (rows.nb[1],), at)), head, CSA, blocks)
            halves.append(op("CONCAT", F32, (head, 2 * CSA, blocks), prev, cur))
        return self.pooled(*halves)

    def cache_k(self, name: str | None, head: int) -> Tensor:
        """The K of a cache (its own buffer) over its cells, one stream per sequence: [head, 1, cells, ns]; the raw
        cache (None) over its window's cells, a compressed one over pad(ceil(n_ctx_seq / ratio), 256)."""
        g = self.geometry
        cells = window_cells(self.shape.layers[0].window, g) if name is None else group_cells(None, RATIOS[name], g)
        return new_tensor(self.k_type, head, 1, cells, g.n_stream, external=True)

    def store_raw(self, b: GraphLayer, q: Tensor, kv: Tensor) -> tuple[Tensor, Tensor]:
        """Q and K/V rotated where the raw cache is quantized, expanded, K into the raw cache (cpy_k)."""
        k_idxs, _, rot = self.raw_inputs()
        if rot is not None:
            q, kv = self.hadamard(q, rot), self.hadamard(kv, rot)
        self.gf.expand(q)
        self.gf.expand(kv)
        cells = self.cache_k(None, b.head_k).ne[2] * self.geometry.n_stream
        cache = new_tensor(self.k_type, b.head_k, cells, external=True)
        self.gf.expand(set_rows(cache, view(kv, (b.head_k, self.t), (kv.nb[2],)), k_idxs))
        return q, kv

    def attend(self, b: GraphLayer, q: Tensor, kv: Tensor, name: str | None, mask: Tensor | None = None) -> Tensor:
        """build_raw_attention / build_hca_attention (and the CSA one's end): over the raw keys, after them the
        compressed cache's where the block has one, under the raw mask beside the compressed one (`mask`: the CSA
        one's top-k mask)."""
        q, kv = self.store_raw(b, q, kv)
        k = self.cache_k(None, b.head_k)
        kq_mask = self.raw_inputs()[1]
        if name is not None:
            comp_k = self.cache_k(name, b.head_k)
            k = op("CONCAT", self.k_type, (b.head_k, 1, k.ne[2] + comp_k.ne[2], k.ne[3]), k, comp_k)
            comp_mask = self.comp_inputs(name).mask if mask is None else mask
            ne = (kq_mask.ne[0] + comp_mask.ne[0], *kq_mask.ne[1:])
            kq_mask = op("CONCAT", kq_mask.type, ne, kq_mask, comp_mask)
        out = self.mha_k(b, q, k, kq_mask)
        rot = self.raw_inputs()[2]
        return self.hadamard(out, rot) if rot is not None else out

    def csa_attention(self, b: GraphLayer, q: Tensor, kv: Tensor, qr: Tensor, cur: Tensor) -> Tensor:
        """build_csa_lid_attention: the indexer's top-k, then attention over the raw keys and the CSA cache's,
        the CSA mask keeping the top-k compressed keys."""
        top_k = self.lid_top_k(qr, cur)
        mask = self.comp_inputs("csa").mask
        return self.attend(b, q, kv, "csa", self.top_k_mask(mask, top_k))

    def lid_top_k(self, qr: Tensor, cur: Tensor) -> Tensor:
        """build_lid_top_k with fused_lid: the indexer's queries (indexer_attn_q_b over qr, roped, rotated), its
        weights (indexer_proj, scaled), ggml_lightning_indexer over its cache's keys, the top-k made contiguous."""
        g, t, d = self.geometry, self.t, self.d
        ns, inp = g.n_stream, self.comp_inputs("lid")
        assert inp.rot is not None  # the indexer's cache always rotates
        iq = reshape(mul_mat("indexer.attn_q_b", qr, d.idx_heads * d.idx_head), d.idx_head, d.idx_heads, t)
        iq = self.hadamard(same_shape(iq, "ROPE", self.pos), inp.rot)
        w = same_shape(mul_mat("indexer.proj", cur, d.idx_heads), "SCALE")
        k = self.cache_k("lid", d.idx_head)
        iq = view(iq, (d.idx_head, d.idx_heads, t // ns, ns), (iq.nb[1], iq.nb[2], iq.nb[3] // ns))
        w = view(w, (d.idx_heads, t // ns, 1, ns), (w.nb[1], w.nb[2] // ns, w.nb[3] // ns))
        score = op("LIGHTNING_INDEXER", F32, (k.ne[2], t // ns, 1, ns), iq, k, w, inp.mask)
        return cont(op("TOP_K", I32, (min(k.ne[2], d.idx_top_k), *score.ne[1:]), score))

    def top_k_mask(self, mask: Tensor, top_k: Tensor) -> Tensor:
        """build_top_k_mask: the mask filled with -inf (a copy), zeros (F16 under flash attention) written at each
        token's top-k keys (set_rows), the mask added."""
        n_kv, rows, ns, k = mask.ne[0], mask.ne[1], mask.ne[3], top_k.ne[0]
        filled = op("FILL", mask.type, mask.ne, mask)
        as_rows = view(filled, (1, n_kv, rows, ns), (filled.nb[0], filled.nb[1], filled.nb[2]))
        top_k_3d = view(top_k, (k, rows, ns, 1), (top_k.nb[1], top_k.nb[2], top_k.ne[3] * top_k.nb[3]))
        zeros_type = F16 if self.geometry.flash_attention else F32
        zeros = op("FILL", zeros_type, (1, k, rows, ns), new_tensor(zeros_type, 1, k, rows, ns))
        unmasked = set_rows(as_rows, zeros, top_k_3d)
        back = view(unmasked, mask.ne, (unmasked.nb[2], unmasked.nb[3], unmasked.nb[3]))
        return op("ADD", mask.type, mask.ne, back, mask)

    def mha_k(self, b: GraphLayer, q: Tensor, k: Tensor, mask: Tensor) -> Tensor:
        """build_attn_mha with K as V and the sinks: flash attention (an F32 K and V cast to F16 first), or kq,
        soft_max in place, V (K) transposed into a copy, kqv; [head * H, T] (kqv's copy on the CPU without
        offload_kqv)."""
        t, ns, hd, heads = self.t, k.ne[3], b.head_k, b.n_head
        q = permute(view(q, (hd, heads, t // ns, ns), (q.nb[1], q.nb[2], q.nb[3] // ns)), 0, 2, 1, 3)
        kp, vp = permute(k, 0, 2, 1, 3), permute(k, 0, 2, 1, 3)  # K and V: the same K, permuted twice
        if self.geometry.flash_attention:
            k16, v16 = kp, vp
            if k.type == F32:  # ggml_cast of K and of V to F16
                k16, v16 = op("CPY", F16, kp.ne, kp), op("CPY", F16, vp.ne, vp)
            out = op("FLASH_ATTN_EXT", F32, (hd, heads, t // ns, ns), q, k16, v16, mask, "attn_sinks")
            # ggml_cuda_flash_attn_ext_get_f16_extra_data: V_is_K_view, V and K permutes of the same K
            out.f16_extra = fattn_f16_extra(out, kp, vp, self.geometry, v_is_k=True)
            return self.gf.expand(reshape(out, hd * heads, t))
        v = cont(transpose(vp))
        kq = same_shape(mul_mat_t(kp, q), "SOFT_MAX", mask, "attn_sinks")
        kqv = mul_mat_t(v, kq)
        return self.gf.expand(pinned(cont(permute(kqv, 0, 2, 1, 3), hd * heads, t), KQV_PIN))


def build_dsv4(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    return Dsv4Graph(shape, geometry, n_vocab).build()
