"""`memfit models` and `memfit fit`: the API's answers at a terminal, from the same estimator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.cli import main
from memfit.generated.models import WireFitVerdictBatch, WireModelList


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_fit_prints_a_table_for_a_local_file_and_a_catalog_id(
    public_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(
        capsys,
        "fit",
        "qwen3-f16",
        "Qwen/Qwen3-8B-GGUF:Q8_0",
        "--tokens",
        "8192",
        "--models",
        str(public_models),
        "--no-usual-dirs",
    )
    assert code == 0
    local, catalog = out.split("\n\n")
    assert local.startswith("qwen3-f16: ") and "measuredArtifact" in local and "derivedLayout" in local
    assert "8192 tokens (requested)" in local and "budget" in local and "hostAvailable" in local
    assert catalog.startswith("Qwen/Qwen3-8B-GGUF:Q8_0: ") and "parameterProxy" not in catalog
    assert "artifactNotOnDisk" in catalog and "not on disk" in catalog


def test_fit_json_is_the_api_answer(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys,
        "fit",
        "llama-gqa-f16",
        "--streams",
        "2",
        "--key-bytes",
        "1",
        "--json",
        "--models",
        str(public_models),
        "--no-usual-dirs",
    )
    batch = WireFitVerdictBatch.model_validate_json(out)
    assert code == 0 and batch.results[0].estimate.workload.streams == 2
    assert batch.results[0].estimate.workload.key_element_bytes == 1


def test_fit_says_which_ids_it_does_not_know(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(
        capsys, "fit", "qwen3-f16", "no/such-model", "--models", str(public_models), "--no-usual-dirs"
    )
    assert code == 1 and "no/such-model" in err and out.startswith("qwen3-f16: ")


def test_fit_shows_a_refusal(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "fit", "llama-gqa-f16", "--tokens", "100000", "--models", str(public_models), "--no-usual-dirs"
    )
    assert code == 0 and "refused   contextExceedsModelLimit" in out and "UNKNOWN" in out


def test_models_lists_local_then_catalog(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "models", "--models", str(public_models), "--no-usual-dirs")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["MODEL", "SOURCE", "ARCH"]
    sources = [line.split()[1] for line in lines[2:]]
    assert sources[0] == "local" and sources[-1] == "catalog" and sources == sorted(sources, key="local".__ne__)
    code, out, _ = _run(capsys, "models", "--json", "--models", str(public_models), "--no-usual-dirs")
    listing = WireModelList.model_validate(json.loads(out))
    assert any(m.model_id == "qwen3-f16" and m.source == "local" for m in listing.models)
