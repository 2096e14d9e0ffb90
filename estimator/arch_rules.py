"""Everything memfit knows per llama.cpp architecture: `RULES`, one entry per `general.architecture`.

An entry states what llama.cpp's `llama_model::create_memory` builds for the architecture and how its
`load_arch_hparams` marks layers, how memfit counts its parameters, and whether its workspace was measured:

- `memory`: a KV cache, a recurrent state, both (hybrid), or none at all (embedding models);
- `kv_layers`: which layers the KV cache keeps (the filter create_memory passes);
- `window`: which layers slide, and over how many tokens;
- `recurrence`: which layers are recurrent, and how their state is sized;
- `mla`: whether the cache keeps only K (multi-head latent attention);
- `kv_from_start`: how many leading layers own KV (later ones reuse an earlier layer's: shared-KV models);
- `indexer`: the sparse-attention indexer's own KV cache beside the main one;
- `compression`: compressed KV caches and compressor states beside the main cache (deepseek4);
- `graph`: how its compute graph is built (estimator/compute_buffer.py), or None when it is not derived;
- `tied_embedding_twice`: the loader keeps a tied token embedding twice;
- `parameters`: how its loader shapes the weights the compute graph multiplies by;
- `tensors`: the tensors its loader requires (estimator/tensor_list.py), where mirrored: the weights and the
  parameter count of a published layout (`COUNTED`: the architectures that have one);
- `uncreated`: tensors a conversion may hold that its loader never creates (nemotron_h_moe's NextN latent
  projections): a file holding one is refused (estimator/artifact.py);
- `optional`: the TENSOR_NOT_REQUIRED tensors whose shape its loader checks where a file holds them (gemma3's,
  gemma-embedding's and lfm2's dense projections): a file whose shape differs is refused (estimator/artifact.py).

Rules are small named functions of the layer hyperparameters (`Layers`), each naming the llama.cpp code it
mirrors; an architecture shaped like another is one more entry naming the same functions. Every rule was
measured against llama.cpp (tests/data/results_*.jsonl) or shares its code path with a measured architecture.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum, auto
from functools import partial

from memfit import gguf_constants as gguf
from memfit.estimator.compute_graph import rotation_size
from memfit.estimator.errors import EvidenceError
from memfit.estimator.gguf_file import SkippedArray
from memfit.estimator.graph_delta_net import (
    build_bailingmoe3,
    build_kimi_k3,
    build_kimi_linear,
    build_qwen3next,
    build_qwen35,
)
from memfit.estimator.graph_dsa import build_dsa
from memfit.estimator.graph_dsv4 import build_dsv4
from memfit.estimator.graph_gemma3n import build_gemma3n
from memfit.estimator.graph_gemma4 import build_gemma4
from memfit.estimator.graph_hybrid import build_falcon_h1, build_nemotron_h
from memfit.estimator.graph_minimax import build_minimax
from memfit.estimator.graph_plamo2 import build_plamo2
from memfit.estimator.graph_qwen4exp import build_qwen4exp
from memfit.estimator.hparams import HParams, Key, LayerPredicate, Layers, NewerKeys, key_name
from memfit.estimator.layout import (
    AttentionLayer,
    DeltaNet,
    Dsv4,
    FfnOp,
    GraphBuilder,
    HyperConnections,
    Indexer,
    KvCache,
    Mixer,
    RecurrentLayer,
    SwaType,
    Wkv,
)
from memfit.estimator.moe_rules import (
    RoutingRule,
    bailingmoe3_routing,
    cohere2moe_routing,
    deepseek2_routing,
    deepseek4_routing,
    deepseek32_routing,
    exaone_moe_routing,
    gemma4_routing,
    glm_dsa_routing,
    gpt_oss_routing,
    hy_v3_routing,
    kimi_k3_routing,
    kimi_linear_routing,
    laguna_routing,
    layer_tensor,
    lfm2moe_routing,
    llama4_routing,
    mimo2_routing,
    minicpm_routing,
    minimax01_routing,
    nemotron_h_routing,
    normed_routing,
    plain_routing,
    qwen4exp_routing,
    qwen_next_routing,
    sigmoid_routing,
    smallthinker_routing,
    step35_routing,
    swiglu_clamped,
)
from memfit.estimator.tensor_list import (
    Shape,
    TensorList,
    optional_gemma3,
    optional_gemma_embedding,
    optional_lfm2,
    tensors_bert,
    tensors_cohere2,
    tensors_command_r,
    tensors_deepseek2,
    tensors_exaone4,
    tensors_falcon_h1,
    tensors_gemma,
    tensors_gemma2,
    tensors_gemma3,
    tensors_gemma3n,
    tensors_glm4,
    tensors_gpt_oss,
    tensors_granite,
    tensors_granitehybrid,
    tensors_lfm2,
    tensors_llama,
    tensors_mamba,
    tensors_mamba2,
    tensors_nomic_bert,
    tensors_olmo2,
    tensors_phi3,
    tensors_qwen2,
    tensors_qwen2moe,
    tensors_qwen3,
    tensors_qwen3next,
    tensors_stablelm,
    tensors_starcoder2,
)
from memfit.estimator.vocabulary import Limit
from memfit.gguf_constants import MODEL_TENSOR, TENSOR_NAMES, Keys, LlamaFileType
from memfit.gguf_constants import GGMLQuantizationType as QT
from memfit.integers import is_int

# The llama.cpp these rules mirror: the release the ground truth (tests/data) was measured with.
# The llama.cpp every rule mirrors and every recorded run measured: its commit (tools/truth/releases.json), which
# node-llama-cpp 3.21.1 bundles under its own tag v0.4.0 and builds as its prebuilt libllama
LLAMA_CPP_COMMIT = "80fb11ac73e66d89eae2c6a91d8a77428fa733ed"
LLAMA_CPP_RELEASE = f"llama.cpp {LLAMA_CPP_COMMIT[:7]} (node-llama-cpp 3.21.1's prebuilt libllama)"

ATTN = Keys.Attention
ROUTER = TENSOR_NAMES[MODEL_TENSOR.FFN_GATE_INP] + ".weight"  # blk.{bid}.ffn_gate_inp.weight
SSM_NORM = TENSOR_NAMES[MODEL_TENSOR.SSM_NORM] + ".weight"  # blk.{bid}.ssm_norm.weight
ATTN_GATE = TENSOR_NAMES[MODEL_TENSOR.ATTN_GATE] + ".weight"  # blk.{bid}.attn_gate.weight
ATTN_V = TENSOR_NAMES[MODEL_TENSOR.ATTN_V] + ".weight"  # blk.{bid}.attn_v.weight
ATTN_Q_NORM = TENSOR_NAMES[MODEL_TENSOR.ATTN_Q_NORM] + ".weight"  # blk.{bid}.attn_q_norm.weight
FFN_NORM = TENSOR_NAMES[MODEL_TENSOR.FFN_NORM] + ".weight"  # blk.{bid}.ffn_norm.weight
LAYER_OUT_SCALE = TENSOR_NAMES[MODEL_TENSOR.LAYER_OUT_SCALE] + ".weight"  # blk.{bid}.layer_output_scale.weight
STABLELM_12B_LAYERS = 40  # llama_model_stablelm::load_arch_hparams: 40 layers is LLM_TYPE_12B (StableLM 2 12B)


# --- which layers: predicates over (layers, il) -------------------------------------------------------


def every_layer(ly: Layers, il: int) -> bool:
    # llama_model::create_memory: llama_kv_cache with no filter
    return True


def trunk_layer(ly: Layers, il: int) -> bool:
    # llama_model::create_memory: filter il < n_layer - nextn_predict_layers (NextN/MTP layers excluded)
    return il < ly.n_trunk


def not_recurrent(ly: Layers, il: int) -> bool:
    # llama_memory_hybrid: the default filter !hparams.is_recurrent(il)
    return not ly.recurrent[il]


def trunk_not_recurrent(ly: Layers, il: int) -> bool:
    # llama_model_qwen3next::create_memory: filter il < n_layer && !is_recurrent(il)
    return il < ly.n_trunk and not ly.recurrent[il]


def attention_without_ffn(ly: Layers, il: int) -> bool:
    # llama_model_nemotron_h::create_memory: filter !is_recurrent(il) && n_ff(il) == 0
    return not ly.recurrent[il] and ly.ff[il] == 0


def no_kv_heads(ly: Layers, il: int) -> bool:
    # llama_model_jamba::load_arch_hparams: recurrent_layer_arr[il] = n_head_kv(il) == 0
    return ly.heads_kv[il] == 0


def no_kv_heads_no_ffn(ly: Layers, il: int) -> bool:
    # llama_model_nemotron_h::load_arch_hparams: recurrent_layer_arr[il] = n_head_kv(il) == 0 && n_ff(il) == 0
    return ly.heads_kv[il] == 0 and ly.ff[il] == 0


def nextn_latent_projections(hp: HParams) -> frozenset[str]:
    # llama_model_nemotron_h::load_arch_tensors: no ffn_latent_down / _up for the NextN layers (their experts take
    # moe_latent_size-wide rows), so done_getting_tensors refuses a file that holds them
    first = hp.n_layer - hp.nextn_predict_layers
    names = (TENSOR_NAMES[MODEL_TENSOR.MOE_LATENT_DOWN], TENSOR_NAMES[MODEL_TENSOR.MOE_LATENT_UP])
    return frozenset(f"{name.format(bid=il)}.weight" for il in range(first, hp.n_layer) for name in names)


def listed_else_interval(default_interval: int) -> LayerPredicate:
    """attention.recurrent_layers[il], else every layer but each full_attention_interval-th."""

    def is_recurrent(ly: Layers, il: int) -> bool:
        # llama_model_qwen3next::load_arch_hparams: recurrent_layer_arr[il] = (il + 1) % full_attn_interval != 0
        listed = ly.hp.recurrent_layer_arr
        if listed is not None:
            return listed[il]
        interval = default_interval if ly.hp.full_attn_interval is None else ly.hp.full_attn_interval
        if interval == 0:
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"{key_name(Keys.LLM.FULL_ATTENTION_INTERVAL)} is 0")
        return (il + 1) % interval != 0

    return is_recurrent


every_4th_attends = listed_else_interval(4)  # qwen3next and its descendants
every_8th_attends = listed_else_interval(8)  # minimax-01

# --- sliding windows ------------------------------------------------------------------------------------

WindowCondition = Callable[[Layers, "int | None"], bool]  # (layers, attention.sliding_window) -> slides at all
PatternSource = Callable[["Window", Layers], tuple[bool, ...]]  # is_swa(il) for every layer
ArrayLength = Callable[[Layers], "int | None"]  # the entries a per-layer pattern must have (None: any)


def always(ly: Layers, n_swa: int | None) -> bool:
    # llama_model_<arch>::load_arch_hparams: swa_type set unconditionally
    return True


def window_key_positive(ly: Layers, n_swa: int | None) -> bool:
    # llama_model_gemma3::load_arch_hparams: swa only when sliding_window is present and > 0
    return bool(n_swa)


def window_key_not_zero(ly: Layers, n_swa: int | None) -> bool:
    # llama_model_llama4::load_arch_hparams: n_swa == 0 disables chunked attention
    return n_swa != 0


def decodes(ly: Layers, sliding: tuple[bool, ...]) -> str:
    return ""


def llama4_unchunked_abort(ly: Layers, sliding: tuple[bool, ...]) -> str:
    # llama_model_llama4::load_arch_hparams sets f_attn_temp_scale only with chunked attention, and llama4.cpp builds
    # its temperature input either way: llm_graph_input_attn_temp::set_input's GGML_ASSERT(f_attn_temp_scale != 0.0f)
    if any(sliding):
        return ""
    return (
        "llama.cpp aborts at the first decode (llama-server's warmup) of a llama4 model without chunked attention"
        " (sliding_window 0): its attention temperature scale stays 0 (GGML_ASSERT(f_attn_temp_scale != 0.0f))"
    )


def sixty_four_trunk_layers(ly: Layers, n_swa: int | None) -> bool:
    # llama_model_exaone4::load_arch_hparams: swa only when n_layer == 64 (the 32B)
    return ly.n_trunk == 64


def one_per_trunk_layer(ly: Layers) -> int | None:
    # llama_model_loader::get_key_or_arr: exactly n_layer (trunk) entries
    return ly.n_trunk


def one_per_block(ly: Layers) -> int | None:
    # llama_model_step35::load_arch_hparams: exactly block_count entries, NextN layers included
    return ly.n_all


def any_length(ly: Layers) -> int | None:
    # llama_model_granite_swa::load_arch_hparams: missing entries do not slide
    return None


def period_flags(ly: Layers, period: int, dense_first: bool) -> tuple[bool, ...]:
    # llama_hparams::set_swa_pattern: period 0 slides every layer; the last (or first) of each period is full
    if dense_first:
        flags = [period == 0 or il % period != 0 for il in range(ly.n_trunk)]
    else:
        flags = [period == 0 or il % period < period - 1 for il in range(ly.n_trunk)]
    return tuple(flags) + (False,) * (ly.n_all - ly.n_trunk)


def _pattern_value(window: Window, ly: Layers) -> object:
    # llama_model_loader::get_key(LLM_KV_ATTENTION_SLIDING_WINDOW_PATTERN)
    key, value = ly.hp.key(ATTN.SLIDING_WINDOW_PATTERN), ly.hp.swa_pattern
    if value is None and window.pattern_required:
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"llama.cpp refuses to load the model without {key}")
    if isinstance(value, SkippedArray):
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"llama.cpp refuses {key}: longer than any model")
    return value


def _pattern_array(window: Window, ly: Layers, value: tuple) -> tuple[bool, ...]:
    # llama_model_loader::get_key_or_arr: a per-layer pattern of the length this arch's loader demands
    expected = window.array_length(ly)
    if (expected is not None and len(value) != expected) or len(value) > ly.n_all:
        raise EvidenceError(
            Limit.ARTIFACT_UNREADABLE,
            f"llama.cpp refuses a sliding_window_pattern of {len(value)} entries for {ly.n_trunk} layers",
        )
    return tuple(bool(v) for v in value) + (False,) * (ly.n_all - len(value))


def _scalar_period(window: Window, value: object) -> int:
    # llama_model_loader::get_key(uint32_t): an array is ignored and the default period applies
    return value if is_int(value) else window.period


def period_pattern(window: Window, ly: Layers) -> tuple[bool, ...]:
    # llama_hparams::set_swa_pattern(sliding_window_pattern or the arch's default period)
    value = _pattern_value(window, ly)
    return period_flags(ly, _scalar_period(window, value), window.dense_first)


def period_or_array_pattern(window: Window, ly: Layers) -> tuple[bool, ...]:
    # llama_model_mellum::load_arch_hparams: swa_layers from the array, else set_swa_pattern(period)
    value = _pattern_value(window, ly)
    if isinstance(value, tuple):
        return _pattern_array(window, ly, value)
    return period_flags(ly, _scalar_period(window, value), window.dense_first)


def array_pattern(window: Window, ly: Layers) -> tuple[bool, ...]:
    # llama_model_gemma4::load_arch_hparams: get_key_or_arr(swa_layers); a scalar applies to every layer
    value = _pattern_value(window, ly)
    if isinstance(value, tuple):
        return _pattern_array(window, ly, value)
    return _pattern_scalar(window, ly, bool(value))


def _pattern_scalar(window: Window, ly: Layers, value: bool) -> tuple[bool, ...]:
    # llama_model_loader::get_key_or_arr: a scalar fills the n entries the loader reads (mimo2: n_layer(), the
    # NextN layers left as llama_model::load_hparams filled them, not sliding); every layer where any length goes
    n = window.array_length(ly)
    n = ly.n_all if n is None else n
    return (value,) * n + (False,) * (ly.n_all - n)


def every_block_slides(window: Window, ly: Layers) -> tuple[bool, ...]:
    # llama_model_deepseek4::load_arch_hparams: set_swa_pattern(0) slides every trunk layer, the NextN layers too
    return (True,) * ly.n_all


def attention_layers_slide(window: Window, ly: Layers) -> tuple[bool, ...]:
    # llama_model_lfm2::load_arch_hparams: swa_layers[il] = !is_recurrent(il)
    return tuple(not r for r in ly.recurrent)


@dataclass(frozen=True)
class Window:
    """Which layers slide (llama_hparams::swa_layers) and over how many tokens (n_swa)."""

    pattern: PatternSource
    when: WindowCondition = always
    period: int = 0  # the default period; 0 means every layer slides
    dense_first: bool = False  # the first layer of each period is full (else the last)
    default_size: int | None = None  # n_swa when `attention.sliding_window` is absent (None: required)
    forced_size: int | None = None  # n_swa the loader sets whatever the GGUF says
    pattern_required: bool = False  # llama.cpp refuses to load the model without sliding_window_pattern
    array_length: ArrayLength = one_per_trunk_layer
    swa_type: SwaType = SwaType.STANDARD  # hparams.swa_type: how the sliding layers mask


# --- shared KV, MLA, indexers -----------------------------------------------------------------------------


def every_layer_owns_kv(ly: Layers) -> int:
    # llama_hparams::n_layer_kv_from_start default: every layer has its own KV
    return ly.n_all


def twenty_layers_own_kv(ly: Layers) -> int:
    # llama_model_gemma3n::load_arch_hparams: n_layer_kv_from_start = 20
    return min(20, ly.n_all)


def shared_kv_layers_reuse(ly: Layers) -> int:
    # llama_model_gemma4::load_arch_hparams: n_layer_kv_from_start = n_layer - shared_kv_layers
    return max(0, ly.n_all - ly.hp.n_layer_kv_shared)


def no_mla(hp: HParams) -> bool:
    # llama_hparams::is_mla: never set for this arch
    return False


def mla_if_lengths(hp: HParams) -> bool:
    # llama_hparams::is_mla: both key_length_mla and value_length_mla are set
    return bool(hp.n_embd_head_k_mla) and bool(hp.n_embd_head_v_mla)


def always_mla(hp: HParams) -> bool:
    # llama_model_<arch>::create_memory: the cache keeps the latent as K, no V
    return True


IndexerCache = Callable[[Layers, tuple[int, ...]], KvCache]  # (layers, the main cache's layers) -> the indexer's


def beside_each_attention_layer(ly: Layers, attention_layers: tuple[int, ...]) -> KvCache:
    # llama-kv-cache-hybrid-idx.cpp: one head of indexer.key_length K and head_dim_v V per attention layer
    # (create_memory's filter_idx is filter_attn's: the trunk's attention layers)
    width = ly.hp.required(HParams.indexer_head_size)
    return KvCache((AttentionLayer(width, ly.head_v),) * len(attention_layers), ly.head_v, attention_layers)


def dsa_every_trunk_layer(ly: Layers, attention_layers: tuple[int, ...]) -> KvCache:
    # llama-kv-cache-dsa.cpp: one head of indexer.key_length K, no V, on every trunk layer (create_memory's
    # filter_lid: il < n_layer())
    width = ly.hp.required(HParams.indexer_head_size)
    return KvCache((AttentionLayer(width, 0, has_v=False),) * ly.n_trunk, layer_ids=tuple(range(ly.n_trunk)))


GLM_DSA_SPARSE_CONTEXT = 1048576  # GLM-5.2: from this context length on, the indexer runs on a fixed subset
GLM_5_2_INDEXER_TABLE = 78  # GLM_5_2_DEFAULT_INDEXER_TYPES' entries: layers 0, 1 and every 4th from 2 (zeros after)


def glm_dsa_full_layers(ly: Layers) -> tuple[bool, ...]:
    # llama_model_glm_dsa::load_arch_hparams: is_indexer_full(il) from attention.indexer.types (an array or one value
    # for every layer), else every layer (GLM 5, 5.1: a context below GLM-5.2's), else GLM_5_2_DEFAULT_INDEXER_TYPES
    hp = ly.hp
    types = hp.indexer_types
    if isinstance(types, tuple):
        return tuple(bool(t) for t in types[: ly.n_trunk])
    if is_int(types):
        return (bool(types),) * ly.n_trunk
    if (hp.n_ctx_train or 0) < GLM_DSA_SPARSE_CONTEXT:
        return (True,) * ly.n_trunk
    return tuple(il < GLM_5_2_INDEXER_TABLE and (il < 2 or il % 4 == 2) for il in range(ly.n_trunk))


def glm_dsa_listed_layers(ly: Layers, attention_layers: tuple[int, ...]) -> KvCache:
    # llama_model_glm_dsa::create_memory: the indexer cache keeps the layers whose indexer is full (filter_lid)
    width = ly.hp.required(HParams.indexer_head_size)
    full = tuple(il for il, keep in enumerate(glm_dsa_full_layers(ly)) if keep)
    return KvCache((AttentionLayer(width, 0, has_v=False),) * len(full), layer_ids=full)


IndexerLayers = Callable[[Layers], "Indexer | None"]  # the DSA lightning indexer's graph (None: not rebuilt)


def _dsa_indexer(ly: Layers, full: tuple[bool, ...]) -> Indexer | None:
    # llama_model_deepseek32 / _glm_dsa::load_arch_hparams: indexer.head_count, key_length, top_k (required). Their
    # graphs assert n_rot (rope.dimension_count, else the key head) fits the indexer's head, rotate its Q and K by
    # ggml_mul_mat with the cache's k_rot (as wide as the largest power of two from 64 dividing the head: ggml
    # asserts it is the head) and abort on a shared layer before a full one
    hp = ly.hp
    head = hp.required(HParams.indexer_head_size)
    indexer = Indexer(hp.required(HParams.indexer_n_head), head, hp.required(HParams.indexer_top_k), full)
    rope_fits = (ly.head_k if hp.n_rot is None else hp.n_rot) <= head
    built = rope_fits and rotation_size(head) == head and full[:1] == (True,) and len(full) == ly.n_trunk
    return indexer if built else None


def dsa_every_layer_indexes(ly: Layers) -> Indexer | None:
    # deepseek32.cpp: every trunk layer runs the lightning indexer
    return _dsa_indexer(ly, (True,) * ly.n_trunk)


def glm_dsa_indexes(ly: Layers) -> Indexer | None:
    # glm-dsa.cpp: the full layers run the indexer, the shared ones reuse the previous full layer's top-k
    return _dsa_indexer(ly, glm_dsa_full_layers(ly))


# --- deepseek4: llama_kv_cache_dsv4's compressed caches and compressor states --------------------------------------

CSA_RATIO, HCA_RATIO = 4, 128  # llama-kv-cache-dsv4.cpp: DSV4_CSA_RATIO, DSV4_HCA_RATIO


def dsv4_ratios(ly: Layers) -> tuple[int, ...]:
    # llama_model_deepseek4::load_arch_hparams: attention.compress_ratios, at least block_count entries (the first
    # block_count are used); load_arch_tensors refuses any ratio but 0, 4 and 128
    name = key_name(NewerKeys.COMPRESS_RATIOS)
    value = ly.hp.compress_ratios
    if value is None:
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"llama.cpp refuses to load the model without {name}")
    ratios = tuple(value[: ly.n_all]) if isinstance(value, tuple) else ()
    if len(ratios) < ly.n_all or not all(is_int(r) and r in (0, CSA_RATIO, HCA_RATIO) for r in ratios):
        raise EvidenceError(
            Limit.ARTIFACT_UNREADABLE,
            f"llama.cpp refuses {name}: not one of 0, 4 and 128 for each of {ly.n_all} blocks",
        )
    return ratios


def dsv4_compressed_caches(ly: Layers) -> tuple[KvCache, ...]:
    # llama_kv_cache_dsv4: K-only caches (dsv4_make_k_only) over every block of its ratio: CSA on ratio 4 and HCA on
    # ratio 128 as wide as the attention's K, the lightning indexer's on ratio 4 one head of indexer.key_length
    ratios, indexer = dsv4_ratios(ly), ly.hp.required(HParams.indexer_head_size)

    def cache(ratio: int, width: Callable[[int], int]) -> KvCache:
        ids = tuple(il for il, r in enumerate(ratios) if r == ratio)
        return KvCache(tuple(AttentionLayer(width(il), 0, has_v=False, ratio=ratio) for il in ids), layer_ids=ids)

    attention_k = partial(ly.k_width, swa=True)
    return cache(CSA_RATIO, attention_k), cache(HCA_RATIO, attention_k), cache(CSA_RATIO, lambda il: indexer)


def dsv4_compressor(head: int, ratio: int) -> int:
    # llama_dsv4_comp_state: a [n_embd_state, state_size] plane per sequence, ratio 4's windows overlapping
    # (2 x head wide, 2 x ratio rows), ratio 128's plain (head x ratio)
    overlap = 2 if ratio == CSA_RATIO else 1
    return overlap * head * overlap * ratio


def dsv4_compressed_layers(ly: Layers) -> tuple[int, ...]:
    """The trunk layers (model.hparams's n_layer()) whose compressor states llama_dsv4_comp_state keeps: the
    compressed ones (ratio 4 or 128), each in its layer's buffer type."""
    return tuple(il for il, ratio in enumerate(dsv4_ratios(ly)[: ly.n_trunk]) if ratio)


def dsv4_compressor_states(ly: Layers) -> tuple[RecurrentLayer, ...]:
    # llama_kv_cache_dsv4: the CSA, HCA and lightning-indexer compressor states over the trunk (model.hparams's
    # n_layer()), each an F32 kv and score tensor (R and S here): the attention's compressor on every compressed
    # layer (its n_embd_head_k), the indexer's beside it on ratio 4 (indexer.key_length)
    indexer, states, ratios = ly.hp.required(HParams.indexer_head_size), [], dsv4_ratios(ly)
    for ratio in (ratios[il] for il in dsv4_compressed_layers(ly)):
        n = dsv4_compressor(ly.head_k_swa, ratio) + (dsv4_compressor(indexer, ratio) if ratio == CSA_RATIO else 0)
        states.append(RecurrentLayer(n, n))
    return tuple(states)


@dataclass(frozen=True)
class Compression:
    """llama_kv_cache_dsv4's memory beside its raw sliding cache: K caches over compressed positions and the
    compressors' F32 state per sequence; every cache keeps one stream per sequence, unified or not."""

    caches: Callable[[Layers], tuple[KvCache, ...]]
    states: Callable[[Layers], tuple[RecurrentLayer, ...]]
    state_layers: Callable[[Layers], tuple[int, ...]]  # the layer (il) of each state


DSV4_COMPRESSION = Compression(dsv4_compressed_caches, dsv4_compressor_states, dsv4_compressed_layers)


DSV4_HC = 4  # llama_model_deepseek4::graph::build_hc_pre: GGML_ASSERT(hc == 4)


def dsv4_graph(ly: Layers) -> Dsv4 | None:
    # llama_model_deepseek4::load_arch_hparams: hyper_connection.count, the trunk's and the NextN layers' compress
    # ratios, attention.q_lora_rank, output_group_count, output_lora_rank, the indexer's sizes; None where the graph's
    # builder asserts (four streams, the heads a multiple of the output groups)
    hp = ly.hp
    groups = hp.required(HParams.n_output_groups)
    if hp.required(HParams.n_hc) != DSV4_HC or any(h % groups for h in ly.heads[: ly.n_trunk]):
        return None
    return Dsv4(
        hc=hp.required(HParams.n_hc),
        ratios=dsv4_ratios(ly)[: ly.n_trunk],
        q_lora=hp.required(HParams.n_lora_q),
        o_groups=groups,
        o_lora=hp.required(HParams.n_lora_o),
        idx_heads=hp.required(HParams.indexer_n_head),
        idx_head=hp.required(HParams.indexer_head_size),
        idx_top_k=hp.required(HParams.indexer_top_k),
        nextn_ratios=dsv4_ratios(ly)[ly.n_trunk :],
    )


def dsv4_shexp_clamp(ly: Layers, il: int) -> bool:
    # llama_model_deepseek4::load_arch_hparams: swiglu_clamp_shexp, else swiglu_clamp_exp's limits
    present = ly.hp.swiglu_clamp_shexp is not None
    return swiglu_clamped(ly, HParams.swiglu_clamp_shexp if present else HParams.swiglu_clamp_exp, il)


# --- the weights' shapes the compute graph reads ----------------------------------------------------------


@dataclass(frozen=True)
class Counting:
    """How the architecture's loader shapes the weights its compute graph multiplies by (llama_model_<arch>::
    load_tensors); the weights themselves are its tensor list's (`ArchRule.tensors`)."""

    gated_ffn: bool = True  # gate, up and down (else up and down)
    position_embeddings: bool = False  # learned positions and token types
    attention_beside_ssm: bool = False  # attention and SSM side by side in every layer (falcon-h1)


GATED_FFN = Counting()
NON_GATED_FFN = Counting(gated_ffn=False)
LEARNED_POSITIONS = Counting(gated_ffn=False, position_embeddings=True)  # GPT-2 style: wpe, up and down

# --- the compute graph (estimator/compute_buffer.py) -----------------------------------------------------

RecurrentWidth = Callable[[Layers], int]  # a recurrent block's in-projection width per token
WkvSizes = Callable[[Layers, int], Wkv]  # an RWKV layer's sizes


def mamba_in(ly: Layers) -> int:
    # llama_model_mamba::load_tensors: ssm_in [n_embd, 2 * d_inner] (x and z)
    return 2 * ly.hp.ssm_d_inner


def mamba2_in(ly: Layers) -> int:
    # llama_model_mamba2::load_tensors: ssm_in [n_embd, 2 * d_inner + 2 * n_group * d_state + n_head] (z x B C dt)
    hp = ly.hp
    d_state, groups = hp.ssm_d_state, hp.ssm_n_group
    return 2 * hp.ssm_d_inner + 2 * groups * d_state + hp.ssm_dt_rank


def gated_delta_net_in(ly: Layers) -> int:
    # llama_model_qwen3next::load_tensors: attn_qkv [n_embd, 2 * n_group * d_state + d_inner] (q k v)
    hp = ly.hp
    return 2 * hp.ssm_n_group * hp.ssm_d_state + hp.ssm_d_inner


def lightning_in(ly: Layers) -> int:
    # llama_model_minimax_01::load_arch_tensors: a lightning block's wqkv [n_embd, 3 * n_embd_head_k * n_head]
    return 3 * ly.head_k * (ly.heads[0] if ly.n_all else 0)


def short_conv_in(ly: Layers) -> int:
    # llama_model_lfm2::load_tensors: shortconv.in_proj [n_embd, 3 * n_embd] (b c x)
    return 3 * ly.n_embd


def kda_in(ly: Layers) -> int:
    # llama_model_kimi_linear::load_tensors: attn_q / attn_k / attn_v [n_embd, n_head * kda.head_dim]
    return (ly.heads[0] if ly.n_all else 0) * ly.hp.n_embd_head_kda


def rwkv_time_mix_in(ly: Layers) -> int:
    # llama_model_rwkv7::load_tensors: time_mix_key / value / receptance [n_embd, n_embd]
    return ly.n_embd


def rwkv_channel_mix_in(ly: Layers) -> int:
    # llama_model_rwkv6::load_tensors: channel_mix_key [n_embd, n_ff] beside the time mix's [n_embd, n_embd]
    return max(ly.n_embd, ly.ff[0] if ly.n_all else 0)


def dt_b_c_rms(hp: HParams) -> bool:
    # llama_model_mamba::load_arch_hparams: ssm.dt_b_c_rms (FalconMamba), false when absent
    return hp.ssm_dt_b_c_rms


def dt_b_c_norm_weights(hp: HParams) -> bool:
    # llama_model_jamba::load_arch_tensors: ssm_dt_norm, ssm_b_norm and ssm_c_norm are required
    return True


def _wkv(
    ly: Layers,
    version: int,
    decay: Key[int],
    mix: Key[int] | None = None,
    iclr: Key[int] | None = None,
    value: Key[int] | None = None,
    gate: Key[int] | None = None,
) -> Wkv:
    # llama_model_rwkv6 / _rwkv7::load_arch_hparams: wkv_head_size and the LoRA ranks; the channel mix is n_ff wide
    hp = ly.hp

    def rank(field: Key[int] | None) -> int:
        return hp.value(field) if field else 0

    ranks = (rank(decay), rank(mix), rank(iclr), rank(value), rank(gate))
    return Wkv(version, hp.wkv_head_size, *ranks, channel_mix=ly.ff[0])


def rwkv6_wkv(ly: Layers, il: int) -> Wkv:
    # llama_model_rwkv6::load_arch_hparams: time_decay_extra_dim, time_mix_extra_dim
    return _wkv(ly, 6, HParams.time_decay_extra_dim, mix=HParams.time_mix_extra_dim)


def rwkv6qwen2_wkv(ly: Layers, il: int) -> Wkv:
    # llama_model_rwkv6qwen2: no time_mix_first (QRWKV: gated linear attention, no time_mix_ln), head_count_kv heads
    return replace(rwkv6_wkv(ly, il), n_head_kv=ly.heads_kv[il], gated_linear=True, group_norm=False, channel_mix=0)


def rwkv7_wkv(ly: Layers, il: int) -> Wkv:
    # llama_model_rwkv7::load_arch_hparams: the decay, iclr, value-residual-mix and gate LoRA ranks
    return _wkv(
        ly,
        7,
        HParams.n_lora_decay,
        iclr=HParams.n_lora_iclr,
        value=HParams.n_lora_value_res_mix,
        gate=HParams.n_lora_gate,
    )


def arwkv7_wkv(ly: Layers, il: int) -> Wkv:
    # llama_model_arwkv7: time_mix_ln and the gate optional (conversion/rwkv.py writes neither ln_x nor, without
    # wkv_has_gate, a gate: gate_lora_rank 0), a SwiGLU FFN
    return replace(rwkv7_wkv(ly, il), group_norm=False, channel_mix=0)


def _has_tensor(ly: Layers, suffix: str, unknown: bool) -> bool:
    """Whether the file holds a tensor named blk.N.<suffix> (`unknown` where its tensor names are not known)."""
    return unknown if ly.tensors is None else any(name.endswith(suffix) for name in ly.tensors)


def _gated_delta_net(ly: Layers) -> DeltaNet:
    # llama_model_qwen3next / _qwen35 / _qwen35moe::load_arch_hparams: head_k_dim = ssm_d_state, num_k_heads =
    # ssm_n_group, num_v_heads = ssm_dt_rank, head_v_dim = ssm_d_inner / num_v_heads
    hp = ly.hp
    v_heads = hp.ssm_dt_rank
    return DeltaNet(
        head_k=hp.ssm_d_state,
        k_heads=hp.ssm_n_group,
        head_v=hp.ssm_d_inner // v_heads if v_heads else 0,
        v_heads=v_heads,
        d_conv=hp.ssm_d_conv,
    )


def qwen3next_delta_net(ly: Layers) -> DeltaNet:
    # llama_model_qwen3next::graph::build_qkvz: the legacy ssm_in where the file has no attn_qkv
    return replace(_gated_delta_net(ly), legacy_qkvz=not _has_tensor(ly, ".attn_qkv.weight", True))


def qwen35_delta_net(ly: Layers) -> DeltaNet:
    # llama_model_qwen35(moe)::load_arch_tensors: attn_qkv and attn_gate, ssm_beta and ssm_alpha
    return _gated_delta_net(ly)


def _kda(ly: Layers) -> DeltaNet:
    # llama_model_kimi_linear / _kimi_k3 / _bailingmoe3: kda.head_dim wide heads, n_head of them for q, k and v
    # (their graphs' MHA fallback where the file has the legacy attn_kv_b is not rebuilt)
    hp = ly.hp
    head, heads = hp.n_embd_head_kda, ly.heads[0] if ly.n_all else 0
    legacy = _has_tensor(ly, ".attn_kv_b.weight", False)
    return DeltaNet(
        head,
        heads,
        head,
        heads,
        hp.ssm_d_conv,
        not_rebuilt="MLA without attn_k_b / attn_v_b" if legacy else "",
    )


def kimi_linear_delta_net(ly: Layers) -> DeltaNet:
    # llama_model_kimi_linear: low-rank f and g; no low-rank Q (its loader never reads q_lora_rank)
    return _kda(ly)


def kimi_k3_delta_net(ly: Layers) -> DeltaNet:
    # llama_model_kimi_k3::load_arch_hparams: kda.gate_lower_bound, attn_res.block_size, situ (the dense and
    # shared FFNs' kimi_k3_situ); the MLA output gate (attn_gate, optional) per element
    hp = ly.hp
    bound = hp.kda_gate_lower_bound
    heads = ly.heads[0] if ly.n_all else 0
    v_mla = hp.n_embd_head_v_mla
    base = _kda(ly)
    return replace(
        base,
        q_lora=hp.n_lora_q if _has_tensor(ly, ".attn_q_a_norm.weight", True) else 0,
        lower_bound=bound is not None and bound != float("-inf"),
        attn_gate=heads * v_mla if _has_tensor(ly, ".attn_gate.weight", True) else 0,
        situ_linear=(hp.situ_linear_beta or 0.0) > 0.0,
        attn_res=hp.attn_res_block_size,
    )


def bailingmoe3_delta_net(ly: Layers) -> DeltaNet:
    # llama_model_bailingmoe3::load_arch_hparams: full-rank f and g, low-rank Q by q_lora_rank, a per-head MLA
    # output gate
    hp = ly.hp
    return replace(
        _kda(ly),
        q_lora=hp.n_lora_q,
        attn_gate=ly.heads[0] if ly.n_all else 0,
    )


def no_ffn_clamp(ly: Layers, il: int) -> bool:
    return False


def shexp_clamp(ly: Layers, il: int) -> bool:
    # llama_model_bailingmoe3 / _step35::load_arch_hparams: swiglu_clamp_shexp, which build_ffn reads for the
    # layer's dense and shared FFNs
    return swiglu_clamped(ly, HParams.swiglu_clamp_shexp, il)


def experts_after_leading_dense(ly: Layers, il: int) -> bool:
    # llama_model_<arch>::load_arch_tensors: ffn_*_exps from layer leading_dense_block_count on
    return ly.hp.n_expert > 0 and il >= ly.hp.n_layer_dense_lead


def experts_interleaved(ly: Layers, il: int) -> bool:
    # llama_model_llama4::load_arch_tensors: is_moe_layer = (il + 1) % interleave_moe_layer_step == 0
    step = ly.hp.n_moe_layer_step or 1
    return ly.hp.n_expert > 0 and (il + 1) % step == 0


def experts_where_routed(ly: Layers, il: int) -> bool:
    # llama_model_jamba::load_arch_tensors: a layer routes experts where it holds ffn_gate_inp (not required)
    return ly.tensors is not None and ROUTER.format(bid=il) in ly.tensors


def experts_where_routed_else_leading_dense(ly: Layers, il: int) -> bool:
    # step35.cpp: a layer routes experts where it holds ffn_gate_inp (not required); where the file's names are
    # unknown, its converter's leading_dense_block_count says which layers do
    if ly.tensors is None:
        return experts_after_leading_dense(ly, il)
    return experts_where_routed(ly, il)


def experts_on_every_layer(ly: Layers, il: int) -> bool:
    # llama_model_minimax_01::load_arch_tensors: ffn_gate_inp and the experts on every layer
    return ly.hp.n_expert > 0


def experts_on_ffn_layers(ly: Layers, il: int) -> bool:
    # llama_model_nemotron_h_moe::load_arch_tensors: the layers with n_ff(il) > 0 route experts
    return ly.hp.n_expert > 0 and ly.ff[il] > 0


def ssm_norm_required(ly: Layers) -> bool:
    # llama_model_mamba2 / _granite_hybrid / _nemotron_h::load_arch_tensors: ssm_norm is required
    return True


def ssm_norm_listed(ly: Layers) -> bool:
    # llama_model_falcon_h1::load_arch_tensors: ssm_norm not required (the converter writes it where the checkpoint
    # has one); without the file's tensor names, the published files' (tensors_falcon_h1: none)
    return ly.tensors is not None and SSM_NORM.format(bid=0) in ly.tensors


def q_lora_unless_lite(hp: HParams, n_vocab: int | None) -> int:
    # llama_model_deepseek2::load_arch_hparams: q_lora_rank, not read on the lite shapes (one wq)
    return 0 if hp.deepseek2_lite(n_vocab) else hp.n_lora_q


def q_lora_rank(hp: HParams, n_vocab: int | None) -> int:
    # llama_model_minicpm3 / _deepseek32 / _glm_dsa::load_arch_hparams: q_lora_rank, always
    return hp.required(HParams.n_lora_q)


def no_q_lora(hp: HParams, n_vocab: int | None) -> int:
    # llama_model_plm::load_arch_hparams: q_lora_rank never read (one wq)
    return 0


def no_qk_layer_norm(ly: Layers) -> bool:
    return False


def command_r_qk_norm(ly: Layers) -> bool:
    # llama_model_command_r::load_arch_tensors: attn_q_norm / attn_k_norm (LLM_NORM in its builder) from 64 layers
    return ly.n_trunk >= 64


def stablelm_qk_norm(ly: Layers) -> bool:
    # llama_model_stablelm::load_arch_tensors: attn_q_norm / attn_k_norm not required (LLM_NORM in its builder) where
    # the file holds them; StableLM 2 12B's (40 layers) carry them, so a model whose names are unknown is taken to
    present = layer_tensor(ly, ATTN_Q_NORM, 0)
    return ly.n_trunk == STABLELM_12B_LAYERS if present is None else present


def no_parallel_residual(ly: Layers, il: int) -> bool:
    return False


def parallel_without_ffn_norm(ly: Layers, il: int) -> bool:
    # stablelm.cpp: a layer without ffn_norm (not required) hands the FFN the attention's normed input ("parallel
    # residual"); StableLM 2 12B has none, so a model whose names are unknown is taken to where it has 40 layers
    present = layer_tensor(ly, FFN_NORM, il)
    return ly.n_trunk == STABLELM_12B_LAYERS if present is None else not present


# --- which layers rope Q and K: (layers, is_swa(il) for every layer, il) -----------------------------------

RopeLayers = Callable[[Layers, tuple[bool, ...], int], bool]
NO_ROPE_LAYER_STEP = 4  # llama_hparams::n_no_rope_layer_step's default


def every_layer_ropes(ly: Layers, sliding: tuple[bool, ...], il: int) -> bool:
    return True


def no_rope_every_4th(ly: Layers, sliding: tuple[bool, ...], il: int) -> bool:
    # smollm3.cpp, afmoe.cpp: use_rope = (il + 1) % n_no_rope_layer_step != 0
    return (il + 1) % NO_ROPE_LAYER_STEP != 0


def llama4_ropes(ly: Layers, sliding: tuple[bool, ...], il: int) -> bool:
    # llama_model_llama4::load_arch_hparams: without chunked attention n_no_rope_layer_step = n_layer (the last
    # layer still skips rope in llama4.cpp's (il + 1) % n_no_rope_layer_step != 0)
    return (il + 1) % (NO_ROPE_LAYER_STEP if any(sliding) else ly.n_trunk) != 0


def sliding_layers_rope(ly: Layers, sliding: tuple[bool, ...], il: int) -> bool:
    # cohere2.cpp: rope only where is_swa(il)
    return sliding[il]


def sliding_or_dense_lead_rope(ly: Layers, sliding: tuple[bool, ...], il: int) -> bool:
    # cohere2moe.cpp: is_swa(il) || il < n_layer_dense_lead
    return sliding[il] or il < ly.hp.n_layer_dense_lead


def sliding_layers_or_no_window_rope(ly: Layers, sliding: tuple[bool, ...], il: int) -> bool:
    # exaone4.cpp: use_rope = is_swa(il) || swa_type == LLAMA_SWA_TYPE_NONE
    return sliding[il] or not any(sliding)


def smallthinker_ropes(ly: Layers, sliding: tuple[bool, ...], il: int) -> bool:
    # smallthinker.cpp: use_rope = n_no_rope_layer_step == n_layer || il % n_no_rope_layer_step != 0; the loader
    # sets n_no_rope_layer_step = n_layer without a window, else it keeps the default whatever the window's period
    step = NO_ROPE_LAYER_STEP if any(sliding) else ly.n_trunk
    return step == ly.n_trunk or il % step != 0


# --- the gate on attention's output (compute_graph.output_gate): wqkv_gate's width per token (0: none) --------------


def no_attn_gate(ly: Layers, il: int) -> int:
    return 0


def gate_per_head_where_present(ly: Layers, il: int) -> int:
    # llama_model_step35::load_arch_tensors: attn_gate [n_embd, n_head] (TENSOR_NOT_REQUIRED); Step-3.5 checkpoints
    # carry it, so a model whose names are unknown is taken to
    return 0 if layer_tensor(ly, ATTN_GATE, il) is False else ly.heads[il]


def gate_per_element(ly: Layers, il: int) -> int:
    # llama_model_afmoe::load_arch_tensors: wqkv_gate [n_embd, n_embd_head_k * n_head]
    return ly.heads[il] * ly.head_dims(il, False)[0]


def gate_as_stored(ly: Layers, il: int) -> int:
    # llama_model_laguna::load_arch_tensors: attn_gate's width as the file stores it, n_head (one per head) or
    # n_embd_head_k * n_head (per element); n_head where the file has none
    shape = ly.tensors.get(ATTN_GATE.format(bid=il)) if ly.tensors is not None else None
    return shape[1] if shape is not None and len(shape) > 1 else ly.heads[il]


# --- the trunk's norms, V, and build_ffn's type_op ----------------------------------------------------------------


def never(hp: HParams) -> bool:
    return False


def scaled_always(hp: HParams) -> bool:
    # afmoe.cpp, gemma.cpp, gemma2.cpp, gemma3.cpp, gemma-embedding.cpp, minicpm3.cpp: inp_scaled, the embeddings
    # times sqrt(n_embd) (or scale_embd), unconditionally (ggml_scale: a node of its own)
    return True


def embedding_scaled(hp: HParams) -> bool:
    # granite.cpp, granite-hybrid.cpp: hparams.f_embedding_scale (embedding_scale, 0 when absent) scales build_inp_embd
    return bool(hp.f_embedding_scale)


def mrope(hp: HParams) -> bool:
    # llama_model_rope_type: LLAMA_ROPE_TYPE_MROPE or IMROPE whatever the file says (n_pos_per_embd 4)
    return True


def mrope_with_sections(hp: HParams) -> bool:
    # llama_model_rope_type: MROPE where llama_hparams::use_mrope (rope sections 0 and 1 set)
    sections = hp.rope_sections
    return isinstance(sections, tuple | list) and len(sections) >= 2 and all(is_int(s) and s > 0 for s in sections[:2])


def rms_eps_missing(hp: HParams) -> bool:
    # cohere2moe.cpp: LLM_NORM where the file has no attention.layer_norm_rms_epsilon (f_norm_rms_eps 0)
    return not hp.has(HParams.f_norm_rms_eps)


def no_attn_v(ly: Layers, il: int) -> bool:
    # llama_model_gemma4::load_arch_tensors: attn_v is not required; without it gemma4.cpp's Vcur is Kcur
    return ly.tensors is not None and ATTN_V.format(bid=il) not in ly.tensors


def wv_everywhere(ly: Layers, il: int) -> bool:
    return False


def no_out_scale(ly: Layers, il: int) -> bool:
    return False


def out_scale_where_present(ly: Layers, il: int) -> bool:
    # llama_model_gemma4::load_arch_tensors: layer_output_scale is not required; gemma4.cpp scales by it where present
    return layer_tensor(ly, LAYER_OUT_SCALE, il) is True


def ffn_op(activation: FfnOp | None, gated: bool) -> FfnOp:
    # the type_op a builder passes build_ffn: its Graph's, else llama.cpp's usual LLM_FFN_SILU with a parallel gate
    # (swiglu) and LLM_FFN_GELU without one
    return activation or (FfnOp.SILU if gated else FfnOp.GELU)


@dataclass(frozen=True)
class Graph:
    """How llama.cpp builds the architecture's graph (src/models/<arch>.cpp over llama-graph.cpp), where it
    differs from a decoder's: the compute buffer of an architecture with a `Graph` is derived."""

    recurrent_in: RecurrentWidth = mamba2_in  # the in-projection of its recurrent blocks (if any)
    moe_layers: LayerPredicate = experts_after_leading_dense  # the blocks that route experts (no dense FFN)
    fused_qkv: bool = False  # build_qkv: one attn_qkv matmul
    qkv_where_present: bool = False  # create_tensor_qkv: one attn_qkv matmul where the file holds it
    qk_norm_where_present: bool = False  # glm4-moe.cpp: attn_q_norm / attn_k_norm where the file holds them
    logits: bool = True  # False: an embedding graph (build_pooling, no LM head)
    cache_attention: bool = True  # False: build_attn_inp_no_cache (non-causal attention over the ubatch)
    ffn_in_recurrence: bool = False  # RWKV 6/7: the FFN is the channel mix, inside `recurrent_in`
    hidden_output: bool = False  # res->t_h_nextn: the last hidden state is an output, rows selected after the trunk
    node_for_node: bool = False  # the rebuilt graph is llama.cpp's, node for node (checked against its graph)
    bert_block: bool = False  # src/models/bert.cpp: LayerNorm after each residual add, non-causal, no KV cache
    mixer: Mixer = Mixer.MAMBA2  # its recurrent blocks' kind, if it has any
    rope_switch: bool = False  # granite's loaders: rope.scaling.finetuned (default true) turns rope on in every layer
    layer_norm: bool = False  # build_norm(..., LLM_NORM): LayerNorm for attn_norm, ffn_norm and output_norm
    qk_layer_norm: Callable[[Layers], bool] = no_qk_layer_norm  # LayerNorms of Q and K before rope (new tensors)
    parallel_block: bool = False  # command-r.cpp: attention and the FFN read the same normed input, summed after
    ssm_norms: Callable[[HParams], bool] = dt_b_c_rms  # build_mamba_layer: RMS norms on dt, B and C (Mamba-1)
    ssm_norm_weights: bool = False  # and their weights (jamba's ssm_dt_norm / _b_norm / _c_norm; mamba loads none)
    rope: bool = True  # False: the builder ropes no layer (jamba.cpp)
    reads_tensors: bool = False  # `moe_layers` reads the tensor names (a file's): no graph where they are unknown
    builder: GraphBuilder | None = None  # the architecture's own builder (estimator/graph_<arch>.py)
    qk_norm: bool = False  # build_norm on Q and K after build_qkv (views of a fused QKV: a new tensor each)
    fused_up: bool = False  # build_ffn with no gate: one ffn_up of 2 x n_ff, swiglu over its halves
    deci_blocks: bool = False  # src/models/deci.cpp: per-layer attention-free, "linear attention" and FFN-free blocks
    residual_first: bool = False  # the builder adds attention's output to the residual: ggml_add(residual, cur)
    ffn_residual_first: bool = False  # and the FFN's output to its input: ggml_add(ffn_inp, cur)
    wkv: WkvSizes | None = None  # an RWKV block's sizes (estimator/graph_rwkv.py rebuilds its graph)
    routing: RoutingRule = plain_routing  # build_moe_ffn's call in a block that routes experts (None: not rebuilt)
    low_rank_kv: bool = False  # kv_lora_rank's latent decompressed by wkv_b where the model is not MLA (MHA cache)
    q_lora: Callable[[HParams, int | None], int] = q_lora_unless_lite  # MLA / low-rank KV: the query's rank
    attn_gate: Callable[[Layers, int], int] = no_attn_gate  # wqkv_gate's width: the gate on attention's output
    head_scale: bool = False  # minicpm3.cpp: the final norm scaled before the LM head
    headless_embeddings: bool = False  # lfm2.cpp: no LM head under cparams.embeddings (t_embd the last node)
    roped: RopeLayers = every_layer_ropes  # the layers whose builder ropes Q and K
    pre_norm: bool = True  # False: no attn_norm / ffn_norm before attention and the FFN (olmo2, exaone4)
    qk_norm_whole: bool = False  # olmo2.cpp: RMS norms over the whole Q and K projections, before the reshape
    v_from_k: Callable[[Layers, int], bool] = wv_everywhere  # layers whose V is K's projection (no wv)
    per_layer_embd: bool = False  # gemma4.cpp: per-layer embeddings, embedding_length_per_layer_input wide
    layer_norm_when: Callable[[HParams], bool] = never  # LLM_NORM for the trunk's norms on this condition
    normed_hidden_output: bool = False  # res->t_h_nextn after output_norm, the rows selected after it
    attn_temperature: bool = False  # llama4.cpp: Q of a layer without rope times the attn_scale input
    v_norm: bool = False  # ggml_rms_norm of V (gemma4.cpp)
    delta_net: Callable[[Layers], DeltaNet] | None = None  # a delta-net model's blocks (estimator/graph_delta_net.py)
    activation: FfnOp | None = None  # build_ffn's type_op (None: ffn_op's default, SILU with a gate, GELU without)
    ffn_clamp: LayerPredicate = no_ffn_clamp  # build_ffn's SwiGLU clamped (hparams.swiglu_clamp_shexp[il])
    ssm_norm: Callable[[Layers], bool] = ssm_norm_required  # build_mamba2_layer: the grouped norm of y
    dsa: IndexerLayers | None = None  # DSA's lightning indexer (estimator/graph_dsa.py)
    hyper: Callable[[Layers], HyperConnections] | None = None  # qwen4exp's residual streams (graph_qwen4exp.py)
    dsv4: Callable[[Layers], Dsv4 | None] | None = None  # deepseek4's streams and compressors (graph_dsv4.py)
    parallel_residual: Callable[[Layers, int], bool] = no_parallel_residual  # the FFN reads attention's normed input
    post_norms: bool = False  # gemma2.cpp, gemma3.cpp: attn_post_norm and ffn_post_norm before each residual add
    attn_post_norm_first: bool = False  # afmoe.cpp: attn_post_norm before the last layer's output rows, not after
    # whether graph_get_cb pins attn_post_norm's and ffn_post_norm's "norm" to the layer's device: build_norm given
    # il (gemma2.cpp, olmo2.cpp, exaone4.cpp give ffn_post_norm -1; muse-glimmer.cpp's ggml_rms_norm has no callback)
    post_norm_pins: tuple[bool, bool] = (True, False)
    embd_norm: bool = False  # muse-glimmer.cpp: build_norm over the token rows without a weight (embd_norm)
    router_from_input: bool = False  # smallthinker.cpp: ffn_gate_inp over the block's input, passed as probs_in
    embedding_scale: Callable[[HParams], bool] = never  # build_inp_embd: the embeddings scaled (f_embedding_scale)
    attn_biases: bool = False  # build_qkv's Q, K and V biases and build_attn's wo_b (the loader requires them)
    sinks: bool = False  # attention sinks (attn_sinks, required)
    sinks_where_present: bool = False  # attn_sinks created TENSOR_NOT_REQUIRED: the sinks where the file has them
    out_scale: Callable[[Layers, int], bool] = no_out_scale  # layers whose output is times layer_output_scale
    gate_op: str = "SIGMOID"  # the unary op on attention's output gate: ggml_sigmoid (step35, afmoe), ggml_softplus
    # the NextN/MTP layers' own blocks derived too (GraphShape.nextn: their heads, window and FFN), which the
    # architecture's graph_mtp builds on (estimator/graph_mtp.py)
    nextn_blocks: bool = False


SAME_DECODER = Graph(node_for_node=True)
# granite.cpp, granite-hybrid.cpp: NoPE when not finetuned, the embeddings scaled, the experts' weights normed
GRANITE = Graph(node_for_node=True, rope_switch=True, embedding_scale=embedding_scaled, routing=normed_routing)
# granite-swa.cpp: granite's embedding scale and experts, attention sinks (attn_sinks, required) in every layer, rope
# where hparams.has_rope (no finetuned switch)
GRANITE_SWA = Graph(node_for_node=True, embedding_scale=embedding_scaled, routing=normed_routing, sinks=True)
SAME_NEXTN_DECODER = Graph(hidden_output=True, node_for_node=True)
# openai-moe.cpp: biased Q, K, V and wo, attention sinks, biased router and experts
GPT_OSS = replace(SAME_NEXTN_DECODER, attn_biases=True, sinks=True, routing=gpt_oss_routing)
QK_NORMED = Graph(qk_norm=True, node_for_node=True)  # qwen3.cpp, qwen3moe.cpp: attn_q_norm, attn_k_norm before rope
QWEN3MOE = replace(QK_NORMED, routing=normed_routing)
GEMMA = Graph(embedding_scale=scaled_always, node_for_node=True)  # src/models/gemma.cpp: the embeddings scaled
# src/models/gemma2.cpp, gemma3.cpp: build_ffn(..., LLM_FFN_GELU, LLM_FFN_PAR), geglu
GEMMA2 = Graph(post_norms=True, activation=FfnOp.GELU, embedding_scale=scaled_always, node_for_node=True)
GEMMA3 = replace(GEMMA2, qk_norm=True)
# src/models/gemma-embedding.cpp: gemma3's blocks over build_attn_inp_no_cache (non-causal, no cache), no LM head
GEMMA_EMBEDDING = replace(GEMMA3, logits=False, cache_attention=False)


COMMAND_R = Graph(layer_norm=True, parallel_block=True, qk_layer_norm=command_r_qk_norm, node_for_node=True)
STABLELM = Graph(  # src/models/stablelm.cpp: LayerNorms, Q/K LayerNorms and the parallel residual where present
    layer_norm=True,
    qk_layer_norm=stablelm_qk_norm,
    parallel_residual=parallel_without_ffn_norm,
    node_for_node=True,
)
PHI3 = Graph(fused_qkv=True, fused_up=True, ffn_residual_first=True, node_for_node=True)  # src/models/phi3.cpp
OPENELM = Graph(fused_qkv=True, qk_norm=True, residual_first=True, node_for_node=True)  # src/models/openelm.cpp
DECI = Graph(deci_blocks=True, node_for_node=True)  # src/models/deci.cpp
# src/models/plamo3.cpp: one wqkv, Q/K norms over its views, post norms, one ffn_up whose halves swiglu gates
PLAMO3 = Graph(fused_qkv=True, qk_norm=True, post_norms=True, fused_up=True, node_for_node=True)
STARCODER2 = Graph(layer_norm=True, node_for_node=True)  # src/models/starcoder2.cpp: LayerNorms, biases in place
SMOLLM3 = Graph(roped=no_rope_every_4th, node_for_node=True)  # src/models/smollm3.cpp
# src/models/olmo2.cpp: post norms only
OLMO2 = Graph(pre_norm=False, qk_norm_whole=True, post_norms=True, node_for_node=True)
EXAONE4 = Graph(  # src/models/exaone4.cpp: post norms only
    pre_norm=False, qk_norm=True, post_norms=True, roped=sliding_layers_or_no_window_rope, node_for_node=True
)
COHERE2 = replace(COMMAND_R, qk_layer_norm=no_qk_layer_norm, roped=sliding_layers_rope)  # src/models/cohere2.cpp
COHERE2MOE = Graph(  # src/models/cohere2moe.cpp: command-r's parallel block, routed experts, t_h_nextn after the norm
    layer_norm_when=rms_eps_missing,
    parallel_block=True,
    roped=sliding_or_dense_lead_rope,
    routing=cohere2moe_routing,
    hidden_output=True,
    normed_hidden_output=True,
    node_for_node=True,
    nextn_blocks=True,  # graph_mtp builds on the NextN layer's own block (its window: the base or the SWA half)
)
GEMMA4 = Graph(  # src/models/gemma4.cpp, rebuilt by estimator/graph_gemma4.py (t_h_nextn after the norm)
    builder=build_gemma4,
    qk_norm=True,
    v_norm=True,
    v_from_k=no_attn_v,
    activation=FfnOp.GELU,  # build_ffn(..., LLM_FFN_GELU, LLM_FFN_PAR): geglu
    moe_layers=experts_where_routed,
    routing=gemma4_routing,
    per_layer_embd=True,
    out_scale=out_scale_where_present,
    reads_tensors=True,
    node_for_node=True,
)
LLAMA4 = Graph(  # src/models/llama4.cpp
    moe_layers=experts_interleaved,
    roped=llama4_ropes,
    attn_temperature=True,
    routing=llama4_routing,
    node_for_node=True,
)
AFMOE = Graph(  # src/models/afmoe.cpp: q/k norms, a sigmoid gate on the attention's output, post norms
    qk_norm=True,
    post_norms=True,
    attn_post_norm_first=True,
    post_norm_pins=(True, True),
    roped=no_rope_every_4th,
    attn_gate=gate_per_element,
    routing=sigmoid_routing,
    embedding_scale=scaled_always,
    node_for_node=True,
)
# exaone-moe.cpp: q/k norms per head, rope on the sliding layers alone, experts as the file routes them
EXAONE_MOE = Graph(qk_norm=True, roped=sliding_layers_rope, routing=exaone_moe_routing, node_for_node=True)
SMALLTHINKER = Graph(  # smallthinker.cpp: the router over the block's input, rope where use_rope
    router_from_input=True,
    routing=smallthinker_routing,
    roped=smallthinker_ropes,
    node_for_node=True,
)
# mellum.cpp: q/k norms per head, build_moe_ffn with norm_w (w_scale unread: 0)
MELLUM = Graph(qk_norm=True, routing=normed_routing, node_for_node=True)
MUSE_GLIMMER = Graph(  # muse-glimmer.cpp: a weightless norm of the embeddings, q/k norms, rope on the sliding layers,
    embd_norm=True,  # a sigmoid gate per element on attention's output, unpinned post norms (ggml_rms_norm) with
    qk_norm=True,  # the mixer's before the output rows
    roped=sliding_layers_rope,
    attn_gate=gate_per_element,
    post_norms=True,
    attn_post_norm_first=True,
    post_norm_pins=(False, False),
    node_for_node=True,
)
LAGUNA = replace(  # src/models/laguna.cpp: afmoe's attention with a softplus gate as wide as stored, no post norms
    AFMOE,
    embedding_scale=never,  # "no MuP embedding scale"
    roped=every_layer_ropes,
    attn_gate=gate_as_stored,
    routing=laguna_routing,
    reads_tensors=True,
    post_norms=False,
    attn_post_norm_first=False,
    post_norm_pins=(True, False),
    gate_op="SOFTPLUS",
)
EMBEDDER = Graph(logits=False, cache_attention=False, node_for_node=True)  # llama.cpp's graph<embed>: no cache or head
BERT = Graph(logits=False, cache_attention=False, bert_block=True, node_for_node=True)
MAMBA1 = Graph(recurrent_in=mamba_in, mixer=Mixer.MAMBA, node_for_node=True)
JAMBA = replace(  # jamba.cpp: no rope, experts where a layer has a router
    MAMBA1,
    ssm_norms=dt_b_c_norm_weights,
    ssm_norm_weights=True,
    rope=False,
    moe_layers=experts_where_routed,
    reads_tensors=True,
    residual_first=True,
    ffn_residual_first=True,
)
GDN = Graph(recurrent_in=gated_delta_net_in, mixer=Mixer.GATED_DELTA_NET, node_for_node=True)
QWEN3NEXT = replace(GDN, builder=build_qwen3next, delta_net=qwen3next_delta_net, routing=qwen_next_routing)
QWEN35 = replace(GDN, builder=build_qwen35, delta_net=qwen35_delta_net, routing=qwen_next_routing)
KDA = Graph(recurrent_in=kda_in, mixer=Mixer.KDA, node_for_node=True)
KIMI_LINEAR = replace(KDA, builder=build_kimi_linear, delta_net=kimi_linear_delta_net, routing=kimi_linear_routing)
KIMI_K3 = replace(KDA, builder=build_kimi_k3, delta_net=kimi_k3_delta_net, routing=kimi_k3_routing)
BAILINGMOE3 = replace(
    KDA, builder=build_bailingmoe3, delta_net=bailingmoe3_delta_net, routing=bailingmoe3_routing, ffn_clamp=shexp_clamp
)
SHORT_CONV = Graph(  # lfm2.cpp: q and k RMS-normed, the residual added first, no LM head serving embeddings
    recurrent_in=short_conv_in,
    mixer=Mixer.SHORT_CONV,
    qk_norm=True,
    residual_first=True,
    ffn_residual_first=True,
    headless_embeddings=True,
)
SAME_SHORT_CONV = replace(SHORT_CONV, node_for_node=True)
RWKV_CHANNEL_MIX = Graph(recurrent_in=rwkv_channel_mix_in, ffn_in_recurrence=True, mixer=Mixer.RWKV, node_for_node=True)
RWKV_TIME_MIX = Graph(recurrent_in=rwkv_time_mix_in, mixer=Mixer.RWKV, node_for_node=True)
RWKV6, RWKV7 = (replace(RWKV_CHANNEL_MIX, wkv=sizes) for sizes in (rwkv6_wkv, rwkv7_wkv))
RWKV6_QWEN2, ARWKV7 = (replace(RWKV_TIME_MIX, wkv=sizes) for sizes in (rwkv6qwen2_wkv, arwkv7_wkv))
GEMMA3N = Graph(node_for_node=True, builder=build_gemma3n)  # AltUp, LAuReL, per-layer inputs, shared KV
FALCON_H1 = Graph(node_for_node=True, builder=build_falcon_h1, ssm_norm=ssm_norm_listed)
NEMOTRON_H = Graph(  # nemotron-h.cpp: no rope, relu^2 FFNs, experts on the FFN blocks
    node_for_node=True,
    builder=build_nemotron_h,
    rope=False,
    activation=FfnOp.RELU_SQR,
    moe_layers=experts_on_ffn_layers,
    routing=nemotron_h_routing,
)
LFM2MOE = replace(SAME_SHORT_CONV, routing=lfm2moe_routing)
PLAMO2 = Graph(  # plamo2.cpp: its own Mamba mixer (ssm_in: z and x, as Mamba-1's), a fused QKV with q/k norms
    recurrent_in=mamba_in,
    mixer=Mixer.PLAMO2,
    builder=build_plamo2,
    fused_qkv=True,
    qk_norm=True,
    fused_up=True,
    node_for_node=True,
)
# deepseek2.cpp (mistral4.cpp inherits it): MLA, or without the *_mla keys the latent decompressed per head
DEEPSEEK2 = Graph(low_rank_kv=True, routing=deepseek2_routing, node_for_node=True)
MINICPM3 = Graph(  # minicpm3.cpp
    low_rank_kv=True, q_lora=q_lora_rank, head_scale=True, embedding_scale=scaled_always, node_for_node=True
)
# deepseek32.cpp, glm-dsa.cpp: MLA beside the lightning indexer, rebuilt by estimator/graph_dsa.py
DEEPSEEK32 = Graph(
    builder=build_dsa, dsa=dsa_every_layer_indexes, q_lora=q_lora_rank, routing=deepseek32_routing, node_for_node=True
)
GLM_DSA = replace(DEEPSEEK32, dsa=glm_dsa_indexes, routing=glm_dsa_routing)
MINIMAX_01 = Graph(  # minimax-01.cpp, rebuilt by estimator/graph_minimax.py: lightning and softmax attention, experts
    recurrent_in=lightning_in,
    mixer=Mixer.LIGHTNING,
    builder=build_minimax,
    qkv_where_present=True,  # create_tensor_qkv: the softmax blocks' attn_qkv where the file holds it
    moe_layers=experts_on_every_layer,
    routing=minimax01_routing,
    node_for_node=True,
)
# create_tensor_qkv's llama-style decoders: one attn_qkv matmul where the file holds it (internlm2.cpp; minicpm runs
# granite.cpp's graph with rope always on: its scales work in place, its experts as minicpm_routing calls them)
QKV_WHERE_PRESENT = Graph(qkv_where_present=True, node_for_node=True)
MINICPM = replace(QKV_WHERE_PRESENT, routing=minicpm_routing)
# plm.cpp: minicpm3's decompressed latent with one wq, a relu^2 FFN without gate, no scaled head
PLM = Graph(low_rank_kv=True, q_lora=no_q_lora, activation=FfnOp.RELU_SQR, node_for_node=True)
# glm4-moe.cpp: the trunk's hidden state is the final norm's output; build_qkv's fused path where the file has it
GLM4_MOE = Graph(routing=sigmoid_routing, qkv_where_present=True, qk_norm_where_present=True, node_for_node=True)
MIMO2 = Graph(  # mimo2.cpp: without embeddings_nextn, a decoder whose last layer keeps the rows; experts by router
    routing=mimo2_routing,
    moe_layers=experts_where_routed,
    reads_tensors=True,
    qkv_where_present=True,  # its fused path: Q, K and V views of one attn_qkv
    sinks_where_present=True,  # build_attn's sinks: model.layers[il].attn_sinks, null where the file has none
    node_for_node=True,
    nextn_blocks=True,
)
STEP35 = Graph(  # step35.cpp: q/k norms, the head-wise output gate, SwiGLU clamps, the trunk's state kept
    hidden_output=True,
    qk_norm=True,
    attn_gate=gate_per_head_where_present,
    ffn_clamp=shexp_clamp,
    routing=step35_routing,
    moe_layers=experts_where_routed_else_leading_dense,
    node_for_node=True,
    nextn_blocks=True,
)

HY_V3 = Graph(  # hy-v3.cpp: q/k norms, leading dense blocks where no router is held, t_h_nextn after the output norm
    qk_norm=True,
    routing=hy_v3_routing,
    moe_layers=experts_where_routed_else_leading_dense,
    hidden_output=True,
    normed_hidden_output=True,
    node_for_node=True,
)

# --- qwen4exp: hyper-connections, QSA, the PLE n-gram embedding -------------------------------------------------

PLE_CONV = "blk.{bid}.ple_conv1d.weight"  # LLM_TENSOR_PLE_CONV1D


def qwen4exp_ple_layer(ly: Layers) -> int:
    # llama_model_qwen4exp::load_arch_hparams: ple.layers (absent or empty: no PLE); llama.cpp refuses more than one
    # layer, one out of range, or one that is not a linear-attention (recurrent) layer
    value = ly.hp.ple_layers
    if value is None or value == ():
        return -1
    layers = tuple(value) if isinstance(value, tuple) else ()
    if len(layers) != 1 or not is_int(layers[0]) or not 0 <= layers[0] < ly.n_all or not ly.recurrent[layers[0]]:
        raise EvidenceError(Limit.ARTIFACT_UNREADABLE, f"llama.cpp refuses {key_name(NewerKeys.PLE_LAYERS)} {value}")
    return layers[0]


def no_history(ly: Layers, il: int) -> int:
    return 0


def ple_conv_history(ly: Layers, il: int) -> int:
    # llama_memory_recurrent: the PLE layer's own cache_ple_r row, llama_hparams::ple_conv_state() =
    # (ple.conv_kernel - 1) * ple.ngram_size * hyper_connection.count * n_embd
    if il != qwen4exp_ple_layer(ly):
        return 0
    hp = ly.hp
    kernel, ngram = hp.required(HParams.ple_conv_kernel), hp.required(HParams.ple_ngram_size)
    return max(0, kernel - 1) * ngram * hp.required(HParams.n_hc) * ly.n_embd


def ple_conv_f32(ly: Layers, il: int) -> bool:
    # qwen4exp.cpp build_ple: ple_conv1d keeps its type (any but F32 is cast); where the file's types are unknown,
    # the file type's (the converter writes the kernel in it)
    name = PLE_CONV.format(bid=il)
    if ly.types is not None and name in ly.types:
        return ly.types[name] == QT.F32
    return ly.hp.ftype == LlamaFileType.ALL_F32


def qwen4exp_hyper(ly: Layers) -> HyperConnections:
    # llama_model_qwen4exp::load_arch_hparams: hyper_connection.count and .low_rank, the indexer's head count, key
    # length and top_k, attention.compress_ratios (0 where absent: dense attention); the PLE layer's n-gram keys
    hp, ple = ly.hp, qwen4exp_ple_layer(ly)
    ngram, per_ngram = hp.ple_ngram_size, hp.ple_heads_per_ngram
    return HyperConnections(
        count=hp.required(HParams.n_hc),
        rank=hp.required(HParams.n_hc_low_rank),
        ratios=hp.compress_ratio_arr,
        idx_heads=hp.required(HParams.indexer_n_head),
        idx_head=hp.required(HParams.indexer_head_size),
        idx_top_k=hp.required(HParams.indexer_top_k),
        ple_layer=ple,
        ple_heads=max(0, ngram - 1) * per_ngram if ple >= 0 else 0,
        ple_head=hp.n_embd_per_layer if ple >= 0 else 0,
        ple_kernel=hp.ple_conv_kernel if ple >= 0 else 0,
        ple_dilation=ngram if ple >= 0 else 0,
        ple_conv_f32=ple >= 0 and ple_conv_f32(ly, ple),
    )


QWEN4EXP = replace(QWEN35, builder=build_qwen4exp, routing=qwen4exp_routing, hyper=qwen4exp_hyper)


# --- the NextN/MTP layers' tensors loaded without load_mtp ---------------------------------------------------------

_T = gguf.MODEL_TENSOR
# llama_model_base::create_tensor_gate_up_exps: the fused ffn_gate_up_exps probed with TENSOR_NOT_REQUIRED alone (the
# caller's TENSOR_SKIP not passed), so a NextN block's is loaded without load_mtp (deepseek2, qwen3next, qwen35moe)
GATE_UP_PROBE = frozenset({_T.FFN_GATE_UP_EXP})
# deepseek32.cpp / glm-dsa.cpp load_arch_tensors: every layer's exp_probs_b created TENSOR_NOT_REQUIRED alone
EXP_PROBS_B = frozenset({_T.FFN_EXP_PROBS_B})
# the NextN head's optional tensors where a load_block_mtp creates them TENSOR_NOT_REQUIRED alone
NEXTN_OPTIONAL = frozenset({_T.NEXTN_EMBED_TOKENS, _T.NEXTN_SHARED_HEAD_HEAD, _T.NEXTN_SHARED_HEAD_NORM})
# hy-v3.cpp / step35.cpp's NextN blocks: their whole FFN (dense, router, experts, shared expert) TENSOR_NOT_REQUIRED
# alone, gate_up_exps' fallback to gate_exps and up_exps too (hy_v3 passes TENSOR_NOT_REQUIRED as its flags)
FFN_OPTIONAL = frozenset(
    {
        _T.FFN_GATE,
        _T.FFN_DOWN,
        _T.FFN_UP,
        _T.FFN_GATE_INP,
        _T.FFN_EXP_PROBS_B,
        _T.FFN_GATE_UP_EXP,
        _T.FFN_GATE_EXP,
        _T.FFN_DOWN_EXP,
        _T.FFN_UP_EXP,
        _T.FFN_GATE_SHEXP,
        _T.FFN_UP_SHEXP,
        _T.FFN_DOWN_SHEXP,
    }
)
# step35.cpp load_block_mtp: besides, the q/k norms and the head-wise attention gate TENSOR_NOT_REQUIRED alone
STEP35_NEXTN = FFN_OPTIONAL | NEXTN_OPTIONAL | {_T.ATTN_Q_NORM, _T.ATTN_K_NORM, _T.ATTN_GATE}


# --- the table ----------------------------------------------------------------------------------------------


class Memory(Enum):
    KV = auto()
    RECURRENT = auto()  # llm_arch_is_recurrent: no KV cache at all
    HYBRID = auto()  # llama_memory_hybrid: a KV cache for attention layers, a recurrent state for the rest
    NONE = auto()  # create_memory returns nullptr: non-causal embedding and diffusion models


@dataclass(frozen=True)
class Recurrence:
    layers: LayerPredicate  # is_recurrent(il) over the trunk
    reads_group_count: bool = True  # mamba-1 style loaders never read ssm.group_count (it counts as 0)
    lightning_attention: bool = False  # minimax-01: S = head_dim^2 * n_head, no conv state
    history: Callable[[Layers, int], int] = no_history  # a layer's further F32 row beside R and S (qwen4exp's PLE)


# --- llama_model::type where llama.cpp's quantizer reads it (LLM_TYPE_70B: more bits for attn_v) -----------


def never_70b(hp: Shape) -> bool:
    return False


def llama_70b(hp: Shape) -> bool:
    # llama_model_llama::load_arch_hparams: 80 layers (no 8 experts) with grouped KV heads is LLM_TYPE_70B
    return hp.n_expert != 8 and hp.n_layer == 80 and hp.n_head() != hp.n_head_kv()


def eighty_layers_70b(hp: Shape) -> bool:
    # llama_model_qwen2::load_arch_hparams: 80 layers is LLM_TYPE_70B
    return hp.n_layer == 80


@dataclass(frozen=True)
class ArchRule:
    memory: Memory = Memory.KV
    kv_layers: LayerPredicate = every_layer
    window: Window | None = None
    recurrence: Recurrence | None = None
    mla: Callable[[HParams], bool] = no_mla
    kv_from_start: Callable[[Layers], int] = every_layer_owns_kv
    indexer: IndexerCache | None = None
    compression: Compression | None = None  # deepseek4's compressed caches and compressor states
    graph: Graph | None = None  # its compute graph, as derived (None: the workspace is unknown)
    tied_embedding_twice: bool = False  # the loader creates the tied output before token_embd: two copies
    parameters: Counting = GATED_FFN  # how its loader shapes the weights
    # the tensors its loader requires (estimator/tensor_list.py), where mirrored: its weights and parameter count
    tensors: TensorList | None = None
    # TENSOR_NOT_REQUIRED tensors whose shape create_tensor still checks where the file holds one (artifact.py)
    optional: TensorList | None = None
    # tensors a conversion may hold that its loader never creates: done_getting_tensors refuses the file (artifact.py)
    uncreated: Callable[[HParams], frozenset[str]] | None = None
    # load_arch_hparams sets n_layer_nextn 0 where the first NextN layer has no nextn.eh_proj: every block a trunk
    # layer, the MTP context refused (artifact.py)
    nextn_needs_head: bool = False
    # load_arch_tensors requires the NextN layers' tensors (TENSOR_SKIP'd unless load_mtp, never TENSOR_NOT_REQUIRED:
    # no trunk-only probe of nextn.eh_proj), so a file without the first one's nextn.eh_proj is refused (artifact.py)
    nextn_head_required: bool = False
    # the NextN/MTP layers' tensors its load_arch_tensors creates without TENSOR_SKIP (TENSOR_NOT_REQUIRED alone):
    # llama.cpp loads them without load_mtp too, in their layer's buffer types (dev_layer(il)) (artifact.mtp_tensors)
    nextn_unskipped: frozenset[gguf.MODEL_TENSOR] = frozenset()
    llm_type_70b: Callable[[Shape], bool] = never_70b  # load_arch_hparams names it LLM_TYPE_70B (quant recipe)
    # llama_kv_cache::has_cell_ext: M-RoPE's cells keep a 2-D position, saved with a sequence's state
    cell_positions: Callable[[HParams], bool] = never
    # llm_arch_supports_rs_rollback (llama-arch.cpp): its recurrent state keeps n_rs_seq snapshots per sequence for a
    # speculative rollback; any other architecture's n_rs_seq is clamped to 0 (llama_context's constructor)
    rs_rollback: bool = False
    # why llama.cpp aborts at a model's first decode whatever the settings, its context made ("": it decodes)
    decode_abort: Callable[[Layers, tuple[bool, ...]], str] = decodes


PLAIN = ArchRule()  # create_memory's default branch: a plain KV cache over every layer
NO_MEMORY = ArchRule(memory=Memory.NONE)
MROPE = ArchRule(cell_positions=mrope)

_ALL_RECURRENT = Recurrence(every_layer)
_NO_KV_HEADS = Recurrence(no_kv_heads)
_QWEN_NEXT = Recurrence(every_4th_attends)

RULES: dict[str, ArchRule] = {
    # create_memory's default branch: a plain KV cache over every layer (section 7 of the ground-truth notes)
    "llama": ArchRule(tensors=tensors_llama, llm_type_70b=llama_70b, graph=SAME_DECODER),
    "deci": ArchRule(graph=DECI),
    "falcon": PLAIN,
    "grok": PLAIN,
    "gpt2": ArchRule(parameters=LEARNED_POSITIONS),
    "gptj": PLAIN,
    "gptneox": PLAIN,
    "mpt": PLAIN,
    "baichuan": PLAIN,
    "starcoder": ArchRule(parameters=LEARNED_POSITIONS),
    "starcoder2": ArchRule(tensors=tensors_starcoder2, graph=STARCODER2, parameters=NON_GATED_FFN),
    "refact": PLAIN,
    "bloom": PLAIN,
    "stablelm": ArchRule(tensors=tensors_stablelm, graph=STABLELM),
    "qwen": PLAIN,
    "qwen2": ArchRule(tensors=tensors_qwen2, llm_type_70b=eighty_layers_70b, graph=SAME_DECODER),
    "qwen2moe": ArchRule(tensors=tensors_qwen2moe),
    "qwen2vl": MROPE,
    "qwen3": ArchRule(tensors=tensors_qwen3, graph=QK_NORMED),
    "qwen3moe": ArchRule(tensors=tensors_qwen3, graph=QWEN3MOE),
    "qwen3vl": MROPE,
    "qwen3vlmoe": MROPE,
    "phi2": ArchRule(parameters=NON_GATED_FFN),
    "phi3": ArchRule(tensors=tensors_phi3, graph=PHI3),
    "phimoe": PLAIN,
    "plamo": PLAIN,
    "codeshell": PLAIN,
    "orion": PLAIN,
    "internlm2": ArchRule(tensors=tensors_llama, graph=QKV_WHERE_PRESENT),
    "minicpm": ArchRule(tensors=tensors_llama, graph=MINICPM),
    "minicpm3": ArchRule(graph=MINICPM3),
    "gemma": ArchRule(tensors=tensors_gemma, graph=GEMMA),
    "xverse": PLAIN,
    "command-r": ArchRule(tensors=tensors_command_r, graph=COMMAND_R),
    "dbrx": PLAIN,
    "olmo": PLAIN,
    "olmoe": PLAIN,
    "openelm": ArchRule(graph=OPENELM),
    "arctic": PLAIN,
    "deepseek": PLAIN,
    "chatglm": PLAIN,
    "glm4": ArchRule(tensors=tensors_glm4, cell_positions=mrope_with_sections),
    "glm4moe": ArchRule(graph=GLM4_MOE, cell_positions=mrope_with_sections),
    "bitnet": PLAIN,
    "jais": PLAIN,
    "jais2": PLAIN,
    "nemotron": PLAIN,
    "exaone": PLAIN,
    "granite": ArchRule(tensors=tensors_granite, graph=GRANITE),
    "granitemoe": ArchRule(tensors=tensors_granite),
    "chameleon": PLAIN,
    "plm": ArchRule(graph=PLM, parameters=NON_GATED_FFN),
    "bailingmoe": PLAIN,
    "bailingmoe2": PLAIN,
    "dots1": PLAIN,
    "arcee": PLAIN,
    "ernie4_5": PLAIN,
    "ernie4_5-moe": PLAIN,
    "hunyuan-moe": PLAIN,
    "hunyuan-dense": PLAIN,
    "hunyuan_vl": PLAIN,
    "smollm3": ArchRule(tensors=tensors_llama, graph=SMOLLM3),
    "seed_oss": PLAIN,
    "grovemoe": PLAIN,
    "apertus": PLAIN,
    "minimax-m2": PLAIN,
    "cogvlm": PLAIN,
    "pangu-embedded": PLAIN,
    "mistral3": ArchRule(tensors=tensors_llama, graph=SAME_DECODER),
    "maincoder": PLAIN,
    "talkie": PLAIN,
    "llama-embed": ArchRule(graph=EMBEDDER),
    "deepseek2-ocr": PLAIN,
    "paddleocr": MROPE,
    # create_memory returns no memory at all for these
    "bert": ArchRule(tensors=tensors_bert, memory=Memory.NONE, graph=BERT, parameters=LEARNED_POSITIONS),
    "jina-bert-v2": NO_MEMORY,
    "jina-bert-v3": NO_MEMORY,
    "nomic-bert": ArchRule(tensors=tensors_nomic_bert, memory=Memory.NONE, graph=replace(BERT, fused_qkv=True)),
    "nomic-bert-moe": NO_MEMORY,
    "neo-bert": NO_MEMORY,
    "eurobert": NO_MEMORY,
    "modern-bert": NO_MEMORY,
    "gemma-embedding": ArchRule(
        tensors=tensors_gemma3,
        optional=optional_gemma_embedding,
        memory=Memory.NONE,
        window=Window(period_pattern, period=6),  # LLAMA_SWA_TYPE_SYMMETRIC: a mask only, there is no cache
        graph=GEMMA_EMBEDDING,
    ),
    "wavtokenizer-dec": NO_MEMORY,
    "dream": NO_MEMORY,
    "llada": NO_MEMORY,
    "llada-moe": NO_MEMORY,
    "rnd1": NO_MEMORY,
    # MLA: the cache keeps the compressed latent and the rope key as K, and no V
    "deepseek2": ArchRule(
        tensors=tensors_deepseek2, mla=mla_if_lengths, graph=DEEPSEEK2, nextn_unskipped=GATE_UP_PROBE
    ),
    # llama_model_mistral4 inherits deepseek2
    "mistral4": ArchRule(mla=mla_if_lengths, graph=DEEPSEEK2, nextn_unskipped=GATE_UP_PROBE),
    "deepseek32": ArchRule(
        kv_layers=trunk_layer,
        mla=always_mla,
        indexer=dsa_every_trunk_layer,
        graph=DEEPSEEK32,
        nextn_unskipped=EXP_PROBS_B,
    ),
    "glm-dsa": ArchRule(
        kv_layers=trunk_layer,
        mla=always_mla,
        indexer=glm_dsa_listed_layers,
        graph=GLM_DSA,
        nextn_unskipped=EXP_PROBS_B,
    ),
    "hy_v3": ArchRule(kv_layers=trunk_layer, graph=HY_V3, nextn_unskipped=FFN_OPTIONAL | NEXTN_OPTIONAL),
    # llama_kv_cache_dsv4: a K-only sliding cache over every block, compressed K caches and compressor states beside
    "deepseek4": ArchRule(
        window=Window(every_block_slides),
        mla=always_mla,
        compression=DSV4_COMPRESSION,
        rs_rollback=True,
        graph=Graph(
            builder=build_dsv4,
            dsv4=dsv4_graph,
            routing=deepseek4_routing,
            ffn_clamp=dsv4_shexp_clamp,
            sinks=True,
            node_for_node=True,
        ),
        nextn_needs_head=True,  # llama_model_deepseek4::load_arch_hparams' probe of nextn.eh_proj
    ),
    # sliding windows
    "gemma2": ArchRule(
        tensors=tensors_gemma2,
        window=Window(period_pattern, period=2, default_size=4096),
        graph=GEMMA2,
    ),
    "gemma3": ArchRule(
        tensors=tensors_gemma3,
        optional=optional_gemma3,
        window=Window(period_pattern, window_key_positive, period=6),
        graph=GEMMA3,
    ),
    "gemma3n": ArchRule(
        tensors=tensors_gemma3n,
        window=Window(period_pattern, period=5),
        kv_from_start=twenty_layers_own_kv,
        graph=GEMMA3N,
        tied_embedding_twice=True,
    ),
    "gemma4": ArchRule(
        window=Window(array_pattern, pattern_required=True),
        kv_from_start=shared_kv_layers_reuse,
        graph=GEMMA4,
        tied_embedding_twice=True,
    ),
    "cohere2": ArchRule(tensors=tensors_cohere2, window=Window(period_pattern, period=4), graph=COHERE2),
    "gpt-oss": ArchRule(tensors=tensors_gpt_oss, window=Window(period_pattern, period=2), graph=GPT_OSS),
    "olmo2": ArchRule(tensors=tensors_olmo2, window=Window(period_pattern, window_key_positive, period=4), graph=OLMO2),
    "afmoe": ArchRule(window=Window(period_pattern, window_key_positive, period=4), graph=AFMOE),
    "laguna": ArchRule(window=Window(period_pattern, window_key_positive, period=4, dense_first=True), graph=LAGUNA),
    "plamo3": ArchRule(window=Window(period_pattern, window_key_positive, period=8), graph=PLAMO3),
    "smallthinker": ArchRule(
        window=Window(period_pattern, window_key_positive, period=4, dense_first=True, forced_size=4096),
        graph=SMALLTHINKER,
    ),
    "exaone4": ArchRule(
        tensors=tensors_exaone4,
        window=Window(period_pattern, sixty_four_trunk_layers, period=4, default_size=4096),
        graph=EXAONE4,
    ),
    "exaone-moe": ArchRule(window=Window(period_pattern, period=4), graph=EXAONE_MOE),
    "llama4": ArchRule(
        window=Window(period_pattern, window_key_not_zero, period=4, forced_size=8192, swa_type=SwaType.CHUNKED),
        graph=LLAMA4,
        decode_abort=llama4_unchunked_abort,
    ),
    "mellum": ArchRule(
        window=Window(period_or_array_pattern, window_key_positive, period=4, pattern_required=True),
        graph=MELLUM,
    ),
    "muse-glimmer": ArchRule(
        window=Window(period_or_array_pattern, period=4, pattern_required=True), graph=MUSE_GLIMMER
    ),
    "cohere2moe": ArchRule(
        window=Window(period_or_array_pattern, period=4, dense_first=True, pattern_required=True),
        graph=COHERE2MOE,
        nextn_unskipped=GATE_UP_PROBE | NEXTN_OPTIONAL,
    ),
    "mimo2": ArchRule(kv_layers=trunk_layer, window=Window(array_pattern), graph=MIMO2),
    "step35": ArchRule(
        kv_layers=trunk_layer,
        window=Window(array_pattern, array_length=one_per_block),
        graph=STEP35,
        nextn_unskipped=STEP35_NEXTN,
    ),
    "granite_swa": ArchRule(window=Window(array_pattern, array_length=any_length), graph=GRANITE_SWA),
    # recurrent
    "mamba": ArchRule(
        tensors=tensors_mamba,
        memory=Memory.RECURRENT,
        recurrence=Recurrence(every_layer, reads_group_count=False),
        graph=MAMBA1,
    ),
    "mamba2": ArchRule(tensors=tensors_mamba2, memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT, graph=SAME_DECODER),
    "rwkv6": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT, graph=RWKV6),
    "rwkv6qwen2": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT, graph=RWKV6_QWEN2),
    "rwkv7": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT, graph=RWKV7),
    "arwkv7": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT, graph=ARWKV7),
    # hybrids
    "jamba": ArchRule(
        memory=Memory.HYBRID,
        kv_layers=not_recurrent,
        recurrence=Recurrence(no_kv_heads, reads_group_count=False),
        graph=JAMBA,
    ),
    "plamo2": ArchRule(memory=Memory.HYBRID, kv_layers=not_recurrent, recurrence=_NO_KV_HEADS, graph=PLAMO2),
    "granitehybrid": ArchRule(
        tensors=tensors_granitehybrid,
        memory=Memory.HYBRID,
        kv_layers=not_recurrent,
        recurrence=_NO_KV_HEADS,
        graph=GRANITE,
    ),
    "falcon-h1": ArchRule(
        tensors=tensors_falcon_h1,
        memory=Memory.HYBRID,
        kv_layers=every_layer,
        recurrence=_ALL_RECURRENT,
        graph=FALCON_H1,
        parameters=Counting(attention_beside_ssm=True),
    ),
    "nemotron_h": ArchRule(
        memory=Memory.HYBRID,
        kv_layers=attention_without_ffn,
        recurrence=Recurrence(no_kv_heads_no_ffn),
        graph=NEMOTRON_H,
        parameters=NON_GATED_FFN,
        rs_rollback=True,
    ),
    "nemotron_h_moe": ArchRule(
        memory=Memory.HYBRID,
        kv_layers=attention_without_ffn,
        recurrence=Recurrence(no_kv_heads_no_ffn),
        graph=NEMOTRON_H,
        parameters=NON_GATED_FFN,
        rs_rollback=True,
        uncreated=nextn_latent_projections,
        nextn_head_required=True,  # load_arch_tensors: mtp_flags TENSOR_SKIP or 0
    ),
    "lfm2": ArchRule(
        tensors=tensors_lfm2,
        optional=optional_lfm2,
        memory=Memory.HYBRID,
        kv_layers=not_recurrent,
        recurrence=_NO_KV_HEADS,
        window=Window(attention_layers_slide, window_key_positive),
        graph=SAME_SHORT_CONV,
        rs_rollback=True,
    ),
    "lfm2moe": ArchRule(
        memory=Memory.HYBRID, kv_layers=not_recurrent, recurrence=_NO_KV_HEADS, graph=LFM2MOE, rs_rollback=True
    ),
    "qwen3next": ArchRule(
        tensors=tensors_qwen3next,
        memory=Memory.HYBRID,
        kv_layers=trunk_not_recurrent,
        recurrence=_QWEN_NEXT,
        graph=QWEN3NEXT,
        nextn_head_required=True,  # load_arch_tensors: mtp_flags TENSOR_SKIP or 0
        nextn_unskipped=GATE_UP_PROBE,
    ),
    "qwen35": ArchRule(
        memory=Memory.HYBRID,
        kv_layers=trunk_not_recurrent,
        recurrence=_QWEN_NEXT,
        graph=QWEN35,
        cell_positions=mrope,
        rs_rollback=True,
        nextn_head_required=True,  # load_arch_tensors: mtp_flags TENSOR_SKIP or 0
    ),
    "qwen35moe": ArchRule(
        memory=Memory.HYBRID,
        kv_layers=trunk_not_recurrent,
        recurrence=_QWEN_NEXT,
        graph=QWEN35,
        cell_positions=mrope,
        rs_rollback=True,
        nextn_head_required=True,  # load_arch_tensors: mtp_flags TENSOR_SKIP or 0
        nextn_unskipped=GATE_UP_PROBE,
    ),
    "qwen4exp": ArchRule(
        memory=Memory.HYBRID,
        kv_layers=trunk_not_recurrent,
        recurrence=Recurrence(every_4th_attends, history=ple_conv_history),
        indexer=beside_each_attention_layer,
        graph=QWEN4EXP,
        cell_positions=mrope,
        rs_rollback=True,
    ),
    "minimax-01": ArchRule(
        memory=Memory.HYBRID,
        kv_layers=trunk_not_recurrent,
        recurrence=Recurrence(every_8th_attends, lightning_attention=True),
        graph=MINIMAX_01,
    ),
    "kimi-linear": ArchRule(
        memory=Memory.HYBRID, kv_layers=not_recurrent, recurrence=_NO_KV_HEADS, mla=always_mla, graph=KIMI_LINEAR
    ),
    "kimi-k3": ArchRule(
        memory=Memory.HYBRID, kv_layers=not_recurrent, recurrence=_NO_KV_HEADS, mla=always_mla, graph=KIMI_K3
    ),
    "bailingmoe3": ArchRule(
        memory=Memory.HYBRID,
        kv_layers=not_recurrent,
        recurrence=_NO_KV_HEADS,
        mla=always_mla,
        graph=BAILINGMOE3,
        rs_rollback=True,
    ),
}

# Views of the table, for the modules that ask one question of it.
# Architectures whose compute graph is derived (estimator/compute_buffer.py), each measured against llama.cpp
# (tests/data): their `workspace` is derived; any other's is unknown with workspaceUnmeasured.
WORKSPACE_DERIVED = frozenset(arch for arch, rule in RULES.items() if rule.graph is not None)
# Architectures whose parameters memfit counts from a published layout: those with a tensor list.
COUNTED = frozenset(arch for arch, rule in RULES.items() if rule.tensors is not None)
