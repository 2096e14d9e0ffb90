"""Ollama's store: manifests naming blobs by media type, with sparse GGUF blobs written into a layout in tmp."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from memfit import wire
from memfit.estimator.artifact import padded
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers import model_roots
from memfit.readers.model_roots import Root, RootKind, ollama_id, usual_roots
from memfit.service.index import ModelIndex
from memfit.service_builder import build_service
from tests.test_discovery import projector
from tools.gguf_writers import Model, llama_gqa, qwen3, tensor_nbytes, write_model

MODEL = "application/vnd.ollama.image.model"
PROJECTOR = "application/vnd.ollama.image.projector"
ADAPTER = "application/vnd.ollama.image.adapter"


def lora() -> Model:
    """A LoRA adapter for llama_gqa: A and B matrices of rank 8 on each layer's q and v projections."""
    m = Model("llama")
    m.kv["general.type"] = "adapter"
    m.kv["adapter.type"] = "lora"
    m.kv["adapter.lora.alpha"] = 16.0
    for layer in range(4):
        for proj in ("attn_q", "attn_v"):
            m.tensors.append((f"blk.{layer}.{proj}.weight.lora_a", (256, 8), QT.F32))
            m.tensors.append((f"blk.{layer}.{proj}.weight.lora_b", (8, 256), QT.F32))
    return m


def lora_bytes() -> int:
    return sum(padded(tensor_nbytes(ne, qtype)) for _, ne, qtype in lora().tensors)


def blob(store: Path, model: Model) -> str:
    """Write `model` as a blob named by its digest (as Ollama does); returns the digest."""
    tmp = store / "blobs" / "incoming"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    write_model(model, tmp)
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    tmp.rename(store / "blobs" / f"sha256-{h.hexdigest()}")
    return f"sha256:{h.hexdigest()}"


def manifest(store: Path, name: str, layers: list[tuple[str, str]]) -> Path:
    """manifests/<registry>/<namespace>/<model>/<tag> with these (media type, digest) layers."""
    path = store / "manifests" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "0" * 64}
    body = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": config,
        "layers": [
            *({"mediaType": m, "digest": d, "size": 1} for m, d in layers),
            {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 1},
        ],
    }
    path.write_text(json.dumps(body))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("ollama") / "models"
    llama, qwen = blob(store, llama_gqa()), blob(store, qwen3())
    mmproj, adapter = blob(store, projector()), blob(store, lora())
    manifest(store, "registry.ollama.ai/library/llama3.1/8b", [(MODEL, llama)])
    manifest(store, "registry.ollama.ai/library/llama3.1/latest", [(MODEL, qwen)])
    manifest(store, "registry.ollama.ai/library/llava/7b", [(MODEL, llama), (PROJECTOR, mmproj)])
    manifest(store, "registry.ollama.ai/someone/tuned/v1", [(MODEL, llama), (ADAPTER, adapter)])
    manifest(store, "hf.co/acme/Tiny-GGUF/Q4_K_M", [(MODEL, qwen)])
    manifest(store, "registry.ollama.ai/library/cloudy/120b-cloud", [])  # a cloud model: nothing local
    # broken manifests skip their model only
    (store / "manifests/registry.ollama.ai/library/garbage/1b").parent.mkdir(parents=True)
    (store / "manifests/registry.ollama.ai/library/garbage/1b").write_text("{not json")
    manifest(store, "registry.ollama.ai/library/missing/1b", [(MODEL, "sha256:" + "a" * 64)])
    manifest(store, "registry.ollama.ai/library/badhash/1b", [(MODEL, "sha256:../../../etc/passwd")])
    manifest(store, "registry.ollama.ai/library/upper/1b", [(MODEL, llama.upper())])
    manifest(store, "registry.ollama.ai/library/twice/1b", [(MODEL, llama), (MODEL, qwen)])
    (store / "manifests/registry.ollama.ai/library/huge/1b").parent.mkdir(parents=True)
    (store / "manifests/registry.ollama.ai/library/huge/1b").write_text(" " * ((1 << 20) + 1))
    # a blob symlinked out of the store is never followed
    outside = tmp_path_factory.mktemp("outside") / "secret.gguf"
    write_model(qwen3(), outside)
    (store / "blobs" / f"sha256-{'b' * 64}").symlink_to(outside)
    manifest(store, "registry.ollama.ai/library/escape/1b", [(MODEL, "sha256:" + "b" * 64)])
    return store


@pytest.fixture(scope="module")
def index(store: Path) -> ModelIndex:
    index = ModelIndex([Root(str(store), RootKind.OLLAMA)])
    index.refresh()
    return index


def test_ids_as_ollama_names_them() -> None:
    assert ollama_id("registry.ollama.ai", "library", "llama3.1", "8b") == "llama3.1:8b"
    assert ollama_id("registry.ollama.ai", "someone", "tuned", "v1") == "someone/tuned:v1"
    assert ollama_id("hf.co", "acme", "Tiny-GGUF", "Q4_K_M") == "hf.co/acme/Tiny-GGUF:Q4_K_M"


def test_manifests_index_their_models_and_skip_the_broken(index: ModelIndex, store: Path) -> None:
    assert sorted(a.model_id for a in index.artifacts()) == [
        "hf.co/acme/Tiny-GGUF:Q4_K_M",
        "llama3.1:8b",
        "llama3.1:latest",
        "llava:7b",
        "someone/tuned:v1",
    ]
    artifact = index.get("llama3.1:8b")
    assert artifact is not None
    assert artifact.kind is RootKind.OLLAMA and artifact.projector is None and artifact.adapters == ()
    assert os.path.dirname(artifact.paths[0]) == str(store / "blobs")
    raw = (store / "manifests/registry.ollama.ai/library/llama3.1/8b").read_bytes()
    assert artifact.revision == f"sha256:{hashlib.sha256(raw).hexdigest()}"
    assert index.get("llama3.1") is index.get("llama3.1:latest")  # a name without a tag means latest
    assert index.get("hf.co/acme/Tiny-GGUF:q4_k_m") is index.get("hf.co/acme/Tiny-GGUF") is not None
    assert all("secret" not in p for a in index.artifacts() for p in a.paths)


def test_projector_is_the_companion_and_adapters_count_with_the_weights(index: ModelIndex) -> None:
    service = build_service(index=index)
    names = ("llama3.1:8b", "llava:7b", "someone/tuned:v1")
    results = wire.fit_batch(service, [WireFitVerdictRequest(model_id=m) for m in names]).results
    parts = [{p.component: p for p in r.estimate.parts} for r in results]
    plain, llava, tuned = parts
    plain_weights = plain["weights"].bytes
    assert plain["companions"].basis == "notApplicable" and plain_weights is not None
    assert llava["companions"].basis == "measuredArtifact" and (llava["companions"].bytes or 0) > 0
    assert llava["weights"].bytes == plain_weights
    assert tuned["weights"].bytes == plain_weights + lora_bytes() and lora_bytes() > 0
    assert tuned["weights"].basis == "measuredArtifact" and "1 LoRA adapter" in tuned["weights"].note
    assert plain["weights"].shared_key == llava["weights"].shared_key != ""  # the same blob, loaded alike
    assert tuned["weights"].shared_key == ""  # the same blob with an adapter is another allocation
    assert [r.identity.revision.startswith("sha256:") for r in results] == [True] * 3
    assert all(r.verdict in ("good", "tight", "oversize") for r in results)


def test_listing_and_a_fit_by_ollama_name(index: ModelIndex, store: Path) -> None:
    service = build_service(index=index)
    local = {m.model_id: m for m in wire.model_list(service).models if m.source == "local"}
    assert set(local) == {a.model_id for a in index.artifacts()}
    assert local["llava:7b"].has_projector and local["llama3.1:8b"].root == str(store)
    assert local["llama3.1:8b"].architecture == "llama" and local["llama3.1:latest"].architecture == "qwen3"
    result = wire.fit_one(service, WireFitVerdictRequest(model_id="llama3.1", allocated_tokens=8192))
    assert result is not None and result.model_id == "llama3.1" and result.identity.quant
    kv = next(p for p in result.estimate.parts if p.component == "kvCache")
    assert kv.basis == "derivedLayout" and (kv.bytes or 0) > 0


def test_unreadable_adapter_leaves_the_weights_unknown(tmp_path: Path) -> None:
    store = tmp_path / "models"
    llama = blob(store, llama_gqa())
    garbage = store / "blobs" / f"sha256-{'c' * 64}"
    garbage.write_bytes(b"not a gguf" * 10)
    manifest(store, "registry.ollama.ai/library/odd/1b", [(MODEL, llama), (ADAPTER, "sha256:" + "c" * 64)])
    service = build_service([Root(str(store), RootKind.OLLAMA)])
    service.index.refresh()
    result = wire.fit_one(service, WireFitVerdictRequest(model_id="odd:1b"))
    assert result is not None
    weights = result.estimate.parts[0]
    assert weights.basis == "unknown" and "LoRA adapter" in weights.note
    assert "artifactUnreadable" in result.limits and result.estimate.upper_bound_bytes is None


def test_a_fifo_manifest_never_hangs_the_index(tmp_path: Path) -> None:
    store = tmp_path / "models"
    llama = blob(store, llama_gqa())
    manifest(store, "registry.ollama.ai/library/good/1b", [(MODEL, llama)])
    fifo = store / "manifests/registry.ollama.ai/library/fifo/1b"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    index = ModelIndex([Root(str(store), RootKind.OLLAMA)])
    done = threading.Event()

    def scan() -> None:
        index.refresh()
        done.set()

    threading.Thread(target=scan, daemon=True).start()
    assert done.wait(10), "the scan blocked on a FIFO"
    assert [a.model_id for a in index.artifacts()] == ["good:1b"]


def test_usual_roots_include_ollama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_roots, "OLLAMA_SYSTEM_MODELS", str(tmp_path / "system"))
    (tmp_path / "home/.ollama/models").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "system").mkdir()
    home = {"HOME": str(tmp_path / "home")}

    def ollama(env: dict[str, str]) -> list[tuple[str, RootKind]]:
        return [(r.path, r.kind) for r in usual_roots(env) if r.kind is RootKind.OLLAMA]

    assert ollama(home) == [
        (str(tmp_path / "home/.ollama/models"), RootKind.OLLAMA),
        (str(tmp_path / "system"), RootKind.OLLAMA),
    ]
    moved = ollama({**home, "OLLAMA_MODELS": str(tmp_path / "elsewhere")})
    assert [path for path, _ in moved] == [str(tmp_path / "elsewhere"), str(tmp_path / "system")]
    same = ollama({**home, "OLLAMA_MODELS": str(tmp_path / "system")})
    assert [path for path, _ in same] == [str(tmp_path / "system")]  # the service's store, once


def test_a_blob_named_by_many_layers_is_counted_once_and_never_as_its_own_adapter(tmp_path: Path) -> None:
    store = tmp_path / "models"
    llama, adapter = blob(store, llama_gqa()), blob(store, lora())
    manifest(store, "registry.ollama.ai/library/plain/1b", [(MODEL, llama)])
    manifest(store, "registry.ollama.ai/library/self/1b", [(MODEL, llama), *[(ADAPTER, llama)] * 1000])
    manifest(store, "registry.ollama.ai/library/many/1b", [(MODEL, llama), *[(ADAPTER, adapter)] * 1000])
    manifest(store, "registry.ollama.ai/library/selfproj/1b", [(MODEL, llama), (PROJECTOR, llama)])
    service = build_service([Root(str(store), RootKind.OLLAMA)])
    service.index.refresh()
    own, many, own_projector = (service.index.get(m) for m in ("self:1b", "many:1b", "selfproj:1b"))
    assert own is not None and many is not None and own_projector is not None
    assert own.adapters == () and own_projector.projector is None
    assert len(many.adapters) == 1
    names = ("plain:1b", "self:1b", "many:1b", "selfproj:1b")
    results = wire.fit_batch(service, [WireFitVerdictRequest(model_id=m) for m in names]).results
    weights = [next(p for p in r.estimate.parts if p.component == "weights") for r in results]
    plain, own_weights, many_weights, own_projector_weights = weights
    assert plain.bytes is not None
    assert own_weights.bytes == plain.bytes == own_projector_weights.bytes and plain.basis == "measuredArtifact"
    assert many_weights.bytes == plain.bytes + lora_bytes() and "1 LoRA adapter" in many_weights.note


def test_an_adapter_layer_that_is_not_an_adapter_is_not_counted_as_one(tmp_path: Path) -> None:
    store = tmp_path / "models"
    llama, qwen = blob(store, llama_gqa()), blob(store, qwen3())
    manifest(store, "registry.ollama.ai/library/odd/1b", [(MODEL, llama), (ADAPTER, qwen)])  # a model's weights
    service = build_service([Root(str(store), RootKind.OLLAMA)])
    service.index.refresh()
    result = wire.fit_one(service, WireFitVerdictRequest(model_id="odd:1b"))
    assert result is not None
    weights = next(p for p in result.estimate.parts if p.component == "weights")
    assert weights.basis == "unknown" and "general.type 'model'" in weights.note
    assert "artifactUnreadable" in result.limits and result.estimate.upper_bound_bytes is None


def test_a_manifest_past_the_cap_of_distinct_adapters_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "models"
    llama = blob(store, llama_gqa())
    adapters = []
    for i in range(model_roots.MAX_COMPANIONS + 1):  # distinct blobs: each adapter its own alpha
        m = lora()
        m.kv["adapter.lora.alpha"] = float(i + 1)
        adapters.append(blob(store, m))
    layers = [(MODEL, llama), *((ADAPTER, d) for d in adapters)]
    manifest(store, "registry.ollama.ai/library/capped/1b", layers[:-1])
    manifest(store, "registry.ollama.ai/library/past/1b", layers)
    index = ModelIndex([Root(str(store), RootKind.OLLAMA)])
    index.refresh()
    capped = index.get("capped:1b")
    assert capped is not None and len(capped.adapters) == model_roots.MAX_COMPANIONS
    assert index.get("past:1b") is None
