"""The per-layer rules of llama.cpp, architecture by architecture, as tables written out by hand.

Each case is a model llama.cpp loaded and measured (its writer is in tools/, its runs in tests/data/), read back
from a written GGUF header, and the layout `derive_layout(metadata, arch)` gives it, checked layer by layer
against values worked out from llama.cpp's rules (llama_hparams::set_swa_pattern, is_swa, is_recr, has_kv,
n_embd_k_gqa / n_embd_v_gqa, n_embd_r / n_embd_s, create_memory's layer filter; see estimator/arch_rules.py).
The expected values are literals, never computed by the code under test.

Test ids name the case, the layer and the rule: `gemma3-layer5-sliding` fails when layer 5 of the gemma3 model
has the wrong window. The rules:
  kv       the layer's entry in the main KV cache: (K width, V width, has V), or that it owns no KV cells
  sliding  the window of a layer in the KV cache (None: full context)
  state    the layer's recurrent state (R elements, S elements), or that it keeps none
  indexer  the sparse-attention indexer cache beside the main one: (layers, K width)
Only the public entry point `derive_layout` is called, so the tables hold however the rules are organised.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from memfit.estimator.architectures import derive_layout
from memfit.estimator.errors import EvidenceError
from memfit.estimator.layout import Layout
from memfit.readers.gguf_header import read_header
from tools.accuracy import model_writers
from tools.gguf_writers import write_model

# One layer's expectation: (its KV entry (K width, V width, window, has V) or None, its state (R, S) or None).
KvEntry = tuple[int, int, int | None, bool]
LayerExpectation = tuple[KvEntry | None, tuple[int, int] | None]


def kv(k: int, v: int, window: int | None = None) -> LayerExpectation:
    return (k, v, window, True), None


def mla(k: int) -> LayerExpectation:
    """Multi-head latent attention: K holds the latent and the rope key, and there is no V."""
    return (k, 0, None, False), None


def state(r: int, s: int) -> LayerExpectation:
    return None, (r, s)


def both(k: int, v: int, r: int, s: int) -> LayerExpectation:
    """A layer with attention and a recurrent state side by side (falcon-h1)."""
    return (k, v, None, True), (r, s)


def compressed(k: int, window: int, r: int, s: int) -> LayerExpectation:
    """deepseek4: a K-only sliding entry in the raw cache, and the layer's compressor states (kv as R, score as S)."""
    return (k, 0, window, False), (r, s)


# No KV cells and no state: a layer that reuses an earlier layer's KV, a NextN/MTP layer outside the cache,
# or an MLP-only layer.
OUT: LayerExpectation = (None, None)


@dataclass(frozen=True)
class Case:
    label: str  # the architecture, and the variant when there are several: the start of every test id
    arch: str
    model: str  # the measured model (tools/ writes it; tests/data holds llama.cpp's runs of it)
    layers: tuple[LayerExpectation, ...]  # one per layer of block_count
    indexer: tuple[int, int] | None = None  # (layers, K width) of the indexer cache


CASES = (
    # --- plain: create_memory's default branch, every layer, n_head_kv(il) * head_dim -----------------------
    # embd 256 / 8 heads = head 32, 2 KV heads
    Case("llama", "llama", "llama-gqa-f16", (kv(64, 64),) * 4),
    # key_length 96, 2 KV heads; attention.sliding_window is present but llama never slides
    Case("llama-hd96", "llama", "llama-hd96", (kv(192, 192),) * 4),
    # key_length 64, 4 KV heads
    Case("qwen3", "qwen3", "qwen3-f16", (kv(256, 256),) * 4),
    # per-layer head_count_kv [2, 1, 0, 0, 4, 2], head 256 / head_count[0] 8 = 32; a 0-head layer keeps 0 wide rows
    Case("deci", "deci", "deci-arr", (kv(64, 64), kv(32, 32), kv(0, 0), kv(0, 0), kv(128, 128), kv(64, 64))),
    # --- sliding by period (set_swa_pattern: the last layer of each period is full) --------------------------
    # 1 KV head of 64, sliding_window 512, pattern 6
    Case("gemma3", "gemma3", "gemma3-swa-f16", (kv(64, 64, 512),) * 5 + (kv(64, 64),)),
    # pattern 0: every layer slides
    Case("gemma3-allswa", "gemma3", "gemma3-allswa", (kv(64, 64, 128),) * 4),
    # gemma3 reads the pattern as a scalar: the array [1, 0, 1, 0, 1, 0] is ignored, the default period 6 applies
    Case("gemma3-arrpat", "gemma3", "gemma3-arrpat", (kv(64, 64, 128),) * 5 + (kv(64, 64),)),
    # period 2, 2 KV heads of 64, sliding_window 256
    Case("gemma2", "gemma2", "gemma2-swa-f16", (kv(128, 128, 256), kv(128, 128)) * 2),
    # period 4, 1 KV head of 256 / 4 = 64, sliding_window 128
    Case(
        "cohere2",
        "cohere2",
        "cohere2-swa",
        (kv(64, 64, 128),) * 3 + (kv(64, 64),) + (kv(64, 64, 128),) * 3 + (kv(64, 64),),
    ),
    # period 2, 2 KV heads of 64, sliding_window 128
    Case("gpt-oss", "gpt-oss", "gptoss-swa-moe", (kv(128, 128, 128), kv(128, 128)) * 2),
    # period 4 dense-first: the first layer of each period is full; sliding_window 256
    Case("laguna", "laguna", "laguna-swa", ((kv(128, 128),) + (kv(128, 128, 256),) * 3) * 2),
    # period 4 dense-first, and the loader forces n_swa = 4096 whatever the GGUF says (128)
    Case("smallthinker", "smallthinker", "smallthinker-swa", (kv(128, 128),) + (kv(128, 128, 4096),) * 3),
    # 64 trunk layers: slides; no sliding_window key, so 4096; the array pattern is ignored, period 4; 1 KV head of 32
    Case("exaone4", "exaone4", "exaone4-64", ((kv(32, 32, 4096),) * 3 + (kv(32, 32),)) * 16),
    # no sliding_window key: chunked attention over a forced 8192, period 4; 2 KV heads of 64
    Case("llama4", "llama4", "llama4-chunked", (kv(128, 128, 8192),) * 3 + (kv(128, 128),)),
    # 4 trunk layers (period 4) and a NextN layer, which never slides but keeps its KV; sliding_window 160
    Case("exaone-moe", "exaone-moe", "exaone-moe-nextn", (kv(128, 128, 160),) * 3 + (kv(128, 128),) * 2),
    # --- a scalar period or one flag per layer ----------------------------------------------------------------
    # scalar pattern 3, sliding_window 160, 2 KV heads of 64
    Case(
        "mellum",
        "mellum",
        "mellum-scal",
        (kv(128, 128, 160),) * 2 + (kv(128, 128),) + (kv(128, 128, 160),) * 2 + (kv(128, 128),),
    ),
    # flags [1, 0, 1, 1, 0, 1]
    Case(
        "mellum-arr",
        "mellum",
        "mellum-arr",
        (kv(128, 128, 160), kv(128, 128), kv(128, 128, 160), kv(128, 128, 160), kv(128, 128), kv(128, 128, 160)),
    ),
    # 8 trunk flags [1, 1, 1, 0, 1, 1, 1, 0]; the NextN layer 8 is full and in the cache
    Case(
        "cohere2moe",
        "cohere2moe",
        "cohere2moe-arr-nextn",
        ((kv(128, 128, 128),) * 3 + (kv(128, 128),)) * 2 + (kv(128, 128),),
    ),
    # --- one flag per layer -----------------------------------------------------------------------------------
    # trunk flags [0, 1, 1, 0, 1, 1], head_count_kv [2, 4, 4, 2, 4, 4, 4], key 96 / value 64; NextN layer 6 has no KV
    Case(
        "mimo2",
        "mimo2",
        "mimo2-nextn",
        (kv(192, 128), kv(384, 256, 128), kv(384, 256, 128), kv(192, 128), kv(384, 256, 128), kv(384, 256, 128), OUT),
    ),
    # flags over all 5 layers [0, 1, 1, 1, 0], head_count_kv [2, 1, 1, 1, 2] of 64; NextN layer 4 has no KV
    Case("step35", "step35", "step35-nextn", (kv(128, 128),) + (kv(64, 64, 128),) * 3 + (OUT,)),
    # flags [0, 1, 1, 1, 0, 1, 1, 1], 2 KV heads of 256 / 4 = 64
    Case("granite_swa", "granite_swa", "granite-swa", ((kv(128, 128),) + (kv(128, 128, 128),) * 3) * 2),
    # --- shared KV: layers from n_layer_kv_from_start on reuse an earlier layer's cache -----------------------
    # 25 layers, period 5 (the array is ignored), the first 20 own their KV; 1 KV head of 64, sliding_window 128
    Case("gemma3n", "gemma3n", "gemma3n-shared", ((kv(64, 64, 128),) * 4 + (kv(64, 64),)) * 4 + (OUT,) * 5),
    # flags [1, 1, 1, 0, 1, 0], shared_kv_layers 2; sliding layers use the _swa head 64, full ones 128;
    # head_count_kv [1, 1, 1, 2, 1, 2]
    Case("gemma4", "gemma4", "gemma4-shared", (kv(64, 64, 128),) * 3 + (kv(256, 256), OUT, OUT)),
    # --- multi-head latent attention ---------------------------------------------------------------------------
    # key_length_mla and value_length_mla present: K = 1 head of key_length 160 (latent 128 + rope 32), no V
    Case("deepseek2", "deepseek2", "deepseek2-mla", (mla(160),) * 3),
    # no *_mla keys: an ordinary cache, 4 KV heads of key 96 / value 64
    Case("deepseek2-mha", "deepseek2", "deepseek2-mha", (kv(384, 256),) * 3),
    # always MLA, trunk layers only; the DSA indexer keeps 1 head of 64 on every trunk layer
    Case("deepseek32", "deepseek32", "deepseek32", (mla(160),) * 3, indexer=(3, 64)),
    # 4 trunk layers and a NextN layer outside the cache; indexer.types [1, 0, 0, 1] puts the indexer on 2 layers
    Case("glm-dsa", "glm-dsa", "glm-dsa-types", (mla(160),) * 4 + (OUT,), indexer=(2, 64)),
    # compress_ratios [4, 128, 4, 0]: every layer slides over 128 in the raw cache, one K head of 128, no V; the
    # compressor states of a ratio-4 layer: 2 x 128 wide x 2 x 4 rows, and the indexer's 2 x 64 x 2 x 4 beside it
    # (2048 + 1024); of the ratio-128 layer 128 x 128
    Case(
        "deepseek4",
        "deepseek4",
        "deepseek4",
        (
            compressed(128, 128, 3072, 3072),
            compressed(128, 128, 16384, 16384),
            compressed(128, 128, 3072, 3072),
            ((128, 0, 128, False), None),
        ),
    ),
    # --- hybrids -----------------------------------------------------------------------------------------------
    # recurrent where head_count_kv [0, 0, 2, 0, 0, 2] is 0; Mamba-2 state: R = (4 - 1) * (512 + 2 * 1 * 64),
    # S = 64 * 512; attention 2 heads of 256 / 8 = 32
    Case(
        "granitehybrid",
        "granitehybrid",
        "granitehybrid-f16",
        (state(1920, 32768),) * 2 + (kv(64, 64),) + (state(1920, 32768),) * 2 + (kv(64, 64),),
    ),
    # head_count_kv [0, 0, 0, 2, 0, 4]; Mamba-1 state (no group count): R = 3 * 512, S = 16 * 512
    Case("jamba", "jamba", "jamba", (state(1536, 8192),) * 3 + (kv(64, 64), state(1536, 8192), kv(128, 128))),
    # recurrent where head_count_kv and feed_forward_length are both 0; attention where only the FFN is 0;
    # layers 1 and 4 are MLP-only. R = 3 * (512 + 2 * 4 * 32), S = 32 * 512; attention 2 heads of 32
    Case(
        "nemotron_h",
        "nemotron_h",
        "nemotron-h",
        (state(2304, 16384), OUT, kv(64, 64), state(2304, 16384), OUT, kv(64, 64)),
    ),
    # every layer has attention (2 heads of 64) and a Mamba-2 state: R = 3 * (384 + 2 * 2 * 32), S = 32 * 384
    Case("falcon-h1", "falcon-h1", "falcon-h1", (both(128, 128, 1536, 12288),) * 4),
    # full_attention_interval 3: (il + 1) % 3 != 0 is recurrent; delta-net R = 3 * (128 + 2 * 2 * 32), S = 32 * 128
    Case(
        "qwen3next",
        "qwen3next",
        "qwen3next",
        (state(768, 4096),) * 2 + (kv(128, 128),) + (state(768, 4096),) * 2 + (kv(128, 128),),
    ),
    # attention.recurrent_layers [1, 0, 1, 1]
    Case("qwen35", "qwen35", "qwen35", (state(768, 4096), kv(128, 128), state(768, 4096), state(768, 4096))),
    # default interval 8: layers 0-6 lightning attention, no conv state, S = head 96^2 * 4 heads; layer 7 attention
    Case("minimax-01", "minimax-01", "minimax01", (state(0, 36864),) * 7 + (kv(192, 192),)),
    # short-conv layers where head_count_kv [0, 2, 0, 0, 2, 0] is 0: R = (l_cache 5 - 1) * 256, no S;
    # every attention layer slides over 300; 2 heads of 256 / 8 = 32
    Case(
        "lfm2",
        "lfm2",
        "lfm2-swa",
        (state(1024, 0), kv(64, 64, 300), state(1024, 0), state(1024, 0), kv(64, 64, 300), state(1024, 0)),
    ),
    # --- recurrent: no KV cache at all -------------------------------------------------------------------------
    # Mamba-1 never reads a group count: R = 3 * 512, S = 16 * 512
    Case("mamba", "mamba", "mamba", (state(1536, 8192),) * 4),
    # conv kernel 3, 2 groups: R = 2 * (384 + 2 * 2 * 48), S = 48 * 384
    Case("mamba2", "mamba2", "mamba2-ng2", (state(1152, 18432),) * 4),
    # token shift 2 (the default) * 256; WKV S = 256 * head 32
    Case("rwkv6", "rwkv6", "rwkv6", (state(512, 8192),) * 4),
    # token_shift_count 1 * 256; S = 256 * head 64
    Case("rwkv6qwen2", "rwkv6qwen2", "rwkv6qwen2", (state(256, 16384),) * 4),
    # token shift 2 * 256; S = 256 * head 64
    Case("rwkv7", "rwkv7", "rwkv7", (state(512, 16384),) * 4),
)


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Layout]:
    """Every case's model written as a sparse GGUF, its header read back, and its layout derived."""
    directory = tmp_path_factory.mktemp("rule-models")
    writers = model_writers()
    result = {}
    for case in CASES:
        path = directory / f"{case.model}.gguf"
        write_model(writers[case.model](), path)
        result[case.label] = derive_layout(read_header(path).metadata, case.arch)
    return result


def _rank(layers: tuple[LayerExpectation, ...], il: int, part: int) -> int:
    """Where layer il's entry sits among the entries the layers before it have (caches list only owners)."""
    return sum(1 for layer in layers[:il] if layer[part] is not None)


def _count(layers: tuple[LayerExpectation, ...], part: int) -> int:
    return sum(1 for layer in layers if layer[part] is not None)


def _items() -> list:
    items = []
    for case in CASES:
        recurrent = any(s is not None for _, s in case.layers)
        for il, (entry, _widths) in enumerate(case.layers):
            items.append(pytest.param(case, il, "kv", id=f"{case.label}-layer{il}-kv"))
            if entry is not None:
                items.append(pytest.param(case, il, "sliding", id=f"{case.label}-layer{il}-sliding"))
            if recurrent:
                items.append(pytest.param(case, il, "state", id=f"{case.label}-layer{il}-state"))
    return items


def test_the_table_covers_each_kind_of_rule() -> None:
    assert 25 <= len(CASES) <= 45
    assert len({c.label for c in CASES}) == len(CASES)
    assert len({c.model for c in CASES}) == len(CASES)
    assert all(c.label.startswith(c.arch) for c in CASES)


@pytest.mark.parametrize("case, il, rule", _items())
def test_layer(case: Case, il: int, rule: str, layouts: dict[str, Layout]) -> None:
    layout = layouts[case.label]
    entry, widths = case.layers[il]
    if rule == "state":
        assert len(layout.recurrent) == _count(case.layers, 1), "recurrent layers"
        if widths is not None:
            got = layout.recurrent[_rank(case.layers, il, 1)]
            assert (got.r_elements, got.s_elements) == widths
        return
    cache = layout.caches[0].layers if layout.caches else ()
    assert len(cache) == _count(case.layers, 0), "layers that own KV cells"
    if entry is None:
        return  # it owns no KV cells: the count above holds it to that
    cells = cache[_rank(case.layers, il, 0)]
    if rule == "kv":
        assert (cells.k_width, cells.v_width, cells.has_v) == (entry[0], entry[1], entry[3])
    else:
        assert cells.window == entry[2]


@pytest.mark.parametrize("case", [c for c in CASES if c.indexer], ids=lambda c: f"{c.label}-indexer")
def test_indexer_cache(case: Case, layouts: dict[str, Layout]) -> None:
    layout = layouts[case.label]
    assert case.indexer is not None
    count, width = case.indexer
    assert len(layout.caches) == 2
    assert [(a.k_width, a.v_width, a.has_v) for a in layout.caches[1].layers] == [(width, 0, False)] * count


@pytest.mark.parametrize(
    ("model", "layers"),
    [
        # llama_kv_cache_dsa: the MLA cache and the indexer's on every trunk layer (filter_lid: il < n_layer())
        ("deepseek32", ((0, 1, 2), (0, 1, 2))),
        # the NextN layer 4 in neither; the indexer's on the layers indexer.types [1, 0, 0, 1] marks full
        ("glm-dsa-types", ((0, 1, 2, 3), (0, 3))),
        # no types key, context 1048576: GLM-5.2's table (0, 1, then every 4th from 2) over 8 layers
        ("glm-dsa-52", ((0, 1, 2, 3, 4, 5, 6, 7), (0, 1, 2, 6))),
        # llama_memory_hybrid_idx: filter_idx is filter_attn, the attention layers of every 2nd
        ("qwen4exp-qsa", ((1, 3), (1, 3))),
        # llama_kv_cache_dsv4, compress_ratios [4, 128, 4, 0]: the raw cache on every layer, CSA's on the ratio-4
        # layers, HCA's on the ratio-128 one, the lightning indexer's on CSA's (filter_csa)
        ("deepseek4", ((0, 1, 2, 3), (0, 2), (1,), (0, 2))),
    ],
)
def test_each_cache_names_the_layers_whose_device_holds_it(
    model: str, layers: tuple[tuple[int, ...], ...], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each of llama.cpp's caches (llama_kv_cache's constructor: layer il's tensors in dev_layer(il)'s buffer type)
    names the layers its filter keeps, the indexer's and the compressed caches beside the main one too, so that
    placement puts each layer's rows on its layer's device."""
    path = tmp_path_factory.mktemp("cache-layers") / f"{model}.gguf"
    write_model(model_writers()[model](), path)
    metadata = read_header(path).metadata
    arch = metadata["general.architecture"]
    assert isinstance(arch, str)
    layout = derive_layout(metadata, arch)
    assert tuple(cache.layer_ids for cache in layout.caches) == layers
    assert all(len(cache.layers) == len(cache.layer_ids) for cache in layout.caches)


def test_pure_recurrent_and_plain_models_have_one_kind_of_memory(layouts: dict[str, Layout]) -> None:
    for case in CASES:
        layout = layouts[case.label]
        if all(entry is None for entry, _ in case.layers):
            assert layout.caches == () and not layout.has_kv_cache, case.label
        if all(widths is None for _, widths in case.layers):
            assert layout.recurrent == () and layout.has_kv_cache, case.label


@pytest.mark.parametrize(
    ("layers", "n_vocab", "q_lora"),
    [
        (3, 129280, 64),  # the writer's shape: its attention.q_lora_rank read
        (27, 129280, 0),  # DeepSeek-V2-Lite
        (26, None, 0),  # GigaChat3-10B-A1.8B
        (48, 128256, 0),  # Kanana-2-30B-A3B: lite by its vocabulary
        (48, 129280, 64),
        (48, None, 64),  # the vocabulary unknown: not the lite case
    ],
)
def test_deepseek2_lite_models_read_no_low_rank_query(layers: int, n_vocab: int | None, q_lora: int) -> None:
    """llama_model_deepseek2::load_arch_hparams reads no q_lora_rank for its lite shapes (26 or 27 layers, or 48
    with a 128,256 vocabulary), whatever the file says: one wq. The layout once knew only the layer counts."""
    metadata = {k: tuple(v) if isinstance(v, list) else v for k, v in model_writers()["deepseek2-mla"]().kv.items()}
    metadata["deepseek2.block_count"] = layers
    graph = derive_layout(metadata, "deepseek2", n_vocab=n_vocab).graph
    assert graph is not None and {layer.q_lora for layer in graph.layers} == {q_lora}


def _qwen4exp_ple_metadata(ple_layers: tuple[int, ...]) -> dict:
    """The qwen4exp-ple writer's header (4 layers, every 2nd attends, so 0 and 2 are linear attention), its
    ple.layers replaced."""
    kv = model_writers()["qwen4exp-ple"]().kv
    metadata = {k: tuple(v) if isinstance(v, list) else v for k, v in kv.items()}
    return metadata | {"qwen4exp.ple.layers": ple_layers}


@pytest.mark.parametrize("ple_layers", [(0, 2), (1,), (4,)], ids=["two-layers", "attention-layer", "out-of-range"])
def test_qwen4exp_ple_layers_llama_cpp_refuses_have_no_layout(ple_layers: tuple[int, ...]) -> None:
    """llama_model_qwen4exp::load_arch_hparams throws on more than one PLE layer, one past block_count, or one that
    is not a linear-attention layer (its conv history is a row of the recurrent cache)."""
    with pytest.raises(EvidenceError, match="llama.cpp refuses"):
        derive_layout(_qwen4exp_ple_metadata(ple_layers), "qwen4exp")


@pytest.mark.parametrize(("ple_layers", "history"), [((0,), [4608, 0]), ((), [0, 0])], ids=["layer-0", "empty"])
def test_qwen4exp_ple_layer_keeps_its_conv_history_beside_r_and_s(ple_layers: tuple[int, ...], history: list) -> None:
    """The PLE layer's recurrent row holds a third tensor, (conv_kernel 4 - 1) * ngram_size 3 * hyper_connection
    count 2 * n_embd 256 = 4608 floats; the other linear-attention layer has none, nor any where ple.layers is
    empty (no PLE)."""
    layout = derive_layout(_qwen4exp_ple_metadata(ple_layers), "qwen4exp")
    assert [state.p_elements for state in layout.recurrent] == history


def test_deepseek4_keeps_compressed_caches_beside_the_raw_one(layouts: dict[str, Layout]) -> None:
    """llama_kv_cache_dsv4: after the raw sliding cache, the CSA cache on the ratio-4 layers (0, 2) and the HCA
    cache on the ratio-128 layer (1), one K head of 128 each, then the lightning indexer's on the ratio-4 layers,
    one head of indexer.key_length 64; K only, over the whole context (no window)."""
    caches = layouts["deepseek4"].caches[1:]
    got = [[(a.k_width, a.has_v, a.window, a.ratio) for a in cache.layers] for cache in caches]
    assert got == [[(128, False, None, 4)] * 2, [(128, False, None, 128)], [(64, False, None, 4)] * 2]
    assert layouts["deepseek4"].streams_per_sequence and layouts["deepseek4"].same_cache_types


def _deepseek4_metadata(ratios: tuple[int, ...]) -> dict:
    """The deepseek4 writer's header (4 blocks), its attention.compress_ratios replaced."""
    kv = model_writers()["deepseek4"]().kv
    metadata = {k: tuple(v) if isinstance(v, list) else v for k, v in kv.items()}
    return metadata | {"deepseek4.attention.compress_ratios": ratios}


@pytest.mark.parametrize("ratios", [(4, 128, 4), (4, 128, 8, 0)], ids=["shorter-than-block-count", "ratio-8"])
def test_deepseek4_compress_ratios_llama_cpp_refuses_have_no_layout(ratios: tuple[int, ...]) -> None:
    """llama_model_deepseek4::load_arch_hparams throws on fewer ratios than block_count, load_arch_tensors on a
    ratio other than 0, 4 and 128."""
    with pytest.raises(EvidenceError, match="llama.cpp refuses"):
        derive_layout(_deepseek4_metadata(ratios), "deepseek4")


def test_deepseek4_reads_the_first_block_count_ratios() -> None:
    """A longer compress_ratios is read (get_arr), its entries past block_count unused: the 128 at index 4 adds
    no HCA layer."""
    layout = derive_layout(_deepseek4_metadata((0, 0, 4, 0, 128)), "deepseek4")
    assert [len(cache.layers) for cache in layout.caches] == [4, 1, 0, 1]
