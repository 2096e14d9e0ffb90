"""The README's sample outputs, as the CLI prints them on a described host.

    python -m tools.readme_outputs            rewrite each README.md block that starts `$ memfit ...`
    python -m tools.readme_outputs --check    exit 1, naming the commands, when a block differs

A sample output is a fenced block without a language whose first line is `$ memfit ARGS` (optionally followed by
`; echo $?`, then the exit code is its last line). Each is run in this process, `memfit.cli.main(ARGS)`, with no
running server and no local models, on the host the README names: DESCRIBED below (what depends on the machine, its
free memory, its GPUs and its CPU, is that host's, so the output is the same wherever it is made).
tests/test_readme.py checks that the README shows what these commands print now.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

README = Path(__file__).resolve().parent.parent / "README.md"
GiB = 1 << 30
DESCRIBED = (
    "24 GiB available of 32 GiB, no GPU, an AVX2 CPU (ggml's haswell variant), no engine running, offline (the"
    " catalog answers)"
)
SAMPLE = re.compile(
    r"^```\n(?P<command>\$ memfit (?P<args>[^\n]*?)(?P<echo>; echo \$\?)?)\n(?P<out>.*?)^```", re.M | re.S
)


def _described_service(*args: Any, **kwargs: Any) -> Any:
    """memfit's service on the described host (the readers the CLI would use, replaced)."""
    from memfit.estimator.machine import CpuArch, CpuFeatures, HostMemory
    from memfit.service_builder import build_service

    class NoGpu:
        def read(self) -> list:
            return []

    return build_service(
        *args,
        **kwargs,
        read_host=lambda: HostMemory(available=24 * GiB, total=32 * GiB),
        read_cpu=lambda: CpuFeatures(CpuArch.X86_64, frozenset("SSE42 AVX F16C FMA AVX2 BMI2".split())),
        nvml=NoGpu(),
        read_committed=lambda: 0,
    )


@contextlib.contextmanager
def _described_machine() -> Iterator[None]:
    """No running server, no usual model folders, the described host's readers, tables as wide as when the output
    is not a terminal."""
    from memfit.render import DEFAULT_WIDTH

    with tempfile.TemporaryDirectory() as home:
        env = {
            "HOME": home,
            "MEMFIT_STATE_DIR": os.path.join(home, "state"),
            "COLUMNS": str(DEFAULT_WIDTH),
            "HF_HUB_OFFLINE": "1",  # the catalog answers, as on a machine without a network
        }
        cleared = [k for k in os.environ if k.startswith(("MEMFIT_", "HF_", "XDG_", "LLAMA_", "OLLAMA_"))]
        with mock.patch.dict(os.environ, env), mock.patch("memfit.cli.build_service", _described_service):
            for key in cleared:
                os.environ.pop(key, None)
            yield


def printed(args: str, echo: bool) -> str:
    """What `memfit ARGS` prints to stdout (and, with `echo`, its exit code after it)."""
    from memfit.cli import main

    out = io.StringIO()
    with _described_machine(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(shlex.split(args))
    return out.getvalue() + (f"{code}\n" if echo else "")


def samples(text: str) -> Iterator[re.Match[str]]:
    return SAMPLE.finditer(text)


def stale(text: str) -> list[str]:
    """The sample commands whose output the README does not show as printed now."""
    return [m["command"] for m in samples(text) if m["out"] != printed(m["args"], bool(m["echo"]))]


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    if "--check" in argv:
        commands = stale(text)
        for command in commands:
            print(f"README.md: the output shown for `{command}` is not what it prints now", file=sys.stderr)
        return 1 if commands else 0
    written = SAMPLE.sub(lambda m: f"```\n{m['command']}\n{printed(m['args'], bool(m['echo']))}```", text)
    README.write_text(written, encoding="utf-8")
    print(f"{len(list(samples(written)))} sample outputs written into README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
