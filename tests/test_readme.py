"""The README's examples are tests: every ```bash and ```python block of README.md runs as written, against a
live `memfit serve` (a real subprocess on a free port), and fails when one no longer works.

The world they run in is a fresh machine's, faked: HOME is a temporary folder whose Hugging Face cache
(`~/.cache/huggingface/hub`) holds a sparse GGUF under the one local id the README uses
(`unsloth/Qwen3-4B-Instruct-2507-GGUF:Q4_K_M`), and HF_ENDPOINT names a local Hugging Face Hub (tools/hub_server.py)
whose one repository is the Hub id the README uses (`unsloth/gemma-3-12b-it-GGUF`); every other id the README names
must be a catalog entry (the local Hub has no such repository: the catalog answers).
MEMFIT_STATE_DIR is the default state directory under that HOME and MEMFIT_TOKEN is set, as is TOKEN (what the
"Asking it" block defines, as a reader's shell would still have it for the later blocks).

What the test changes before running a block: the README's address `http://127.0.0.1:9998` becomes the
test server's (the same string, another port), and `memfit fit`'s and `memfit plan`'s verdict exit codes (3 tight,
4 oversize, 5 unknown: answers that depend on this machine's free memory) count as success. Bash blocks run with
`bash -euo pipefail` in the repository root
(they use `.venv/bin/memfit`); Python blocks run with the client the README's bash block generates, generated here
by the venv's openapi-python-client with the same arguments. A block fails when it exits non-zero or prints a
problem document (curl -s exits 0 on a 401) or an empty `results`, or when a `modelId` it asks about is not in
its answer (an unknown id is left out of a batch, not an error), or when a `memfit` command could not ask the running
server (it records itself in the state directory the examples share) and said it answered in its own process.

A block whose first line is `# not run by tests: <why>` is skipped with that reason, and only the blocks listed
in SKIPPED may be: what needs what CI lacks (PyPI, npm's registry, llama-cpp-python's 13-minute build), runs
until stopped, or rewrites the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tools.gguf_writers import qwen3, write_model
from tools.hub_server import HubRepo, LocalHub

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_ADDRESS = "http://127.0.0.1:9998"
TOKEN = "readme-token-5c2a"
LOCAL_REPO = "unsloth/Qwen3-4B-Instruct-2507-GGUF"
LOCAL_FILE = "Qwen3-4B-Instruct-2507-Q4_K_M.gguf"
HUB_REPO = "unsloth/gemma-3-12b-it-GGUF"
COMMIT = "c0ffee" + "0" * 34
MARKER = "# not run by tests:"

# the first command of each block the README marks as not run, and why
SKIPPED = {
    "./scripts/serve": "runs until stopped; scripts/test is the suite that runs this test",
    ".venv/bin/pip install -e '.[measure]'": "builds llama-cpp-python from source (about 13 minutes)",
    "scripts/accuracy --summary": "its second command names the reader's own files",
    "pip install openapi-python-client==0.29.1": "needs PyPI; the test generates the client with the venv's copy",
    "npx openapi-typescript@7.13.0 openapi.yaml -o memfit.d.ts": "needs npm and its registry",
    "./scripts/regenerate": "rewrites generated/ in the checkout",
}
PROBLEM = re.compile(r'"type":\s*"(invalidRequest|unauthorized|notFound|cancelled|failed)"')


@dataclass(frozen=True)
class Block:
    lang: str
    line: int
    code: str
    document: str = "README.md"

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def first_command(self) -> str:
        lines = [ln for ln in self.code.splitlines() if ln.strip() and not ln.startswith("#")]
        return lines[0].split("  #")[0].strip() if lines else ""

    @property
    def skip_reason(self) -> str | None:
        first = self.code.splitlines()[0] if self.code else ""
        return first[len(MARKER) :].strip() if first.startswith(MARKER) else None


def readme_blocks() -> list[Block]:
    """The README's blocks, then those of the design notes in docs/ it links to."""
    blocks = []
    for path in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        blocks += [
            Block(m["lang"], text.count("\n", 0, m.start()) + 1, m["code"], path.relative_to(ROOT).as_posix())
            for m in re.finditer(r"^```(?P<lang>bash|python)\n(?P<code>.*?)^```", text, re.MULTILINE | re.DOTALL)
        ]
    return blocks


BLOCKS = readme_blocks()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class World:
    home: Path
    url: str
    env: dict[str, str]
    client_dir: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    home = tmp_path_factory.mktemp("home")
    repo = home / ".cache" / "huggingface" / "hub" / f"models--{LOCAL_REPO.replace('/', '--')}"
    blob = repo / "blobs" / "0123abcd"
    blob.parent.mkdir(parents=True)
    write_model(qwen3(), blob)
    link = repo / "snapshots" / COMMIT / LOCAL_FILE
    link.parent.mkdir(parents=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    on_the_hub = tmp_path_factory.mktemp("hub-files") / "gemma-3-12b-it-Q4_K_M.gguf"
    write_model(qwen3(), on_the_hub)
    hub = LocalHub([HubRepo(HUB_REPO, {on_the_hub.name: on_the_hub})]).start()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFIT_", "HF_", "XDG_", "LLAMA_"))}
    env.update(
        HF_ENDPOINT=hub.endpoint,
        HOME=str(home),
        MEMFIT_STATE_DIR=str(home / ".local" / "share" / "memfit"),
        MEMFIT_TOKEN=TOKEN,
        TOKEN=TOKEN,
        NO_PROXY="127.0.0.1,localhost",
    )
    client_dir = tmp_path_factory.mktemp("python-client")
    generated = subprocess.run(
        [
            str(Path(sys.executable).with_name("openapi-python-client")),
            "generate",
            "--path",
            str(ROOT / "openapi.yaml"),
            "--meta",
            "none",
            "--output-path",
            str(client_dir / "memfit_client"),
            "--config",
            str(ROOT / "clients" / "python" / "openapi-python-client.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (home / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "memfit.cli", "serve", "--port", str(port)],
        cwd=home,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # up, and its background index has seen the hub cache
            try:
                listed = httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=2)
                if any(m["modelId"] == f"{LOCAL_REPO}:Q4_K_M" for m in listed.json()["models"]):
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None, (home / "serve.log").read_text()
            assert time.monotonic() < deadline, "memfit serve did not start or index the fake hub cache"
            time.sleep(0.2)
        yield World(home, url, env, client_dir)
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()
        hub.stop()


# `memfit fit` and `memfit plan` exit 3, 4 or 5 for a tight, oversize or unknown verdict: answers (which depend on
# this machine's free memory), not failures of the example.
VERDICT_OK = 'verdict_ok() { "$@" || { rc=$?; [ "$rc" -ge 3 ] && [ "$rc" -le 5 ]; }; }\n'


def _run(block: Block, world: World, **env: str) -> subprocess.CompletedProcess[str]:
    code = block.code.replace(README_ADDRESS, world.url)
    if block.lang == "bash":
        for command in (".venv/bin/memfit fit ", ".venv/bin/memfit plan "):
            code = code.replace(command, f"verdict_ok {command}")
        code = VERDICT_OK + code
        argv = ["bash", "-euo", "pipefail", "-c", code]
        cwd, extra = ROOT, {}
    else:
        argv = [sys.executable, "-c", code]
        cwd, extra = world.client_dir, {"PYTHONPATH": str(world.client_dir)}
    return subprocess.run(argv, cwd=cwd, env={**world.env, **extra, **env}, capture_output=True, text=True, timeout=120)


def test_the_readme_has_examples_and_skips_only_the_listed_ones() -> None:
    assert {b.lang for b in BLOCKS} == {"bash", "python"}
    for block in BLOCKS:
        if block.skip_reason is not None:
            assert block.first_command in SKIPPED, f"{block.where} is skipped but not listed in SKIPPED"
            assert block.skip_reason, f"{block.where}: say why it is not run"
    assert sum(b.skip_reason is None for b in BLOCKS) >= 4


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.where}-{b.lang}" for b in BLOCKS])
def test_readme_example_works_as_written(block: Block, world: World) -> None:
    if block.skip_reason is not None:
        pytest.skip(f"{block.where}: {block.skip_reason}")
    done = _run(block, world)
    output = done.stdout + done.stderr
    where = f"{block.where} ({block.lang}) exited {done.returncode}:\n{output}"
    assert done.returncode == 0, where
    assert not PROBLEM.search(output), where
    assert "answering here" not in done.stderr, where  # the CLI examples ask the running server (its server.json)
    assert not re.search(r'"results":\s*\[\]', output), where
    for model_id in re.findall(r'"modelId": "([^"]+)"|model_id="([^"]+)"', block.code):  # each id is answered
        assert "".join(model_id) in done.stdout, f"{''.join(model_id)} is not in the answer of {where}"


TS_CLIENT = ROOT / "clients" / "ts"


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed (the README calls it optional)")
def test_the_typescript_example_runs_as_written(world: World, tmp_path: Path) -> None:
    """The README's TypeScript block, with the types openapi-typescript generates from openapi.yaml beside it as
    `./memfit`: type-checked (strict), compiled and run by Node.js against the live server; it prints the model."""
    (block,) = re.findall(r"^```typescript\n(.*?)^```", README.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    if not (TS_CLIENT / "node_modules" / ".bin" / "tsc").exists():  # what scripts/check-clients ts installs
        npm = ["npm", "ci", "--prefix", str(TS_CLIENT), "--no-audit", "--no-fund", "--loglevel=error"]
        subprocess.run(npm, check=True, capture_output=True, timeout=300)
    bin_ = TS_CLIENT / "node_modules" / ".bin"
    generate = [str(bin_ / "openapi-typescript"), str(ROOT / "openapi.yaml"), "-o", str(tmp_path / "memfit.d.ts")]
    subprocess.run(generate, check=True, capture_output=True, timeout=120)
    (tmp_path / "readme.ts").write_text(block.replace(README_ADDRESS, world.url))
    config = {
        "compilerOptions": {
            "target": "ES2022",
            "module": "ES2022",
            "moduleResolution": "bundler",
            "strict": True,
            "outDir": "out",
            "typeRoots": [str(TS_CLIENT / "node_modules" / "@types")],
            "types": ["node"],
        },
        "files": ["readme.ts"],
    }
    (tmp_path / "tsconfig.json").write_text(json.dumps(config))
    compiled = subprocess.run([str(bin_ / "tsc"), "-p", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    (tmp_path / "out" / "package.json").write_text('{"type": "module"}')
    ran = subprocess.run(
        ["node", str(tmp_path / "out" / "readme.js")], env=world.env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("Qwen/Qwen3-8B-GGUF:Q4_K_M "), ran.stdout


def test_the_sample_outputs_are_what_memfit_prints() -> None:
    """Each `$ memfit ...` block shows what the command prints on the host the README describes
    (tools/readme_outputs.py: rewrite them with `python -m tools.readme_outputs`)."""
    from tools import readme_outputs

    text = README.read_text(encoding="utf-8")
    assert len(list(readme_outputs.samples(text))) >= 2
    assert readme_outputs.stale(text) == []


def test_the_python_example_reports_a_wrong_token_without_a_traceback(world: World) -> None:
    (block,) = [b for b in BLOCKS if b.lang == "python" and "AuthenticatedClient" in b.code]
    done = _run(block, world, MEMFIT_TOKEN="not-the-token")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "401 unauthorized" in done.stderr
