"""The graph llama.cpp reserves its compute buffer for, rebuilt from a model's layout (src/llama-graph.cpp).

llama_context::sched_reserve builds the prompt-processing graph for one worst-case ubatch (n_tokens = min(n_ctx,
n_ubatch) rounded up to a multiple of n_seq, one output per token before the rounding, every KV cell visible)
and ggml-alloc sizes the buffer for it (estimator/graph_alloc.py). This module builds that graph, as llama.cpp's
builders lay it out, for decoders whose blocks are attention (full or sliding-window, grouped-query or MLA, flash
attention on or off; over the KV cache, or over the ubatch alone in a non-causal embedding decoder), a Mamba-2 or a
short-convolution mixer, followed by a dense or a routed FFN (DecoderGraph), and for BERT encoders (EncoderGraph).
Weights and in-place ops on a tensor's only consumer (biases, norms' weights, rope, q/k norms, scales, soft caps,
gating) take no memory of their own and are left out where they do not change what is alive; every tensor that
takes memory is here, in llama.cpp's order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from memfit.estimator.context import ContextGeometry
from memfit.estimator.ggml_graph import (
    CACHE_TYPES,
    ELEMENT_BYTES,
    F16,
    F32,
    I32,
    I64,
    KQV_PIN,
    NORM_PIN,
    Graph,
    Tensor,
    cont,
    copy_into,
    get_rows,
    glu,
    in_layer,
    in_place,
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
from memfit.estimator.graph_ffn import SHARED, UNGATED, build_ffn, routed_experts
from memfit.estimator.graph_rwkv import RwkvGraph
from memfit.estimator.graph_rwkv import whole as whole_wkv
from memfit.estimator.kv_cache import window_cells
from memfit.estimator.layout import (
    DenseOut,
    GraphLayer,
    GraphShape,
    Mixer,
    RankHead,
    Ssm,
)
from memfit.integers import round_up

HADAMARD_MIN = 64  # llama-kv-cache.cpp: attention rotation matrices start at 64 x 64
FLOAT = ELEMENT_BYTES[F32]  # an activation's element: views' offsets and strides count in these
FATTN_F16_ALIGNMENT = 128  # ggml-cuda/fattn-common.cuh: GGML_PAD(end, 128) before each F16 copy of K or V


def buildable(graph: GraphShape) -> bool:
    """Whether this module builds the graph: a BERT encoder, or a decoder whose blocks each attend or run a rebuilt
    mixer (Mamba-2 with sizes llama.cpp accepts, short convolution), never both (every block attends where the
    attention has no cache: an embedding decoder)."""
    if graph.bert_block:
        return all(b.n_head and not b.recurrent_in and not b.n_expert for b in graph.layers)
    if graph.mixer is Mixer.RWKV:  # estimator/graph_rwkv.py: every block a time mix, with sizes the loaders accept
        return graph.logits and all(not b.n_head and whole_wkv(b.wkv, graph.n_embd) for b in graph.layers)
    if graph.mixer in (Mixer.GATED_DELTA_NET, Mixer.KDA):  # estimator/graph_delta_net.py
        return graph.logits and graph.delta_net is not None and graph.delta_net.buildable
    if graph.mixer is Mixer.LIGHTNING:  # estimator/graph_minimax.py
        return graph.logits and graph.lightning is not None
    if graph.builder is not None:  # the architecture's own builder: its blocks' Mamba sizes, where it has them
        return graph.logits and all(_whole(graph, b.ssm) for b in graph.layers if b.recurrent_in)
    return (
        (graph.cache_attention or all(b.n_head for b in graph.layers))  # no cache: llm_graph_input_attn_no_cache
        and all(
            ((b.n_head > 0) != (b.recurrent_in > 0) or graph.deci_blocks and not b.recurrent_in)
            and (not b.recurrent_in or graph.mixer is Mixer.SHORT_CONV or _whole(graph, b.ssm))
            for b in graph.layers
        )
    )


def _whole(graph: GraphShape, ssm: Ssm | None) -> bool:
    """Sizes the loaders accept, all set: llama_model_mamba2, d_inner a multiple of the heads and of the groups;
    llama_model_mamba / llama_model_jamba (Mamba-1), d_inner twice n_embd (only an expansion factor of 2);
    build_plamo2_mamba_layer, no groups and d_inner a multiple of the heads."""
    if ssm is None or min(ssm.d_inner, ssm.d_state, ssm.n_head, ssm.d_conv) <= 0:
        return False
    if graph.mixer is Mixer.MAMBA:
        return ssm.d_inner == 2 * graph.n_embd
    if graph.mixer is Mixer.PLAMO2:
        return ssm.n_group == 0 and ssm.d_inner % ssm.n_head == 0
    return (
        graph.mixer is Mixer.MAMBA2
        and ssm.n_group > 0
        and ssm.d_inner % ssm.n_head == 0
        and ssm.d_inner % ssm.n_group == 0
    )


def ubatch_tokens(geometry: ContextGeometry) -> int:
    return round_up(reserved_tokens(geometry), geometry.n_seq)  # graph_reserve: rounded up to a multiple of n_seqs


def reserved_tokens(geometry: ContextGeometry) -> int:
    """llama_context::sched_reserve's n_tokens = min(n_ctx, n_ubatch), before graph_reserve rounds them up to a
    multiple of n_seq; the token-generation graph it reserves next has n_seq tokens (`graph_tokens`)."""
    return geometry.graph_tokens or min(geometry.n_ctx, geometry.n_ubatch)


def ubatch_outputs(geometry: ContextGeometry) -> int:
    """The reserved graph's outputs (its output ids' rows), not rounded up as the tokens are: the prompt graph's
    n_outputs_pp = min(n_tokens, cparams.n_outputs_max) (llama_context::sched_reserve: n_batch in a plain context,
    llama-server's output limit under it: context.server_outputs_max); the token-generation graph's n_seq."""
    if geometry.graph_tokens:
        return geometry.graph_tokens
    return min(reserved_tokens(geometry), geometry.outputs_max)


def rotation_size(head: int) -> int:
    """llama_kv_cache::build_input_k_rot: the largest power of two from 64 that divides the head size."""
    n = HADAMARD_MIN
    while head % (2 * n) == 0:
        n *= 2
    return n


@dataclass(frozen=True)
class CacheInputs:
    k_idxs: Tensor
    v_idxs: Tensor
    mask: Tensor
    k_rot: Tensor | None
    v_rot: Tensor | None


class DecoderGraph:
    """llm_graph_context's pieces, in the order a llama-style builder (src/models/llama.cpp) calls them."""

    def __init__(self, shape: GraphShape, geometry: ContextGeometry, n_vocab: int):
        self.shape, self.geometry, self.n_vocab = shape, geometry, n_vocab
        self.t = ubatch_tokens(geometry)
        self.gf = Graph()
        self.inputs: dict[bool, CacheInputs] = {}
        self.s_copy: tuple[Tensor, Tensor] | None = None  # build_rs_inp: s_copy_main, s_copy_extra
        self.attn_scale: Tensor | None = None  # llama4's temperature input, made where a layer first reads it
        self.masks: dict[bool, Tensor] = {}  # llm_graph_input_attn_no_cache's masks, by sliding or not
        # the recurrent state's slots each ubatch writes: n_rs_seq + 1 (the newest state, then one per rollback)
        self.rs_slots = 1 + geometry.rollback_slots(shape.rs_rollback)

    def snapshots(self, tokens: int) -> int:
        """The state slots a ubatch of `tokens` tokens a sequence writes: min(n_seq_tokens, n_rs_seq + 1)."""
        return min(tokens, self.rs_slots)

    def embeddings(self, pos_per_token: int = 1) -> tuple[Tensor, Tensor]:
        """build_inp_embd (the token rows, expanded; the embeddings input allocated, never read), build_inp_pos
        (n_pos_per_embd positions a token) and build_inp_out_ids: (rows, output ids)."""
        gf, t, e = self.gf, self.t, self.shape.n_embd
        self.token_ids = new_tensor(I32, t, input=True)  # build_inp_embd: res->t_inp_tokens
        inp_l = get_rows(None, self.token_ids, e)
        inp_l = same_shape(inp_l, "SCALE") if self.shape.embedding_scale else inp_l
        inp_l = gf.expand(same_shape(inp_l, "RMS_NORM") if self.shape.embd_norm else inp_l)
        gf.expand(new_tensor(F32, e, t, input=True))  # inp_embd: the embeddings input, allocated, never read
        self.pos = new_tensor(I32, t * pos_per_token, input=True)  # build_inp_pos
        return inp_l, new_tensor(I32, ubatch_outputs(self.geometry), input=True)  # build_inp_out_ids

    def head(self, cur: Tensor, out_ids: Tensor | None = None, hidden: bool = False) -> Graph:
        """output_norm (result_norm, t_embd), the output rows where the trunk kept every row (taken after the norm,
        whose output is then t_h_nextn where `hidden`), the LM head (result_output, t_logits; minicpm3's input a
        scaled copy of t_embd; an embedding graph has none and ends at t_embd, as lfm2's does serving embeddings):
        t_embd and t_logits are graph outputs."""
        cur = self.block_norm(cur, "output_norm")
        if out_ids is not None:
            cur.output = hidden
            cur = get_rows(cur, out_ids, self.shape.n_embd)
        cur.output = True  # llm_graph_result: t_embd and t_logits are graph outputs
        if self.shape.logits and not (self.shape.headless_embeddings and self.geometry.embeddings):
            cur = mul_mat("output", same_shape(cur, "SCALE") if self.shape.head_scale else cur, self.n_vocab)
            cur.output = True  # result_output
        self.gf.expand(cur)
        return self.gf

    def build(self) -> Graph:
        gf, t, e = self.gf, self.t, self.shape.n_embd
        inp_l, out_ids = self.embeddings()
        if self.shape.mixer is Mixer.RWKV:  # src/models/rwkv*.cpp: token shifts, time mixes, channel mixes
            rwkv = RwkvGraph(self.shape, gf, t, self.geometry.n_seq, self.state_rows, build_ffn)
            return rwkv.build(inp_l, out_ids, self.n_vocab)
        last = len(self.shape.layers) - 1
        for il, block in enumerate(self.shape.layers):
            in_layer(il)
            rows = out_ids if il == last and not self.shape.hidden_output else None  # the last layer's output rows
            if self.shape.parallel_block:
                inp_l = self.parallel_block(block, inp_l, rows)
                continue
            block_of = self.deci_block if self.shape.deci_blocks else self.llama_block
            inp_l = block_of(block, inp_l, rows)
        in_layer(None)
        if self.shape.normed_hidden_output:  # output_norm over every row is res->t_h_nextn, the rows after it
            return self.head(inp_l, out_ids, hidden=True)
        if self.shape.hidden_output:  # res->t_h_nextn, then the output rows
            inp_l.output = True
            inp_l = get_rows(inp_l, out_ids, e)
        return self.head(inp_l)

    def llama_block(self, block: GraphLayer, inp_l: Tensor, rows: Tensor | None) -> Tensor:
        """A llama-style block: the norms before (or after) the mixer and the FFN, each added to the residual stream
        (`rows`: the last block's output rows, taken after the mixer)."""
        e = self.shape.n_embd
        logits = None  # smallthinker.cpp: the router's logits from the block's input (probs_in)
        if self.shape.router_from_input and block.n_expert:
            logits = mul_mat("ffn_gate_inp", inp_l, block.n_expert)
        inp_sa, normed = inp_l, self.block_norms(block, inp_l, "attn_norm")
        cur = self.mixer(block, normed)
        post_first = self.shape.post_norms and self.shape.attn_post_norm_first
        pins = self.shape.post_norm_pins
        cur = self.norm(cur, "post_attention_norm", pins[0]) if post_first else cur  # attn_post_norm, rows after
        if rows is not None:
            cur, inp_sa, normed = (get_rows(x, rows, e) for x in (cur, inp_sa, normed))
            logits = get_rows(logits, rows, logits.ne[0]) if logits is not None else None
        if self.shape.post_norms and not post_first:  # attn_post_norm
            cur = self.norm(cur, "post_attention_norm", pins[0])
        ffn_inp = same_shape(inp_sa, "ADD", cur) if self.shape.residual_first else same_shape(cur, "ADD", inp_sa)
        if not (block.n_ff or block.n_expert):  # a Mamba block alone: the sum is the layer's output
            return ffn_inp
        normed = normed if block.parallel_residual else self.block_norms(block, ffn_inp, "ffn_norm")
        out = self.ffn(block, normed, logits)
        if self.shape.post_norms:  # ffn_post_norm
            out = self.norm(out, "post_ffw_norm", pins[1])
        ffn_first = self.shape.ffn_residual_first
        return same_shape(ffn_inp, "ADD", out) if ffn_first else same_shape(out, "ADD", ffn_inp)

    def pre_norm(self, x: Tensor, weight: str) -> Tensor:
        """attn_norm / ffn_norm (`weight`) before the block's attention or FFN, where the builder has them."""
        return self.block_norm(x, weight) if self.shape.pre_norm else x

    def parallel_block(self, block: GraphLayer, inp_l: Tensor, out_ids: Tensor | None) -> Tensor:
        """command-r.cpp: attention and the FFN both read the block's normed input; their outputs and the
        residual are added after both (the last block keeps only the output rows of all three)."""
        e = self.shape.n_embd
        ffn_inp = self.block_norm(inp_l)
        attn_out = self.mixer(block, ffn_inp)
        if out_ids is not None:
            attn_out, inp_l, ffn_inp = (get_rows(x, out_ids, e) for x in (attn_out, inp_l, ffn_inp))
        out = same_shape(self.ffn(block, ffn_inp), "ADD", inp_l)
        return same_shape(out, "ADD", attn_out)

    def block_norm(self, x: Tensor, weight: str | None = None) -> Tensor:
        """build_norm of the trunk's norms (attn_norm, ffn_norm, output_norm: `weight`, where the caller names it):
        LLM_NORM_RMS, or LLM_NORM (ggml_norm, a new tensor) where the architecture's builder asks for LayerNorm; the
        weight in place."""
        return self.layer_norm(x, weight) if self.shape.layer_norm else self.norm(x, weight)

    def block_norms(self, b: GraphLayer, x: Tensor, weight: str) -> Tensor:
        """A block's attn_norm or ffn_norm (`weight`), its bias added in place where the layer has one."""
        out = self.pre_norm(x, weight)
        return same_shape(out, "ADD", f"{weight}.bias") if self.shape.pre_norm and weight in b.biases else out

    @staticmethod
    def layer_norm(x: Tensor, weight: str | None = None) -> Tensor:
        """build_norm with LLM_NORM: ggml_norm (a new tensor, named "norm": pinned), then the weight in place
        (`weight`: its name in the layer, where the builder names it)."""
        return same_shape(pinned(op("NORM", F32, x.ne, x), NORM_PIN), "MUL", weight)

    def deci_block(self, b: GraphLayer, inp_l: Tensor, out_ids: Tensor | None) -> Tensor:
        """src/models/deci.cpp's block: an attention-free one hands the residual stream to the FFN as it is, a
        "linear attention" one is wo alone, and one without FFN drops its output (the next block reads its input;
        its attention still writes the cache). `out_ids`: the last block's output rows."""
        e, attends = self.shape.n_embd, b.n_head > 0 or b.wo_only
        cur = inp_sa = inp_l
        if attends:
            cur = self.norm(inp_l)
            cur = mul_mat(None, cur, e) if b.wo_only else self.attention(b, cur)
        if out_ids is not None:
            cur, inp_sa = get_rows(cur, out_ids, e), get_rows(inp_sa, out_ids, e)
        if not b.n_ff:
            return inp_l
        ffn_inp = same_shape(cur, "ADD", inp_sa) if attends else cur
        return same_shape(self.ffn(b, self.norm(ffn_inp)), "ADD", ffn_inp)

    def cache_inputs(self, block: GraphLayer) -> CacheInputs:
        """The inputs of the block's cache (llama_kv_cache_iswa: the full and the sliding cache have their own):
        k_idxs, v_idxs (build_input_k_idxs / v_idxs: one per element when V is transposed), the KQ mask
        (build_attn_inp_kq_mask: F16 under flash attention, else F32) and, for a quantized cache type whose layers
        share one head size, a multiple of 64, the Hadamard rotations (attn_rot_k / attn_rot_v)."""
        full = block.window is None
        if full not in self.inputs:
            g, t = self.geometry, self.t
            group = [b for b in self.shape.layers if b.n_head and (b.window is None) == full]
            heads_k, heads_v = {b.head_k for b in group}, {b.head_v for b in group}
            mla = any(b.kv_lora for b in group)  # llm_graph_input_attn_k (a K-only cache): no rotation inputs
            k_rot = v_rot = None
            if g.quantized_k and not mla and len(heads_k) == 1 and min(heads_k) % HADAMARD_MIN == 0:
                n = rotation_size(min(heads_k))
                k_rot = new_tensor(F32, n, n, input=True)
            if g.quantized_v and not mla and len(heads_v) == 1 and min(heads_v) % HADAMARD_MIN == 0:
                v_rot = new_tensor(F32, HADAMARD_MIN, HADAMARD_MIN, input=True)
            v_rows = t * self.v_width_max() if g.v_trans else t
            n_kv = window_cells(block.window, g)
            streams = min(g.n_stream, self.ubatch_seqs())  # build_attn_inp_kq_mask: the ubatch's, one if unified
            mask = new_tensor(F16 if g.flash_attention else F32, n_kv, t // streams, 1, streams, input=True)
            self.inputs[full] = CacheInputs(
                new_tensor(I64, t, input=True), new_tensor(I64, v_rows, input=True), mask, k_rot, v_rot
            )
        return self.inputs[full]

    def v_width_max(self) -> int:
        return max(b.n_head_kv * b.head_v for b in self.shape.layers)

    @staticmethod
    def norm(x: Tensor, weight: str | None = None, pin: bool = True) -> Tensor:
        """build_norm: rms_norm (named "norm": pinned, unless the builder passes il -1), then the weight (in place;
        `weight` its name in the layer, which the scheduler places the op by)."""
        normed = same_shape(x, "RMS_NORM")
        return same_shape(pinned(normed, NORM_PIN) if pin else normed, "MUL", weight)

    def cache(self, block: GraphLayer) -> tuple[Tensor, Tensor]:
        """The layer's K and V cache tensors (their own buffer): [width, cells, streams], a transposed V as wide as
        the widest layer's (llama_kv_cache: n_embd_v_gqa_max without flash attention)."""
        g = self.geometry
        cells = window_cells(block.window, g)
        width_v = self.v_width_max() if g.v_trans else block.n_head_kv * block.head_v
        k = new_tensor(cache_type(g.k_type), block.n_head_kv * block.head_k, cells, g.n_stream, external=True)
        v = new_tensor(cache_type(g.v_type), width_v, cells, g.n_stream, external=True)
        return k, v

    def hadamard(self, x: Tensor, rot: Tensor) -> Tensor:
        """llama_mul_mat_hadamard: rows of the rotation's size times the rotation, reshaped back."""
        n = rot.ne[0]
        elements = x.ne[0] * x.ne[1] * x.ne[2] * x.ne[3]
        rows = reshape(x, n, elements // n) if x.contiguous else cont(x, n, elements // n)
        return reshape(mul_mat_t(rot, rows), *x.ne)

    def attention(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """build_qkv, rope, build_attn (llm_graph_input_attn_kv) and build_attn_mha, then the output projection."""
        if b.kv_lora:
            return self.mla_attention(b, cur)
        if b.kv_shared:
            return self.attend_shared(b, cur)
        q, k, v = self.low_rank_qkv(b, cur) if b.low_rank_kv else self.qkv(b, cur)
        if not self.shape.cache_attention:  # build_attn with llm_graph_input_attn_no_cache
            mask = self.no_cache_mask(b.window is not None)
            return self.out_proj(b, attend_over_ubatch(self.gf, b, (q, k, v), mask, self.geometry, self.t), cur)
        if b.v_norm:
            v = same_shape(v, "RMS_NORM")
        return self.out_proj(b, self.build_attn(b, q, k, v), cur)

    def no_cache_mask(self, sliding: bool) -> Tensor:
        """build_attn_inp_no_cache's [n_tokens, n_tokens] mask (F16 under flash attention), and its second one
        (self_kq_mask_swa, swa_type set) for a sliding layer: each an input from the first layer that reads it."""
        if sliding not in self.masks:
            self.masks[sliding] = new_tensor(F16 if self.geometry.flash_attention else F32, self.t, self.t, input=True)
        return self.masks[sliding]

    def qkv(self, b: GraphLayer, cur: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """build_qkv, the Q and K norms, rope (in place over Q and K's own tensors, a new tensor over a fused QKV's
        views), or llama4.cpp's temperature on a layer without rope: Q times build_inp_attn_scale's [1, 1, T]."""
        q, k, v = build_qkv(b, cur, self.t, self.norm if b.qk_norm_whole else None)
        if b.qk_norm:
            q, k = self.norm(q, "attn_q_norm"), self.norm(k, "attn_k_norm")
        if b.qk_layer_norm:
            q, k = self.layer_norm(q, "attn_q_norm"), self.layer_norm(k, "attn_k_norm")
        if b.rope:
            q, k = same_shape(q, "ROPE", self.pos), same_shape(k, "ROPE", self.pos)
        elif self.shape.attn_temperature:
            if self.attn_scale is None:
                self.attn_scale = new_tensor(F32, 1, 1, self.t, input=True)
            q = same_shape(q, "MUL", self.attn_scale)
        return q, k, v

    def build_attn(self, b: GraphLayer, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """build_attn (llm_graph_input_attn_kv) over the roped Q, K and V, to its output before wo: the Hadamard
        rotations of a quantized cache, Q, V and K expanded (Q, K and V over llama_kv_cache_iswa), then `attended`."""
        inputs = self.cache_inputs(b)
        k_rot, v_rot = inputs.k_rot, inputs.v_rot
        if k_rot is not None:
            q, k = self.hadamard(q, k_rot), self.hadamard(k, k_rot)
        if v_rot is not None:
            v = self.hadamard(v, v_rot)
        for x in (q, k, v) if self.shape.iswa else (q, v, k):
            self.gf.expand(x)
        return self.attended(b, q, k, v, inputs)

    def low_rank_qkv(self, b: GraphLayer, cur: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """deepseek2.cpp without the *_mla keys, minicpm3.cpp: Q as MLA's; wkv_a_mqa to the latent and the one rope
        key; the normed latent through wkv_b to each head's no-rope K and V (V made contiguous); Q roped whole, the
        rope key roped and repeated over the heads beside K's no-rope part."""
        t, heads, latent, rope = self.t, b.n_head, b.low_rank_kv, b.n_rot
        nope, width = b.head_k - rope, b.head_k - rope + b.head_v
        q = self.project_q(b, cur)
        kv_pe = mul_mat(None, cur, latent + rope)  # wkv_a_mqa
        kv = mul_mat(None, self.norm(view(kv_pe, (latent, t), (kv_pe.nb[1],))), heads * width)  # wkv_b
        nb = (width * FLOAT, heads * width * FLOAT)
        v = cont(view(kv, (b.head_v, heads, t), nb, nope * FLOAT))
        k_pe = same_shape(view(kv_pe, (rope, 1, t), (kv_pe.nb[1], kv_pe.nb[1]), latent * FLOAT), "ROPE", self.pos)
        k = op(
            "CONCAT",
            F32,
            (b.head_k, heads, t),
            view(kv, (nope, heads, t), nb),
            op("REPEAT", F32, (rope, heads, t), k_pe),
        )
        return same_shape(q, "ROPE", self.pos), k, v

    def project_q(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """Q [head_k, H, T]: wq, or MLA's low-rank query (wq_a, q_a_norm, wq_b) where the layer has a q_lora_rank."""
        cur_q = self.norm(mul_mat(None, cur, b.q_lora)) if b.q_lora else cur  # wq_a, q_a_norm
        return reshape(mul_mat(None, cur_q, b.n_head * b.head_k), b.head_k, b.n_head, self.t)  # wq / wq_b

    def query(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """Q alone: wq reshaped to the heads, its norm, rope."""
        q = self.project_q(b, cur)
        q = self.norm(q) if b.qk_norm else q
        return same_shape(q, "ROPE", self.pos) if b.rope else q

    def attend_shared(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """build_attn (llm_graph_input_attn_kv_iswa) without K and V: Q (rotated where the cache rotates K)
        attends over the cells an earlier layer stored; the output rotated back where V is."""
        inputs = self.cache_inputs(b)
        q = self.query(b, cur)
        q = self.hadamard(q, inputs.k_rot) if inputs.k_rot is not None else q
        out = self.mha(b, self.gf.expand(q), inputs.mask)
        return self.out_proj(b, self.hadamard(out, inputs.v_rot) if inputs.v_rot is not None else out, cur)

    def store_and_attend(self, b: GraphLayer, q: Tensor, k: Tensor, v: Tensor, inputs: CacheInputs) -> Tensor:
        """build_attn after Q, K and V are expanded, then the output projection."""
        return mul_mat("attn_output", self.attended(b, q, k, v, inputs), self.shape.n_embd)  # wo

    def attended(self, b: GraphLayer, q: Tensor, k: Tensor, v: Tensor, inputs: CacheInputs) -> Tensor:
        """build_attn after Q, K and V are expanded: K and V into the cache (cpy_k, cpy_v), build_attn_mha (the
        output before wo)."""
        self.store_kv(b, k, v, inputs)
        cur = self.mha(b, q, inputs.mask)
        return self.hadamard(cur, inputs.v_rot) if inputs.v_rot is not None else cur

    def store_kv(self, b: GraphLayer, k: Tensor, v: Tensor, inputs: CacheInputs) -> None:
        """llama_kv_cache::cpy_k and cpy_v: K's rows into the cache, V's (transposed without flash attention)."""
        gf, t, g = self.gf, self.t, self.geometry
        cache_k, cache_v = self.cache(b)
        gf.expand(set_rows(cache_k, view(k, (b.n_head_kv * b.head_k, t), (k.nb[2],)), inputs.k_idxs))
        width_v = b.n_head_kv * b.head_v
        if not g.v_trans:
            gf.expand(set_rows(cache_v, view(v, (width_v, t), (v.nb[2],)), inputs.v_idxs))
        else:  # llama_kv_cache::cpy_v, transposed V: contiguous, padded to the cache's width, one row per element
            rows = reshape(v, width_v, t) if v.nb[2] == width_v * FLOAT else cont(v, width_v, t)
            if width_v < cache_v.ne[0]:
                rows = op("PAD", F32, (cache_v.ne[0], t), rows)
            gf.expand(
                set_rows(
                    reshape(cache_v, 1, cache_v.ne[0] * cache_v.ne[1] * cache_v.ne[2]),
                    reshape(rows, 1, rows.ne[0] * t),
                    inputs.v_idxs,
                )
            )

    def out_proj(self, b: GraphLayer, cur: Tensor, attn_in: Tensor) -> Tensor:
        """wo over attention's output [Dv * H, T], after the layer's output gate where it has one (`attn_in`: the
        attention's input, which the gate projects)."""
        if b.attn_gate:
            cur = output_gate(cur, attn_in, b.attn_gate, b.n_head, "attn_gate", self.shape.gate_op)
        return biased(b, "attn_output", cur, self.shape.n_embd)  # wo

    def state_rows(self, width: int) -> Tensor:
        """build_rs with get_rows: the sequences' rows of a recurrent state."""
        return self.recurrent_rows(width, lambda states, ids: get_rows(states, ids, width))

    def recurrent_rows(self, width: int, rows_of: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
        """build_rs: one state cleared in place, `rows_of` the state and the ubatch's sequences' ids (output_states),
        the other cells' states copied within the cache (states_extra: none where the ubatch has every sequence).
        build_rs_inp's s_copy and its two views (main, extra) are made once and read by every layer."""
        n, m = self.geometry.n_seq, self.ubatch_seqs()
        if self.s_copy is None:
            s_copy = new_tensor(I32, n, input=True)  # build_rs_inp: n_rs states, one per sequence
            self.s_copy = (view(s_copy, (m,)), view(s_copy, (n - m,), offset=m * ELEMENT_BYTES[I32]))
        main, extra = self.s_copy
        states = new_tensor(F32, width, n, external=True)  # the layer's state, reshaped [state_size, cells]
        self.gf.expand(in_place(view(states, (width,)), "SCALE"))  # state_zero, cleared
        rows = self.gf.expand(rows_of(states, main))
        self.gf.expand(copy_into(get_rows(states, extra, width), new_tensor(F32, width, n - m, external=True)))
        return rows

    def ubatch_seqs(self) -> int:
        """The reserved ubatch's sequences (graph_reserve's n_seqs): every sequence."""
        return self.geometry.n_seq

    def mixer(self, b: GraphLayer, cur: Tensor) -> Tensor:
        if not b.recurrent_in:
            return self.attention(b, cur)
        if b.ssm is None:
            return self.short_conv(b, cur)
        return self.mamba(b, cur) if self.shape.mixer is Mixer.MAMBA else self.mamba2(b, cur)

    def mamba(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """build_mamba_layer: in-projection to x and z; x after the conv state, ssm_conv, silu (in place); x_proj
        to dt, B, C (each RMS-normed where the model has the norms), dt_proj; ssm_scan (a head per channel) into
        y and the new states; y + x*D, swiglu(z, y), out-projection. The conv state's last columns and the scan's
        states go back into the cache (copies)."""
        assert b.ssm is not None
        t, n, ssm, e = self.t, self.geometry.n_seq, b.ssm, self.shape.n_embd
        tokens, d_inner, d_conv = t // n, ssm.d_inner, ssm.d_conv - 1
        conv = reshape(self.state_rows(d_conv * d_inner), d_conv, d_inner, n)  # build_rs
        xz = mul_mat("ssm_in", reshape(cur, e, tokens, n), 2 * d_inner)  # ssm_in
        nb = (xz.nb[1], xz.nb[2])
        x, z = view(xz, (d_inner, tokens, n), nb), view(xz, (d_inner, tokens, n), nb, d_inner * FLOAT)
        conv_x = op("CONCAT", F32, (d_conv + tokens, d_inner, n), conv, transpose(x))
        last = view(conv_x, (d_conv, d_inner, n), (conv_x.nb[1], conv_x.nb[2]), tokens * FLOAT)
        self.gf.expand(copy_into(last, new_tensor(F32, d_conv * d_inner * n, external=True)))
        conv_out = op("SSM_CONV", F32, (d_inner, tokens, n), conv_x, "ssm_conv1d")
        x = same_shape(same_shape(conv_out, "ADD", "ssm_conv1d.bias"), "SILU")
        x_db = mul_mat("ssm_x", x, ssm.n_head + 2 * ssm.d_state)
        dbnb = (x_db.nb[1], x_db.nb[2])
        dt = view(x_db, (ssm.n_head, tokens, n), dbnb)
        bc_ne, bc_nb = (ssm.d_state, 1, tokens, n), (ssm.d_state * FLOAT, *dbnb)
        b_, c_ = (view(x_db, bc_ne, bc_nb, (ssm.n_head + i * ssm.d_state) * FLOAT) for i in (0, 1))
        if ssm.norms and ssm.norm_weights:  # jamba's
            dt, b_, c_ = self.norm(dt, "ssm_dt_norm"), self.norm(b_, "ssm_b_norm"), self.norm(c_, "ssm_c_norm")
        elif ssm.norms:  # FalconMamba's: build_norm without a weight (not named "norm": not pinned)
            dt, b_, c_ = (same_shape(v, "RMS_NORM") for v in (dt, b_, c_))
        dt = same_shape(mul_mat("ssm_dt", dt, d_inner), "ADD", "ssm_dt.bias")
        x4 = reshape(x, 1, d_inner, tokens, n)
        states = ssm.d_state * d_inner
        scan = self.recurrent_rows(
            states, ssm_scan((ssm.d_state, d_inner, n), d_inner * t + states * n, x4, dt, b_, c_)
        )
        kept = view(scan, (states * n,), (), d_inner * t * FLOAT)
        self.gf.expand(copy_into(kept, new_tensor(F32, states * n, external=True)))
        y = view(scan, (d_inner, tokens, n), (x4.nb[2], x4.nb[3]))
        y = glu(cont(z), same_shape(y, "ADD", same_shape(x, "MUL", "ssm_d")))  # y + x * D: in place of the product
        return reshape(mul_mat("ssm_out", y, e), e, t)  # ssm_out

    def mamba2(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """build_mamba2_layer: in-projection to z, xBC, dt; xBC after the conv state, ssm_conv, silu (in place);
        ssm_scan over x, dt, B, C into y and the new states; y + x*D, swiglu(z, y), the grouped norm,
        out-projection. The conv state's last columns and the scan's states go back into the cache (copies)."""
        assert b.ssm is not None
        t, n, ssm = self.t, self.geometry.n_seq, b.ssm
        tokens, head_dim = t // n, ssm.d_inner // ssm.n_head
        d_xbc = ssm.d_inner + 2 * ssm.n_group * ssm.d_state
        conv = reshape(self.state_rows((ssm.d_conv - 1) * d_xbc), ssm.d_conv - 1, d_xbc, n)  # build_rs
        zxbcdt = reshape(mul_mat("ssm_in", cur, b.recurrent_in), b.recurrent_in, tokens, n)  # ssm_in
        nb = (zxbcdt.nb[1], zxbcdt.nb[2])
        z = view(zxbcdt, (head_dim, ssm.n_head, tokens, n), (head_dim * FLOAT, *nb))
        xbc = view(zxbcdt, (d_xbc, tokens, n), nb, ssm.d_inner * FLOAT)
        dt = view(zxbcdt, (ssm.n_head, tokens, n), nb, (2 * ssm.d_inner + 2 * ssm.n_group * ssm.d_state) * FLOAT)
        conv_x = op("CONCAT", F32, (ssm.d_conv - 1 + tokens, d_xbc, n), conv, transpose(xbc))
        for slot in range(self.snapshots(tokens)):  # slot s: the columns s tokens before the last
            last = view(conv_x, (ssm.d_conv - 1, d_xbc, n), (conv_x.nb[1], conv_x.nb[2]), (tokens - slot) * FLOAT)
            self.gf.expand(copy_into(last, new_tensor(F32, (ssm.d_conv - 1) * d_xbc, n, external=True)))
        conv_out = op("SSM_CONV", F32, (d_xbc, tokens, n), conv_x, "ssm_conv1d")
        xbc = same_shape(same_shape(conv_out, "ADD", "ssm_conv1d.bias"), "SILU")
        xnb = (xbc.nb[1], xbc.nb[2])
        x = view(xbc, (head_dim, ssm.n_head, tokens, n), (head_dim * FLOAT, *xnb))
        b_ = view(xbc, (ssm.d_state, ssm.n_group, tokens, n), (ssm.d_state * FLOAT, *xnb), ssm.d_inner * FLOAT)
        c_ = view(
            xbc,
            (ssm.d_state, ssm.n_group, tokens, n),
            (ssm.d_state * FLOAT, *xnb),
            (ssm.d_inner + ssm.n_group * ssm.d_state) * FLOAT,
        )
        dt = same_shape(cont(dt), "ADD", "ssm_dt.bias")
        states, k = ssm.d_state * ssm.d_inner, self.rs_slots  # ggml_ssm_scan's K: y, then K states a sequence
        scan = self.recurrent_rows(
            states,
            ssm_scan((ssm.d_state, head_dim, ssm.n_head, n), head_dim * ssm.n_head * t + k * states * n, x, dt, b_, c_),
        )
        written = self.snapshots(tokens)
        kept = view(scan, (states, n, written), (states * FLOAT, states * n * FLOAT), head_dim * ssm.n_head * t * FLOAT)
        self.gf.expand(copy_into(kept, new_tensor(F32, states, n, written, external=True)))
        row = head_dim * FLOAT  # x->nb[1]
        y = view(scan, (head_dim, ssm.n_head, tokens, n), (row, ssm.n_head * row, tokens * ssm.n_head * row))
        y = same_shape(y, "ADD", op("MUL", F32, x.ne, x, "ssm_d"))  # y + x * D: in place of the product
        y = glu(cont(z), y)
        if ssm.grouped_norm:
            y = self.norm(reshape(y, ssm.d_inner // ssm.n_group, ssm.n_group, tokens, n), "ssm_norm")
        return mul_mat("ssm_out", reshape(y, ssm.d_inner, t), self.shape.n_embd)  # ssm_out

    def short_conv(self, b: GraphLayer, cur: Tensor) -> Tensor:
        """lfm2.cpp's build_shortconv_block: in_proj to b, c, x; b*x after the state's columns; ssm_conv; c*conv
        (in place); out_proj. The last columns go back to the state (a copy into the cache)."""
        t, e, n = self.t, self.shape.n_embd, self.geometry.n_seq
        tokens = t // n
        bcx = mul_mat("shortconv.in_proj", reshape(cur, e, tokens, n), 3 * e)
        b_, c_, x_ = (view(bcx, (e, tokens, n), (bcx.nb[1], bcx.nb[2]), i * e * FLOAT) for i in range(3))
        bx = transpose(op("MUL", F32, (e, tokens, n), b_, x_))
        d_conv = b.recurrent_state // e  # n_embd_r: (l_cache - 1) x n_embd
        conv = reshape(self.state_rows(d_conv * e), d_conv, e, n)
        bx = op("CONCAT", F32, (d_conv + tokens, e, n), conv, bx)
        for slot in range(self.snapshots(tokens)):  # slot s: the state s tokens back (a partial rollback)
            snapshot = view(bx, (d_conv, e, n), (bx.nb[1], bx.nb[2]), (tokens - slot) * FLOAT)
            self.gf.expand(copy_into(snapshot, new_tensor(F32, d_conv * e, n, external=True)))
        y = same_shape(c_, "MUL", op("SSM_CONV", F32, (e, tokens, n), bx, "shortconv.conv"))  # in place of the conv
        return reshape(mul_mat("shortconv.out_proj", y, e), e, t)  # out_proj

    def mla_attention(self, b: GraphLayer, cur: Tensor, q: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """llama_model_deepseek2's absorbed multi-head latent attention: the query's no-rope part times wk_b into
        the latent, concatenated with its roped part; the key is the normed latent and the roped key part (one
        head, the cache's K, no V cache); attention reads V as the latent, then wv_b decompresses it (`q`: the
        query [head_k, H, T] where the builder projected it; `mask`: the KQ mask where the builder made its own)."""
        t = self.t
        latent, rope, nope, heads = b.kv_lora, b.n_rot, b.head_k - b.n_rot, b.n_head
        q = self.project_q(b, cur) if q is None else q
        q_nope = permute(view(q, (nope, heads, t), (q.nb[1], q.nb[2])), 0, 2, 1, 3)
        absorbed = permute(mul_mat("attn_k_b", q_nope, latent), 0, 2, 1, 3)  # wk_b: [latent, H, T]
        q_pe = same_shape(view(q, (rope, heads, t), (q.nb[1], q.nb[2]), nope * FLOAT), "ROPE", self.pos)
        q = op("CONCAT", F32, (latent + rope, heads, t), absorbed, q_pe)
        kv = mul_mat("attn_kv_a_mqa", cur, latent + rope)  # kv_cmpr_pe
        v = reshape(self.norm(view(kv, (latent, t), (kv.nb[1],)), "attn_kv_a_norm"), latent, 1, t)  # kv_cmpr, normed
        k_pe = same_shape(view(kv, (rope, 1, t), (kv.nb[1], kv.nb[1]), latent * FLOAT), "ROPE", self.pos)
        k = op("CONCAT", F32, (latent + rope, 1, t), v, k_pe)
        return mul_mat("attn_output", self.mla_attend(b, q, k, v, mask), self.shape.n_embd)  # wo

    def mla_attend(self, b: GraphLayer, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        """build_attn (llm_graph_input_attn_k) over MLA's Q [latent + rope, H, T], K [latent + rope, 1, T] and V
        (the normed latent), to its output [head_v * H, T] before wo: K into the cache, build_attn_mha with wv_b
        (over `mask`, else the cache's KQ mask)."""
        gf, t, g = self.gf, self.t, self.geometry
        latent, rope, heads = b.kv_lora, b.n_rot, b.n_head
        inputs = self.cache_inputs(b)
        mask = inputs.mask if mask is None else mask
        for x in (q, v, k):
            gf.expand(x)
        kind = cache_type(g.k_type)
        cache_k = new_tensor(kind, latent + rope, window_cells(b.window, g), g.n_stream, external=True)
        gf.expand(set_rows(cache_k, view(k, (latent + rope, t), (k.nb[2],)), inputs.k_idxs))
        ns = g.n_stream
        q = permute(view(q, (latent + rope, heads, t // ns, ns), (q.nb[1], q.nb[2], q.nb[3] // ns)), 0, 2, 1, 3)
        n_kv = window_cells(b.window, g)
        k = new_tensor(kind, latent + rope, n_kv, 1, ns, external=True)  # the cache's K, permuted
        v = view(k, (latent, n_kv, 1, ns), k.nb[1:])  # its latent part: a view of K, K's strides
        if g.flash_attention:  # build_attn_mha with v_mla: the result [latent, H, T] times wv_b, made contiguous
            k16, v16 = f16_input(k, g.k_type), f16_input(v, g.k_type)  # V a view of K, of K's type
            out = op("FLASH_ATTN_EXT", F32, (latent, heads, t // ns, ns), q, k16, v16, mask)
            out.f16_extra = fattn_f16_extra(out, k, v, g, v_is_k=True)
            decompressed = mul_mat("attn_v_b", permute(out, 0, 2, 1, 3), b.head_v)  # wv_b: fattn_mla [Dv, T, H]
            cur = reshape(cont(permute(decompressed, 0, 2, 1, 3)), b.head_v * heads, t)
        else:  # kq, soft_max in place, V (the latent) transposed into a copy, kqv, kqv_mla
            kq = same_shape(mul_mat_t(k, q), "SOFT_MAX", mask)
            v_cont = op("CONT", float_type(g.k_type), (n_kv, latent, 1, ns), v)
            kqv = mul_mat("attn_v_b", mul_mat_t(v_cont, kq), b.head_v)  # wv_b: [Dv, T, H]
            cur = pinned(cont(permute(kqv, 0, 2, 1, 3), b.head_v * heads, t), KQV_PIN)
        return gf.expand(cur)

    def cache_view(self, b: GraphLayer, *ne: int, type_: str = F16) -> Tensor:
        """A view of the layer's K or V cache (F16, or F32 for an F32 cache a copy is made of); a layer from
        n_layer_kv_from_start reads the cache of the last layer of its kind (sliding or not) before it (llama_model's
        layer_reuse_cb: gemma3n, gemma4)."""
        cache = new_tensor(type_, *ne, external=True)
        start = self.shape.kv_from_start
        if b.kv_shared and start is not None:
            cache.layer = start - (2 if b.window else 1)
        return cache

    def transposed_v(self, b: GraphLayer, n_kv: int, ns: int) -> Tensor:
        """llama_kv_cache::get_v of a transposed cache, permuted: [n_kv, head_v, heads_kv, streams], each stream a
        whole cache of rows as wide as the widest layer's apart (nb[3]: kv_size * n_embd_v_gqa_max), so a layer
        narrower than that spans more bytes than its elements (ggml_nbytes: a copy of it another backend reads)."""
        v = self.cache_view(b, n_kv, b.head_v, b.n_head_kv, ns, type_=cache_type(self.geometry.v_type))
        return replace(v, nb=(*v.nb[:3], v.nb[1] * self.v_width_max()))

    def mha(self, b: GraphLayer, q: Tensor, mask: Tensor) -> Tensor:
        """build_attn_mha over the whole cache (n_kv = every cell of this layer's cache)."""
        g, t = self.geometry, self.t
        ns = g.n_stream
        n_kv = window_cells(b.window, g)
        q = permute(view(q, (b.head_k, b.n_head, t // ns, ns), (q.nb[1], q.nb[2], q.nb[3] // ns)), 0, 2, 1, 3)
        rows = t // ns * ns  # the streams' tokens (all of them but where a single-sequence reserve has several streams)
        if g.flash_attention:  # over the cache's K and V, permuted
            k = f16_input(self.cache_view(b, b.head_k, n_kv, b.n_head_kv, ns, type_=cache_type(g.k_type)), g.k_type)
            v = f16_input(self.cache_view(b, b.head_v, n_kv, b.n_head_kv, ns, type_=cache_type(g.v_type)), g.v_type)
            sinks = ("attn_sinks",) if b.sinks else ()  # ggml_flash_attn_ext_add_sinks: src[4]
            out = op("FLASH_ATTN_EXT", F32, (b.head_v, b.n_head, t // ns, ns), q, k, v, mask, *sinks)
            out.f16_extra = fattn_f16_extra(out, k, v, g, v_is_k=False)
            return self.gf.expand(reshape(out, b.head_v * b.n_head, rows))
        k = self.cache_view(b, b.head_k, n_kv, b.n_head_kv, ns, type_=cache_type(g.k_type))  # the cache's K, permuted
        sinks = ("attn_sinks",) if b.sinks else ()  # ggml_soft_max_add_sinks: src[2]
        kq = same_shape(mul_mat_t(k, q), "SOFT_MAX", mask, *sinks)  # kq [n_kv, T, H], soft_max in place
        if g.v_trans:  # the transposed V cache, permuted
            v = self.transposed_v(b, n_kv, ns)
        else:  # a V cache made for flash attention: v_cont, the permuted cache transposed into a copy
            v = cont(transpose(self.cache_view(b, b.head_v, n_kv, b.n_head_kv, ns, type_=float_type(g.v_type))))
        kqv = mul_mat_t(v, kq)  # [Dv, T, H]
        return self.gf.expand(pinned(cont(permute(kqv, 0, 2, 1, 3), b.head_v * b.n_head, rows), KQV_PIN))

    def ffn(self, b: GraphLayer, cur: Tensor, logits: Tensor | None = None) -> Tensor:
        """build_ffn (dense), build_moe_ffn (routed experts; `logits`: the router's, where the builder made them) and
        the shared experts beside them (gated as the routed experts are: nemotron-h's are up alone)."""
        if not b.n_expert:
            return build_ffn(cur, b.n_ff, b.gated, b.fused_up, b.activation, b.clamped_ffn, biases=b.biases)
        out, r = routed_experts(self.gf, b, cur, logits), b.routing
        if not r.shared_ff:
            return out
        shared = build_ffn(cur, r.shared_ff, r.gated, activation=b.activation, clamped=b.clamped_ffn, weights=SHARED)
        return same_shape(out, "ADD", shared)


class EncoderGraph:
    """src/models/bert.cpp: token (and position) embeddings, LayerNorm; per block non-causal attention over the
    ubatch (build_attn_inp_no_cache: one [T, T] mask; K and V cast to F16 for flash attention), the output
    projection, a residual add and LayerNorm, the FFN, a residual add and LayerNorm. Biases, norms' weights and
    GELU work in place; LayerNorm (ggml_norm) does not."""

    def __init__(self, shape: GraphShape, geometry: ContextGeometry):
        self.shape, self.geometry = shape, geometry
        self.t = ubatch_tokens(geometry)
        self.gf = Graph()

    @staticmethod
    def norm(x: Tensor, weight: str, pin_layer: int | None = None) -> Tensor:
        """build_norm with LLM_NORM: ggml_norm (a new tensor, named "norm": pinned to its layer's device), the
        weight `weight` and its bias in place (`pin_layer`: the layer build_norm is called with, where the weights
        are outside the blocks: the embeddings' norm at il 0)."""
        if pin_layer is not None:
            in_layer(pin_layer)
        normed = pinned(op("NORM", F32, x.ne, x), NORM_PIN)
        if pin_layer is not None:
            in_layer(None)
        return same_shape(same_shape(normed, "MUL", weight), "ADD", f"{weight}.bias")

    def build(self) -> Graph:
        gf, t, e, g = self.gf, self.t, self.shape.n_embd, self.geometry
        tokens = new_tensor(I32, t, input=True)
        embd = gf.expand(get_rows("token_embd", tokens, e))
        gf.expand(new_tensor(F32, e, t, input=True))  # inp_embd, allocated, never read
        self.pos = new_tensor(I32, t, input=True)
        embd = same_shape(
            embd, "ADD", viewed("token_types", row=True)
        )  # the token type row (ggml_view_1d of type_embd)
        if self.shape.learned_positions:  # position rows added to the token rows
            embd = same_shape(get_rows("position_embd", self.pos, e), "ADD", embd)
        self.mask = new_tensor(F16 if g.flash_attention else F32, t, t, input=True)
        out_ids = new_tensor(I32, ubatch_outputs(g), input=True)  # build_inp_out_ids
        cur = self.norm(embd, "token_embd_norm", pin_layer=0)
        last = len(self.shape.layers) - 1
        for il, b in enumerate(self.shape.layers):
            in_layer(il)
            inp_l = cur
            cur = biased(b, "attn_output", self.attention(b, cur), e)  # wo, its bias in place
            if il == last:
                cur, inp_l = get_rows(cur, out_ids, e), get_rows(inp_l, out_ids, e)
            ffn_inp = self.norm(same_shape(cur, "ADD", inp_l), "attn_output_norm")
            cur = self.norm(same_shape(self.ffn(b, ffn_inp), "ADD", ffn_inp), "layer_output_norm")
        in_layer(None)
        cur.output = True  # result_embd
        gf.expand(cur)
        return gf

    @staticmethod
    def ffn(b: GraphLayer, cur: Tensor) -> Tensor:
        """build_ffn: bert's LLM_FFN_SEQ up, its bias, GELU, down, its bias (each bias in place, where the file has
        them); else build_ffn's."""
        if "ffn_up" not in b.biases:
            return build_ffn(cur, b.n_ff, b.gated, activation=b.activation)
        up = biased(b, "ffn_up", cur, b.n_ff)
        act = same(up, *UNGATED[b.activation]) if not b.gated else glu(mul_mat("ffn_gate", cur, b.n_ff), up, "GEGLU")
        return biased(b, "ffn_down", act, cur.ne[0])

    def attention(self, b: GraphLayer, cur: Tensor) -> Tensor:
        t = self.t
        q, k, v = build_qkv(b, cur, t)
        if not self.shape.learned_positions:
            q, k = same_shape(q, "ROPE", self.pos), same_shape(k, "ROPE", self.pos)
        return attend_over_ubatch(self.gf, b, (q, k, v), self.mask, self.geometry, t)


def output_gate(
    out: Tensor, attn_in: Tensor, width: int, heads: int, weight: str | None = None, activation: str | None = None
) -> Tensor:
    """The gate builders put on attention's output before wo (step35.cpp, afmoe.cpp, laguna.cpp, kimi-k3.cpp,
    bailingmoe3.cpp): wqkv_gate's projection of attention's input `attn_in`, its sigmoid (laguna: softplus),
    times the output [Dv * H, T] in place: one gate per head (`width` the `heads`: [1, H, T] broadcast over the
    output viewed [Dv, H, T], viewed back) or one per element; `weight`: the gate's name where a builder names it;
    `activation`: the unary op, a node of its own (ggml_sigmoid, ggml_softplus: not the _inplace forms, which
    matters where the gate's projection and the op land on different backends), None where a builder folds it."""
    gate, t = mul_mat(weight, attn_in, width), out.ne[1]
    if activation is not None:
        gate = same_shape(gate, activation)
    if width != heads:
        return same_shape(out, "MUL", gate)
    per_head = same_shape(reshape(out, out.ne[0] // heads, heads, t), "MUL", reshape(gate, 1, heads, t))
    return reshape(per_head, out.ne[0], t)


def build_qkv(
    b: GraphLayer, cur: Tensor, t: int, norm: Callable[[Tensor, str], Tensor] | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """llm_graph_context::build_qkv: one wqkv matmul with Q, K and V views of it (openelm.cpp's reshape first is a
    view with the same strides; mimo2.cpp's V heads their own size) | wq, wk, wv, each reshaped to [head, heads, T]
    (`norm`: olmo2.cpp's norms of the whole Q and K projections, before the reshape, given the weight's name;
    gemma4.cpp's V, where the layer has no wv, is K's projection)."""
    if b.fused_qkv:
        qkv = mul_mat("attn_qkv", cur, (b.n_head + b.n_head_kv) * b.head_k + b.n_head_kv * b.head_v)
        nb = (b.head_k * FLOAT, qkv.nb[1])
        q = view(qkv, (b.head_k, b.n_head, t), nb)
        k = view(qkv, (b.head_k, b.n_head_kv, t), nb, b.n_head * b.head_k * FLOAT)
        v_at = (b.n_head + b.n_head_kv) * b.head_k * FLOAT
        v = view(qkv, (b.head_v, b.n_head_kv, t), (b.head_v * FLOAT, qkv.nb[1]), v_at)
        return q, k, v
    q, k = biased(b, "attn_q", cur, b.n_head * b.head_k), biased(b, "attn_k", cur, b.n_head_kv * b.head_k)
    v = k if b.v_from_k else biased(b, "attn_v", cur, b.n_head_kv * b.head_v)  # gemma4.cpp: Vcur = Kcur without wv
    if norm is not None:
        q, k = norm(q, "attn_q_norm"), norm(k, "attn_k_norm")
    q, k = reshape(q, b.head_k, b.n_head, t), reshape(k, b.head_k, b.n_head_kv, t)
    return q, k, reshape(v, b.head_v, b.n_head_kv, t)


def biased(b: GraphLayer, name: str, cur: Tensor, rows: int) -> Tensor:
    """build_lora_mm with the layer's weight `name`, then its bias added (in place) where the layer has one."""
    out = mul_mat(name, cur, rows)
    return same_shape(out, "ADD", f"{name}.bias") if name in b.biases else out


def attend_over_ubatch(
    gf: Graph, b: GraphLayer, qkv: tuple[Tensor, Tensor, Tensor], mask: Tensor, g: ContextGeometry, t: int
) -> Tensor:
    """build_attn with llm_graph_input_attn_no_cache: Q, K and V expanded, then build_attn_mha over the ubatch's own
    keys (non-causal: one [T, T] mask; flash attention casts K and V to F16; else kq, soft_max in place, V
    transposed into a copy, kqv, made contiguous: build_attn_mha's kqv_out, pinned to the CPU without offload_kqv as
    a cache's is), [Dv * H, T]."""
    for x in qkv:
        gf.expand(x)
    q, k, v = (permute(x, 0, 2, 1, 3) for x in qkv)
    if g.flash_attention:
        k16, v16 = op("CPY", F16, k.ne, k), op("CPY", F16, v.ne, v)
        out = op("FLASH_ATTN_EXT", F32, (b.head_v, b.n_head, t, 1), q, k16, v16, mask)
        return gf.expand(reshape(out, b.head_v * b.n_head, t))
    kq = same_shape(mul_mat_t(k, q), "SOFT_MAX", mask)  # [T, T, H]
    kqv = mul_mat_t(cont(transpose(v)), kq)  # v_cont [T, Dv, H]
    return gf.expand(pinned(cont(permute(kqv, 0, 2, 1, 3), b.head_v * b.n_head, t), KQV_PIN))


def cache_type(name: str) -> str:
    """A cache's tensor type (llama_kv_cache: type_k / type_v): the type of the views build_attn_mha reads, and of
    their copies where the scheduler moves one to another backend; F16 where the geometry names none, or an element
    size llama.cpp has no type for (the contract's other element sizes, whose cache multiplies plainly)."""
    return name if name in CACHE_TYPES or name in ELEMENT_BYTES else F16


def float_type(cache_type: str) -> str:
    """The type of a contiguous copy of a cache's view (ggml_cont keeps it): F32 for an F32 cache, else F16 (the
    caches a copy is made of without flash attention, where llama.cpp refuses a quantized V)."""
    return F32 if cache_type == F32 else F16


def f16_input(x: Tensor, cache_type: str) -> Tensor:
    """build_attn_mha under flash attention: a K or V view of an F32 cache cast to F16 (ggml_cast: a CPY of its
    shape), any other type as it is."""
    return op("CPY", F16, x.ne, x) if cache_type == F32 else x


def fattn_f16_extra(out: Tensor, k: Tensor, v: Tensor, g: ContextGeometry, v_is_k: bool) -> int:
    """ggml_cuda_flash_attn_ext_get_f16_extra_data (ggml-cuda/fattn-common.cuh) for the TILE and MMA kernels: each
    quantized K or V (not a view of K) as F16 after the output, at 128-byte offsets; the bytes past ggml_nbytes."""
    end = out.nbytes
    for elements, quantized in ((k.elements, g.quantized_k), (0 if v_is_k else v.elements, g.quantized_v)):
        if quantized and elements:
            end = round_up(end, FATTN_F16_ALIGNMENT) + elements * ELEMENT_BYTES[F16]
    return end - out.nbytes


def ssm_scan(
    state: tuple[int, ...], size: int, x: Tensor, dt: Tensor, b: Tensor, c: Tensor, a: str = "ssm_a"
) -> Callable[[Tensor, Tensor], Tensor]:
    """ggml_ssm_scan as build_rs's get_state_rows: over the layer's state reshaped to `state`, x, dt, A (`a`: ssm_a,
    or a view of it), B, C and the sequences' ids, y and the new states in one tensor of `size` floats."""
    return lambda s, ids: op("SSM_SCAN", F32, (size,), reshape(s, *state), x, dt, a, b, c, ids)


def build_graph(shape: GraphShape, geometry: ContextGeometry, n_vocab: int) -> Graph:
    """llama_model::build_graph: the architecture's graph, then build_pooling's under cparams.embeddings."""
    if shape.builder is not None:
        gf = shape.builder(shape, geometry, n_vocab)
    elif shape.bert_block:
        gf = EncoderGraph(shape, geometry).build()
    else:
        gf = DecoderGraph(shape, geometry, n_vocab).build()
    if geometry.embeddings:
        pooled = build_pooling(gf, shape, geometry)
        if shape.dense_out.present:
            build_dense_out(gf, shape.dense_out, pooled, _t_embd(gf, shape))
    return gf


POOLING_NONE, POOLING_MEAN, POOLING_RANK = 0, 1, 4  # llama_pooling_type; CLS 2 and LAST 3 read one row a sequence


def pooling_type(shape: GraphShape, geometry: ContextGeometry) -> int:
    """cparams.pooling_type (llama_context's constructor): as asked where it is not unspecified, else the model's
    hparams.pooling_type (unspecified there too: none)."""
    return shape.pooling if geometry.pooling is None else geometry.pooling


def _t_embd(gf: Graph, shape: GraphShape) -> Tensor:
    """res->t_embd: the last graph output n_embd wide."""
    return next(t for t in reversed(gf.nodes) if t.output and t.ne[0] == shape.n_embd)


def build_pooling(gf: Graph, shape: GraphShape, geometry: ContextGeometry) -> Tensor | None:
    """llm_graph_context::build_pooling over t_embd, as cparams.pooling_type says: NONE pools nothing; MEAN
    multiplies its transposed copy (ggml_cont) by the inp_mean input [n_tokens, n_seqs] (build_inp_mean); CLS and
    LAST take one row a sequence (build_inp_cls: [n_seqs] I32, get_rows); RANK takes that row (modern-bert: the
    mean) through the file's classification head (rank_head). Returns the pooled rows (res->t_embd_pooled), None
    for NONE (t_embd itself)."""
    pooling = pooling_type(shape, geometry)
    if pooling == POOLING_NONE:
        return None
    t_embd = _t_embd(gf, shape)
    n_seqs = geometry.n_seq  # graph_reserve's ubatch: n_seqs_unq = n_seqs
    if pooling == POOLING_MEAN or pooling == POOLING_RANK and shape.rank_head.mean_first:
        inp_mean = new_tensor(F32, ubatch_tokens(geometry), n_seqs, input=True)
        pooled = mul_mat_t(cont(transpose(t_embd)), inp_mean)
    else:
        pooled = get_rows(t_embd, new_tensor(I32, n_seqs, input=True), shape.n_embd)
    if pooling == POOLING_RANK:
        pooled = rank_head(pooled, shape.rank_head)
    pooled.output = True  # set_outputs: t_embd_pooled
    gf.expand(pooled)
    return pooled


def build_dense_out(gf: Graph, dense: DenseOut, pooled: Tensor | None, t_embd: Tensor) -> None:
    """llm_graph_context::build_dense_out after build_pooling: over t_embd_pooled (the `pooled` rows, else t_embd)
    dense_2 (a matmul), its bias added, dense_3 (a matmul). The result becomes t_embd_pooled, so set_outputs marks
    it and not the pooled rows it replaces (t_embd stays an output)."""
    cur = t_embd if pooled is None else pooled
    if pooled is not None:
        pooled.output = False
    if dense.dense_2_rows:
        cur = mul_mat(None, cur, dense.dense_2_rows)
    if dense.dense_2_bias:
        cur = same_shape(cur, "ADD", None)
    if dense.dense_3_rows:
        cur = mul_mat(None, cur, dense.dense_3_rows)
    cur.output = True
    gf.expand(cur)


def rank_head(cur: Tensor, head: RankHead) -> Tensor:
    """build_pooling's RANK classification head over the pooled rows: cls (a matmul, cls_b added, tanh, or gelu
    for modern-bert, then cls_norm's LLM_NORM build_norm at il -1: ggml_norm and the weight), cls_out (a matmul,
    cls_out_b added), a soft_max for qwen3 and qwen3vl; each op a new tensor a few floats a sequence wide."""
    if head.cls_rows:
        cur = mul_mat("cls", cur, head.cls_rows)
        if head.cls_bias:
            cur = same_shape(cur, "ADD", "cls.bias")
        cur = same_shape(cur, "GELU" if head.mean_first else "TANH")  # ggml_gelu, ggml_tanh: unary ops
        if head.cls_norm:
            cur = same_shape(op("NORM", F32, cur.ne, cur), "MUL", "cls.norm")
    if head.out_rows:
        cur = mul_mat("cls.output", cur, head.out_rows)
        if head.out_bias:
            cur = same_shape(cur, "ADD", "cls.output.bias")
    if head.softmax:
        cur = same_shape(cur, "SOFT_MAX")
    return cur
