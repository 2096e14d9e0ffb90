"""Every measured run (tests/data) whose graph estimator/compute_graph.py rebuilds, with its model's graph."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from memfit.estimator.architectures import derive_layout
from memfit.estimator.catalog import Catalog
from memfit.estimator.compute_graph import buildable
from memfit.estimator.layout import GraphShape, Layout
from memfit.readers.catalog_file import load_catalog_file
from memfit.service.artifact_cache import ArtifactCache
from tools import accuracy
from tools.truth import DATA, load, run_id


@dataclass(frozen=True)
class RebuiltRun:
    name: str  # the run's id
    source: str  # the file of tests/data it is recorded in
    run: dict
    graph: GraphShape
    architecture: str
    n_vocab: int
    causal: bool  # the layout's attention is causal (False: an embedding model)


def rebuilt_runs() -> list[RebuiltRun]:
    """The runs that measured a compute buffer, under settings memfit models, of a model whose graph is rebuilt."""
    models = Path(tempfile.mkdtemp())
    cache, by_id, found = ArtifactCache(), {e.model_id: e for e in Catalog(load_catalog_file()).entries}, []
    for path in sorted(DATA.glob("*.jsonl")):
        pairs: list[tuple[dict, Layout | None, int | None, str]]
        runs = [r for r in load(path) if "compute_bytes" in r and not accuracy.unmodelled(r)]
        if path == accuracy.CATALOG_TRUTH:
            entries = [(r, by_id[r["model"]]) for r in runs]
            pairs = [(r, derive_layout(e.metadata, e.architecture), e.n_vocab, e.architecture) for r, e in entries]
        else:
            names = {r["model"] for r in runs if r["model"] in accuracy.model_writers()}
            files = accuracy.write_models(names, models)
            pairs = []
            for r in runs:
                if r["model"] in files:
                    facts = cache.facts((str(files[r["model"]]),))
                    pairs.append((r, facts.layout, facts.n_vocab, facts.architecture))
        for r, layout, n_vocab, arch in pairs:
            graph = layout.graph if layout is not None else None
            if layout is not None and graph is not None and n_vocab is not None and buildable(graph):
                found.append(RebuiltRun(run_id(r), path.name, r, graph, arch, n_vocab, layout.causal))
    return found
