"""The package's import graph, drawn by layer: which layer imports which, and every import that runs upward.

    python -m tools.import_layers            the layers, the edges between them, and the upward imports
    python -m tools.import_layers --check    exit 1 when an import runs upward

Every module of the package (memfit/, whose estimator, service, generated and handlers are links to the top-level
folders) is read with `ast`; an import inside a function or under TYPE_CHECKING counts as much as one at the top, since
it is a dependency all the same. A module's layer is the first of LAYERS whose prefixes it starts with.
"""

from __future__ import annotations

import ast
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Bottom to top: a layer may import its own and those below it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "leaf",
        ("memfit.integers", "memfit.quant_names", "memfit.gguf_constants", "memfit.generated", "memfit.server_proof"),
    ),
    ("mirror", ("memfit.estimator",)),  # llama.cpp's rules: domain types in and out, no I/O
    ("readers", ("memfit.readers", "memfit.token_file", "memfit.server_record")),  # I/O: files, the host, the GPUs
    (
        "service",
        ("memfit.service", "memfit.config", "memfit.service_builder", "memfit.telemetry"),
    ),
    ("adapter", ("memfit.wire", "memfit.workload_flags")),  # the wire's words <-> domain types
    ("http", ("memfit.http",)),  # HTTP plumbing: nothing above it
    ("handlers", ("memfit.handlers",)),
    ("app", ("memfit",)),  # the app, the server's processes, the CLI
)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name (memfit/ and its subpackages, the linked folders included)."""
    found: dict[str, Path] = {}
    for folder, _, files in os.walk(ROOT / "memfit", followlinks=True):
        for path in sorted(Path(folder) / f for f in files if f.endswith(".py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The package's modules `path` imports (a `from package import module` names the module)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names
            ]
        else:
            continue
        yield from (t for t in targets if t in known)


def layer(module: str) -> int:
    return next(i for i, (_, prefixes) in enumerate(LAYERS) if module.startswith(prefixes))


def edges() -> Counter[tuple[str, str]]:
    known = modules()
    return Counter((source, target) for source, path in known.items() for target in imports(path, known))


def main(argv: list[str]) -> int:
    found = edges()
    between = Counter((layer(a), layer(b)) for a, b in found if layer(a) != layer(b))
    upward = sorted((a, b) for a, b in found if layer(b) > layer(a))
    if "--check" not in argv:
        print("layers, bottom to top: " + " < ".join(name for name, _ in LAYERS))
        for (a, b), n in sorted(between.items()):
            arrow = "UPWARD" if b > a else ""
            print(f"  {LAYERS[a][0]:>8} -> {LAYERS[b][0]:<8} {n:4d} imports {arrow}")
    for importer, imported in upward:
        print(f"upward: {importer} ({LAYERS[layer(importer)][0]}) imports {imported} ({LAYERS[layer(imported)][0]})")
    print(f"{len(upward)} upward imports")
    return 1 if upward and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
