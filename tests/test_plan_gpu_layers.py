"""A plan on GPUs (issue 24 item 5): the largest gpuLayers each verdict allows at the plan's context, and the
fitter's own choice. Held against fits of every gpuLayers in turn (the search assumes each GPU's share grows with the
layers and the host's shrinks) and against the fit that asks the fitter (mode cpuOffload)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit.estimator.fit_types import FitRequest
from memfit.estimator.machine import HostMemory
from memfit.estimator.plan import largest_placed
from memfit.estimator.vocabulary import Mode, Refusal, Verdict
from memfit.estimator.workload import WorkloadRequest
from memfit.readers.declared_gpus import declared_gpus
from memfit.readers.model_roots import Root, RootKind
from memfit.service.answers import Settings
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tools.gguf_writers import gemma3_4b, qwen3_30b_a3b, write_model

GIB = 1 << 30


def test_the_largest_placed_is_where_the_gpus_stop_meeting_it_if_the_host_meets_it_there() -> None:
    """Hand-written pools: the GPUs meet the verdict up to 20 layers, the host from 12 on."""
    calls: list[int] = []

    def meets(n: int) -> tuple[bool, bool]:
        calls.append(n)
        return n <= 20, n >= 12

    assert largest_placed(35, meets) == 20
    assert len(calls) <= 8  # a binary search, not a scan
    assert largest_placed(35, lambda n: (n <= 20, n >= 25)) is None  # the host needs more than the GPUs take
    assert largest_placed(35, lambda n: (True, True)) == 35
    assert largest_placed(35, lambda n: (False, True)) is None  # not even the GPUs' compute buffers at 0 layers
    assert largest_placed(35, lambda n: (n == 0, True)) == 0


def _on_gpu(models: Path, gpu: str, host_gib: tuple[int, int]) -> FitService:
    """A service over `models` with `gpu` declared and the host's (available, total) GiB, its index read."""
    available, total = host_gib
    service = build_service(
        [Root(str(models), RootKind.PLAIN)],
        settings=Settings(gpus=declared_gpus([gpu], {})),
        read_host=lambda: HostMemory(available=available * GIB, total=total * GIB),
    )
    service.index.refresh()
    return service


@pytest.mark.parametrize("gpu", ["cuda:1536MiB", "cuda:3GiB:1GiB"])
def test_a_plan_on_a_gpu_names_the_layers_each_verdict_allows(tmp_path: Path, gpu: str) -> None:
    write_model(gemma3_4b(), tmp_path / "gemma.gguf")  # 2.0 GiB of weights, 34 layers and the output layer
    service = _on_gpu(tmp_path, gpu, host_gib=(8, 16))
    workload = WorkloadRequest(allocated_tokens=8192)
    (plan,) = service.plan_batch([FitRequest("gemma", workload)])
    (quant,) = plan.quants
    layers = quant.gpu_layers
    assert layers is not None

    def verdict(n: int) -> Verdict:
        (result,) = service.fit_batch([FitRequest("gemma", WorkloadRequest(allocated_tokens=8192, gpu_layers=n))])
        return result.verdict

    verdicts = [verdict(n) for n in range(35 + 1)]
    good = [n for n, v in enumerate(verdicts) if v is Verdict.GOOD]
    tight = [n for n, v in enumerate(verdicts) if v in (Verdict.GOOD, Verdict.TIGHT)]
    assert layers.good == (max(good) if good else None)
    assert layers.tight == (max(tight) if tight else None)
    assert layers.good is not None and 0 < layers.good < 35  # the GPU holds some layers, not all

    (offload,) = service.fit_batch([FitRequest("gemma", WorkloadRequest(allocated_tokens=8192, mode="cpuOffload"))])
    assert layers.fitter == offload.workload.placement.gpu_layers
    assert layers.n_cpu_moe_good is None and layers.n_cpu_moe_tight is None  # no experts


def test_without_gpus_a_plan_names_no_layers(tmp_path: Path) -> None:
    write_model(gemma3_4b(), tmp_path / "gemma.gguf")
    service = build_service([Root(str(tmp_path), RootKind.PLAIN)], nvml=_no_gpus(), metal=_no_gpus())
    service.index.refresh()
    (plan,) = service.plan_batch([FitRequest("gemma", WorkloadRequest(allocated_tokens=8192))])
    assert plan.quants[0].gpu_layers is None


class _no_gpus:
    def read(self) -> None:
        return None


def test_a_plan_of_a_moe_model_names_the_fewest_layers_whose_experts_stay_on_the_host(tmp_path: Path) -> None:
    """Qwen3-30B-A3B's shape (48 layers, 128 experts, Q4_0: 16 GiB) on a 12 GiB GPU: with -ngl all, the fewest
    --n-cpu-moe whose verdict is good (and at least tight) is good there and not one layer fewer."""
    write_model(qwen3_30b_a3b(), tmp_path / "moe.gguf")
    service = _on_gpu(tmp_path, "cuda:12GiB", host_gib=(32, 64))
    (plan,) = service.plan_batch([FitRequest("moe", WorkloadRequest(allocated_tokens=8192))])
    layers = plan.quants[0].gpu_layers
    assert layers is not None and layers.n_cpu_moe_good is not None and layers.n_cpu_moe_tight is not None

    def verdict(n_cpu_moe: int) -> Verdict:
        asked = WorkloadRequest(allocated_tokens=8192, gpu_layers="all", n_cpu_moe=n_cpu_moe)
        (result,) = service.fit_batch([FitRequest("moe", asked)])
        return result.verdict

    assert 0 < layers.n_cpu_moe_good < 48
    assert verdict(layers.n_cpu_moe_good) is Verdict.GOOD
    assert verdict(layers.n_cpu_moe_good - 1) is not Verdict.GOOD
    assert verdict(layers.n_cpu_moe_tight) in (Verdict.GOOD, Verdict.TIGHT)
    if layers.n_cpu_moe_tight > 0:
        assert verdict(layers.n_cpu_moe_tight - 1) not in (Verdict.GOOD, Verdict.TIGHT)


@pytest.mark.parametrize("streams", [0, -1])
def test_a_refused_plan_on_a_gpu_names_no_layers(tmp_path: Path, streams: int) -> None:
    """A plan or a cpuOffload fit llama.cpp could not make (no sequences) is refused, GPUs or not: no layers
    searched, no fitter asked (its projection divided the context by the streams: a 500)."""
    write_model(gemma3_4b(), tmp_path / "gemma.gguf")
    service = _on_gpu(tmp_path, "cuda:3GiB", host_gib=(8, 16))
    (plan,) = service.plan_batch([FitRequest("gemma", WorkloadRequest(streams=streams))])
    (quant,) = plan.quants
    assert quant.gpu_layers is None and quant.fit.verdict is Verdict.UNKNOWN
    (fit,) = service.fit_batch([FitRequest("gemma", WorkloadRequest(streams=streams, mode=Mode.CPU_OFFLOAD))])
    assert fit.refusal is Refusal.NON_POSITIVE_STREAMS and fit.verdict is Verdict.UNKNOWN
