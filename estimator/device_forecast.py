"""Where an estimate lives: the host's share and each GPU's, each judged against its own budget.

The estimate's parts are the whole allocation; here they are split the way llama.cpp places them (estimator/
placement.py: each layer's device, each weight's buffer type, each layer's KV cache and recurrent state, the output
buffer) over the GPUs a request is judged against. The host pool is every host buffer type (CPU, the mapped file,
a GPU backend's pinned host memory, the repacked CPU weights). Each pool gets a verdict against its own budget (the
host budget; a GPU's free memory; on unified memory, a Metal GPU's share counts against both), and the answer's
verdict is good only when every pool holding part of the model is.

Each pool's workspace is its backend's compute buffer for llama.cpp's scheduler split graph (estimator/
scheduler.py), the host's with the output buffer; where the split is not rebuilt (an architecture whose graph
names no weights), unknown. What the CUDA runtime holds beside llama.cpp's buffers (its context, cuBLAS's
workspace, ggml-cuda's pool) is named in each GPU's note, not counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import lru_cache

from memfit.estimator import scheduler
from memfit.estimator.bounds import Bounds, Part, bounds
from memfit.estimator.compute_buffer import compute_bounds
from memfit.estimator.context_kernel import ContextKernel
from memfit.estimator.cpu_variant import CpuVariant
from memfit.estimator.devices import CPU, HOST, Device, device_of
from memfit.estimator.machine import GpuMemory
from memfit.estimator.mtp import draft_context, draft_geometry, draft_types, with_mtp
from memfit.estimator.placement import (
    Memory,
    ModelTensors,
    Placement,
    PlacementResult,
    PlacementUnsupported,
    SplitMode,
    place,
)
from memfit.estimator.subject import NO_VARIANT, Subject
from memfit.estimator.verdict import verdict
from memfit.estimator.vocabulary import Basis, Component, Mode, SettingSource, Verdict
from memfit.estimator.workload import ALL_LAYERS, PlacementFlags, Workload, mode_gpu_layers

HOST_POOL = "host"  # the host's name in an answer's devices
# the order the answer's verdict takes the worst pool's in: a pool already too small decides, then one not known
WORST_FIRST = (Verdict.OVERSIZE, Verdict.UNKNOWN, Verdict.TIGHT, Verdict.GOOD)
PER_DEVICE = (Component.WEIGHTS, Component.KV_CACHE, Component.RECURRENT_STATE)


class NoPlacement(Exception):
    """What placement needs is not known: the model's tensors, the mode's meaning, a CPU variant."""


@dataclass(frozen=True)
class DeviceShare:
    """One pool's share of the estimate."""

    name: str  # HOST_POOL, or the device as llama.cpp names it (CUDA0, MTL0)
    gpu: GpuMemory | None  # None for the host
    parts: tuple[Part, ...]
    holds_model: bool  # whether anything of the model is placed here (a GPU holding nothing decides nothing)
    note: str
    unsupported: bool = False  # placement flags llama.cpp refuses or memfit does not mirror (workloadUnsupported)
    bounds: Bounds = field(init=False, repr=False, compare=False)  # of `parts`: summed once, read per verdict

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", bounds(self.parts))


@dataclass(frozen=True)
class Placed:
    """A model placed on the devices: what each backend's compute buffer is derived from."""

    model: ModelTensors
    memory: Memory  # the layout, the context geometry and the cache types
    devices: tuple[Device, ...]
    request: Placement
    results: tuple[PlacementResult, ...]  # one per typing and CPU variant of the answer (the first: what they share)


@dataclass(frozen=True)
class DeviceVerdicts:
    verdicts: tuple[Verdict, ...]  # one per share
    verdict: Verdict
    decided_by: str | None
    gpu_admits: bool | None


def gpu_devices(gpus: Sequence[GpuMemory]) -> list[Device]:
    """The GPUs as llama.cpp's registry lists them: each backend numbers its own devices from 0."""
    seen: dict[str, int] = {}
    out = []
    for g in gpus:
        out.append(device_of(g, seen.get(g.backend, 0)))
        seen[g.backend] = seen.get(g.backend, 0) + 1
    return out


def _override_pairs(flags: PlacementFlags) -> tuple[tuple[str, str], ...]:
    # common/arg.cpp parse_tensor_buffer_overrides: each PATTERN=BUFFER_TYPE split at its first '='
    return tuple((p, b) for p, _, b in (o.partition("=") for o in flags.tensor_overrides))


def places_nothing_on_gpus(flags: PlacementFlags, devices: Sequence[Device]) -> bool:
    """No GPU, or -ngl 0 with no override naming a GPU's own buffer type: every byte of the model on the host."""
    names = {d.name for d in devices}
    return not devices or (flags.gpu_layers == 0 and not names & {b for _, b in _override_pairs(flags)})


def placement_request(flags: PlacementFlags, n_layer: int) -> Placement:
    """llama.cpp's placement flags as placement.place takes them; PlacementUnsupported for what it does not mirror
    or llama.cpp refuses (a pattern std::regex would not compile)."""
    try:
        split_mode = SplitMode(flags.split_mode)
    except ValueError:
        raise PlacementUnsupported(f"-sm {flags.split_mode!r} is not a llama.cpp split mode") from None
    pairs = _override_pairs(flags)
    for pattern, _ in pairs:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise PlacementUnsupported(f"-ot pattern {pattern!r} is not a regular expression: {exc}") from None
    return Placement(
        gpu_layers=None if flags.gpu_layers == ALL_LAYERS else int(flags.gpu_layers or 0),
        split_mode=split_mode,
        main_gpu=flags.main_gpu,
        tensor_split=flags.tensor_split,
        overrides=pairs,
        n_cpu_moe=min(flags.n_cpu_moe, n_layer),  # a pattern per layer: those past the last match nothing
        kv_offload=flags.kv_offload,
    )


def device_shares(
    subject: Subject,
    workload: Workload,
    parts: Sequence[Part],
    variants: tuple[CpuVariant, ...],
    gpus: Sequence[GpuMemory],
) -> tuple[DeviceShare, ...]:
    """The host's share and each GPU's of `parts` (the whole estimate) for the workload's placement."""
    subject = with_mtp(subject, workload)
    devices = gpu_devices(gpus)
    flags = workload.placement
    if places_nothing_on_gpus(flags, devices):
        offloaded = _offload_workspace(subject, workload, variants, devices)
        return _host_holds_all(parts, gpus, devices, _standing_in(workload), offloaded)
    try:
        placed = _placements(subject, workload, variants, devices)
    except NoPlacement as exc:
        return _unknown_shares(str(exc), parts, gpus, devices, False)
    except PlacementUnsupported as exc:
        return _unknown_shares(str(exc), parts, gpus, devices, True)
    whole = {p.component: p for p in parts}
    by_pool = [_pools(r) for r in placed.results]
    pools = [HOST_POOL, *(d.name for d in devices)]
    workspace = workspace_shares(placed, pools)
    first_gpu = devices[0].name  # mtmd's clip_ctx: the projector on the first GPU (llama-server's mmproj_use_gpu)
    out = []
    for pool, gpu in zip(pools, (None, *gpus), strict=True):
        shares = {c: [b.get(pool, {}).get(c, 0) for b in by_pool] for c in PER_DEVICE}
        own = [_share(whole[c], min(shares[c]), max(shares[c])) for c in PER_DEVICE]
        companions = whole[Component.COMPANIONS]
        if pool != first_gpu and companions.basis is not Basis.NOT_APPLICABLE:
            companions = Part.not_applicable(Component.COMPANIONS, f"llama.cpp's projector is on {first_gpu}")
        holds = pool == HOST_POOL or any(max(v) for v in shares.values()) or companions.bytes != 0
        out.append(
            DeviceShare(
                pool,
                gpu,
                (*own, workspace[pool], companions),
                bool(holds),
                _layers_note(placed.results[0], pool),
            )
        )
    return tuple(out)


def workspace_shares(placed: Placed, pools: Sequence[str]) -> dict[str, Part]:
    """Each pool's workspace for a placement: llama.cpp's output buffer (on the host) and the
    compute buffer each backend reserves for the scheduler's split graph (llama_context::sched_reserve), the floor
    without and the ceiling with ggml-cuda's flash-attention F16 copies of a quantized K and V; over every typing and
    CPU variant of the answer, and both ways llama.cpp sizes it (estimator/scheduler.py's modes: a loading context's
    reserve, pins kept, and the dry run llama-server's --fit sizes placements by, pins lost)."""
    try:
        found = [
            pool_buffers(placed.model, placed.memory, placed.devices, placed.request, result, mode)
            for result in placed.results
            for mode in scheduler.Mode
        ]
        draft = draft_compute(placed)  # under draft-mtp, the MTP draft context's beside the target's
    except PlacementUnsupported as exc:
        why = f"the compute buffer of each backend is not derived here: {exc}"
        return {pool: Part.unknown(Component.WORKSPACE, why) for pool in pools}
    output = placed.results[0].output_buffer_bytes
    splits = found[0].splits
    shares = {}
    for pool in pools:
        extra = output if pool == HOST_POOL else 0
        low = min(dict(b.floors).get(pool, 0) for b in found) + extra + draft.get(pool, (0, 0))[0]
        high = max(dict(b.ceilings).get(pool, 0) for b in found) + extra + draft.get(pool, (0, 0))[1]
        note = (
            f"this backend's compute buffer for llama.cpp's scheduler split graph ({splits} splits), as"
            " llama_context::sched_reserve reserves it (ggml-backend.cpp ggml_backend_sched_split_graph, ggml-alloc.c)"
        )
        if pool == HOST_POOL:
            note += f", and llama.cpp's output buffer ({output} bytes)"
        elif high > low:
            note += "; the ceiling holds the F16 copies of K and V ggml-cuda's flash attention makes (fattn.cu)"
        if pool != HOST_POOL:
            note += (
                "; not counted: the CUDA runtime's context, cuBLAS's workspace and ggml-cuda's memory pool"
                " (ggml-cuda.cu ggml_cuda_pool_leg/vmm), which llama.cpp does not size"
            )
        shares[pool] = Part(Component.WORKSPACE, low, Basis.DERIVED_LAYOUT, note, high - low)
    return shares


def draft_compute(placed: Placed) -> dict[str, tuple[int, int]]:
    """The MTP draft context's compute buffer by pool under draft-mtp: each backend's buffer for the scheduler's
    split of the draft's DECODER_MTP graph over the target's placement (draft_pool_buffers; every typing, CPU
    variant and mode of the answer: the floor the least, the ceiling the most), wherever its NextN layer is (on the
    CPU too: ggml's op offload reserves a GPU buffer for its large matrix products). Empty without a draft context;
    PlacementUnsupported where the buffer or its split is not derived (a GPU's buffer, the split's copies among it,
    is not bounded by the whole graph's)."""
    model, memory = placed.model, placed.memory
    draft = draft_context(model.architecture, memory.layout) if memory.geometry.nextn_width else None
    if draft is None:
        return {}
    if compute_bounds(draft.graph, model.n_vocab, draft_geometry(memory.geometry)) is None:
        raise PlacementUnsupported("the MTP draft context's compute buffer is not derived for this workload")
    found = [
        draft_pool_buffers(model, memory, placed.devices, placed.request, result, mode)
        for result in placed.results
        for mode in scheduler.Mode
    ]
    pools = {pool for b in found if b is not None for pool, _ in b.ceilings}
    return {
        pool: (
            min(dict(b.floors).get(pool, 0) for b in found if b is not None),
            max(dict(b.ceilings).get(pool, 0) for b in found if b is not None),
        )
        for pool in pools
    }


def draft_pool_buffers(
    model: ModelTensors,
    memory: Memory,
    devices: Sequence[Device],
    request: Placement,
    result: PlacementResult,
    mode: scheduler.Mode,
) -> PoolBuffers | None:
    """The MTP draft context's compute buffer of each backend by the answer's pools (pool_buffers): the
    scheduler's split of its DECODER_MTP graph (estimator/graph_mtp.py: its block the NextN layer's, the token rows
    and the LM head the input and output layers') over the target's placement `result` (the draft shares its
    model), at the draft's geometry and cache types; None without a draft context."""
    draft = draft_context(model.architecture, memory.layout) if memory.geometry.nextn_width else None
    if draft is None:
        return None
    geometry = draft_geometry(memory.geometry)
    k_type, v_type = draft_types(geometry.draft.key_element_bytes, geometry.draft.value_element_bytes)
    graph = Memory(replace(memory.layout, graph=draft.graph), geometry, k_type, v_type)
    return pool_buffers(model, graph, tuple(devices), request, result, mode)


@dataclass(frozen=True)
class PoolBuffers:
    floors: tuple[tuple[str, int], ...]  # (answer pool, bytes): the lesser of the allocations without and with
    ceilings: tuple[tuple[str, int], ...]  # flash attention's F16 copies, and the greater (bounds_by_pool)
    splits: int  # the prompt-processing graph's splits


@lru_cache(maxsize=256)
def pool_buffers(
    model: ModelTensors,
    memory: Memory,
    devices: tuple[Device, ...],
    request: Placement,
    result: PlacementResult,
    mode: scheduler.Mode,
) -> PoolBuffers:
    """scheduler.compute_buffers by the answer's pools, kept for the next ask of the same placement (the split
    graph's schedule and allocation is most of a placed fit's work: a warm fit took 80-130 ms without it)."""
    b = scheduler.compute_buffers(model, memory, devices, request, result, mode)
    bounds = b.bounds_by_pool()
    floors, ceilings = (_by_answer_pool({pool: pair[i] for pool, pair in bounds.items()}, devices) for i in (0, 1))
    return PoolBuffers(tuple(floors.items()), tuple(ceilings.items()), len(b.pp.splits))


def _by_answer_pool(by_pool: dict[str, int], devices: Sequence[Device]) -> dict[str, int]:
    """The scheduler's pools (HOST, each GPU's name) by the answer's pool names (HOST_POOL, each GPU's name)."""
    names = {d.name for d in devices}
    out: dict[str, int] = {}
    for name, size in by_pool.items():
        pool = name if name in names and name != HOST else HOST_POOL
        out[pool] = out.get(pool, 0) + size
    return out


def _placements(
    subject: Subject, workload: Workload, variants: tuple[CpuVariant, ...], devices: Sequence[Device]
) -> Placed:
    """The placement under each typing of the tensors (a catalog recipe's) and each CPU variant (the host's weights
    may differ by variant: repacked or not)."""
    flags = workload.placement
    if flags.gpu_layers is None:
        raise NoPlacement(f"the mode {workload.mode!r} names no placement, and gpuLayers was not given")
    if not subject.tensors or subject.layout is None:
        raise NoPlacement(subject.tensors_problem)
    if not variants:
        raise NoPlacement(NO_VARIANT)
    kernel = ContextKernel(subject.layout, subject.n_vocab, subject.architecture, workload)
    memory = Memory(subject.layout, kernel.geometry(workload.allocated_tokens), kernel.k_type, kernel.v_type)
    model = subject.tensors[0]
    request = placement_request(flags, model.n_layer)
    results = tuple(place(t, memory, devices, request, v) for t in subject.tensors for v in variants)
    return Placed(model, memory, tuple(devices), request, results)


def _pools(result: PlacementResult) -> dict[str, dict[Component, int]]:
    """Weights, KV cache and recurrent state per pool: the devices, and the host (every host buffer type, and the
    extra CPU buffer types llama.cpp counts apart)."""
    out: dict[str, dict[Component, int]] = {}
    for name, b in result.by_pool().items():
        pool = HOST_POOL if name == HOST or name not in result.devices else name
        got = out.setdefault(pool, dict.fromkeys(PER_DEVICE, 0))
        got[Component.WEIGHTS] += b.weights
        got[Component.KV_CACHE] += b.kv
        got[Component.RECURRENT_STATE] += b.recurrent
    return out


def _share(whole: Part, floor: int, ceiling: int) -> Part:
    """A pool's share of a part the placement derives: unknown or not applicable as the whole part is."""
    if whole.basis in (Basis.UNKNOWN, Basis.NOT_APPLICABLE):
        return whole
    note = f"this device's share, as llama.cpp places it, of the whole ({whole.bytes} bytes): {whole.note}"
    return Part(whole.component, floor, whole.basis, note, ceiling - floor)


def _layers_note(result: PlacementResult, pool: str) -> str:
    """Which layers a pool holds, as llama.cpp assigned them."""
    name = CPU if pool == HOST_POOL else pool
    held = [i for i, d in enumerate(result.layer_devices) if d == name]
    if not held:
        text = "no layer"
    elif held == list(range(held[0], held[-1] + 1)):
        text = f"layers {held[0]}-{held[-1]}" if len(held) > 1 else f"layer {held[0]}"
    else:
        text = f"{len(held)} layers"
    return text + (", output" if result.output_device == name else "")


def _standing_in(workload: Workload) -> str:
    """What the placement stands for, where it is not what was asked: cpuOffload's fitter, answered as -ngl 0 where
    memfit could not predict its choice (no GPU read, the model's tensors or graph not known)."""
    fitted = any(s.setting == "gpuLayers" and s.source is SettingSource.FITTER for s in workload.sources)
    if (
        workload.mode == Mode.CPU_OFFLOAD
        and not fitted
        and workload.placement.gpu_layers == mode_gpu_layers(workload.mode)
    ):
        return " (cpuOffload: llama.cpp's fitter's choice is not predicted here, answered as -ngl 0)"
    return ""


def _offload_workspace(
    subject: Subject, workload: Workload, variants: tuple[CpuVariant, ...], devices: Sequence[Device]
) -> dict[str, Part]:
    """Each GPU's workspace where llama.cpp puts no layer on it: the compute buffer of the matrix products the
    scheduler offloads from the host (ggml_backend_sched's op offload: ubatches of 32 tokens or more), from the
    placement's split graph as any placement's; unknown where that placement is not derived."""
    if not devices:
        return {}
    try:
        placed = _placements(subject, workload, variants, devices)
    except (NoPlacement, PlacementUnsupported) as exc:
        why = f"llama.cpp may reserve a compute buffer here for the matrix products it offloads from the host: {exc}"
        return {d.name: Part.unknown(Component.WORKSPACE, why) for d in devices}
    return workspace_shares(placed, [d.name for d in devices])


def _host_holds_all(
    parts: Sequence[Part], gpus: Sequence[GpuMemory], devices: Sequence[Device], why: str, offloaded: dict[str, Part]
) -> tuple:
    """Nothing of the model on a GPU: the host holds the whole estimate (the answer is the host's alone), each GPU
    the compute buffer of what the scheduler offloads to it (`offloaded`)."""
    host = DeviceShare(HOST_POOL, None, tuple(parts), True, f"every layer, output{why}")
    nothing = "nothing of the model is placed here"
    return (
        host,
        *(
            DeviceShare(
                d.name,
                g,
                tuple(
                    offloaded[d.name] if c is Component.WORKSPACE else Part.not_applicable(c, nothing)
                    for c in Component
                ),
                False,
                "no layer",
            )
            for d, g in zip(devices, gpus, strict=True)
        ),
    )


def _unknown_shares(
    why: str, parts: Sequence[Part], gpus: Sequence[GpuMemory], devices: Sequence[Device], unsupported: bool
) -> tuple:
    """A placement memfit cannot derive: every pool's share unknown (not applicable where the whole part is)."""
    shares = tuple(p if p.basis is Basis.NOT_APPLICABLE else Part.unknown(p.component, why) for p in parts)
    names = [HOST_POOL, *(d.name for d in devices)]
    return tuple(DeviceShare(n, g, shares, True, why, unsupported) for n, g in zip(names, (None, *gpus), strict=True))


def judge_devices(
    shares: Sequence[DeviceShare], host_budget: int | None, margin: Fraction, gpus_read: bool
) -> DeviceVerdicts:
    """Each pool against its own budget (the host budget; a GPU's free memory; a unified GPU's share is also the
    host's), the answer's verdict the worst of the pools holding the model, and whether every GPU's floor fits
    its free memory (None where no GPU was read or a GPU's share is unknown; False where there is no GPU)."""
    unified = [s.bounds for s in shares if s.gpu is not None and s.gpu.unified]
    verdicts = [
        verdict(_with(s.bounds, unified), host_budget, margin, False)
        if s.gpu is None
        else verdict(s.bounds, s.gpu.free, margin, False)
        for s in shares
    ]
    deciding = [(s.name, v) for s, v in zip(shares, verdicts, strict=True) if s.holds_model]
    overall = min((v for _, v in deciding), key=WORST_FIRST.index, default=Verdict.UNKNOWN)
    decided_by = next((n for n, v in deciding if v is overall), None)
    return DeviceVerdicts(tuple(verdicts), overall, decided_by, _admits(shares, gpus_read))


def _with(host: Bounds, unified: Sequence[Bounds]) -> Bounds:
    """The host's bounds with the shares of the GPUs on its memory."""
    upper = host.upper
    for u in unified:
        upper = None if upper is None or u.upper is None else upper + u.upper
    return Bounds(host.lower + sum(u.lower for u in unified), upper, host.weakest, host.missing)


def _admits(shares: Sequence[DeviceShare], gpus_read: bool) -> bool | None:
    on_gpus = [(s, s.gpu) for s in shares if s.gpu is not None]
    if not gpus_read:
        return None
    if not on_gpus:
        return False
    if any(p.component is Component.WEIGHTS and p.basis is Basis.UNKNOWN for s, _ in on_gpus for p in s.parts):
        return None
    return all(s.bounds.lower <= gpu.free for s, gpu in on_gpus)
