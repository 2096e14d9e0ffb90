"""memfit per device against llama.cpp on a real NVIDIA GPU, in one run of under ten minutes (issue 24, item 6).

    python -m tools.truth.gpu_check [--bundle DIR | --mock] [--cache DIR] [--out DIR] [--budget-s S] [--models K,..]

For four models written with tools/gguf_writers (dense, SWA, MoE, hybrid) it runs the probe
(tools/truth/mock/probe_mock.cpp) on the GPU: llama.cpp's dry run at a few -ngl values across the output layer's
edge (half the layers, n_layer, n_layer + 1), KV offload off, --n-cpu-moe (MoE), llama.cpp's fitter
(common_fit_params, what `llama-fit-params --fit-print on` prints) on the GPU's free memory and on a budget of 60%
of the full offload, and one placed load (every layer, real allocation, one batch decoded so that cuBLAS and
ggml-cuda's pool are in use) held while NVML reads the GPU's used memory. memfit is asked in process for each run's
workload (the GPU read through NVML; the fitter's tight budget as a declared GPU of that free size). It prints one
table per run (each device's weights, KV cache + recurrent state, compute buffer and total, llama.cpp's beside
memfit's floor and ceiling; the fitter's -ngl, -ts and overrides beside memfit's; NVML's used-memory delta beside
llama.cpp's buffers: what the CUDA context, cuBLAS's workspace and ggml-cuda's pool cost), writes the rows to
OUT/gpu_check.jsonl ($OUT when set) and exits 1 on any mismatch.

--bundle DIR: DIR/bundle.tar.xz and DIR/wheels/ from tools/truth/gpu_bundle.py (node-llama-cpp 3.21.1's CUDA
prebuilt, the probe linked against it); default .gpucheck. --mock: the same runs on one mock GPU with ggml-cuda's
rules (tools/truth/mock, the probe tools/truth/mock/build.sh built into --cache or $MEMFIT_TRUTH_CACHE), the tiny
models, and no NVML: what this check can exercise on a machine without a GPU. docs/accuracy.md says how to run it
on a lent GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.gguf_writers import Model, write_model
from tools.truth.mock import args_of, placement_request
from tools.truth.mock.matrix import CPU_VARIANT, RELEASE, SHAPES, TINY
from tools.truth.regenerate import LIB_SUBDIR, release_dir
from tools.truth.variant import backend_dir

MIB = 1 << 20
PROBE_TIMEOUT_S = 240
DEFAULT_BUDGET_S = 540  # the run's ten minutes, less the bundle's unpacking and the wheels' install
# (kind, the model on a real GPU, its tiny stand-in on a mock GPU)
MODELS: dict[str, tuple[str, str]] = {
    "dense": ("llama31-8b-shape-q4_0", "llama-gqa-f16"),
    "swa": ("gemma3-4b-shape-q4_0", "gemma3-swa-f16"),
    "moe": ("qwen3-30b-a3b-shape-q4_0", "qwen3moe-f16"),
    "hybrid": ("granite-4.0-h-tiny-shape", "granitehybrid-f16"),
}
WRITERS: dict[str, Callable[[], Model]] = {**SHAPES, **TINY}
# the probe's output that depends on the process or the host
DROPPED = ("system_info", "llama_cpp", "rss_start", "rss_after_backend", "rss_after_model", "rss_after_ctx")
MOCK_GPU = {"mock_gpus": "1", "mock_alloc": "cuda", "mock_moe_dep": "1"}  # a declared cuda GPU stands for it
DECODE_TOKENS = 512


@dataclass(frozen=True)
class Run:
    """One probe run: its label, the probe's arguments, and for the fitter on a budget the free bytes it sees."""

    label: str
    args: dict[str, str]
    budget_share: float | None = None  # the fitter's free memory as a share of the full offload (plus its margin)
    held: bool = False  # the placed load, held while NVML is read


def runs(model: Model, *, mock: bool) -> list[Run]:
    """The runs of one model: dry runs across the output layer's edge, KV offload off, --n-cpu-moe, the fitter
    twice, and one placed load."""
    nl = int(model.kv[f"{model.arch}.block_count"])
    dry = {"no_alloc": "1"}
    out = [
        Run("ngl_all", dry | {"ngl": str(nl + 1)}),
        Run("ngl_nl", dry | {"ngl": str(nl)}),
        Run("ngl_half", dry | {"ngl": str(nl // 2)}),
        Run("kv_off", dry | {"ngl": str(nl + 1), "kv_offload": "0"}),
    ]
    if any("_exps." in name for name, _, _ in model.tensors):
        out.append(Run("ncmoe_half", dry | {"ngl": str(nl + 1), "n_cpu_moe": str(nl // 2)}))
    out += [
        Run("fit", dry | {"fit": "1"}),
        Run("fit_60", dry | {"fit": "1"}, budget_share=0.6),
        Run(
            "load", {"ngl": str(nl + 1), "no_alloc": "0"} | ({} if mock else {"decode": str(DECODE_TOKENS)}), held=True
        ),
    ]
    return out


# --- memfit's side ----------------------------------------------------------------------------------------------


def memfit_request(row: dict[str, Any]) -> dict[str, Any]:
    """The fit request for a probe row's workload: the fitter's runs as cpuOffload at the run's context (what
    llama-server's -ngl auto asks of the fitter), the others with the run's placement flags."""
    if row.get("fit"):
        return {"cpuVariant": CPU_VARIANT, "mode": "cpuOffload", "allocatedTokens": int(args_of(row)["n_ctx"])}
    return placement_request(row)


def _part(device: dict[str, Any], component: str) -> dict[str, Any]:
    return next((p for p in device["parts"] if p["component"] == component), {"bytes": 0, "upperBytes": 0})


def compare(row: dict[str, Any], answer: dict[str, Any], gpu_prefix: str = "CUDA") -> dict[str, Any]:
    """One run's comparison: per GPU, llama.cpp's bytes beside memfit's; the fitter's choice beside memfit's; NVML's
    used-memory delta beside llama.cpp's buffers and memfit's ceiling. `answer` is memfit's fit result (wire JSON);
    `gpu_prefix` is the probe's device name stem (CUDA, or MOCK for the mock devices). `mismatches` lists in words
    every weight, KV or recurrent byte that differs, every compute buffer or total outside memfit's bounds, a
    fitter choice memfit did not predict, and used memory above memfit's ceiling; `unknown` what memfit leaves
    unbounded (a bound it answers null: not a mismatch)."""
    memfit = {d["name"].replace("CUDA", gpu_prefix): d for d in answer["devices"]}
    out: dict[str, Any] = {"model": row["model"], "label": row["label"], "devices": [], "mismatches": [], "unknown": []}
    bad, unknown = out["mismatches"], out["unknown"]
    if row.get("error"):
        bad.append(f"probe: {row['error']}")
        return out
    out["devices"] = _devices(row["per_device"], memfit, bad, unknown)
    if row.get("fit"):
        out["fit"] = _fitter(row, answer["estimate"]["workload"], gpu_prefix)
        if out["fit"]["llama"] != out["fit"]["memfit"]:
            bad.append(f"fitter: llama.cpp chose {out['fit']['llama']}, memfit predicted {out['fit']['memfit']}")
    if row.get("nvml"):
        n = out["nvml"] = _nvml(row, memfit, gpu_prefix)
        grew = f"{gpu_prefix}0: NVML's used memory grew {n['delta']}"
        if n["ceiling"] is None:
            unknown.append(f"{grew}, memfit names no ceiling")
        elif n["delta"] > n["ceiling"]:
            bad.append(f"{grew}, above memfit's ceiling {n['ceiling']}")
    return out


def _devices(
    llama: dict[str, dict[str, Any]], memfit: dict[str, dict[str, Any]], bad: list[str], unknown: list[str]
) -> list[dict[str, Any]]:
    """Each GPU both name, compared; a GPU only one of them names is a mismatch."""
    out = []
    for name, want in llama.items():
        if name == "Host":
            continue  # llama.cpp counts the repacked CPU weights apart from its Host
        if name not in memfit:
            bad.append(f"{name}: memfit names no such device")
        else:
            out.append(_device(name, want, memfit[name], bad, unknown))
    for name, d in memfit.items():
        if d["kind"] == "gpu" and name not in llama:
            bad.append(f"{name}: llama.cpp saw no such device (its GPU backend did not load?)")
    return out


def _device(name: str, want: dict[str, Any], d: dict[str, Any], bad: list[str], unknown: list[str]) -> dict[str, Any]:
    """One GPU's bytes, llama.cpp's beside memfit's; what differs appended to `bad`, what is unbounded to `unknown`."""
    weights, kv, rs, ws = (_part(d, c) for c in ("weights", "kvCache", "recurrentState", "workspace"))
    dev = {
        "name": name,
        "weights": [want["model"], weights["bytes"] or 0],
        "state": [want["context"], (kv["bytes"] or 0) + (rs["bytes"] or 0)],
        "compute": [want["compute"], ws["bytes"], ws.get("upperBytes")],
        "total": [want["total"], d["lowerBoundBytes"], d["upperBoundBytes"]],
        "free": [want.get("free"), d["freeBytes"]],
    }
    for key, what in (("weights", "weights"), ("state", "KV + recurrent state")):
        if dev[key][0] != dev[key][1]:
            bad.append(f"{name}: {what} {dev[key][0]} (llama.cpp) != {dev[key][1]} (memfit)")
    for key, what in (("compute", "compute buffer"), ("total", "total")):
        got, lo, hi = dev[key]
        if lo is None or hi is None:
            unknown.append(f"{name}: {what} {got}, memfit's bounds [{lo}, {hi}]")
        elif not lo <= got <= hi:
            bad.append(f"{name}: {what} {got} outside memfit's [{lo}, {hi}]")
    return dev


def _fitter(row: dict[str, Any], workload: dict[str, Any], prefix: str) -> dict[str, Any]:
    fit, n = row["fit"], max(1, int(row["mock"].get("n", 0)) or len(row["model_devices"]))
    llama = {
        "gpuLayers": "all" if fit["n_gpu_layers"] < 0 else fit["n_gpu_layers"],
        "tensorSplit": fit["tensor_split"][:n] if n > 1 else [],
        "tensorOverrides": [f"{p}={b.replace(prefix, 'CUDA')}" for p, b in fit["overrides"]],
    }
    return {"llama": llama, "memfit": {k: workload[k] for k in llama}, "status": fit["status_name"]}


def _nvml(row: dict[str, Any], memfit: dict[str, dict[str, Any]], prefix: str) -> dict[str, Any]:
    """The placed load's used GPU memory (NVML, while the probe held it) beside llama.cpp's buffers on that GPU."""
    name = f"{prefix}0"
    after = row.get("breakdown_after_decode") or row["breakdown"]
    buffers = sum(v["model"] + v["context"] + v["compute"] for k, v in after.items() if k == name)
    delta = row["nvml"]["used_held"] - row["nvml"]["used_before"]
    return {
        "delta": delta,
        "process": row["nvml"].get("process_used"),
        "buffers": buffers,
        "beyond_buffers": delta - buffers,  # the CUDA context, cuBLAS's workspace, ggml-cuda's pool
        "ceiling": memfit[name]["upperBoundBytes"] if name in memfit else None,
    }


def table(result: dict[str, Any]) -> str:
    """One run's comparison as text: a line per GPU, then the fitter's and NVML's lines."""

    def mib(x: int | None) -> str:
        return "-" if x is None else f"{x / MIB:.1f}"

    lines = [f"{result['model']} {result['label']}: {'OK' if not result['mismatches'] else 'MISMATCH'}"]
    head = (
        "device",
        "weights llama/memfit",
        "kv+rs llama/memfit",
        "compute llama [floor, ceil]",
        "total llama [floor, ceil]",
    )
    lines.append("  " + "  ".join(f"{h:<28}" if i else f"{h:<8}" for i, h in enumerate(head)).rstrip())
    for d in result["devices"]:
        cells = [
            f"{mib(d['weights'][0])}/{mib(d['weights'][1])}",
            f"{mib(d['state'][0])}/{mib(d['state'][1])}",
            f"{mib(d['compute'][0])} [{mib(d['compute'][1])}, {mib(d['compute'][2])}]",
            f"{mib(d['total'][0])} [{mib(d['total'][1])}, {mib(d['total'][2])}]",
        ]
        lines.append("  " + f"{d['name']:<8}  " + "  ".join(f"{c:<28}" for c in cells).rstrip())
    if "fit" in result:
        f = result["fit"]
        lines.append(f"  fitter ({f['status']}): llama.cpp {f['llama']}  memfit {f['memfit']}")
    if "nvml" in result:
        n = result["nvml"]
        lines.append(
            f"  NVML used +{mib(n['delta'])} (the process {mib(n['process'])}), llama.cpp's buffers"
            f" {mib(n['buffers'])}, beyond them {mib(n['beyond_buffers'])}, memfit's ceiling {mib(n['ceiling'])} (MiB)"
        )
    lines += [f"  ! {m}" for m in result["mismatches"]] + [f"  ? {m}" for m in result["unknown"]]
    return "\n".join(lines)


# --- the devices: a real GPU through the bundle and NVML, or the mock --------------------------------------------


@dataclass
class Gpu:
    """How the probe reaches the GPU, and NVML where there is one."""

    probe: Path
    backend: Path
    base: dict[str, str]
    env: dict[str, str]
    nvml: Any = None  # pynvml, initialised
    prefix: str = "CUDA"
    notes: list[str] = field(default_factory=list)

    def free_total(self) -> tuple[int, int]:
        """The first GPU's free and total memory: NVML's, or the mock's default."""
        if self.nvml is None:
            return 24576 * MIB, 24576 * MIB
        info = self.nvml.nvmlDeviceGetMemoryInfo(self.nvml.nvmlDeviceGetHandleByIndex(0))
        return int(info.free), int(info.total)

    def used(self) -> int | None:
        """The first GPU's used memory (NVML's; None on the mock)."""
        if self.nvml is None:
            return None
        info = self.nvml.nvmlDeviceGetMemoryInfo(self.nvml.nvmlDeviceGetHandleByIndex(0))
        return int(info.used)

    def process_used(self, pid: int) -> int | None:
        handle = self.nvml.nvmlDeviceGetHandleByIndex(0)
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except self.nvml.NVMLError:
            return None
        return next((int(p.usedGpuMemory) for p in procs if p.pid == pid and p.usedGpuMemory is not None), None)


def _cuda_runtime_dirs() -> list[str]:
    """Folders holding libcudart.so.13 and libcublas.so.13 on this machine (CUDA's toolkit, NVIDIA's wheels)."""
    wheels = [Path(p) / "nvidia" for p in sys.path if p.endswith("-packages")]
    roots = [*wheels, Path("/usr/local/cuda"), Path("/usr/lib/x86_64-linux-gnu")]
    found: list[str] = []
    for lib in ("libcudart.so.13", "libcublas.so.13"):
        for root in roots:
            hit = next(iter(sorted(root.glob(f"**/{lib}"))), None) if root.is_dir() else None
            if hit is not None:
                found.append(str(hit.parent))
                break
    return list(dict.fromkeys(found))


@contextmanager
def real_gpu(bundle: Path, nvml: Any = None) -> Iterator[Gpu]:
    """The bundle's probe on the real GPU (the haswell CPU backend beside ggml-cuda), NVML (pynvml, unless
    another is given) started."""
    from tools.truth.gpu_bundle import unpack

    if nvml is None:
        import pynvml

        nvml = pynvml
    nvml.nvmlInit()
    with tempfile.TemporaryDirectory() as tmp:
        folder = unpack(bundle / "bundle.tar.xz", Path(tmp))
        runtime = _cuda_runtime_dirs()
        paths = [str(folder), *runtime, os.environ.get("LD_LIBRARY_PATH", "")]  # the bundle's: for ldd's diagnosis
        env = {"LD_LIBRARY_PATH": ":".join(paths).strip(":")}
        env |= {"CUDA_CACHE_PATH": str(Path(tmp) / "nv-cache"), "CUDA_CACHE_MAXSIZE": str(4 << 30)}
        gpu = Gpu(folder / "probe_mock-cuda", folder / "backends", {"mock_gpus": "0"}, env, nvml)
        name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
        gpu.notes += [f"{name!s}, driver {nvml.nvmlSystemGetDriverVersion()!s}", f"CUDA runtime from {runtime}"]
        try:
            yield gpu
        finally:
            nvml.nvmlShutdown()


@contextmanager
def mock_gpu(cache: Path) -> Iterator[Gpu]:
    """The mock probe on one mock GPU with ggml-cuda's rules (tools/truth/mock/build.sh's build in the cache)."""
    probe = cache / "mock" / f"probe_mock-{RELEASE}"
    if not probe.exists():
        raise SystemExit(f"{probe} is missing: run tools/truth/mock/build.sh {cache}")
    with tempfile.TemporaryDirectory() as tmp:
        backend = backend_dir(release_dir(cache, RELEASE) / LIB_SUBDIR, CPU_VARIANT, Path(tmp) / CPU_VARIANT)
        yield Gpu(probe, backend, dict(MOCK_GPU), {}, None, "MOCK")


def probe(gpu: Gpu, model: Path, run: Run, args: dict[str, str]) -> dict[str, Any]:
    """The probe's JSON for one run. A held run's probe waits for a line on stdin before it frees its buffers; on a
    real GPU, NVML's used memory is read before it starts and while it holds them."""
    cmd = [str(gpu.probe), str(model), *(f"{k}={v}" for k, v in args.items()), f"backend_dir={gpu.backend}", "quiet=1"]
    env, nvml = os.environ | gpu.env, None
    if run.held:
        before = gpu.used()
        with subprocess.Popen([*cmd, "hold=1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) as p:
            assert p.stdout is not None and p.stdin is not None
            timer = threading.Timer(PROBE_TIMEOUT_S, p.kill)  # a load that hangs (the driver compiling PTX, say)
            timer.start()
            line = p.stdout.readline()
            timer.cancel()
            if line.startswith("{") and before is not None:
                nvml = {"used_before": before, "used_held": gpu.used(), "process_used": gpu.process_used(p.pid)}
            try:
                p.communicate("\n", timeout=60)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                p.kill()
        text, err = line, "(its stderr is above)"
    else:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S)
            text, err = done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            text, err = "", f"timed out after {PROBE_TIMEOUT_S} s"
    lines = [x for x in text.splitlines() if x.startswith("{")]
    try:
        out: dict[str, Any] = json.loads(lines[-1]) if lines else {"error": f"no output: {err[-400:]}"}
    except json.JSONDecodeError:
        out = {"error": "bad json"}
    for key in DROPPED:
        out.pop(key, None)
    if nvml is not None:
        out["nvml"] = nvml
    return out


def _ask_memfit(folder: Path, row: dict[str, Any], gpu: Gpu, declared: tuple[int, int] | None) -> dict[str, Any]:
    """memfit's answer for the row's workload: the GPU read through NVML (the mock, and the fitter's budget:
    a declared cuda GPU of that total and free memory)."""
    from memfit import wire
    from memfit.generated.models import WireFitVerdictRequest
    from memfit.readers.declared_gpus import declared_gpu
    from memfit.readers.model_roots import Root, RootKind
    from memfit.readers.nvml import NvmlReader
    from memfit.service.answers import Settings
    from memfit.service_builder import build_service

    if declared is None and gpu.nvml is None:
        declared = gpu.free_total()
    if declared is not None:
        settings = Settings(gpus=(declared_gpu(f"cuda:{declared[1]}:{declared[0]}", 0),))
        service = build_service([Root(str(folder), RootKind.PLAIN)], settings=settings)
    else:
        service = build_service([Root(str(folder), RootKind.PLAIN)], nvml=NvmlReader(gpu.nvml))
    service.index.refresh()
    request = WireFitVerdictRequest(model_id=row["model"], **memfit_request(row))
    result: dict[str, Any] = wire.fit_batch(service, [request]).results[0].model_dump(by_alias=True, mode="json")
    return result


def check(gpu: Gpu, names: list[str], out: Path, budget_s: float, *, mock: bool) -> int:
    """Every model's runs, each compared and printed as it comes; the number of runs with a mismatch (or not run)."""
    start, failed = time.monotonic(), 0
    with tempfile.TemporaryDirectory() as tmp, open(out, "w") as sink:
        for kind in names:
            name = MODELS[kind][1 if mock else 0]
            model = WRITERS[name]()
            folder = Path(tmp) / kind
            folder.mkdir()
            path = folder / f"{name}.gguf"
            write_model(model, path)
            base = gpu.base | {"n_ctx": "4096" if mock else "8192"}
            full: int | None = None
            for run in runs(model, mock=mock):
                elapsed = time.monotonic() - start
                if elapsed > budget_s:
                    print(
                        f"[{elapsed:5.0f}s] {name} {run.label}: skipped, past the {budget_s:.0f} s budget", flush=True
                    )
                    failed += 1
                    continue
                args, declared = base | run.args, None
                if run.budget_share is not None:
                    free, total = _budget(gpu, full, run.budget_share, args)
                    declared = (free, total)
                t0 = time.monotonic()
                row: dict[str, Any] = {"model": name, "label": run.label, "args": [f"{k}={v}" for k, v in args.items()]}
                row |= probe(gpu, path, run, args)
                if run.label == "ngl_all":
                    full = row.get("per_device", {}).get(f"{gpu.prefix}0", {}).get("total")
                    if full is None and gpu.nvml is not None:
                        _diagnose(gpu, path, args)
                        return failed + 1
                answer = _ask_memfit(folder, row, gpu, declared) if not row.get("error") else {"devices": []}
                result = compare(row, answer, gpu.prefix)
                failed += bool(result["mismatches"])
                sink.write(json.dumps(row | {"memfit": answer, "comparison": result}, separators=(",", ":")) + "\n")
                sink.flush()
                print(f"[{time.monotonic() - start:5.0f}s, {time.monotonic() - t0:4.1f}s] {table(result)}", flush=True)
            path.unlink()
    return failed


def _diagnose(gpu: Gpu, model: Path, args: dict[str, str]) -> None:
    """llama.cpp saw no GPU: the probe's run again with llama.cpp's log shown, which says why ggml-cuda did not load."""
    cmd = [str(gpu.probe), str(model), *(f"{k}={v}" for k, v in args.items()), f"backend_dir={gpu.backend}"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | gpu.env, timeout=PROBE_TIMEOUT_S)
    said = [x for x in done.stderr.splitlines() if any(w in x.lower() for w in ("backend", "cuda", "error", "fail"))]
    print(f"llama.cpp saw no {gpu.prefix}0, so nothing is compared; its log says:", *said[:40], sep="\n", flush=True)
    cuda = gpu.backend / "libggml-cuda.so"
    ldd = subprocess.run(["ldd", str(cuda)], capture_output=True, text=True, env=os.environ | gpu.env).stdout
    print(f"{cuda} needs (ldd):", *[x for x in ldd.splitlines() if "not found" in x] or ["nothing missing"], sep="\n")


def _budget(gpu: Gpu, full: int | None, share: float, args: dict[str, str]) -> tuple[int, int]:
    """The fitter's free memory on a budget: `share` of the full offload and llama.cpp's 1 GiB margin. A mock GPU
    is made that size; on a real one the fitter's margin grows by what the budget leaves out of the free memory.
    Writes the probe's arguments; returns the (free, total) memfit is declared."""
    free, total = gpu.free_total()
    budget = int((full or free) * share) + 1024 * MIB
    if gpu.nvml is None:
        args |= {"mock_free_mib": str(budget // MIB), "mock_total_mib": str(budget // MIB + 2048)}
        return budget // MIB * MIB, (budget // MIB + 2048) * MIB
    args["fit_margin_mib"] = str(1024 + max(0, free - budget) // MIB)
    return free - (free - budget) // MIB * MIB, total


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mock", action="store_true", help="mock GPU (no NVIDIA GPU needed)")
    ap.add_argument("--bundle", type=Path, default=Path(__file__).resolve().parents[2] / ".gpucheck")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("MEMFIT_TRUTH_CACHE", ".truth-cache")))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check-out"))
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    ap.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join(MODELS)}")
    a = ap.parse_args(argv)
    names = [n for n in a.models.split(",") if n]
    if unknown := set(names) - MODELS.keys():
        ap.error(f"unknown models {sorted(unknown)}")
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / "gpu_check.jsonl"
    with mock_gpu(a.cache.resolve()) if a.mock else real_gpu(a.bundle.resolve()) as gpu:
        free, total = gpu.free_total()
        print(f"GPU: {free / MIB:.0f} of {total / MIB:.0f} MiB free; {'; '.join(gpu.notes)}", flush=True)
        failed = check(gpu, names, out, a.budget_s, mock=a.mock)
    print(f"{out}: {'no mismatch' if not failed else f'{failed} runs with a mismatch or not run'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
