"""The environment a request is judged against: committed memory from the process table, GPUs from NVML or
Metal (each through a stand-in module)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import NoReturn

import psutil
import pytest

from memfit import wire
from memfit.estimator.bounds import Part
from memfit.estimator.device_forecast import DeviceShare, DeviceVerdicts, judge_devices
from memfit.estimator.machine import GpuBackend, GpuMemory
from memfit.estimator.vocabulary import Basis, Component
from memfit.generated.models import WireFitVerdictRequest
from memfit.readers import engines
from memfit.readers.gpu_memory import GpuReader
from memfit.readers.metal import MetalReader, read_wired_limit_mb
from memfit.readers.model_roots import Root, RootKind
from memfit.readers.nvml import NvmlReader, visible
from memfit.service_builder import build_service

# --- committed memory: a real stand-in engine process ---------------------------------------------


@pytest.fixture
def stand_in_engine(tmp_path: Path) -> Iterator[psutil.Process]:
    """`sleep` copied under the name llama-server, running and settled: asleep in its one system call with the
    same resident set twice 50 ms apart (while the loader maps its libraries the resident set still grows)."""
    binary = tmp_path / "llama-server"
    sleep = shutil.which("sleep")
    assert sleep is not None
    shutil.copy(sleep, binary)
    process = subprocess.Popen([str(binary), "60"])
    try:
        engine = psutil.Process(process.pid)
        deadline = time.monotonic() + 5
        previous = -1
        while time.monotonic() < deadline:
            rss = engine.memory_info().rss
            if engine.name() == "llama-server" and engine.status() == psutil.STATUS_SLEEPING and rss == previous:
                break
            previous = rss
            time.sleep(0.05)
        yield engine
    finally:
        process.kill()
        process.wait()


def test_committed_bytes_count_a_running_engine(stand_in_engine: psutil.Process) -> None:
    scanner = engines.EngineScanner()
    with_engine = scanner.committed_bytes()
    rss = stand_in_engine.memory_info().rss
    assert with_engine is not None and with_engine >= rss > 0
    again = scanner.committed_bytes()
    assert again is not None and again >= rss  # the second reading reuses the classification
    stand_in_engine.kill()
    stand_in_engine.wait()
    without = scanner.committed_bytes()
    assert without is not None and without <= with_engine - rss + (1 << 20)


def test_a_python_engine_is_known_by_its_command_line(tmp_path: Path) -> None:
    """A stand-in vLLM server: `python -m vllm.entrypoints.openai.api_server` from a package that only sleeps."""
    package = tmp_path / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (tmp_path / "vllm", tmp_path / "vllm" / "entrypoints", package):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text("import time\ntime.sleep(60)\n")
    scanner = engines.EngineScanner()
    before = scanner.committed_bytes()
    assert before is not None
    process = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server"], cwd=tmp_path)
    try:
        time.sleep(0.5)
        rss = psutil.Process(process.pid).memory_info().rss
        after = scanner.committed_bytes()
        assert after is not None and after >= before + rss - (1 << 20)
    finally:
        process.kill()
        process.wait()
    assert engines.is_engine("ollama", ["/usr/bin/ollama", "runner", "--model", "/m"])
    assert not engines.is_engine("ollama", ["ollama", "serve"])


def test_unreadable_process_table_is_null(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*args: object, **kwargs: object) -> NoReturn:
        raise psutil.AccessDenied()

    monkeypatch.setattr(engines.psutil, "pids", denied)
    assert engines.EngineScanner().committed_bytes() is None


def test_committed_bytes_reach_the_budget(public_models: Path, stand_in_engine: psutil.Process) -> None:
    service = build_service([Root(str(public_models), RootKind.PLAIN)])
    service.index.refresh()
    budget = wire.fit_batch(service, [WireFitVerdictRequest(model_id="qwen3-f16")]).results[0].budget
    assert budget.committed_bytes is not None and budget.committed_bytes >= stand_in_engine.memory_info().rss


# --- GPUs: a stand-in NVML module behind the same reader ------------------------------------------


class FakeNvmlError(Exception):
    pass


def fake_nvml(devices: list[tuple[str, int, int]], fail: str | None = None) -> ModuleType:
    """An NVML with `devices` (uuid, free, total); `fail` names the call that raises NVMLError: pynvml's calls on a
    namespace, in pynvml's module's place."""

    def call(name: str, result: Callable[..., object]) -> Callable[..., object]:
        def f(*args: object) -> object:
            if fail == name:
                raise FakeNvmlError(name)
            return result(*args)

        return f

    return SimpleNamespace(  # type: ignore[return-value]  # duck-typed: only the calls NvmlReader makes
        NVMLError=FakeNvmlError,
        nvmlInit=call("nvmlInit", lambda: None),
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=call("nvmlDeviceGetCount", lambda: len(devices)),
        nvmlDeviceGetHandleByIndex=call("nvmlDeviceGetHandleByIndex", lambda i: i),
        nvmlDeviceGetUUID=call("nvmlDeviceGetUUID", lambda h: devices[h][0].encode()),
        nvmlDeviceGetMemoryInfo=call(
            "nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(free=devices[h][1], total=devices[h][2], used=0)
        ),
    )


GIB = 1 << 30
TWO_GPUS = [("GPU-aaaa-1111", 10 * GIB, 24 * GIB), ("GPU-bbbb-2222", 6 * GIB, 24 * GIB)]


def test_reader_lists_visible_gpus() -> None:
    gpus = NvmlReader(fake_nvml(TWO_GPUS), environ={}).read()
    assert gpus == [GpuMemory(0, "GPU-aaaa-1111", 10 * GIB, 24 * GIB), GpuMemory(1, "GPU-bbbb-2222", 6 * GIB, 24 * GIB)]


@pytest.mark.parametrize(
    "selector, indices",
    [("1", [1]), ("0,1", [0, 1]), ("GPU-bbbb", [1]), ("bbbb-2222", [1]), ("", []), ("1,,0", [1]), ("7", [])],
)
def test_cuda_visible_devices(selector: str, indices: list[int]) -> None:
    gpus = _gpus(NvmlReader(fake_nvml(TWO_GPUS), environ={"CUDA_VISIBLE_DEVICES": selector}))
    assert [g.index for g in gpus] == indices
    assert visible(0, "GPU-aaaa-1111", None)


@pytest.mark.parametrize(
    "fail",
    ["nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo"],
)
def test_any_nvml_failure_means_no_gpu_answer(fail: str) -> None:
    assert NvmlReader(fake_nvml(TWO_GPUS, fail=fail), environ={}).read() is None


def test_missing_nvml_library_means_no_gpu_answer() -> None:
    """This machine has no NVIDIA driver: the real pynvml fails to initialise."""
    assert NvmlReader().read() is None


def _share(name: str, gpu: GpuMemory | None, weights: int, workspace: int | None, holds: bool = True) -> DeviceShare:
    parts = (
        Part(Component.WEIGHTS, weights, Basis.MEASURED_ARTIFACT, ""),
        Part(Component.WORKSPACE, workspace, Basis.DERIVED_LAYOUT if workspace is not None else Basis.UNKNOWN, ""),
    )
    return DeviceShare(name, gpu, parts, holds, "")


def _gpus(reader: GpuReader) -> list[GpuMemory]:
    """The reader's GPUs, where a test's stand-in library answers."""
    gpus = reader.read()
    assert gpus is not None
    return gpus


def _judged(
    host: tuple[int, int | None], gpus: list[GpuMemory], on_gpus: list[tuple[int, int | None]]
) -> DeviceVerdicts:
    on = [_share(f"CUDA{i}", g, *s) for i, (g, s) in enumerate(zip(gpus, on_gpus, strict=True))]
    shares = [_share("host", None, *host), *on]
    return judge_devices(shares, 16 * GIB, Fraction(1, 10), True)


@pytest.mark.parametrize(
    "on_gpus, admits",
    [
        ([(8 * GIB, GIB), (4 * GIB, GIB)], True),  # 9 GiB of 10 free, 5 of 6
        ([(10 * GIB, 1), (1, 1)], False),  # 10 GiB + 1 B on a GPU with 10 free: the other GPU's room does not help
        ([(10 * GIB, None), (5 * GIB, None)], True),  # the floors fit; the unknown workspace adds nothing to a floor
    ],
)
def test_admission_is_every_gpus_floor_in_its_free_memory(on_gpus: list, admits: bool) -> None:
    gpus = _gpus(NvmlReader(fake_nvml(TWO_GPUS), environ={}))
    assert _judged((GIB, GIB), gpus, on_gpus).gpu_admits is admits


def test_no_gpu_reading_and_no_visible_gpu() -> None:
    shares = [_share("host", None, GIB, GIB)]
    assert judge_devices(shares, 16 * GIB, Fraction(1, 10), False).gpu_admits is None
    assert judge_devices(shares, 16 * GIB, Fraction(1, 10), True).gpu_admits is False


@pytest.mark.parametrize(
    "host, on_gpus, verdicts, verdict, decided_by",
    [
        # 16 GiB of host budget, 10 and 6 GiB free on the GPUs, a 10% margin
        ((GIB, GIB), [(7 * GIB, GIB), (4 * GIB, GIB)], ["good", "good", "good"], "good", "host"),
        ((GIB, GIB), [(8 * GIB, 3 * GIB // 2), (4 * GIB, GIB)], ["good", "tight", "good"], "tight", "CUDA0"),  # 9.5 GiB
        ((15 * GIB, 0), [(5 * GIB, 6 * GIB), (4 * GIB, GIB)], ["tight", "oversize", "good"], "oversize", "CUDA0"),
        ((GIB, None), [(11 * GIB, None), (4 * GIB, GIB)], ["unknown", "oversize", "good"], "oversize", "CUDA0"),
        ((GIB, None), [(8 * GIB, GIB), (4 * GIB, GIB)], ["unknown", "good", "good"], "unknown", "host"),
    ],
)
def test_each_pool_is_judged_against_its_own_budget(
    host: tuple, on_gpus: list, verdicts: list[str], verdict: str, decided_by: str
) -> None:
    judged = _judged(host, _gpus(NvmlReader(fake_nvml(TWO_GPUS), environ={})), on_gpus)
    assert [str(v) for v in judged.verdicts] == verdicts
    assert (judged.verdict, judged.decided_by) == (verdict, decided_by)


def test_a_gpu_holding_nothing_decides_nothing() -> None:
    gpus = _gpus(NvmlReader(fake_nvml(TWO_GPUS), environ={}))
    shares = [_share("host", None, GIB, GIB), _share("CUDA0", gpus[0], 0, None, holds=False)]
    judged = judge_devices(shares, 16 * GIB, Fraction(1, 10), True)
    assert [str(v) for v in judged.verdicts] == ["good", "unknown"]
    assert (judged.verdict, judged.decided_by, judged.gpu_admits) == ("good", "host", True)


def test_nvml_reading_reaches_the_answer(public_models: Path) -> None:
    service = build_service(
        [Root(str(public_models), RootKind.PLAIN)], nvml=NvmlReader(fake_nvml(TWO_GPUS), environ={})
    )
    service.index.refresh()
    requests = [
        WireFitVerdictRequest(model_id="qwen3-f16"),
        WireFitVerdictRequest(model_id="qwen3-f16", mode="x"),
        WireFitVerdictRequest(model_id="qwen3-f16", allocated_tokens=0),
    ]
    fits, unknown_mode, refused = wire.fit_batch(service, requests).results
    assert fits.gpu_admits is True and "gpuTelemetryUnavailable" not in fits.limits
    assert unknown_mode.gpu_admits is None and refused.gpu_admits is None
    failing = build_service(index=service.index, nvml=NvmlReader(fake_nvml(TWO_GPUS, fail="nvmlInit"), environ={}))
    result = wire.fit_batch(failing, requests[:1]).results[0]
    assert result.gpu_admits is None and "gpuTelemetryUnavailable" in result.limits


# --- Metal (a Mac): a stand-in for PyObjC's Metal module -------------------------------------------


class FakeObjcError(Exception):
    """What PyObjC raises (objc.error) when a call into Objective-C fails."""


def fake_metal(device: tuple[str, int, int, bool] | None, fail: str | None = None) -> SimpleNamespace:
    """PyObjC's `Metal` as memfit uses it: MTLCreateSystemDefaultDevice() returns an MTLDevice whose properties
    are methods (name, recommendedMaxWorkingSetSize, currentAllocatedSize, hasUnifiedMemory), or None."""

    def call(name: str, value: object) -> Callable[..., object]:
        def f(*args: object) -> object:
            if name == fail:
                raise FakeObjcError(name)
            return value

        return f

    mtl_device = None
    if device is not None:
        name, working_set, allocated, unified = device
        mtl_device = SimpleNamespace(
            name=call("name", name),
            recommendedMaxWorkingSetSize=call("recommendedMaxWorkingSetSize", working_set),
            currentAllocatedSize=call("currentAllocatedSize", allocated),
            hasUnifiedMemory=call("hasUnifiedMemory", unified),
        )
    return SimpleNamespace(MTLCreateSystemDefaultDevice=call("MTLCreateSystemDefaultDevice", mtl_device))


M3_MAX = ("Apple M3 Max", 48 * GIB, 0, True)  # a 64 GiB Mac: Metal recommends 75% of it


def test_metal_reads_the_working_set_llama_cpp_plans_against() -> None:
    reader = MetalReader(fake_metal(M3_MAX), wired_limit_mb=lambda: 0)
    assert reader.read() == [
        GpuMemory(0, "metal:Apple M3 Max", 48 * GIB, 48 * GIB, unified=True, backend=GpuBackend.METAL)
    ]
    held = MetalReader(fake_metal(("Apple M3 Max", 48 * GIB, 5 * GIB, True)), wired_limit_mb=lambda: 0)
    assert held.read() == [
        GpuMemory(0, "metal:Apple M3 Max", 43 * GIB, 48 * GIB, unified=True, backend=GpuBackend.METAL)
    ]  # free = total - held


def test_a_raised_wired_limit_is_the_working_set_and_is_reread() -> None:
    limit = {"mb": 56 * 1024}  # sudo sysctl iogpu.wired_limit_mb=57344
    calls: list[int] = []
    now = {"t": 0.0}

    def sysctl() -> int:
        calls.append(limit["mb"])
        return limit["mb"]

    reader = MetalReader(fake_metal(M3_MAX), wired_limit_mb=sysctl, clock=lambda: now["t"])
    assert [(g.free, g.total) for g in reader.read() or []] == [(56 * GIB, 56 * GIB)]
    limit["mb"] = 0  # back to the default, which takes effect at the next reading of the sysctl
    now["t"] = 5.0
    assert _gpus(reader)[0].total == 56 * GIB and len(calls) == 1  # read at most every 10 s
    now["t"] = 10.0
    assert _gpus(reader)[0].total == 48 * GIB and len(calls) == 2
    assert _gpus(MetalReader(fake_metal(M3_MAX), wired_limit_mb=lambda: None))[0].total == 48 * GIB  # no sysctl


def test_metal_without_a_device_admits_nothing() -> None:
    gpus = MetalReader(fake_metal(None), wired_limit_mb=lambda: 0).read()
    assert gpus == [] and judge_devices([_share("host", None, 1, 1)], GIB, Fraction(1, 10), True).gpu_admits is False


@pytest.mark.parametrize(
    "fail",
    [
        "MTLCreateSystemDefaultDevice",
        "name",
        "recommendedMaxWorkingSetSize",
        "currentAllocatedSize",
        "hasUnifiedMemory",
    ],
)
def test_any_metal_failure_means_no_gpu_answer(fail: str) -> None:
    assert MetalReader(fake_metal(M3_MAX, fail=fail), wired_limit_mb=lambda: 0).read() is None


def test_metal_is_not_imported_off_a_mac(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off macOS the real reader never imports Metal (nor runs sysctl); on macOS without pyobjc-framework-Metal
    (an import failure) it answers None, as NVML's absence does."""
    assert MetalReader().read() is None and read_wired_limit_mb() is None and "Metal" not in sys.modules
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setitem(sys.modules, "Metal", None)  # `import Metal` raises ImportError
    assert MetalReader(wired_limit_mb=lambda: 0).read() is None


@pytest.mark.parametrize(
    "host, on_gpu, verdicts, verdict",
    [
        # a 64 GiB Mac, 60 GiB of it available; Metal's working set 48 GiB; a 10% margin
        ((2 * GIB, 0), (40 * GIB, 2 * GIB), ["good", "good"], "good"),  # 44 GiB on the host's memory: 48.4 <= 60
        ((2 * GIB, 0), (40 * GIB, 8 * GIB), ["good", "tight"], "tight"),  # exactly the working set
        ((14 * GIB, 0), (40 * GIB, 2 * GIB), ["tight", "good"], "tight"),  # 56 GiB of host memory: 61.6 > 60
        ((20 * GIB, 0), (40 * GIB, 2 * GIB), ["oversize", "good"], "oversize"),
    ],
)
def test_on_unified_memory_the_gpu_is_the_host_pool_within_the_working_set(
    host: tuple, on_gpu: tuple, verdicts: list[str], verdict: str
) -> None:
    gpus = _gpus(MetalReader(fake_metal(M3_MAX), wired_limit_mb=lambda: 0))
    shares = [_share("host", None, *host), _share("MTL0", gpus[0], *on_gpu)]
    judged = judge_devices(shares, 60 * GIB, Fraction(1, 10), True)
    assert [str(v) for v in judged.verdicts] == verdicts and judged.verdict == verdict


def test_metal_reading_reaches_the_answer(public_models: Path) -> None:
    """On a Mac (no NVIDIA driver: NVML fails), gpuAdmits comes from Metal; with neither, it is null."""
    no_nvml = NvmlReader(fake_nvml(TWO_GPUS, fail="nvmlInit"), environ={})
    service = build_service(
        [Root(str(public_models), RootKind.PLAIN)],
        nvml=no_nvml,
        metal=MetalReader(fake_metal(M3_MAX), wired_limit_mb=lambda: 0),
    )
    service.index.refresh()
    result = wire.fit_batch(service, [WireFitVerdictRequest(model_id="qwen3-f16")]).results[0]
    assert result.gpu_admits is True and "gpuTelemetryUnavailable" not in result.limits
    tiny = build_service(
        index=service.index,
        nvml=no_nvml,
        metal=MetalReader(fake_metal(("Apple M1", 1 << 20, 0, True)), wired_limit_mb=lambda: 0),
    )
    assert wire.fit_batch(tiny, [WireFitVerdictRequest(model_id="qwen3-f16")]).results[0].gpu_admits is False
    for metal in (MetalReader(fake_metal(M3_MAX, fail="MTLCreateSystemDefaultDevice")), MetalReader()):
        neither = build_service(index=service.index, nvml=no_nvml, metal=metal)
        result = wire.fit_batch(neither, [WireFitVerdictRequest(model_id="qwen3-f16")]).results[0]
        assert result.gpu_admits is None and "gpuTelemetryUnavailable" in result.limits
