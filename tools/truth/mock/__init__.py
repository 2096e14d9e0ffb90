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

MOCK_DATA = DATA / "mock"


def rows(name: str) -> list[dict[str, Any]]:
    """The recorded runs of one mock truth file."""
    return load(MOCK_DATA / name)


def args_of(row: dict[str, Any]) -> dict[str, str]:
    """A row's probe arguments as key -> value."""
    return dict(item.split("=", 1) for item in row["args"])


def row_id(row: dict[str, Any]) -> str:
    return f"{row['model']}:{row['label']}"


def files() -> list[Path]:
    return sorted(MOCK_DATA.glob("results_mock_*.jsonl"))
