"""One sequence's saved state (estimator/seq_state.py) against llama.cpp's own count: after T tokens decoded into a
sequence, the probe's llama_state_seq_get_size (a llama-server prompt-cache entry) and
llama_state_seq_get_size_ext(PARTIAL_ONLY) (a context checkpoint), recorded in tests/data/results_state_seq.jsonl
on plain, MoE, MLA, sliding-window (standard and chunked), hybrid (M-RoPE too) and recurrent tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit.estimator.architectures import derive_layout
from memfit.estimator.kv_cache import GGML_CACHE_TYPES
from memfit.estimator.layout import SwaType
from memfit.estimator.seq_state import seq_state_bytes, visible_cells
from memfit.gguf_constants import Keys
from memfit.service.artifact_cache import ArtifactCache
from tools.accuracy import write_models
from tools.families import more
from tools.truth import DATA, load, run_id

RUNS = [r for r in load(DATA / "results_state_seq.jsonl") if r.get("state_rc") == 0]
CACHE = ArtifactCache()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_models({r["model"] for r in RUNS}, tmp_path_factory.mktemp("state-models"))


def test_the_recording_covers_every_memory_module() -> None:
    """Plain, MLA, sliding (standard and chunked), hybrid and recurrent models, each decoded past a window."""
    models = {r["model"] for r in RUNS}
    for needed in ("llama-gqa-f16", "deepseek2-mla", "gemma3-swa-f16", "llama4-chunked", "granitehybrid-f16"):
        assert needed in models
    assert {"mamba2-f16", "rwkv7", "qwen35"} <= models
    assert any(r["state_seq_partial_bytes"] < r["state_seq_bytes"] for r in RUNS)  # a checkpoint smaller than all


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_prompt_cache_entry_and_checkpoint_equal_llama_cpp(run: dict, model_files: dict[str, Path]) -> None:
    layout = CACHE.facts((str(model_files[run["model"]]),)).layout
    assert layout is not None
    s = run["settings"]
    streams = 1 if run["kv_unified"] else run["n_seq_max"]
    args = (
        layout,
        run["state_tokens"],
        streams,
        bool(run["flash_attn"]),
        GGML_CACHE_TYPES[s["type_k"]],
        GGML_CACHE_TYPES[s["type_v"]],
    )
    assert seq_state_bytes(*args) == run["state_seq_bytes"]
    assert seq_state_bytes(*args, partial=True) == run["state_seq_partial_bytes"]


@pytest.mark.parametrize(
    ("kind", "window", "tokens", "cells"),
    [
        (SwaType.STANDARD, 512, 700, 512),  # the last n_swa positions
        (SwaType.STANDARD, 512, 300, 300),
        (SwaType.CHUNKED, 256, 700, 700 - 512),  # the newest position's chunk: 512..699
        (SwaType.CHUNKED, 256, 512, 256),
        (SwaType.STANDARD, None, 700, 700),  # a full-context layer keeps every cell
    ],
)
def test_the_sliding_mask_keeps_the_cells_llama_cpp_keeps(
    kind: SwaType, window: int | None, tokens: int, cells: int
) -> None:
    """llama_hparams::is_masked_swa for the newest position p1 = tokens - 1, cell by cell."""
    assert visible_cells(kind, window, tokens) == cells


@pytest.mark.parametrize(("sections", "kept"), [(None, False), ((8, 12, 12, 0), True), ((8, 0, 0, 0), False)])
def test_glm4_cells_keep_their_position_only_under_m_rope(sections: tuple[int, ...] | None, kept: bool) -> None:
    """llama_model_rope_type: glm4moe is M-RoPE where rope sections 0 and 1 are set (llama_hparams::use_mrope), and
    then llama_kv_cache::has_cell_ext saves each cell's 2-D position with the sequence."""
    model = more.FAMILY_SET["glm4moe-fused"]()
    metadata = dict(model.kv)
    if sections is not None:
        metadata[Keys.Rope.DIMENSION_SECTIONS.format(arch=model.arch)] = sections
    shapes = {name: ne for name, ne, _ in model.tensors}
    assert derive_layout(metadata, model.arch, shapes, model.vocab).cell_ext is kept
