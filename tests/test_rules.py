"""The arithmetic and the product rules, as pure functions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from memfit.estimator.budget import BudgetSetting, budget_from
from memfit.estimator.context import context_geometry, llama_geometry
from memfit.estimator.estimate import Part, bounds
from memfit.estimator.kv_cache import cache_type_note, kv_cache_bytes, layer_cells, row_bytes
from memfit.estimator.layout import AttentionLayer
from memfit.estimator.verdict import verdict
from memfit.estimator.vocabulary import Basis, BudgetBasis, Component, ContextSource, Refusal, Verdict
from memfit.estimator.workload import WorkloadRequest, exceeds_limit, input_refusal, resolve_workload
from memfit.readers.host_memory import HostMemory

# --- context geometry (llama.cpp pads to 256 cells, per stream when not unified) --------------------


@pytest.mark.parametrize("n_ctx, n_seq, n_ctx_seq", [(512, 1, 512), (512, 4, 256), (1000, 1, 1024), (1000, 3, 512),
                                                     (8192, 4, 2048), (1, 1, 256), (257, 1, 512)])
def test_llama_geometry_pads_per_stream(n_ctx: int, n_seq: int, n_ctx_seq: int) -> None:
    assert llama_geometry(n_ctx, n_seq).n_ctx_seq == n_ctx_seq


def test_workload_tokens_are_per_stream() -> None:
    g = context_geometry(4096, 4)
    assert (g.n_ctx_seq, g.n_stream, g.n_seq, g.n_ubatch) == (4096, 4, 4, 512)


# --- KV cache ----------------------------------------------------------------------------------------


def test_row_bytes_by_cache_type() -> None:
    assert row_bytes(2, 1024) == 2048
    assert row_bytes(4, 1024) == 4096
    assert row_bytes(1, 1024) == 1024 // 32 * 34  # q8_0: 32 int8 values + an f16 scale per block
    assert row_bytes(3, 1024) == 3072  # not a llama.cpp type: multiplied plainly


def test_cache_type_note_names_types_and_flags_others() -> None:
    assert cache_type_note(2, 1) == "K f16, V q8_0"
    assert "not a llama.cpp cache type" in cache_type_note(3, 2)


def test_sliding_window_cells_are_capped_by_window_plus_ubatch() -> None:
    g = context_geometry(32768, 1)
    assert layer_cells(AttentionLayer(256, 256), g) == 32768
    assert layer_cells(AttentionLayer(256, 256, window=1024), g) == 1536  # pad(1024 + 512, 256)
    assert layer_cells(AttentionLayer(256, 256, window=4096), context_geometry(1024, 1)) == 1024


def test_kv_bytes_sum_layers_and_streams() -> None:
    layers = [AttentionLayer(1024, 1024), AttentionLayer(512, 256, window=100)]
    k, v = kv_cache_bytes(layers, context_geometry(2048, 2), 2, 1)
    assert k == 2 * (2048 * 2048 + 768 * 1024)
    assert v == 2 * (2048 * 1088 + 768 * 272)


# --- workload, refusals ---------------------------------------------------------------------------


def test_documented_defaults_and_cap() -> None:
    w = resolve_workload(WorkloadRequest(), context_limit=2048)
    assert (w.allocated_tokens, w.context_source, w.streams, w.key_element_bytes, w.value_element_bytes, w.mode) == \
        (2048, ContextSource.DOCUMENTED_DEFAULT, 1, 2, 2, "fullGpu")
    assert resolve_workload(WorkloadRequest(), context_limit=None).allocated_tokens == 4096


def test_requested_context_is_never_capped() -> None:
    w = resolve_workload(WorkloadRequest(allocated_tokens=9000), context_limit=2048)
    assert w.allocated_tokens == 9000 and w.context_source is ContextSource.REQUESTED
    assert exceeds_limit(w, 2048)


@pytest.mark.parametrize("tokens, streams, refusal", [
    (0, 1, Refusal.NON_POSITIVE_CONTEXT),
    (-5, 0, Refusal.NON_POSITIVE_CONTEXT),  # first match wins
    (10, 0, Refusal.NON_POSITIVE_STREAMS),
    (2**63, 1, Refusal.NON_FINITE_INPUT),
    (10, 1, None),
])
def test_input_refusals_in_order(tokens: int, streams: int, refusal: Refusal | None) -> None:
    assert input_refusal(resolve_workload(WorkloadRequest(tokens, streams), None)) == refusal


def test_unknown_mode_is_kept() -> None:
    assert resolve_workload(WorkloadRequest(mode="npuOnly"), None).mode == "npuOnly"


# --- bounds and verdict ---------------------------------------------------------------------------


def _parts(*specs: tuple[Basis, int | None, int]) -> list[Part]:
    return [Part(Component.WEIGHTS, b, basis, "", slack) for basis, b, slack in specs]


def test_bounds_sum_floors_and_slacks() -> None:
    b = bounds(_parts((Basis.MEASURED_ARTIFACT, 100, 5), (Basis.DERIVED_LAYOUT, 50, 0), (Basis.NOT_APPLICABLE, 0, 0)))
    assert (b.lower, b.upper, b.weakest, b.missing) == (150, 155, Basis.DERIVED_LAYOUT, ())


def test_unknown_part_nulls_the_ceiling_and_is_missing() -> None:
    parts = _parts((Basis.MEASURED_ARTIFACT, 100, 0)) + [Part.unknown(Component.WORKSPACE, "")]
    b = bounds(parts)
    assert (b.lower, b.upper, b.weakest, b.missing) == (100, None, Basis.UNKNOWN, ("workspace",))


def test_not_applicable_does_not_weaken() -> None:
    assert bounds(_parts((Basis.PARAMETER_PROXY, 1, 0), (Basis.NOT_APPLICABLE, 0, 0))).weakest is Basis.PARAMETER_PROXY


@pytest.mark.parametrize("lower, upper, budget, expected", [
    (100, 100, 110, Verdict.GOOD),  # 100 x 1.1 <= 110
    (100, 100, 109, Verdict.TIGHT),
    (100, 100, 100, Verdict.TIGHT),
    (100, 120, 110, Verdict.UNKNOWN),  # floor fits, ceiling does not
    (111, 120, 110, Verdict.OVERSIZE),
    (111, None, 110, Verdict.OVERSIZE),  # the floor alone decides oversize
    (100, None, 1000, Verdict.UNKNOWN),
    (100, 100, None, Verdict.UNKNOWN),
])
def test_verdict_rules(lower: int, upper: int | None, budget: int | None, expected: Verdict) -> None:
    b = bounds([Part(Component.WEIGHTS, lower, Basis.MEASURED_ARTIFACT, "", 0)])
    b = type(b)(b.lower, upper, b.weakest, b.missing)
    assert verdict(b, budget, Fraction(1, 10), refused=False) is expected


def test_refused_verdict_is_unknown() -> None:
    b = bounds([Part(Component.WEIGHTS, 1, Basis.MEASURED_ARTIFACT, "")])
    assert verdict(b, 10**9, Fraction(1, 10), refused=True) is Verdict.UNKNOWN


def test_budget_basis_fallbacks() -> None:
    assert budget_from(HostMemory(5, 10), BudgetSetting.AVAILABLE, 0).basis is BudgetBasis.HOST_AVAILABLE
    assert budget_from(HostMemory(None, 10), BudgetSetting.AVAILABLE, 0).bytes == 10
    assert budget_from(HostMemory(5, 10), BudgetSetting.TOTAL, None).basis is BudgetBasis.HOST_TOTAL
    unknown = budget_from(HostMemory(None, None), BudgetSetting.AVAILABLE, None)
    assert (unknown.basis, unknown.bytes) == (BudgetBasis.UNKNOWN, None)
