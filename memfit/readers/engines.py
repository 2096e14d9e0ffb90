"""Memory held now by inference engines this server can see in the process table (psutil)."""

from __future__ import annotations

import os
import re
import threading
import time

import psutil

# Process names (or the script a Python process runs) of engines that keep models in memory.
ENGINE_NAMES = re.compile(r"^(llama-server|llama-cli|llama-run|llama-mtmd-cli|ollama_llama_server|LM Studio.*)$")
ENGINE_COMMANDS = re.compile(
    r"(^|[/\s])(ollama\s+runner|vllm(\.entrypoints\S*)?|llama_cpp\.server|mlx_lm\.server)(\s|$)"
)


def is_engine(name: str, cmdline: list[str]) -> bool:
    """llama.cpp's servers and CLIs, Ollama's runners, LM Studio (its engine runs in its own processes), vLLM,
    llama-cpp-python's and mlx-lm's servers."""
    return bool(ENGINE_NAMES.match(name or "")) or bool(ENGINE_COMMANDS.search(" ".join(cmdline[:6])))


# Only these processes can be an engine by their command line; reading it for every process costs too much.
LAUNCHERS = re.compile(r"^(python[\d.]*|ollama|vllm)$")
RECLASSIFY_SECONDS = 30.0  # a pid the system reuses is classified again within this time


def classify(pid: int) -> bool:
    process = psutil.Process(pid)
    name = process.name()
    if ENGINE_NAMES.match(name):
        return True
    return bool(LAUNCHERS.match(name)) and is_engine(name, process.cmdline())


class EngineScanner:
    """Sums the resident memory of the engines running now. Each pid is classified once (name, command line)
    and then only its memory is read, so a reading costs a listing of the process table."""

    def __init__(self) -> None:
        self._engines: dict[int, bool] = {}
        self._classified_at = time.monotonic()
        self._lock = threading.Lock()

    def committed_bytes(self) -> int | None:
        """0 when no engine runs, None when the process table cannot be read."""
        with self._lock:
            try:
                pids = psutil.pids()
            except (psutil.Error, OSError):
                return None
            if time.monotonic() - self._classified_at > RECLASSIFY_SECONDS:
                self._engines, self._classified_at = {}, time.monotonic()
            me, total, seen = os.getpid(), 0, {}
            for pid in pids:
                try:
                    engine = self._engines[pid] if pid in self._engines else pid != me and classify(pid)
                    seen[pid] = engine
                    if engine:
                        total += psutil.Process(pid).memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue  # gone, or not ours to read: it holds nothing we could count
            self._engines = seen
            return total


def ollama_environment() -> dict[str, str] | None:
    """The OLLAMA_* variables of the running `ollama serve` (Ollama reads its settings from them when it starts);
    None when none runs or its environment cannot be read (another user's process)."""
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            if process.info["name"] == "ollama" and (process.info["cmdline"] or [])[1:2] == ["serve"]:
                return {k: v for k, v in process.environ().items() if k.startswith("OLLAMA_")}
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return None
