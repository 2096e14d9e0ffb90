"""ggml-alloc's allocator replayed, and llama.cpp's reserved graph rebuilt, against llama.cpp's measured buffers."""

from __future__ import annotations

import pytest

from memfit.estimator.compute_buffer import REPLAY_SLACK_CHECKED
from memfit.estimator.compute_graph import build_graph
from memfit.estimator.ggml_graph import F32 as T_F32
from memfit.estimator.ggml_graph import Graph, new_tensor, op, same_shape
from memfit.estimator.graph_alloc import FreeList, reserved_bytes
from tests.rebuilt_runs import RebuiltRun
from tools import accuracy

KiB = 1024


def test_best_fit_takes_the_smallest_free_block_that_fits_and_merges_on_free() -> None:
    heap = FreeList()
    a, b, c = heap.alloc(96 * KiB), heap.alloc(32 * KiB), heap.alloc(64 * KiB)
    assert (a, b, c, heap.size) == (0, 96 * KiB, 128 * KiB, 192 * KiB)
    heap.free(a, 96 * KiB)
    heap.free(c, 64 * KiB)  # two holes: 96 KiB at 0, 64 KiB at 128 KiB (the open end)
    assert heap.alloc(40 * KiB) == 0  # the hole before the end, not the end
    heap.free(b, 32 * KiB)  # joins the 56 KiB left at 40 KiB and the open end at 128 KiB: one block
    assert len(heap.blocks) == 1 and heap.blocks[0][0] == 40 * KiB
    assert heap.alloc(33) == 40 * KiB and heap.alloc(1) == 40 * KiB + 64  # 33 bytes take 64 (the alignment)
    assert heap.size == 192 * KiB


def test_an_in_place_op_reuses_its_only_source_and_outputs_are_never_freed() -> None:
    gf = Graph()
    x = new_tensor(T_F32, 1024, input=True)  # 4 KiB input
    y = op("MUL_MAT", T_F32, (2048,), x)  # 8 KiB
    z = same_shape(y, "SCALE")  # in place: y's only consumer
    out = op("MUL_MAT", T_F32, (1024,), z)  # 4 KiB: fits where x was (freed after y)
    out.output = True
    gf.expand(out)
    assert reserved_bytes(gf) == 12 * KiB


@pytest.fixture(scope="module")
def checked_runs(rebuilt: list[RebuiltRun]) -> list[RebuiltRun]:
    """Every measured run whose architecture's graph is rebuilt node for node."""
    return [r for r in rebuilt if r.graph.node_for_node]


def test_the_rebuilt_graph_gives_llama_cpps_buffer(checked_runs: list[RebuiltRun]) -> None:
    """On every measured run of an architecture checked node for node (ubatch 2048 and flash attention off
    included), the replayed buffer is llama.cpp's within the margin the bounds keep (REPLAY_SLACK_CHECKED), and to
    the byte on almost all of them."""
    assert len(checked_runs) > 1000
    exact = 0
    for checked in checked_runs:
        run = checked.run
        geometry = accuracy.run_geometry(run, checked.architecture)
        replayed = reserved_bytes(build_graph(checked.graph, geometry, checked.n_vocab))
        assert abs(replayed - run["compute_bytes"]) <= REPLAY_SLACK_CHECKED, checked.name
        exact += replayed == run["compute_bytes"]
    assert exact >= 0.95 * len(checked_runs), (exact, len(checked_runs))
