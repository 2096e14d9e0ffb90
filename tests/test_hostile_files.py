"""Hostile GGUF files degrade their own answer, never the batch, and cost bounded time and memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfit.estimator.registry import ModelIndex
from memfit.estimator.service import FitService
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.model_roots import Root, RootKind
from tests.gguf_models import qwen3, write_model
from tests.hostile import MUTATIONS, base_header, check, examine, mutate

BASE = base_header()


def test_the_base_header_is_a_readable_model(tmp_path: Path) -> None:
    outcome = examine(bytes(BASE.data), tmp_path / "base.gguf")
    assert outcome.refused == ""


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_every_mutation_kind_is_refused_or_read_safely(mutation: str, tmp_path: Path) -> None:
    refused = [examine(mutate(BASE, mutation, pick, value), tmp_path / "m.gguf")
               for pick, value in ((0, 0), (7, 2**64 - 1), (23, 12345), (101, 2**40))]
    for outcome in refused:
        check(outcome)
    if mutation not in ("random_bytes", "non_utf8_key", "misaligned_offset", "wrong_type"):
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
    service = FitService(ModelIndex([Root(str(tmp_path), RootKind.PLAIN)]))
    service.index.refresh()
    requests = [WireFitVerdictRequest(model_id=m) for m in ["good", *ids, "good"]]
    results = service.fit_batch(requests).results
    assert [r.model_id for r in results] == ["good", *ids, "good"]
    assert results[0] == results[-1] and results[0].estimate.weakest_basis == "derivedLayout"
    for result in results[1:-1]:
        weights = result.estimate.parts[0]
        if weights.basis == "unknown":  # refused: unknown parts and a limit, never a number from a broken file
            assert "artifactUnreadable" in result.limits and result.estimate.upper_bound_bytes is None
