"""Launch profiles (estimator/profiles.py) and llama.cpp's context fitter (estimator/fitter.py).

Each expected value is written out from the source it mirrors, named beside it: the pinned llama.cpp's
common/common.h, common/arg.cpp, tools/server/server.cpp and common/fit.cpp; Ollama's llm/llama_server.go,
llm/server.go, server/routes.go, server/sched.go and envconfig/config.go; LM Studio's documentation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import pytest

from memfit.estimator.bounds import Part
from memfit.estimator.cpu_variant import BY_NAME
from memfit.estimator.fitter import fitted_context, host_projection
from memfit.estimator.machine import GpuMemory
from memfit.estimator.mtp import with_mtp
from memfit.estimator.profiles import GIB, NO_FACTS, LaunchFacts, host_weights, resolve_profile, resolved_workload
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, Component, ContextSource, SettingSource
from memfit.estimator.workload import WorkloadRequest, resolve_workload
from memfit.service.artifact_cache import ArtifactCache
from tools.accuracy import file_subject, write_models
from tools.truth import DATA, load, measured_variant, run_id

MIB = 1 << 20
CACHE = ArtifactCache()


def subject(trained: int | None = 40960) -> Subject:
    """A model known only by its trained context (no layout: the fitter has nothing to project)."""
    weights = Part(Component.WEIGHTS, 100 * MIB, Basis.MEASURED_ARTIFACT, "")
    companions = Part.not_applicable(Component.COMPANIONS, "")
    return Subject("m", "", "", None, trained, None, None, None, weights, companions)


def settings(profile: str, facts: LaunchFacts = NO_FACTS) -> dict[str, object]:
    resolution = resolve_profile(WorkloadRequest(profile=profile), facts, subject())
    r = resolution.request
    return {
        "streams": r.streams,
        "kvUnified": r.kv_unified,
        "keyElementBytes": r.key_element_bytes,
        "valueElementBytes": r.value_element_bytes,
        "flashAttention": r.flash_attention,
        "ubatchTokens": r.ubatch_tokens,
        "swaFull": r.swa_full,
        "loadMode": r.load_mode,
        "cacheRamMib": r.cache_ram_mib,
        "contextCheckpoints": r.context_checkpoints,
        "mode": r.mode,
        "context": resolution.context[0] if resolution.context else None,
        "fit": resolution.fit,
    }


def test_llama_server_runs_its_own_defaults() -> None:
    assert settings("llamaServer") == {
        "streams": 4,  # server.cpp: n_parallel auto (-1, arg.cpp) -> 4
        "kvUnified": True,  # server.cpp: and kv_unified = true
        "keyElementBytes": 2,  # common.h: cache_type_k = GGML_TYPE_F16
        "valueElementBytes": 2,
        "flashAttention": "auto",  # common.h: LLAMA_FLASH_ATTN_TYPE_AUTO
        "ubatchTokens": 512,  # common.h: n_ubatch = 512
        "swaFull": False,  # common.h: swa_full = false
        "loadMode": "auto",  # common.h: LLAMA_LOAD_MODE_AUTO
        "cacheRamMib": 8192,  # common.h: cache_ram_mib = 8192
        "contextCheckpoints": 32,  # common.h: n_ctx_checkpoints = 32
        "mode": "cpuOffload",  # common.h: n_gpu_layers = -1 (auto): the fitter places (fit_params = true)
        "context": None,  # n_ctx 0: the fitter chooses (fit_params = true)
        "fit": True,
    }


def test_a_setting_the_request_names_overrides_the_profile() -> None:
    resolution = resolve_profile(WorkloadRequest(profile="llamaServer", streams=2), NO_FACTS, subject())
    assert resolution.request.streams == 2 and "streams" not in resolution.sources
    assert resolution.sources["kvUnified"].source is SettingSource.PROFILE
    assert "server.cpp" in resolution.sources["kvUnified"].detail
    sized = WorkloadRequest(profile="llamaServer", allocated_tokens=8192)
    assert not resolve_profile(sized, NO_FACTS, subject()).fit  # -c given: the fitter keeps it


@pytest.mark.parametrize(
    ("gpu_total", "num_ctx"),
    [
        (None, 4096),  # server/routes.go: below 23 GiB (no GPU), 4096
        (16 * GIB, 4096),
        (23 * GIB, 32768),  # from 23 GiB, 32768
        (47 * GIB, 40960),  # from 47 GiB, 262144, capped to the trained 40960 (llm/server.go)
    ],
)
def test_ollama_takes_its_context_from_the_vram_tier(gpu_total: int | None, num_ctx: int) -> None:
    assert settings("ollama", LaunchFacts(gpu_total=gpu_total))["context"] == num_ctx


def test_ollama_launches_one_slot_a_split_cache_and_the_server_defaults() -> None:
    found = settings("ollama")
    assert found == {
        "streams": 1,  # envconfig/config.go: OLLAMA_NUM_PARALLEL, default 1
        "kvUnified": False,  # llm/llama_server.go passes -np: common.h's kv_unified = false
        "keyElementBytes": 2,  # OLLAMA_KV_CACHE_TYPE unset: no -ctk, common.h's f16
        "valueElementBytes": 2,
        "flashAttention": "auto",  # llm/llama_server.go: --flash-attn auto where the devices support it
        "ubatchTokens": 512,  # server/sched.go: -b/-ub 512 up to a 4096 context
        "swaFull": False,
        "loadMode": "auto",  # no --load-mode unless use_mmap is false or an integrated GPU
        "cacheRamMib": 8192,  # not passed: llama-server's own
        "contextCheckpoints": 32,
        "mode": None,  # its own --n-gpu-layers, not llama-server's -ngl auto: memfit's default mode
        "context": 4096,  # -c num_ctx x num_parallel
        "fit": False,  # -c given: the fitter keeps it
    }


def test_ollama_reads_the_variables_its_server_runs_with() -> None:
    env = {
        "OLLAMA_NUM_PARALLEL": "2",
        "OLLAMA_CONTEXT_LENGTH": "'8192'",  # envconfig: quotes and spaces trimmed
        "OLLAMA_KV_CACHE_TYPE": "Q8_0",  # llm/server.go: lower-cased
        "OLLAMA_FLASH_ATTENTION": "false",
    }
    found = settings("ollama", LaunchFacts(ollama_env=env))
    assert (found["streams"], found["context"]) == (2, 16384)  # -c 8192 x 2 -np 2
    assert (found["keyElementBytes"], found["valueElementBytes"]) == (1, 1)  # -ctk q8_0 -ctv q8_0
    assert found["flashAttention"] == "off"
    assert found["ubatchTokens"] == 1024  # server/sched.go: a context above 4096 batches 1024
    sources = resolve_profile(WorkloadRequest(profile="ollama"), LaunchFacts(ollama_env=env), subject()).sources
    assert sources["streams"].source is SettingSource.ENVIRONMENT
    assert "OLLAMA_NUM_PARALLEL=2" in sources["streams"].detail


def test_ollama_launches_an_embedding_model_with_embedding_and_its_batch(tmp_path: Path) -> None:
    """llm/llama_server.go: a file that names a pooling type (the embedding capability) is launched with --embedding
    and -b/-ub min(2048, num_ctx) (routes.go's embedding batch default); the same model without the key is a
    generation model, the batch its context's tier. BERT's trained context 512 caps num_ctx."""
    files = write_models({"bert-embd", "qwen3-f16-last", "qwen3-f16"}, tmp_path)
    found = {}
    for name, path in files.items():
        model = file_subject(path, BY_NAME["haswell"], CACHE)
        env = LaunchFacts(ollama_env={"OLLAMA_CONTEXT_LENGTH": "8192"})
        resolution = resolve_profile(WorkloadRequest(profile="ollama"), env, model)
        found[name] = (resolution.request.embeddings, resolution.request.ubatch_tokens)
        assert resolution.sources["embeddings"].source is SettingSource.PROFILE
    assert found == {"bert-embd": (True, 512), "qwen3-f16-last": (True, 2048), "qwen3-f16": (False, 1024)}


def test_ollama_loads_one_slot_for_embedding_models_and_the_architectures_it_keeps_to_one(tmp_path: Path) -> None:
    """server/sched.go processPending: an embedding model, and the architectures "not safe with num_parallel > 1"
    (qwen35 among them), get one slot whatever OLLAMA_NUM_PARALLEL says; another model gets the variable's."""
    files = write_models({"bert-embd", "qwen35", "qwen3-f16"}, tmp_path)
    env = LaunchFacts(ollama_env={"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_CONTEXT_LENGTH": "512"})
    found = {}
    for name, path in files.items():
        resolution = resolve_profile(
            WorkloadRequest(profile="ollama"), env, file_subject(path, BY_NAME["haswell"], CACHE)
        )
        found[name] = (resolution.request.streams, resolution.context[0] if resolution.context else None)
    assert found == {"bert-embd": (1, 512), "qwen35": (1, 512), "qwen3-f16": (4, 2048)}  # -c num_ctx x num_parallel


def _ollama_prediction(path: Path, n_ctx: int) -> int:
    """llm/llama_server.go PredictServerVRAM, restated from its source: the file's size plus 2 x block_count x the
    least head_count_kv x (embedding_length / the most head_count) x n_ctx x 2 bytes."""
    reader = gguf.GGUFReader(path)
    value = lambda key: int(reader.fields[f"qwen3.{key}"].contents())  # noqa: E731  # scalars in this file
    head_dim = value("embedding_length") // value("attention.head_count")
    return path.stat().st_size + 2 * value("block_count") * value("attention.head_count_kv") * head_dim * n_ctx * 2


def _gpu(free: int, total: int = 24 * GIB) -> GpuMemory:
    return GpuMemory(0, "GPU-0", free, total)


def test_ollama_steps_the_generation_batch_down_where_its_prediction_leaves_too_little(qwen3_path: Path) -> None:
    """server/sched.go automaticGenerationBatch: two slots of qwen3's 32768 give a 65536 context, whose tier is 2048;
    generationBatchFits keeps it only where PredictServerVRAM stays within 80% of the GPUs' free memory less the
    batch's surcharge (2 GiB for 2048, 768 MiB for 1024) and within its headroom (60%, 75%), else 1024, else 512.
    With flash attention off on a CUDA device of at most 8 GiB and a context above 4096, 256."""
    predicted = _ollama_prediction(qwen3_path, 65536)
    model = file_subject(qwen3_path, BY_NAME["haswell"], CACHE)
    env = {"OLLAMA_NUM_PARALLEL": "2", "OLLAMA_CONTEXT_LENGTH": "32768"}

    def batch(gpus: tuple[GpuMemory, ...], **more: str) -> int | None:
        facts = LaunchFacts(gpus=gpus, gpu_total=sum(g.total for g in gpus), ollama_env=env | more)
        return resolve_profile(WorkloadRequest(profile="ollama"), facts, model).request.ubatch_tokens

    roomy = (predicted + 2 * GIB) * 100 // 80 + 1  # 80% of it leaves the 2 GiB surcharge
    middling = (predicted + 1 * GIB) * 100 // 80  # leaves 1 GiB: room for 1024's 768 MiB, not 2048's 2 GiB
    tight = (predicted + 512 * MIB) * 100 // 80  # leaves 512 MiB: room for neither
    assert batch(()) == 2048  # no GPU: no available memory, nothing to step down from
    assert batch((_gpu(roomy),)) == 2048
    assert batch((_gpu(roomy // 2), _gpu(roomy - roomy // 2))) == 2048  # the GPUs' free memory together
    assert batch((_gpu(middling),)) == 1024
    assert batch((_gpu(tight),)) == 512
    small = GpuMemory(0, "GPU-0", 6 * GIB, 8 * GIB)
    assert batch((small,), OLLAMA_FLASH_ATTENTION="0") == 256
    assert batch((_gpu(20 * GIB),), OLLAMA_FLASH_ATTENTION="0") == 512  # a CUDA device above 8 GiB
    assert batch((small,), OLLAMA_FLASH_ATTENTION="1") == 2048  # flash attention on: the tier (room enough)


def test_lm_studio_loads_four_predictions_over_a_4096_context() -> None:
    found = settings("lmStudio")
    assert (found["streams"], found["kvUnified"], found["context"], found["loadMode"]) == (4, True, 4096, "mmap")


def test_custom_is_the_request_alone() -> None:
    request = WorkloadRequest(profile="custom")
    assert resolve_profile(request, NO_FACTS, subject()).request == request
    assert resolved_workload(WorkloadRequest(), subject()).sources[0].source is SettingSource.DEFAULT


def linear(base: int, per_cell: int) -> Callable[[int], int]:  # a projection: base + n_ctx cells of per_cell bytes
    return lambda n_ctx: base + n_ctx * per_cell


def test_the_fitter_keeps_the_trained_context_that_leaves_the_margin() -> None:
    # common/fit.cpp: 1 GiB + 32768 MiB used of 40 GiB leaves 7 GiB >= the 1 GiB margin: no change
    outcome = fitted_context(32768, 4, True, linear(GIB, MIB), 40 * GIB)
    assert (outcome.n_ctx, outcome.fitted) == (32768, True)


def test_the_fitter_interpolates_and_rounds_down_to_256_cells_per_stream() -> None:
    # unified (one stream): max 32768 uses 33 GiB, min 4096 uses 5 GiB; the target is 8 GiB + 100 MiB - 1 GiB, so
    # 4096 + 28672 x (2048 + 100) MiB / 28672 MiB = 6244, rounded down to a multiple of 256: 6144
    outcome = fitted_context(32768, 4, True, linear(GIB, MIB), 8 * GIB + 100 * MIB)
    assert (outcome.n_ctx, outcome.fitted) == (6144, True)
    # split (4 streams): max 131072 and min 16384 cells; target 32 GiB: 16384 + 114688 x (31 - 17) / 112 = 30720,
    # a multiple of 1024
    outcome = fitted_context(32768, 4, False, linear(GIB, MIB), 32 * GIB)
    assert (outcome.n_ctx, outcome.fitted) == (30720, True)


def test_the_fitter_gives_up_at_the_minimum_it_cannot_go_below() -> None:
    # the minimum context 4096 already uses 5 GiB of 5.5 GiB: it sets the minimum and fails
    assert fitted_context(32768, 1, True, linear(GIB, MIB), 5 * GIB + 512 * MIB).n_ctx == 4096
    assert not fitted_context(32768, 1, True, linear(GIB, MIB), 5 * GIB + 512 * MIB).fitted
    # a trained context not above the minimum is kept, and the fit fails
    assert fitted_context(2048, 1, True, linear(GIB, MIB), 2 * GIB).n_ctx == 2048


@pytest.fixture(scope="module")
def qwen3_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_models({"qwen3-f16"}, tmp_path_factory.mktemp("profile-models"))["qwen3-f16"]


@pytest.fixture(scope="module")
def qwen3(qwen3_path: Path) -> Subject:
    """A tiny qwen3 (its compute graph rebuilt node for node), its trained context as written."""
    return file_subject(qwen3_path, BY_NAME["haswell"], ArtifactCache())


def test_llama_server_takes_the_fitters_context(qwen3: Subject) -> None:
    assert qwen3.context_limit is not None
    roomy = resolved_workload(WorkloadRequest(profile="llamaServer"), qwen3, LaunchFacts(host_total=64 * GIB))
    # one unified stream of the trained context, shared by 4 slots, each of which may fill it
    assert roomy.n_ctx == qwen3.context_limit and roomy.streams == 4 and roomy.slot_tokens == qwen3.context_limit
    assert roomy.context_source is ContextSource.LAUNCHER
    fitter = next(s for s in roomy.sources if s.setting == "allocatedTokens")
    assert fitter.source is SettingSource.FITTER and "common/fit.cpp" in fitter.detail


def test_on_a_small_host_the_fitter_reduces_the_context_in_steps_of_256(qwen3: Subject) -> None:
    assert qwen3.context_limit is not None and qwen3.weights.bytes is not None
    # the weights and a 4096 context take about 50 MiB, the trained 32768 about 180 MiB: 1 GiB + 100 MiB is between
    small = resolved_workload(WorkloadRequest(profile="llamaServer"), qwen3, LaunchFacts(host_total=GIB + 100 * MIB))
    assert 4096 <= small.n_ctx < qwen3.context_limit and small.n_ctx % 256 == 0
    fitter = next(s for s in small.sources if s.setting == "allocatedTokens")
    assert f"reduced from {qwen3.context_limit}" in fitter.detail


FIT_RUNS = load(DATA / "results_fit.jsonl")


def test_the_fitter_runs_cover_every_outcome() -> None:
    """Kept at the trained context, reduced by interpolation, and given up at the minimum."""
    outcomes = {(r["fit_status"], r["fit_n_ctx"] % 256 == 0) for r in FIT_RUNS}
    assert (1, True) in outcomes and (0, True) in outcomes
    assert {"deepseek2-mla", "gemma3-swa-f16", "granitehybrid-f16", "mamba2-f16"} <= {r["model"] for r in FIT_RUNS}


@pytest.fixture(scope="module")
def fit_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_models({r["model"] for r in FIT_RUNS}, tmp_path_factory.mktemp("fit-models"))


FIT_MTP_RUNS = load(DATA / "results_fit_mtp.jsonl")


def test_the_fitter_runs_under_mtp_keep_reduce_and_give_up() -> None:
    """results_fit_mtp.jsonl: the fitter beside llama-server's MTP draft context, on every MTP architecture memfit
    derives the draft of, keeping the trained context, reducing it, and giving up at the minimum."""
    outcomes = {(r["fit_status"], r["fit_n_ctx"] == 4096) for r in FIT_MTP_RUNS}
    assert {(0, False), (1, True)} <= outcomes
    assert {r["model"] for r in FIT_MTP_RUNS} == {"qwen35-mtp", "qwen35moe-mtp", "bailingmoe3"}


@pytest.fixture(scope="module")
def fit_mtp_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_models({r["model"] for r in FIT_MTP_RUNS}, tmp_path_factory.mktemp("fit-mtp-models"))


@pytest.mark.parametrize(
    "case",
    [(r, "fit_models") for r in FIT_RUNS] + [(r, "fit_mtp_models") for r in FIT_MTP_RUNS],
    ids=lambda p: run_id(p[0]),
)
def test_the_fitter_chooses_llama_cpps_context(case: tuple[dict, str], request: pytest.FixtureRequest) -> None:
    """common_fit_params with n_ctx 0 on this host without GPUs, the margin leaving `fit_used` bytes: memfit's
    projection of the host buffers and common/fit.cpp's choice give the context llama.cpp chose, and its status;
    under draft-mtp (the probe's mtp_ctx=1) with the NextN layers' weights and the MTP draft context beside."""
    run, models = case
    subject = file_subject(request.getfixturevalue(models)[run["model"]], measured_variant(run), CACHE)
    s = run["settings"]
    request_ = WorkloadRequest(
        streams=s["n_seq"],
        kv_unified=bool(s["unified"]),
        flash_attention=s["fa"],
        multi_token_prediction=bool(s.get("mtp_ctx")),
    )
    workload = resolve_workload(request_, subject.context_limit)
    host_bytes = host_weights(with_mtp(subject, workload))
    assert host_bytes is not None and subject.context_limit is not None
    projection = host_projection(subject, workload, host_bytes)
    assert projection is not None
    total = run["fit_host_total"]
    outcome = fitted_context(
        subject.context_limit, s["n_seq"], bool(s["unified"]), projection, total, total - s["fit_used"]
    )
    assert (outcome.n_ctx, outcome.fitted) == (run["fit_n_ctx"], run["fit_status"] == 0)


def test_with_gpus_the_fitter_is_not_mirrored_and_starts_from_the_trained_context(qwen3: Subject) -> None:
    facts = LaunchFacts(host_total=GIB + 100 * MIB, gpu_total=8 * GIB)  # the host alone would reduce it
    workload = resolved_workload(WorkloadRequest(profile="llamaServer"), qwen3, facts)
    assert workload.n_ctx == qwen3.context_limit
    assert "per device" in next(s for s in workload.sources if s.setting == "allocatedTokens").detail
