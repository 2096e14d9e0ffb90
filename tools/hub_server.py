"""A local Hugging Face Hub for tests: the routes huggingface_hub and memfit use, over real GGUF files on disk.

Two HTTP servers on 127.0.0.1 (stdlib, a thread each): the Hub (`endpoint`, what HF_ENDPOINT names) and the file
storage its resolve route redirects to (`storage`, another origin, as the Hub's LFS and Xet storage are):

- `GET /api/models/{repo}/revision/{revision}` (`?blobs=true`: each file's size, git blob id and LFS sha256): the
  commit the revision names and the files at it; `GET /api/models/{repo}/tree/{revision}` the same as the tree API;
- `HEAD`/`GET /{repo}/resolve/{revision}/{file}`: a 302 to the file's blob in the storage, with `X-Repo-Commit`,
  `X-Linked-Etag` and `X-Linked-Size`, as the Hub answers for an LFS file;
- the storage's `GET /blobs/{sha256}`: the file, honouring `Range` with a 206 (`Content-Range`, an `ETag` of its own).

Faults a repository can be given (`HubRepo.fault`): `ignore-range` (200 and the whole file), `416` (every range
refused), `etag-change` (the storage's ETag moves after the first read), `slow` (every storage answer waits
`delay` s), `same-origin` (the resolve route serves the bytes itself instead of redirecting). A gated repository
answers 401 (`X-Error-Code: GatedRepo`) on its files without the token, a private one 401 (`RepoNotFound`)
everywhere; an unknown repository, revision or file is a 404 with the Hub's error code. Every request is recorded
(`requests`): which server, method, path, status, the body bytes sent, whether it carried an Authorization header.

`python -m tools.hub_server DIR` serves each `DIR/org/repo/` folder's GGUF files as the repository `org/repo` until
stopped, and prints its endpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "hf_localhubtoken0123456789"  # the token a gated or private repository accepts
FAULTS = ("", "ignore-range", "416", "etag-change", "slow", "same-origin")
BLOCK = 1 << 16


@dataclass
class HubRepo:
    """A repository: its files (path in the repository -> a file on disk) at its one commit."""

    repo: str
    files: dict[str, Path]
    commit: str = ""
    gated: bool = False
    private: bool = False
    fault: str = ""
    delay: float = 0.0

    def __post_init__(self) -> None:
        assert self.fault in FAULTS, self.fault
        self.commit = self.commit or hashlib.sha1(self.repo.encode()).hexdigest()


@dataclass(frozen=True)
class Request:
    server: str  # "hub" or "storage"
    method: str
    path: str
    status: int
    sent: int  # body bytes written
    authorized: bool  # whether it carried an Authorization header
    range: str


@dataclass
class _Blob:
    repo: HubRepo
    path: str
    file: Path
    sha256: str
    size: int
    reads: int = 0


@dataclass
class LocalHub:
    """The two servers, started by `start` (or `with`), over `repos`."""

    repos: Sequence[HubRepo]
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._blobs: dict[str, _Blob] = {}
        for repo in self.repos:
            for path, file in repo.files.items():
                st = os.stat(file)
                sha = hashlib.sha256(f"{repo.repo}/{path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
                self._blobs[sha] = _Blob(repo, path, Path(file), sha, st.st_size)
        self._servers = [ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, name)) for name in ("hub", "storage")]
        for server in self._servers:
            server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.storage = f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def start(self) -> LocalHub:
        for server in self._servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def taken(self) -> list[Request]:
        """The requests recorded since the last call, and forget them."""
        with self._lock:
            taken, self.requests = self.requests, []
        return taken

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def repo(self, name: str) -> HubRepo | None:
        return next((r for r in self.repos if r.repo.lower() == name.lower()), None)

    def blob(self, repo: HubRepo, path: str) -> _Blob | None:
        return next((b for b in self._blobs.values() if b.repo is repo and b.path == path), None)

    def blob_by_sha(self, sha: str) -> _Blob | None:
        return self._blobs.get(sha)


_MODEL_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<kind>revision|tree)/(?P<revision>[^/]+)$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<path>.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    """Answers as the Hub (role "hub") or as its storage; _handler binds it to a LocalHub."""

    protocol_version = "HTTP/1.1"
    local_hub: LocalHub
    role: str

    def log_message(self, *args: object) -> None:  # quiet: the requests are recorded instead
        pass

    def handle(self) -> None:
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # a client that closed: nothing to say
            super().handle()

    def do_GET(self) -> None:
        self._route()

    def do_HEAD(self) -> None:
        self._route()

    def _route(self) -> None:
        self.sent, self.status = 0, 0
        try:
            if self.role == "hub":
                self._hub()
            else:
                self._storage()
        except (BrokenPipeError, ConnectionResetError):  # the client had what it wanted
            self.close_connection = True
        finally:
            self.local_hub.record(
                Request(
                    self.role,
                    self.command,
                    self.path,
                    self.status,
                    self.sent,
                    "Authorization" in self.headers,
                    self.headers.get("Range", ""),
                )
            )

    # -- answers

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
            self.sent += len(body)

    def _error(self, status: int, code: str, message: str = "") -> None:
        headers = {"X-Error-Code": code, "Content-Type": "application/json"}
        if message:
            headers["X-Error-Message"] = message
        self._answer(status, json.dumps({"error": message or code}).encode(), headers)

    def _authorized(self) -> bool:
        return self.headers.get("Authorization", "") == f"Bearer {TOKEN}"

    # -- the Hub

    def _hub(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        api, resolve = _MODEL_API.match(path), _RESOLVE.match(path)
        match = api or resolve
        repo = self.local_hub.repo(match["repo"]) if match else None
        if match is None:
            return self._error(404, "NotFound")
        if repo is None or (repo.private and not self._authorized()):
            return self._error(401 if repo is None or repo.private else 404, "RepoNotFound", "Repository not found")
        if match["revision"] not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", "Invalid rev id")
        if api is not None:
            return self._listing(repo, api["kind"], "blobs" in parse_qs(url.query))
        if repo.gated and not self._authorized():
            return self._error(401, "GatedRepo", "Access to this model is restricted")
        blob = self.local_hub.blob(repo, resolve["path"]) if resolve else None
        if blob is None:
            return self._error(404, "EntryNotFound", "Entry not found")
        linked = {
            "X-Repo-Commit": repo.commit,
            "X-Linked-Etag": f'"{blob.sha256}"',
            "X-Linked-Size": str(blob.size),
            "ETag": f'"{blob.sha256}"',
        }
        if repo.fault == "same-origin":
            return self._blob(blob, linked)
        location = f"{self.local_hub.storage}/blobs/{blob.sha256}?expires={int(time.time()) + 3600}"
        self._answer(302, b"", {**linked, "Location": location})

    def _listing(self, repo: HubRepo, kind: str, blobs: bool) -> None:
        files = []
        for path in sorted(repo.files):
            blob = self.local_hub.blob(repo, path)
            assert blob is not None
            oid = hashlib.sha1(blob.sha256.encode()).hexdigest()
            if kind == "tree":
                lfs = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
                files.append({"type": "file", "oid": oid, "size": blob.size, "path": path, "lfs": lfs})
            elif blobs:
                lfs = {"sha256": blob.sha256, "size": blob.size, "pointerSize": 134}
                files.append({"rfilename": path, "size": blob.size, "blobId": oid, "lfs": lfs})
            else:
                files.append({"rfilename": path})
        if kind == "tree":
            body: object = files
        else:
            gated = "auto" if repo.gated else False
            info = {"id": repo.repo, "modelId": repo.repo, "sha": repo.commit, "private": repo.private}
            info.update(gated=gated, siblings=files)
            body = info
        self._answer(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    # -- the storage

    def _storage(self) -> None:
        path = urlsplit(self.path).path
        blob = self.local_hub.blob_by_sha(path.removeprefix("/blobs/")) if path.startswith("/blobs/") else None
        if blob is None:
            return self._error(404, "NotFound")
        self._blob(blob, {})

    def _blob(self, blob: _Blob, extra: dict[str, str]) -> None:
        """The file's bytes: the range asked (206), or per the repository's fault."""
        fault = blob.repo.fault
        if fault == "slow":
            time.sleep(blob.repo.delay)
        if self.command == "GET":
            blob.reads += 1
        moved = fault == "etag-change" and blob.reads % 2 == 0  # every other read: any two reads differ
        headers = {**extra, "ETag": f'"storage-{blob.sha256[:16]}{"-moved" if moved else ""}"'}
        headers["Accept-Ranges"] = "bytes"
        asked = _RANGE.match(self.headers.get("Range", ""))
        if fault == "416" and asked:
            return self._answer(416, b"", {"Content-Range": f"bytes */{blob.size}"})
        if asked is None or fault == "ignore-range":
            return self._send(blob, 0, blob.size, 200, headers)
        start = int(asked[1])
        end = min(blob.size, int(asked[2]) + 1 if asked[2] else blob.size)
        if start >= blob.size or end <= start:
            return self._answer(416, b"", {"Content-Range": f"bytes */{blob.size}"})
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{blob.size}"
        self._send(blob, start, end, 206, headers)

    def _send(self, blob: _Blob, start: int, end: int, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(blob.file, "rb") as f:
            f.seek(start)
            left = end - start
            while left:
                piece = f.read(min(BLOCK, left))
                if not piece:
                    break
                self.wfile.write(piece)
                self.sent += len(piece)
                left -= len(piece)


def _handler(hub: LocalHub, server: str) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        local_hub = hub
        role = server

    return Handler


def repos_in(directory: str | os.PathLike[str]) -> list[HubRepo]:
    """Each `org/repo/` folder under `directory` as a repository of its `.gguf` files (in subfolders too)."""
    found = []
    for org in sorted(Path(directory).iterdir()):
        for repo in sorted(p for p in org.iterdir() if p.is_dir()) if org.is_dir() else ():
            files = {str(f.relative_to(repo)): f for f in sorted(repo.rglob("*.gguf"))}
            found.append(HubRepo(f"{org.name}/{repo.name}", files))
    return found


def main(argv: list[str]) -> int:
    hub = LocalHub(repos_in(argv[0])).start()
    print(f"HF_ENDPOINT={hub.endpoint}  (storage {hub.storage}; token for gated repositories: {TOKEN})", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
