"""The index of local model artifacts: built off the request path, refreshed when something under a root changes.

The index's thread watches the roots with file system notifications (watchfiles: inotify on Linux, FSEvents on
macOS), so an idle index does no work; it polls (every `poll_seconds`, a minute by default) only the roots on a
network file system, or every root when notifications cannot be had. A root that does not exist yet is looked for
once a second and watched when it appears."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from memfit.quant_names import DEFAULT_QUANT
from memfit.readers.model_roots import LocalArtifact, Root, RootKind, scan

log = logging.getLogger("memfit.index")

FALLBACK_POLL_SECONDS = 60.0  # where notifications are unavailable: a network file system, or no watcher
ROOT_CHECK_SECONDS = 1.0  # how often a root that does not exist (yet) is looked for
DEBOUNCE_MS = 1000  # changes still coming (a file being written) are taken in together for at most this long
STEP_MS = 50  # a batch of changes is taken in once none came for this long
# file systems whose changes made by other machines raise no local notification (Linux' /proc/mounts names)
NETWORK_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "davfs", "fuse.sshfs"}
    | {"fuse.rclone", "fuse.s3fs", "fuse.glusterfs", "fuse.cephfs"}
)


def _directory_signature(roots: Sequence[Root]) -> tuple[tuple[str, int], ...]:
    """Every directory under the roots with its mtime: a file added, removed or renamed changes it."""
    seen = []
    for root in roots:
        for directory, dirs, _ in os.walk(root.path, followlinks=False):
            dirs.sort()
            try:
                seen.append((directory, os.stat(directory).st_mtime_ns))
            except OSError:
                continue
    return tuple(seen)


def _key(model_id: str) -> str:
    """Ids match case-insensitively in their `:QUANT` suffix, exactly elsewhere."""
    base, sep, quant = model_id.rpartition(":")
    return f"{base}:{quant.upper()}" if sep else model_id


def index_by_id(artifacts: Sequence[LocalArtifact]) -> dict[str, LocalArtifact]:
    """Ids to artifacts; an earlier root wins a shared id, and a repo named without a tag means its
    Q4_K_M, or its only artifact (an Ollama model's `latest` first, as Ollama reads a name without a tag)."""
    by_id: dict[str, LocalArtifact] = {}
    by_repo: dict[str, list[LocalArtifact]] = {}
    for artifact in artifacts:
        by_id.setdefault(_key(artifact.model_id), artifact)
        repo, sep, _ = artifact.model_id.rpartition(":")
        if sep:
            by_repo.setdefault(repo, []).append(artifact)
    for repo, tagged in by_repo.items():
        default = by_id.get(f"{repo}:LATEST") if tagged[0].kind is RootKind.OLLAMA else None
        default = default or by_id.get(f"{repo}:{DEFAULT_QUANT}")
        if default is None and len({a.model_id for a in tagged}) == 1:
            default = tagged[0]
        if default is not None:
            by_id.setdefault(repo, default)
    return by_id


def _file_identities(artifacts: Sequence[LocalArtifact]) -> tuple:
    """The stat identity of every file the index serves (model files and projectors): a file replaced, grown or
    touched in place (no directory changes) changes it."""
    seen = []
    for artifact in artifacts:
        for path in (*artifact.paths, artifact.projector or ""):
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            seen.append(None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(seen)


def _mount_table(text: str) -> list[tuple[str, str]]:
    """(mount point, file system type) of each line of /proc/mounts, longest mount point first."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            point = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            mounts.append((point, fields[2]))
    return sorted(mounts, key=lambda m: len(m[0]), reverse=True)


def network_filesystem(path: str, mounts: str | None = None) -> str | None:
    """The type of the network file system `path` is on (`nfs4`, `cifs`, ...), or None: a local one, or no
    /proc/mounts to tell (macOS). `mounts` stands in for /proc/mounts' text (tests)."""
    if mounts is None:
        try:
            with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
                mounts = f.read()
        except OSError:
            return None
    real = os.path.realpath(path)
    for point, fstype in _mount_table(mounts):
        if real == point or real.startswith(point.rstrip("/") + "/"):
            return fstype if fstype in NETWORK_FS else None
    return None


class ModelIndex:
    """Local artifacts by id. `refresh` rescans only when a directory under a root changed.

    `generation` moves whenever what the index serves changes: a rescan that found another set of artifacts, or
    (with `check_files`) a file of one replaced, grown or touched in place. Views derived from the index (the
    model listing) are rebuilt only when it moves; `wait_for` waits on it. `warm`, when set, is called with the
    artifacts by the index's own thread after each change it saw (the facts are read there, off the request path).

    After `start`, the index's thread refreshes when a notification says something under a root changed
    (`mode` is "watch"); roots on a network file system are refreshed every `poll_seconds`, and so is every root
    when the watcher cannot start (`mode` is "poll"). `walks` counts the passes over the roots' directories, so
    tests and benchmarks can see that an idle index does none."""

    def __init__(self, roots: Sequence[Root], poll_seconds: float = FALLBACK_POLL_SECONDS) -> None:
        self.roots = tuple(Root(os.path.abspath(r.path), r.kind) for r in roots)  # a missing one may appear later
        self.poll_seconds = poll_seconds
        self.generation = 0
        self.scans = 0  # rescans done (work counted, for tests and benchmarks)
        self.walks = 0  # passes over the directories under the roots (each refresh makes one)
        self.mode = "stopped"  # "watch" or "poll" while the thread runs
        self.warm: Callable[[tuple[LocalArtifact, ...]], None] | None = None
        self._signature: tuple = ()
        self._identities: tuple = ()
        self._by_id: dict[str, LocalArtifact] = {}
        self._ordered: tuple[LocalArtifact, ...] = ()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self, check_files: bool = False) -> bool:
        """Rescan when anything under the roots changed; True when the index was rebuilt. With `check_files`, a
        served file changed in place also moves `generation` (and returns True), without a rescan."""
        with self._lock:
            signature = _directory_signature(self.roots)
            self.walks += 1
            self._changed.notify_all()  # waiters woken once the lock is free: what they wait for may hold now
            if signature == self._signature:
                if not check_files:
                    return False
                identities = _file_identities(self._ordered)
                if identities == self._identities:
                    return False
                self._identities = identities
                self.generation += 1
                return True
            ordered = []
            for root in self.roots:
                try:
                    ordered.extend(sorted(scan(root), key=lambda a: a.model_id))
                except Exception:  # noqa: BLE001 - a root that cannot be scanned must not stop the others
                    log.exception("scanning %s failed", root.path)
            self._by_id, self._ordered, self._signature = index_by_id(ordered), tuple(ordered), signature
            self._identities = _file_identities(self._ordered) if check_files else ()
            self.generation += 1
            self.scans += 1
            log.info("indexed %d local artifacts under %d roots", len(ordered), len(self.roots))
            return True

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate()` holds, trying it again after each refresh (so each time `generation` moves) and
        each warming; False after `timeout` seconds without it (tests, benchmarks: what the index's thread did)."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def get(self, model_id: str) -> LocalArtifact | None:
        return self._by_id.get(_key(model_id))

    def artifacts(self) -> tuple[LocalArtifact, ...]:
        return self._ordered

    def start(self) -> None:
        """Index now, then keep the index fresh (and the facts of new files read) from a background thread."""
        self.refresh(check_files=True)
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="memfit-index", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self.mode = "stopped"

    def _warm(self) -> None:
        if self.warm is not None:
            try:
                self.warm(self._ordered)
            except Exception:  # noqa: BLE001 - warming is an optimisation: requests read what it missed
                log.exception("reading the headers of new files failed")
            with self._changed:
                self._changed.notify_all()  # for `wait_for`: the facts of what changed are read now

    def _update(self) -> None:
        """Refresh (a served file changed in place counts) and read the facts of what changed."""
        try:
            changed = self.refresh(check_files=True)
        except Exception:  # noqa: BLE001 - the index must keep refreshing whatever one pass met
            log.exception("index refresh failed")
            return
        if changed:
            self._warm()

    def _layout(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The roots to watch (existing, on a local file system) and those to poll (on a network one); the
        others do not exist (yet)."""
        watched: list[str] = []
        polled: list[str] = []
        for root in self.roots:
            if os.path.isdir(root.path):
                (polled if network_filesystem(root.path) else watched).append(root.path)
        return tuple(watched), tuple(polled)

    def _run(self) -> None:
        self._warm()
        watching = True
        while not self._stop.is_set():
            layout = self._layout()
            if watching:
                try:
                    notify = _watcher(layout[0])
                except Exception as exc:  # noqa: BLE001 - no notifications (inotify limit, no backend): poll
                    if isinstance(exc, FileNotFoundError) and self._layout() != layout:
                        continue  # a root vanished meanwhile: watch the others
                    log.warning(
                        "cannot watch the model roots (%s: %s): polling them every %g s",
                        type(exc).__name__,
                        exc,
                        self.poll_seconds,
                    )
                    watching = False
                    continue
                self.mode = "watch"
                try:
                    self._watch(notify, layout)
                finally:
                    if notify is not None:
                        notify.close()
            else:
                self.mode = "poll"
                if self._stop.wait(self.poll_seconds):
                    break
                self._update()

    def _watch(self, notify: Any, layout: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
        """Refresh on each batch of changes until the roots' layout changes (a root appeared, vanished or moved
        to another file system) or the index stops; poll the roots on network file systems meanwhile."""
        self._update()  # what changed before the watch began
        watched, polled = layout
        missing = len(watched) + len(polled) < len(self.roots)
        last_poll = time.monotonic()
        while not self._stop.is_set():
            timeout = ROOT_CHECK_SECONDS if missing or polled else 0.0  # 0: no timeout, only changes wake it
            if polled:
                timeout = min(timeout, self.poll_seconds)
            if notify is None:
                result: Any = "stop" if self._stop.wait(timeout or None) else "timeout"
            else:
                result = notify.watch(DEBOUNCE_MS, STEP_MS, int(timeout * 1000), self._stop)
            if result == "stop":
                return
            if isinstance(result, set) and result:
                self._update()
            elif polled and time.monotonic() - last_poll >= self.poll_seconds:
                last_poll = time.monotonic()
                self._update()
            if (missing or isinstance(result, set)) and self._layout() != layout:
                return  # watch the roots as they are now


def _watcher(paths: Sequence[str]) -> Any:
    """watchfiles' watcher of `paths` and everything under them (None when there is nothing to watch). Its own
    polling, should notifications be refused it by the platform, runs at the index's fallback period."""
    if not paths:
        return None
    from watchfiles import _rust_notify

    return _rust_notify.RustNotify(list(paths), False, False, int(FALLBACK_POLL_SECONDS * 1000), True, True)
