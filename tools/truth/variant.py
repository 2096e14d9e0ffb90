"""Force one CPU variant: a backend folder holding only that variant's CPU backend.

ggml's loader (`ggml_backend_load_best` in ggml-backend-reg.cpp) loads every `libggml-cpu-*.so` it finds in the
folder it is given and keeps the best-scoring one the host runs, so a folder with a single variant's library is
that variant (the probe's `backend_dir=`); a variant the host cannot run loads no CPU backend at all.
"""

from __future__ import annotations

from pathlib import Path

PREFIX = "libggml-cpu-"


def variants(lib_dir: Path) -> list[str]:
    """The CPU variants a release ships (`haswell`, `skylakex`, `sapphirerapids`, ...)."""
    return sorted(p.name[len(PREFIX) : -len(".so")] for p in lib_dir.glob(f"{PREFIX}*.so"))


def backend_dir(lib_dir: Path, variant: str, dest: Path) -> Path:
    """`dest`, made to hold a link to `variant`'s CPU backend from `lib_dir` and nothing else."""
    if variant not in variants(lib_dir):
        raise ValueError(f"{lib_dir} ships no CPU variant {variant!r} (it has {', '.join(variants(lib_dir))})")
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        old.unlink()
    name = f"{PREFIX}{variant}.so"
    (dest / name).symlink_to((lib_dir / name).resolve())
    return dest
