"""Finding GGUF artifacts under model roots, and naming them as the ecosystem does, without leaving the roots.

Five kinds of root:
- a plain directory (`--models`, MEMFIT_MODELS): a model's id is its path relative to the root, without `.gguf`;
- a Hugging Face hub cache (`models--org--repo/snapshots/<commit>/...gguf`, symlinks into `blobs/`), which is
  also what llama.cpp's `-hf` downloads into: `org/repo:QUANT`, revision = the snapshot commit;
- llama.cpp's older flat download cache (`org_repo_file.gguf` beside `manifest=org=repo=tag.json`): `org/repo:QUANT`;
- LM Studio's models folder (`publisher/repo/file.gguf`): `publisher/repo:QUANT`;
- Ollama's store (`manifests/<registry>/<namespace>/<model>/<tag>` naming `blobs/sha256-<hex>` by media type):
  ids as Ollama names them (`llama3.1:8b`, `namespace/model:tag`, `hf.co/org/repo:QUANT`), revision = the
  manifest's own digest, its projector and LoRA adapters with it.
A split model (`name-00001-of-00003.gguf`) is one artifact of all its parts. Symlinks are followed only when
their target lies inside the same root.

A root is scanned whole (`scan`) or in the region a change touched (`regions_of`, `scan_region`): a folder, with
or without its subfolders, whose artifacts depend on nothing outside it. A fault of the system met while listing
or stat-ing (too many open files, an I/O error, the root itself gone or unreadable) raises RootUnreadable, so
that the index keeps what it last found there instead of an empty or partial listing; an entry that vanished
meanwhile or a subfolder this user may not read is the tree as it is, and only leaves that entry out.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from memfit.quant_names import QUANT_NAME
from memfit.readers.regular_files import read_start

log = logging.getLogger("memfit.index")

SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.I)
PROJECTOR = re.compile(r"^mmproj.*\.gguf$", re.I)
# A quant tag as -hf names them: Q4_K_M, IQ4_XS, Q8_0, F16, BF16, MXFP4, TQ1_0, UD-Q4_K_XL, ...
QUANT_TAG = re.compile(rf"(?:^|[-._])((?:UD-)?(?:{QUANT_NAME}))$", re.I)
COMMIT = re.compile(r"^[0-9a-f]{40}$")
MAX_FILES_PER_ROOT = 100_000  # a root with more is not a model folder: stop walking it
OLLAMA_MODEL = "application/vnd.ollama.image.model"
OLLAMA_PROJECTOR = "application/vnd.ollama.image.projector"
OLLAMA_ADAPTER = "application/vnd.ollama.image.adapter"
OLLAMA_REGISTRY = "registry.ollama.ai"  # its `library` namespace is left out of ids, as Ollama does
OLLAMA_SYSTEM_MODELS = "/usr/share/ollama/.ollama/models"  # where Ollama's Linux service keeps its store
DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
MAX_MANIFEST_BYTES = 1 << 20  # Ollama's manifests are a few hundred bytes
MAX_COMPANIONS = 8  # distinct projector (or adapter) blobs one Ollama manifest may name; more refuse it
BLOB_NAME = re.compile(r"^sha256-[0-9a-f]{64}$")  # the blobs a manifest can name (not `...-partial` downloads)
# errors that are the tree as it is (an entry gone meanwhile, a subfolder this user may not read, a link loop),
# as opposed to faults of the system (EMFILE, ENFILE, EIO, ENOMEM, ...) that say nothing about the files
TREE_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ELOOP, errno.ENAMETOOLONG})


class RootKind(StrEnum):
    PLAIN = "plain"
    HF_CACHE = "huggingface"
    LLAMA_CACHE = "llama.cpp"
    LM_STUDIO = "lmstudio"
    OLLAMA = "ollama"


@dataclass(frozen=True)
class Root:
    path: str
    kind: RootKind


@dataclass(frozen=True)
class LocalArtifact:
    model_id: str
    root: str
    paths: tuple[str, ...]  # the file set, first split first
    revision: str = ""
    projector: str | None = None  # mmproj file loaded with the model
    kind: RootKind = RootKind.PLAIN
    adapters: tuple[str, ...] = ()  # LoRA adapters loaded with the model (Ollama's adapter layers)

    def __hash__(self) -> int:
        # by its file set alone, which equal artifacts share: a listing of 50,000 looks each up about ten times, and
        # the dataclass's hash of every field was a fifth of a first listing's time
        return hash(self.paths)


@dataclass(frozen=True)
class Region:
    """A part of a root scanned on its own: the artifacts found in `folder` (and, when `recursive`, under it)."""

    folder: str
    recursive: bool

    def holds(self, artifact: LocalArtifact) -> bool:
        """Whether `artifact` was found in this region (by its first file's folder)."""
        folder = os.path.dirname(artifact.paths[0])
        return folder == self.folder or (self.recursive and within(folder, self.folder))


class RootUnreadable(OSError):
    """A root (or a region of it) could not be listed: what was found there before still holds."""


def _check(exc: OSError, root: str) -> None:
    """Raise RootUnreadable for a fault of the system, or for any error on the root itself; return for an
    error that is the tree's state (the caller leaves that entry out)."""
    if isinstance(exc, RootUnreadable):
        raise exc
    if exc.filename == root or (exc.errno is not None and exc.errno not in TREE_ERRNOS):
        raise RootUnreadable(exc.errno, f"{exc.filename or root}: {exc.strerror or exc}") from exc


def _is(path: str, root: str, kind: Callable[[int], bool], follow: bool = True) -> bool:
    """Whether `path` (symlinks followed, unless not `follow`) exists and its mode is of `kind` (stat.S_ISREG,
    stat.S_ISDIR, stat.S_ISLNK)."""
    try:
        return kind((os.stat if follow else os.lstat)(path).st_mode)
    except OSError as exc:
        _check(exc, root)
        return False


def _listdir(path: str, root: str) -> list[str]:
    """The names in the folder `path`; [] for a folder gone or unreadable (RootUnreadable for a fault)."""
    try:
        return os.listdir(path)
    except OSError as exc:
        _check(exc, root)
        return []


def within(path: str, folder: str) -> bool:
    """True when `path` is `folder` or lies under it (as written: no symlink resolved)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def inside(root: str, path: str) -> bool:
    """True when `path`, with every symlink resolved, lies under `root` (itself resolved)."""
    return within(os.path.realpath(path), os.path.realpath(root))


def _printable(name: str) -> bool:
    """A name that is text (no bytes the file system let through undecoded): only those can be in ids."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return name.isprintable()


def gguf_files(root: str, directory: str | None = None, recursive: bool = True) -> list[str]:
    """Every `.gguf` file in `directory` (default `root`), and under it when `recursive`, whose real location is
    inside `root`, sorted. A symlink, to a file or to a directory on the way, counts only when it resolves
    inside the root."""
    found: list[str] = []
    real_root = os.path.realpath(root)
    if not within(os.path.realpath(directory or root), real_root):
        log.warning("skipped %r: it resolves outside its model root", directory)
        return found
    # os.walk enters no symlinked folder (followlinks=False): every folder it lists lies where `directory` does,
    # inside the root, and so does every file in one that is not a symlink (one lstat; only a symlink resolved)
    for current, dirs, files in os.walk(directory or root, onerror=lambda exc: _check(exc, root), followlinks=False):
        dirs[:] = sorted(d for d in dirs if _printable(d)) if recursive else []  # a folder's name may be in an id
        for name in sorted(files):
            path = os.path.join(current, name)
            if not name.lower().endswith(".gguf") or not _printable(name):
                continue
            if _is(path, root, stat.S_ISREG, follow=False) or (
                _is(path, root, stat.S_ISLNK, follow=False)
                and within(os.path.realpath(path), real_root)
                and _is(path, root, stat.S_ISREG)
            ):
                found.append(path)
            if len(found) >= MAX_FILES_PER_ROOT:
                return found
    return found


def quant_tag(file_name: str) -> str:
    """The quant tag in a file name (`Qwen3-8B-Q4_K_M.gguf` -> `Q4_K_M`), '' when it names none."""
    stem = SPLIT.sub(r"\g<stem>", file_name)
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    match = QUANT_TAG.search(stem)
    return match.group(1).upper() if match else ""


def group_splits(paths: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(artifact path without `.gguf` or its split suffix, its files in order); incomplete split sets are left out."""
    groups: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    artifacts: list[tuple[str, tuple[str, ...]]] = []
    for path in paths:
        match = SPLIT.match(os.path.basename(path))
        if not match:
            artifacts.append((path[: -len(".gguf")], (path,)))
            continue
        stem = os.path.join(os.path.dirname(path), match["stem"])
        groups.setdefault(stem, {})[int(match["index"])] = path
        counts[stem] = int(match["count"])
    for stem, parts in groups.items():
        if sorted(parts) == list(range(1, counts[stem] + 1)):
            artifacts.append((stem, tuple(parts[i] for i in sorted(parts))))
    return sorted(artifacts)


def choose_projector(candidates: list[str], quant: str) -> str | None:
    """The projector loaded with a model: one tagged with the model's quant, else F16, else the first."""
    if not candidates:
        return None
    by_tag = {quant_tag(os.path.basename(c)): c for c in sorted(candidates)}
    return by_tag.get(quant) or by_tag.get("F16") or sorted(candidates)[0]


def _artifacts(
    root: str,
    directory: str,
    name_of: Callable[[str, tuple[str, ...]], str],
    kind: RootKind,
    revision: str = "",
    recursive: bool = True,
) -> list[LocalArtifact]:
    """Artifacts in `directory` (and under it when `recursive`), each named by `name_of(stem, paths)`;
    projectors are found beside them, else (but in a plain root) anywhere in `directory`."""
    files = gguf_files(root, directory, recursive)
    projectors = [p for p in files if PROJECTOR.match(os.path.basename(p))]
    models = [p for p in files if not PROJECTOR.match(os.path.basename(p))]
    by_folder: dict[str, list[str]] = {}  # projectors by folder: each model's lookup is one dict access
    for p in projectors:
        by_folder.setdefault(os.path.dirname(p), []).append(p)
    chosen: dict[tuple[str, str], str | None] = {}  # (folder, quant) -> projector: chosen once per pair
    found = []
    for stem, paths in group_splits(models):
        folder, quant = os.path.dirname(paths[0]), quant_tag(os.path.basename(paths[0]))
        if (folder, quant) not in chosen:
            beside = by_folder.get(folder, [])
            if kind is not RootKind.PLAIN and not beside:
                beside = projectors  # a repo's projector may sit in another folder of the same snapshot
            chosen[folder, quant] = choose_projector(beside, quant)
        found.append(LocalArtifact(name_of(stem, paths), root, paths, revision, chosen[folder, quant], kind))
    return found


def _tagged(repo: str, paths: tuple[str, ...]) -> str:
    tag = quant_tag(os.path.basename(paths[0]))
    return f"{repo}:{tag}" if tag else f"{repo}/{Path(paths[0]).stem}"


def _parts(root: str, path: str) -> tuple[str, ...]:
    """The names from `root` down to `path` (() for the root itself)."""
    return () if path == root else Path(os.path.relpath(path, root)).parts


def _subfolders(folder: str, root: str) -> list[str]:
    """The folders in `folder` (not symlinks to folders: those are not walked), sorted."""
    try:
        with os.scandir(folder) as entries:
            return sorted(e.path for e in entries if _printable(e.name) and e.is_dir(follow_symlinks=False))
    except OSError as exc:
        _check(exc, root)
        return []


def _folder_regions(root: str, path: str) -> list[Region]:
    """The regions a change at `path` touches where every folder is scanned on its own: the folder holding it,
    and everything under it when it is (or was) a folder; none for a file that is not a GGUF."""
    if _is(path, root, stat.S_ISREG):
        return [Region(os.path.dirname(path), False)] if path.lower().endswith(".gguf") else []
    return [Region(os.path.dirname(path), False), Region(path, True)]


def scan_plain(root: str, region: Region) -> list[LocalArtifact]:
    return _artifacts(
        root,
        region.folder,
        lambda stem, _: os.path.relpath(stem, root).replace(os.sep, "/"),
        RootKind.PLAIN,
        recursive=region.recursive,
    )


def _current_commit(root: str, repo_dir: str) -> str:
    """The commit refs/main names (else any ref), as llama.cpp's hf-cache picks it."""
    refs = os.path.join(repo_dir, "refs")
    for name in sorted(_listdir(refs, root), key=lambda n: n != "main"):
        try:
            commit = read_start(os.path.join(refs, name), 64).strip().decode("ascii", "replace")
        except OSError as exc:
            _check(exc, root)
            continue
        if COMMIT.match(commit):
            return commit
    return ""


def scan_hf_cache(root: str, region: Region) -> list[LocalArtifact]:
    """`models--org--repo/snapshots/<commit>/`: the commit refs/main names (else the newest snapshot). A region is
    the whole cache or one repository's folder."""
    if region.folder != root:
        return _hf_repo(root, os.path.basename(region.folder))
    found: list[LocalArtifact] = []
    for folder in sorted(n for n in _listdir(root, root) if n.startswith("models--")):
        found += _hf_repo(root, folder)
    return found


def _hf_repo(root: str, folder: str) -> list[LocalArtifact]:
    try:
        return _repo_artifacts(root, folder)
    except (OSError, ValueError) as exc:  # one odd repository never hides the others
        if isinstance(exc, OSError):
            _check(exc, root)  # a fault of the system is the whole scan's
        log.warning("skipped %s: %s", folder, exc)
        return []


def _repo_artifacts(root: str, folder: str) -> list[LocalArtifact]:
    repo = folder[len("models--") :].replace("--", "/")
    snapshots = os.path.join(root, folder, "snapshots")
    if not _printable(folder) or not _is(snapshots, root, stat.S_ISDIR):
        return []
    commit = _current_commit(root, os.path.join(root, folder))
    if not commit or not _is(os.path.join(snapshots, commit), root, stat.S_ISDIR):
        existing = [c for c in os.listdir(snapshots) if COMMIT.match(c) and os.path.isdir(os.path.join(snapshots, c))]
        commit = max(existing, key=lambda c: os.stat(os.path.join(snapshots, c)).st_mtime_ns, default="")
    if not commit:
        return []
    return _artifacts(
        root, os.path.join(snapshots, commit), lambda _, paths: _tagged(repo, paths), RootKind.HF_CACHE, revision=commit
    )


def _hub_regions(root: str, path: str) -> list[Region]:
    """A change inside a hub cache's `models--org--repo` folder touches that repository only."""
    parts = _parts(root, path)
    return [Region(os.path.join(root, parts[0]), True)] if parts and parts[0].startswith("models--") else []


def _legacy_manifests(root: str) -> dict[str, str]:
    """File name -> repo, from the `manifest=org=repo=tag.json` files older llama.cpp wrote beside downloads."""
    repos = {}
    for name in sorted(_listdir(root, root)):
        if not (name.startswith("manifest=") and name.endswith(".json")):
            continue
        parts = name[len("manifest=") : -len(".json")].split("=")
        if len(parts) < 2:
            continue
        repo = f"{parts[0]}/{parts[1]}"
        try:
            manifest = json.loads(read_start(os.path.join(root, name), 1 << 20).decode("utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # unreadable, not JSON, or nested past any manifest
            if isinstance(exc, OSError):
                _check(exc, root)
            continue
        for key in ("ggufFile", "mmprojFile"):
            entry = manifest.get(key) if isinstance(manifest, dict) else None
            if isinstance(entry, dict) and isinstance(entry.get("rfilename"), str):
                repos[f"{parts[0]}_{parts[1]}_{entry['rfilename'].replace('/', '_')}"] = repo
    return repos


def scan_llama_cache(root: str, region: Region) -> list[LocalArtifact]:
    """llama.cpp's cache: the hub layout newer versions use, and the flat files older versions wrote in the root
    itself (the region of the root's own folder)."""
    if region.folder != root:
        return scan_hf_cache(root, region)
    found = scan_hf_cache(root, region) if region.recursive else []
    repos = _legacy_manifests(root)

    def name_of(stem: str, paths: tuple[str, ...]) -> str:
        repo = repos.get(os.path.basename(paths[0]))
        return _tagged(repo, paths) if repo else Path(stem).name

    return found + _artifacts(root, root, name_of, RootKind.LLAMA_CACHE, recursive=False)


def _llama_cache_regions(root: str, path: str) -> list[Region]:
    """A repository's folder, or the flat files and manifests in the root itself."""
    parts = _parts(root, path)
    return _hub_regions(root, path) or ([Region(root, False)] if len(parts) == 1 else [])


def scan_lm_studio(root: str, region: Region) -> list[LocalArtifact]:
    """`publisher/repo/file.gguf`: ids `publisher/repo:QUANT`. A repository's folder is scanned whole (its
    projector may sit in any folder of it); loose files above the repositories folder by folder."""

    def name_of(stem: str, paths: tuple[str, ...]) -> str:
        parts = Path(os.path.relpath(paths[0], root)).parts
        return _tagged("/".join(parts[:2]), paths) if len(parts) >= 3 else os.path.relpath(stem, root)

    if len(_parts(root, region.folder)) >= 2:
        return _artifacts(root, region.folder, name_of, RootKind.LM_STUDIO)
    found = _artifacts(root, region.folder, name_of, RootKind.LM_STUDIO, recursive=False)
    if region.recursive:
        for folder in _subfolders(region.folder, root):
            found += scan_lm_studio(root, Region(folder, True))
    return found


def _lm_studio_regions(root: str, path: str) -> list[Region]:
    parts = _parts(root, path)
    if len(parts) >= 3:  # inside a repository's folder: that repository
        return [Region(os.path.join(root, *parts[:2]), True)]
    return _folder_regions(root, path)


def ollama_id(registry: str, namespace: str, model: str, tag: str) -> str:
    """The name Ollama gives a manifest: `model:tag` in the default registry's library, `namespace/model:tag`
    in its other namespaces, `registry/namespace/model:tag` elsewhere (`hf.co/org/repo:Q4_K_M`)."""
    if registry == OLLAMA_REGISTRY:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{registry}/{namespace}/{model}:{tag}"


def _manifest_files(root: str, manifests: str) -> list[str]:
    """The files exactly four levels under `manifests` (registry, namespace, model, tag) inside the root."""
    found: list[str] = []
    if not _is(manifests, root, stat.S_ISDIR) or not inside(root, manifests):
        return found
    for current, dirs, files in os.walk(manifests, onerror=lambda exc: _check(exc, root), followlinks=False):
        depth = len(Path(os.path.relpath(current, manifests)).parts) if current != manifests else 0
        dirs[:] = sorted(d for d in dirs if _printable(d)) if depth < 3 else []
        if depth != 3:
            continue
        for name in sorted(files):
            path = os.path.join(current, name)
            if _printable(name) and inside(root, path) and _is(path, root, stat.S_ISREG):
                found.append(path)
            if len(found) >= MAX_FILES_PER_ROOT:
                return found
    return found


def _ollama_blob(root: str, blobs: str, digest: str) -> str:
    """The blob a layer's digest names, only inside the store's blobs/ directory; ValueError otherwise."""
    match = DIGEST.match(digest)
    if match is None:
        raise ValueError(f"a layer's digest {digest[:80]!r} is not sha256:<64 hex digits>")
    path = os.path.join(blobs, f"sha256-{match[1]}")
    if not (inside(root, blobs) and inside(blobs, path)):
        raise ValueError(f"blob {match[1][:12]} resolves outside the store's blobs directory")
    if not _is(path, root, stat.S_ISREG):
        raise ValueError(f"blob {match[1][:12]} is missing")
    return path


def _ollama_artifact(root: str, path: str, parts: list[str]) -> LocalArtifact | None:
    """The model a manifest names; None for one without a model layer (a cloud model); ValueError or OSError
    when it is broken. A blob is counted once however often its layers name it, and the model's own blob is
    never its projector or an adapter; more than MAX_COMPANIONS projectors or adapters refuse the manifest."""
    data = read_start(path, MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"the manifest is larger than {MAX_MANIFEST_BYTES >> 20} MiB")
    manifest = json.loads(data.decode("utf-8"))
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
        raise ValueError("the manifest has no list of layers")
    digests: dict[str, dict[str, None]] = {}  # media type -> its distinct digests, in the manifest's order
    for layer in layers:
        media, digest = layer.get("mediaType"), layer.get("digest")
        if media in (OLLAMA_MODEL, OLLAMA_PROJECTOR, OLLAMA_ADAPTER):
            digests.setdefault(media, {})[digest if isinstance(digest, str) else repr(digest)] = None
    blobs = os.path.join(root, "blobs")
    models = [_ollama_blob(root, blobs, d) for d in digests.get(OLLAMA_MODEL, {})]
    if not models:
        return None
    if len(models) > 1:
        raise ValueError(f"{len(models)} model layers; llama.cpp loads one")
    companions = {}
    for media in (OLLAMA_PROJECTOR, OLLAMA_ADAPTER):
        named = digests.get(media, {})
        if len(named) > MAX_COMPANIONS:
            raise ValueError(f"{len(named)} distinct {media} layers; memfit reads at most {MAX_COMPANIONS}")
        found = [_ollama_blob(root, blobs, d) for d in named]
        if models[0] in found:
            log.warning("the Ollama manifest %s names its model's own blob as a %s: not counted", path, media)
        companions[media] = [p for p in found if p != models[0]]
    projectors = companions[OLLAMA_PROJECTOR]
    return LocalArtifact(
        ollama_id(*parts),
        root,
        (models[0],),
        revision=f"sha256:{hashlib.sha256(data).hexdigest()}",
        projector=projectors[0] if projectors else None,
        kind=RootKind.OLLAMA,
        adapters=tuple(companions[OLLAMA_ADAPTER]),
    )


def scan_ollama(root: str, region: Region) -> list[LocalArtifact]:
    """Ollama's store, always whole (a blob may be any manifest's): one artifact per manifest with a model layer;
    a broken manifest skips that model only."""
    manifests = os.path.join(root, "manifests")
    found: list[LocalArtifact] = []
    for path in _manifest_files(root, manifests):
        parts = list(Path(os.path.relpath(path, manifests)).parts)
        try:
            artifact = _ollama_artifact(root, path, parts)
        except (OSError, ValueError, RecursionError) as exc:  # unreadable, not JSON, nested past any manifest
            if isinstance(exc, OSError):
                _check(exc, root)  # a fault of the system is the whole scan's
            log.warning("skipped the Ollama manifest %s: %s", "/".join(parts), exc)
            continue
        if artifact is not None:
            found.append(artifact)
    return found


def _ollama_regions(root: str, path: str) -> list[Region] | None:
    """Any manifest, or any blob a manifest can name, may change any model: the whole store (None)."""
    parts = _parts(root, path)
    if parts[:1] == ("manifests",) or (parts[:1] == ("blobs",) and (len(parts) == 1 or BLOB_NAME.match(parts[1]))):
        return None
    return []


SCANNERS: dict[RootKind, Callable[[str, Region], list[LocalArtifact]]] = {
    RootKind.PLAIN: scan_plain,
    RootKind.HF_CACHE: scan_hf_cache,
    RootKind.LLAMA_CACHE: scan_llama_cache,
    RootKind.LM_STUDIO: scan_lm_studio,
    RootKind.OLLAMA: scan_ollama,
}
REGIONS: dict[RootKind, Callable[[str, str], list[Region] | None]] = {
    RootKind.PLAIN: _folder_regions,
    RootKind.HF_CACHE: _hub_regions,
    RootKind.LLAMA_CACHE: _llama_cache_regions,
    RootKind.LM_STUDIO: _lm_studio_regions,
    RootKind.OLLAMA: _ollama_regions,
}


def scan_region(root: Root, region: Region) -> list[LocalArtifact]:
    """The artifacts in `region` of `root`; RootUnreadable when the root, or what the region needs of it, cannot
    be listed now (the root gone, a fault of the system)."""
    if not _printable(root.path):  # its path is in every listing entry of the root
        log.warning("skipped the model root %r: its path is not text", root.path)
        return []
    if not _is(root.path, root.path, stat.S_ISDIR):
        raise RootUnreadable(errno.ENOTDIR, f"{root.path} is not a folder")
    return SCANNERS[root.kind](root.path, region)


def scan(root: Root) -> list[LocalArtifact]:
    """Every artifact of `root` (RootUnreadable as scan_region)."""
    return scan_region(root, Region(root.path, True))


def regions_of(root: Root, path: str) -> list[Region] | None:
    """The regions of `root` whose artifacts a change at `path` (strictly under the root) may have changed; None
    when it may have changed any (scan the whole root). RootUnreadable when what `path` is cannot be told."""
    return REGIONS[root.kind](root.path, path)


def usual_roots(environ: Mapping[str, str] | None = None) -> list[Root]:
    """The places local tools keep models, in the order their environment variables choose them, whether or not
    they exist yet: the index looks for a missing one every second and watches it once it appears (the Hugging
    Face cache, say, made by the first `llama-server -hf` after memfit started)."""
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home())
    cache = Path(env.get("XDG_CACHE_HOME") or home / ".cache")
    if env.get("HF_HUB_CACHE"):
        hub = Path(env["HF_HUB_CACHE"])
    elif env.get("HF_HOME"):
        hub = Path(env["HF_HOME"]) / "hub"
    else:
        hub = cache / "huggingface" / "hub"
    if env.get("LLAMA_CACHE"):
        llama = Path(env["LLAMA_CACHE"])
    elif sys.platform == "darwin":
        llama = home / "Library" / "Caches" / "llama.cpp"
    else:
        llama = cache / "llama.cpp"
    candidates = [
        Root(str(hub), RootKind.HF_CACHE),
        Root(str(llama), RootKind.LLAMA_CACHE),
        Root(str(home / ".lmstudio" / "models"), RootKind.LM_STUDIO),
        Root(str(cache / "lm-studio" / "models"), RootKind.LM_STUDIO),
        Root(env.get("OLLAMA_MODELS") or str(home / ".ollama" / "models"), RootKind.OLLAMA),
        Root(OLLAMA_SYSTEM_MODELS, RootKind.OLLAMA),
    ]
    roots: list[Root] = []
    for root in candidates:  # OLLAMA_MODELS may be the system store itself
        if all(os.path.realpath(r.path) != os.path.realpath(root.path) for r in roots):
            roots.append(root)
    return roots
