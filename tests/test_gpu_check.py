"""The GPU check's comparison and report (tools/truth/gpu_check.py), fed with runs recorded on mock GPUs
(tests/data/mock/) instead of a real GPU, and the bundle's fat-binary pruning on a made-up library."""

from __future__ import annotations

import copy
import struct
from pathlib import Path
from typing import Any

import pytest

from tools.gguf_writers import write_model
from tools.truth.gpu_bundle import fatbin_entries, prune
from tools.truth.gpu_check import MODELS, WRITERS, Gpu, _ask_memfit, compare, memfit_request, runs, table
from tools.truth.mock import rows

MIB = 1 << 20


def _row(file: str, model: str, label: str) -> dict[str, Any]:
    return next(r for r in rows(file) if (r["model"], r["label"]) == (model, label))


def _answer(row: dict[str, Any], folder: Path) -> dict[str, Any]:
    """memfit's answer for a recorded run, on a declared cuda GPU of the mock's size (as gpu_check asks it)."""
    write_model(WRITERS[row["model"]](), folder / f"{row['model']}.gguf")
    mock = Gpu(Path("probe"), Path("backends"), {}, {}, None, "MOCK")
    return _ask_memfit(folder, row, mock, (row["mock"]["free"][0], row["mock"]["total"][0]))


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run on one mock GPU with ggml-cuda's rules (every layer offloaded) and memfit's answer for it."""
    row = _row("results_mock_tiny.jsonl", "llama-gqa-f16", "g1_cuda")
    return row, _answer(row, tmp_path_factory.mktemp("placed"))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """llama.cpp's fitter on one mock GPU holding a quarter of gemma3-4b's full offload: it chose -ngl 8."""
    row = _row("results_mock_fit_context_dryrun.jsonl", "gemma3-4b-shape-q4_0", "fit1_25_cuda")
    return row, _answer(row, tmp_path_factory.mktemp("fitted"))


def test_a_recorded_run_memfit_mirrors_compares_clean(placed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    row, answer = placed
    result = compare(row, answer, "MOCK")
    assert result["mismatches"] == [] and result["unknown"] == []
    (gpu,) = result["devices"]
    want = row["per_device"]["MOCK0"]
    assert gpu["name"] == "MOCK0" and gpu["weights"] == [want["model"], want["model"]]
    assert gpu["state"] == [want["context"], want["context"]] and gpu["total"][0] == want["total"]
    assert "nvml" not in result and "fit" not in result


def test_a_byte_off_is_a_mismatch_named_in_the_table(placed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    row, answer = placed
    off = copy.deepcopy(row)
    off["per_device"]["MOCK0"]["model"] += 1
    off["per_device"]["MOCK0"]["compute"] += 1 << 30
    result = compare(off, answer, "MOCK")
    assert [m.split(" ")[:2] for m in result["mismatches"]] == [["MOCK0:", "weights"], ["MOCK0:", "compute"]]
    text = table(result)
    assert text.splitlines()[0] == "llama-gqa-f16 g1_cuda: MISMATCH"
    assert any(line.split()[0] == "MOCK0" for line in text.splitlines()[2:3]) and "  ! MOCK0: weights" in text


def test_a_failed_probe_is_a_mismatch() -> None:
    result = compare({"model": "m", "label": "load", "error": "context init failed"}, {"devices": []})
    assert result["mismatches"] == ["probe: context init failed"]


def test_nvml_used_memory_beyond_the_buffers_is_reported_and_held_to_the_ceiling(
    placed: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """The placed load's NVML delta against llama.cpp's buffers on the GPU (model + context + compute): what is
    beyond them is the CUDA context, cuBLAS's workspace and the pool; above memfit's ceiling it is a mismatch."""
    row, answer = placed
    buffers = row["per_device"]["MOCK0"]["total"]
    base = 3 << 30
    within = row | {"nvml": {"used_before": base, "used_held": base + buffers, "process_used": None}}
    result = compare(within, answer, "MOCK")
    assert result["nvml"]["buffers"] == buffers and result["nvml"]["beyond_buffers"] == 0
    assert result["mismatches"] == []
    context = 500 * MIB  # about what a CUDA context takes on an H100
    beyond = row | {"nvml": {"used_before": base, "used_held": base + buffers + context, "process_used": None}}
    result = compare(beyond, answer, "MOCK")
    assert result["nvml"]["beyond_buffers"] == context
    assert len(result["mismatches"]) == 1 and "above memfit's ceiling" in result["mismatches"][0]
    assert "NVML used +" in table(result)


def test_the_fitters_choice_is_compared(fitted: tuple[dict[str, Any], dict[str, Any]]) -> None:
    row, answer = fitted
    assert memfit_request(row)["mode"] == "cpuOffload"
    result = compare(row, answer, "MOCK")
    assert result["fit"]["llama"] == {"gpuLayers": 8, "tensorSplit": [], "tensorOverrides": []}
    assert result["fit"]["memfit"] == result["fit"]["llama"] and result["mismatches"] == []
    other = copy.deepcopy(row)
    other["fit"]["n_gpu_layers"] = 9
    assert [m.split(":")[0] for m in compare(other, answer, "MOCK")["mismatches"]] == ["fitter"]


def test_each_model_runs_across_the_output_layers_edge() -> None:
    """-ngl at half the layers, n_layer (the output on the CPU) and n_layer + 1; --n-cpu-moe for the MoE models;
    the fitter twice; one placed load, the only run that allocates."""
    for kind, (real, tiny) in MODELS.items():
        for name in (real, tiny):
            model = WRITERS[name]()
            nl = int(model.kv[f"{model.arch}.block_count"])
            plan = {r.label: r for r in runs(model, mock=name == tiny)}
            assert [plan[x].args["ngl"] for x in ("ngl_half", "ngl_nl", "ngl_all")] == [
                str(nl // 2),
                str(nl),
                str(nl + 1),
            ]
            if kind in ("moe", "dense", "swa"):  # the hybrid shape (granite-4.0-h-tiny) routes experts too
                assert ("ncmoe_half" in plan) is (kind == "moe")
            assert [r.label for r in plan.values() if r.args["no_alloc"] == "0"] == ["load"] and plan["load"].held
            assert ("decode" in plan["load"].args) is (name == real)
            assert plan["fit_60"].budget_share == 0.6 and plan["kv_off"].args["kv_offload"] == "0"


def _elf(payloads: list[tuple[int, int, bytes]]) -> bytes:
    """A made-up ELF64 with a .nv_fatbin section: one container of (kind, arch, payload) entries."""
    entries = b"".join(
        struct.pack("<HHIQ", kind, 0x101, 64, len(p)) + bytes(12) + struct.pack("<I", arch) + bytes(32) + p
        for kind, arch, p in payloads
    )
    fatbin = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entries)) + entries
    names = b"\0.shstrtab\0.nv_fatbin\0"
    body_off = 64
    names_off = body_off + len(fatbin)
    shoff = names_off + len(names)
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 1)
    sections = bytes(64)
    sections += struct.pack("<IIQQQQ", 1, 3, 0, 0, names_off, len(names)) + bytes(24)
    sections += struct.pack("<IIQQQQ", 11, 1, 0, 0, body_off, len(fatbin)) + bytes(24)
    return bytes(header) + fatbin + names + sections


def test_the_bundle_keeps_only_what_an_sm_90_gpu_loads() -> None:
    """Of the fat binary, the compute_90 PTX stays byte for byte; the other entries' payloads are zeroed, their
    headers and the library's size kept."""
    elf = _elf([(2, 86, b"sm86" * 8), (1, 90, b"ptx90!" * 5), (1, 80, b"ptx80" * 3)])
    assert [(k, a, n) for k, a, _, n in fatbin_entries(elf)] == [("elf", 86, 32), ("ptx", 90, 30), ("ptx", 80, 15)]
    pruned = prune(elf)
    assert len(pruned) == len(elf)
    kept = {(k, a): pruned[s : s + n] for k, a, s, n in fatbin_entries(pruned)}
    assert kept == {("elf", 86): bytes(32), ("ptx", 90): b"ptx90!" * 5, ("ptx", 80): bytes(15)}
