"""The mock-GPU runs each file of tests/data/mock/ records: models (tools/ writers) and probe settings.

A run is a label and the probe's key=value arguments (probe_mock.cpp's header lists them). The settings cover the
launcher's placement flags: -ngl from 0 through the output layer's edge (n_layer, n_layer + 1, all), 1 to 4
devices, -ts, -sm none with -mg, -ot (a layer or the output to the CPU, experts to another device), --n-cpu-moe,
--cpu-moe, --n-cpu-ffn, --no-kv-offload, --no-host, --no-repack, a device without pinned host memory, mmap (a real
load: llama.cpp's dry run cannot map), both allocation rules (plain, ggml-cuda's) and llama.cpp's fitter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tools.accuracy import model_writers
from tools.families import attention, more, plain, recurrent, shapes
from tools.gguf_writers import PUBLIC_SET, QT, SHAPE_SET, Model, llama_gqa
from tools.truth.matrices import POOLING_MODELS

Run = tuple[str, dict[str, str]]  # (label, probe arguments)
RELEASE = "3.21.1"
LABEL = f"node-llama-cpp {RELEASE} prebuilt libllama (llama.cpp v0.4.0), mock GPUs, haswell CPU variant"
CPU_VARIANT = "haswell"  # CPU-side numbers that do not depend on the measuring host (tools/truth/variant.py)
MIB = 1 << 20


def llama_rope_freqs() -> Model:
    """llama-gqa-q4_0 with a rope_freqs table: llama.cpp loads it into every layer (TENSOR_DUPLICATED), once per
    buffer type the layers are in."""
    m = llama_gqa(QT.Q4_0)
    head_dim = m.kv["llama.embedding_length"] // m.kv["llama.attention.head_count"]
    m.tensor("rope_freqs.weight", [head_dim // 2], QT.F32)
    return m


TINY: dict[str, Callable[[], Model]] = {
    **{n: PUBLIC_SET[n] for n in ("llama-gqa-f16", "llama-gqa-q4_0", "qwen3-f16", "gemma3-swa-f16", "gemma2-swa-f16")},
    **{n: PUBLIC_SET[n] for n in ("qwen3moe-f16", "mamba2-f16", "granitehybrid-f16", "lfm2-f16")},
    **{n: attention.FAMILY_SET[n] for n in ("deepseek2-mla", "gptoss-swa-moe", "gemma3n-shared")},
    "llama-gqa-ropefreqs-q4_0": llama_rope_freqs,
}
SHAPES: dict[str, Callable[[], Model]] = {
    **{n: SHAPE_SET[n] for n in ("llama31-8b-shape-q4_0", "gemma3-4b-shape-q4_0", "qwen3-30b-a3b-shape-q4_0")},
    "mamba2-2.7b-shape-f16": SHAPE_SET["mamba2-2.7b-shape-f16"],
    "granite-4.0-h-tiny-shape": shapes.FAMILY_SET["granite-4.0-h-tiny-shape"],
    "deepseek-v3-shape": shapes.FAMILY_SET["deepseek-v3-shape"],
    "jamba-1.5-mini-shape-f16": recurrent.SHAPE_SET["jamba-1.5-mini-shape-f16"],
}


# the fitter choosing the context: dense, SWA, MoE, hybrid (recurrent and attention layers, MoE)
FIT_CONTEXT = ("llama31-8b-shape-q4_0", "gemma3-4b-shape-q4_0", "qwen3-30b-a3b-shape-q4_0", "granite-4.0-h-tiny-shape")


def _n_layer(model: Model) -> int:
    return int(model.kv[f"{model.arch}.block_count"])


def _is_moe(model: Model) -> bool:
    return any("_exps." in name for name, _, _ in model.tensors)


def _has_dense_ffn(model: Model) -> bool:
    return any(".ffn_up." in name for name, _, _ in model.tensors)


def _tied(model: Model) -> bool:
    return all(name != "output.weight" for name, _, _ in model.tensors)


def _runs(model: Model, *, tiny: bool) -> list[Run]:
    """The placement settings of one model (dry runs unless a run maps the file, which needs a real load)."""
    nl = _n_layer(model)
    half = nl // 2
    g1, g2 = {"mock_gpus": "1"}, {"mock_gpus": "2"}
    runs: list[Run] = [
        ("g0", {"mock_gpus": "0"}),
        ("g1_all", g1),
        ("g1_ngl0", g1 | {"ngl": "0"}),
        ("g1_ngl1", g1 | {"ngl": "1"}),
        ("g1_half", g1 | {"ngl": str(half)}),
        ("g1_nl-1", g1 | {"ngl": str(nl - 1)}),
        ("g1_nl", g1 | {"ngl": str(nl)}),
        ("g1_nl+1", g1 | {"ngl": str(nl + 1)}),
        ("g1_cuda", g1 | {"mock_alloc": "cuda"}),
        ("g1_cuda_q8", g1 | {"mock_alloc": "cuda", "type_k": "q8_0", "type_v": "q8_0"}),
        ("g1_cuda_q8_fa", g1 | {"mock_alloc": "cuda", "mock_fa_alloc": "1", "type_k": "q8_0", "type_v": "q8_0"}),
        ("g1_half_cuda", g1 | {"ngl": str(half), "mock_alloc": "cuda"}),
        ("g1_fa_off", g1 | {"fa": "off"}),
        ("g1_seq3", g1 | {"n_seq": "3"}),
        ("g1_kv0", g1 | {"kv_offload": "0"}),
        ("g1_half_kv0", g1 | {"ngl": str(half), "kv_offload": "0"}),
        ("g1_nohost", g1 | {"no_host": "1"}),
        ("g1_half_nohost", g1 | {"ngl": str(half), "no_host": "1"}),
        ("g1_half_nohost_norepack", g1 | {"ngl": str(half), "no_host": "1", "repack": "0"}),
        ("g1_nopinned", g1 | {"mock_host": "0"}),
        ("g1_half_nopinned", g1 | {"ngl": str(half), "mock_host": "0"}),
        ("g1_ot_layer0_cpu", g1 | {"ot": "blk\\.0\\.=CPU"}),
        ("g2_11", g2 | {"ts": "1,1"}),
        ("g2_31", g2 | {"ts": "3,1"}),
        ("g2_13_half", g2 | {"ts": "1,3", "ngl": str(half)}),
        ("g2_01", g2 | {"ts": "0,1"}),
        ("g2_freesplit", g2 | {"mock_free_mib": "20000,10000"}),
        ("g2_none_main1", g2 | {"split": "none", "main_gpu": "1"}),
        ("g2_11_kv0", g2 | {"ts": "1,1", "kv_offload": "0"}),
        ("g2_11_cuda", g2 | {"ts": "1,1", "mock_alloc": "cuda"}),
        ("g2_ot_layer_mock1", g2 | {"ts": "1,1", "ot": "blk\\.0\\.=MOCK1"}),
        ("g3_111", {"mock_gpus": "3", "ts": "1,1,1"}),
        ("g4_4321", {"mock_gpus": "4", "ts": "4,3,2,1"}),
        ("g4_1111_nl", {"mock_gpus": "4", "ts": "1,1,1,1", "ngl": str(nl)}),
    ]
    if _tied(model):
        runs += [("g1_ot_embd_gpu", g1 | {"ot": "token_embd\\.weight=MOCK0"})]
    else:
        runs += [("g1_ot_output_cpu", g1 | {"ot": "output\\.weight=CPU"})]
    if _has_dense_ffn(model):
        runs += [("g1_ncffn2", g1 | {"n_cpu_ffn": "2"})]
    if _is_moe(model):
        runs += [
            ("g1_ncmoe1", g1 | {"n_cpu_moe": "1"}),
            ("g1_ncmoe_half", g1 | {"n_cpu_moe": str(half)}),
            ("g1_ncmoe_all", g1 | {"n_cpu_moe": str(nl)}),
            ("g1_cpumoe", g1 | {"cpu_moe": "1"}),
            ("g1_ncmoe_half_nohost", g1 | {"n_cpu_moe": str(half), "no_host": "1"}),
            ("g2_11_ncmoe_half", g2 | {"ts": "1,1", "n_cpu_moe": str(half)}),
            ("g2_ot_exps_mock1", g2 | {"ts": "1,1", "ot": "blk\\.[0-1]\\.ffn_.*_exps=MOCK1"}),
            ("g1_moe_dep", g1 | {"mock_moe_dep": "1"}),
            ("g1_half_moe_dep", g1 | {"ngl": str(half), "mock_moe_dep": "1"}),
        ]
    if tiny:  # mmap needs a real load (the dry run cannot map the file); the tiny models allocate in no time
        real = {"no_alloc": "0"}
        runs += [
            ("g0_mmap", {"mock_gpus": "0", "mmap": "1"} | real),
            ("g1_half_mmap", g1 | {"ngl": str(half), "mmap": "1"} | real),
            ("g1_all_mmap", g1 | {"mmap": "1"} | real),
            ("g1_half_real", g1 | {"ngl": str(half)} | real),
            ("g2_11_mmap_nohost", g2 | {"ts": "1,1", "ngl": str(half), "mmap": "1", "no_host": "1"} | real),
        ]
        if _is_moe(model):
            runs += [("g1_ncmoe1_mmap", g1 | {"n_cpu_moe": "1", "mmap": "1"} | real)]
    return runs


def fit_runs(full_offload_bytes: int, moe: bool) -> list[Run]:
    """llama.cpp's fitter (common_fit_params) on free memory that holds 60% of a full offload plus its 1 GiB
    margin (one device, and two of half that), so that it must offload partially; the chosen -ngl, -ts and
    overrides are echoed in the row's `fit` and `settings`."""
    free = int(full_offload_bytes * 0.6 / MIB) + 1024
    runs: list[Run] = [
        ("fit1", {"mock_gpus": "1", "mock_free_mib": str(free), "mock_total_mib": str(free + 2048), "fit": "1"}),
        (
            "fit2",
            {
                "mock_gpus": "2",
                "mock_free_mib": str(free // 2 + 512),
                "mock_total_mib": str(free // 2 + 2048),
                "fit": "1",
            },
        ),
    ]
    if moe:
        runs.append(("fit1_m512", runs[0][1] | {"fit_margin_mib": "512"}))
    return runs


def context_fit_runs(full_offload_bytes: int, moe: bool) -> list[Run]:
    """llama.cpp's fitter choosing the context too (-c 0: from the trained context down to --fit-ctx) on free memory
    that holds 60% and 25% of a full offload at the trained context plus the 1 GiB margin, on one device and on two
    of half that (and three of a third for 25%): the context reduced alone, or then the layers assigned (MoE: the
    experts overridden). Then three
    on ggml-cuda's rules (a declared cuda GPU stands for the mock): llama-server's four slots on a unified cache
    (its output limit, 4, as n_outputs_max) choosing the context, and a context of 8192 on one and two devices."""
    runs: list[Run] = []
    for share in (60, 25):
        free = int(full_offload_bytes * share / 100 / MIB) + 1024
        runs += [(f"fitctx1_{share}", _fit_gpus(1, free)), (f"fitctx2_{share}", _fit_gpus(2, free))]
    runs.append(("fitctx3_25", _fit_gpus(3, int(full_offload_bytes * 0.25 / MIB) + 1024)))
    cuda = {"mock_alloc": "cuda", "mock_moe_dep": "1"}
    free = int(full_offload_bytes * 0.6 / MIB) + 1024
    # llama-server's n_outputs_max, set before its fit: min(n_batch, 4 slots x (1 + no draft)) (server_output_limits)
    server = {"n_seq": "4", "unified": "1", "outputs_max": "4"}
    runs.append(("fitctx1_60_server", _fit_gpus(1, free) | cuda | server))
    free = int(full_offload_bytes * 0.25 / MIB) + 1024
    runs += [(f"fit{n}_25_cuda", _fit_gpus(n, free) | cuda | {"n_ctx": "8192"}) for n in (1, 2)]
    return [(label, args | {"fit": "1"}) for label, args in runs]


def _fit_gpus(n: int, free_mib: int) -> dict[str, str]:
    """n mock GPUs sharing `free_mib` (each of several: its share and 512 MiB), 2 GiB more in total."""
    free = free_mib if n == 1 else free_mib // n + 512
    total = free + 2048 if n == 1 else free_mib // n + 2048
    return {"mock_gpus": str(n), "mock_free_mib": str(free), "mock_total_mib": str(total)}


# llama-server's --spec-type draft-mtp: the fitter fits the MTP draft context beside the target (common_init_result's
# common_fit_extra_model), on tiny models of the NextN-only caches (qwen35's gated attention, bailingmoe3's MLA,
# deepseek32's and glm-dsa's dense MLA, nemotron_h_moe's NoPE attention, hy_v3's q/k-normed attention), the
# all-layers ones (deepseek2's MLA, glm4moe's attention) and the llama_kv_cache_iswa ones (mimo2, step35): the
# writers the truth matrices' results_mtp_ctx*.jsonl use
FIT_MTP: dict[str, Callable[[], Model]] = {
    **{n: recurrent.FAMILY_SET[n] for n in ("qwen35-mtp", "bailingmoe3")},
    **attention.MTP_MODELS,
    **more.MTP_MODELS,
    **more.MTP_ISWA_MODELS,
    **more.DSA_MTP_MODELS,
    "nemotron-h-moe": recurrent.FAMILY_SET["nemotron-h-moe"],
    **more.HY_V3_MTP_MODELS,
}


def mtp_fit_runs(full_offload_bytes: int, moe: bool) -> list[Run]:
    """The fitter choosing the context (-c 0) with the MTP draft context beside the target, on free memory that
    holds 60, 25, 10, 8, 7, 6 and 3% of the target's full offload at the trained context plus the 1 GiB margin, on one
    device and on two of half that: the context reduced alone, then the layers assigned (the draft's cache and
    compute buffer where its own placement, every layer on the GPUs, puts them). Then on ggml-cuda's rules (a
    declared cuda GPU stands for the mock) at a context of 8192, with 12 and 20% on one and two devices: the layers
    assigned beside the draft."""
    del moe
    runs: list[Run] = []
    for share in (60, 25, 10, 8, 7, 6, 3):
        free = int(full_offload_bytes * share / 100 / MIB) + 1024
        runs += [(f"fitmtp1_{share}", _fit_gpus(1, free)), (f"fitmtp2_{share}", _fit_gpus(2, free))]
    cuda = {"mock_alloc": "cuda", "mock_moe_dep": "1", "n_ctx": "8192"}
    for share in (12, 20):
        free = int(full_offload_bytes * share / 100 / MIB) + 1024
        runs += [(f"fitmtp{n}_{share}_cuda", _fit_gpus(n, free) | cuda) for n in (1, 2)]
    return [(label, args | {"fit": "1"}) for label, args in runs]


# the gated delta-net trunks (qwen35's, qwen3next's gated delta nets, bailingmoe3's Kimi delta attention) split per
# backend: their recurrent and attention layers on one and two devices
DELTA_NET: dict[str, Callable[[], Model]] = {
    n: recurrent.FAMILY_SET[n] for n in ("qwen35", "qwen35moe", "qwen3next", "bailingmoe3", "kimi-linear", "kimi-k3")
}
# the RWKV trunks (token shifts, time mixes, channel mixes or SwiGLU FFNs) split per backend: RWKV-6 and RWKV-7 with
# LayerNorms and token_embd_norm (in layer 0), and their Qwen-style variants (RMS norms, GQA k / v, no group norm)
RWKV: dict[str, Callable[[], Model]] = {n: recurrent.FAMILY_SET[n] for n in ("rwkv6", "rwkv7", "arwkv7", "rwkv6qwen2")}
# the Mamba-family trunks split per backend: Mamba-2 hybrids (nemotron_h, nemotron_h_moe, falcon-h1), Mamba-1
# (mamba, FalconMamba's weightless dt / B / C norms, jamba's hybrid) and PLaMo-2's own mixer
SSM: dict[str, Callable[[], Model]] = {
    **{n: recurrent.FAMILY_SET[n] for n in ("nemotron-h", "nemotron-h-moe", "mamba", "jamba", "falcon-h1", "plamo2")},
    "falcon-mamba": lambda: recurrent.mamba("tiny-falcon-mamba", dt_b_c_rms=True),
}
# the sparse-attention trunks whose memory holds more than one cache, each layer's in its layer's buffer type:
# deepseek32's and glm-dsa's indexer cache (llama_kv_cache_dsa: every trunk layer, or glm-dsa's full-indexer
# layers), qwen4exp's (llama_memory_hybrid_idx: QSA beside its delta nets, the PLE conv history), deepseek4's
# compressed caches and compressor states (llama_kv_cache_dsv4)
INDEXER: dict[str, Callable[[], Model]] = {
    **{n: more.FAMILY_SET[n] for n in ("deepseek32", "glm-dsa-types", "glm-dsa-52")},
    "qwen4exp-qsa": recurrent.QWEN4EXP_VARIANTS["qwen4exp-qsa"],
    "deepseek4": recurrent.FAMILY_SET["deepseek4"],
}


def delta_net_runs(model: Model) -> list[Run]:
    """One and two mock GPUs, three contexts, flash attention on and off, a partial -ngl, the KV on the CPU, more
    sequences, ggml-cuda's rules, and real loads (the pins kept)."""
    nl = _n_layer(model)
    half = nl // 2
    g1, g2 = {"mock_gpus": "1"}, {"mock_gpus": "2"}
    two = g2 | {"ts": "1,1"}
    real = {"no_alloc": "0"}
    return [
        ("g0", {"mock_gpus": "0"}),
        ("g1_all", g1),
        ("g1_fa_off", g1 | {"fa": "off"}),
        ("g1_ngl1", g1 | {"ngl": "1"}),
        ("g1_half", g1 | {"ngl": str(half)}),
        ("g1_half_fa_off", g1 | {"ngl": str(half), "fa": "off"}),
        ("g1_nl", g1 | {"ngl": str(nl)}),
        ("g1_ctx1024", g1 | {"n_ctx": "1024"}),
        ("g1_ctx16384_fa_off", g1 | {"n_ctx": "16384", "fa": "off"}),
        ("g1_seq3", g1 | {"n_seq": "3"}),
        ("g1_half_kv0", g1 | {"ngl": str(half), "kv_offload": "0"}),
        ("g1_cuda", g1 | {"mock_alloc": "cuda"}),
        ("g2_11", two),
        ("g2_11_fa_off", two | {"fa": "off"}),
        ("g2_31", g2 | {"ts": "3,1"}),
        ("g2_13_half", g2 | {"ts": "1,3", "ngl": str(half)}),
        ("g2_11_ctx16384", two | {"n_ctx": "16384"}),
        ("g2_11_seq3", two | {"n_seq": "3"}),
        ("g2_11_kv0", two | {"kv_offload": "0"}),
        ("g2_11_cuda", two | {"mock_alloc": "cuda"}),
        ("g1_half_real", g1 | {"ngl": str(half)} | real),
        ("g2_11_real", two | real),
        ("g2_13_half_real_fa_off", g2 | {"ts": "1,3", "ngl": str(half), "fa": "off"} | real),
    ]


def indexer_runs(model: Model) -> list[Run]:
    """delta_net_runs' settings and cache_type_runs' (the indexer's cache takes -ctk as the attention's: its view
    copied to a GPU that scores it is of that type)."""
    return delta_net_runs(model) + cache_type_runs(model)


# one tiny model of each architecture no other file places, so that every graph memfit's scheduler splits is checked
# per backend against llama.cpp's: a few of the placement settings each, and the fitter
COVERAGE_ATTENTION = (
    "cohere2-swa", "command-r", "deci-arr", "granite", "llama-embed", "openelm-arr", "phi3-swa", "qwen2-bias",
)  # fmt: skip
COVERAGE_MORE = (  # plm's is left out: its graph aborts under the flash attention auto turns on
    "afmoe-swa", "cohere2moe-scal", "exaone-moe-nextn", "exaone4-64", "gemma-hd96", "granite-swa", "llama4-chunked",
    "mellum-arr", "minicpm3", "mistral3", "mistral4-mla", "muse-glimmer-arr", "olmo2-swa", "smallthinker-swa",
    "smollm3", "starcoder2",
)  # fmt: skip
COVERAGE: dict[str, Callable[[], Model]] = {
    **{n: attention.FAMILY_SET[n] for n in COVERAGE_ATTENTION},
    "gemma-embedding": attention.GEMMA_EMBEDDING_MODELS["gemma-embedding"],
    **{n: plain.FAMILY_SET[n] for n in ("internlm2", "minicpm", "minicpm-moe")},
    "lfm2moe": recurrent.FAMILY_SET["lfm2moe"],
    **{n: more.FAMILY_SET[n] for n in COVERAGE_MORE},
}
COVERAGE_LABELS = (
    "g1_all", "g1_half", "g1_half_fa_off", "g1_half_kv0", "g2_11", "g2_13_half", "g2_11_cuda", "g1_half_real",
)  # fmt: skip


def coverage_runs(model: Model) -> list[Run]:
    """delta_net_runs' one and two devices, a partial -ngl with flash attention off, the KV on the CPU, ggml-cuda's
    rules and a real load."""
    return [(label, args) for label, args in delta_net_runs(model) if label in COVERAGE_LABELS]


# the KV cache's types other than f16: dense, GQA with a K norm, sliding-window (llama_kv_cache_iswa), MLA (a K-only
# cache whose view is V)
CACHE_TYPE_MODELS: dict[str, Callable[[], Model]] = {
    **{n: PUBLIC_SET[n] for n in ("llama-gqa-f16", "qwen3-f16", "gemma3-swa-f16")},
    "deepseek2-mla": attention.FAMILY_SET["deepseek2-mla"],
}


def cache_type_runs(model: Model) -> list[Run]:
    """q8_0 and f32 caches (K, V or both): flash attention on, off and auto, a partial -ngl (a layer's cache in host
    memory, its attention on a GPU), one and two mock GPUs, the KV on the CPU, ggml-cuda's rules, real loads."""
    half = str(_n_layer(model) // 2)
    g1, g2 = {"mock_gpus": "1"}, {"mock_gpus": "2"}
    two = g2 | {"ts": "1,1"}
    q8, f32 = {"type_k": "q8_0", "type_v": "q8_0"}, {"type_k": "f32", "type_v": "f32"}
    q8k, q8v = {"type_k": "q8_0"}, {"type_v": "q8_0"}
    on, off, auto = {"fa": "on"}, {"fa": "off"}, {"fa": "auto"}
    cuda, real = {"mock_alloc": "cuda"}, {"no_alloc": "0"}
    runs = [
        ("g1_q8_on", g1 | q8 | on),
        ("g1_q8_auto", g1 | q8 | auto),
        ("g1_q8k_off", g1 | q8k | off),
        ("g1_f32_on", g1 | f32 | on),
        ("g1_f32_off", g1 | f32 | off),
        ("g1_f32_auto", g1 | f32 | auto),
        ("g1_q8_half_on", g1 | q8 | on | {"ngl": half}),
        ("g1_q8v_ngl1_on", g1 | q8v | on | {"ngl": "1"}),
        ("g1_q8k_half_off", g1 | q8k | off | {"ngl": half}),
        ("g1_f32_half_on", g1 | f32 | on | {"ngl": half}),
        ("g1_f32_half_auto", g1 | f32 | auto | {"ngl": half}),
        ("g1_q8_kv0_auto", g1 | q8 | auto | {"kv_offload": "0"}),
        ("g1_f32_kv0_on", g1 | f32 | on | {"kv_offload": "0"}),
        ("g1_q8_half_cuda", g1 | q8 | on | {"ngl": half} | cuda),
        ("g1_q8_cuda_fa_alloc", g1 | q8 | on | cuda | {"mock_fa_alloc": "1"}),
        ("g1_q8_seq2_ub64", g1 | q8 | on | {"n_seq": "2", "n_ubatch": "64"}),
        ("g2_q8_11_on", two | q8 | on),
        ("g2_f32_13_half_on", g2 | f32 | on | {"ts": "1,3", "ngl": half}),
        ("g2_q8_31_half_cuda", g2 | q8 | auto | {"ts": "3,1", "ngl": half} | cuda),
        ("g2_q8k_11_kv0_off", two | q8k | off | {"kv_offload": "0"}),
        ("g2_q8_11_kv0_cuda", two | q8 | auto | {"kv_offload": "0"} | cuda),
        ("g1_q8_half_real", g1 | q8 | on | {"ngl": half} | real),
        ("g2_f32_11_half_real_auto", two | f32 | auto | {"ngl": half} | real),
    ]
    if f"{model.arch}.attention.kv_lora_rank" not in model.kv and model.arch != "deepseek4":
        return runs
    # MLA and deepseek4: llama_init_from_model refuses K and V of different types; a quantized V (K's) needs flash
    # attention
    return [
        (label, a)
        for label, a in runs
        if a.get("type_k") == a.get("type_v") and not (a.get("type_v") == "q8_0" and a["fa"] == "off")
    ]


# the builders of their own that memfit's scheduler splits per backend (gemma4's, the BERT encoders', qwen3's reranker,
# laguna's, stablelm's parallel residual, plamo3's, minimax-01's lightning attention): each names its layers and the
# weights it reads
ARCHS: dict[str, Callable[[], Model]] = {
    **{
        n: attention.FAMILY_SET[n]
        for n in ("gemma4-moe", "gemma4-ple", "gemma4-shared", "bert-embd", "nomic-bert-embd")
    },
    "qwen3-f16-rank": POOLING_MODELS["qwen3-f16-rank"],
    **{n: more.FAMILY_SET[n] for n in ("laguna-swa", "afmoe-swa", "plamo3-swa")},
    "stablelm-parallel": plain.FAMILY_SET["stablelm-parallel"],
    "minimax01": recurrent.FAMILY_SET["minimax01"],
}
# mimo2's files: trunk-only, fused Q, K and V, and with an MTP block its graph_mtp aborts on (the trunk's runs): their
# optional attention sinks (attn_sinks) place each soft_max by its weight, a transposed V cache is as wide as the
# widest layer's (n_embd_v_gqa_max)
MIMO2: dict[str, Callable[[], Model]] = {
    **{n: more.FAMILY_SET[n] for n in ("mimo2-nextn", "mimo2-fused")},
    **more.MIMO2_MTP_ASSERTS,
}


def mimo2_runs(model: Model) -> list[Run]:
    """delta_net_runs', and the KV on the CPU without flash attention over several sequences (each layer's
    attention on its GPU by its sinks, reading the host cache's views copied in), on one and two GPUs, with
    ggml-cuda's rules and a real load."""
    kv0 = {"kv_offload": "0", "fa": "off", "n_seq": "2"}
    g1, two = {"mock_gpus": "1"}, {"mock_gpus": "2", "ts": "1,1"}
    return delta_net_runs(model) + [
        ("g1_kv0_fa_off_seq2", g1 | kv0),
        ("g1_half_kv0_fa_off_seq2", g1 | kv0 | {"ngl": str(_n_layer(model) // 2)}),
        ("g2_11_kv0_fa_off_seq2", two | kv0),
        ("g2_31_kv0_fa_off_seq2_cuda", two | kv0 | {"ts": "3,1", "mock_alloc": "cuda", "mock_moe_dep": "1"}),
        ("g2_11_kv0_fa_off_seq2_real", two | kv0 | {"no_alloc": "0"}),
    ]


ENCODERS = ("bert", "nomic-bert")  # no cache: fewer runs (the KV's settings are none of theirs)


def arch_runs(model: Model) -> list[Run]:
    """delta_net_runs' settings; an encoder's without the cache's (contexts, sequences, the KV on the CPU)."""
    runs = delta_net_runs(model)
    if model.arch == "minimax-01":  # sched_reserve's last reserve over one sequence: real loads of several
        real3 = {"n_seq": "3", "no_alloc": "0"}
        runs += [
            ("g1_seq3_real", {"mock_gpus": "1"} | real3),
            ("g2_11_seq3_real", {"mock_gpus": "2", "ts": "1,1"} | real3),
        ]
    if model.arch not in ENCODERS:
        return runs
    # at their trained context (memfit refuses a longer one, llama.cpp warns): the ubatch's 512 tokens all the same
    trained = {"n_ctx": str(model.kv[f"{model.arch}.context_length"])}
    return [(label, args | trained) for label, args in runs if not any(k in label for k in ("ctx", "seq", "kv0"))]


# the caches on the host and the pooled embedding models (tools/truth/mock/sweep.py's seed-2 launches): Mamba hybrids
# under --no-kv-offload, whose attention runs on the CPU beside its cache, with flash attention auto (a quantized V
# enables it outright: llama_init_from_model); embedding models without a cache, whose attention output build_attn_mha
# pins to the CPU (offload_kqv off), and whose batch the context does not cap (non-causal)
HOST_KV: dict[str, Callable[[], Model]] = {
    **{n: recurrent.FAMILY_SET[n] for n in ("plamo2", "nemotron-h", "nemotron-h-moe-latent", "granitehybrid-f16")},
    **{n: recurrent.FAMILY_SET[n] for n in ("falcon-h1", "jamba")},
    **{n: attention.GEMMA_EMBEDDING_MODELS[n] for n in ("gemma-embedding-dense", "gemma-embedding")},
    **{n: attention.FAMILY_SET[n] for n in ("bert-embd", "nomic-bert-embd")},
}


def host_kv_runs(model: Model) -> list[Run]:
    """A hybrid's: the KV on the CPU with a quantized V or an F16 one under flash attention auto, one to three
    devices, a partial -ngl, ggml-cuda's rules (with its flash attention's F16 copies too), real loads (the pins
    kept), and the KV offloaded beside them. A pooled
    embedding model's (at its trained context): the KV on the CPU without flash attention, real loads and a dry run,
    one to three devices, a partial -ngl; a ubatch past a shorter context, with flash attention auto over a
    quantized V."""
    half = str(_n_layer(model) // 2)
    g1, g2, g3 = {"mock_gpus": "1"}, {"mock_gpus": "2", "ts": "1,3"}, {"mock_gpus": "3", "ts": "1.5,0.5,1.5"}
    kv0, auto, off = {"kv_offload": "0"}, {"fa": "auto"}, {"fa": "off"}
    q8v, q8 = {"type_v": "q8_0"}, {"type_k": "q8_0", "type_v": "q8_0"}
    cuda, real = {"mock_alloc": "cuda", "mock_moe_dep": "1"}, {"no_alloc": "0"}
    if f"{model.arch}.pooling_type" not in model.kv:
        return [
            ("g1_q8v_kv0_auto", g1 | q8v | kv0 | auto),
            ("g1_q8v_kv0_auto_real", g1 | q8v | kv0 | auto | real),
            ("g1_half_q8v_kv0_auto", g1 | q8v | kv0 | auto | {"ngl": half}),
            ("g2_13_q8_kv0_auto_cuda", g2 | q8 | kv0 | auto | cuda),
            ("g3_q8v_kv0_auto_real_cuda", g3 | q8v | kv0 | auto | real | cuda),
            ("g3_q8v_kv0_auto_real_cuda_fa_alloc", g3 | q8v | kv0 | auto | real | cuda | {"mock_fa_alloc": "1"}),
            ("g1_f16_kv0_auto", g1 | kv0 | auto),
            ("g2_13_f16_kv0_auto_real", g2 | kv0 | auto | real),
            ("g2_13_q8v_auto", g2 | q8v | auto),
        ]
    trained = int(model.kv[f"{model.arch}.context_length"])
    ctx, short = {"n_ctx": str(trained)}, {"n_ctx": str(trained - 48), "n_ubatch": "2048"}
    return [
        ("g1_kv0_off_real", g1 | ctx | kv0 | off | real),
        ("g1_kv0_off", g1 | ctx | kv0 | off),
        ("g2_13_half_kv0_off_real", g2 | ctx | kv0 | off | real | {"ngl": half}),
        ("g3_kv0_off_real_cuda", g3 | ctx | kv0 | off | real | cuda),
        ("g1_q8v_kv0_auto_real", g1 | ctx | q8v | kv0 | auto | real),
        ("g1_short_ub2048", g1 | short),
        ("g1_short_ub2048_real", g1 | short | real),
        ("g3_short_ub2048_seq2_ngl3_cuda", g3 | short | q8v | auto | cuda | {"n_seq": "2", "ngl": "3"}),
    ]


@dataclass(frozen=True)
class MockFile:
    """One file of tests/data/mock/: its models, their runs, the probe's base arguments."""

    models: dict[str, Callable[[], Model]]
    base: dict[str, str]
    tiny: bool
    # the fitter's runs, their free memory sized from the model's full offload (the g1_all run)
    fits: Callable[[int, bool], list[Run]] | None = None
    placements: bool = True  # the placement settings' runs (else g1_all alone, which sizes the fitter's runs)
    settings: Callable[[Model], list[Run]] | None = None  # runs of its own in place of the placement settings'

    def runs(self, model: Model) -> list[Run]:
        if self.settings is not None:
            runs = self.settings(model)
        else:
            runs = _runs(model, tiny=self.tiny) if self.placements else [("g1_all", {"mock_gpus": "1"})]
        return [(label, self.base | args) for label, args in runs]


MOCK_FILES: dict[str, MockFile] = {
    "results_mock_tiny.jsonl": MockFile(TINY, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True),
    "results_mock_shapes_dryrun.jsonl": MockFile(SHAPES, {"n_ctx": "8192", "no_alloc": "1"}, tiny=False, fits=fit_runs),
    "results_mock_fit_context_dryrun.jsonl": MockFile(
        {n: SHAPES[n] for n in FIT_CONTEXT},
        {"n_ctx": "0", "no_alloc": "1"},
        tiny=False,
        fits=context_fit_runs,
        placements=False,
    ),
    "results_mock_delta_net.jsonl": MockFile(
        DELTA_NET, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, fits=fit_runs, settings=delta_net_runs
    ),
    "results_mock_rwkv.jsonl": MockFile(
        RWKV, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, fits=fit_runs, settings=delta_net_runs
    ),
    "results_mock_ssm.jsonl": MockFile(
        SSM, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, fits=fit_runs, settings=delta_net_runs
    ),
    "results_mock_indexer.jsonl": MockFile(
        INDEXER, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, fits=fit_runs, settings=indexer_runs
    ),
    "results_mock_coverage.jsonl": MockFile(
        COVERAGE, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, fits=fit_runs, settings=coverage_runs
    ),
    "results_mock_cache_types.jsonl": MockFile(
        CACHE_TYPE_MODELS, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, settings=cache_type_runs
    ),
    "results_mock_archs.jsonl": MockFile(
        ARCHS, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, fits=fit_runs, settings=arch_runs
    ),
    "results_mock_mimo2.jsonl": MockFile(
        MIMO2, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, fits=fit_runs, settings=mimo2_runs
    ),
    "results_mock_host_kv.jsonl": MockFile(
        HOST_KV, {"n_ctx": "4096", "no_alloc": "1"}, tiny=True, settings=host_kv_runs
    ),
    # not results_mock_*: the placement tests' files() leave these runs (two contexts on one model) to their own
    "fit_mtp_gpu.jsonl": MockFile(
        FIT_MTP, {"n_ctx": "0", "no_alloc": "1", "mtp_ctx": "1"}, tiny=False, fits=mtp_fit_runs, placements=False
    ),
}


def mock_writers() -> dict[str, Callable[[], Model]]:
    """The writer of every model a mock file's row names: a matrix's, or one the sweep drew (tools/truth/mock/sweep.py:
    a launch it found, mirrored since, kept as an explicit run in a results_mock_sweep_*.jsonl file)."""
    return model_writers() | {name: w for spec in MOCK_FILES.values() for name, w in spec.models.items()}
