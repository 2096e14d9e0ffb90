"""A model's layout from its GGUF metadata, by the rules of `arch_rules.RULES`.

The per-architecture decisions (llama-hparams.cpp, src/models/<arch>.cpp, llama_model::create_memory) are the
rule functions an entry names; this module applies them the way llama.cpp's loader and create_memory do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from memfit.estimator.arch_rules import ATTN_Q_NORM, RULES, ArchRule, Graph, Memory, Window, ffn_op
from memfit.estimator.errors import EvidenceError
from memfit.estimator.hparams import HParams, Layers, TensorShapes, TensorTypes, key_name
from memfit.estimator.layout import (
    AttentionLayer,
    DenseOut,
    GraphLayer,
    GraphShape,
    KvCache,
    Layout,
    Lightning,
    Mixer,
    RankHead,
    RecurrentLayer,
    Routing,
    Ssm,
    SwaType,
)
from memfit.estimator.moe_rules import expert_width, layer_tensor
from memfit.estimator.pooling import rank_refusal
from memfit.estimator.special_tokens import warmup_tokens
from memfit.estimator.vocabulary import Limit
from memfit.gguf_constants import MODEL_TENSOR, TENSOR_NAMES, Keys

ATTN = Keys.Attention
# llama_model_base::create_tensor_qkv: Q, K and V in one attn_qkv, where the file has it
ATTN_QKV = TENSOR_NAMES[MODEL_TENSOR.ATTN_QKV] + ".weight"
ATTN_SINKS = TENSOR_NAMES[MODEL_TENSOR.ATTN_SINKS] + ".weight"  # build_attn's sinks, where a layer holds them

SSM_MIXERS = (Mixer.MAMBA2, Mixer.MAMBA, Mixer.PLAMO2)  # the mixers built from llama_hparams' ssm_* sizes


def layers_of(
    rule: ArchRule, hp: HParams, tensors: TensorShapes | None = None, types: TensorTypes | None = None
) -> Layers:
    """The per-layer hyperparameters, with the layers the arch's rule marks recurrent."""
    return Layers(hp, rule.recurrence.layers if rule.recurrence else None, tensors, types)


def sliding_window(window: Window | None, layers: Layers) -> tuple[int | None, tuple[bool, ...]]:
    """(n_swa, which layers slide) under the architecture's window rule; (None, none) where the model does not
    slide (a model without a cache masks by them all the same: gemma-embedding's swa_type SYMMETRIC)."""
    size = window_size(window, layers) if window is not None else None
    if window is None or size is None:
        return None, (False,) * layers.n_all
    return size, window.pattern(window, layers)


def window_size(window: Window, layers: Layers) -> int | None:
    """n_swa, or None when this model does not slide."""
    size = layers.hp.n_swa
    if not window.when(layers, size):
        return None
    if window.forced_size is not None:
        return window.forced_size
    if size is None:
        size = window.default_size
    if size is None:
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{key_name(ATTN.SLIDING_WINDOW)} is missing")
    return size


def kv_layer_flags(rule: ArchRule, layers: Layers) -> tuple[bool, ...]:
    """The layers create_memory's filter keeps in the KV cache, less those that reuse an earlier layer's KV
    (has_kv(il) = il < n_layer_kv_from_start)."""
    start = rule.kv_from_start(layers)
    return tuple(rule.kv_layers(layers, il) and il < start for il in range(layers.n_all))


def state_widths(rule: ArchRule, layers: Layers) -> RecurrentLayer:
    """llama_hparams::n_embd_r() / n_embd_s(): the first family whose key is present wins."""
    hp = layers.hp
    wkv = hp.wkv_head_size
    l_cache = hp.n_shortconv_l_cache
    kda = hp.n_embd_head_kda
    d_conv = hp.ssm_d_conv
    d_inner = hp.ssm_d_inner
    d_state = hp.ssm_d_state
    reads_groups = rule.recurrence is not None and rule.recurrence.reads_group_count
    groups = hp.ssm_n_group if reads_groups else 0
    n_head = layers.heads[0] if layers.n_all else 0
    if wkv:  # RWKV: token shift, and a head_size x n_embd WKV state
        return RecurrentLayer(hp.token_shift_count * layers.n_embd, layers.n_embd * wkv)
    if l_cache:  # LFM2 short convolution
        return RecurrentLayer((l_cache - 1) * layers.n_embd, 0)
    if kda:  # Kimi delta attention: three short convs over q, k, v
        return RecurrentLayer(3 * (d_conv - 1 if d_conv else 3) * n_head * kda, kda * kda * n_head)
    r = (d_conv - 1 if d_conv else 0) * (d_inner + 2 * groups * d_state)
    if rule.recurrence is not None and rule.recurrence.lightning_attention:  # MiniMax-01
        head = layers.head_k or (layers.n_embd // n_head if n_head else 0)
        return RecurrentLayer(r, head * head * n_head)
    return RecurrentLayer(r, d_state * d_inner)  # Mamba / Mamba-2 / gated delta-net


def _kv_caches(rule: ArchRule, layers: Layers, sliding: tuple[bool, ...], size: int | None) -> tuple[KvCache, ...]:
    mla = rule.mla(layers.hp)
    result, ids = [], []
    for il, keep in enumerate(kv_layer_flags(rule, layers)):
        if not keep:
            continue
        ids.append(il)
        swa = sliding[il]
        result.append(
            AttentionLayer(
                k_width=layers.k_width(il, swa),
                v_width=0 if mla else layers.v_width(il, swa),
                window=size if swa else None,
                has_v=not mla,
            )
        )
    caches = [KvCache(tuple(result), _v_width_max(layers, sliding), tuple(ids))]
    if rule.indexer is not None:
        caches.append(rule.indexer(layers, tuple(ids)))
    if rule.compression is not None:
        caches.extend(rule.compression.caches(layers))
    return tuple(caches)


def _sinks(graph: Graph, layers: Layers, il: int) -> bool:
    # build_attn's sinks: model.layers[il].attn_sinks, required (openai-moe.cpp) or null where the file has none
    # (mimo2.cpp: TENSOR_NOT_REQUIRED)
    return graph.sinks or graph.sinks_where_present and layer_tensor(layers, ATTN_SINKS, il) is True


def _v_width_max(layers: Layers, sliding: tuple[bool, ...]) -> int:
    """n_embd_v_gqa_max over every layer: the V row width of a transposed (flash-attention-off) cache."""
    return max((layers.v_width(il, sliding[il]) for il in range(layers.n_all)), default=0)


def derive_layout(
    metadata: Mapping,
    arch: str,
    tensors: TensorShapes | None = None,
    n_vocab: int | None = None,
    types: TensorTypes | None = None,
) -> Layout:
    """The layout of a model of architecture `arch` (`tensors`: its file's tensors and shapes, `types` their ggml
    types, `n_vocab` its vocabulary size, where known); EvidenceError when memfit has no rule or the metadata is
    short."""
    rule = RULES.get(arch)
    if rule is None:
        raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"no layout rule for architecture {arch!r}")
    hp = HParams(metadata, arch)
    layers = layers_of(rule, hp, tensors, types)
    size, sliding = sliding_window(rule.window, layers)
    if rule.memory is Memory.NONE:
        return Layout(
            (),
            (),
            has_kv_cache=False,
            note=f"{arch}: a non-causal model, llama.cpp allocates no memory",
            causal=False,
            memory=False,
            graph=graph_shape(rule, layers, sliding, size, None, n_vocab),
            embd_width=embd_width(arch, hp),
            pooling=hp.pooling_type,
            pooling_named=hp.has(HParams.pooling_type),
            rank_refusal=rank_refusal(metadata, n_vocab),
            warmup_tokens=warmup_tokens(metadata, n_vocab),
        )
    window = rule.window
    caches = () if rule.memory is Memory.RECURRENT else _kv_caches(rule, layers, sliding, size)
    width = state_widths(rule, layers) if rule.recurrence else None
    history = rule.recurrence.history if rule.recurrence else None
    states = tuple(
        replace(width, p_elements=history(layers, il)) if history else width
        for il in range(layers.n_trunk)
        if width and layers.recurrent[il]
    )
    if rule.compression is not None:
        states += rule.compression.states(layers)
    attention = tuple(layer for cache in caches for layer in cache.layers)
    head_dims = tuple(sorted({layers.head_dims(il, sliding[il]) for il in range(layers.n_trunk)}))
    return Layout(
        caches=caches,
        recurrent=states,
        has_kv_cache=rule.memory is not Memory.RECURRENT,
        note=_describe(arch, attention, states),
        head_dims=head_dims,
        same_cache_types=rule.mla(hp),
        causal=hp.causal_attn,  # llama_model_base::load_hparams: hparams.causal_attn
        graph=graph_shape(rule, layers, sliding, size, width, n_vocab),
        swa_type=window.swa_type if window is not None else SwaType.STANDARD,
        cell_ext=rule.cell_positions(hp),
        streams_per_sequence=rule.compression is not None,
        rs_rollback=rule.rs_rollback,
        nextn_width=nextn_width(arch, hp),
        nextn_layers=hp.nextn_predict_layers,
        embd_width=embd_width(arch, hp),
        pooling=hp.pooling_type,
        pooling_named=hp.has(HParams.pooling_type),
        ollama_kv_row=ollama_kv_row(hp),
        rank_refusal=rank_refusal(metadata, n_vocab),
        decode_abort=rule.decode_abort(layers, sliding),
    )


def ollama_kv_row(hp: HParams) -> int:
    """Ollama's PredictServerVRAM KV estimate a token (llm/llama_server.go): 2 (K and V) x block_count x
    HeadCountKVMin (the key's least entry, 1 where the key is absent or the least is 0) x headDim (embedding_length
    / HeadCountMax, the key's largest entry, 1 where absent) x 2 bytes (f16)."""
    heads = max(hp.n_head_arr) if hp.has(HParams.n_head_arr) and hp.n_head_arr else 1
    kv = min(hp.n_head_kv_arr) if hp.has(HParams.n_head_kv_arr) and hp.n_head_kv_arr else 1
    head_dim = hp.n_embd // heads if heads else 0
    return 2 * hp.n_layer * max(kv, 1) * head_dim * 2


# load_arch_hparams of deepseek4 and qwen4exp: n_embd_out_impl = hyper_connection.count * n_embd (the residual
# streams side by side), whatever embedding_length_out says
HC_OUTPUT = frozenset({"deepseek4", "qwen4exp"})


def nextn_width(arch: str, hp: HParams) -> int:
    """hparams.n_embd_out() for a model with NextN/MTP layers: the floats of one row of nextn embeddings
    llama_context::output_reserve keeps per batch token once llama-server's draft-mtp sets them on the target; 0 for
    a model without NextN layers."""
    return embd_width(arch, hp) if hp.nextn_predict_layers else 0


def embd_width(arch: str, hp: HParams) -> int:
    """llama_hparams::n_embd_out(): embedding_length_out, else n_embd; the residual streams' width where HC_OUTPUT."""
    n_embd = hp.required(HParams.n_embd)
    if arch in HC_OUTPUT:
        return hp.required(HParams.n_hc) * n_embd
    return hp.n_embd_out_impl or n_embd


def graph_shape(
    rule: ArchRule,
    layers: Layers,
    sliding: tuple[bool, ...],
    size: int | None,
    state: RecurrentLayer | None,
    n_vocab: int | None,
) -> GraphShape | None:
    """The blocks of the graph llama.cpp reserves (src/models/<arch>.cpp), over the trunk (NextN/MTP layers are
    not in it), or None when the architecture's graph is not derived (or needs the tensor names, unknown here)."""
    graph, hp = rule.graph, layers.hp
    if graph is None or graph.reads_tensors and layers.tensors is None:
        return None
    if graph.dsv4 is not None:
        return _dsv4_shape(graph, layers, size, n_vocab)
    mla = rule.mla(hp)
    low_rank = graph.low_rank_kv and not mla  # the latent decompressed (deepseek2 without *_mla keys, minicpm3)
    kv_lora = hp.required(HParams.n_lora_kv) if mla or low_rank else 0  # llama_model_deepseek2, _minicpm3
    q_lora = graph.q_lora(hp, n_vocab) if kv_lora else 0
    n_expert = hp.n_expert
    recurrent_in = graph.recurrent_in(layers) if rule.recurrence else 0
    mamba1 = graph.mixer is Mixer.MAMBA
    ssm = (
        Ssm(  # build_mamba2_layer's / build_mamba_layer's / build_plamo2_mamba_layer's sizes
            hp.ssm_d_inner,
            hp.ssm_d_state,
            0 if mamba1 else hp.ssm_n_group,
            hp.ssm_dt_rank,
            hp.ssm_d_conv,
            norms=mamba1 and graph.ssm_norms(hp),
            norm_weights=mamba1 and graph.ssm_norm_weights,
            grouped_norm=graph.ssm_norm(layers),
        )
        if rule.recurrence and graph.mixer in SSM_MIXERS
        else None  # the ssm.* keys are read by the Mamba architectures' loaders only
    )
    state_elements = state.r_elements + state.s_elements if state else 0
    indexer = graph.dsa(layers) if graph.dsa else None
    if graph.dsa and indexer is None:  # the lightning indexer's graph is not rebuilt (llama.cpp aborts building it)
        return None
    lightning = None
    if graph.mixer is Mixer.LIGHTNING and state and layers.head_k == layers.head_v:  # minimax-01.cpp asserts K == V
        lightning = Lightning(layers.heads[0], layers.head_k, state.r_elements)
    rope = hp.rope_finetuned if graph.rope_switch else graph.rope
    blocks, kv_start = [], rule.kv_from_start(layers)
    for il in range(layers.n_all if graph.nextn_blocks else layers.n_trunk):
        recurrent = layers.recurrent[il]
        attends = (
            (il >= layers.n_trunk or rule.kv_layers(layers, il))  # a NextN block attends over the MTP draft's cache
            and layers.heads[il] > 0
            and layers.heads_kv[il] > 0
            and (not recurrent or rule.parameters.attention_beside_ssm)
        )
        head_k, head_v = layers.head_dims(il, sliding[il])
        if mla:  # the heads before absorption (key_length_mla, value_length_mla); the cache holds latent + rope
            head_k, head_v = hp.required(HParams.n_embd_head_k_mla), hp.required(HParams.n_embd_head_v_mla)
        moe = n_expert > 0 and graph.moe_layers(layers, il)
        routing = graph.routing(layers, il, n_vocab) if moe else Routing()
        if routing is None:  # build_moe_ffn's call in this block is not rebuilt
            return None
        dense_ff = 0 if moe or (recurrent and graph.ffn_in_recurrence) else layers.ff[il]
        blocks.append(
            GraphLayer(
                n_head=layers.heads[il] if attends else 0,
                n_head_kv=layers.heads_kv[il] if attends else 0,
                head_k=head_k if attends else 0,
                head_v=head_v if attends else 0,
                window=size if sliding[il] else None,
                n_ff=dense_ff,
                gated=rule.parameters.gated_ffn,
                n_expert=n_expert if moe else 0,
                n_expert_used=hp.n_expert_used if moe else 0,
                n_ff_exp=expert_width(layers, il) if moe else 0,
                recurrent_in=recurrent_in if recurrent else 0,
                recurrent_state=state_elements if recurrent else 0,
                fused_qkv=attends
                and (graph.fused_qkv or graph.qkv_where_present and layer_tensor(layers, ATTN_QKV, il) is True),
                kv_lora=kv_lora if mla and attends else 0,
                q_lora=q_lora if attends else 0,
                n_rot=_rope_part(hp, layers, kv_lora, mla) if kv_lora and attends else 0,
                ssm=ssm if recurrent else None,
                wkv=graph.wkv(layers, il) if recurrent and graph.wkv else None,
                rope=rope and graph.roped(layers, sliding, il) or not attends,
                qk_layer_norm=attends and graph.qk_layer_norm(layers),
                qk_norm=attends
                and (graph.qk_norm or graph.qk_norm_where_present and layer_tensor(layers, ATTN_Q_NORM, il) is True),
                fused_up=graph.fused_up and dense_ff > 0,
                wo_only=graph.deci_blocks and layers.heads[il] > 0 and layers.heads_kv[il] == 0,
                activation=ffn_op(graph.activation, rule.parameters.gated_ffn),
                low_rank_kv=kv_lora if low_rank and attends else 0,
                routing=routing,
                attn_gate=graph.attn_gate(layers, il) if attends else 0,
                clamped_ffn=graph.ffn_clamp(layers, il),
                qk_norm_whole=graph.qk_norm_whole and attends,
                v_norm=graph.v_norm and attends,
                kv_shared=attends and il >= kv_start,
                v_from_k=attends and graph.v_from_k(layers, il),
                parallel_residual=graph.parallel_residual(layers, il),
                biases=_biases(layers, il, attends and graph.attn_biases),
                sinks=attends and _sinks(graph, layers, il),
                out_scale=graph.out_scale(layers, il),
            )
        )
    shared: dict[GraphLayer, GraphLayer] = {}  # equal layers held once (a model keeps its shape while it is served)
    return GraphShape(
        n_embd=layers.n_embd,
        layers=tuple(shared.setdefault(block, block) for block in blocks[: layers.n_trunk]),
        nextn=tuple(blocks[layers.n_trunk :]),
        logits=graph.logits,
        cache_attention=graph.cache_attention,
        hidden_output=graph.hidden_output,
        node_for_node=graph.node_for_node,
        bert_block=graph.bert_block,
        mixer=graph.mixer if rule.recurrence else Mixer.NONE,
        learned_positions=rule.parameters.position_embeddings,
        layer_norm=graph.layer_norm or graph.layer_norm_when(hp),
        parallel_block=graph.parallel_block,
        kv_from_start=kv_start,
        builder=graph.builder,
        deci_blocks=graph.deci_blocks,
        residual_first=graph.residual_first,
        ffn_residual_first=graph.ffn_residual_first,
        iswa=size is not None,
        head_scale=graph.head_scale,
        headless_embeddings=graph.headless_embeddings,
        pre_norm=graph.pre_norm,
        normed_hidden_output=graph.normed_hidden_output,
        attn_temperature=graph.attn_temperature,
        gate_op=graph.gate_op,
        per_layer_embd=hp.n_embd_per_layer if graph.per_layer_embd else 0,
        delta_net=graph.delta_net(layers) if graph.delta_net else None,
        indexer=indexer,
        lightning=lightning,
        hyper=graph.hyper(layers) if graph.hyper else None,
        post_norms=graph.post_norms,
        attn_post_norm_first=graph.attn_post_norm_first,
        post_norm_pins=graph.post_norm_pins,
        embd_norm=graph.embd_norm,
        router_from_input=graph.router_from_input,
        embedding_scale=graph.embedding_scale(hp),
        rs_rollback=rule.rs_rollback,
        pooling=hp.pooling_type,
        rank_head=rank_head(hp.arch, layers.tensors),
        dense_out=dense_out(layers.tensors),
    )


# llm_graph_context::build_pooling's RANK case: modern-bert pools by mean first and applies gelu, qwen3 and qwen3vl
# end with a soft_max
MEAN_FIRST_HEAD = frozenset({"modern-bert"})
SOFTMAX_HEAD = frozenset({"qwen3", "qwen3vl"})


# the weights whose bias a builder adds after them (build_qkv: wq_b, wk_b, wv_b where the file holds them; the builders'
# wo_b, up_b, gate_b, down_b and LayerNorm biases, which their loaders create): each loaded where the file holds it
BIASED = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_gate", "ffn_down", "attn_norm", "ffn_norm")
ATTN_BIASED = BIASED[:4]


def _biases(layers: Layers, il: int, required: bool) -> frozenset[str]:
    """The layer's weights whose bias tensor the graph adds: the attention's where the architecture requires them
    (`required`), and each one whose bias the file holds."""
    held = {name for name in BIASED if layer_tensor(layers, f"blk.{{bid}}.{name}.bias", il)}
    return frozenset(held | set(ATTN_BIASED if required else ()))


def rank_head(arch: str, tensors: TensorShapes | None) -> RankHead:
    """build_pooling's classification head as the file holds it (cls, cls_b, cls_norm, cls_out, cls_out_b, each
    created TENSOR_NOT_REQUIRED by the architectures that have one: bert, jina-bert-v2/v3, modern-bert, neo-bert,
    nomic-bert(-moe), qwen3, qwen3vl); no head where the tensors are unknown (a catalog entry)."""
    found = tensors or {}
    return RankHead(
        cls_rows=output_rows(found.get("cls.weight")),
        cls_bias="cls.bias" in found,
        cls_norm="cls.norm.weight" in found,
        out_rows=output_rows(found.get("cls.output.weight")),
        out_bias="cls.output.bias" in found,
        mean_first=arch in MEAN_FIRST_HEAD,
        softmax=arch in SOFTMAX_HEAD,
    )


DENSE_2 = TENSOR_NAMES[MODEL_TENSOR.DENSE_2_OUT]
DENSE_3 = TENSOR_NAMES[MODEL_TENSOR.DENSE_3_OUT]


def dense_out(tensors: TensorShapes | None) -> DenseOut:
    """build_dense_out's projections as the file holds them (dense_2, its bias, dense_3: gemma3, gemma-embedding and
    lfm2 create them TENSOR_NOT_REQUIRED); none where the tensors are unknown (a catalog entry)."""
    found = tensors or {}
    return DenseOut(
        dense_2_rows=output_rows(found.get(DENSE_2 + ".weight")),
        dense_2_bias=DENSE_2 + ".bias" in found,
        dense_3_rows=output_rows(found.get(DENSE_3 + ".weight")),
    )


def output_rows(shape: tuple[int, ...] | None) -> int:
    """A matrix weight's output rows, ne[1] (a trailing 1 may be left out); 0 where the file lacks it."""
    return 0 if shape is None else shape[1] if len(shape) > 1 else 1


def _dsv4_shape(graph: Graph, layers: Layers, size: int | None, n_vocab: int | None) -> GraphShape | None:
    """deepseek4.cpp's trunk: every block attends with one K head that is also V (the raw sliding cache's), sinks,
    and routes experts beside its shared ones; the NextN/MTP layers' blocks alike (GraphShape.nextn: graph_mtp builds
    on them); None where the builder asserts or a block's routing is not rebuilt."""
    assert graph.dsv4 is not None
    hp, blocks, dsv4 = layers.hp, [], graph.dsv4(layers)
    if dsv4 is None:
        return None
    for il in range(layers.n_all):
        routing = graph.routing(layers, il, n_vocab)
        if routing is None:
            return None
        head = layers.head_dims(il, True)[0]
        blocks.append(
            GraphLayer(
                n_head=layers.heads[il],
                n_head_kv=1,
                head_k=head,
                head_v=head,
                window=size,
                n_expert=hp.required(HParams.n_expert),
                n_expert_used=hp.required(HParams.n_expert_used),
                n_ff_exp=expert_width(layers, il),
                routing=routing,
                clamped_ffn=graph.ffn_clamp(layers, il),
                sinks=graph.sinks,
            )
        )
    shared: dict[GraphLayer, GraphLayer] = {}
    layer_shapes = tuple(shared.setdefault(block, block) for block in blocks[: layers.n_trunk])
    nextn = tuple(blocks[layers.n_trunk :])
    return GraphShape(
        layers.n_embd, layer_shapes, node_for_node=graph.node_for_node, builder=graph.builder, dsv4=dsv4, nextn=nextn
    )


def _rope_part(hp: HParams, layers: Layers, kv_lora: int, mla: bool) -> int:
    """The rope part of each key head: MLA's key_length less the latent; else llama_hparams::n_rot
    (rope.dimension_count, the key head when absent)."""
    return layers.head_k - kv_lora if mla else layers.head_k if hp.n_rot is None else hp.n_rot


def _describe(arch: str, attention: tuple[AttentionLayer, ...], states: tuple[RecurrentLayer, ...]) -> str:
    holding = [a for a in attention if a.k_width]
    words = [f"{arch}: {len(holding)} KV layers"]
    sliding = [a.window for a in holding if a.window is not None]
    if sliding:
        words.append(f"{len(sliding)} of them sliding over {sliding[0]} tokens")
    ratios = sorted({a.ratio for a in holding if a.ratio})
    if holding and not any(a.has_v for a in holding):
        words.append("K only, no V" if ratios else "MLA: K holds the latent and rope key, no V")
    if ratios:
        compressed = sum(1 for a in holding if a.ratio)
        words.append(f"{compressed} of them compressed (ratios {', '.join(map(str, ratios))})")
    if states:
        words.append(f"{len(states)} {'compressor states' if ratios else 'recurrent layers'}")
    return ", ".join(words)
