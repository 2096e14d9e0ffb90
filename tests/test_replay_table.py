"""The compiled, piecewise replay (estimator/replay_program.py, replay_interval.py, replay_table.py) against the full
replay it stands for (graph_alloc.replay, the oracle): equal on every recorded run and on seeded random workloads of
every architecture the recorded models cover."""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from memfit.estimator import replay_table
from memfit.estimator.arch_rules import RULES, Memory
from memfit.estimator.compute_buffer import derived, interned
from memfit.estimator.compute_graph import build_graph
from memfit.estimator.context import CELL_PADDING, POOLING_TYPES, ContextGeometry, llama_geometry
from memfit.estimator.ggml_graph import F32, Graph, Tensor, new_tensor, op, same_shape
from memfit.estimator.graph_alloc import Replay, replay
from memfit.estimator.layout import GraphShape, RankHead
from memfit.estimator.replay_interval import run
from memfit.estimator.replay_program import Mismatch, Program, compile_program
from tests.rebuilt_runs import RebuiltRun
from tools import accuracy
from tools.truth import DATA

SEED = 28  # issue 28: the property test's workloads
ARCHITECTURE_SHARDS = 3  # the random workloads' architectures in three tests of about 20 s each
MODELS_PER_ARCHITECTURE = 2
WORKLOADS_PER_MODEL = 4
CONTEXTS_PER_WORKLOAD = 4
MAX_TOKENS = 1 << 17


def oracle(graph: GraphShape, n_vocab: int, geometry: ContextGeometry) -> tuple[int, int]:
    found = replay(build_graph(graph, geometry, n_vocab))
    return found.size, found.live


def program_at(graph: GraphShape, n_vocab: int, geometry: ContextGeometry, xa: int, xb: int) -> Program:
    build = [build_graph(graph, replace(geometry, n_ctx_seq=x), n_vocab) for x in (xa, xb)]
    return compile_program(build[0], build[1], xa, xb)


def samples(lo: int, hi: int | None, avoid: int) -> tuple[int, int]:
    """Two cell counts of the regime [lo, hi], away from `avoid` where the regime allows it."""
    top = hi if hi is not None else max(lo, avoid) + 64 * CELL_PADDING
    options = [x for x in range(lo, top + 1, CELL_PADDING) if x != avoid]
    xa = options[len(options) // 2] if len(options) > 1 else lo
    xb = next(x for x in (xa + CELL_PADDING, xa - CELL_PADDING) if lo <= x and (hi is None or x <= hi))
    return xa, xb


# -- small graphs ---------------------------------------------------------------------------------------------


def layers_graph(cells: int, layers: int = 6, width: int = 1024, tokens: int = 8) -> Graph:
    """A mask input of `cells` x tokens and `layers` identical blocks: a score matrix over the cells (soft_max in
    place), a projection back, the residual added in place; the last block's output is the graph's."""
    gf = Graph()
    mask = new_tensor(F32, cells, tokens, input=True)
    x = gf.expand(op("GET_ROWS", F32, (width, tokens), new_tensor("i32", tokens, input=True)))
    for _ in range(layers):
        scores = same_shape(op("MUL_MAT", F32, (cells, tokens), x), "SOFT_MAX", mask)
        out = op("MUL_MAT", F32, (width, tokens), scores)
        x = same_shape(out, "ADD", x)
    x.output = True
    gf.expand(x)
    return gf


def test_a_program_from_two_cell_counts_replays_any_other_and_skips_identical_layers() -> None:
    program = compile_program(layers_graph(512), layers_graph(768), 512, 768)
    assert program.period is not None  # the six blocks repeat
    for cells in range(256, 64 * 256, 256):
        piece = run(program, cells, 256, None)
        expected = replay(layers_graph(cells))
        assert piece.at(cells) == (expected.size, expected.live), cells
        for edge in (piece.lo, piece.hi):
            if edge is not None and edge % 256 == 0 and edge < 1 << 20:
                found = replay(layers_graph(edge))
                assert piece.at(edge) == (found.size, found.live), (cells, edge)


def test_a_layout_that_matches_at_one_cell_count_is_special_there() -> None:
    def graph(cells: int) -> Graph:  # an in-place scale whose source is [cells] and itself [1024]: same at 1024
        gf = Graph()
        src = op("MUL_MAT", F32, (cells,), new_tensor(F32, 64, input=True))
        scaled = Tensor(F32, (1024, 1, 1, 1), (4, 4096, 4096, 4096), op="SCALE", srcs=(src,))
        gf.expand(op("MUL_MAT", F32, (64,), scaled))
        return gf

    program = compile_program(graph(512), graph(768), 512, 768)
    assert program.special == {1024}
    with pytest.raises(ValueError):
        run(program, 1024, 256, None)
    piece = run(program, 2048, 256, None)
    assert piece.lo > 1024 and piece.at(2048) == (replay(graph(2048)).size, replay(graph(2048)).live)


def test_graphs_of_another_structure_do_not_compile() -> None:
    with pytest.raises(Mismatch):
        compile_program(layers_graph(512, layers=3), layers_graph(768, layers=4), 512, 768)


def test_the_table_replays_the_first_context_compiles_on_the_second_and_reuses_its_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    full: list[int] = []

    def counted(graph: Graph) -> Replay:
        full.append(1)
        return replay(graph)

    monkeypatch.setattr(replay_table, "replay", counted)
    replay_table.clear()
    shape = GraphShape(n_embd=256, layers=())  # any hashable key: `build` below makes the graph
    built: list[int] = []

    def build(_: GraphShape, geometry: ContextGeometry, __: int) -> Graph:
        built.append(geometry.n_ctx_seq)
        return layers_graph(geometry.n_ctx_seq)

    geometry = llama_geometry(4096, 1)
    for tokens in (4096, 8192, 8448, 4096 + 256, 65536, 4096):
        g = replace(geometry, n_ctx_seq=tokens)
        found = replay_table.replayed(shape, 1000, g, build)
        assert found == replay(layers_graph(tokens)), tokens
    assert len(full) == 1  # the first context only (kept as its own piece when asked again)
    assert built == [4096, 8192]  # the first context, then the second (compiled with the first's graph); none after


# -- recorded runs ------------------------------------------------------------------------------------------


SOURCES = [
    pytest.param(path.name, shard, shards, id=f"{path.name}-{shard}" if shards > 1 else path.name)
    for path in sorted(DATA.glob("*.jsonl"))
    for shards in [2 if path == accuracy.CATALOG_TRUTH else 1]  # the catalog's real shapes: half a minute a half
    for shard in range(shards)
]


@pytest.mark.parametrize(("source", "shard", "shards"), SOURCES)
def test_every_recorded_run_replays_as_the_full_replay(
    rebuilt: list[RebuiltRun], source: str, shard: int, shards: int
) -> None:
    """On every measured run (of this data file) whose graph is rebuilt, the program compiled from two other
    contexts of its regime, run at the run's own cells, gives the full replay's buffer and live bytes (a graph whose
    sizes are not affine in the cells is always replayed in full: never compiled)."""
    groups: dict[tuple, dict[ContextGeometry, RebuiltRun]] = {}
    compiled = (r for r in rebuilt if r.source == source and replay_table.affine_in_cells(r.graph))
    for r in compiled:  # by structure and regime, each workload once
        geometry = accuracy.run_geometry(r.run, r.architecture, r.causal)
        lo, _ = replay_table.regime(r.graph, geometry, geometry.n_ctx_seq)
        key = (r.graph, r.n_vocab, replay_table.structure_key(geometry), lo)
        groups.setdefault(key, {}).setdefault(geometry, r)
    for runs in list(groups.values())[shard::shards]:  # one program per structure, dropped once checked
        first, model = next(iter(runs.items()))
        lo, hi = replay_table.regime(model.graph, first, first.n_ctx_seq)
        program = program_at(model.graph, model.n_vocab, first, *samples(lo, hi, first.n_ctx_seq))
        for geometry, r in runs.items():
            x = geometry.n_ctx_seq
            assert x not in program.special, r.name
            assert run(program, x, lo, hi).at(x) == oracle(r.graph, r.n_vocab, geometry), r.name


def test_a_top_k_between_two_padded_cell_counts_bounds_a_regime_of_those_two(rebuilt: list[RebuiltRun]) -> None:
    """QSA keeps min(n_kv, top_k + ratio - 1) cells (259 for qwen4exp-qsa's top-k 256 and ratio 4): 256 cells keep
    256, 512 keep 259, so no program may be compiled across them as one affine piece (it was, and gave 560 bytes
    too many at 512 cells)."""
    r = next(r for r in rebuilt if r.graph.hyper is not None and any(r.graph.hyper.ratios))
    geometry, hyper = accuracy.run_geometry(r.run, r.architecture, r.causal), r.graph.hyper
    assert hyper is not None
    tops = {hyper.idx_top_k + ratio - 1 for ratio in hyper.ratios if ratio}
    assert tops == {259}
    assert replay_table.regime(r.graph, geometry, 256) == (256, 512)
    assert replay_table.regime(r.graph, geometry, 512)[0] == 512


def test_the_recorded_runs_are_all_there(rebuilt: list[RebuiltRun]) -> None:
    assert len(rebuilt) > 4000 and len({r.architecture for r in rebuilt}) > 50


# -- seeded random workloads ----------------------------------------------------------------------------------


def random_geometry(architecture: str, tokens: int, settings: dict) -> ContextGeometry:
    causal = RULES[architecture].memory is not Memory.NONE if architecture in RULES else True
    rest = {k: v for k, v in settings.items() if k not in ("streams", "ubatch")}
    return llama_geometry(tokens * settings["streams"], settings["streams"], settings["ubatch"], causal=causal, **rest)


def random_settings(rng: random.Random) -> dict:
    settings = {
        "streams": rng.choice([1, 1, 1, 2, 3, 4, 8]),
        "ubatch": rng.choice([1, 2, 7, 64, 100, 256, 512, 512, 512, 1000, 1024, 2048]),
        "unified": rng.random() < 0.3,
        "swa_full": rng.random() < 0.15,
        "flash_attention": rng.random() < 0.5,
        "quantized_k": rng.random() < 0.25,
        "quantized_v": rng.random() < 0.25,
        # under llama-server the reserved graph's outputs are capped at its output limit (n_outputs_max)
        "server": rng.random() < 0.4,
        "draft_tokens": rng.choice([0, 0, 3, 16]),
    }
    return settings | {"k_type": "q8_0" if settings["quantized_k"] else "f16"}  # a quantized K is q8_0


def random_tokens(rng: random.Random) -> int:
    return max(1, int(2 ** rng.uniform(4, 17)))


def architectures(rebuilt: list[RebuiltRun]) -> dict[str, list[RebuiltRun]]:
    """The recorded models (graph and vocabulary) of each architecture, in order of appearance."""
    by_arch: dict[str, dict[tuple, RebuiltRun]] = {}
    for r in rebuilt:
        by_arch.setdefault(r.architecture, {}).setdefault((r.graph, r.n_vocab), r)
    return {arch: list(models.values()) for arch, models in sorted(by_arch.items())}


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Full replays the table falls back on, counted."""
    full: list[int] = []
    real: Callable[[Graph], Replay] = replay

    def counted(graph: Graph) -> Replay:
        full.append(1)
        return real(graph)

    monkeypatch.setattr(replay_table, "replay", counted)
    return full


@pytest.mark.parametrize("shard", range(ARCHITECTURE_SHARDS))
def test_random_workloads_of_every_architecture_replay_as_the_full_replay(
    rebuilt: list[RebuiltRun], monkeypatch: pytest.MonkeyPatch, shard: int
) -> None:
    """Seeded random workloads (contexts, streams, ubatch, flash attention, unified caches, q8_0 caches, full-size
    sliding caches) on recorded models of every architecture (this shard's): each answer of replay_table.replayed,
    and the value of each piece it found at the piece's ends, is the full replay's."""
    full = counting(monkeypatch)
    replay_table.clear()
    asked = edges = cached = 0  # cached: the workloads of graphs that read a cache, whose context makes pieces
    for arch, models in list(architectures(rebuilt).items())[shard::ARCHITECTURE_SHARDS]:
        rng = random.Random(f"{SEED}-{arch}")
        for model in rng.sample(models, min(MODELS_PER_ARCHITECTURE, len(models))):
            for _ in range(WORKLOADS_PER_MODEL):
                settings = random_settings(rng)
                for _ in range(CONTEXTS_PER_WORKLOAD):
                    geometry = random_geometry(arch, random_tokens(rng), settings)
                    if not derived(model.graph, geometry):  # deepseek4's q8_0 K without flash attention: unknown
                        continue
                    found = replay_table.replayed(model.graph, model.n_vocab, geometry, build_graph)
                    expected = oracle(model.graph, model.n_vocab, geometry)
                    assert (found.size, found.live) == expected, (model.name, geometry)
                    asked += 1
                    cached += model.graph.cache_attention
                lo, _ = replay_table.regime(model.graph, geometry, geometry.n_ctx_seq)
                table = replay_table._table(model.graph, model.n_vocab, replay_table.structure_key(geometry), lo)
                for piece in (p for p in table.pieces if p.lo != p.hi):
                    ends = {-(-piece.lo // CELL_PADDING) * CELL_PADDING, (piece.hi or 0) // CELL_PADDING * CELL_PADDING}
                    for end in (e for e in ends if piece.holds(e) and e <= MAX_TOKENS * 8):
                        at = replace(geometry, n_ctx_seq=end)
                        assert piece.at(end) == oracle(model.graph, model.n_vocab, at), (model.name, at)
                        edges += 1
    assert edges > cached // 3 and len(full) < asked * 2 // 3, (asked, cached, edges, len(full))
    print(f"shard {shard}: {asked} workloads, {edges} piece ends checked, {len(full)} full replays")


def test_a_graph_shape_hashes_once_and_pickles_without_its_hash() -> None:
    shape = GraphShape(n_embd=256, layers=())
    assert hash(shape) == hash(GraphShape(n_embd=256, layers=())) and "_hash" in shape.__dict__
    copy = pickle.loads(pickle.dumps(shape))
    assert copy == shape and "_hash" not in copy.__dict__ and hash(copy) == hash(shape)


def test_equal_graph_shapes_are_one_instance_to_the_compute_buffers_caches() -> None:
    a, b = GraphShape(n_embd=320, layers=()), GraphShape(n_embd=320, layers=())
    assert a is not b and interned(a) is interned(b) is interned(a)
    assert interned(GraphShape(n_embd=321, layers=())) is not interned(a)


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen3moe", "granitehybrid"])
def test_llama_servers_output_cap_replays_as_the_full_replay_at_every_ubatch_and_stream_count(
    rebuilt: list[RebuiltRun], arch: str
) -> None:
    """The reserved graph's outputs under llama-server's cap (min(ubatch, n_seq x (1 + draft))) are part of the
    structure: at ubatch 64 to 2048 over 1, 3 and 4 streams, capped (drafts 0 and 3) or not, the table's answer at
    three contexts is the full replay's; two geometries share a structure exactly when their outputs agree."""
    model = architectures(rebuilt)[arch][0]
    replay_table.clear()
    for ubatch, streams in ((64, 1), (512, 1), (512, 3), (512, 4), (2048, 4)):
        keys: dict[int, set[tuple]] = {}
        for server, draft in ((False, 0), (True, 0), (True, 3)):
            for tokens in (2048, 4096, 8192):
                geometry = llama_geometry(tokens * streams, streams, ubatch, server=server, draft_tokens=draft)
                found = replay_table.replayed(model.graph, model.n_vocab, geometry, build_graph)
                assert (found.size, found.live) == oracle(model.graph, model.n_vocab, geometry), (ubatch, streams)
            outputs = min(ubatch, streams * (1 + draft)) if server else ubatch
            keys.setdefault(outputs, set()).add(replay_table.structure_key(geometry))
        assert all(len(k) == 1 for k in keys.values()) and len(set().union(*keys.values())) == len(keys)


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen3moe", "bert", "llama-embed"])
def test_embeddings_replay_as_the_full_replay_with_each_pooling(rebuilt: list[RebuiltRun], arch: str) -> None:
    """A context computing embeddings (llama-server's, its n_batch the ubatch and its output limit lifted, or a
    plain one) reserves the graph with build_pooling's nodes for the model's pooling (none, mean, cls, last, rank):
    at ubatch 256 and 512 over 1 and 4 streams the table's answer at three contexts is the full replay's; the
    embeddings are part of the structure, their width in the output buffer is not."""
    model = architectures(rebuilt)[arch][0]
    replay_table.clear()
    for pooling in range(5):
        graph = replace(model.graph, pooling=pooling)
        for ubatch, streams in ((256, 1), (512, 4)):
            for server in (False, True):
                for tokens in (1024, 4096, 8192):
                    geometry = llama_geometry(
                        tokens * streams, streams, ubatch, server=server, embeddings=True, embd_width=7
                    )
                    found = replay_table.replayed(graph, model.n_vocab, geometry, build_graph)
                    assert (found.size, found.live) == oracle(graph, model.n_vocab, geometry), (pooling, ubatch)
                plain = llama_geometry(tokens * streams, streams, ubatch, server=server)
                assert replay_table.structure_key(plain) != replay_table.structure_key(geometry)
                wider = replace(geometry, embd_width=9)
                assert replay_table.structure_key(wider) == replay_table.structure_key(geometry)


@pytest.mark.parametrize("arch", ["llama", "qwen3moe", "bert"])
def test_a_named_pooling_replays_as_the_full_replay(rebuilt: list[RebuiltRun], arch: str) -> None:
    """A pooling named (llama-server's --pooling: cparams.pooling_type over the model's own), rank's through a BERT
    reranker's classification head (cls n_embd wide with its bias, cls.output's 2 labels with theirs): the table's
    answer is the full replay's at three contexts; each pooling named is a structure of its own. A pooling alone,
    without embeddings, is a plain context's structure (its output limit lifted to n_batch), not llama-server's
    capped one."""
    model = architectures(rebuilt)[arch][0]
    head = RankHead(cls_rows=model.graph.n_embd, cls_bias=True, out_rows=2, out_bias=True)
    graph = replace(model.graph, pooling=1, rank_head=head)  # the model's own: mean
    replay_table.clear()
    keys = set()
    for name in POOLING_TYPES:
        for tokens in (1024, 4096, 8192):
            geometry = llama_geometry(tokens * 4, 4, 512, server=True, embeddings=True, embd_width=7, pooling=name)
            found = replay_table.replayed(graph, model.n_vocab, geometry, build_graph)
            assert (found.size, found.live) == oracle(graph, model.n_vocab, geometry), (name, tokens)
        keys.add(replay_table.structure_key(geometry))
    assert len(keys) == len(POOLING_TYPES)
    alone = llama_geometry(8192 * 4, 4, 512, server=True, pooling="mean")
    assert replay_table.structure_key(alone) == replay_table.structure_key(llama_geometry(8192 * 4, 4, 512))
    assert replay_table.structure_key(alone) != replay_table.structure_key(
        llama_geometry(8192 * 4, 4, 512, server=True)
    )
