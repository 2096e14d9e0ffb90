"""Typed access to a GGUF's hyperparameters, per layer where llama.cpp reads them per layer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, Generic, NamedTuple, TypeVar, overload

from memfit.estimator.errors import EvidenceError
from memfit.estimator.gguf_file import KeyType, SkippedArray, Value
from memfit.estimator.vocabulary import Limit
from memfit.gguf_constants import GGUFValueType as VT
from memfit.gguf_constants import Keys
from memfit.integers import is_int


def key_name(template: str) -> str:
    """A key as messages name it: without its `{arch}.` prefix (Keys.LLM.BLOCK_COUNT -> block_count)."""
    return template.removeprefix("{arch}.")


def file_value(metadata: Mapping[str, Value], arch: str, template: str) -> Value | None:
    """An `<arch>.*` key's value as the file holds it, unchecked (None where absent): for the facts a listing shows
    of any file (its context limit, its vocabulary's size, its MTP blocks), which judge the value themselves instead
    of refusing the file as HParams does."""
    return metadata.get(template.format(arch=arch))


ATTN = Keys.Attention
MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: llama.cpp refuses a block_count above it


class NewerKeys:
    """GGUF keys the llama.cpp the rules mirror (arch_rules.LLAMA_CPP_RELEASE) reads that the pinned gguf package
    (0.19.0) has no `Keys` entry for."""

    RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"  # LLM_KV_ATTENTION_RECURRENT_LAYERS
    INDEXER_TYPES = "{arch}.attention.indexer.types"  # LLM_KV_ATTENTION_INDEXER_TYPES
    PLE_LAYERS = "{arch}.ple.layers"  # LLM_KV_PLE_LAYERS
    KDA_GATE_LOWER_BOUND = "{arch}.kda.gate_lower_bound"  # LLM_KV_KDA_GATE_LOWER_BOUND
    ATTN_RES_BLOCK_SIZE = "{arch}.attn_res.block_size"  # LLM_KV_ATTN_RES_BLOCK_SIZE
    SITU_LINEAR_BETA = "{arch}.activation.situ_linear_beta"  # LLM_KV_ACTIVATION_SITU_LINEAR_BETA
    EXPERT_LATENT_LENGTH = "{arch}.expert_latent_length"  # LLM_KV_EXPERT_LATENT_LENGTH
    COMPRESS_RATIOS = "{arch}.attention.compress_ratios"  # LLM_KV_ATTENTION_COMPRESS_RATIOS
    HC_COUNT = "{arch}.hyper_connection.count"  # LLM_KV_HYPER_CONNECTION_COUNT
    HC_LOW_RANK = "{arch}.hyper_connection.low_rank"  # LLM_KV_HYPER_CONNECTION_LOW_RANK
    PLE_NGRAM_SIZE = "{arch}.ple.ngram_size"  # LLM_KV_PLE_NGRAM_SIZE
    PLE_HEADS_PER_NGRAM = "{arch}.ple.heads_per_ngram"  # LLM_KV_PLE_HEADS_PER_NGRAM
    DENSE_2_FEAT_OUT = "{arch}.dense_2_feat_out"  # LLM_KV_DENSE_2_FEAT_OUT
    DENSE_3_FEAT_IN = "{arch}.dense_3_feat_in"  # LLM_KV_DENSE_3_FEAT_IN
    PLE_CONV_KERNEL = "{arch}.ple.conv_kernel"  # LLM_KV_PLE_CONV_KERNEL
    OUTPUT_GROUP_COUNT = "{arch}.attention.output_group_count"  # LLM_KV_ATTENTION_OUTPUT_GROUP_COUNT
    OUTPUT_LORA_RANK = "{arch}.attention.output_lora_rank"  # LLM_KV_ATTENTION_OUTPUT_LORA_RANK
    HASH_LAYER_COUNT = "{arch}.hash_layer_count"  # LLM_KV_HASH_LAYER_COUNT


# The keys llama.cpp reads from every model's first file, with the type its getter takes
# (llama_model_loader::get_key: GGUFMeta::GKV::get_kv throws on any other type, integer widths included).
GENERAL_KEY_TYPES = {
    Keys.General.ARCHITECTURE: VT.STRING,
    Keys.General.NAME: VT.STRING,
    Keys.General.FILE_TYPE: VT.UINT32,
    Keys.Split.LLM_KV_SPLIT_COUNT: VT.UINT16,
}
# `<arch>.*` keys llama_model_base::load_hparams reads for every architecture
ARCH_KEY_TYPES = {
    Keys.LLM.CONTEXT_LENGTH: VT.UINT32,
    Keys.LLM.EMBEDDING_LENGTH: VT.UINT32,
    Keys.LLM.BLOCK_COUNT: VT.UINT32,
    Keys.LLM.EXPERT_COUNT: VT.UINT32,
    Keys.LLM.EXPERT_USED_COUNT: VT.UINT32,
    Keys.LLM.EXPERT_GROUP_COUNT: VT.UINT32,
    Keys.LLM.EXPERT_GROUP_USED_COUNT: VT.UINT32,
    Keys.LLM.VOCAB_SIZE: VT.UINT32,
    Keys.Rope.SCALING_FINETUNED: VT.BOOL,
    Keys.Rope.SCALING_ORIG_CTX_LEN: VT.UINT32,
    Keys.Rope.FREQ_BASE: VT.FLOAT32,
    Keys.Rope.SCALING_TYPE: VT.STRING,
    Keys.Rope.SCALING_FACTOR: VT.FLOAT32,
    Keys.Rope.SCALING_ATTN_FACTOR: VT.FLOAT32,
}
# read only when head_count (of layer 0) is above 0
HEAD_KEY_TYPES = {ATTN.KEY_LENGTH: VT.UINT32, ATTN.VALUE_LENGTH: VT.UINT32, Keys.Rope.DIMENSION_COUNT: VT.UINT32}
# get_key_or_arr: a uint32, or an array whose items get_arr copies into uint32s
PER_LAYER_KEYS = (Keys.LLM.FEED_FORWARD_LENGTH, ATTN.HEAD_COUNT, ATTN.HEAD_COUNT_KV)
PER_LAYER_ITEM_TYPES = (VT.UINT32, VT.INT32, VT.BOOL)


def _type_name(t: KeyType) -> str:
    """UINT32, or ARRAY of INT32 (the reader refuses a type gguf does not define)."""
    return VT(t.type).name if t.item is None else f"{VT(t.type).name} of {VT(t.item).name}"


def refuse_mistyped_keys(metadata: Mapping[str, Value], key_types: Mapping[str, KeyType]) -> None:
    """EvidenceError (artifactUnreadable) for a key llama.cpp reads from a model's first file with another type
    than its getter takes: llama.cpp refuses to load the model ("key ... has wrong type ...")."""

    def refuse(key: str, expected: str) -> None:
        raise EvidenceError(
            Limit.ARTIFACT_UNREADABLE,
            f"key {key} has type {_type_name(key_types[key])}, but llama.cpp reads it as {expected}",
        )

    expected = dict(GENERAL_KEY_TYPES)
    arch = metadata.get(Keys.General.ARCHITECTURE)
    if isinstance(arch, str):
        expected |= {t.format(arch=arch): vt for t, vt in ARCH_KEY_TYPES.items()}
        heads = metadata.get(ATTN.HEAD_COUNT.format(arch=arch))
        first = heads[0] if isinstance(heads, tuple) and heads else heads
        if is_int(first) and first > 0:
            expected |= {t.format(arch=arch): vt for t, vt in HEAD_KEY_TYPES.items()}
        for template in PER_LAYER_KEYS:
            key = template.format(arch=arch)
            kt = key_types.get(key)
            if (
                kt is not None
                and kt.type != VT.UINT32
                and not (kt.type == VT.ARRAY and kt.item in PER_LAYER_ITEM_TYPES)
            ):
                refuse(key, "UINT32, or an ARRAY of UINT32, INT32 or BOOL")
    for key, vt in expected.items():
        kt = key_types.get(key)
        if kt is not None and kt.type != vt:
            refuse(key, vt.name)


class Raw(NamedTuple):
    """What a reader of one key sees: its value (None where the file has no such key), the key as the file names
    it, and the model's block_count (per-layer arrays have one entry per block)."""

    value: Value | None
    key: str
    n_layer: int


T = TypeVar("T")


def uint(default: int) -> Callable[[Raw], int]:
    """get_key into a uint32 field: the value, `default` where absent (a non-integer fails the load)."""
    return lambda raw: default if raw.value is None else _uint(raw)


def maybe_uint(raw: Raw) -> int | None:
    """A uint32 whose default depends on other fields (None where absent)."""
    return None if raw.value is None else _uint(raw)


def _uint(raw: Raw) -> int:
    if not is_int(raw.value) or raw.value < 0:
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{raw.key} is not a non-negative integer")
    return raw.value


def flag(default: bool) -> Callable[[Raw], bool]:
    """get_key into a bool field (a value of another type fails the load)."""

    def read(raw: Raw) -> bool:
        value = default if raw.value is None else raw.value
        if not isinstance(value, bool):
            raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{raw.key} is not a boolean")
        return value

    return read


def real(raw: Raw) -> float | None:
    """A float field (None where absent or not a number)."""
    return float(raw.value) if (is_int(raw.value) or isinstance(raw.value, float)) else None


def given(raw: Raw) -> Value | None:
    """The value as the file holds it, for the rules that judge it themselves."""
    return raw.value


def per_layer(default: int) -> Callable[[Raw], tuple[int, ...]]:
    """get_key_or_arr: one number for every layer, or one per layer (`default` for every layer where absent)."""

    def read(raw: Raw) -> tuple[int, ...]:
        values = maybe_per_layer(raw)
        return (default,) * raw.n_layer if values is None else values

    return read


def maybe_per_layer(raw: Raw) -> tuple[int, ...] | None:
    """get_key_or_arr with a default that depends on other fields (None where absent)."""
    value, n_layer = raw.value, raw.n_layer
    if value is None:
        return None
    if is_int(value) and value >= 0:
        return (value,) * n_layer
    if isinstance(value, SkippedArray) or not isinstance(value, tuple):
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{raw.key} is not a per-layer array")
    if len(value) != n_layer or not all(is_int(v) and v >= 0 for v in value):
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{raw.key} has {len(value)} entries for {n_layer} layers")
    return value


def layer_flags(raw: Raw) -> tuple[bool, ...] | None:
    """A boolean per-layer array (recurrent-layer marks), None where absent."""
    if raw.value is None:
        return None
    if not isinstance(raw.value, tuple) or len(raw.value) != raw.n_layer:
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{raw.key} is not one flag per layer")
    return tuple(bool(v) for v in raw.value)


class Key(Generic[T]):
    """One field of the record: the key it is read from (a gguf-py template) and how llama.cpp's loader reads it.
    A value the file holds is read at construction into the instance's own attribute, which hides this Key. The
    Key is reached for the others: it gives the default of a key the file lacks (kept from then on), and raises
    the refusal of a value the loader would refuse where a rule reads the field (llama.cpp's getters throw when a
    model's loader asks for the key, not for keys its architecture never reads)."""

    def __init__(self, template: str, read: Callable[[Raw], T]) -> None:
        self.template, self.read = template, read
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Key[T]: ...

    @overload
    def __get__(self, obj: HParams, owner: type) -> T: ...

    def __get__(self, obj: HParams | None, owner: type) -> Key[T] | T:
        if obj is None:
            return self
        if self.name in obj.refused:
            raise obj.refused[self.name]
        value = self.read(Raw(None, obj.key(self.template), obj.n_layer))
        obj.__dict__[self.name] = value
        return value


LLM, SSM = Keys.LLM, Keys.SSM


class HParams:
    """One model's hyperparameters, read once from its header as llama_model_base::load_hparams and each
    architecture's load_arch_hparams read them (src/llama-model.cpp): every key memfit's rules use, each a field
    named as llama_hparams names it, with its default. The only reader of `<arch>.*` keys besides file_value."""

    # llama_model_base::load_hparams, every architecture
    n_ctx_train = Key(LLM.CONTEXT_LENGTH, uint(0))
    n_embd = Key(LLM.EMBEDDING_LENGTH, uint(0))
    n_embd_out_impl = Key(LLM.EMBEDDING_LENGTH_OUT, uint(0))  # n_embd_out(): this, else n_embd
    # gemma-embedding's load_arch_hparams: the sentence-transformers projections' widths (no other loader reads them)
    dense_2_feat_out = Key(NewerKeys.DENSE_2_FEAT_OUT, uint(0))
    dense_3_feat_in = Key(NewerKeys.DENSE_3_FEAT_IN, uint(0))
    n_head_arr = Key(ATTN.HEAD_COUNT, per_layer(0))
    n_head_kv_arr = Key(ATTN.HEAD_COUNT_KV, maybe_per_layer)  # None: n_head_arr, layer by layer
    n_ff_arr = Key(LLM.FEED_FORWARD_LENGTH, per_layer(0))
    n_embd_head_k = Key(ATTN.KEY_LENGTH, maybe_uint)  # None: n_embd / n_head(0)
    n_embd_head_v = Key(ATTN.VALUE_LENGTH, maybe_uint)
    n_embd_head_k_swa = Key(ATTN.KEY_LENGTH_SWA, maybe_uint)  # None: n_embd_head_k
    n_embd_head_v_swa = Key(ATTN.VALUE_LENGTH_SWA, maybe_uint)
    n_rot = Key(Keys.Rope.DIMENSION_COUNT, maybe_uint)  # None: n_embd_head_k
    rope_finetuned = Key(Keys.Rope.SCALING_FINETUNED, flag(True))
    rope_sections = Key(Keys.Rope.DIMENSION_SECTIONS, given)
    causal_attn = Key(ATTN.CAUSAL, flag(True))
    f_norm_rms_eps = Key(ATTN.LAYERNORM_RMS_EPS, real)
    f_embedding_scale = Key(LLM.EMBEDDING_SCALE, real)
    n_embd_per_layer = Key(LLM.EMBD_LENGTH_PER_LAYER_INP, uint(0))
    nextn_predict_layers = Key(LLM.NEXTN_PREDICT_LAYERS, uint(0))
    # llama_model_base::load_hparams: LLM_KV_POOLING_TYPE, absent UNSPECIFIED, which llama_context makes NONE (0)
    pooling_type = Key(LLM.POOLING_TYPE, uint(0))
    ftype = Key(Keys.General.FILE_TYPE, given)
    # sliding windows, shared KV, hybrids' layer marks
    n_swa = Key(ATTN.SLIDING_WINDOW, maybe_uint)
    swa_pattern = Key(ATTN.SLIDING_WINDOW_PATTERN, given)
    n_layer_kv_shared = Key(ATTN.SHARED_KV_LAYERS, uint(0))
    recurrent_layer_arr = Key(NewerKeys.RECURRENT_LAYERS, layer_flags)
    full_attn_interval = Key(LLM.FULL_ATTENTION_INTERVAL, maybe_uint)  # None: the architecture's own
    # experts
    n_expert = Key(LLM.EXPERT_COUNT, uint(0))
    n_expert_used = Key(LLM.EXPERT_USED_COUNT, uint(0))
    n_expert_groups = Key(LLM.EXPERT_GROUP_COUNT, uint(0))
    n_group_used = Key(LLM.EXPERT_GROUP_USED_COUNT, uint(0))
    n_expert_shared = Key(LLM.EXPERT_SHARED_COUNT, uint(0))
    n_ff_exp = Key(LLM.EXPERT_FEED_FORWARD_LENGTH, uint(0))
    n_ff_shexp = Key(LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, uint(0))
    expert_gating_func = Key(LLM.EXPERT_GATING_FUNC, uint(0))
    expert_weights_norm = Key(LLM.EXPERT_WEIGHTS_NORM, flag(False))
    expert_weights_scale = Key(LLM.EXPERT_WEIGHTS_SCALE, real)
    n_layer_dense_lead = Key(LLM.LEADING_DENSE_BLOCK_COUNT, uint(0))
    n_moe_layer_step = Key(LLM.INTERLEAVE_MOE_LAYER_STEP, uint(1))
    moe_latent_size = Key(LLM.MOE_LATENT_SIZE, uint(0))
    expert_latent_length = Key(NewerKeys.EXPERT_LATENT_LENGTH, uint(0))
    n_hash_layers = Key(NewerKeys.HASH_LAYER_COUNT, uint(0))
    swiglu_clamp_exp = Key(LLM.SWIGLU_CLAMP_EXP, given)
    swiglu_clamp_shexp = Key(LLM.SWIGLU_CLAMP_SHEXP, given)
    situ_linear_beta = Key(NewerKeys.SITU_LINEAR_BETA, real)
    # MLA and the sparse-attention indexers
    n_lora_q = Key(ATTN.Q_LORA_RANK, uint(0))
    n_lora_kv = Key(ATTN.KV_LORA_RANK, uint(0))
    n_embd_head_k_mla = Key(ATTN.KEY_LENGTH_MLA, uint(0))
    n_embd_head_v_mla = Key(ATTN.VALUE_LENGTH_MLA, uint(0))
    indexer_n_head = Key(ATTN.Indexer.HEAD_COUNT, uint(0))
    indexer_head_size = Key(ATTN.Indexer.KEY_LENGTH, uint(0))
    indexer_top_k = Key(ATTN.Indexer.TOP_K, uint(0))
    indexer_types = Key(NewerKeys.INDEXER_TYPES, given)
    compress_ratios = Key(NewerKeys.COMPRESS_RATIOS, given)  # deepseek4: at least one per block
    compress_ratio_arr = Key(NewerKeys.COMPRESS_RATIOS, per_layer(0))  # qwen4exp: get_key_or_arr
    n_lora_o = Key(NewerKeys.OUTPUT_LORA_RANK, uint(0))
    n_output_groups = Key(NewerKeys.OUTPUT_GROUP_COUNT, uint(0))
    # hyper-connections and per-layer embeddings
    n_hc = Key(NewerKeys.HC_COUNT, uint(0))
    n_hc_low_rank = Key(NewerKeys.HC_LOW_RANK, uint(0))
    ple_layers = Key(NewerKeys.PLE_LAYERS, given)
    ple_ngram_size = Key(NewerKeys.PLE_NGRAM_SIZE, uint(0))
    ple_heads_per_ngram = Key(NewerKeys.PLE_HEADS_PER_NGRAM, uint(0))
    ple_conv_kernel = Key(NewerKeys.PLE_CONV_KERNEL, uint(0))
    attn_res_block_size = Key(NewerKeys.ATTN_RES_BLOCK_SIZE, uint(0))
    # recurrent state: SSM, WKV, KDA, short convolutions
    ssm_d_conv = Key(SSM.CONV_KERNEL, uint(0))
    ssm_d_inner = Key(SSM.INNER_SIZE, uint(0))
    ssm_d_state = Key(SSM.STATE_SIZE, uint(0))
    ssm_dt_rank = Key(SSM.TIME_STEP_RANK, uint(0))
    ssm_n_group = Key(SSM.GROUP_COUNT, uint(0))
    ssm_dt_b_c_rms = Key(SSM.DT_B_C_RMS, flag(False))
    wkv_head_size = Key(Keys.WKV.HEAD_SIZE, uint(0))
    token_shift_count = Key(LLM.TOKEN_SHIFT_COUNT, uint(2))
    n_lora_decay = Key(ATTN.DECAY_LORA_RANK, uint(0))
    n_lora_iclr = Key(ATTN.ICLR_LORA_RANK, uint(0))
    n_lora_value_res_mix = Key(ATTN.VALUE_RESIDUAL_MIX_LORA_RANK, uint(0))
    n_lora_gate = Key(ATTN.GATE_LORA_RANK, uint(0))
    time_mix_extra_dim = Key(LLM.TIME_MIX_EXTRA_DIM, uint(0))
    time_decay_extra_dim = Key(LLM.TIME_DECAY_EXTRA_DIM, uint(0))
    n_embd_head_kda = Key(Keys.KDA.HEAD_DIM, uint(0))
    kda_gate_lower_bound = Key(NewerKeys.KDA_GATE_LOWER_BOUND, real)
    n_shortconv_l_cache = Key(Keys.ShortConv.L_CACHE, uint(0))

    def __init__(self, metadata: Mapping[str, Value], arch: str) -> None:
        self.arch = arch
        block_count = Raw(metadata.get(self.key(LLM.BLOCK_COUNT)), self.key(LLM.BLOCK_COUNT), 0)
        if block_count.value is None:
            raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{block_count.key} is missing")
        self.n_layer = _uint(block_count)
        if not 0 < self.n_layer <= MAX_LAYERS:
            raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"llama.cpp refuses a block_count of {self.n_layer}")
        self.refused: dict[str, EvidenceError] = {}  # the fields whose value the loader would refuse
        present = []  # the fields whose key the file holds
        for field, key in _keys_of(arch):
            value = metadata.get(key)
            if value is None:
                continue
            present.append(field.name)
            try:
                setattr(self, field.name, field.read(Raw(value, key, self.n_layer)))
            except EvidenceError as refusal:
                self.refused[field.name] = refusal
        self.present = frozenset(present)

    def key(self, template: str) -> str:
        return template.format(arch=self.arch)

    def has(self, field: Key[Any]) -> bool:
        """Whether the file holds the field's key (whatever its value)."""
        return field.name in self.present

    def required(self, field: Key[int]) -> int:
        """A field llama.cpp reads with get_key(..., required): refused where the file has no such key."""
        if not self.has(field):
            raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"{self.key(field.template)} is missing")
        return self.value(field)

    def value(self, field: Key[T]) -> T:
        """The field the class's Key names (for rules that take the field as an argument)."""
        value: T = getattr(self, field.name)
        return value

    def deepseek2_lite(self, n_vocab: int | None) -> bool:
        """llama_model_deepseek2::load_arch_hparams: is_lite, the shapes with one wq and no low-rank Q (q_lora_rank
        is not read): DeepSeek-V2-Lite (27 layers), GigaChat3-10B-A1.8B (26), and 48 layers of 128256 tokens."""
        return self.n_layer in (27, 26) or (self.n_layer == 48 and n_vocab == 128256)


FIELDS: tuple[Key[Any], ...] = tuple(v for v in vars(HParams).values() if isinstance(v, Key))


@lru_cache(maxsize=256)  # one entry per architecture a rule names
def _keys_of(arch: str) -> tuple[tuple[Key[Any], str], ...]:
    """Each field with its key as an `arch` file names it."""
    return tuple((field, field.template.format(arch=arch)) for field in FIELDS)


# A per-layer rule, as llama.cpp's hybrids pass filter functions (il -> bool) to their memory.
LayerPredicate = Callable[["Layers", int], bool]
TensorShapes = Mapping[str, tuple[int, ...]]  # a file's tensors by name, each its shape (ne)
TensorTypes = Mapping[str, int]  # a file's tensors by name, each its ggml type


class Layers:
    """The per-layer hyperparameters every rule reads (llama_model_base::load_hparams), and which layers
    are recurrent (llama_hparams::recurrent_layer_arr, as the architecture's `is_recurrent` marks them)."""

    def __init__(
        self,
        hp: HParams,
        is_recurrent: LayerPredicate | None = None,
        tensors: TensorShapes | None = None,
        types: TensorTypes | None = None,
    ) -> None:
        self.hp = hp
        self.tensors = tensors  # the file's tensors and their shapes, where known (a catalog entry has none)
        self.types = types  # and their ggml types, where known
        self.n_all = hp.n_layer  # block_count, NextN/MTP layers included
        self.n_trunk = self.n_all - hp.nextn_predict_layers
        if self.n_trunk < 0:
            raise EvidenceError(
                Limit.LAYOUT_NOT_UNIFORM,
                f"{key_name(Keys.LLM.NEXTN_PREDICT_LAYERS)} exceeds {key_name(Keys.LLM.BLOCK_COUNT)}",
            )
        self.n_embd = hp.required(HParams.n_embd)
        self.heads = hp.n_head_arr
        # head_count_kv defaults to head_count, layer by layer
        self.heads_kv = self.heads if hp.n_head_kv_arr is None else hp.n_head_kv_arr
        self.ff = hp.n_ff_arr
        # n_embd_head_k/v: key_length / value_length, else n_embd / n_head(0); *_swa on sliding layers
        fallback = self.n_embd // self.heads[0] if self.n_all and self.heads[0] else 0
        self.head_k = fallback if hp.n_embd_head_k is None else hp.n_embd_head_k
        self.head_v = fallback if hp.n_embd_head_v is None else hp.n_embd_head_v
        self.head_k_swa = self.head_k if hp.n_embd_head_k_swa is None else hp.n_embd_head_k_swa
        self.head_v_swa = self.head_v if hp.n_embd_head_v_swa is None else hp.n_embd_head_v_swa
        # is_recurrent is asked of every layer; NextN/MTP layers are never recurrent
        self.recurrent = tuple(
            is_recurrent is not None and is_recurrent(self, il) and il < self.n_trunk for il in range(self.n_all)
        )

    def v_width(self, il: int, swa: bool) -> int:
        return self.heads_kv[il] * (self.head_v_swa if swa else self.head_v)

    def k_width(self, il: int, swa: bool) -> int:
        return self.heads_kv[il] * (self.head_k_swa if swa else self.head_k)

    def head_dims(self, il: int, swa: bool) -> tuple[int, int]:
        return (self.head_k_swa, self.head_v_swa) if swa else (self.head_k, self.head_v)
