"""llama.cpp's per-architecture memory rules, as data.

One entry per `general.architecture` that memfit derives, stating what llama.cpp's
`llama_model::create_memory` builds for it and how its `load_arch_hparams` marks layers:

- `memory`: a KV cache, a recurrent state, both (hybrid), or none at all (embedding models);
- `kv_layers`: which layers the KV cache keeps (the filter create_memory passes);
- `window`: which layers slide, and over how many tokens;
- `recurrence`: which layers are recurrent, and how their state is sized;
- `mla`: whether the cache keeps only K (multi-head latent attention);
- `kv_from_start`: layers past this index reuse an earlier layer's KV (shared-KV models).

Every rule here was measured against llama.cpp (tests/data/results_*.jsonl) or shares its code path with
a measured architecture (the plain KV cache of `create_memory`'s default branch).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto


class Memory(Enum):
    KV = auto()
    RECURRENT = auto()  # llm_arch_is_recurrent: no KV cache at all
    HYBRID = auto()  # llama_memory_hybrid: a KV cache for attention layers, a recurrent state for the rest
    NONE = auto()  # create_memory returns nullptr: non-causal embedding and diffusion models


class KvLayers(Enum):
    ALL = auto()  # every layer of block_count, NextN/MTP layers included
    TRUNK = auto()  # il < n_layer (NextN/MTP layers excluded)
    NOT_RECURRENT = auto()  # llama_memory_hybrid's default filter, over block_count
    TRUNK_NOT_RECURRENT = auto()  # il < n_layer && !is_recr(il)
    NOT_RECURRENT_NO_FFN = auto()  # nemotron_h: !is_recr(il) && n_ff(il) == 0


class Pattern(Enum):
    PERIOD = auto()  # a scalar period (an array in the GGUF is ignored: the default applies)
    PERIOD_OR_ARRAY = auto()  # a scalar period, or one flag per layer
    ARRAY = auto()  # one flag per layer (a scalar applies to every layer)
    ATTENTION_LAYERS = auto()  # every KV layer slides


class WindowWhen(Enum):
    ALWAYS = auto()
    KEY_POSITIVE = auto()  # only when `attention.sliding_window` is present and > 0
    KEY_NOT_ZERO = auto()  # unless `attention.sliding_window` is present and 0 (llama4)
    TRUNK_OF_64 = auto()  # only when the model has 64 trunk layers (exaone4: the 32B)


class ArrayLength(Enum):
    TRUNK = auto()  # one flag per trunk layer (block_count - nextn_predict_layers), exactly
    ALL = auto()  # one flag per layer of block_count, exactly
    ANY = auto()  # missing entries do not slide


@dataclass(frozen=True)
class Window:
    """llama_hparams::set_swa_pattern and the arch's n_swa."""

    pattern: Pattern
    when: WindowWhen = WindowWhen.ALWAYS
    period: int = 0  # the default period; 0 means every layer slides
    dense_first: bool = False  # the first layer of each period is full (else the last)
    default_size: int | None = None  # n_swa when `attention.sliding_window` is absent (None: required)
    forced_size: int | None = None  # n_swa the loader sets whatever the GGUF says
    pattern_required: bool = False  # llama.cpp refuses to load the model without sliding_window_pattern
    array_length: ArrayLength = ArrayLength.TRUNK


class Selector(Enum):
    ALL = auto()  # every trunk layer
    NO_KV_HEADS = auto()  # head_count_kv[il] == 0
    NO_KV_HEADS_NO_FFN = auto()  # head_count_kv[il] == 0 && feed_forward_length[il] == 0
    ARRAY_OR_INTERVAL = auto()  # attention.recurrent_layers[], else (il + 1) % full_attention_interval != 0


@dataclass(frozen=True)
class Recurrence:
    layers: Selector
    interval: int = 4  # the default full_attention_interval for ARRAY_OR_INTERVAL
    reads_group_count: bool = True  # mamba-1 style loaders never read ssm.group_count (it counts as 0)
    lightning_attention: bool = False  # minimax-01: S = head_dim^2 * n_head, no conv state


class Mla(Enum):
    NONE = auto()
    IF_KEYS = auto()  # K only when both attention.key_length_mla and value_length_mla are present
    ALWAYS = auto()


class Indexer(Enum):
    """A second KV cache beside the main one, for sparse-attention indexers."""

    QWEN4EXP = auto()  # one head of indexer.key_length K and head_dim_v V beside every attention layer
    DSA = auto()  # DeepSeek sparse attention: one head of indexer.key_length K, no V, on every trunk layer
    GLM_DSA = auto()  # as DSA, on the layers attention.indexer.types names (else every layer, or GLM-5.2's table)


@dataclass(frozen=True)
class ArchRule:
    memory: Memory = Memory.KV
    kv_layers: KvLayers = KvLayers.ALL
    window: Window | None = None
    recurrence: Recurrence | None = None
    mla: Mla = Mla.NONE
    kv_from_start: int | str | None = None  # an index, or the key whose value block_count minus gives it
    indexer: Indexer | None = None
    compute_bytes_per_cell: int = 3  # what its compute graph reserves per KV cell and ubatch token (masks, scores)
    tied_embedding_twice: bool = False  # the loader creates the tied output before token_embd: two copies


PLAIN = ArchRule()

# create_memory's default branch: a plain KV cache over every layer (section 7 of the ground-truth notes).
_PLAIN_ARCHS = (
    "llama", "deci", "falcon", "grok", "gpt2", "gptj", "gptneox", "mpt", "baichuan", "starcoder", "starcoder2",
    "refact", "bloom", "stablelm", "qwen", "qwen2", "qwen2moe", "qwen2vl", "qwen3", "qwen3moe", "qwen3vl",
    "qwen3vlmoe", "phi2", "phi3", "phimoe", "plamo", "codeshell", "orion", "internlm2", "minicpm", "minicpm3",
    "gemma", "xverse", "command-r", "dbrx", "olmo", "olmoe", "openelm", "arctic", "deepseek", "chatglm", "glm4",
    "glm4moe", "bitnet", "jais", "jais2", "nemotron", "exaone", "granite", "granitemoe", "chameleon", "plm",
    "bailingmoe", "bailingmoe2", "dots1", "arcee", "ernie4_5", "ernie4_5-moe", "hunyuan-moe", "hunyuan-dense",
    "hunyuan_vl", "smollm3", "seed_oss", "grovemoe", "apertus", "minimax-m2", "cogvlm", "pangu-embedded",
    "mistral3", "maincoder", "talkie", "llama-embed", "deepseek2-ocr", "paddleocr",
)

# create_memory returns no memory at all for these.
_NO_MEMORY_ARCHS = (
    "bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert", "eurobert", "modern-bert",
    "gemma-embedding", "wavtokenizer-dec", "dream", "llada", "llada-moe", "rnd1",
)

_MAMBA1 = Recurrence(Selector.ALL, reads_group_count=False)
_ALL_RECURRENT = Recurrence(Selector.ALL)
_NO_KV_HEADS = Recurrence(Selector.NO_KV_HEADS)
_QWEN_NEXT = Recurrence(Selector.ARRAY_OR_INTERVAL, interval=4)

RULES: dict[str, ArchRule] = {
    **{arch: PLAIN for arch in _PLAIN_ARCHS},
    **{arch: ArchRule(memory=Memory.NONE) for arch in _NO_MEMORY_ARCHS},
    # MLA: the cache keeps the compressed latent and the rope key as K, and no V
    "deepseek2": ArchRule(mla=Mla.IF_KEYS),
    "mistral4": ArchRule(mla=Mla.IF_KEYS),  # llama_model_mistral4 inherits deepseek2
    "deepseek32": ArchRule(kv_layers=KvLayers.TRUNK, mla=Mla.ALWAYS, indexer=Indexer.DSA, compute_bytes_per_cell=8),
    "glm-dsa": ArchRule(kv_layers=KvLayers.TRUNK, mla=Mla.ALWAYS, indexer=Indexer.GLM_DSA, compute_bytes_per_cell=8),
    "hy_v3": ArchRule(kv_layers=KvLayers.TRUNK),
    # sliding windows
    "gemma2": ArchRule(window=Window(Pattern.PERIOD, period=2, default_size=4096)),
    "gemma3": ArchRule(window=Window(Pattern.PERIOD, WindowWhen.KEY_POSITIVE, period=6)),
    "gemma3n": ArchRule(window=Window(Pattern.PERIOD, period=5), kv_from_start=20, tied_embedding_twice=True),
    "gemma4": ArchRule(window=Window(Pattern.ARRAY, pattern_required=True), kv_from_start="attention.shared_kv_layers",
                       tied_embedding_twice=True),
    "cohere2": ArchRule(window=Window(Pattern.PERIOD, period=4)),
    "gpt-oss": ArchRule(window=Window(Pattern.PERIOD, period=2)),
    "olmo2": ArchRule(window=Window(Pattern.PERIOD, WindowWhen.KEY_POSITIVE, period=4)),
    "afmoe": ArchRule(window=Window(Pattern.PERIOD, WindowWhen.KEY_POSITIVE, period=4)),
    "laguna": ArchRule(window=Window(Pattern.PERIOD, WindowWhen.KEY_POSITIVE, period=4, dense_first=True)),
    "plamo3": ArchRule(window=Window(Pattern.PERIOD, WindowWhen.KEY_POSITIVE, period=8)),
    "smallthinker": ArchRule(window=Window(Pattern.PERIOD, WindowWhen.KEY_POSITIVE, period=4, dense_first=True,
                                          forced_size=4096)),
    "exaone4": ArchRule(window=Window(Pattern.PERIOD, WindowWhen.TRUNK_OF_64, period=4, default_size=4096)),
    "exaone-moe": ArchRule(window=Window(Pattern.PERIOD, period=4)),
    "llama4": ArchRule(window=Window(Pattern.PERIOD, WindowWhen.KEY_NOT_ZERO, period=4, forced_size=8192)),
    "mellum": ArchRule(window=Window(Pattern.PERIOD_OR_ARRAY, WindowWhen.KEY_POSITIVE, period=4,
                                     pattern_required=True)),
    "muse-glimmer": ArchRule(window=Window(Pattern.PERIOD_OR_ARRAY, period=4, pattern_required=True)),
    "cohere2moe": ArchRule(window=Window(Pattern.PERIOD_OR_ARRAY, period=4, dense_first=True,
                                         pattern_required=True)),
    "mimo2": ArchRule(kv_layers=KvLayers.TRUNK, window=Window(Pattern.ARRAY)),
    "step35": ArchRule(kv_layers=KvLayers.TRUNK, window=Window(Pattern.ARRAY, array_length=ArrayLength.ALL)),
    "granite_swa": ArchRule(window=Window(Pattern.ARRAY, array_length=ArrayLength.ANY)),
    # recurrent
    "mamba": ArchRule(memory=Memory.RECURRENT, recurrence=_MAMBA1),
    "mamba2": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT),
    "rwkv6": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT),
    "rwkv6qwen2": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT),
    "rwkv7": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT),
    "arwkv7": ArchRule(memory=Memory.RECURRENT, recurrence=_ALL_RECURRENT),
    # hybrids
    "jamba": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT,
                      recurrence=Recurrence(Selector.NO_KV_HEADS, reads_group_count=False)),
    "plamo2": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT, recurrence=_NO_KV_HEADS),
    "granitehybrid": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT, recurrence=_NO_KV_HEADS),
    "falcon-h1": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.ALL, recurrence=_ALL_RECURRENT),
    "nemotron_h": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT_NO_FFN,
                           recurrence=Recurrence(Selector.NO_KV_HEADS_NO_FFN)),
    "nemotron_h_moe": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT_NO_FFN,
                               recurrence=Recurrence(Selector.NO_KV_HEADS_NO_FFN)),
    "lfm2": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT, recurrence=_NO_KV_HEADS,
                     window=Window(Pattern.ATTENTION_LAYERS, WindowWhen.KEY_POSITIVE)),
    "lfm2moe": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT, recurrence=_NO_KV_HEADS),
    "qwen3next": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.TRUNK_NOT_RECURRENT, recurrence=_QWEN_NEXT),
    "qwen35": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.TRUNK_NOT_RECURRENT, recurrence=_QWEN_NEXT),
    "qwen35moe": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.TRUNK_NOT_RECURRENT, recurrence=_QWEN_NEXT),
    "qwen4exp": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.TRUNK_NOT_RECURRENT, recurrence=_QWEN_NEXT,
                         indexer=Indexer.QWEN4EXP),
    "minimax-01": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.TRUNK_NOT_RECURRENT,
                           recurrence=Recurrence(Selector.ARRAY_OR_INTERVAL, interval=8, lightning_attention=True)),
    "kimi-linear": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT, recurrence=_NO_KV_HEADS,
                            mla=Mla.ALWAYS),
    "kimi-k3": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT, recurrence=_NO_KV_HEADS,
                        mla=Mla.ALWAYS),
    "bailingmoe3": ArchRule(memory=Memory.HYBRID, kv_layers=KvLayers.NOT_RECURRENT, recurrence=_NO_KV_HEADS,
                            mla=Mla.ALWAYS),
}

# Architectures whose compute buffer was measured (tests/data) and lies within the workspace rule of
# estimator/workspace.py on every run: their `workspace` is derived; any other's is unknown until measured.
WORKSPACE_CHECKED = frozenset({
    "afmoe", "arwkv7", "bailingmoe3", "bert", "cohere2", "cohere2moe", "command-r", "deci", "deepseek2", "deepseek32",
    "exaone-moe", "exaone4", "falcon-h1", "gemma", "gemma2", "gemma3", "gemma4", "glm-dsa", "glm4moe", "gpt-oss",
    "granite", "granite_swa", "granitehybrid", "jamba", "kimi-k3", "kimi-linear", "laguna", "lfm2", "lfm2moe", "llama",
    "llama-embed", "llama4", "mamba", "mamba2", "mellum", "mimo2", "minicpm3", "minimax-01", "mistral3", "mistral4",
    "muse-glimmer", "nemotron_h", "nemotron_h_moe", "nomic-bert", "olmo2", "openelm", "phi3", "plamo2", "plamo3",
    "qwen2", "qwen3", "qwen35", "qwen35moe", "qwen3moe", "qwen3next", "qwen4exp", "rwkv6", "rwkv6qwen2", "rwkv7",
    "smallthinker", "smollm3", "starcoder2", "step35",
})
