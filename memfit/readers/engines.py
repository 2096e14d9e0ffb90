"""Memory held now by inference engines this server can see in the process table (psutil)."""

from __future__ import annotations

import os
import re

import psutil

# Process names (or the script a Python process runs) of engines that keep models in memory.
ENGINE_NAMES = re.compile(r"^(llama-server|llama-cli|llama-run|llama-mtmd-cli|ollama_llama_server|LM Studio.*)$")
ENGINE_COMMANDS = re.compile(r"(^|[/\s])(ollama\s+runner|vllm(\.entrypoints\S*)?|llama_cpp\.server|mlx_lm\.server)(\s|$)")


def is_engine(name: str, cmdline: list[str]) -> bool:
    """llama.cpp's servers and CLIs, Ollama's runners, LM Studio (its engine runs in its own processes), vLLM,
    llama-cpp-python's and mlx-lm's servers."""
    return bool(ENGINE_NAMES.match(name or "")) or bool(ENGINE_COMMANDS.search(" ".join(cmdline[:6])))


# Only these processes can be an engine by their command line; reading it for every process costs too much.
LAUNCHERS = re.compile(r"^(python[\d.]*|ollama|vllm)$")


def committed_bytes() -> int | None:
    """The summed resident memory of the engines that run now: 0 when none do, None when the table is unreadable."""
    total = 0
    me = os.getpid()
    try:
        for process in psutil.process_iter(["name"]):
            name = process.info["name"] or ""
            if process.pid == me or not (ENGINE_NAMES.match(name) or LAUNCHERS.match(name)):
                continue
            try:
                if is_engine(name, process.cmdline() if LAUNCHERS.match(name) else []):
                    total += int(process.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue  # gone, or not ours to read: it holds nothing we could count
    except (psutil.Error, OSError):
        return None
    return total
