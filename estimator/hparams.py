"""Typed access to a GGUF's hyperparameters, per layer where llama.cpp reads them per layer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import overload

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


class HParams:
    """The `<arch>.*` keys of one model, with llama.cpp's per-layer reading rules."""

    def __init__(self, metadata: Mapping[str, Value], arch: str) -> None:
        self.metadata = metadata
        self.arch = arch
        self.n_layer = self.require_int(Keys.LLM.BLOCK_COUNT)
        if not 0 < self.n_layer <= MAX_LAYERS:
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"llama.cpp refuses a block_count of {self.n_layer}")
        self._flags: dict[str, tuple[bool, ...] | None] = {}

    def key(self, template: str) -> str:
        return template.format(arch=self.arch)

    def has(self, template: str) -> bool:
        return self.key(template) in self.metadata

    @overload
    def optional_int(self, template: str, default: int) -> int: ...

    @overload
    def optional_int(self, template: str, default: None = None) -> int | None: ...

    def optional_int(self, template: str, default: int | None = None) -> int | None:
        value = self.metadata.get(self.key(template))
        if value is None:
            return default
        if not is_int(value) or value < 0:
            raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"{self.key(template)} is not a non-negative integer")
        return value

    def require_int(self, template: str) -> int:
        value = self.optional_int(template)
        if value is None:
            raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"{self.key(template)} is missing")
        return value

    def optional_bool(self, template: str, default: bool) -> bool:
        """A flag llama.cpp reads with get_key (a value of another type fails its load)."""
        value = self.metadata.get(self.key(template), default)
        if not isinstance(value, bool):
            raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"{self.key(template)} is not a boolean")
        return value

    def optional_float(self, template: str) -> float | None:
        value = self.metadata.get(self.key(template))
        return float(value) if (is_int(value) or isinstance(value, float)) else None

    def per_layer(self, template: str, default: int | None = None) -> tuple[int, ...]:
        """A value llama.cpp reads with get_key_or_arr: one number for every layer, or one per layer."""
        value = self.metadata.get(self.key(template))
        if value is None:
            if default is None:
                raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"{self.key(template)} is missing")
            return (default,) * self.n_layer
        if is_int(value) and value >= 0:
            return (value,) * self.n_layer
        if isinstance(value, SkippedArray) or not isinstance(value, tuple):
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"{self.key(template)} is not a per-layer array")
        if len(value) != self.n_layer or not all(is_int(v) and v >= 0 for v in value):
            raise EvidenceError(
                Limit.LAYOUT_NOT_UNIFORM, f"{self.key(template)} has {len(value)} entries for {self.n_layer} layers"
            )
        return value

    def deepseek2_lite(self, n_vocab: int | None) -> bool:
        """llama_model_deepseek2::load_arch_hparams: is_lite, the shapes with one wq and no low-rank Q (q_lora_rank
        is not read): DeepSeek-V2-Lite (27 layers), GigaChat3-10B-A1.8B (26), and 48 layers of 128256 tokens."""
        return self.n_layer in (27, 26) or (self.n_layer == 48 and n_vocab == 128256)

    def per_layer_flags(self, template: str) -> tuple[bool, ...] | None:
        """A boolean per-layer array (sliding-window pattern, recurrent-layer marks), or None when absent;
        read once (per-layer predicates ask for it layer by layer)."""
        if template in self._flags:
            return self._flags[template]
        value = self.metadata.get(self.key(template))
        if value is None:
            flags = None
        elif not isinstance(value, tuple) or len(value) != self.n_layer:
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"{self.key(template)} is not one flag per layer")
        else:
            flags = tuple(bool(v) for v in value)
        self._flags[template] = flags
        return flags


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
        self.n_trunk = self.n_all - hp.optional_int(Keys.LLM.NEXTN_PREDICT_LAYERS, 0)
        if self.n_trunk < 0:
            raise EvidenceError(
                Limit.LAYOUT_NOT_UNIFORM,
                f"{key_name(Keys.LLM.NEXTN_PREDICT_LAYERS)} exceeds {key_name(Keys.LLM.BLOCK_COUNT)}",
            )
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
