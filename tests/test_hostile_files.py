"""Hostile GGUF files degrade their own answer, never the batch, and cost bounded time and memory."""

from __future__ import annotations

import traceback
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfit import wire
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.gguf_writers import Model, llama_gqa, qwen3, write_model
from tools.hostile import LLAMA_CPP_REFUSES, MUTATIONS, base_header, check, examine, mutate

BASE = base_header()
BATCH = "/v1/models/fit/batch"


def test_the_base_header_is_a_readable_model(tmp_path: Path) -> None:
    outcome = examine(bytes(BASE.data), tmp_path / "base.gguf")
    assert outcome.refused == ""


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_every_mutation_kind_is_refused_or_read_safely(mutation: str, tmp_path: Path) -> None:
    refused = [
        examine(mutate(BASE, mutation, pick, value), tmp_path / "m.gguf")
        for pick, value in ((0, 0), (7, 2**64 - 1), (23, 12345), (101, 2**40))
    ]
    for outcome in refused:
        check(outcome)
    if mutation not in ("random_bytes", "non_utf8_key", "wrong_type"):
        assert all(o.refused for o in refused), mutation  # each of these breaks the header outright


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(mutation=st.sampled_from(MUTATIONS), pick=st.integers(0, 10**6), value=st.integers(0, 2**64 - 1))
def test_fuzzed_headers(tmp_path_factory: pytest.TempPathFactory, mutation: str, pick: int, value: int) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz.gguf"
    check(examine(mutate(BASE, mutation, pick, value), path))


def test_hostile_files_leave_the_rest_of_the_batch_alone(tmp_path: Path) -> None:
    write_model(qwen3(), tmp_path / "good.gguf")
    ids = []
    for i, mutation in enumerate(MUTATIONS * 2):
        data = mutate(BASE, mutation, i * 37, i * 2**58 + 11)
        (tmp_path / f"hostile-{i}.gguf").write_bytes(data)
        ids.append(f"hostile-{i}")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.index.refresh()
    requests = [WireFitVerdictRequest(model_id=m) for m in ["good", *ids, "good"]]
    results = wire.fit_batch(service, requests).results
    assert [r.model_id for r in results] == ["good", *ids, "good"]
    assert results[0] == results[-1] and results[0].estimate.weakest_basis == "derivedLayout"
    for result in results[1:-1]:
        weights = result.estimate.parts[0]
        if weights.basis == "unknown":  # refused: unknown parts and a limit, never a number from a broken file
            assert "artifactUnreadable" in result.limits and result.estimate.upper_bound_bytes is None


def test_headers_llama_cpp_refuses_degrade_only_their_answer_in_a_served_batch(tmp_path: Path) -> None:
    """Each file llama.cpp refuses (a zero head_count_kv, a key of the wrong type, two tensors at one offset, an
    embedding width its tensors contradict) is answered artifactUnreadable; the batch's other models as alone."""
    models = tmp_path / "models"
    models.mkdir()
    write_model(qwen3(), models / "good.gguf")
    write_model(llama_gqa(), models / "other.gguf")
    for name, write in LLAMA_CPP_REFUSES.items():
        write(models / f"{name}.gguf")
    ids = ["good", *LLAMA_CPP_REFUSES, "other"]
    service = build_service([Root(str(models), RootKind.PLAIN)], state_dir=str(tmp_path / "state"))
    with LiveServer(service) as server, server.client() as c:
        alone = [c.post(BATCH, json=[{"modelId": m}]).json()["results"][0] for m in ("good", "other")]
        results = c.post(BATCH, json=[{"modelId": m} for m in ids]).json()["results"]
    assert [r["modelId"] for r in results] == ids
    for result, expected in zip((results[0], results[-1]), alone, strict=True):
        assert result["estimate"] == expected["estimate"] and result["limits"] == expected["limits"]
        assert "artifactUnreadable" not in result["limits"]
    for result in results[1:-1]:
        weights = result["estimate"]["parts"][0]
        assert "artifactUnreadable" in result["limits"], result["modelId"]
        assert weights["basis"] == "unknown" and weights["bytes"] is None and result["verdict"] == "unknown"


def test_a_cached_refusal_is_raised_afresh_each_time(tmp_path: Path) -> None:
    """A refusal is cached as plain values: raising it again never grows a traceback or keeps frames alive."""
    from memfit.estimator.errors import EvidenceError
    from memfit.service.artifact_cache import ArtifactCache

    path = tmp_path / "broken.gguf"
    path.write_bytes(mutate(BASE, MUTATIONS[0], 0, 0))
    cache = ArtifactCache()
    depths = []
    for _ in range(50):
        with pytest.raises(EvidenceError) as caught:
            cache.facts([str(path)])
        depths.append(len(traceback.extract_tb(caught.value.__traceback__)))
    assert len(set(depths)) == 1


def _nonsense(key: str, value: object) -> Model:
    model = qwen3()
    model.kv[key] = value
    return model


NONSENSE = {  # each is a header llama.cpp would refuse; ours must degrade that one model, not the batch
    "negative-heads": _nonsense("qwen3.attention.head_count_kv", np.int32(-4)),
    "negative-layers": _nonsense("qwen3.block_count", np.int32(-1)),
    "huge-context": _nonsense("qwen3.context_length", 2**64 - 1),
    "huge-layers": _nonsense("qwen3.block_count", 2**32 - 1),
    "huge-nextn": _nonsense("qwen3.nextn_predict_layers", 2**31),
}


def test_nonsense_hyperparameters_degrade_only_their_model(tmp_path: Path) -> None:
    write_model(qwen3(), tmp_path / "good.gguf")
    untokenized = qwen3()
    untokenized.vocab, untokenized.kv["qwen3.vocab_size"] = 0, 2**40
    write_model(untokenized, tmp_path / "huge-vocab.gguf")
    for name, model in NONSENSE.items():
        write_model(model, tmp_path / f"{name}.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.index.refresh()
    ids = ["good", "huge-vocab", *NONSENSE, "good"]
    results = wire.fit_batch(service, [WireFitVerdictRequest(model_id=m, allocated_tokens=8192) for m in ids]).results
    assert [r.model_id for r in results] == ids and results[0] == results[-1]
    assert results[0].estimate.weakest_basis == "derivedLayout"
    by_id = {r.model_id: r for r in results}
    for name in ("negative-heads", "negative-layers", "huge-layers"):  # no layout from these: unknown, with why
        kv = next(p for p in by_id[name].estimate.parts if p.component == "kvCache")
        assert kv.basis == "unknown" and by_id[name].limits and by_id[name].estimate.upper_bound_bytes is None
    listed = {m.model_id: m for m in wire.model_list(service).models}
    assert listed["huge-context"].context_limit is None and listed["good"].context_limit == 32768
    for result in results:
        assert result.estimate.lower_bound_bytes >= 0


def test_a_token_list_that_is_not_strings_gives_no_vocabulary(tmp_path: Path) -> None:
    """A sparse file can claim a numeric 'token list' of 2^32 entries; it is no vocabulary llama.cpp could load."""
    model = qwen3()
    model.vocab = 0  # no tokenizer: the list below stands in for it
    model.kv["tokenizer.ggml.tokens"] = np.arange(5000, dtype=np.int32)
    write_model(model, tmp_path / "numbers.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.index.refresh()
    result = wire.fit_batch(service, [WireFitVerdictRequest(model_id="numbers")]).results[0]
    parts = {p.component: p for p in result.estimate.parts}
    assert parts["weights"].basis == "measuredArtifact" and parts["kvCache"].basis == "derivedLayout"  # readable
    assert parts["workspace"].basis == "unknown" and result.estimate.upper_bound_bytes is None


def test_a_header_that_keeps_too_much_is_refused_quickly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Short string arrays are kept whole; many of them would cost memory in proportion to the file."""
    from memfit.readers import gguf_header
    from memfit.readers.gguf_header import GGUFError, read_header

    model = qwen3()
    write_model(model, tmp_path / "normal.gguf")
    for i in range(2000):
        model.kv[f"junk.{i}"] = [f"s{j}" for j in range(gguf_header.KEPT_STRINGS)]
    write_model(model, tmp_path / "junk.gguf")
    monkeypatch.setattr(gguf_header, "MAX_KEPT_BYTES", 1 << 20)  # 2000 x 64 strings keep ~1.3 MiB
    read_header(tmp_path / "normal.gguf")
    with pytest.raises(GGUFError, match="keeps over"):
        read_header(tmp_path / "junk.gguf")


def test_files_llama_cpp_cannot_run_as_a_model_are_unreadable_and_not_listed(tmp_path: Path) -> None:
    """A vocabulary-only GGUF (llama.cpp's tokenizer test files: a real model's hyperparameters, no tensors) and a
    LoRA adapter (general.type = adapter) are not answered as models, and the listing leaves them out."""
    vocab_only = llama_gqa()
    vocab_only.tensors.clear()
    write_model(vocab_only, tmp_path / "ggml-vocab-llama.gguf")
    adapter = llama_gqa()
    adapter.kv["general.type"] = "adapter"
    write_model(adapter, tmp_path / "lora-adapter.gguf")
    write_model(llama_gqa(), tmp_path / "model.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.index.refresh()
    requests = [WireFitVerdictRequest(model_id=m) for m in ("ggml-vocab-llama", "lora-adapter", "model")]
    results = {r.model_id: r for r in wire.fit_batch(service, requests).results}
    for name, what in (("ggml-vocab-llama", "no tensors"), ("lora-adapter", "'adapter'")):
        weights = results[name].estimate.parts[0]
        assert weights.basis == "unknown" and what in weights.note
        assert "artifactUnreadable" in results[name].limits and results[name].verdict == "unknown"
    assert results["model"].estimate.parts[0].basis == "measuredArtifact"
    assert [m.model_id for m in wire.model_list(service).models if m.source == "local"] == ["model"]
