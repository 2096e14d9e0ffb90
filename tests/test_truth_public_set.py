"""memfit's numbers against what real llama.cpp allocated for the public ground-truth set.

Each run of `shared/groundtruth` (tests/data/*.jsonl) names a model of tests/gguf_models.py and the
llama.cpp settings it was loaded with; memfit must give the same K, V, R and S bytes, and weights
whose floor and ceiling hold what llama.cpp allocated.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit.estimator.artifact_cache import ArtifactCache
from memfit.estimator.context import llama_geometry
from memfit.estimator.kv_cache import kv_cache_bytes
from memfit.estimator.recurrent_state import recurrent_state_bytes
from tests.gguf_models import PUBLIC_SET, SHAPE_SET, write_model
from tests.truth import ELEMENT_BYTES, records, run_id

ALL_RUNS = records("results_probe.jsonl") + records("results_scale_dryrun.jsonl") + records("results_scale_real.jsonl")
DERIVED = {"llama-gqa-f16", "llama-gqa-q8_0", "llama-gqa-q4_0", "qwen3-f16", "qwen3moe-f16", "llama31-8b-shape-q4_0",
           "qwen3-30b-a3b-shape-q4_0"}
RUNS = [r for r in ALL_RUNS if r["model"] in DERIVED]
BUILDERS = {**PUBLIC_SET, **SHAPE_SET}
CACHE = ArtifactCache()


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("truth-models")
    paths = {}
    for name in {r["model"] for r in ALL_RUNS}:
        paths[name] = directory / f"{name}.gguf"
        write_model(BUILDERS[name](), paths[name])
    return paths


@pytest.mark.parametrize("run", RUNS, ids=run_id)
def test_kv_and_recurrent_state_equal_llama_cpp(run: dict, model_files: dict[str, Path]) -> None:
    facts = CACHE.facts((str(model_files[run["model"]]),))
    assert facts.layout is not None, facts.layout_error
    s = run["settings"]
    geometry = llama_geometry(s["n_ctx"], s["n_seq"], run["n_ubatch"])
    assert geometry.n_ctx_seq == run["n_ctx_seq"]
    k, v = kv_cache_bytes(facts.layout.attention, geometry, ELEMENT_BYTES[s["type_k"]], ELEMENT_BYTES[s["type_v"]])
    r, state = recurrent_state_bytes(facts.layout.recurrent, geometry)
    assert (k, v, r, state) == (run["kv_k_bytes"], run["kv_v_bytes"], run["rs_r_bytes"], run["rs_s_bytes"])


@pytest.mark.parametrize("run", ALL_RUNS, ids=run_id)
def test_weights_bounds_hold_llama_cpp(run: dict, model_files: dict[str, Path]) -> None:
    facts = CACHE.facts((str(model_files[run["model"]]),))
    measured = run["weights_bytes"]
    assert facts.weights_bytes <= measured <= facts.weights_bytes + facts.weights_slack
