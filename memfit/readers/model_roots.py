"""Finding GGUF artifacts under model directories, without ever leaving them.

A plain directory names a model by the file's path relative to it, without `.gguf`; a split model
(`name-00001-of-00003.gguf`) is one artifact of all its parts. Symlinks are followed only when
their target lies inside the same root.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.I)
PROJECTOR = re.compile(r"^mmproj.*\.gguf$", re.I)


@dataclass(frozen=True)
class LocalArtifact:
    model_id: str
    root: str
    paths: tuple[str, ...]  # the file set, first split first
    revision: str = ""
    projector: str | None = None  # mmproj file loaded with the model


def inside(root: str, path: str) -> bool:
    """True when `path`, with every symlink resolved, lies under `root` (itself resolved)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def gguf_files(root: str) -> list[str]:
    """Every `.gguf` file under `root` whose real location is inside it, in a stable order."""
    found = []
    for directory, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            if not name.lower().endswith(".gguf"):
                continue
            path = os.path.join(directory, name)
            if os.path.islink(path) and not inside(root, path):
                continue
            if os.path.isfile(path):
                found.append(path)
    return found


def group_splits(paths: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """(artifact path without its split suffix, its files in order); an incomplete split set is left out."""
    groups: dict[str, dict[int, str]] = {}
    counts: dict[str, int] = {}
    singles = []
    for path in paths:
        match = SPLIT.match(os.path.basename(path))
        if not match:
            singles.append((path[: -len(".gguf")], (path,)))
            continue
        stem = os.path.join(os.path.dirname(path), match["stem"])
        groups.setdefault(stem, {})[int(match["index"])] = path
        counts[stem] = int(match["count"])
    for stem, parts in groups.items():
        if sorted(parts) == list(range(1, counts[stem] + 1)):
            singles.append((stem, tuple(parts[i] for i in sorted(parts))))
    return sorted(singles)


def projector_beside(path: str, root: str) -> str | None:
    """The multimodal projector in the same directory as the model, if there is exactly one choice."""
    directory = os.path.dirname(path)
    try:
        names = sorted(n for n in os.listdir(directory) if PROJECTOR.match(n))
    except OSError:
        return None
    candidates = [os.path.join(directory, n) for n in names if inside(root, os.path.join(directory, n))]
    return candidates[0] if candidates else None


def scan_plain_root(root: str) -> list[LocalArtifact]:
    """Artifacts of a configured model directory: ids are paths relative to it, without `.gguf`."""
    models = [p for p in gguf_files(root) if not PROJECTOR.match(os.path.basename(p))]
    artifacts = []
    for stem, paths in group_splits(models):
        model_id = os.path.relpath(stem, root).replace(os.sep, "/")
        artifacts.append(LocalArtifact(model_id, root, paths, projector=projector_beside(paths[0], root)))
    return artifacts
