"""How llama.cpp turns a workload into context sizes (llama-context.cpp, llama-kv-cache.cpp)."""

from __future__ import annotations

from dataclasses import dataclass

from memfit.integers import round_up

CELL_PADDING = 256  # llama.cpp pads the KV size to 256 cells
DEFAULT_N_UBATCH = 512
DEFAULT_N_BATCH = 2048
WARMUP_TOKENS = 2  # common_init_from_params' warmup decodes the vocabulary's BOS and EOS, whichever it has
# llama_pooling_type (include/llama.h) by --pooling's names (common/arg.cpp)
POOLING_TYPES = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


@dataclass(frozen=True)
class DraftSettings:
    """llama-server's MTP draft context's own settings (common_params_speculative_draft, common/common.h): its cache
    types as element bytes (--spec-draft-type-k/-v, f16 by default: kv_cache.cache_type names them) and whether each
    sequence's draft sampling runs on the backend (--spec-draft-backend-sampling, on by default)."""

    key_element_bytes: int = 2
    value_element_bytes: int = 2
    backend_sampling: bool = True


@dataclass(frozen=True)
class ContextGeometry:
    n_ctx: int  # total cells requested of llama.cpp, after padding
    n_ctx_seq: int  # cells per stream
    n_stream: int  # KV streams (non-unified cache: one per sequence)
    n_seq: int  # sequences (max(1, streams) cells of recurrent state)
    n_ubatch: int
    swa_seqs: int = 1  # sequences sharing one sliding window: n_seq in a unified cache, else 1
    swa_full: bool = False  # llama.cpp's swa_full: sliding layers keep the whole context
    flash_attention: bool = True  # flash attention on (llama.cpp's `auto` on its CPU backend); off: V transposed
    # flash attention on as `auto` asked it: llama_context::resolve_fused_ops turns it off, after the cache is made,
    # where the scheduler puts a layer's FLASH_ATTN_EXT on another device than the layer's (estimator/scheduler.py)
    flash_attention_auto: bool = False
    quantized_k: bool = False  # a block-quantized K cache type (q8_0): llama.cpp rotates K and Q (attn_rot_k)
    quantized_v: bool = False  # a block-quantized V cache type: llama.cpp rotates V (attn_rot_v)
    k_type: str = ""  # the K cache's type as llama.cpp names it (f16, q8_0, ...); "": not said
    v_type: str = ""  # the V cache's, as k_type
    graph_tokens: int = 0  # a graph reserved for this many tokens (the token-generation graph's n_seq); 0: the ubatch
    transposed_v: bool | None = None  # the V cache transposed; None: without flash attention (see v_trans)
    rs_snapshots: int = 0  # llama_context_params.n_rs_seq as asked: recurrent-state snapshots per sequence
    n_batch: int = DEFAULT_N_BATCH  # cparams.n_batch: the logical batch, capped by the context
    # the floats per batch token of the nextn embeddings the output buffer keeps (n_embd_out() under llama-server's
    # draft-mtp, which sets them unmasked on the target; 0: not set)
    nextn_width: int = 0
    # the draft tokens each sequence's verification batch carries under llama-server's speculative decoding (the
    # output buffer's logits rows: workspace.output_rows; 0: no speculation)
    draft_tokens: int = 0
    # llama_context_params.n_outputs_max: the outputs of the prompt graph llama.cpp reserves, min(n_tokens, this)
    # (0: n_batch, a plain context's; llama-server sets its output limit, server_outputs_max)
    n_outputs_max: int = 0
    # cparams.embeddings (llama-server's --embedding, --rerank): every token of a decode an output, build_pooling in
    # the graph (compute_graph.build_pooling)
    embeddings: bool = False
    # the floats of a row of embeddings the output buffer keeps beside the logits under `embeddings` (n_embd_out();
    # 0: none)
    embd_width: int = 0
    # the model has no memory module (llama_model::create_memory returns none: BERT and the other encoders), so
    # llama_context::decode calls encode(), every token of its one ubatch an output (encode_outputs)
    memoryless: bool = False
    # cparams.pooling_type as asked (llama_pooling_type: POOLING_TYPES; None: unspecified, which llama_context's
    # constructor makes the model's own), kept only under `embeddings`, where build_pooling reads it
    pooling: int | None = None
    # the tokens llama-server's warmup decodes (the vocabulary's BOS and EOS, whichever it has: Layout.warmup_tokens);
    # 0: not known
    warmup_tokens: int = 0
    # llama-server's MTP draft context's own settings, where the nextn rows say it makes one (estimator/mtp.py)
    draft: DraftSettings = DraftSettings()

    @property
    def outputs_max(self) -> int:
        """cparams.n_outputs_max (llama_context's constructor): as asked, else n_batch."""
        return self.n_outputs_max or self.n_batch

    @property
    def v_trans(self) -> bool:
        """llama_kv_cache's v_trans: !cparams.flash_attn when the cache is made, before `auto` is resolved, so a
        flash attention that auto turns off later (a layer's attention on another device) keeps V as it is."""
        return not self.flash_attention if self.transposed_v is None else self.transposed_v

    def rollback_slots(self, rs_rollback: bool) -> int:
        """cparams.n_rs_seq: the snapshots asked where the architecture supports a rollback (`rs_rollback`), else 0
        (llama_context's constructor clamps it)."""
        return self.rs_snapshots if rs_rollback else 0


def output_rows(geometry: ContextGeometry) -> int:
    """The rows the output buffer grows to: output_reserve's n_outputs_max = max(n_outputs, n_seq_max)
    (llama-context.cpp), n_outputs at most llama-server's verification outputs (verification_outputs), a whole
    batch's where every token is an output (embedding_outputs), or a whole ubatch's where the model has no memory
    module (encode_outputs)."""
    if geometry.memoryless:
        if warmup_only(geometry):
            return max(geometry.n_seq, geometry.warmup_tokens)
        return encode_outputs(geometry.n_seq, geometry.n_ubatch)
    if geometry.embeddings:
        return max(geometry.n_seq, embedding_outputs(geometry.n_batch))
    return max(geometry.n_seq, verification_outputs(geometry.n_seq, geometry.n_batch, geometry.draft_tokens))


def encode_outputs(n_seq: int, n_ubatch: int) -> int:
    """The rows of a model without a memory module once it has decoded, embeddings or not: max(n_seq_max, n_ubatch)
    at most (the batch's every token an output, the batch at most one ubatch)."""
    # llama_context::decode without memory calls encode(): GGML_ASSERT(n_ubatch >= n_tokens), output_reserve(n_tokens)
    return max(n_seq, n_ubatch)


def warmup_only(geometry: ContextGeometry) -> bool:
    """Whether the one decode the context ever makes is llama-server's warmup: a model without a memory module
    under llama-server (its output limit set) computing no embeddings, whose completions it refuses ("the current
    context does not logits computation", server-context.cpp) as it refuses embedding tasks without --embedding."""
    return geometry.memoryless and geometry.n_outputs_max > 0 and not geometry.embeddings


def warmup_slack_rows(geometry: ContextGeometry) -> int:
    """The rows past output_rows (n_seq_max) the warmup may add where it is the only decode (warmup_only) and its
    tokens are not known: one per token of it, the vocabulary's BOS and EOS, whichever it has
    (common_init_from_params), at most warmup_room; 0 elsewhere."""
    if not warmup_only(geometry) or geometry.warmup_tokens:
        return 0
    return max(0, min(warmup_room(geometry), WARMUP_TOKENS) - geometry.n_seq)


def warmup_room(geometry: ContextGeometry) -> int:
    """The most tokens a decode of a model without a memory module takes: encode() asserts n_ubatch >= n_tokens and
    its output_reserve that they are at most cparams.n_outputs_max (every token an output)."""
    return min(geometry.outputs_max, geometry.n_ubatch)


def embedding_outputs(n_batch: int) -> int:
    """The outputs of one decode under cparams.embeddings: all of its tokens (llama_context::decode's output_all:
    "pooled embedding requires that all tokens are output"), at most n_batch of them."""
    return n_batch


def server_embedding_batch(n_batch: int, n_ubatch: int) -> int:
    """llama-server's n_batch when it serves embeddings: n_ubatch where n_batch is larger (tools/server/server.cpp:
    "embeddings require all tokens to be processed in a single ubatch")."""
    return min(n_batch, n_ubatch)


def verification_outputs(n_seq: int, n_batch: int, draft_tokens: int) -> int:
    """The outputs of one llama-server batch where every slot verifies a draft: each slot adds its sampled token
    and its draft, all with logits (server-context.cpp handle_last_sampled_token), and the server caps a batch's
    outputs at min(n_batch, n_parallel * (1 + n_draft)) (common/speculative.cpp
    common_speculative_get_output_limits, as server_output_limits sets cparams.n_outputs_max)."""
    return min(n_batch, n_seq * (1 + draft_tokens))


def server_outputs_max(n_seq: int, n_batch: int, draft_tokens: int, lifted: bool = False) -> int:
    """llama-server's n_outputs_max, set before its context is made (server-context.cpp load_model):
    server_output_limits' total, min(n_batch, n_parallel x (1 + n_draft)) (verification_outputs), at least 1; n_batch
    where `lifted` (params.embedding, or a pooling type other than none: { n_batch, 1 }; pooled_limit)."""
    if lifted:
        return n_batch
    return max(1, verification_outputs(n_seq, n_batch, draft_tokens))


def pooled_limit(embeddings: bool, pooling: str | None) -> bool:
    """Whether server_output_limits (tools/server/server-context.cpp) lifts llama-server's output limit to its
    n_batch: params.embedding, or a pooling_type neither unspecified nor none. The second alone leaves
    cparams.embeddings false (common_context_params_to_llama copies params.embedding) and n_batch as asked
    (tools/server/server.cpp cuts it to the ubatch only under params.embedding)."""
    return embeddings or pooling not in (None, "none")


def llama_geometry(
    n_ctx_req: int,
    n_seq: int,
    n_ubatch_req: int = DEFAULT_N_UBATCH,
    *,
    unified: bool = False,
    swa_full: bool = False,
    causal: bool = True,
    flash_attention: bool = True,
    quantized_k: bool = False,
    quantized_v: bool = False,
    rs_snapshots: int = 0,
    k_type: str = "",
    v_type: str = "",
    nextn_width: int = 0,
    draft_tokens: int = 0,
    server: bool = False,
    embeddings: bool = False,
    embd_width: int = 0,
    memoryless: bool = False,
    pooling: str | None = None,
    warmup_tokens: int = 0,
    draft: DraftSettings = DraftSettings(),
    flash_attention_auto: bool = False,
) -> ContextGeometry:
    """llama.cpp's context sizes for a total n_ctx over n_seq sequences (llama_context's constructor); under
    llama-server (`server`) with its output limit (server_outputs_max), which serving `embeddings` lifts to its
    n_batch, itself cut to the ubatch (server_embedding_batch), and which a `pooling` other than none lifts alone
    (pooled_limit); `memoryless`: a model without a memory module; `pooling`: --pooling's name (None: unspecified);
    `warmup_tokens`: the tokens llama-server's warmup decodes (0: not known); `draft`: the MTP draft context's own
    settings; `flash_attention_auto`: flash attention asked as auto (resolved per placement).

    memfit's answers default to llama.cpp's: a non-unified cache, n_ubatch 512, flash attention on, no full-size
    SWA cache.
    """
    n_ctx = round_up(n_ctx_req, CELL_PADDING)
    n_ctx_seq = n_ctx if unified else round_up(n_ctx // n_seq, CELL_PADDING)
    n_ctx = n_ctx_seq * (1 if unified else n_seq)  # n_ctx made n_ctx_seq x n_seq_max where the two differ
    batch_req = server_embedding_batch(DEFAULT_N_BATCH, n_ubatch_req) if server and embeddings else DEFAULT_N_BATCH
    n_batch = min(batch_req, n_ctx_req) if causal else batch_req  # capped by the unpadded request
    return ContextGeometry(
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_stream=1 if unified else n_seq,
        n_seq=max(1, n_seq),
        n_ubatch=min(n_ubatch_req, n_batch),
        swa_seqs=n_seq if unified else 1,
        swa_full=swa_full,
        flash_attention=flash_attention,
        quantized_k=quantized_k,
        quantized_v=quantized_v,
        rs_snapshots=rs_snapshots,
        k_type=k_type,
        v_type=v_type,
        n_batch=n_batch,
        nextn_width=nextn_width,
        draft_tokens=draft_tokens,
        # llama-server's params.n_batch is the request's, before llama_context caps it by the context: the cap
        # differs only where n_ctx < n_batch, where the graph's tokens (at most n_ctx) cap the outputs anyway
        n_outputs_max=server_outputs_max(max(1, n_seq), batch_req, draft_tokens, pooled_limit(embeddings, pooling))
        if server
        else 0,
        embeddings=embeddings,
        embd_width=embd_width if embeddings else 0,
        memoryless=memoryless,
        pooling=POOLING_TYPES[pooling] if embeddings and pooling is not None else None,
        warmup_tokens=warmup_tokens,
        draft=draft,
        flash_attention_auto=flash_attention and auto_probed(flash_attention_auto, quantized_v),
    )


def auto_probed(flash_attention_auto: bool, quantized_v: bool) -> bool:
    """Whether flash attention asked as auto is left to resolve_fused_ops' probe: llama_init_from_model enables it
    outright for a quantized V cache (which requires it)."""
    return flash_attention_auto and not quantized_v


def context_geometry(
    tokens_per_stream: int,
    streams: int,
    causal: bool = True,
    *,
    n_ubatch: int = DEFAULT_N_UBATCH,
    unified: bool = False,
    flash_attention: bool = True,
    quantized_k: bool = False,
    quantized_v: bool = False,
    swa_full: bool = False,
    rs_snapshots: int = 0,
    k_type: str = "",
    v_type: str = "",
) -> ContextGeometry:
    """memfit's workload as llama.cpp sees it: n_ctx = T*S, n_seq_max = S, the requested n_ubatch, unified cache,
    flash attention, full-size SWA cache and rollback snapshots, and llama.cpp's defaults for the rest."""
    return llama_geometry(
        tokens_per_stream * streams,
        streams,
        n_ubatch,
        unified=unified,
        swa_full=swa_full,
        causal=causal,
        flash_attention=flash_attention,
        quantized_k=quantized_k,
        quantized_v=quantized_v,
        rs_snapshots=rs_snapshots,
        k_type=k_type,
        v_type=v_type,
    )
