"""The Hugging Face Hub, read for what an estimate needs of a GGUF repository: its file list at a revision and the
headers of one quant's files, by HTTP Range requests, never their weights.

huggingface_hub does the talking, imported on the first lookup (a catalog answer never imports it): it honours
HF_ENDPOINT, HF_TOKEN (gated and private repositories), HF_HUB_OFFLINE, proxies, and the redirects to LFS or Xet
storage. What memfit adds:
- the file list at a revision in one request (`model_info` with file metadata, `GET /api/models/{repo}/revision/
  {revision}?blobs=true`): the commit the revision names, each file's size and hash. The tree API
  (`list_repo_tree`) would take a second request, and huggingface_hub sends it without a timeout;
- a file's header: `get_hf_file_metadata` (a HEAD of `resolve/{commit}/{file}`: where the bytes are, their ETag and
  size), then ranged GETs, forward only, each at least WINDOW bytes and starting where the bytes held end, each
  checked (a 206 of the range asked, of a file of the listed size, under the same ETag), at most MAX_FETCHED bytes
  a file, parsed by gguf_header's own walk with its checks and caps. The token goes to the Hub's own address
  only, never to the storage a file redirects to;
- a cache in the state directory's header store (bounded in bytes, safe for several processes): listings (fresh
  for LISTING_TTL_S, a commit's for ever, any when offline), headers by (repository, commit, file, ETag), each
  record checked against its digest (a damaged one is fetched again), and the models answered (GET /v1/models);
- lookups in parallel within a deadline; a failure is a HubMiss that says why, never an exception.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from types import ModuleType
from typing import TypeVar, cast
from urllib.parse import urlsplit

from memfit.estimator.artifact import HubArtifact, HubMiss, Lookup, RemoteHeader, Tally
from memfit.estimator.model_ids import COMMIT, HubId, hub_id
from memfit.quant_names import DEFAULT_QUANT
from memfit.readers.gguf_header import GGUFError, GGUFHeader, KeyType, TensorInfo, Value, read_sized
from memfit.readers.header_store import HeaderStore, decode_value, encode_value
from memfit.readers.model_roots import PROJECTOR, choose_projector, group_splits, quant_tag

log = logging.getLogger("memfit.hub")

DEFAULT_ENDPOINT = "https://huggingface.co"
WINDOW = 1 << 20  # the least one ranged read asks for: a header's first read, and the step past what is held
MAX_FETCHED = 64 << 20  # the most read of one file's header (real ones are under 20 MiB, most under 10)
LISTING_TTL_S = 3600.0  # how long a branch's listing (the commit it names, its files) is used before it is asked again
DEADLINE_S = 30.0  # a batch waits this long for its Hub lookups; those still running are answered without the Hub
TIMEOUT_S = 10.0  # one request's read timeout (its connection: CONNECT_TIMEOUT_S)
CONNECT_TIMEOUT_S = 5.0
READ_LIMIT_S = 60.0  # the most one ranged read may take in all (a server that trickles its bytes is dropped)
WORKERS = 8  # lookups at once (each reads its files one after another)
# A lookup is answered again from memory this long (a batch's answers, then its leftOut; a plan's quants), then from
# the state directory's cache; at most REMEMBERED of them (a batch names at most 32 models, a plan 64 quants).
REMEMBER_S = 30.0
REMEMBERED = 64
MAX_GGUF_FILES = 4096  # GGUF files of one listing kept; a repository with more is cut there
MAX_MODELS_LISTED = 1000  # models asked before that GET /v1/models lists
CHUNK = 1 << 16  # a response body is taken in pieces of at most this much
NAMED_QUANTS = 16  # a reason names at most this many of a repository's quants

CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
TRUE = {"1", "ON", "YES", "TRUE"}  # what huggingface_hub reads as a set switch

T = TypeVar("T")


@dataclass(frozen=True)
class HubSettings:
    """Whether and where the Hub is asked. `offline`: answers come from memfit's cache of earlier lookups only."""

    endpoint: str = DEFAULT_ENDPOINT
    offline: bool = False
    deadline_s: float = DEADLINE_S
    timeout_s: float = TIMEOUT_S
    listing_ttl_s: float = LISTING_TTL_S

    @classmethod
    def from_environment(cls, offline: bool = False, environ: dict[str, str] | None = None) -> HubSettings:
        """HF_ENDPOINT (else the Hub itself); offline when asked, or when HF_HUB_OFFLINE is set as huggingface_hub
        reads it."""
        env = os.environ if environ is None else environ
        endpoint = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        switches = (env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or "").upper()
        return cls(endpoint=endpoint, offline=offline or switches in TRUE)

    @property
    def shown(self) -> str:
        """The endpoint as answers and logs name it: without a user or password it may carry."""
        parts = urlsplit(self.endpoint)
        return parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()


class HubError(Exception):
    """A lookup that failed: `reason` says why in words fit for a user (never a token), `absent` when the Hub says
    there is no such repository, revision or file, `offline` when memfit's cache did not hold it and the Hub was
    not to be asked."""

    def __init__(self, reason: str, absent: bool = False, offline: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.absent = absent
        self.offline = offline

    def miss(self) -> HubMiss:
        return HubMiss(self.reason, self.absent, self.offline)


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    etag: str  # the file's hash as the Hub states it (its LFS sha256, else its git blob id)


@dataclass(frozen=True)
class Listing:
    """A repository's GGUF files at the commit a revision named when it was listed."""

    repo: str  # as the Hub spells it
    revision: str
    commit: str
    files: tuple[HubFile, ...]
    listed_at: float

    def file(self, path: str) -> HubFile:
        return next(f for f in self.files if f.path == path)


@dataclass
class RemoteFile:
    """Where a file's bytes are (a redirect's target, or the resolve URL itself), their ETag and size as the Hub
    states them, and the ETag its storage answered the first ranged read with (every later read must answer the
    same: the file did not change between reads)."""

    path: str
    location: str
    etag: str
    size: int
    storage_etag: str | None = None


@dataclass(frozen=True)
class Chosen:
    model_id: str
    paths: tuple[str, ...]
    projector: str | None


def artifacts_of(listing: Listing) -> tuple[dict[str, tuple[str, ...]], list[tuple[str, tuple[str, ...]]], list[str]]:
    """The listing's model file sets by quant tag (upper case; the first file set of each tag), all of them, and
    its projectors: grouped and named as a hub cache's snapshot is (model_roots)."""
    paths = [f.path for f in listing.files]
    projectors = [p for p in paths if PROJECTOR.match(p.rpartition("/")[2])]
    groups = group_splits([p for p in paths if p not in projectors])
    by_tag: dict[str, tuple[str, ...]] = {}
    for _, files in groups:
        tag = quant_tag(files[0].rpartition("/")[2])
        if tag:
            by_tag.setdefault(tag, files)
    return by_tag, groups, projectors


def choose(listing: Listing, tag: str) -> Chosen:
    """The file set of the quant `tag` names (its default, Q4_K_M, or the repository's only one, when none), and
    the projector loaded with it; HubError (absent) naming the quants there are when it has no such file."""
    by_tag, groups, projectors = artifacts_of(listing)
    wanted = tag.upper()
    files = by_tag.get(wanted or DEFAULT_QUANT)
    if files is None and not wanted and len(groups) == 1:
        files = groups[0][1]
    if files is None:
        tags = sorted(by_tag)
        more = f" and {len(tags) - NAMED_QUANTS} more" if len(tags) > NAMED_QUANTS else ""
        has = f"it has {', '.join(tags[:NAMED_QUANTS])}{more}" if tags else "it has no GGUF model file"
        raise HubError(
            f"{listing.repo} has no {wanted or DEFAULT_QUANT} GGUF file at {listing.revision} ({has})", absent=True
        )
    found = quant_tag(files[0].rpartition("/")[2])
    model_id = f"{listing.repo}:{found}" if found else listing.repo
    return Chosen(model_id, files, choose_projector(projectors, found))


def quants_of(listing: Listing) -> tuple[str, ...]:
    """The quant tags of a repository's model files (what `memfit plan org/repo` plans)."""
    return tuple(artifacts_of(listing)[0])


# --- huggingface_hub ---------------------------------------------------------------------------------------------


def hub_library() -> ModuleType:
    """huggingface_hub, imported on first use. Its telemetry is off unless HF_HUB_DISABLE_TELEMETRY says otherwise:
    memfit asks the Hub for file lists and header bytes only, and huggingface_hub's User-Agent would otherwise
    fetch a registry of AI agents from the Hub (`/api/agent-harnesses`, once a day) to name the one running it."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    import huggingface_hub
    import huggingface_hub.constants
    import huggingface_hub.errors
    import huggingface_hub.utils

    return huggingface_hub


@contextlib.contextmanager
def _hub_errors(what: str, endpoint: str) -> Iterator[None]:
    """huggingface_hub's and httpx's failures as HubError, in words that never carry a header or a token."""
    import httpx2

    errors = hub_library().errors
    try:
        yield
    except errors.OfflineModeIsEnabled:
        raise HubError("the Hub is not to be reached (HF_HUB_OFFLINE)", offline=True) from None
    except errors.GatedRepoError:
        raise HubError(
            f"{what} is gated: accept its conditions on the Hub and set HF_TOKEN to a token with access"
        ) from None
    except errors.RepositoryNotFoundError:
        raise HubError(f"{endpoint} has no repository {what} (or it is private: set HF_TOKEN)", absent=True) from None
    except errors.RevisionNotFoundError:
        raise HubError(f"{endpoint} has no revision {what}", absent=True) from None
    except errors.EntryNotFoundError:
        raise HubError(f"{endpoint} has no file {what}", absent=True) from None
    except errors.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "an error"
        raise HubError(f"{endpoint} answered {status} for {what}") from None
    except httpx2.TimeoutException:
        raise HubError(f"{endpoint} did not answer for {what} in time") from None
    except (httpx2.HTTPError, OSError) as exc:
        raise HubError(f"cannot reach {endpoint} for {what} ({type(exc).__name__})") from None
    except ValueError as exc:  # huggingface_hub's own checks of an id (HFValidationError)
        raise HubError(f"{what} is not a Hub repository id ({type(exc).__name__})", absent=True) from None


def _model_file(name: object) -> bool:
    """A GGUF file's path in a repository that can be an id and a URL's path: printable, relative, no `..`."""
    if not isinstance(name, str) or not name.lower().endswith(".gguf") or not name.isprintable():
        return False
    return not name.startswith("/") and "\\" not in name and ".." not in name.split("/") and len(name) <= 1024


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.lower()


class HubClient:
    """The three requests memfit makes of the Hub, through huggingface_hub and its HTTP session."""

    def __init__(self, settings: HubSettings) -> None:
        self.settings = settings

    def _timeout(self) -> object:
        import httpx2

        return httpx2.Timeout(self.settings.timeout_s, connect=CONNECT_TIMEOUT_S)

    def listing(self, repo: str, revision: str, tally: Tally) -> Listing:
        """The repository's GGUF files at `revision` and the commit it names, in one request."""
        tally.requests += 1
        with _hub_errors(f"{repo}@{revision}", self.settings.shown):
            info = (
                hub_library()
                .HfApi(endpoint=self.settings.endpoint)
                .model_info(repo, revision=revision, files_metadata=True, timeout=self.settings.timeout_s)
            )
        commit = info.sha or ""
        if not COMMIT.match(commit):
            raise HubError(f"the Hub named no commit for {repo}@{revision}")
        named = info.id if isinstance(info.id, str) and info.id.lower() == repo.lower() else repo
        files: list[HubFile] = []
        for sibling in info.siblings or ():
            name = sibling.rfilename
            if not _model_file(name) or len(files) >= MAX_GGUF_FILES:
                continue
            lfs = sibling.lfs
            size = lfs.size if lfs is not None else sibling.size
            etag = lfs.sha256 if lfs is not None else sibling.blob_id
            if isinstance(size, int) and size >= 0 and etag:
                files.append(HubFile(name, size, str(etag)))
        return Listing(named, revision, commit, tuple(sorted(files, key=lambda f: f.path)), time.time())

    def open(self, repo: str, commit: str, file: HubFile, tally: Tally) -> RemoteFile:
        """Where the file's bytes are, their ETag and size (a HEAD of its resolve URL)."""
        hf = hub_library()
        endpoint = self.settings.endpoint
        tally.requests += 1
        with _hub_errors(f"{repo}/{file.path}", self.settings.shown):
            url = hf.hf_hub_url(repo, file.path, revision=commit, endpoint=endpoint)
            meta = hf.get_hf_file_metadata(url, timeout=self.settings.timeout_s, endpoint=endpoint)
        size = meta.size if meta.size is not None else file.size
        if size != file.size:
            raise HubError(f"{repo}/{file.path} is {size} bytes, but the Hub lists {file.size}")
        return RemoteFile(file.path, meta.location, meta.etag or file.etag, size)

    def read(self, remote: RemoteFile, start: int, end: int, tally: Tally) -> bytes:
        """Bytes [start, end) of the file, in one ranged GET that must answer exactly them (206)."""
        utils = hub_library().utils
        headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        if _origin(remote.location) == _origin(self.settings.endpoint):  # the token goes to the Hub only
            headers.update(utils.build_hf_headers())
        tally.requests += 1
        with (
            _hub_errors(remote.path, self.settings.shown),
            utils.get_session().stream("GET", remote.location, headers=headers, timeout=self._timeout()) as response,
        ):
            _check_range(response.status_code, response.headers, remote, start, end)
            body = bytearray()
            began = time.monotonic()
            for piece in response.iter_bytes(CHUNK):
                tally.bytes += len(piece)
                body += piece
                if len(body) > end - start:
                    raise HubError(f"{remote.path}: the server sent more than the {end - start} bytes asked")
                if time.monotonic() - began > READ_LIMIT_S:
                    raise HubError(f"{remote.path}: the server took over {READ_LIMIT_S:g} s for {end - start} bytes")
        if len(body) != end - start:
            raise HubError(f"{remote.path}: the server sent {len(body)} of the {end - start} bytes asked")
        return bytes(body)


def _check_range(status: int, headers: object, remote: RemoteFile, start: int, end: int) -> None:
    """HubError unless the response is the 206 of bytes [start, end) of the file as it was opened."""
    get = headers.get  # type: ignore[attr-defined]
    if status == 200:
        raise HubError(
            f"{remote.path}: the server ignored the Range request (200, the whole file); memfit reads headers only"
        )
    if status == 416:
        raise HubError(
            f"{remote.path}: the server refused the range {start}-{end - 1} (416): the file is not as listed"
        )
    if status in (401, 403):
        raise HubError(f"{remote.path}: the file's storage refused access ({status})")
    if status == 404:
        raise HubError(f"{remote.path}: the file's storage has no such file (404)")
    if status != 206:
        raise HubError(f"{remote.path}: the file's storage answered {status}")
    got = CONTENT_RANGE.match(get("Content-Range", "").strip())
    if got is None or (int(got[1]), int(got[2]) + 1, int(got[3])) != (start, end, remote.size):
        raise HubError(f"{remote.path}: the server answered another range than bytes {start}-{end - 1}/{remote.size}")
    etag = (get("ETag") or "").removeprefix("W/").strip('"')
    if remote.storage_etag is None:
        remote.storage_etag = etag
    elif etag != remote.storage_etag:
        raise HubError(f"{remote.path}: the file changed on the Hub while its header was read (its ETag moved)")


class RangedFile:
    """A file on the Hub as gguf_header reads it: seek and read, forward only. A read of bytes not held is one
    ranged GET of at least `window` bytes, from where the held bytes end when the read starts within them (nothing
    is fetched twice), else from the read's start (a skipped stretch, such as a long numeric array, is never
    fetched); past `cap` bytes fetched the header is not a model's."""

    def __init__(
        self, fetch: Callable[[int, int], bytes], size: int, window: int = WINDOW, cap: int = MAX_FETCHED
    ) -> None:
        self.fetch, self.size, self.window, self.cap = fetch, size, window, cap
        self.pos = self.base = self.fetched = 0
        self.buf = b""

    def seek(self, offset: int, whence: int = 0, /) -> int:
        self.pos = offset
        return offset

    def read(self, n: int = -1, /) -> bytes:
        start = self.pos
        end = self.size if n < 0 else min(self.size, start + n)
        held = self.base + len(self.buf)
        if not (self.base <= start and end <= held):
            keep, first = (self.buf[start - self.base :], held) if self.base <= start <= held else (b"", start)
            last = min(self.size, max(end, first + self.window))
            if self.fetched + last - first > self.cap:
                raise GGUFError(f"the header runs past {self.cap >> 20} MiB: not a model's")
            self.buf, self.base = keep + self.fetch(first, last), start
            self.fetched += last - first
        self.pos = end
        return self.buf[start - self.base : end - self.base]


# --- the cache's records --------------------------------------------------------------------------------------------


def _sealed(body: dict) -> str:
    """A record with the digest of its body, so that a damaged one is known."""
    text = json.dumps(body, separators=(",", ":"))
    return json.dumps({"sha256": hashlib.sha256(text.encode()).hexdigest(), "body": text})


def _opened(text: str) -> dict:
    """A record's body; ValueError when it is not one sealed whole."""
    record = json.loads(text)
    body = record["body"]
    if hashlib.sha256(body.encode()).hexdigest() != record["sha256"]:
        raise ValueError("the record does not match its digest")
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ValueError("not a record")
    return value


def _listing_record(listing: Listing) -> str:
    files = [[f.path, f.size, f.etag] for f in listing.files]
    return _sealed(
        dict(repo=listing.repo, revision=listing.revision, commit=listing.commit, files=files, at=listing.listed_at)
    )


def _listing_from(text: str) -> Listing:
    b = _opened(text)
    files = tuple(HubFile(str(p), int(s), str(e)) for p, s, e in b["files"])
    return Listing(str(b["repo"]), str(b["revision"]), str(b["commit"]), files, float(b["at"]))


def _header_record(found: RemoteHeader) -> str:
    h = found.header
    body: dict = {"path": found.path, "etag": found.etag, "size": found.size, "unreadable": found.unreadable}
    body.update(fetched=found.fetched_bytes, requests=found.requests)
    if h is not None:
        body["header"] = {
            "version": h.version,
            "metadata": {k: encode_value(v) for k, v in h.metadata.items()},
            "key_types": {k: list(t) for k, t in h.key_types.items()},
            "tensors": [[t.name, list(t.shape), t.ggml_type, t.offset] for t in h.tensors],
            "alignment": h.alignment,
            "data_offset": h.data_offset,
            "file_size": h.file_size,
        }
    return _sealed(body)


def _header_from(text: str) -> RemoteHeader:
    b = _opened(text)
    header = None
    if (h := b.get("header")) is not None:
        header = GGUFHeader(
            version=int(h["version"]),
            metadata={str(k): cast("Value", decode_value(v)) for k, v in h["metadata"].items()},
            tensors=tuple(TensorInfo(str(n), tuple(int(d) for d in s), int(t), int(o)) for n, s, t, o in h["tensors"]),
            alignment=int(h["alignment"]),
            data_offset=int(h["data_offset"]),
            file_size=int(h["file_size"]),
            key_types={str(k): KeyType(*t) for k, t in h["key_types"].items()},
        )
    fetched, requests = int(b["fetched"]), int(b["requests"])
    return RemoteHeader(str(b["path"]), str(b["etag"]), int(b["size"]), header, str(b["unreadable"]), fetched, requests)


LISTING_KEY, HEADER_KEY, MODEL_KEY = "hub-listing:", "hub-header:", "hub-model:"


# --- lookups --------------------------------------------------------------------------------------------------------


class HubModels:
    """Models of the Hub by id, read once and cached (the state directory's header store; `store` None: in memory,
    for one lookup's batch). `version` moves when a model is answered that GET /v1/models did not list."""

    def __init__(self, settings: HubSettings, store: HeaderStore | None, client: HubClient | None = None) -> None:
        self.settings = settings
        self.store = store
        self.client = client or HubClient(settings)
        self.version = 0
        self._lock = threading.Lock()
        self._remembered: OrderedDict[tuple, tuple[float, object]] = OrderedDict()
        self._running: dict[object, Future] = {}
        self._workers = threading.BoundedSemaphore(WORKERS)
        self._listed: dict[str, dict] = {}  # the models this process recorded, as recorded

    # -- a batch's lookups, at once

    def lookup(self, model_ids: Sequence[str], cancelled: Callable[[], bool] = lambda: False) -> dict[str, Lookup]:
        """What the Hub holds for each Hub id among `model_ids` (others are left out of the answer), looked up in
        parallel; one still running at the deadline (or when `cancelled()`) is a HubMiss that says so, and goes on
        in the background to fill the cache for the next ask."""
        wanted = {m: found for m in dict.fromkeys(model_ids) if (found := hub_id(m)) is not None}
        work = {m: (hid.key, functools.partial(self._resolved, hid)) for m, hid in wanted.items()}
        return self._gather(work, cancelled)

    def quants(
        self, repos: Sequence[str], cancelled: Callable[[], bool] = lambda: False
    ) -> dict[str, tuple[str, ...] | HubMiss]:
        """Each Hub repository's quant tags at its revision (from its file list), or a HubMiss; in parallel, as
        `lookup`. Ids that name a quant are left out."""
        wanted = {r: found for r in dict.fromkeys(repos) if (found := hub_id(r)) is not None and not found.tag}
        work = {r: ((*hid.key, "quants"), functools.partial(self._quants, hid)) for r, hid in wanted.items()}
        return self._gather(work, cancelled)

    def _gather(self, work: Mapping[str, tuple[tuple, Callable[[], object]]], cancelled: Callable[[], bool]) -> dict:
        """Each item's answer: remembered, else its work done (once per key however many ask) within the deadline."""
        answers: dict[str, object] = {}
        pending: dict[str, tuple[tuple, Future]] = {}
        for name, (key, do) in work.items():
            known = self._recalled(key)
            if known is not None:
                answers[name] = known
            else:
                pending[name] = key, self._started(key, do)
        deadline = time.monotonic() + self.settings.deadline_s
        left = {future for _, future in pending.values()}
        while left and not cancelled() and (remaining := deadline - time.monotonic()) > 0:
            _, left = wait(left, timeout=min(remaining, 0.1), return_when=FIRST_COMPLETED)
        late = HubMiss(f"the Hub did not answer within {self.settings.deadline_s:g} s")
        for name, (key, future) in pending.items():
            answers[name] = future.result() if future.done() else self._remember(key, late, replace=False)
        return answers

    def _started(self, key: tuple, do: Callable[[], object]) -> Future:
        """The running work for `key`, started when none is: on a daemon thread, at most WORKERS at once, so that
        a lookup still running past its deadline never holds the process's exit."""
        with self._lock:
            future = self._running.get(key)
            if future is not None:
                return future
            future = self._running[key] = Future()
        future.add_done_callback(lambda _: self._finished(key))

        def run() -> None:
            with self._workers:
                try:
                    future.set_result(do())
                except BaseException as exc:  # noqa: BLE001  # kept for whoever waits on it, who raises it
                    future.set_exception(exc)

        threading.Thread(target=run, name="memfit-hub", daemon=True).start()
        return future

    def _finished(self, key: object) -> None:
        with self._lock:
            self._running.pop(key, None)

    def _quants(self, hid: HubId) -> tuple[str, ...] | HubMiss:
        try:
            found: tuple[str, ...] | HubMiss = quants_of(self._listing(hid, Tally()))
        except HubError as exc:
            found = exc.miss()
        except Exception as exc:  # a fault of this lookup only (a library's surprise): never the batch's
            log.exception("hub: %s could not be listed", hid.repo)
            found = HubMiss(f"the listing failed ({type(exc).__name__})")
        return self._remember((*hid.key, "quants"), found)

    def _recalled(self, key: tuple) -> object | None:
        """A lookup remembered, as an answer that fetched nothing (an earlier ask fetched what it holds)."""
        with self._lock:
            held = self._remembered.get(key)
            if held is None:
                return None
            until, found = held
            if time.monotonic() > until:
                del self._remembered[key]
                return None
            self._remembered.move_to_end(key)
        return dataclasses.replace(found, tally=Tally()) if isinstance(found, HubArtifact) else found

    def _remember(self, key: tuple, found: T, replace: bool = True) -> T:
        """Hold `found` for the next asks, REMEMBER_S; with `replace` False, an answer that came meanwhile is kept
        and returned instead."""
        with self._lock:
            if not replace and key in self._remembered:
                return self._remembered[key][1]  # type: ignore[return-value]
            self._remembered[key] = (time.monotonic() + REMEMBER_S, found)
            self._remembered.move_to_end(key)
            while len(self._remembered) > REMEMBERED:
                self._remembered.popitem(last=False)
        return found

    def _resolved(self, hid: HubId) -> Lookup:
        """One model's lookup; never raises (a failure is a HubMiss, said in the log)."""
        tally = Tally()
        try:
            found: Lookup = self._read(hid, tally)
        except HubError as exc:
            found = exc.miss()
        except Exception as exc:  # a fault of this lookup only (a library's surprise): never the batch's
            log.exception("hub: %s could not be looked up", hid.repo)
            found = HubMiss(f"the lookup failed ({type(exc).__name__})")
        if isinstance(found, HubMiss) and not found.offline:
            log.info("hub: %s:%s@%s: %s", hid.repo, hid.tag or DEFAULT_QUANT, hid.revision, found.reason)
        return self._remember(hid.key, found)

    def _read(self, hid: HubId, tally: Tally) -> HubArtifact:
        listing = self._listing(hid, tally)
        chosen = choose(listing, hid.tag)
        shards = tuple(self._header(listing, path, tally) for path in chosen.paths)
        projector, problem = None, ""
        if chosen.projector is not None:
            try:
                projector = self._header(listing, chosen.projector, tally)
            except HubError as exc:
                problem = exc.reason
        return HubArtifact(
            chosen.model_id, listing.repo, listing.commit, self.settings.shown, shards, projector, problem, tally
        )

    # -- the cache, and what is not in it

    def _listing(self, hid: HubId, tally: Tally) -> Listing:
        """The repository's listing at the revision: the cache's while fresh (a commit's for ever, any offline)."""
        key = f"{LISTING_KEY}{hid.repo.lower()}@{hid.revision}"
        listing = self._stored(key, _listing_from)
        immutable = COMMIT.match(hid.revision) is not None
        if listing is not None and (
            self.settings.offline or immutable or time.time() - listing.listed_at < self.settings.listing_ttl_s
        ):
            return listing
        if self.settings.offline:
            raise HubError(
                f"{hid.repo}@{hid.revision} is not in memfit's cache of the Hub, which is not to be reached (offline)",
                offline=True,
            )
        listing = self._shared(key, lambda: self.client.listing(hid.repo, hid.revision, tally))
        self._store(key, _listing_record(listing))
        return listing

    def _header(self, listing: Listing, path: str, tally: Tally) -> RemoteHeader:
        file = listing.file(path)
        key = f"{HEADER_KEY}{listing.repo.lower()}@{listing.commit}:{path}#{file.etag}"
        found = self._stored(key, _header_from)
        if found is not None:
            return found
        if self.settings.offline:
            raise HubError(
                f"{listing.repo}/{path} is not in memfit's cache of the Hub, which is not to be reached (offline)",
                offline=True,
            )
        return self._shared(key, lambda: self._fetched(listing, file, key, tally))

    def _fetched(self, listing: Listing, file: HubFile, key: str, tally: Tally) -> RemoteHeader:
        """The header read from the Hub, and cached under the ETag the Hub answered with (the listing's, but for a
        Hub that names files otherwise: then the listing is stored again with it)."""
        before = Tally(tally.requests, tally.bytes)
        remote = self.client.open(listing.repo, listing.commit, file, tally)
        reader = RangedFile(lambda start, end: self.client.read(remote, start, end, tally), remote.size)
        try:
            header, unreadable = read_sized(reader, remote.size), ""
        except GGUFError as exc:  # the file is there, and not a GGUF llama.cpp could load: said, and cached so
            header, unreadable = None, f"not a readable GGUF file: {exc}"
        fetched, requests = tally.bytes - before.bytes, tally.requests - before.requests
        found = RemoteHeader(file.path, remote.etag, remote.size, header, unreadable, fetched, requests)
        if remote.etag != file.etag:
            key = key.rpartition("#")[0] + "#" + remote.etag
            files = tuple(HubFile(f.path, f.size, remote.etag) if f is file else f for f in listing.files)
            relisted = Listing(listing.repo, listing.revision, listing.commit, files, listing.listed_at)
            self._store(f"{LISTING_KEY}{listing.repo.lower()}@{listing.revision}", _listing_record(relisted))
        self._store(key, _header_record(found))
        return found

    def _shared(self, key: object, work: Callable[[], T]) -> T:
        """`work()`, done once for concurrent callers with the same key: the others wait for its result."""
        with self._lock:
            running = self._running.get(key)
            mine = running is None
            if mine:
                running = self._running[key] = Future()
        assert running is not None
        if not mine:
            return running.result()
        try:
            value = work()
        except BaseException as exc:
            running.set_exception(exc)
            raise
        else:
            running.set_result(value)
            return value
        finally:
            self._finished(key)

    def _stored(self, key: str, read: Callable[[str], T]) -> T | None:
        """A cached record; None when there is none, or when it is damaged (then it is dropped and read again)."""
        text = self.store.get(key) if self.store is not None else None
        if text is None:
            return None
        try:
            return read(text)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            log.warning("hub: a damaged cache record (%s) is read again from the Hub: %s", key, type(exc).__name__)
            if self.store is not None:
                self.store.delete(key)
            return None

    def _store(self, key: str, text: str) -> None:
        if self.store is not None:
            self.store.put(key, text)

    # -- what GET /v1/models lists

    def remember_model(self, entry: dict) -> None:
        """Record a model answered from the Hub (its id, revision, architecture, quant, context limit, projector),
        for GET /v1/models; `version` moves when it is one not listed yet."""
        model_id = str(entry["model_id"])
        with self._lock:
            new = self._listed.get(model_id) != entry
            self._listed[model_id] = entry
        if new:
            self._store(f"{MODEL_KEY}{model_id.lower()}", _sealed(entry))
            with self._lock:
                self.version += 1

    def models(self) -> list[dict]:
        """The models answered from the Hub before (by any process of this state directory), most recent first."""
        if self.store is None:
            return []
        entries = []
        for _, text in self.store.with_prefix(MODEL_KEY, MAX_MODELS_LISTED):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                entries.append(_opened(text))
        return entries
