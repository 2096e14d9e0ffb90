"""Local discovery: a Hugging Face cache, llama.cpp's caches and an LM Studio folder, with sparse full-size GGUFs."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfit import wire
from memfit.generated.models import WireFitVerdictBatch, WireFitVerdictRequest
from memfit.readers import model_roots
from memfit.readers.model_roots import LocalArtifact, Region, Root, RootKind, quant_tag, usual_roots
from memfit.service.index import ModelIndex
from memfit.service_builder import build_service
from tools.gguf_writers import Model, embeddings, llama_gqa, qwen3, write_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def projector() -> Model:
    m = Model("clip")
    m.kv["general.name"] = "mmproj"
    embeddings(m, 1024, 4096, __import__("gguf").GGMLQuantizationType.F16, tied=True)
    return m


def _blob(hub: Path, repo: str, model: Model, relpath: str, commit: str = COMMIT) -> Path:
    """Write a model into the hub cache as huggingface_hub does: a blob, and a snapshot symlink to it."""
    folder = hub / f"models--{repo.replace('/', '--')}"
    blob = folder / "blobs" / f"sha-{relpath.replace('/', '-')}-{commit[:6]}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    write_model(model, blob)
    link = folder / "snapshots" / commit / relpath
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(COMMIT)
    return link


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    hub = tmp_path_factory.mktemp("hub")
    _blob(hub, "acme/Tiny-GGUF", llama_gqa(), "Tiny-Q4_K_M.gguf")
    _blob(hub, "acme/Tiny-GGUF", qwen3(), "Tiny-Q8_0.gguf")
    _blob(hub, "acme/Tiny-GGUF", qwen3(), "Tiny-Q6_K.gguf", commit=OLD_COMMIT)  # an older snapshot
    _blob(hub, "acme/Tiny-GGUF", projector(), "mmproj-F16.gguf")
    for i in (1, 2, 3):
        _blob(hub, "acme/Split-GGUF", qwen3(), f"BF16/Split-BF16-0000{i}-of-00003.gguf")
    outside = tmp_path_factory.mktemp("outside") / "secret.gguf"
    write_model(qwen3(), outside)
    escape = hub / "models--acme--Escape-GGUF" / "snapshots" / COMMIT / "Escape-Q4_K_M.gguf"
    escape.parent.mkdir(parents=True)
    escape.symlink_to(outside)
    (hub / "models--acme--Escape-GGUF" / "refs").mkdir()
    (hub / "models--acme--Escape-GGUF" / "refs" / "main").write_text(COMMIT)
    return hub


@pytest.fixture(scope="module")
def llama_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("llama-cache")
    write_model(qwen3(), root / "bart_Old-GGUF_Old-Q5_K_M.gguf")
    (root / "manifest=bart=Old-GGUF=Q5_K_M.json").write_text(json.dumps({"ggufFile": {"rfilename": "Old-Q5_K_M.gguf"}}))
    _blob(root, "acme/New-GGUF", qwen3(), "New-Q4_K_M.gguf")  # newer llama.cpp: the hub layout
    return root


@pytest.fixture(scope="module")
def lm_studio(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lmstudio")
    (root / "lmstudio-community" / "Qwen-GGUF").mkdir(parents=True)
    write_model(qwen3(), root / "lmstudio-community" / "Qwen-GGUF" / "Qwen-IQ4_XS.gguf")
    return root


@pytest.fixture(scope="module")
def index(hub: Path, llama_cache: Path, lm_studio: Path) -> ModelIndex:
    index = ModelIndex(
        [
            Root(str(hub), RootKind.HF_CACHE),
            Root(str(llama_cache), RootKind.LLAMA_CACHE),
            Root(str(lm_studio), RootKind.LM_STUDIO),
        ]
    )
    index.refresh()
    return index


def test_hub_cache_ids_revisions_and_projectors(index: ModelIndex, hub: Path) -> None:
    q4, q8 = index.get("acme/Tiny-GGUF:Q4_K_M"), index.get("acme/Tiny-GGUF:q8_0")
    assert q4 is not None and q8 is not None
    assert q4.revision == COMMIT and q4.kind is RootKind.HF_CACHE
    assert q4.projector is not None and q4.projector.endswith("mmproj-F16.gguf")
    assert index.get("acme/tiny-gguf:q4_k_m") is None  # repo names are exact; only the tag is case-insensitive
    assert q8.paths[0].endswith("Tiny-Q8_0.gguf")
    assert index.get("acme/Tiny-GGUF") is q4  # a repo without a tag means its Q4_K_M, as -hf does
    assert index.get("acme/Tiny-GGUF:Q6_K") is None  # only in a snapshot refs/main does not name


def test_split_model_is_one_artifact_of_all_its_files(index: ModelIndex) -> None:
    split = index.get("acme/Split-GGUF:BF16")
    assert split is not None
    assert len(split.paths) == 3 and [p[-24:] for p in split.paths] == sorted(p[-24:] for p in split.paths)
    service = build_service(index=index)
    result = wire.fit_batch(service, [WireFitVerdictRequest(model_id="acme/Split-GGUF:BF16")]).results[0]
    assert result.identity.artifact_bytes == sum(os.path.getsize(p) for p in split.paths)
    assert result.identity.revision == COMMIT
    assert result.estimate.parts[0].basis == "measuredArtifact"
    assert index.get("acme/Split-GGUF") is split  # the repo's only artifact


def test_symlinks_out_of_the_root_are_not_followed(index: ModelIndex) -> None:
    assert index.get("acme/Escape-GGUF:Q4_K_M") is None
    assert all("secret" not in p for a in index.artifacts() for p in a.paths)


def test_llama_cpp_caches_old_and_new(index: ModelIndex) -> None:
    old = index.get("bart/Old-GGUF:Q5_K_M")
    assert old is not None and old.kind is RootKind.LLAMA_CACHE and old.revision == ""
    new = index.get("acme/New-GGUF:Q4_K_M")
    assert new is not None and new.revision == COMMIT


def test_lm_studio_folder(index: ModelIndex) -> None:
    artifact = index.get("lmstudio-community/Qwen-GGUF:IQ4_XS")
    assert artifact is not None and artifact.kind is RootKind.LM_STUDIO


def test_shared_key_marks_the_same_file_set_and_projector(index: ModelIndex) -> None:
    service = build_service(index=index)
    requests = [
        WireFitVerdictRequest(model_id=m)
        for m in ("acme/Tiny-GGUF", "acme/Tiny-GGUF:Q4_K_M", "acme/Tiny-GGUF:Q8_0", "bart/Old-GGUF:Q5_K_M")
    ]
    results = wire.fit_batch(service, requests).results
    parts = [{p.component: p for p in r.estimate.parts} for r in results]
    assert parts[0]["weights"].shared_key and parts[0]["weights"].shared_key == parts[1]["weights"].shared_key
    assert parts[2]["weights"].shared_key == ""  # a different file
    projector_key = parts[0]["companions"].shared_key
    assert projector_key and parts[1]["companions"].shared_key == projector_key == parts[2]["companions"].shared_key
    assert parts[0]["companions"].basis == "measuredArtifact" and (parts[0]["companions"].bytes or 0) > 0
    assert parts[3]["companions"].basis == "notApplicable" and parts[3]["weights"].shared_key == ""
    alone = wire.fit_batch(service, [WireFitVerdictRequest(model_id="acme/Tiny-GGUF:Q8_0")]).results[0]
    assert all(p.shared_key == "" for p in alone.estimate.parts)  # shared only within one batch


def test_model_list_puts_local_artifacts_first(index: ModelIndex) -> None:
    listing = wire.model_list(build_service(index=index)).models
    sources = [m.source for m in listing]
    assert sources == sorted(sources, key=lambda s: s != "local") and "catalog" in sources
    local = [m.model_id for m in listing if m.source == "local"]
    assert local[:3] == ["acme/Split-GGUF:BF16", "acme/Tiny-GGUF:Q4_K_M", "acme/Tiny-GGUF:Q8_0"]
    tiny = next(m for m in listing if m.model_id == "acme/Tiny-GGUF:Q4_K_M")
    assert (tiny.has_projector, tiny.revision, tiny.architecture) == (True, COMMIT, "llama")
    assert [m.model_id for m in wire.model_list(build_service(index=index)).models] == [
        m.model_id for m in listing
    ]  # stable


def test_index_refreshes_when_a_directory_changes(tmp_path: Path) -> None:
    index = ModelIndex([Root(str(tmp_path), RootKind.PLAIN)])
    assert index.refresh() and index.get("fresh") is None
    assert not index.refresh()  # nothing changed: no rescan
    write_model(qwen3(), tmp_path / "fresh.gguf")
    assert index.refresh() and index.get("fresh") is not None


@pytest.mark.parametrize(
    "name, tag",
    [
        ("Qwen3-8B-Q4_K_M.gguf", "Q4_K_M"),
        ("model.Q8_0.gguf", "Q8_0"),
        ("x-UD-Q4_K_XL-00001-of-00002.gguf", "UD-Q4_K_XL"),
        ("gemma-f16.gguf", "F16"),
        ("gpt-oss-20b-mxfp4.gguf", "MXFP4"),
        ("model.gguf", ""),
        ("Llama-3.2-3B-Instruct-IQ4_XS.gguf", "IQ4_XS"),
    ],
)
def test_quant_tags(name: str, tag: str) -> None:
    assert quant_tag(name) == tag


def test_usual_roots_follow_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_roots, "OLLAMA_SYSTEM_MODELS", str(tmp_path / "no-ollama-service"))
    for d in ("hf/hub", "llama", "home/.lmstudio/models"):
        (tmp_path / d).mkdir(parents=True)
    roots = usual_roots(
        {"HF_HOME": str(tmp_path / "hf"), "LLAMA_CACHE": str(tmp_path / "llama"), "HOME": str(tmp_path / "home")}
    )
    assert [(Path(r.path).relative_to(tmp_path).as_posix(), r.kind) for r in roots] == [
        ("hf/hub", RootKind.HF_CACHE),
        ("llama", RootKind.LLAMA_CACHE),
        ("home/.lmstudio/models", RootKind.LM_STUDIO),
        ("home/.cache/lm-studio/models", RootKind.LM_STUDIO),  # not there (yet): watched for
        ("home/.ollama/models", RootKind.OLLAMA),
        ("no-ollama-service", RootKind.OLLAMA),
    ]
    nowhere = usual_roots({"HOME": str(tmp_path / "nowhere")})
    assert [r.kind for r in nowhere] == [RootKind.HF_CACHE, RootKind.LLAMA_CACHE] + [RootKind.LM_STUDIO] * 2 + [
        RootKind.OLLAMA
    ] * 2
    assert all(Path(r.path).is_relative_to(tmp_path) for r in nowhere)


def test_each_usual_folder_made_after_start_is_indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh machine: none of the usual folders exists when the index starts. Each is made afterwards, as the
    first download of its tool makes it, and its model is listed; the hub cache deleted and made again is listed
    anew."""
    from tests.test_ollama import MODEL, blob, manifest

    home = tmp_path / "home"
    monkeypatch.setattr(model_roots, "OLLAMA_SYSTEM_MODELS", str(tmp_path / "no-ollama-service"))
    index = ModelIndex(usual_roots({"HOME": str(home)}), poll_seconds=3600)
    index.start()
    try:
        assert index.artifacts() == ()
        hub = home / ".cache" / "huggingface" / "hub"
        _blob(hub, "acme/Late-GGUF", qwen3(), "Late-Q8_0.gguf")  # llama-server -hf's first download
        (home / ".cache" / "llama.cpp").mkdir()
        write_model(qwen3(), home / ".cache" / "llama.cpp" / "bart_Late-GGUF_Late-Q4_K_M.gguf")
        lm_studio = home / ".lmstudio" / "models" / "lmstudio-community" / "Late-GGUF"
        lm_studio.mkdir(parents=True)
        write_model(qwen3(), lm_studio / "Late-IQ4_XS.gguf")
        store = home / ".ollama" / "models"
        manifest(store, "registry.ollama.ai/library/late/1b", [(MODEL, blob(store, qwen3()))])
        expected = (
            "acme/Late-GGUF:Q8_0",
            "bart_Late-GGUF_Late-Q4_K_M",
            "lmstudio-community/Late-GGUF:IQ4_XS",
            "late:1b",
        )
        assert index.wait_for(lambda: all(index.get(i) is not None for i in expected), timeout=30), [
            a.model_id for a in index.artifacts()
        ]
        shutil.rmtree(hub)  # the models last listed there stay listed while it is gone (a vanished root)
        _blob(hub, "acme/Again-GGUF", qwen3(), "Again-Q8_0.gguf")
        assert index.wait_for(lambda: index.get("acme/Again-GGUF:Q8_0") is not None, timeout=30)
        assert index.wait_for(lambda: index.get("acme/Late-GGUF:Q8_0") is None, timeout=30)  # listed anew
        assert index.mode == "watch"
    finally:
        index.stop()


def test_a_thousand_files_are_scanned_off_the_request_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memfit.service import index as registry

    for i in range(1000):
        (tmp_path / f"d{i % 20}").mkdir(exist_ok=True)
        (tmp_path / f"d{i % 20}" / f"model-{i}.gguf").write_bytes(b"GGUF")
    scans: list[Root] = []
    real_scan = registry.scan_region

    def counted_scan(root: Root, region: Region) -> list[LocalArtifact]:
        scans.append(root)
        return real_scan(root, region)

    monkeypatch.setattr(registry, "scan_region", counted_scan)
    index = ModelIndex([Root(str(tmp_path), RootKind.PLAIN)], poll_seconds=0.05)
    index.start()
    try:
        assert index.get("d3/model-3") is not None and len(index.artifacts()) == 1000
        scanned = len(scans)
        for i in range(2000):  # lookups never scan
            index.get(f"d{i % 20}/model-{i % 1000}")
        time.sleep(0.3)  # the index thread sees nothing changed, does not rescan
        assert len(scans) == scanned
        (tmp_path / "d7" / "new.gguf").write_bytes(b"GGUF")
        deadline = time.monotonic() + 5
        while index.get("d7/new") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert index.get("d7/new") is not None and len(scans) == scanned + 1  # found by the background thread
    finally:
        index.stop()


def test_odd_files_in_a_hub_cache_hide_nothing_else(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    _blob(hub, "acme/Good-GGUF", qwen3(), "Good-Q4_K_M.gguf")
    _blob(hub, "acme/Odd-GGUF", qwen3(), "Odd-Q4_K_M.gguf")
    (hub / "models--acme--Odd-GGUF" / "refs" / "main").write_bytes(b"\xff\xfe\x00binary")  # not a commit
    odd = hub / "models--acme--Odd-GGUF" / "snapshots" / COMMIT
    write_model(qwen3(), odd / "renamed.gguf")
    os.rename(odd / "renamed.gguf", os.path.join(os.fsencode(odd), b"bad-\xff-Q8_0.gguf"))  # a name not in UTF-8
    write_model(qwen3(), odd / "bell-\x07-Q6_K.gguf")  # a name with a control character
    (hub / "models--acme--Deep-GGUF" / "snapshots").mkdir(parents=True)
    (hub / "models--acme--Deep-GGUF" / "refs").mkdir()
    (hub / "models--acme--Deep-GGUF" / "refs" / "main").mkdir()  # a directory where a file should be
    index = ModelIndex([Root(str(hub), RootKind.HF_CACHE)])
    index.refresh()
    assert sorted(a.model_id for a in index.artifacts()) == ["acme/Good-GGUF:Q4_K_M", "acme/Odd-GGUF:Q4_K_M"]
    newest = index.get("acme/Odd-GGUF:Q4_K_M")
    assert newest is not None and newest.revision == COMMIT  # the newest snapshot stands in for refs/main
    listing = wire.model_list(build_service(index=index))  # every id in it is text the wire can carry
    assert {"acme/Good-GGUF:Q4_K_M", "acme/Odd-GGUF:Q4_K_M"} <= {m.model_id for m in listing.models}
    listing.model_dump_json()


def test_directories_symlinked_out_of_the_root_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "snapshot").mkdir(parents=True)
    write_model(qwen3(), outside / "snapshot" / "Leak-Q4_K_M.gguf")
    hub = tmp_path / "hub"
    repo = hub / "models--acme--Leak-GGUF"
    (repo / "snapshots").mkdir(parents=True)
    (repo / "snapshots" / COMMIT).symlink_to(outside / "snapshot", target_is_directory=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "linked").symlink_to(outside / "snapshot", target_is_directory=True)
    write_model(qwen3(), plain / "kept.gguf")
    index = ModelIndex([Root(str(hub), RootKind.HF_CACHE), Root(str(plain), RootKind.PLAIN)])
    index.refresh()
    assert [a.model_id for a in index.artifacts()] == ["kept"]


def test_an_index_stopped_and_started_again_keeps_polling(tmp_path: Path) -> None:
    index = ModelIndex([Root(str(tmp_path), RootKind.PLAIN)], poll_seconds=0.05)
    index.start()
    index.stop()
    index.start()
    try:
        write_model(qwen3(), tmp_path / "later.gguf")
        deadline = time.monotonic() + 5
        while index.get("later") is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert index.get("later") is not None
    finally:
        index.stop()


def test_a_root_that_appears_later_is_indexed(tmp_path: Path) -> None:
    index = ModelIndex([Root(str(tmp_path / "not-yet"), RootKind.PLAIN)])
    index.refresh()
    assert index.artifacts() == ()
    (tmp_path / "not-yet").mkdir()
    write_model(qwen3(), tmp_path / "not-yet" / "arrived.gguf")
    index.refresh()
    assert index.get("arrived") is not None


def test_folders_whose_names_are_not_text_are_left_out(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    write_model(qwen3(), plain / "good.gguf")
    os.mkdir(os.path.join(os.fsencode(plain), b"dir-\xff"))
    write_model(qwen3(), os.fsdecode(os.path.join(os.fsencode(plain), b"dir-\xff", b"m.gguf")))
    hub = tmp_path / "hub"
    _blob(hub, "acme/Good-GGUF", qwen3(), "Good-Q4_K_M.gguf")
    (hub / "models--acme--Good-GGUF" / "refs" / "main").unlink()  # no ref: the snapshot is found by listing
    snapshots = os.fsencode(hub / "models--acme--Good-GGUF" / "snapshots")
    os.rename(os.path.join(snapshots, COMMIT.encode()), os.path.join(snapshots, b"\xfe" * 4))
    studio = tmp_path / "studio"
    (studio / "pub").mkdir(parents=True)
    os.mkdir(os.path.join(os.fsencode(studio / "pub"), b"repo-\xff"))
    write_model(qwen3(), os.fsdecode(os.path.join(os.fsencode(studio / "pub"), b"repo-\xff", b"R-Q4_K_M.gguf")))
    index = ModelIndex(
        [Root(str(plain), RootKind.PLAIN), Root(str(hub), RootKind.HF_CACHE), Root(str(studio), RootKind.LM_STUDIO)]
    )
    index.refresh()
    assert [a.model_id for a in index.artifacts()] == ["good"]
    wire.model_list(build_service(index=index)).model_dump_json()  # the listing is text the wire can carry


def test_fifos_never_hang_the_index_or_a_fit(tmp_path: Path) -> None:
    """A FIFO at refs/main, at a llama.cpp manifest, or in place of a model file is refused without waiting for a
    writer that never comes: the scan finishes and the fit answers."""
    hub, cache, plain = tmp_path / "hub", tmp_path / "llama-cache", tmp_path / "plain"
    _blob(hub, "acme/Fifo-GGUF", qwen3(), "Fifo-Q8_0.gguf")
    os.remove(hub / "models--acme--Fifo-GGUF" / "refs" / "main")
    os.mkfifo(hub / "models--acme--Fifo-GGUF" / "refs" / "main")
    cache.mkdir()
    write_model(qwen3(), cache / "bart_Old-GGUF_Old-Q5_K_M.gguf")
    os.mkfifo(cache / "manifest=bart=Old-GGUF=Q5_K_M.json")
    plain.mkdir()
    os.mkfifo(plain / "swapped.gguf")
    index = ModelIndex(
        [Root(str(hub), RootKind.HF_CACHE), Root(str(cache), RootKind.LLAMA_CACHE), Root(str(plain), RootKind.PLAIN)]
    )
    service = build_service(index=index)
    done: list[WireFitVerdictBatch] = []

    def scan_and_fit() -> None:
        index.refresh()
        done.append(
            wire.fit_batch(service, [WireFitVerdictRequest(model_id=m) for m in ("acme/Fifo-GGUF:Q8_0", "swapped")])
        )

    worker = threading.Thread(target=scan_and_fit, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert done, "the scan or the fit blocked on a FIFO"
    results = {r.model_id: r for r in done[0].results}
    assert "acme/Fifo-GGUF:Q8_0" in results  # the newest snapshot stands in for an unreadable refs/main
    if "swapped" in results:  # listed or not, a FIFO in place of a model is unreadable, never read
        assert "artifactUnreadable" in results["swapped"].limits


def test_a_file_added_under_a_watched_root_is_indexed_without_a_refresh(tmp_path: Path) -> None:
    index = ModelIndex([Root(str(tmp_path), RootKind.PLAIN)], poll_seconds=3600)  # no poll could find it
    index.start()
    try:
        assert index.wait_for(lambda: index.mode == "watch" and index.walks >= 2, timeout=30)  # the watch began
        walks = index.walks
        time.sleep(0.3)
        assert index.walks == walks  # idle: no pass over the directories
        (tmp_path / "sub").mkdir()
        write_model(qwen3(), tmp_path / "sub" / "added.gguf")
        assert index.wait_for(lambda: index.get("sub/added") is not None, timeout=30)
        generation = index.generation
        write_model(llama_gqa(), tmp_path / "sub" / "added.gguf")  # rewritten in place: the file's identity moves
        assert index.wait_for(lambda: index.generation > generation, timeout=30)
    finally:
        index.stop()


def test_a_root_created_after_start_is_indexed(tmp_path: Path) -> None:
    root = tmp_path / "later" / "models"
    index = ModelIndex(
        [Root(str(tmp_path / "there"), RootKind.PLAIN), Root(str(root), RootKind.PLAIN)], poll_seconds=3600
    )
    (tmp_path / "there").mkdir()
    index.start()
    try:
        root.mkdir(parents=True)
        write_model(qwen3(), root / "arrived.gguf")
        assert index.wait_for(lambda: index.get("arrived") is not None, timeout=30)
        write_model(qwen3(), root / "then.gguf")  # the new root is watched now
        write_model(qwen3(), tmp_path / "there" / "still.gguf")  # and the first one still is
        assert index.wait_for(lambda: index.get("then") is not None and index.get("still") is not None, timeout=30)
        assert index.mode == "watch"
    finally:
        index.stop()


def test_the_index_polls_when_the_watcher_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import watchfiles._rust_notify

    def refuse(*args: object) -> None:
        raise OSError("OS file watch limit reached")

    monkeypatch.setattr(watchfiles._rust_notify, "RustNotify", refuse)
    index = ModelIndex([Root(str(tmp_path), RootKind.PLAIN)], poll_seconds=0.05)
    index.start()
    try:
        write_model(qwen3(), tmp_path / "polled.gguf")
        assert index.wait_for(lambda: index.get("polled") is not None, timeout=30)
        assert index.mode == "poll"
    finally:
        index.stop()


def test_roots_on_network_file_systems_are_told_apart() -> None:
    from memfit.service.index import network_filesystem

    mounts = (
        "/dev/sda1 / ext4 rw 0 0\n"
        "server:/export /mnt/nas nfs4 rw 0 0\n"
        "//host/share /mnt/smb\\040share cifs rw 0 0\n"
        "user@host:/ /home/me/remote fuse.sshfs rw 0 0\n"
        "tmpfs /mnt/nas/cache tmpfs rw 0 0\n"
    )
    assert network_filesystem("/mnt/nas/models", mounts) == "nfs4"
    assert network_filesystem("/mnt/smb share/models", mounts) == "cifs"
    assert network_filesystem("/home/me/remote", mounts) == "fuse.sshfs"
    assert network_filesystem("/mnt/nas/cache/models", mounts) is None  # a local mount inside the network one
    assert network_filesystem("/mnt/nasty", mounts) is None
    assert network_filesystem("/home/me/models", mounts) is None


def test_a_root_on_a_network_file_system_is_polled_beside_the_watched_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memfit.service import index as registry

    local, remote = tmp_path / "local", tmp_path / "remote"
    local.mkdir()
    remote.mkdir()
    monkeypatch.setattr(registry, "network_filesystem", lambda path, mounts=None: "nfs4" if "remote" in path else None)
    index = ModelIndex([Root(str(local), RootKind.PLAIN), Root(str(remote), RootKind.PLAIN)], poll_seconds=0.05)
    index.start()
    try:
        write_model(qwen3(), remote / "far.gguf")
        write_model(qwen3(), local / "near.gguf")
        assert index.wait_for(lambda: index.get("far") is not None and index.get("near") is not None, timeout=30)
        assert index.mode == "watch"
    finally:
        index.stop()


def test_a_listing_that_fails_keeps_the_last_one_says_so_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EMFILE while the root is listed (as in a connection flood): the models stay listed, /health's reason names
    the root, and once listing works again the index lists it again by itself (no further change under it)."""
    root = tmp_path / "models"
    root.mkdir()
    write_model(qwen3(), root / "kept.gguf")
    service = build_service([Root(str(root), RootKind.PLAIN)], poll_seconds=3600)
    index = service.index
    index.start()
    real_scandir = os.scandir

    def exhausted(path: str | os.PathLike[str] = ".") -> Iterator[os.DirEntry[str]]:
        raise OSError(errno.EMFILE, "Too many open files", os.fspath(path))

    try:
        assert index.wait_for(lambda: index.mode == "watch" and index.get("kept") is not None, timeout=30)
        monkeypatch.setattr(os, "scandir", exhausted)
        write_model(qwen3(), root / "added.gguf")  # its notification's rescan meets the fault, and so does this
        index.refresh()
        assert index.get("kept") is not None and index.get("added") is None
        assert str(root) in index.failed and str(root) in (service.state.reason or "")  # what /health says
        monkeypatch.setattr(os, "scandir", real_scandir)
        assert index.wait_for(lambda: index.get("added") is not None and not index.failed, timeout=30)
        assert index.get("kept") is not None and service.state.reason is None
    finally:
        monkeypatch.setattr(os, "scandir", real_scandir)
        index.stop()


def test_a_root_that_vanishes_keeps_its_listing_until_it_can_be_listed(tmp_path: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    write_model(qwen3(), root / "kept.gguf")
    index = ModelIndex([Root(str(root), RootKind.PLAIN)])
    index.refresh()
    os.rename(root, tmp_path / "elsewhere")
    index.refresh()
    assert index.get("kept") is not None and str(root) in index.failed
    root.mkdir()
    write_model(qwen3(), root / "new.gguf")
    index.refresh()
    assert [a.model_id for a in index.artifacts()] == ["new"] and not index.failed


def test_a_root_renamed_away_and_replaced_is_watched_again(tmp_path: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    write_model(qwen3(), root / "first.gguf")
    index = ModelIndex([Root(str(root), RootKind.PLAIN)], poll_seconds=3600)  # no poll could find them
    index.start()
    try:
        assert index.wait_for(lambda: index.mode == "watch" and index.get("first") is not None, timeout=30)
        os.rename(root, tmp_path / "models.old")
        root.mkdir()
        write_model(qwen3(), root / "second.gguf")
        assert index.wait_for(lambda: index.get("second") is not None, timeout=30)
        write_model(qwen3(), root / "third.gguf")  # nothing else changes: only a watch of the new folder sees it
        assert index.wait_for(lambda: index.get("third") is not None, timeout=30)
        assert {a.model_id for a in index.artifacts()} == {"second", "third"}
    finally:
        index.stop()


def test_a_change_under_a_large_root_rescans_and_reads_only_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memfit.service import index as registry

    template = tmp_path / "template.gguf"
    write_model(qwen3(), template)
    root = tmp_path / "models"
    for i in range(300):
        (root / f"org{i % 30}").mkdir(parents=True, exist_ok=True)
        (root / f"org{i % 30}" / f"model-{i}.gguf").write_bytes(template.read_bytes())
    service = build_service([Root(str(root), RootKind.PLAIN)], poll_seconds=3600)
    index = service.index
    scanned: list[Region] = []
    real_scan = registry.scan_region

    def counted_scan(root: Root, region: Region) -> list[LocalArtifact]:
        scanned.append(region)
        return real_scan(root, region)

    monkeypatch.setattr(registry, "scan_region", counted_scan)
    index.start()
    try:
        assert index.wait_for(lambda: index.mode == "watch" and service.cache.reads == 300, timeout=60)
        scans, reads = index.scans, service.cache.reads
        scanned.clear()
        write_model(llama_gqa(), root / "org7" / "churn.gguf")
        assert index.wait_for(lambda: index.get("org7/churn") is not None and service.cache.reads > reads, 30)
        assert "org7/churn" in {m.model_id for m in wire.model_list(service).models}
        os.remove(root / "org7" / "churn.gguf")
        assert index.wait_for(lambda: index.get("org7/churn") is None, timeout=30)
        assert len(index.artifacts()) == 300 and index.scans == scans  # no full rescan
        assert service.cache.reads == reads + 1  # the new file's header only
        assert scanned and all(Path(r.folder).is_relative_to(root / "org7") for r in scanned)  # its folder alone
    finally:
        index.stop()


@pytest.mark.parametrize("kind", [RootKind.HF_CACHE, RootKind.LLAMA_CACHE, RootKind.LM_STUDIO])
def test_a_model_added_under_a_watched_root_of_each_kind_is_found_by_its_region(tmp_path: Path, kind: RootKind) -> None:
    root = tmp_path / "root"
    _blob(root, "acme/First-GGUF", qwen3(), "First-Q4_K_M.gguf")
    (root / "pub" / "First-GGUF").mkdir(parents=True)
    write_model(qwen3(), root / "pub" / "First-GGUF" / "First-Q8_0.gguf")
    index = ModelIndex([Root(str(root), kind)], poll_seconds=3600)
    index.start()
    try:
        assert index.wait_for(lambda: index.mode == "watch" and index.walks >= 2, timeout=30)
        scans, listed = index.scans, len(index.artifacts())
        if kind is RootKind.LM_STUDIO:
            (root / "pub" / "Second-GGUF").mkdir()
            write_model(qwen3(), root / "pub" / "Second-GGUF" / "Second-Q8_0.gguf")
            expected = "pub/Second-GGUF:Q8_0"
        elif kind is RootKind.LLAMA_CACHE:
            write_model(qwen3(), root / "bart_Old-GGUF_Old-Q5_K_M.gguf")  # the flat files older versions wrote
            (root / "manifest=bart=Old-GGUF=Q5_K_M.json").write_text(
                json.dumps({"ggufFile": {"rfilename": "Old-Q5_K_M.gguf"}})
            )
            expected = "bart/Old-GGUF:Q5_K_M"
        else:
            _blob(root, "acme/Second-GGUF", qwen3(), "Second-Q4_K_M.gguf")
            expected = "acme/Second-GGUF:Q4_K_M"
        assert index.wait_for(lambda: index.get(expected) is not None, timeout=30)
        assert len(index.artifacts()) == listed + 1 and index.scans == scans  # found by its region alone
    finally:
        index.stop()


def test_the_index_thread_weighs_the_catalog_at_half_speed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Weighing the catalog at full speed in the index's thread kept the GIL from the event loop's thread for a
    second or more after start-up (`/health` took up to 164 ms): the index's thread rests after each id as long as
    it worked on it, and weighs exactly what a listing weighs at full speed."""
    plain = build_service([], state_dir=str(tmp_path / "plain"))
    plain.listing.weigh_catalog()
    rests: list[float] = []
    paced = build_service([], state_dir=str(tmp_path / "paced"))
    monkeypatch.setattr(time, "sleep", rests.append)
    paced.listing.warm([])
    monkeypatch.undo()
    ids = [f"{entry.model_id}:{quant}" for entry, quant in paced.subjects.catalog.ids()]
    assert len(rests) == len(ids) > 100 and all(0 < seconds < 1 for seconds in rests)
    listed = {m.model_id: m.weights_bytes for m in paced.listing.models()}
    assert {i: listed[i] for i in ids} == {
        m.model_id: m.weights_bytes for m in plain.listing.models() if m.model_id in ids
    }
    assert all(listed[i] for i in ids)
