"""openapi.yaml may only break existing clients with a new major revision and a CHANGELOG.md note."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tools.api_compat import Spec, breaking_changes, load

ROOT = Path(__file__).resolve().parent.parent
CURRENT = load(str(ROOT / "openapi.yaml"))


def _released() -> list[Path]:
    return sorted((ROOT / "api").glob("openapi-*.yaml"), key=lambda p: int(re.findall(r"\d+", p.name)[0]))


def test_current_spec_keeps_its_released_major_or_declares_a_new_one() -> None:
    last = _released()[-1]
    released = load(str(last))
    breaks = breaking_changes(released, CURRENT)
    current_major, released_major = Spec(CURRENT).major, Spec(released).major
    if current_major == released_major:
        assert breaks == [], f"breaking changes without a new major revision (vs {last.name})"
    else:
        assert current_major == released_major + 1
        version = CURRENT["info"]["version"]
        assert f"## {version}" in (ROOT / "CHANGELOG.md").read_text(), f"CHANGELOG.md has no '## {version}' section"


def test_every_released_major_is_noted_in_the_changelog() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    for path in _released():
        assert f"## {load(str(path))['info']['version']}" in changelog, path.name


def _schemas(doc: dict) -> dict:
    return doc["components"]["schemas"]


BREAKING: dict[str, Callable[[dict], None]] = {
    "removed path": lambda d: d["paths"].pop("/v1/models"),
    "removed operation": lambda d: d["paths"]["/v1/models/fit"].pop("post"),
    "removed response field": lambda d: _schemas(d)["WireFitVerdictResult"]["properties"].pop("gpuAdmits"),
    "response field no longer required": lambda d: _schemas(d)["WireFitMemoryPart"]["required"].remove("note"),
    "response field may be null": lambda d: _schemas(d)["WireFitMemoryEstimate"]["properties"][
        "lowerBoundBytes"
    ].update(nullable=True),
    "request field made required": lambda d: _schemas(d)["WireFitVerdictRequest"]["required"].append("streams"),
    "request type narrowed": lambda d: _schemas(d)["WireFitVerdictRequest"]["properties"]["mode"].update(
        type="integer"
    ),
    "request bound tightened": lambda d: _schemas(d)["WireFitVerdictRequest"]["properties"]["streams"].update(
        maximum=64
    ),
    "request null refused": lambda d: _schemas(d)["WireFitVerdictRequest"]["properties"]["allocatedTokens"].pop(
        "nullable"
    ),
    "closed enum": lambda d: _schemas(d)["WireFitVerdictResult"]["properties"]["verdict"].update(
        enum=["good", "tight", "oversize", "unknown"]
    ),
    "success response removed": lambda d: d["paths"]["/health"]["get"]["responses"].pop("200"),
}

COMPATIBLE: dict[str, Callable[[dict], None]] = {
    "new optional request field": lambda d: _schemas(d)["WireFitVerdictRequest"]["properties"].update(
        priority={"type": "string", "nullable": True}
    ),
    "new response field": lambda d: _schemas(d)["WireHealth"]["properties"].update(uptime={"type": "integer"}),
    "new path": lambda d: d["paths"].update({"/v1/extra": copy.deepcopy(d["paths"]["/health"])}),
    "request bound loosened": lambda d: _schemas(d)["WireFitVerdictRequest"]["properties"]["keyElementBytes"].update(
        minimum=0
    ),
}


@pytest.mark.parametrize("edit", BREAKING.values(), ids=BREAKING.keys())
def test_breaking_edits_are_caught(edit: Callable[[dict], None]) -> None:
    edited = copy.deepcopy(CURRENT)
    edit(edited)
    assert breaking_changes(CURRENT, edited)


@pytest.mark.parametrize("edit", COMPATIBLE.values(), ids=COMPATIBLE.keys())
def test_compatible_edits_pass(edit: Callable[[dict], None]) -> None:
    edited = copy.deepcopy(CURRENT)
    edit(edited)
    assert breaking_changes(CURRENT, edited) == []


def test_a_stale_generated_module_is_caught(tmp_path: Path) -> None:
    """`datamodel-codegen --check` (what scripts/test runs) fails once openapi.yaml changes without a regeneration."""
    import shutil
    import subprocess
    import sys

    (tmp_path / "generated").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copy(ROOT / "generated" / "models.py", tmp_path / "generated" / "models.py")
    spec = (ROOT / "openapi.yaml").read_text()
    generator = [str(Path(sys.executable).with_name("datamodel-codegen")), "--check"]
    (tmp_path / "openapi.yaml").write_text(spec)
    assert subprocess.run(generator, cwd=tmp_path, capture_output=True, timeout=120).returncode == 0
    (tmp_path / "openapi.yaml").write_text(
        spec.replace("        hasProjector:", "        tags:\n          type: string\n        hasProjector:")
    )
    assert subprocess.run(generator, cwd=tmp_path, capture_output=True, timeout=120).returncode != 0
