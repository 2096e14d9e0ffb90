"""`memfit measure`: what llama.cpp's log says it allocated, recorded in the history."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit.cli import main
from memfit.measure import MIB, parse_llama_log
from tools.truth import DATA


def test_parts_from_a_real_llama_cpp_log() -> None:
    """A log of llama-cpp-python 0.3.36 loading granitehybrid-f16 with 2048 tokens x 2 streams, q8_0 K/V."""
    parts = parse_llama_log((DATA / "llama_cpp_load_granitehybrid.log").read_text())
    assert parts.weights == round(12.46 * MIB)
    assert parts.kv_cache == round(1.06 * MIB) and parts.recurrent_state == round(1.06 * MIB)
    assert parts.workspace == round((17.00 + 0.06) * MIB)  # compute + output; the teardown line is not counted


def test_buffers_on_several_devices_add_up() -> None:
    log = (
        "load_tensors:        CUDA0 model buffer size =  1000.00 MiB\n"
        "load_tensors:   CPU_Mapped model buffer size =   250.50 MiB\n"
        "sched_reserve:      CUDA0 compute buffer size =   300.00 MiB\n"
        "sched_reserve:  CUDA_Host compute buffer size =    12.00 MiB\n"
    )
    parts = parse_llama_log(log)
    assert parts.weights == round(1250.5 * MIB) and parts.workspace == 312 * MIB and parts.kv_cache == 0


def test_measure_without_llama_cpp_python_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str], public_models: Path
) -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        assert main(["measure", "qwen3-f16", "--models", str(public_models), "--no-usual-dirs"]) == 2
        assert "memfit[measure]" in capsys.readouterr().err
    else:
        pytest.skip("llama-cpp-python is installed here; test_measure_records_an_observation covers it")


def test_measure_records_an_observation(
    public_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("llama_cpp", reason="needs the memfit[measure] extra (a 13-minute source build)")
    monkeypatch.setenv("MEMFIT_STATE_DIR", str(tmp_path))
    assert main(["measure", "qwen3-f16", "--tokens", "2048", "--models", str(public_models), "--no-usual-dirs"]) == 0
    assert "recorded as observation 1" in capsys.readouterr().out
    assert main(["fit", "qwen3-f16", "--tokens", "2048", "--models", str(public_models), "--no-usual-dirs"]) == 0
    assert "measuredArtifact          measured by llama-cpp-python" in capsys.readouterr().out
