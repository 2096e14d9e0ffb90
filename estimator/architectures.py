"""A model's layout from its GGUF metadata, by the rules of `arch_rules.RULES`.

Each function mirrors one of llama.cpp's per-layer decisions (llama-hparams.cpp, src/models/<arch>.cpp,
llama_model::create_memory) and is named for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from gguf import Keys

from memfit.estimator.arch_rules import (RULES, ArchRule, ArrayLength, Indexer, KvLayers, Memory, Mla, Pattern, Selector,
                                         Window, WindowWhen)
from memfit.estimator.errors import EvidenceError
from memfit.estimator.hparams import HParams
from memfit.estimator.layout import AttentionLayer, KvCache, Layout, RecurrentLayer
from memfit.estimator.vocabulary import Limit
from memfit.readers.gguf_header import SkippedArray

ATTN = Keys.Attention
RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"
INDEXER_TYPES = "{arch}.attention.indexer.types"
PLE_LAYERS = "{arch}.ple.layers"


class Layers:
    """The per-layer hyperparameters every rule reads (llama_model_base::load_hparams)."""

    def __init__(self, hp: HParams) -> None:
        self.hp = hp
        self.n_all = hp.n_layer  # block_count, NextN/MTP layers included
        self.n_trunk = self.n_all - hp.optional_int(Keys.LLM.NEXTN_PREDICT_LAYERS, 0)
        if self.n_trunk < 0:
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, "nextn_predict_layers exceeds block_count")
        self.n_embd = hp.require_int(Keys.LLM.EMBEDDING_LENGTH)
        self.heads = hp.per_layer(ATTN.HEAD_COUNT, default=0)
        # head_count_kv defaults to head_count, layer by layer
        self.heads_kv = hp.per_layer(ATTN.HEAD_COUNT_KV) if hp.has(ATTN.HEAD_COUNT_KV) else self.heads
        self.ff = hp.per_layer(Keys.LLM.FEED_FORWARD_LENGTH, default=0)
        # n_embd_head_k/v: key_length / value_length, else n_embd / n_head(0); *_swa on sliding layers
        fallback = self.n_embd // self.heads[0] if self.n_all and self.heads[0] else 0
        self.head_k = hp.optional_int(ATTN.KEY_LENGTH, fallback)
        self.head_v = hp.optional_int(ATTN.VALUE_LENGTH, fallback)
        self.head_k_swa = hp.optional_int(ATTN.KEY_LENGTH_SWA, self.head_k)
        self.head_v_swa = hp.optional_int(ATTN.VALUE_LENGTH_SWA, self.head_v)

    def v_width(self, il: int, swa: bool) -> int:
        return self.heads_kv[il] * (self.head_v_swa if swa else self.head_v)

    def k_width(self, il: int, swa: bool) -> int:
        return self.heads_kv[il] * (self.head_k_swa if swa else self.head_k)

    def head_dims(self, il: int, swa: bool) -> tuple[int, int]:
        return (self.head_k_swa, self.head_v_swa) if swa else (self.head_k, self.head_v)


def recurrent_flags(rule: ArchRule, layers: Layers) -> tuple[bool, ...]:
    """is_recr(il) for the trunk layers (NextN layers are never recurrent)."""
    recurrence = rule.recurrence
    if recurrence is None:
        return (False,) * layers.n_all
    trunk = range(layers.n_trunk)
    if recurrence.layers is Selector.ALL:
        flags = [True for _ in trunk]
    elif recurrence.layers is Selector.NO_KV_HEADS:
        flags = [layers.heads_kv[il] == 0 for il in trunk]
    elif recurrence.layers is Selector.NO_KV_HEADS_NO_FFN:
        flags = [layers.heads_kv[il] == 0 and layers.ff[il] == 0 for il in trunk]
    else:  # ARRAY_OR_INTERVAL: attention.recurrent_layers[], else (il + 1) % full_attention_interval != 0
        explicit = layers.hp.per_layer_flags(RECURRENT_LAYERS)
        if explicit is not None:
            flags = list(explicit[: layers.n_trunk])
        else:
            interval = layers.hp.optional_int(Keys.LLM.FULL_ATTENTION_INTERVAL, recurrence.interval)
            if interval == 0:
                raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, "full_attention_interval is 0")
            flags = [(il + 1) % interval != 0 for il in trunk]
    return tuple(flags) + (False,) * (layers.n_all - layers.n_trunk)


def period_flags(n_trunk: int, n_all: int, period: int, dense_first: bool) -> tuple[bool, ...]:
    """llama_hparams::set_swa_pattern: period 0 slides every layer; the last (or first) of each period is full."""
    if dense_first:
        flags = [period == 0 or il % period != 0 for il in range(n_trunk)]
    else:
        flags = [period == 0 or il % period < period - 1 for il in range(n_trunk)]
    return tuple(flags) + (False,) * (n_all - n_trunk)


def window_size(window: Window, layers: Layers) -> int | None:
    """n_swa, or None when this model does not slide."""
    size = layers.hp.optional_int(ATTN.SLIDING_WINDOW)
    if window.when is WindowWhen.KEY_POSITIVE and not size:
        return None
    if window.when is WindowWhen.KEY_NOT_ZERO and size == 0:
        return None
    if window.when is WindowWhen.TRUNK_OF_64 and layers.n_trunk != 64:
        return None
    if window.forced_size is not None:
        return window.forced_size
    if size is None:
        size = window.default_size
    if size is None:
        raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, "attention.sliding_window is missing")
    return size


def pattern_array(window: Window, layers: Layers, value: tuple) -> tuple[bool, ...]:
    """A per-layer pattern, checked for the length this arch's loader demands."""
    expected = {ArrayLength.TRUNK: layers.n_trunk, ArrayLength.ALL: layers.n_all}.get(window.array_length)
    if (expected is not None and len(value) != expected) or len(value) > layers.n_all:
        raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"llama.cpp refuses a sliding_window_pattern of {len(value)}"
                                                      f" entries for {layers.n_trunk} layers")
    return tuple(bool(v) for v in value) + (False,) * (layers.n_all - len(value))


def sliding_flags(window: Window, layers: Layers, recurrent: tuple[bool, ...]) -> tuple[bool, ...]:
    """is_swa(il), by the arch's pattern source."""
    if window.pattern is Pattern.ATTENTION_LAYERS:
        return tuple(not r for r in recurrent)
    key = layers.hp.key(ATTN.SLIDING_WINDOW_PATTERN)
    value = layers.hp.metadata.get(key)
    if value is None and window.pattern_required:
        raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"llama.cpp refuses to load the model without {key}")
    if isinstance(value, SkippedArray):
        raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"{key} is longer than any model")
    if window.pattern is not Pattern.PERIOD and isinstance(value, tuple):
        return pattern_array(window, layers, value)
    if window.pattern is Pattern.ARRAY:  # a scalar is broadcast: non-zero slides every layer
        return (bool(value),) * layers.n_all
    # a scalar period; an array here is ignored by llama.cpp's scalar reader and the default applies
    period = value if isinstance(value, int) and not isinstance(value, bool) else window.period
    return period_flags(layers.n_trunk, layers.n_all, period, window.dense_first)


def kv_layer_flags(rule: ArchRule, layers: Layers, recurrent: tuple[bool, ...]) -> tuple[bool, ...]:
    """The layers create_memory's filter keeps in the KV cache, before shared-KV reuse."""
    kind = rule.kv_layers
    flags = []
    for il in range(layers.n_all):
        trunk = il < layers.n_trunk
        keep = {
            KvLayers.ALL: True,
            KvLayers.TRUNK: trunk,
            KvLayers.NOT_RECURRENT: not recurrent[il],
            KvLayers.TRUNK_NOT_RECURRENT: trunk and not recurrent[il],
            KvLayers.NOT_RECURRENT_NO_FFN: not recurrent[il] and layers.ff[il] == 0,
        }[kind]
        flags.append(keep)
    start = kv_from_start(rule, layers)
    return tuple(keep and il < start for il, keep in enumerate(flags))


def kv_from_start(rule: ArchRule, layers: Layers) -> int:
    """has_kv(il) = il < n_layer_kv_from_start: later layers reuse an earlier layer's cache."""
    if rule.kv_from_start is None:
        return layers.n_all
    if isinstance(rule.kv_from_start, int):
        return min(rule.kv_from_start, layers.n_all)
    shared = layers.hp.optional_int("{arch}." + rule.kv_from_start, 0)
    return max(0, layers.n_all - shared)


def is_mla(rule: ArchRule, hp: HParams) -> bool:
    """llama_hparams::is_mla: both key_length_mla and value_length_mla are set."""
    if rule.mla is Mla.ALWAYS:
        return True
    return rule.mla is Mla.IF_KEYS and bool(hp.optional_int(ATTN.KEY_LENGTH_MLA)) and \
        bool(hp.optional_int(ATTN.VALUE_LENGTH_MLA))


def state_widths(rule: ArchRule, layers: Layers) -> RecurrentLayer:
    """llama_hparams::n_embd_r() / n_embd_s(): the first family whose key is present wins."""
    hp = layers.hp
    wkv = hp.optional_int(Keys.WKV.HEAD_SIZE, 0)
    l_cache = hp.optional_int(Keys.ShortConv.L_CACHE, 0)
    kda = hp.optional_int(Keys.KDA.HEAD_DIM, 0)
    d_conv = hp.optional_int(Keys.SSM.CONV_KERNEL, 0)
    d_inner = hp.optional_int(Keys.SSM.INNER_SIZE, 0)
    d_state = hp.optional_int(Keys.SSM.STATE_SIZE, 0)
    reads_groups = rule.recurrence is not None and rule.recurrence.reads_group_count
    groups = hp.optional_int(Keys.SSM.GROUP_COUNT, 0) if reads_groups else 0
    n_head = layers.heads[0] if layers.n_all else 0
    if wkv:  # RWKV: token shift, and a head_size x n_embd WKV state
        return RecurrentLayer(hp.optional_int(Keys.LLM.TOKEN_SHIFT_COUNT, 2) * layers.n_embd, layers.n_embd * wkv)
    if l_cache:  # LFM2 short convolution
        return RecurrentLayer((l_cache - 1) * layers.n_embd, 0)
    if kda:  # Kimi delta attention: three short convs over q, k, v
        return RecurrentLayer(3 * (d_conv - 1 if d_conv else 3) * n_head * kda, kda * kda * n_head)
    r = (d_conv - 1 if d_conv else 0) * (d_inner + 2 * groups * d_state)
    if rule.recurrence is not None and rule.recurrence.lightning_attention:  # MiniMax-01
        head = layers.head_k or (layers.n_embd // n_head if n_head else 0)
        return RecurrentLayer(r, head * head * n_head)
    return RecurrentLayer(r, d_state * d_inner)  # Mamba / Mamba-2 / gated delta-net


def _kv_caches(rule: ArchRule, layers: Layers, recurrent: tuple[bool, ...], sliding: tuple[bool, ...],
               size: int | None) -> tuple[KvCache, ...]:
    hp = layers.hp
    mla = is_mla(rule, hp)
    result = []
    for il, keep in enumerate(kv_layer_flags(rule, layers, recurrent)):
        if not keep:
            continue
        swa = sliding[il]
        result.append(AttentionLayer(k_width=layers.k_width(il, swa), v_width=0 if mla else layers.v_width(il, swa),
                                     window=size if swa else None, has_v=not mla))
    caches = [KvCache(tuple(result), _v_width_max(layers, sliding))]
    if rule.indexer is not None:
        caches.append(indexer_cache(rule.indexer, layers, len(result)))
    return tuple(caches)


GLM_DSA_SPARSE_CONTEXT = 1048576  # GLM-5.2: from this context length on, the indexer runs on a fixed subset


def indexer_cache(indexer: Indexer, layers: Layers, attention_layers: int) -> KvCache:
    """The indexer's own cache: one head of indexer.key_length K per cell (llama-kv-cache-dsa.cpp, -hybrid-idx.cpp)."""
    hp = layers.hp
    width = hp.require_int(ATTN.Indexer.KEY_LENGTH)
    if indexer is Indexer.QWEN4EXP:  # beside every attention layer, with a V of head_dim_v
        return KvCache((AttentionLayer(width, layers.head_v),) * attention_layers, layers.head_v)
    count = layers.n_trunk
    if indexer is Indexer.GLM_DSA:
        types = hp.metadata.get(hp.key(INDEXER_TYPES))
        if isinstance(types, tuple):
            count = sum(1 for t in types[: layers.n_trunk] if t)
        elif (hp.optional_int(Keys.LLM.CONTEXT_LENGTH, 0) or 0) >= GLM_DSA_SPARSE_CONTEXT:
            count = sum(1 for il in range(layers.n_trunk) if il < 3 or il % 4 == 2)
    return KvCache((AttentionLayer(width, 0, has_v=False),) * count)


def _v_width_max(layers: Layers, sliding: tuple[bool, ...]) -> int:
    """n_embd_v_gqa_max over every layer: the V row width of a transposed (flash-attention-off) cache."""
    return max((layers.v_width(il, sliding[il]) for il in range(layers.n_all)), default=0)


def derive_layout(metadata: Mapping, arch: str) -> Layout:
    """The layout of a model of architecture `arch`; EvidenceError when memfit has no rule or the metadata is short."""
    rule = RULES.get(arch)
    if rule is None:
        raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"no layout rule for architecture {arch!r}")
    hp = HParams(metadata, arch)
    if rule.memory is Memory.NONE:
        return Layout((), (), has_kv_cache=False, note=f"{arch}: a non-causal model, llama.cpp allocates no memory",
                      causal=False)
    if hp.has(PLE_LAYERS):
        raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"{arch}: per-layer-embedding state is not modelled")
    layers = Layers(hp)
    recurrent = recurrent_flags(rule, layers)
    size = window_size(rule.window, layers) if rule.window else None
    sliding = sliding_flags(rule.window, layers, recurrent) if size is not None else (False,) * layers.n_all
    caches = () if rule.memory is Memory.RECURRENT else _kv_caches(rule, layers, recurrent, sliding, size)
    width = state_widths(rule, layers) if rule.recurrence else None
    states = tuple(width for il in range(layers.n_trunk) if recurrent[il]) if width else ()
    attention = tuple(layer for cache in caches for layer in cache.layers)
    head_dims = tuple(sorted({layers.head_dims(il, sliding[il]) for il in range(layers.n_trunk)}))
    return Layout(caches=caches, recurrent=states, has_kv_cache=rule.memory is not Memory.RECURRENT,
                  note=_describe(arch, attention, states), head_dims=head_dims, same_cache_types=is_mla(rule, hp))


def _describe(arch: str, attention: tuple[AttentionLayer, ...], states: tuple[RecurrentLayer, ...]) -> str:
    holding = [a for a in attention if a.k_width]
    words = [f"{arch}: {len(holding)} KV layers"]
    sliding = [a.window for a in holding if a.window is not None]
    if sliding:
        words.append(f"{len(sliding)} of them sliding over {sliding[0]} tokens")
    if holding and not any(a.has_v for a in holding):
        words.append("MLA: K holds the latent and rope key, no V")
    if states:
        words.append(f"{len(states)} recurrent layers")
    return ", ".join(words)
