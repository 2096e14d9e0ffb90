"""llama.cpp's placement across GPUs, measured on mock GPU devices: the rows tests/data/mock/ records.

probe_mock.cpp registers mock GPU devices with ggml's backend registry (mock_gpu.cpp: a discrete GPU's buffer
type, a pinned host buffer type, ggml-cuda's alignment and allocation rules, free and total memory) and loads a
model with node-llama-cpp's prebuilt libllama, so llama.cpp's own code assigns layers, picks each weight's buffer
type, places the KV cache and recurrent state, reserves the compute buffers and runs its fitter. build.sh compiles
it; matrix.py names the runs; `python -m tools.truth.mock.regenerate` measures them into tests/data/mock/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.truth import DATA, load
from tools.truth.mock.matrix import CPU_VARIANT

MOCK_DATA = DATA / "mock"


def rows(name: str) -> list[dict[str, Any]]:
    """The recorded runs of one mock truth file."""
    return load(MOCK_DATA / name)


def args_of(row: dict[str, Any]) -> dict[str, str]:
    """A row's probe arguments as key -> value."""
    return dict(item.split("=", 1) for item in row["args"])


def placement_request(row: dict[str, Any]) -> dict[str, Any]:
    """The fit request (wire JSON fields) for a run's workload and placement flags: its context, streams and ubatch
    as llama.cpp resolved them, flash attention as the run asked it (auto resolved per placement, as llama.cpp
    does), its KV types, and its -ngl, --n-cpu-moe, -ts, -sm, -mg and
    --no-kv-offload, on the CPU variant the runs record."""
    a, c, s = args_of(row), row["cparams"], row["settings"]
    element = {"f16": 2, "q8_0": 1, "f32": 4}
    body = {
        "allocatedTokens": c["n_ctx_seq"],
        "streams": c["n_seq_max"],
        "ubatchTokens": c["n_ubatch"],
        "flashAttention": a.get("fa", "auto"),
        "keyElementBytes": element[a.get("type_k", "f16")],
        "valueElementBytes": element[a.get("type_v", "f16")],
        "cpuVariant": CPU_VARIANT,
        "gpuLayers": "all" if s["ngl"] < 0 else s["ngl"],
        "nCpuMoe": int(a.get("n_cpu_moe", 0)),
        "splitMode": s["split"],
        "mainGpu": s["main_gpu"],
        "kvOffload": bool(s["kv_offload"]),
    }
    if s["ts"]:
        body["tensorSplit"] = [float(x) for x in s["ts"].split(",")]
    return body


def row_id(row: dict[str, Any]) -> str:
    return f"{row['model']}:{row['label']}"


def files() -> list[Path]:
    return sorted(MOCK_DATA.glob("results_mock_*.jsonl"))
