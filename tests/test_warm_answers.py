"""Answers kept for the next request (service/answers.py, service/subjects.py) are never another request's: a
changed workload, a changed file beside the model, a new observation (stored by another process too) or a cleared
artifact cache each gives a new answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from memfit.estimator.fit_types import FitRequest, FitResult, Observation, ObservedParts
from memfit.estimator.workload import WorkloadRequest
from memfit.readers.model_roots import Root, RootKind
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tools.gguf_writers import Model, embeddings, llama_gqa, write_model

# llama_gqa: 4 layers, 2 KV heads of 32 dimensions; an F16 K and V row per token and layer (llama_kv_cache)
KV_PER_TOKEN = 4 * 2 * (2 * 32 * 2)


def _service(models: Path, state: Path | None = None) -> FitService:
    service = build_service([Root(str(models), RootKind.PLAIN)], state_dir=str(state) if state else None)
    service.index.refresh()
    return service


def _part(result: FitResult, component: str) -> int | None:
    return next(p.bytes for p in result.parts if p.component == component)


def _fit(service: FitService, tokens: int = 4096, model_id: str = "tiny") -> FitResult:
    (result,) = service.fit_batch([FitRequest(model_id, WorkloadRequest(allocated_tokens=tokens))])
    return result


def test_each_workload_of_a_warm_batch_has_its_own_answer(tmp_path: Path) -> None:
    write_model(llama_gqa(), tmp_path / "tiny.gguf")
    service = _service(tmp_path)
    batch = [FitRequest("tiny", WorkloadRequest(allocated_tokens=t)) for t in (4096, 8192, 4096, 2048)]
    for _ in range(3):  # cold, then warm twice
        kv = [_part(r, "kvCache") for r in service.fit_batch(batch)]
        assert kv == [4096 * KV_PER_TOKEN, 8192 * KV_PER_TOKEN, 4096 * KV_PER_TOKEN, 2048 * KV_PER_TOKEN]


def _projector(vocab: int) -> Model:
    m = Model("clip")
    m.kv["general.name"] = "mmproj"
    embeddings(m, 1024, vocab, QT.F16, tied=True)  # an F16 tensor of 1024 x vocab, an F32 norm of 1024
    return m


def _projector_bytes(vocab: int) -> int:
    return 1024 * vocab * 2 + 1024 * 4


def test_a_projector_changed_beside_a_warm_model_is_weighed_again(tmp_path: Path) -> None:
    write_model(llama_gqa(), tmp_path / "tiny.gguf")
    write_model(_projector(4096), tmp_path / "mmproj-tiny.gguf")
    service = _service(tmp_path)
    assert _part(_fit(service), "companions") == _projector_bytes(4096)
    assert _part(_fit(service), "companions") == _projector_bytes(4096)
    write_model(_projector(8192), tmp_path / "mmproj-tiny.gguf")  # the model file itself unchanged
    assert _part(_fit(service), "companions") == _projector_bytes(8192)


def test_an_observation_stored_by_another_process_reaches_the_next_warm_answer(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    write_model(llama_gqa(), tmp_path / "models" / "tiny.gguf")
    state = tmp_path / "state"
    service = _service(tmp_path / "models", state)
    derived = _fit(service)
    assert _fit(service).parts == derived.parts  # warm
    assert next(p for p in derived.parts if p.component == "workspace").basis == "derivedLayout"
    other = _service(tmp_path / "models", state)  # another worker over the same state directory
    workspace = _part(derived, "workspace")
    assert workspace is not None
    measured = workspace + 4096
    s = derived.subject
    workload = WorkloadRequest(4096, 1, 2, 2, "fullGpu")  # the workload the fits above resolve to
    other.record_observation(
        Observation(s.model_id, s.revision, s.quant, s.artifact_bytes, workload, ObservedParts(workspace=measured), "t")
    )
    assert _part(_fit(service), "workspace") == measured


def test_a_cleared_artifact_cache_weighs_the_file_again(tmp_path: Path) -> None:
    write_model(llama_gqa(), tmp_path / "tiny.gguf")
    service = _service(tmp_path)
    _fit(service)
    reads = service.cache.reads
    _fit(service)
    assert service.cache.reads == reads  # warm: nothing read
    service.cache.clear()
    _fit(service)
    assert service.cache.reads == reads + 1


def test_a_batch_stats_each_file_it_names_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One reading per request: a warm batch naming one model 32 times (its workloads differing) stats its file
    once, and the next batch stats it again (a file changed between two requests is seen by the second)."""
    import threading

    from memfit.service import artifact_cache

    write_model(llama_gqa(), tmp_path / "tiny.gguf")
    service = _service(tmp_path)
    stats: list[str] = []
    real, asking = artifact_cache.file_identity, threading.get_ident()

    def counted(path: str) -> artifact_cache.FileIdentity:
        if threading.get_ident() == asking:  # not the index's own thread
            stats.append(Path(path).name)
        return real(path)

    batch = [FitRequest("tiny", WorkloadRequest(allocated_tokens=1024 * (1 + i % 8))) for i in range(32)]
    service.fit_batch(batch)  # the file weighed (a cold subject stats it while reading it)
    monkeypatch.setattr(artifact_cache, "file_identity", counted)
    for _ in range(2):
        stats.clear()
        assert len(service.fit_batch(batch)) == 32
        assert stats == ["tiny.gguf"]


def test_a_warm_plan_keeps_its_answers_until_an_observation_moves_the_history(tmp_path: Path) -> None:
    """A plan's full answer at the context asked about is kept as a fit's is (service/plans.py, kept_answer): the
    same answer for the same plan again, and a new one once another worker stores an observation for it."""
    (tmp_path / "models").mkdir()
    write_model(llama_gqa(), tmp_path / "models" / "tiny.gguf")
    state = tmp_path / "state"
    service = _service(tmp_path / "models", state)
    plan = [FitRequest("tiny", WorkloadRequest(allocated_tokens=4096))]
    ((first,),) = [p.quants for p in service.plan_batch(plan)]
    ((again,),) = [p.quants for p in service.plan_batch(plan)]
    assert again.fit.parts is first.fit.parts  # warm: the kept answer's parts
    workspace = _part(first.fit, "workspace")
    assert workspace is not None
    s = first.fit.subject
    other = _service(tmp_path / "models", state)  # another worker over the same state directory
    other.record_observation(
        Observation(
            s.model_id,
            s.revision,
            s.quant,
            s.artifact_bytes,
            WorkloadRequest(4096, 1, 2, 2, "fullGpu"),
            ObservedParts(workspace=workspace + 4096),
            "t",
        )
    )
    ((observed,),) = [p.quants for p in service.plan_batch(plan)]
    assert _part(observed.fit, "workspace") == workspace + 4096
