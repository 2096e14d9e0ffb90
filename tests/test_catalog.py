"""The bundled catalog: consistent published layouts, and catalog-only answers."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gguf import GGMLQuantizationType as QT

from memfit import wire
from memfit.estimator.arch_rules import COUNTED, RULES
from memfit.estimator.architectures import derive_layout
from memfit.estimator.artifact import padded, tensor_bytes, weights_on
from memfit.estimator.catalog import Catalog, CatalogEntry, entry_tensors, proxy_weights
from memfit.estimator.cpu_variant import VARIANTS
from memfit.estimator.hparams import HParams
from memfit.estimator.model_ids import suggestions
from memfit.estimator.tensor_list import Shape, count_parameters
from memfit.generated.models import WireFitVerdictRequest, WireFitVerdictResult
from memfit.readers.catalog_file import load_catalog_file
from memfit.readers.model_roots import Root, RootKind
from memfit.service.artifact_cache import ArtifactCache
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tools.accuracy import model_writers
from tools.gguf_writers import Model, gemma3_4b, llama31_8b, qwen3_30b_a3b, write_model

CATALOG = Catalog(load_catalog_file())
ENTRIES = {e.model_id: e for e in CATALOG.entries}
# the output tensor bytes of llama.cpp's quantizer per (catalog entry, file type): tests/test_quant_recipe.py
QUANTIZED = {
    (r["model"], r["ftype"]): r["bytes"]
    for r in map(json.loads, (Path(__file__).parent / "data" / "quantized_catalog.jsonl").open())
}


def test_catalog_is_large_enough_and_covers_the_families() -> None:
    assert len(CATALOG.entries) >= 40
    names = " ".join(e.name for e in CATALOG.entries)
    for family in (
        "Llama 3.1",
        "Llama 3.2",
        "Llama 3.3",
        "Qwen2.5",
        "Qwen3 8B",
        "Qwen3 30B-A3B",
        "Qwen3-Next",
        "Gemma 2",
        "Gemma 3 ",
        "Gemma 3n",
        "Mistral 7B",
        "Mistral Nemo",
        "Mistral Small",
        "Phi-3.5",
        "Phi-4",
        "R1-Distill",
        "DeepSeek V3",
        "gpt-oss 20b",
        "gpt-oss 120b",
        "SmolLM2",
        "SmolLM3",
        "Granite 4.0 H",
        "LFM2",
        "Falcon-H1",
        "Mamba",
        "MiniLM",
    ):
        assert family in names, family
    assert sum(1 for e in CATALOG.entries if e.parameters) >= 25


@pytest.mark.parametrize("entry", CATALOG.entries, ids=lambda e: e.model_id)
def test_entry_layout_is_derivable_and_its_parameter_count_agrees(entry: CatalogEntry) -> None:
    derive_layout(entry.metadata, entry.architecture)  # raises when the layout is incomplete
    if entry.architecture not in COUNTED:  # no tensor list: the answer's weights say unknown, never a guess
        assert entry.parameters is None
        return
    tensors = entry_tensors(entry)
    assert tensors is not None
    counted = count_parameters(tensors).total
    if entry.parameters:  # a mistyped layout or tensor list shows up as a count that differs from the published one
        assert abs(counted - entry.parameters) <= 0.02 * entry.parameters, (counted, entry.parameters)
    assert entry.quants and all(q in CATALOG.spreads for q in entry.quants)
    assert entry.source and entry.context_length


# the weights llama.cpp allocated in its dry run of each catalog entry's shape (a file of its tensor list in the
# converter's types: llama.cpp's loader refuses a required tensor missing, one of another shape, or one too many)
DRY_RUN_WEIGHTS = {
    r["model"]: r["weights_bytes"]
    for r in map(json.loads, (Path(__file__).parent / "data" / "catalog_dryrun.jsonl").open())
    if "weights_bytes" in r
}


@pytest.mark.parametrize("model_id", sorted(DRY_RUN_WEIGHTS))
def test_an_entrys_tensor_list_is_what_llama_cpp_allocated(model_id: str) -> None:
    entry = ENTRIES[model_id]
    tensors = entry_tensors(entry)
    assert tensors is not None
    listed = sum(padded(tensor_bytes(t.ne, t.source)) for t in tensors)
    if RULES[entry.architecture].tied_embedding_twice:  # its loader allocates the tied token embedding twice
        listed += next(padded(tensor_bytes(t.ne, t.source)) for t in tensors if t.name == "token_embd.weight")
    assert listed == DRY_RUN_WEIGHTS[model_id]


@pytest.mark.parametrize(
    "name",
    [
        "llama31-8b-shape-q4_0",
        "qwen3-30b-a3b-shape-q4_0",
        "gemma3-4b-shape-q4_0",
        "mamba2-2.7b-shape-f16",
        "qwen3next",
        "granitehybrid-f16",
        "lfm2-f16",
        "mamba",
        "deepseek2-mla",
        "gptoss-swa-moe",
        "falcon-h1",
        "bert-embd",
        "starcoder2",
        "granite",
        "command-r7b-shape",
        "exaone4-32b-shape",
        "nomic-bert-shape",
        "falcon-mamba-7b-shape-f16",
    ],
)
def test_parameter_count_matches_the_tensors_of_a_real_shape(name: str) -> None:
    """The architecture's tensor list against the writers' files (each loaded by llama.cpp in tests/data's runs):
    the weight matrices within 0.5%."""
    model = model_writers()[name]()
    metadata = {k: tuple(v) if isinstance(v, list) else v for k, v in model.kv.items()}
    tied = all(n != "output.weight" for n, *_ in model.tensors)
    rule = RULES[model.arch]
    assert rule.tensors is not None
    listed = rule.tensors(Shape(HParams(metadata, model.arch), model.vocab, tied))
    counted = sum(math.prod(t.ne) for t in listed if len(t.ne) > 1)
    actual = sum(math.prod(ne) for _, ne, _ in model.tensors if len(ne) > 1)
    assert abs(counted - actual) <= 0.005 * actual


def _answer(service: FitService, model_id: str, **fields: Any) -> WireFitVerdictResult:
    return wire.fit_batch(service, [WireFitVerdictRequest(model_id=model_id, **fields)]).results[0]


def test_catalog_only_answer() -> None:
    service = build_service()
    # the variant named: on an AMX host the one ggml's loader picks packs the weights (sapphirerapids)
    result = _answer(service, "Qwen/Qwen3-8B-GGUF:q8_0", allocated_tokens=8192, cpu_variant="haswell")
    assert result.model_id == "Qwen/Qwen3-8B-GGUF:q8_0" and result.identity.model_id == "Qwen/Qwen3-8B-GGUF:Q8_0"
    assert result.identity.artifact_bytes is None and result.identity.quant == "Q8_0"
    assert "artifactNotOnDisk" in result.limits
    parts = {p.component: p for p in result.estimate.parts}
    weights = parts["weights"]
    assert weights.basis == "derivedLayout"  # the recipe decides every tensor's type
    assert weights.bytes == QUANTIZED[("Qwen/Qwen3-8B-GGUF", "Q8_0")]  # what llama.cpp's quantizer wrote
    assert parts["kvCache"].basis == "derivedLayout"
    assert parts["kvCache"].bytes == 36 * 8192 * 8 * 128 * 2 * 2  # 36 layers, 8 KV heads of 128, K and V in f16
    assert parts["workspace"].basis == "derivedLayout" and result.estimate.weakest_basis == "derivedLayout"
    upper, lower = result.estimate.upper_bound_bytes, result.estimate.lower_bound_bytes
    assert upper is not None and lower is not None and upper > lower


def test_a_quant_the_repository_does_not_list_answers_from_the_recipe() -> None:
    """Qwen3-8B's repository publishes Q4_K_M, Q5_K_M, Q6_K and Q8_0: Q4_K_S is what llama-quantize would make
    (its bytes as the quantizer wrote them for this shape), IQ4_XS a range (its ffn_down depends on an importance
    matrix), and each says the repository may not publish it."""
    service = build_service()
    q4_k_s = _answer(service, "qwen/qwen3-8b-gguf:q4_k_s", cpu_variant="haswell")
    weights = next(p for p in q4_k_s.estimate.parts if p.component == "weights")
    assert q4_k_s.identity.model_id == "Qwen/Qwen3-8B-GGUF:Q4_K_S" and weights.basis == "derivedLayout"
    assert weights.bytes == weights.upper_bytes == QUANTIZED[("Qwen/Qwen3-8B-GGUF", "Q4_K_S")]
    assert "the repository does not list Q4_K_S" in weights.note
    iq4_xs = _answer(service, "Qwen/Qwen3-8B-GGUF:IQ4_XS", cpu_variant="haswell")
    weights = next(p for p in iq4_xs.estimate.parts if p.component == "weights")
    assert weights.bytes <= QUANTIZED[("Qwen/Qwen3-8B-GGUF", "IQ4_XS")] <= weights.upper_bytes
    assert "the repository does not list IQ4_XS" in weights.note


def test_default_quant_and_unknown_quant() -> None:
    service = build_service()
    assert _answer(service, "Qwen/Qwen3-8B-GGUF").identity.quant == "Q4_K_M"
    assert wire.fit_batch(service, [WireFitVerdictRequest(model_id="Qwen/Qwen3-8B-GGUF:Q1_0")]).results == []


def test_catalog_context_limit_refuses_longer_contexts() -> None:
    result = _answer(build_service(), "Qwen/Qwen3-8B-GGUF", allocated_tokens=10**6)
    assert result.estimate.refusal == "contextExceedsModelLimit"


def test_a_model_on_disk_beats_the_catalog_entry(tmp_path: Path) -> None:
    hub = tmp_path / "hub" / "models--Qwen--Qwen3-8B-GGUF" / "snapshots" / ("a" * 40)
    hub.mkdir(parents=True)
    write_model(model_writers()["qwen3-f16"](), hub / "Qwen3-8B-Q4_K_M.gguf")
    service = build_service([Root(str(tmp_path / "hub"), RootKind.HF_CACHE)])
    service.index.refresh()
    result = _answer(service, "Qwen/Qwen3-8B-GGUF:Q4_K_M")
    assert result.estimate.parts[0].basis == "measuredArtifact" and result.identity.revision == "a" * 40
    assert "artifactNotOnDisk" not in result.limits
    listed = [m for m in wire.model_list(service).models if m.model_id == "Qwen/Qwen3-8B-GGUF:Q4_K_M"]
    assert [m.source for m in listed] == ["local"]


@pytest.mark.parametrize("writer", [llama31_8b, gemma3_4b, qwen3_30b_a3b], ids=lambda w: w.__name__)
@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.F16], ids=lambda q: q.name)
def test_a_catalog_range_holds_the_file_of_the_same_shape(
    writer: Callable[[QT], Model], qtype: QT, tmp_path: Path
) -> None:
    """The proxy's floor and ceiling bracket what a file of that shape and quant measures under every CPU variant
    (AMX's packing and the tied output copy included)."""
    model = writer(qtype)
    path = tmp_path / "model.gguf"
    write_model(model, path)
    facts = ArtifactCache().facts([str(path)])
    tied = all(n != "output.weight" for n, *_ in model.tensors)
    metadata = {k: tuple(v) if isinstance(v, list) else v for k, v in model.kv.items()}
    entry = CatalogEntry(
        model_id="acme/Shape-GGUF",
        name="shape",
        architecture=model.arch,
        parameters=None,
        context_length=None,
        metadata=metadata,
        n_vocab=model.vocab,
        tied_embeddings=tied,
        quants=(qtype.name,),
        source="test",
    )
    tensors = entry_tensors(entry)
    assert tensors is not None
    proxy = proxy_weights(entry, count_parameters(tensors), CATALOG.spreads[qtype.name], VARIANTS)
    floor, slack, _ = weights_on(facts, VARIANTS)
    assert proxy.bytes is not None and proxy.bytes <= floor
    assert floor + slack <= proxy.bytes + proxy.slack


def test_what_is_known_of_a_repositorys_files_is_said_and_the_rest_is_marked_unverified() -> None:
    phi4, gemma3, mamba2 = (
        ENTRIES[i] for i in ("microsoft/phi-4-gguf", "ggml-org/gemma-3-4b-it-GGUF", "state-spaces/mamba2-2.7b")
    )
    assert phi4.quants == ("Q4_K_M", "F16") and set(gemma3.quants) == {"Q4_K_M", "Q8_0"}
    document = load_catalog_file()
    assert all("quants" in m["unverified"] for m in document["models"])
    note = _answer(build_service(), "state-spaces/mamba2-2.7b").estimate.parts[0].note
    assert "not a GGUF repository" in note and mamba2.quants_note in note
    (q6_k,) = wire.fit_batch(build_service(), [WireFitVerdictRequest(model_id="microsoft/phi-4-gguf:Q6_K")]).results
    assert "the repository does not list Q6_K" in q6_k.estimate.parts[0].note  # the recipe's, said so


@pytest.mark.parametrize(
    "typed",
    [
        "qwen/qwen3-8b-gguf:q4_k_m",  # the Hub's repository ids ignore case
        " Qwen/Qwen3-8B-GGUF:Q4_K_M ",
        "hf.co/Qwen/Qwen3-8B-GGUF:Q4_K_M",  # Ollama's and llama.cpp's form
        "https://huggingface.co/Qwen/Qwen3-8B-GGUF",  # the default quant, Q4_K_M
        "HF.CO/qwen/Qwen3-8B-GGUF:Q4_K_M",
    ],
)
def test_ids_as_people_type_them(typed: str) -> None:
    """Each was 'not found' (an empty batch): the answer echoes the id as asked, about the catalog's model."""
    service = build_service()
    canonical = _answer(service, "Qwen/Qwen3-8B-GGUF:Q4_K_M")
    answer = _answer(service, typed)
    assert answer.model_id == typed and answer.identity == canonical.identity
    assert answer.estimate == canonical.estimate


def test_a_plan_of_a_repository_typed_in_lower_case_has_its_quants() -> None:
    service = build_service()
    (plan,) = wire.fit_plan(service, [WireFitVerdictRequest(model_id="qwen/qwen3-8b-gguf")]).results
    assert sorted(q.quant for q in plan.quants) == sorted(ENTRIES["Qwen/Qwen3-8B-GGUF"].quants)


KNOWN = [
    "Qwen/Qwen3-4B-GGUF:Q4_K_M",
    "Qwen/Qwen3-4B-GGUF:Q8_0",
    "Qwen/Qwen2-7B-Instruct-GGUF:Q4_K_M",
    "microsoft/Phi-4-mini-instruct-GGUF:Q4_K_M",
    "Qwen/Qwen3-8B-GGUF:Q4_K_M",
    "Qwen/Qwen3-8B-GGUF:Q8_0",
]


@pytest.mark.parametrize(
    "missing, first",
    [
        # ranked by the repository's name without its organisation: the same family and size first
        ("unsloth/Qwen3-4B-Instruct-2507-GGUF", "Qwen/Qwen3-4B-GGUF:Q4_K_M"),
        ("unsloth/Qwen3-4B-GGUF:Q8_0", "Qwen/Qwen3-4B-GGUF:Q8_0"),  # the id with the quant asked
        ("Qwen/Qwen3-8B-GUF:Q4_K_M", "Qwen/Qwen3-8B-GGUF:Q4_K_M"),
        ("phi-4-mini", "microsoft/Phi-4-mini-instruct-GGUF:Q4_K_M"),
    ],
)
def test_suggestions_rank_repositories_by_name(missing: str, first: str) -> None:
    assert suggestions(missing, KNOWN).ids[0] == first


def test_suggestions_for_a_known_repository_list_its_quants_first() -> None:
    found = suggestions("qwen/qwen3-8b-gguf:q3_k_xl", KNOWN)
    assert found.repository == "Qwen/Qwen3-8B-GGUF" and found.quants == ("Q4_K_M", "Q8_0")
    assert found.ids[:2] == ["Qwen/Qwen3-8B-GGUF:Q4_K_M", "Qwen/Qwen3-8B-GGUF:Q8_0"]
    assert "Qwen/Qwen3-8B-GGUF:Q4_K_M" not in found.nearest
    assert suggestions("no/such-model", KNOWN).ids == []


def test_an_id_as_long_as_a_body_allows_is_ranked_by_its_start() -> None:
    """A name past model_ids.COMPARED characters is compared by its first COMPARED: what it begins with still finds its
    family, and a long name like no other suggests nothing (its length alone rules each known name out)."""
    assert suggestions("unsloth/Qwen3-4B-" + "x" * 1_000_000, KNOWN).ids[0] == "Qwen/Qwen3-4B-GGUF:Q4_K_M"
    assert suggestions("y" * 1_000_000, KNOWN).ids == []
