"""The index of local model artifacts: built off the request path, refreshed when something under a root changes.

The index's thread watches the roots with file system notifications (watchfiles: inotify on Linux, FSEvents on
macOS), so an idle index does no work; a notification's paths are rescanned alone (the region of the root they
touched, model_roots.regions_of), never the whole root. It polls (every `poll_seconds`, a minute by default) only
the roots on a network file system, or every root when notifications cannot be had. A root that does not exist
yet is looked for once a second and watched when it appears; one replaced (renamed away, another folder made in
its place) is watched anew.

A root that cannot be listed (too many open files, an I/O error, the root gone or unreadable) keeps the
artifacts last found there: it is reported (a warning, and `/health` degraded through `health`) and tried again
every RETRY_SECONDS until it can be listed."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from memfit.quant_names import DEFAULT_QUANT
from memfit.readers.model_roots import (
    LocalArtifact,
    Region,
    Root,
    RootKind,
    RootUnreadable,
    regions_of,
    scan_region,
    within,
)
from memfit.readers.state_health import StateHealth
from memfit.service.artifact_cache import identity_of

log = logging.getLogger("memfit.index")

FALLBACK_POLL_SECONDS = 60.0  # where notifications are unavailable: a network file system, or no watcher
ROOT_CHECK_SECONDS = 1.0  # how often a root that does not exist (yet) is looked for
RETRY_SECONDS = 1.0  # how often a root whose listing failed is listed again
GONE = frozenset({errno.ENOENT, errno.ENOTDIR})  # a root that is not there: nothing to keep unless it had models
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


def _file_identities(artifact: LocalArtifact) -> tuple:
    """The stat identity of each file of `artifact` (model files and projector): a file replaced, grown or
    touched in place (no directory changes) changes it. Plain tuples: the listing store keys entries by their
    text."""
    seen = []
    for path in (*artifact.paths, artifact.projector or ""):
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        seen.append(None if st is None else tuple(identity_of(st)))
    return tuple(seen)


def _root_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of a root folder: another folder made in its place has another."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _merged(regions: Sequence[Region]) -> list[Region]:
    """The regions without repeats and without those another (recursive) one covers."""
    unique = set(regions)
    return sorted(
        (r for r in unique if not any(o != r and o.recursive and within(r.folder, o.folder) for o in unique)),
        key=lambda r: (r.folder, r.recursive),
    )


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
    artifacts new or changed by the index's own thread after each change it saw (the facts are read there, off the
    request path). `health` is told of each root that cannot be listed, and when it can again.

    After `start`, the index's thread rescans the regions a notification names (`mode` is "watch"); roots on a
    network file system are refreshed every `poll_seconds`, and so is every root when the watcher cannot start
    (`mode` is "poll"). `walks` counts the passes over the roots' directories, `scans` the full rescans and
    `regions` the regions rescanned alone, so tests and benchmarks can see that an idle index does no work and a
    change costs what it touched."""

    def __init__(self, roots: Sequence[Root], poll_seconds: float = FALLBACK_POLL_SECONDS) -> None:
        self.roots = tuple(Root(os.path.abspath(r.path), r.kind) for r in roots)  # a missing one may appear later
        self.poll_seconds = poll_seconds
        self.generation = 0
        self.scans = 0  # full rescans done (work counted, for tests and benchmarks)
        self.regions = 0  # regions of a root rescanned alone, after a notification
        self.walks = 0  # passes over the directories under the roots (each refresh makes one)
        self.mode = "stopped"  # "watch" or "poll" while the thread runs
        self.warm: Callable[[tuple[LocalArtifact, ...]], None] | None = None
        self.health = StateHealth()  # FitService gives its own, so that /health says what failed
        self.failed: dict[str, str] = {}  # root path -> why its last listing failed (its last good one is kept)
        self._signature: tuple = ()
        self._found: dict[str, tuple[LocalArtifact, ...]] = {}  # each root's artifacts, as last listed
        self._identities: dict[LocalArtifact, tuple] = {}  # with `check_files`: each artifact's file identities
        self._by_id: dict[str, LocalArtifact] = {}
        self._ordered: tuple[LocalArtifact, ...] = ()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self, check_files: bool = False) -> bool:
        """Rescan when anything under the roots changed (and retry each root whose listing failed); True when the
        index was rebuilt. With `check_files`, a served file changed in place also moves `generation` (and returns
        True), without a rescan."""
        with self._lock:
            signature = _directory_signature(self.roots)
            self.walks += 1
            self._changed.notify_all()  # waiters woken once the lock is free: what they wait for may hold now
            if signature != self._signature:
                stale = self.roots
            else:
                stale = tuple(r for r in self.roots if r.path in self.failed)
            rebuilt = signature != self._signature
            for root in stale:
                before, now = self._rescan(root, None)
                rebuilt |= before != now
            self._signature = signature
            if stale:
                self.scans += 1
            if not rebuilt:
                return bool(check_files and self._publish(self._ordered, check_files=True))
            self._publish(self._listed(), check_files, always=True)
            log.info("indexed %d local artifacts under %d roots", len(self._ordered), len(self.roots))
            return True

    def apply(self, paths: Sequence[str], check_files: bool = True) -> tuple[LocalArtifact, ...]:
        """Rescan the regions of the roots a change at each of `paths` touched (a root itself changed: all of it);
        the artifacts new or changed since (with `check_files`, those whose files changed in place too)."""
        with self._lock:
            touched: dict[Root, list[Region] | None] = {}
            for path in paths:
                for root in self.roots:
                    if within(root.path, path):
                        touched[root] = None  # the root itself (or a folder above it) changed: all of it
                    elif within(path, root.path) and touched.get(root, []) is not None:
                        try:
                            regions = regions_of(root, path)
                        except RootUnreadable:  # what the path is cannot be told now: all of it (kept if that fails)
                            regions = None
                        touched[root] = None if regions is None else [*(touched.get(root) or []), *regions]
            changed = False
            fresh: list[LocalArtifact] = []
            scanned: list[LocalArtifact] = []
            dropped: set[LocalArtifact] = set()
            for root, regions in touched.items():
                if regions is None or regions:
                    self.scans += regions is None
                    before, now = self._rescan(root, None if regions is None else _merged(regions))
                    seen = set(before)
                    changed |= seen != set(now)  # the same artifacts found again in another order: no change
                    fresh += [a for a in now if a not in seen]
                    scanned += now
                    dropped |= seen.difference(now)
            if not changed and not check_files:
                self._changed.notify_all()
                return ()
            listed = self._listed() if changed else self._ordered
            moved = self._publish(listed, check_files, among=scanned, dropped=dropped, always=changed)
            self._changed.notify_all()
            return tuple(dict.fromkeys([*fresh, *moved]))

    def _rescan(
        self, root: Root, regions: list[Region] | None
    ) -> tuple[tuple[LocalArtifact, ...], tuple[LocalArtifact, ...]]:
        """List `regions` of `root` again (None: all of it), keeping what was found there when that fails: the
        artifacts found there before and now (nothing when it failed)."""
        old = self._found.get(root.path, ())
        before: tuple[LocalArtifact, ...]
        kept: tuple[LocalArtifact, ...]
        try:
            if regions is None:
                before, kept, now = old, (), tuple(scan_region(root, Region(root.path, True)))
            else:
                held = [any(r.holds(a) for r in regions) for a in old]
                before = tuple(a for a, h in zip(old, held, strict=True) if h)
                kept = tuple(a for a, h in zip(old, held, strict=True) if not h)
                now = tuple(dict.fromkeys(a for r in regions for a in scan_region(root, r)))
                self.regions += len(regions)
        except Exception as exc:  # noqa: BLE001 - a root that cannot be listed keeps its last listing
            gone = isinstance(exc, RootUnreadable) and exc.errno in GONE
            if gone and not old:  # a root that is not there (yet): nothing is missing
                self._recovered(root)
                return (), ()
            if not isinstance(exc, OSError):
                log.exception("scanning %s failed", root.path)
            self.failed[root.path] = str(exc)
            self.health.fault(
                f"model root {root.path}",
                f"the model root {root.path} cannot be listed ({exc}): its last listing ({len(old)} artifacts) is "
                f"served, and it is listed again every {RETRY_SECONDS:g} s",
            )
            return (), ()
        self._recovered(root)
        self._found[root.path] = kept + now
        return before, now

    def _recovered(self, root: Root) -> None:
        if self.failed.pop(root.path, None) is not None:
            self.health.ok(f"model root {root.path}")

    def _listed(self) -> tuple[LocalArtifact, ...]:
        """Every root's artifacts: roots in order, each by id."""
        return tuple(a for root in self.roots for a in sorted(self._found.get(root.path, ()), key=lambda a: a.model_id))

    def _publish(
        self,
        ordered: tuple[LocalArtifact, ...],
        check_files: bool,
        among: Sequence[LocalArtifact] | None = None,
        dropped: set[LocalArtifact] | frozenset[LocalArtifact] = frozenset(),
        always: bool = False,
    ) -> list[LocalArtifact]:
        """Serve `ordered`, moving `generation` when `always` or (with `check_files`) when a file of one of them
        (of those `among`, by default all; those `dropped` are served no more) changed in place; those whose files
        changed. The identities of the files are taken whenever the served artifacts change, so that the next
        check compares with them."""
        moved = []
        if check_files or always:
            identities = {}
            for artifact in ordered if among is None else among:
                identities[artifact] = _file_identities(artifact)
                if check_files and self._identities.get(artifact, identities[artifact]) != identities[artifact]:
                    moved.append(artifact)
            if among is None:
                self._identities = identities
            else:
                for artifact in dropped:
                    self._identities.pop(artifact, None)
                self._identities.update(identities)
        if always or moved:
            if ordered != self._ordered:
                self._by_id, self._ordered = index_by_id(ordered), ordered
            self.generation += 1
        return moved

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate()` holds, trying it again after each refresh (so each time `generation` moves) and
        each warming; False after `timeout` seconds without it (tests, benchmarks: what the index's thread did)."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def get(self, model_id: str) -> LocalArtifact | None:
        return self._by_id.get(_key(model_id))

    def artifacts(self) -> tuple[LocalArtifact, ...]:
        return self._ordered

    def file_identities(self, artifact: LocalArtifact) -> tuple | None:
        """The identities of `artifact`'s files (and projector's) when the index last looked at them; None for
        an artifact it does not serve."""
        return self._identities.get(artifact)

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

    def _warm(self, artifacts: tuple[LocalArtifact, ...] | None = None) -> None:
        """Read the facts of `artifacts` (by default all)."""
        if self.warm is not None:
            try:
                self.warm(self._ordered if artifacts is None else artifacts)
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

    def _changes(self, changes: set[tuple[int, str]]) -> None:
        """Rescan what a batch of notifications touched, and read the facts of what changed."""
        try:
            changed = self.apply([path for _, path in changes])
        except Exception:  # noqa: BLE001 - the index must keep refreshing whatever one batch met
            log.exception("index update failed")
            return
        if changed:
            self._warm(changed)

    def _layout(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple]:
        """The roots to watch (existing, on a local file system) and those to poll (on a network one), and the
        identity of each folder (a root replaced by another folder must be watched anew); the others do not
        exist (yet)."""
        watched: list[str] = []
        polled: list[str] = []
        for root in self.roots:
            if os.path.isdir(root.path):
                (polled if network_filesystem(root.path) else watched).append(root.path)
        return tuple(watched), tuple(polled), tuple(_root_identity(path) for path in (*watched, *polled))

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
                if self._stop.wait(min(self.poll_seconds, RETRY_SECONDS) if self.failed else self.poll_seconds):
                    break
                self._update()

    def _watch(self, notify: Any, layout: tuple[tuple[str, ...], tuple[str, ...], tuple]) -> None:
        """Rescan what each batch of changes touched until the roots' layout changes (a root appeared, vanished,
        was replaced or moved to another file system) or the index stops; poll the roots on network file systems
        meanwhile, and list again those whose listing failed."""
        from watchfiles import Change

        self._update()  # what changed before the watch began
        watched, polled, _ = layout
        missing = len(watched) + len(polled) < len(self.roots)
        last_poll = time.monotonic()
        while not self._stop.is_set():
            timeout = ROOT_CHECK_SECONDS if missing or polled else 0.0  # 0: no timeout, only changes wake it
            if polled:
                timeout = min(timeout, self.poll_seconds)
            if self.failed:
                timeout = min(timeout or RETRY_SECONDS, RETRY_SECONDS)
            if notify is None:
                result: Any = "stop" if self._stop.wait(timeout or None) else "timeout"
            else:
                result = notify.watch(DEBOUNCE_MS, STEP_MS, int(timeout * 1000), self._stop)
            if result == "stop":
                return
            if isinstance(result, set) and result:
                self._changes(result)
            if self.failed or (polled and time.monotonic() - last_poll >= self.poll_seconds):
                last_poll = time.monotonic()
                self._update()
            if isinstance(result, set) and any(c == Change.deleted and path in watched for c, path in result):
                return  # a watched root itself was removed: its watch is gone, even if a folder made in its place
                # took the same inode (so the layout would look the same): watch the roots as they are now
            if (missing or isinstance(result, set)) and self._layout() != layout:
                return  # watch the roots as they are now


def _watcher(paths: Sequence[str]) -> Any:
    """watchfiles' watcher of `paths` and everything under them (None when there is nothing to watch). Its own
    polling, should notifications be refused it by the platform, runs at the index's fallback period."""
    if not paths:
        return None
    from watchfiles import _rust_notify

    return _rust_notify.RustNotify(list(paths), False, False, int(FALLBACK_POLL_SECONDS * 1000), True, True)
