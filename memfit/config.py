"""Where memfit keeps its state and looks for models: flags, then environment, then embedded defaults."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


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


def configured_model_dirs(flags: Sequence[str] | None, environ: Mapping[str, str] | None = None) -> list[str]:
    """`--models` when given, else MEMFIT_MODELS (an os.pathsep list)."""
    env = os.environ if environ is None else environ
    if flags:
        return list(flags)
    return [p for p in env.get("MEMFIT_MODELS", "").split(os.pathsep) if p]
