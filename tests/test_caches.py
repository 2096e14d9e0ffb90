"""Caches that are never wrong: keyed by file identity, kept across restarts, refreshed when a file changes."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import BinaryIO, NoReturn

import httpx
import pytest
from gguf import GGMLQuantizationType as QT

from memfit import wire, wire_json
from memfit.estimator.errors import EvidenceError
from memfit.estimator.fit_types import FitRequest, ModelEntry
from memfit.estimator.workload import WorkloadRequest
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers.gguf_header import GGUFHeader
from memfit.readers.header_store import HeaderStore, dumps, loads
from memfit.readers.model_roots import Root, RootKind
from memfit.service import artifact_cache
from memfit.service import listing as listing_module
from memfit.service.artifact_cache import ArtifactCache
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.gguf_writers import gemma3_4b, llama_gqa, qwen3, write_model


def _weights(client: httpx.Client, model_id: str) -> tuple[int, int]:
    result = client.post("/v1/models/fit", json={"modelId": model_id}).json()
    return result["estimate"]["parts"][0]["bytes"], result["identity"]["artifactBytes"]


def test_a_file_changed_under_a_running_server_gets_a_new_answer(tmp_path: Path) -> None:
    path = tmp_path / "changing.gguf"
    write_model(llama_gqa(), path)
    with LiveServer(build_service([Root(str(tmp_path), RootKind.PLAIN)])) as server, server.client() as c:
        first = _weights(c, "changing")
        write_model(qwen3(), path)  # replaced in place under the same name
        replaced = _weights(c, "changing")
        assert replaced != first and replaced[1] == os.path.getsize(path)
        with open(path, "ab") as f:  # grown: a new size is a new identity
            f.write(b"\0" * 4096)
        grown = _weights(c, "changing")
        assert grown == (replaced[0], replaced[1] + 4096)
        assert _weights(c, "changing") == grown  # and a cache hit now


def test_a_restarted_server_is_warm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models, store_path = tmp_path / "models", str(tmp_path / "state" / "headers.sqlite3")
    models.mkdir()
    write_model(gemma3_4b(), models / "big.gguf")  # a 262k-token vocabulary: the header read that costs
    request = [WireFitVerdictRequest(model_id="big")]

    def service() -> FitService:
        fresh = build_service([Root(str(models), RootKind.PLAIN)], state_dir=os.path.dirname(store_path))
        fresh.index.refresh()
        return fresh

    first = wire.fit_batch(service(), request).results[0]

    def no_reading(path: str) -> NoReturn:
        raise AssertionError(f"{path} was read again")

    monkeypatch.setattr(artifact_cache, "read_header", no_reading)
    restarted = wire.fit_batch(service(), request).results[0]  # a new process would start with this store
    assert restarted.estimate == first.estimate

    time.sleep(0.01)
    os.utime(models / "big.gguf")  # touched: a new mtime is a new identity, so the store has no summary
    with pytest.raises(AssertionError, match="read again"):
        wire.fit_batch(service(), request)


def test_a_rename_racing_the_read_never_poisons_the_header_store(tmp_path: Path) -> None:
    """Two files swap names while the cache reads one of them, 1,000 times: every stored summary belongs to the
    file whose identity (device and inode) it is stored under."""
    models = tmp_path / "models"
    models.mkdir()
    a, b, spare = models / "a.gguf", models / "b.gguf", models / "swap.gguf"
    write_model(llama_gqa(), a)
    write_model(qwen3(), b)
    arch_of_inode = {a.stat().st_ino: "llama", b.stat().st_ino: "qwen3"}
    store = HeaderStore(str(tmp_path / "state" / "headers.sqlite3"))
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            os.rename(a, spare)
            os.rename(b, a)
            os.rename(spare, b)
            time.sleep(0.0002)  # a rename moves both files' ctime: leave reads a chance to complete

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        for _ in range(1000):
            cache = ArtifactCache(store=store)
            try:
                identity = cache.identity([str(a)])
                time.sleep(0)  # let the swapper run between the identity and the read
                cache.facts([str(a)], identity)
            except EvidenceError:  # caught mid-rename (missing, or changed while read): never cached
                pass
    finally:
        stop.set()
        swapper.join()
    for path in (a, b):  # and once more at rest, so that the check below has rows whatever the race did
        ArtifactCache(store=store).facts([str(path)])
    with store.connection() as db:
        rows = db.execute("SELECT identity, summary FROM headers").fetchall()
    assert rows
    for identity, summary in rows:
        inode = int(identity.split("/")[1])
        assert loads(summary)[0]["general.architecture"] == arch_of_inode[inode]


def test_a_file_renamed_between_its_identity_and_its_read_is_not_cached_as_another(tmp_path: Path) -> None:
    a, b, spare = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "swap.gguf"
    write_model(llama_gqa(), a)
    write_model(qwen3(), b)
    store = HeaderStore(str(tmp_path / "state" / "headers.sqlite3"))
    cache = ArtifactCache(store=store)
    identity = cache.identity([str(a)])  # a's identity is taken ...
    os.rename(a, spare)  # ... then the files swap names before it is read
    os.rename(b, a)
    os.rename(spare, b)
    with pytest.raises(EvidenceError, match="changed while it was read"):
        cache.facts([str(a)], identity)
    with store.connection() as db:
        assert db.execute("SELECT COUNT(*) FROM headers").fetchone()[0] == 0
    assert cache.facts([str(b)]).architecture == "llama"  # the file that was a.gguf, under its own identity
    assert cache.facts([str(a)]).architecture == "qwen3"


def test_a_same_size_rewrite_with_its_mtime_restored_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    write_model(llama_gqa(), path)
    stat_before = path.stat()
    store = HeaderStore(str(tmp_path / "state" / "headers.sqlite3"))
    assert ArtifactCache(store=store).facts([str(path)]).architecture == "llama"
    data = bytearray(path.read_bytes())
    name = data.find(b"llama")  # general.architecture's value: same length, other words
    data[name : name + 5] = b"qwen3"
    with open(path, "r+b") as f:  # in place: the same inode and size
        f.write(data)
    os.utime(path, ns=(stat_before.st_atime_ns, stat_before.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat_before.st_mtime_ns and path.stat().st_size == stat_before.st_size
    assert ArtifactCache(store=store).facts([str(path)]).architecture == "qwen3"


def test_a_stored_summary_that_does_not_match_its_file_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    write_model(qwen3(), path)
    store = HeaderStore(str(tmp_path / "state" / "headers.sqlite3"))
    key = "/".join(map(str, artifact_cache.file_identity(str(path))))
    store.put(key, dumps({"general.architecture": "llama"}, (), "not the digest of this file"))
    assert ArtifactCache(store=store).facts([str(path)]).architecture == "qwen3"
    assert loads(store.get(key) or "")[0]["general.architecture"] == "qwen3"


def test_a_summary_stored_by_a_release_that_checked_less_is_read_again(tmp_path: Path) -> None:
    """A file llama.cpp refuses, stored by a release without the header checks (its row keyed by the bare digest of
    the first bytes, as then): the row is not trusted, the file is read and refused."""
    import hashlib

    from memfit.estimator.artifact import tensor_bytes
    from memfit.readers.gguf_header import read_header
    from tools.hostile import LLAMA_CPP_REFUSES

    path = tmp_path / "model.gguf"
    LLAMA_CPP_REFUSES["contradicted-width"](path)
    header = read_header(path)
    tensors = tuple((t.name, tensor_bytes(t.shape, t.ggml_type), t.ggml_type) for t in header.tensors)
    digest = hashlib.sha256(path.read_bytes()[: artifact_cache.HEAD_BYTES]).hexdigest()
    store = HeaderStore(str(tmp_path / "state" / "headers.sqlite3"))
    store.put("/".join(map(str, artifact_cache.file_identity(str(path)))), dumps(header.metadata, tensors, digest))
    with pytest.raises(EvidenceError, match="hyperparameters make it"):
        ArtifactCache(store=store).facts([str(path)])


def test_concurrent_requests_read_a_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.gguf"
    write_model(gemma3_4b(), path)
    reads = []
    real_read = artifact_cache.read_header

    def slow_read(f: BinaryIO) -> GGUFHeader:
        reads.append(1)
        time.sleep(0.05)  # long enough for every thread to ask while the first read is in flight
        return real_read(f)

    monkeypatch.setattr(artifact_cache, "read_header", slow_read)
    cache = ArtifactCache()
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.facts([str(path)]))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and len({id(r) for r in results}) == 1
    assert len(reads) == 1 and cache.reads == 1


def test_the_facts_cache_grows_with_the_index(tmp_path: Path) -> None:
    for i in range(30):
        write_model(qwen3(), tmp_path / f"m{i}.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.cache.capacity = 8  # far below the models served
    service.index.refresh()
    service.model_list()
    assert service.cache.capacity >= 30 and service.cache.reads == 30
    service.cache.version += 1  # force the listing to be derived again: every fact is still cached
    service.model_list()
    assert service.cache.reads == 30


def test_the_listing_keeps_its_entries_when_the_facts_are_dropped(tmp_path: Path) -> None:
    """Issue 28: every model's facts held in memory were most of a server's 868-930 MiB at 50,000 models. The facts
    cache holds the last few; the index's warming derives each listing entry while its facts are in memory, so the
    listing it builds after reads nothing again, and a model whose facts were dropped is read again (from the
    header store) when it is asked about, with the same answer."""
    (tmp_path / "models").mkdir()
    for i in range(6):
        write_model(llama_gqa(), tmp_path / "models" / f"m{i}.gguf")
    service = build_service([Root(str(tmp_path / "models"), RootKind.PLAIN)], state_dir=str(tmp_path / "state"))
    service.cache.facts_kept = 2
    service.index.refresh()
    asked = [FitRequest(f"m{i}", WorkloadRequest(allocated_tokens=4096)) for i in (0, 5)]
    service.listing.warm(service.index.artifacts())
    assert service.cache.reads == 6  # each header once: the listing built after warming read none again
    paths = [str(tmp_path / "models" / f"m{i}.gguf") for i in range(6)]
    assert [service.cache.holds([p]) for p in paths] == [False] * 4 + [True] * 2
    listed = [m for m in service.listing.models(read_for=0) if m.source == "local"]
    assert [(m.model_id, m.architecture, m.reading) for m in listed] == [(f"m{i}", "llama", None) for i in range(6)]
    assert service.cache.reads == 6
    kept, built = service.listing.models(), service.listings_built
    answers = [[(r.subject, r.parts) for r in service.fit_batch(asked)] for _ in range(2)]
    assert service.cache.reads == 7  # m0's facts read again, m5's still held; the second batch read nothing
    assert answers[0] == answers[1] and [s.model_id for s, _ in answers[0]] == ["m0", "m5"]
    assert answers[0][0][1] == answers[0][1][1]  # the same file's parts, read again or held
    assert service.listing.models() is kept and service.listings_built == built  # facts read again: no new listing
    service.cache.version += 1  # force the listing to be derived again: its entries are kept, no header read
    assert [m for m in service.listing.models(read_for=0) if m.source == "local"] == listed
    assert service.cache.reads == 7


def test_the_listing_is_derived_only_when_something_changed(tmp_path: Path) -> None:
    write_model(qwen3(), tmp_path / "a.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.index.refresh()
    wire_json.model_list_json(service)  # read the header (new facts: the next listing is derived once more)
    first = wire_json.model_list_json(service)
    for _ in range(50):
        assert wire_json.model_list_json(service) is first
    assert service.listings_built == 2
    write_model(llama_gqa(), tmp_path / "b.gguf")
    assert service.index.refresh()
    assert b'"b"' in wire_json.model_list_json(service) and service.listings_built >= 2
    built = service.listings_built
    time.sleep(0.01)
    write_model(llama_gqa(), tmp_path / "a.gguf")  # replaced in place: no directory changes
    assert service.index.refresh(check_files=True)
    listed = {m.model_id: m for m in wire.model_list(service).models}
    assert listed["a"].architecture == "llama" and service.listings_built > built


def test_a_listing_never_waits_for_headers_past_its_read_budget(tmp_path: Path) -> None:
    """10,000 new files held the first GET /v1/models for about a minute (every header read on the request path):
    past its budget, a request's listing names the files it has not read as being read, and is not kept."""
    for i in range(6):
        write_model(qwen3(), tmp_path / f"m{i}.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.index.refresh()
    service.cache.facts([str(tmp_path / "m3.gguf")])  # read already (by the index's thread, say)
    listed = {m.model_id: m for m in service.listing.models(read_for=0) if m.source == "local"}
    assert service.cache.reads == 1 and sorted(listed) == [f"m{i}" for i in range(6)]
    assert [i for i, m in listed.items() if m.reading] == ["m0", "m1", "m2", "m4", "m5"]
    assert listed["m0"].architecture == "" and listed["m0"].artifact_bytes is None
    assert listed["m3"].architecture == "qwen3" and not listed["m3"].reading
    body = wire.model_list(service).models  # a request's own budget: a second is plenty for six headers
    assert service.cache.reads == 6 and not any(m.reading for m in body) and len(body) > 6
    assert service.listing.models() is service.listing.models()  # a whole listing is kept


def test_a_request_reads_no_header_when_too_many_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """50,000 new files: the first GET /v1/models read headers for its whole second, though the rest could never be
    read in it (2.3 s): past READ_AT_MOST unread, a request's listing reads none and lists them all as being read."""
    for i in range(4):
        write_model(qwen3(), tmp_path / f"m{i}.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.index.refresh()
    monkeypatch.setattr(listing_module, "READ_AT_MOST", 3)
    local = [m for m in service.listing.models(read_for=60) if m.source == "local"]
    assert service.cache.reads == 0 and len(local) == 4 and all(m.reading for m in local)
    service.cache.facts([str(tmp_path / "m0.gguf")])  # read by the index's thread: three wait, which a request reads
    local = [m for m in service.listing.models(read_for=60) if m.source == "local"]
    assert service.cache.reads == 4 and not any(m.reading for m in local)


def test_the_index_thread_reads_no_header_while_a_request_lists(tmp_path: Path) -> None:
    """The index's thread warming 50,000 headers and a request's listing shared the GIL, and the first listing took
    twice its own time: warming waits while a request derives the listing, and reads on once it has."""
    for i in range(2):
        write_model(qwen3(), tmp_path / f"m{i}.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)])
    service.index.refresh()
    listing, deriving, release = service.listing, threading.Event(), threading.Event()
    derive = listing._derive

    def held_derive(deadline: float | None) -> tuple[ModelEntry, ...]:
        if deadline is not None:  # the request's
            deriving.set()
            release.wait(30)
        return derive(deadline)

    listing._derive = held_derive  # type: ignore[method-assign]
    request = threading.Thread(target=listing.models, kwargs={"read_for": 0})
    request.start()
    assert deriving.wait(30)
    warming = threading.Thread(target=listing.warm, args=(service.index.artifacts(),))
    warming.start()
    warming.join(0.5)
    assert warming.is_alive() and service.cache.reads == 0
    release.set()
    request.join(30)
    warming.join(30)
    assert not warming.is_alive() and service.cache.reads == 2


def test_a_restart_lists_every_model_from_the_store_without_reading_a_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28: a restart over 10,000 models took 7 s to list them (each summary's facts derived again); the
    listing's entries are stored with the summaries and listed at once, by the files' identities and the code that
    derived them: a file changed since, or a memfit whose estimator changed, derives its entries again."""
    from memfit.service import listing

    models, state = tmp_path / "models", str(tmp_path / "state")
    models.mkdir()
    for i in range(4):
        write_model(qwen3(), models / f"m{i}.gguf")
    write_model(llama_gqa(), models / "other.gguf")
    vocab_only = llama_gqa()
    vocab_only.tensors.clear()
    write_model(vocab_only, models / "ggml-vocab-llama.gguf")  # not a model: stored as such, never listed
    roots = [Root(str(models), RootKind.PLAIN)]
    first = build_service(roots, state_dir=state)
    first.index.refresh()
    before = [m for m in first.listing.models(read_for=None) if m.source == "local"]
    assert [m.model_id for m in before] == ["m0", "m1", "m2", "m3", "other"]

    again = build_service(roots, state_dir=state)
    again.index.refresh()
    stats: list[str] = []  # the listing's own: the index's scan took every file's identity already
    real = artifact_cache.file_identity

    def counted(path: str) -> artifact_cache.FileIdentity:
        stats.append(path)
        return real(path)

    monkeypatch.setattr(artifact_cache, "file_identity", counted)
    assert [m for m in again.listing.models(read_for=0) if m.source == "local"] == before
    assert again.cache.reads == 0 and stats == []
    monkeypatch.setattr(artifact_cache, "file_identity", real)

    write_model(qwen3(), models / "other.gguf")  # changed in place: a new identity, read again
    changed = build_service(roots, state_dir=state)
    changed.index.refresh()
    listed = {m.model_id: m for m in changed.listing.models(read_for=0) if m.source == "local"}
    assert listed["other"].reading and not any(listed[f"m{i}"].reading for i in range(4))

    monkeypatch.setattr(listing, "_derivation", lambda: "other code:")
    upgraded = build_service(roots, state_dir=state)
    upgraded.index.refresh()
    assert all(m.reading for m in upgraded.listing.models(read_for=0) if m.source == "local")


def test_the_index_thread_reads_new_files_before_any_request(tmp_path: Path) -> None:
    root, staging = tmp_path / "models", tmp_path / "staging"
    root.mkdir()
    staging.mkdir()
    service = build_service([Root(str(root), RootKind.PLAIN)])
    service.index.start()
    try:
        write_model(qwen3(), staging / "new.gguf")
        os.rename(staging / "new.gguf", root / "new.gguf")  # whole, as a downloader moves it in (a file seen
        # while it is being written is read again once it changes: its identity moves)
        assert service.index.wait_for(lambda: service.cache.reads >= 1, timeout=30)
        time.sleep(0.2)
        assert service.cache.reads == 1
        listed = [m.model_id for m in wire.model_list(service).models if m.source == "local"]
        assert listed == ["new"] and service.cache.reads == 1  # the request read nothing
    finally:
        service.index.stop()


def test_the_header_store_is_bounded_in_bytes_least_recently_used_first(tmp_path: Path) -> None:
    store = HeaderStore(str(tmp_path / "state" / "headers.sqlite3"), max_bytes=10_000)
    for i in range(10):
        store.put(f"id{i}", "x" * 900)
    assert store.stored_bytes() == 9000
    assert store.get("id0") is not None  # used: now the most recent
    store.put("id10", "y" * 2000)  # past the budget: the least recently used go, down to 90% of it
    assert store.stored_bytes() <= 9_000
    assert store.get("id0") is not None and store.get("id10") is not None
    assert store.get("id1") is None and store.get("id2") is None
    store.put("huge", "z" * 20_000)  # larger than the whole budget: not stored
    assert store.get("huge") is None


def test_reads_mark_their_summaries_used_in_batches_another_process_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's mark (the eviction order) is written with others, in one transaction, once TOUCH_BATCH are pending:
    another process's store then evicts by it."""
    from memfit.readers import header_store

    monkeypatch.setattr(header_store, "TOUCH_BATCH", 2)
    monkeypatch.setattr(header_store, "TOUCH_SECONDS", 3600.0)
    path = str(tmp_path / "state" / "headers.sqlite3")
    reader = HeaderStore(path, max_bytes=10_000)
    for i in range(10):
        reader.put(f"id{i}", "x" * 900)
    assert reader.get("id0") is not None  # one mark pending: not written yet
    other = HeaderStore(path, max_bytes=10_000)
    assert [i for i, _ in other.with_prefix("id", 1)] == ["id9"]
    assert reader.get("id1") is not None  # two pending: both written
    assert [i for i, _ in other.with_prefix("id", 2)] == ["id1", "id0"]
    other.put("id10", "y" * 2000)  # past the budget: the least recently used go, id0 and id1 kept
    assert reader.get("id0") is not None and reader.get("id1") is not None
    assert reader.get("id2") is None


def test_stores_of_several_processes_on_one_file_keep_its_budget_together(tmp_path: Path) -> None:
    """`memfit serve --workers N`: each worker's store counts its own writes and reads the others' from the file
    often enough that together they overshoot the budget by a sixteenth each at most (they stood at N times it)."""
    path = str(tmp_path / "state" / "headers.sqlite3")
    stores = [HeaderStore(path, max_bytes=100_000) for _ in range(3)]  # one connection each: as three processes
    peak = 0
    for i in range(600):
        stores[i % 3].put(f"id{i}", "x" * 1000)
        peak = max(peak, stores[0].stored_bytes())
    assert peak <= 100_000 * (1 + 3 / 16) + 1000


def test_a_summary_stored_without_tensor_shapes_is_read_again(tmp_path: Path) -> None:
    """A row stored by the release before the CPU variants (checks-2: each tensor's name, bytes and type, no
    shape) is not used: the file is read again, so AMX's packing of its matrix weights can be counted."""
    import hashlib

    from memfit.estimator.artifact import tensor_bytes, weights_on
    from memfit.estimator.cpu_variant import BY_NAME
    from memfit.readers.gguf_header import read_header

    path = tmp_path / "model.gguf"
    write_model(llama_gqa(QT.Q8_0), path)
    header = read_header(path)
    tensors = tuple((t.name, tensor_bytes(t.shape, t.ggml_type), t.ggml_type) for t in header.tensors)
    digest = hashlib.sha256(path.read_bytes()[: artifact_cache.HEAD_BYTES]).hexdigest()
    store = HeaderStore(str(tmp_path / "state" / "headers.sqlite3"))
    key = "/".join(map(str, artifact_cache.file_identity(str(path))))
    store.put(key, dumps(header.metadata, tensors, f"checks-2:{digest}"))
    facts = ArtifactCache(store=store).facts([str(path)])
    haswell, amx = (weights_on(facts, (BY_NAME[v],))[0] for v in ("haswell", "sapphirerapids"))
    assert facts.matrices and amx > haswell
    assert all(len(t) == 6 for t in loads(store.get(key) or "")[1])  # stored again, with the shapes


def test_the_listings_digest_covers_every_module_its_code_imports() -> None:
    """A stored listing entry is derived again when the code that derived it changes: every memfit module the
    reader, the estimator and the service import lies in a package or a module the digest reads."""
    import ast

    from memfit.service import listing

    root = Path(__file__).resolve().parents[1]
    imported: set[str] = set()
    for folder in ("estimator", "memfit/readers", "service"):
        for source in (root / folder).glob("*.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memfit"):
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                    imported.update(n for n in names if n.count(".") == 1)  # memfit.<module or package>
    covered = {".".join(p.split(".")[:2]) for p in listing.DERIVED_BY}
    covered |= {f"memfit.{name.removesuffix('.py')}" for name in listing.DERIVED_WITH}
    modules = {m for m in imported if not m.startswith("memfit.generated")}
    assert modules <= covered, sorted(modules - covered)
