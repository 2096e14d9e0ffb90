"""Where memfit keeps its state and looks for models: flags, then environment, then embedded defaults."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from memfit.readers.model_roots import Root, RootKind, usual_roots


def default_state_dir(environ: Mapping[str, str] | None = None) -> str:
    """MEMFIT_STATE_DIR, else the user's data directory (XDG on Linux, Application Support on macOS)."""
    env = os.environ if environ is None else environ
    if env.get("MEMFIT_STATE_DIR"):
        return env["MEMFIT_STATE_DIR"]
    if sys.platform == "darwin":
        return str(Path.home() / "Library" / "Application Support" / "memfit")
    if sys.platform == "win32":
        return str(Path(env.get("LOCALAPPDATA", Path.home() / "AppData" / "Local")) / "memfit")
    return str(Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "memfit")


def model_roots(
    flags: Sequence[str] | None, usual: bool = True, environ: Mapping[str, str] | None = None
) -> list[Root]:
    """`--models` when given, else MEMFIT_MODELS (an os.pathsep list); then, unless turned off, the usual
    places, existing or not yet (the Hugging Face hub cache, llama.cpp's cache, LM Studio's models folder, Ollama's
    store)."""
    env = os.environ if environ is None else environ
    plain = list(flags) if flags else [p for p in env.get("MEMFIT_MODELS", "").split(os.pathsep) if p]
    roots = [Root(path, RootKind.PLAIN) for path in plain]
    return roots + (usual_roots(env) if usual else [])
