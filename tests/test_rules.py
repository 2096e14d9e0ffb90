"""The arithmetic and the product rules, as pure functions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from memfit.estimator.bounds import Part, bounds
from memfit.estimator.budget import BudgetSetting, budget_from
from memfit.estimator.context import context_geometry, llama_geometry
from memfit.estimator.kv_cache import GGML_CACHE_TYPES, cache_type, kv_cache_bytes, layer_cells
from memfit.estimator.layout import AttentionLayer, KvCache, Layout
from memfit.estimator.machine import HostMemory
from memfit.estimator.verdict import verdict
from memfit.estimator.vocabulary import Basis, BudgetBasis, Component, ContextSource, Refusal, Verdict
from memfit.estimator.workload import WorkloadRequest, exceeds_limit, input_refusal, resolve_workload

# --- context geometry (llama.cpp pads to 256 cells, per stream when not unified) --------------------


@pytest.mark.parametrize(
    "n_ctx, n_seq, n_ctx_seq",
    [(512, 1, 512), (512, 4, 256), (1000, 1, 1024), (1000, 3, 512), (8192, 4, 2048), (1, 1, 256), (257, 1, 512)],
)
def test_llama_geometry_pads_per_stream(n_ctx: int, n_seq: int, n_ctx_seq: int) -> None:
    assert llama_geometry(n_ctx, n_seq).n_ctx_seq == n_ctx_seq


def test_workload_tokens_are_per_stream() -> None:
    g = context_geometry(4096, 4)
    assert (g.n_ctx_seq, g.n_stream, g.n_seq, g.n_ubatch) == (4096, 4, 4, 512)


# --- KV cache ----------------------------------------------------------------------------------------


def test_element_bytes_name_llama_cpp_cache_types() -> None:
    assert cache_type(2).row_bytes(1024) == 2048 and cache_type(2).name == "f16"
    assert cache_type(4).row_bytes(1024) == 4096 and cache_type(4).name == "f32"
    assert cache_type(1).row_bytes(1024) == 1024 // 32 * 34  # q8_0: 32 int8 values + an f16 scale per block
    assert cache_type(3).row_bytes(1024) == 3072  # not a llama.cpp type: multiplied plainly
    assert GGML_CACHE_TYPES["q4_0"].row_bytes(64) == 36


def test_sliding_window_cells_are_capped_by_window_plus_ubatch() -> None:
    g = context_geometry(32768, 1)
    assert layer_cells(AttentionLayer(256, 256), g) == 32768
    assert layer_cells(AttentionLayer(256, 256, window=1024), g) == 1536  # pad(1024 + 512, 256)
    assert layer_cells(AttentionLayer(256, 256, window=4096), context_geometry(1024, 1)) == 1024


def _layout(*layers: AttentionLayer, v_width_max: int = 0) -> Layout:
    return Layout((KvCache(layers, v_width_max),), (), has_kv_cache=True)


def test_kv_bytes_sum_layers_and_streams() -> None:
    layout = _layout(AttentionLayer(1024, 1024), AttentionLayer(512, 256, window=100))
    k, v = kv_cache_bytes(layout, context_geometry(2048, 2), cache_type(2), cache_type(1))
    assert k == 2 * (2048 * 2048 + 768 * 1024)
    assert v == 2 * (2048 * 1088 + 768 * 272)


def test_mla_keeps_no_v_and_transposed_v_uses_the_widest_row() -> None:
    g = context_geometry(1024, 1)
    assert kv_cache_bytes(_layout(AttentionLayer(576, 0, has_v=False)), g, cache_type(2), cache_type(2)) == (
        1024 * 576 * 2,
        0,
    )
    layout = _layout(AttentionLayer(128, 128), AttentionLayer(0, 0), v_width_max=128)
    assert kv_cache_bytes(layout, g, cache_type(2), cache_type(2), flash_attention=False) == (
        1024 * 128 * 2,
        2 * 1024 * 128 * 2,
    )


def test_unified_cache_shares_one_stream_and_widens_windows() -> None:
    g = llama_geometry(8192, 4, unified=True)
    assert (g.n_ctx_seq, g.n_stream) == (8192, 1)
    assert layer_cells(AttentionLayer(1, 1, window=512), g) == 2560  # pad(512 * 4 + 512, 256)
    assert layer_cells(AttentionLayer(1, 1, window=512), llama_geometry(8192, 4, swa_full=True)) == 2048


def test_compressed_caches_keep_one_cell_per_ratio_positions_padded() -> None:
    """llama_kv_cache_dsv4: pad(max(1, ceil(n_ctx_seq / ratio)), 256) cells, whatever the window or swa_full."""
    g = llama_geometry(8192, 1)
    assert layer_cells(AttentionLayer(1, 0, has_v=False, ratio=4), g) == 2048
    assert layer_cells(AttentionLayer(1, 0, has_v=False, ratio=128), g) == 256  # 64 cells, padded
    assert layer_cells(AttentionLayer(1, 0, has_v=False, ratio=4), llama_geometry(1000, 1)) == 256  # 256 of 1024
    assert layer_cells(AttentionLayer(1, 0, has_v=False, ratio=4), llama_geometry(8192, 1, swa_full=True)) == 2048


def test_a_cache_made_per_sequence_ignores_unified() -> None:
    """llama_kv_cache_dsv4 keeps a stream per sequence with a unified context too: each stream the whole context
    (n_ctx_seq = n_ctx), each window one sequence's; 4 streams x (pad(128 + 512, 256) + 8192 / 4) cells."""
    layers = (AttentionLayer(1, 0, window=128, has_v=False), AttentionLayer(1, 0, has_v=False, ratio=4))
    layout = Layout((KvCache(layers),), (), has_kv_cache=True, streams_per_sequence=True)
    g = llama_geometry(8192, 4, unified=True)
    assert kv_cache_bytes(layout, g, cache_type(2), cache_type(2)) == (4 * (768 + 2048) * 2, 0)
    assert kv_cache_bytes(_layout(*layers), g, cache_type(2), cache_type(2)) == ((1024 + 2048) * 2, 0)


# --- workload, refusals ---------------------------------------------------------------------------


def test_documented_defaults_and_cap() -> None:
    w = resolve_workload(WorkloadRequest(), context_limit=2048)
    assert (w.allocated_tokens, w.context_source, w.streams, w.key_element_bytes, w.value_element_bytes, w.mode) == (
        2048,
        ContextSource.DOCUMENTED_DEFAULT,
        1,
        2,
        2,
        "fullGpu",
    )
    assert resolve_workload(WorkloadRequest(), context_limit=None).allocated_tokens == 4096


def test_requested_context_is_never_capped() -> None:
    w = resolve_workload(WorkloadRequest(allocated_tokens=9000), context_limit=2048)
    assert w.allocated_tokens == 9000 and w.context_source is ContextSource.REQUESTED
    assert exceeds_limit(w, 2048)


@pytest.mark.parametrize(
    "tokens, streams, refusal",
    [
        (0, 1, Refusal.NON_POSITIVE_CONTEXT),
        (-5, 0, Refusal.NON_POSITIVE_CONTEXT),  # first match wins
        (10, 0, Refusal.NON_POSITIVE_STREAMS),
        (2**63, 1, Refusal.NON_FINITE_INPUT),
        (10, 1, None),
    ],
)
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


@pytest.mark.parametrize(
    "lower, upper, budget, expected",
    [
        (100, 100, 110, Verdict.GOOD),  # 100 x 1.1 <= 110
        (100, 100, 109, Verdict.TIGHT),
        (100, 100, 100, Verdict.TIGHT),
        (100, 120, 110, Verdict.UNKNOWN),  # floor fits, ceiling does not
        (111, 120, 110, Verdict.OVERSIZE),
        (111, None, 110, Verdict.OVERSIZE),  # the floor alone decides oversize
        (100, None, 1000, Verdict.UNKNOWN),
        (100, 100, None, Verdict.UNKNOWN),
    ],
)
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
