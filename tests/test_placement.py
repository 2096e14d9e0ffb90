"""memfit's placement mirror (estimator/placement.py) against llama.cpp's own placement on mock GPUs.

Every run in tests/data/mock/ (tools/truth/mock/: llama.cpp loading a model across mock GPU devices with ggml-cuda's
alignment and allocation rules) names a model tools/ writes and the placement flags it was loaded with; memfit's
layer and output devices, each tensor's buffer type, the weights, KV cache and recurrent state per buffer type and
per device, and the output buffer must equal llama.cpp's, to the byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from memfit.estimator.artifact import HeaderSummary, artifact_facts, summarize, weights_on
from memfit.estimator.context import llama_geometry
from memfit.estimator.cpu_variant import BY_NAME
from memfit.estimator.devices import (
    CPU,
    HOST,
    AllocRule,
    Device,
    DeviceKind,
    cuda_alloc_size,
    mock_gpus,
)
from memfit.estimator.kv_cache import GGML_CACHE_TYPES
from memfit.estimator.placement import (
    Memory,
    Placement,
    PlacementUnsupported,
    SplitMode,
    Weight,
    layer_devices,
    matmul,
    model_devices,
    model_tensors,
    output_buffer,
    overrides,
    place,
    split_points,
    tensor_layer,
)
from memfit.gguf_constants import GGMLQuantizationType as QT
from memfit.readers.gguf_header import read_header
from tools.families import recurrent
from tools.gguf_writers import Model, write_model
from tools.truth import DATA, load
from tools.truth.mock import MOCK_DATA, args_of, files, row_id, rows
from tools.truth.mock.matrix import CPU_VARIANT, LABEL, MOCK_FILES, mock_writers
from tools.truth.mock.mirror import compare, mirror, written_models
from tools.truth.mock.regenerate import differences

RUNS = [r for path in files() for r in rows(path.name)]
WRITERS = mock_writers()
HARNESS = Path(__file__).resolve().parent.parent / "tools" / "truth" / "mock"
GIB = 1 << 30


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[HeaderSummary]]:
    """Every model the mock runs name, written once and read as memfit reads it."""
    return written_models(tmp_path_factory.mktemp("mock-models"), (r["model"] for r in RUNS))


@pytest.mark.parametrize("run", RUNS, ids=row_id)
def test_placement_equals_llama_cpp(run: dict, summaries: dict[str, list[HeaderSummary]]) -> None:
    assert compare(run, summaries[run["model"]]) == []


def test_the_runs_cover_the_placement_flags() -> None:
    """The recorded runs: no failure, every file's matrix, and the settings the issue names."""
    assert RUNS and all("error" not in r for r in RUNS)
    labels = {r["label"] for r in RUNS}
    wanted = {"g1_ngl0", "g1_nl", "g1_nl+1", "g1_all", "g4_4321", "g2_31", "g2_none_main1", "g1_ot_layer0_cpu"}
    wanted |= {"g2_ot_exps_mock1", "g1_ncmoe_half", "g1_kv0", "g1_nohost", "g1_half_mmap", "g1_cuda", "fit2"}
    assert wanted <= labels
    buffers = {b for r in RUNS for b in r["model_buffers"]}
    assert {"CPU", "CPU_Mapped", "CPU_REPACK", "MOCK_Host", "MOCK0", "MOCK3"} <= buffers
    descs = {r["model_desc"].split()[0] for r in RUNS}
    assert {"llama", "gemma3", "qwen3moe", "mamba2", "granitehybrid", "deepseek2", "gpt-oss", "lfm2"} <= descs
    assert {r["runtime_label"] for r in RUNS} == {LABEL}
    assert len(RUNS) > 800


@pytest.mark.parametrize("name", sorted(MOCK_FILES))
def test_the_matrices_are_the_recorded_runs(name: str) -> None:
    """Regenerating a file measures exactly the runs it records (a fitter's free memory from its full offload)."""
    spec, recorded = MOCK_FILES[name], rows(name)
    want = set()
    for model_name, writer in spec.models.items():
        runs = spec.runs(writer())
        want |= {(model_name, label, json.dumps(args)) for label, args in runs}
        if spec.fits is not None:
            full = next(r for r in recorded if r["model"] == model_name and r["label"] == "g1_all")
            moe = any("_exps." in t[0] for t in writer().tensors)
            fits = spec.fits(full["per_device"]["MOCK0"]["total"], moe)
            want |= {(model_name, label, json.dumps(spec.base | args)) for label, args in fits}
    got = {(r["model"], r["label"], json.dumps(args_of(r))) for r in recorded}
    assert got == want


def test_a_changed_row_is_a_difference(summaries: dict[str, list[HeaderSummary]]) -> None:
    run = next(r for r in RUNS if r["model"] == "llama-gqa-q4_0" and r["label"] == "g2_11_cuda")
    changed = json.loads(json.dumps(run))
    changed["model_buffers"]["MOCK1"] += 128
    changed["layer_dev"][0] = "MOCK1"
    found = compare(changed, summaries["llama-gqa-q4_0"])
    assert [line.split(":")[0] for line in found] == ["layer_dev", "model_buffers"]
    assert sorted(differences([run], [changed])) == [
        f"{row_id(run)}: layer_dev {run['layer_dev']!r} != {changed['layer_dev']!r}",
        f"{row_id(run)}: model_buffers {run['model_buffers']!r} != {changed['model_buffers']!r}",
    ]


def test_the_cpu_only_runs_are_memfits_weights(summaries: dict[str, list[HeaderSummary]]) -> None:
    """Without a GPU the placement's weights are the estimate's (artifact.weights_on) on the same CPU variant."""
    for run in (r for r in RUNS if r["label"] == "g0"):
        facts = artifact_facts(summaries[run["model"]], run["model"])
        floor, slack, _ = weights_on(facts, (BY_NAME[CPU_VARIANT],))
        result = mirror(run, summaries[run["model"]])
        assert slack == 0 and sum(result.by_buffer_type("weights").values()) == floor, run["model"]
        assert set(result.by_pool()) <= {HOST, "CPU_REPACK"}


def test_the_harness_names_no_machine_path() -> None:
    for path in HARNESS.iterdir():
        if path.suffix in (".py", ".sh", ".cpp", ".h"):
            assert not re.search(r"/(work|home|tmp|root|Users)/", path.read_text()), path.name
    assert MOCK_DATA.name == "mock" and MOCK_DATA.parent.name == "data"


# --- the rules one by one -----------------------------------------------------------------------------------------


def _gpus(n: int, free: tuple[int, ...] = (24 * GIB,)) -> tuple[Device, ...]:
    return mock_gpus(n, total=(24 * GIB,), free=free)


def test_the_layer_split_is_llama_cpps_float_arithmetic() -> None:
    # 33 layers (32 and the output) over -ts 3,1: layer il goes where il / 33 first falls below a split point
    two = _gpus(2)
    assert split_points(two, (3, 1)) == [0.75, 1.0]
    devices = layer_devices(32, None, two, split_points(two, (3, 1)))
    assert [d.name for d in devices].count("MOCK0") == 25  # il / 33 < 0.75 for il <= 24
    # -ngl 0 keeps everything on the CPU; -ngl 1 offloads only the output layer; -ngl n_layer keeps layer 0 home
    assert layer_devices(4, 0, two, [0.5, 1.0]) == [None] * 5
    assert layer_devices(4, 1, two, [0.5, 1.0]) == [None] * 4 + [two[0]]
    assert [d is None for d in layer_devices(4, 4, two, [0.5, 1.0])] == [True, False, False, False, False]
    # without -ts: by free memory; an all-zero -ts is no -ts
    uneven = _gpus(2, (3 * GIB, 1 * GIB))
    assert split_points(uneven, ()) == split_points(uneven, (0, 0)) == [0.75, 1.0]
    # -ts 0,1: the first device takes nothing
    assert {d.name for d in layer_devices(4, None, two, split_points(two, (0, 1)))} == {"MOCK1"}


def test_split_mode_none_keeps_the_main_gpu() -> None:
    four = _gpus(4)
    assert model_devices(four, Placement(split_mode=SplitMode.NONE, main_gpu=2)) == (four[2],)
    assert model_devices(four, Placement(split_mode=SplitMode.NONE, main_gpu=-1)) == ()
    with pytest.raises(PlacementUnsupported):
        model_devices(four, Placement(split_mode=SplitMode.ROW))
    with pytest.raises(PlacementUnsupported):
        model_devices(four, Placement(split_mode=SplitMode.NONE, main_gpu=4))
    igpu = Device("Vulkan0", "Vulkan", GIB, GIB, kind=DeviceKind.IGPU)
    assert model_devices((igpu, *four[:1]), Placement()) == four[:1]  # an integrated GPU only without a discrete one
    assert model_devices((igpu,), Placement()) == (igpu,)


def test_ggml_cuda_pads_quantized_rows() -> None:
    # ggml_backend_cuda_buffer_type_get_alloc_size: one row of 512 - ne0 % 512 elements more, quantized types only
    assert cuda_alloc_size(256 * 18 // 32 * 10, QT.Q4_0, 256) == 256 * 18 // 32 * 10 + 256 // 32 * 18
    assert cuda_alloc_size(4096 * 18 // 32, QT.Q4_0, 4096) == 4096 * 18 // 32
    assert cuda_alloc_size(256 * 2 * 10, QT.F16, 256) == 256 * 2 * 10


def test_the_launchers_expert_flags_are_llama_cpps_patterns() -> None:
    request = Placement(
        overrides=(("blk\\.3\\.=MOCK1".split("=")[0], "MOCK1"),), cpu_moe=True, n_cpu_moe=2, n_cpu_ffn=1
    )
    assert overrides(request) == [
        ("blk\\.3\\.", "MOCK1"),
        ("\\.ffn_(up|down|gate|gate_up)_(ch|)exps", CPU),
        ("blk\\.0\\.ffn_(up|down|gate|gate_up)_(ch|)exps", CPU),
        ("blk\\.1\\.ffn_(up|down|gate|gate_up)_(ch|)exps", CPU),
        ("blk\\.0\\.ffn_(up|down|gate)\\.", CPU),
    ]


def test_tensors_find_their_layer() -> None:
    assert tensor_layer("llama", "blk.7.attn_q.weight", 32) == (7, ())
    assert tensor_layer("llama", "token_embd.weight", 32) == (None, ())
    assert tensor_layer("llama", "output.weight", 32) == (32, ())
    assert tensor_layer("llama", "rope_freqs.weight", 3) == (0, (0, 1, 2))
    assert tensor_layer("bert", "token_embd_norm.weight", 12) == (0, ())
    assert tensor_layer("lfm2", "token_embd_norm.weight", 12) == (12, ())  # LLM_TENSOR_OUTPUT_NORM_LFM2


def test_only_matrices_reach_the_extra_cpu_buffers() -> None:
    def w(name: str, ne: tuple[int, int, int, int]) -> Weight:
        return Weight(name, QT.Q4_0, ne, 0)

    assert matmul(w("blk.0.attn_q.weight", (256, 256, 1, 1))) == "MUL_MAT"
    assert matmul(w("blk.0.ffn_up_exps.weight", (256, 64, 8, 1))) == "MUL_MAT_ID"
    assert matmul(w("token_embd.weight", (256, 1000, 1, 1))) is None  # GET_ROWS
    assert matmul(w("token_embd.weight", (256, 1000, 1, 1)), as_output=True) == "MUL_MAT"  # the tied output
    assert matmul(w("blk.0.attn_norm.weight", (256, 1, 1, 1))) is None
    assert matmul(w("blk.0.ffn_up_exps.bias", (64, 8, 1, 1))) is None


def test_the_output_buffer_is_in_the_output_devices_pinned_memory() -> None:
    gpu = _gpus(1)[0]
    assert output_buffer(1000, 2, gpu) == ("MOCK_Host", 8000)
    assert output_buffer(1000, 2, None) == (CPU, 8000)
    unpinned = mock_gpus(1, total=(GIB,), host_buffer=False)[0]
    assert output_buffer(1000, 1, unpinned) == (CPU, 4000)


def _written(folder: Path, name: str, writer: Callable[[], Model]) -> list[HeaderSummary]:
    path = folder / f"{name}.gguf"
    write_model(writer(), path)
    with open(path, "rb") as f:
        return [summarize(read_header(f))]


def _tiny(folder: Path) -> list[HeaderSummary]:
    return _written(folder, "qwen3moe-f16", WRITERS["qwen3moe-f16"])


def test_a_cuda_placement_by_hand(tmp_path: Path) -> None:
    """qwen3moe (4 layers, F16) on two CUDA-like GPUs split 1:1: the five layers (the output counted) at 0, 1/5,
    2/5 of the way go to the first, 3/5 and 4/5 to the second; the first layer's experts in the pinned host buffer,
    the KV of each layer on its device."""
    summary = _tiny(tmp_path)
    facts = artifact_facts(summary, "qwen3moe-f16")
    assert facts.layout is not None and facts.n_vocab is not None
    model = model_tensors(summary, facts.n_vocab)
    memory = Memory(facts.layout, llama_geometry(4096, 1), GGML_CACHE_TYPES["f16"], GGML_CACHE_TYPES["f16"])
    gpus = tuple(Device(f"CUDA{i}", "CUDA", 20 * GIB, 24 * GIB, alloc=AllocRule.CUDA) for i in range(2))
    result = place(model, memory, gpus, Placement(tensor_split=(1, 1), n_cpu_moe=1), BY_NAME["haswell"])
    assert result.layer_devices == ("CUDA0", "CUDA0", "CUDA0", "CUDA1") and result.output_device == "CUDA1"
    exps = {t.name: t.buffer_types for t in result.tensors if "_exps" in t.name and t.layer == 0}
    assert set(exps.values()) == {("CUDA_Host",)}
    assert result.output_buffer_type == "CUDA_Host"
    pools = result.by_pool()
    assert set(pools) == {"CUDA0", "CUDA1", HOST}
    assert pools["CUDA0"].kv == 3 * pools["CUDA1"].kv == 3 * 2 * 4096 * 128 * 2  # K and V per layer, F16
    home = [w for w in model.weights if w.name == "token_embd.weight" or re.match(r"blk\.0\.ffn_.*_exps", w.name)]
    assert len(home) == 4 and pools[HOST].weights == sum(-(-w.nbytes // 32) * 32 for w in home)


def test_an_override_to_an_unknown_buffer_type_is_refused(tmp_path: Path) -> None:
    summary = _tiny(tmp_path)
    facts = artifact_facts(summary, "qwen3moe-f16")
    assert facts.layout is not None and facts.n_vocab is not None
    memory = Memory(facts.layout, llama_geometry(4096, 1), GGML_CACHE_TYPES["f16"], GGML_CACHE_TYPES["f16"])
    with pytest.raises(PlacementUnsupported, match="CUDA7"):
        place(
            model_tensors(summary, facts.n_vocab),
            memory,
            _gpus(1),
            Placement(overrides=(("exps", "CUDA7"),)),
            BY_NAME["haswell"],
        )


def test_rollback_snapshots_widen_each_layers_state_where_it_is_placed(tmp_path: Path) -> None:
    """llama_memory_recurrent's R and S rows are mem_size * (1 + n_rs_seq): qwen35's recurrent layers on two GPUs
    hold llama.cpp's recorded state of 2 sequences with 2 rollback snapshots (results_rec.jsonl), split by layer."""
    (run,) = (
        r
        for r in load(DATA / "results_rec.jsonl")
        if r["model"] == "qwen35" and r["settings"].get("n_rs_seq") == 2 and r["settings"]["n_seq"] == 2
    )
    summary = _written(tmp_path, "qwen35", recurrent.FAMILY_SET["qwen35"])
    facts = artifact_facts(summary, "qwen35")
    assert facts.layout is not None and facts.n_vocab is not None
    geometry = llama_geometry(run["settings"]["n_ctx"], 2, rs_snapshots=2)
    memory = Memory(facts.layout, geometry, GGML_CACHE_TYPES["f16"], GGML_CACHE_TYPES["f16"])
    result = place(model_tensors(summary, facts.n_vocab), memory, _gpus(2), Placement(), BY_NAME["haswell"])
    pools = result.by_pool()
    assert pools["MOCK0"].recurrent > 0 and pools["MOCK1"].recurrent > 0
    assert sum(p.recurrent for p in pools.values()) == run["rs_bytes"]


def test_a_headless_nextn_layer_is_placed_as_a_trunk_layer(tmp_path: Path) -> None:
    """deepseek4's loader takes a NextN layer without its nextn.eh_proj as a trunk layer (load_arch_hparams sets
    n_layer_nextn 0): the writer's fifth block is loaded as the trunk's (every tensor of the file placed, none left
    for load_mtp), its tensors on its layer's device (the second of -ts 1,1) for the scheduler to find."""
    summary = _written(tmp_path, "headless", recurrent.DEEPSEEK4_HEADLESS_MODELS["deepseek4-mtp-headless"])
    facts = artifact_facts(summary, "deepseek4-mtp-headless")
    assert facts.layout is not None and facts.n_vocab is not None
    model = model_tensors(summary, facts.n_vocab)
    assert (model.n_layer, model.n_nextn, model.mtp_weights) == (5, 0, ())
    assert {w.name for w in model.weights} == {t[0] for t in summary[0].tensors}
    memory = Memory(
        facts.layout, llama_geometry(4096, 1, k_type="f16"), GGML_CACHE_TYPES["f16"], GGML_CACHE_TYPES["f16"]
    )
    result = place(model, memory, _gpus(2), Placement(tensor_split=(1, 1)), BY_NAME["haswell"])
    assert result.layer_devices[4] == "MOCK1"
    assert {t.buffer_types for t in result.tensors if t.layer == 4} == {("MOCK1",)}
