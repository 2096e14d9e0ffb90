"""The placement llama.cpp's fitter chooses across GPUs (`--fit on`): common/fit.cpp's common_params_fit_impl with
devices.

The fitter measures each device's memory (common_get_device_memory_data: the model, context and compute bytes of
the device's own buffer type in a dry run; host buffer types, the pinned host type among them, count to the host)
for a sequence of candidate placements and keeps `--fit-target` (1 GiB) free on each device:

1. the initial parameters (every layer on the GPUs at the trained context, times the streams when -c is 0 and the
   cache is not unified): no change when every device keeps its margin;
2. with -c 0, the context is interpolated between the minimum (`--fit-ctx` x streams) and the trained one, rounded
   down to 256 x streams, against the devices' summed free memory (less the margins and, on several devices, an
   allowance for the whole layers a split wastes); on one device that ends the fit;
3. layers are assigned back to front (the last device holds the output layer), each device's count found by the
   method of false position over dry runs; a MoE model's layers go dense-only (its expert tensors overridden to the
   CPU) and
4. where the dense-only layers leave room, they turn into full layers front to back, the first partial layer of a
   device overflowing part of its FFN to the next device (or the CPU).

It writes -ngl (the layers on the GPUs), -ts (the layers per device, several devices) and the -ot overrides of its
partial layers. The search itself is `fit_placement`; what each candidate holds per device comes from `measure`,
the caller's forecast of llama.cpp's dry run for a context and a placement. Under llama-server's --spec-type
draft-mtp each measurement also holds the MTP draft context (common_fit_extra_model: draft_memory).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from memfit.estimator import vocabulary
from memfit.estimator.context_kernel import ContextKernel
from memfit.estimator.cpu_variant import CpuVariant
from memfit.estimator.device_forecast import draft_pool_buffers, gpu_devices, placement_request, pool_buffers
from memfit.estimator.devices import CPU, Device
from memfit.estimator.fitter import DEFAULT_MARGIN, DEFAULT_MIN_CTX, FULL_CONTEXT, MIB, interpolated_context
from memfit.estimator.layout import Layout
from memfit.estimator.machine import GpuMemory
from memfit.estimator.mtp import draft_context, mtp_refusal, with_mtp
from memfit.estimator.placement import (
    Buffers,
    Memory,
    ModelTensors,
    Placement,
    PlacementUnsupported,
    SplitMode,
    draft_kv_placed,
    layer_devices,
    model_devices,
    place,
    split_points,
)
from memfit.estimator.scheduler import Mode
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import ContextSource, SettingSource
from memfit.estimator.workload import ALL_LAYERS, ResolvedSetting, Workload, WorkloadRequest

UINT32 = 1 << 32
MAX_OVERRIDES = 4096  # llama_max_tensor_buft_overrides()
PLACED = ("gpuLayers", "tensorSplit", "tensorOverrides")  # the settings the fitter writes (-ngl, -ts, -ot)
MAX_PATTERN_LAYERS = 1000  # get_overflow_pattern's table: "at most 1000 model layers are supported"
# get_overflow_pattern: the tensors of layer N a partial layer leaves to another buffer type
_MOE_ALL = "blk\\.\\d+\\.ffn_(up|down|gate_up|gate)_(ch|)exps"  # every layer's expert tensors


class LayerPart(Enum):
    """common_layer_fraction_t: what of a partial layer stays on its device (the rest overflows)."""

    ATTN = "blk\\.{}\\.ffn_(gate|up|gate_up|down).*"  # attention alone
    UP = "blk\\.{}\\.ffn_(gate|gate_up|down).*"  # attention and the up projection
    GATE = "blk\\.{}\\.ffn_down.*"  # attention, up and gate
    MOE = "blk\\.{}\\.ffn_(up|down|gate_up|gate)_(ch|)exps"  # everything but the experts

    def pattern(self, layer: int) -> str:
        return self.value.format(layer)


@dataclass(frozen=True)
class DeviceMemory:
    """llama_device_memory_data of one device for one candidate: its free memory and its buffers' bytes."""

    free: int
    model: int
    context: int
    compute: int

    @property
    def total(self) -> int:
        return self.model + self.context + self.compute


@dataclass(frozen=True)
class Offload:
    """What the fitter writes into the model parameters: -ngl, -ts and the -ot overrides (pattern, buffer type), in
    order; each left empty (None) where it keeps the launcher's."""

    gpu_layers: int | None = None
    tensor_split: tuple[float, ...] = ()
    overrides: tuple[tuple[str, str], ...] = ()


Measure = Callable[[int, Offload], Sequence[DeviceMemory]]  # (total context, placement) -> each device's memory


@dataclass(frozen=True)
class DeviceFit:
    """ngl_t: a device's layers, the partial ones (dense-only, or the first overflowing `overflow`) among them."""

    n_layer: int = 0
    n_part: int = 0
    overflow: LayerPart = LayerPart.MOE

    @property
    def n_full(self) -> int:
        return self.n_layer - self.n_part


@dataclass(frozen=True)
class PlacementFit:
    """The fitter's outcome: the context and the placement llama.cpp loads with."""

    n_ctx: int
    offload: Offload  # the initial (default) placement where the fitter changed none
    fitted: bool  # common_fit_params' status is success (else it gave up, keeping what it had set)
    why: str
    layers: tuple[DeviceFit, ...] = ()  # per device, where the fitter assigned layers
    placed: bool = True  # the placement is the fitter's (False: it kept the one the launcher set, and gave up)


class _GaveUp(Exception):
    """common_params_fit_exception: the fitter stops, its changes so far kept."""


@dataclass(frozen=True)
class FitParams:
    """What the fitter reads of the model and the launcher's parameters (common_fit_params' arguments)."""

    n_layer: int  # hp_ngl: the repeating layers (and NextN layers with MTP loaded); the output layer is one more
    n_expert: int  # hp_nex: 0 for a dense model
    n_ctx_train: int
    n_ctx: int  # -c; 0: the fitter chooses
    n_seq: int
    kv_unified: bool
    margins: tuple[int, ...] = (DEFAULT_MARGIN,)  # --fit-target per device (one value stands for every device)
    n_ctx_min: int = DEFAULT_MIN_CTX  # --fit-ctx
    gpu_layers: int = -1  # -ngl (-1: llama.cpp's default)
    user_placement: str = ""  # the -ngl, -ts, -sm row or -ot the user set (the fitter keeps them, and gives up)


def expert_count(layout: Layout) -> int:
    """llama_model_n_expert (hparams.n_expert, which the fitter only tells from 0): the routed experts of the
    graph's MoE blocks, 0 for a dense model (or one whose graph is not rebuilt)."""
    return max((b.n_expert for b in layout.graph.layers), default=0) if layout.graph else 0


def _u32(x: int) -> int:
    return x % UINT32


def _div(a: int, b: int) -> int:
    """C's integer division, truncating toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _offload(request: FitParams, layers: Sequence[DeviceFit], overflow_to: Sequence[str]) -> Offload:
    """set_ngl_tensor_split_tbo: -ngl the layers on the devices, -ts their counts (several devices), and each
    partial layer's pattern: the first of a device to `overflow_to` (the next device or the CPU), the rest's
    experts to the CPU."""
    ngl = sum(d.n_layer for d in layers)
    first = request.n_layer + 1 - ngl  # il0: the first layer on a GPU
    out: list[tuple[str, str]] = []
    for d, to in zip(layers, overflow_to, strict=True):
        first += d.n_full
        for il in range(first, first + d.n_part):
            if il >= MAX_PATTERN_LAYERS:
                raise _GaveUp(f"at most {MAX_PATTERN_LAYERS} model layers are supported")
            if len(out) + 1 >= MAX_OVERRIDES:
                raise _GaveUp(f"llama_max_tensor_buft_overrides() == {MAX_OVERRIDES} is insufficient for model")
            part = d.overflow if il == first else LayerPart.MOE
            out.append((part.pattern(il), to if il == first else CPU))
        first += d.n_part
    split = tuple(float(d.n_layer) for d in layers) if len(layers) > 1 else ()
    return Offload(ngl, split, tuple(out))


def _step(delta: int, target: int, low: int, high: int) -> int:
    """The false-position step: the layers between low and high whose memory meets the target (uint32 as C
    converts it), at least one and short of the high bound."""
    return min(max(_u32(_div(delta * (target - low), high - low)), 1), delta - 1)


@dataclass
class _Search:
    """The fitter's state over steps 3 and 4 (ngl_per_device, overflow_bufts, mem, id_dense_start)."""

    request: FitParams
    n_ctx: int
    measure: Measure
    devices: tuple[str, ...]  # each device's buffer type (CUDA0, MOCK1)
    targets: tuple[int, ...]  # free less margin per device

    def memory(self, layers: Sequence[DeviceFit], overflow_to: Sequence[str]) -> list[int]:
        """get_memory_for_layers: each device's bytes for a layer assignment."""
        return [m.total for m in self.measure(self.n_ctx, _offload(self.request, layers, overflow_to))]

    def fill_back_to_front(self, layers: list[DeviceFit], mem: list[int]) -> tuple[list[DeviceFit], list[int]]:
        """Step 3: each device from the last gets the unassigned layers that fit (dense-only for MoE; the last
        device's first layer, the output layer, always whole)."""
        nd, moe = len(self.devices), self.request.n_expert > 0
        cpu = [CPU] * nd
        for i in reversed(range(nd)):
            n_unassigned = self.request.n_layer + 1 - sum(d.n_layer for d in layers[i + 1 :])
            high = list(layers)
            high[i] = replace(high[i], n_layer=n_unassigned)
            if moe:
                high[i] = replace(high[i], n_part=n_unassigned if i < nd - 1 else n_unassigned - 1)
            if high[i].n_layer == 0:
                continue
            mem_high = self.memory(high, cpu)
            if mem_high[i] <= self.targets[i]:
                layers, mem = high, mem_high
                continue
            delta = high[i].n_layer - layers[i].n_layer
            while delta > 1:
                step = _step(delta, self.targets[i], mem[i], mem_high[i])
                test = list(layers)
                part = step - 1 if i == nd - 1 and test[i].n_part == 0 else step
                test[i] = replace(test[i], n_layer=test[i].n_layer + step, n_part=test[i].n_part + (part if moe else 0))
                mem_test = self.memory(test, cpu)
                if mem_test[i] <= self.targets[i]:
                    layers, mem = test, mem_test
                else:
                    high, mem_high = test, mem_test
                delta = high[i].n_layer - layers[i].n_layer
        return layers, mem

    def fill_front_to_back(self, layers: list[DeviceFit], mem: list[int]) -> tuple[list[DeviceFit], list[str]]:
        """Step 4 (MoE, dense-only layers with room to spare): the dense-only layers at the back turn into full
        layers on each device from the first, then each device tries part of one more layer (up, then gate, else
        the attention alone), its FFN overflowing to the next device."""
        nd = len(self.devices)
        overflow_to = [CPU] * nd
        dense_start = nd
        for i in reversed(range(nd)):
            if layers[i].n_layer == 0:
                break
            dense_start = i
        i = 0
        while i <= dense_start < nd:
            high = list(layers)
            for j in range(dense_start, nd):
                move = high[j].n_layer if j < nd - 1 else high[j].n_layer - 1
                high[i] = replace(high[i], n_layer=high[i].n_layer + move)
                high[j] = replace(high[j], n_layer=high[j].n_layer - move, n_part=0)
            mem_high = self.memory(high, overflow_to)
            if mem_high[i] <= self.targets[i]:
                layers, mem, dense_start = high, mem_high, nd - 1
            else:
                delta = high[i].n_full - layers[i].n_full
                while delta > 1:
                    step = _step(delta, self.targets[i], mem[i], mem_high[i])
                    test, start = _convert(layers, i, dense_start, step)
                    mem_test = self.memory(test, overflow_to)
                    if mem_test[i] <= self.targets[i] and test == layers:
                        # no dense-only layer left to convert (the devices from id_dense_start hold full layers
                        # alone): llama.cpp keeps the same candidate and the same delta, and never ends
                        raise PlacementUnsupported(
                            "llama.cpp's fitter does not end (common_params_fit_impl's step 4 converts no layer and "
                            "repeats the same step)"
                        )
                    if mem_test[i] <= self.targets[i]:
                        layers, mem, dense_start = test, mem_test, start
                    else:
                        high, mem_high = test, mem_test
                    delta = high[i].n_full - layers[i].n_full
            layers, overflow_to, mem, dense_start = self.one_more_part(i, layers, overflow_to, mem, dense_start)
            i += 1
        return layers, overflow_to

    def one_more_part(
        self, i: int, layers: list[DeviceFit], overflow_to: list[str], mem: list[int], dense_start: int
    ) -> tuple[list[DeviceFit], list[str], list[int], int]:
        """ "try to fit at least part of one more layer": a dense-only layer of the first device holding them
        becomes device i's first partial layer, its FFN overflowing to the next device (the CPU from the last)."""
        nd = len(self.devices)
        if layers[dense_start].n_layer <= (0 if i < nd - 1 else 1):
            return layers, overflow_to, mem, dense_start
        test = list(layers)
        test[dense_start] = replace(test[dense_start], n_layer=test[dense_start].n_layer - 1)
        test[dense_start] = replace(test[dense_start], n_part=test[dense_start].n_part - 1)
        test[i] = replace(test[i], n_layer=test[i].n_layer + 1, n_part=test[i].n_part + 1)
        start = dense_start + 1 if test[dense_start].n_part == 0 else dense_start
        to = list(overflow_to)
        if i < nd - 1:
            to[i] = self.devices[i + 1]

        def fits(part: LayerPart) -> tuple[list[DeviceFit], list[int]] | None:
            tried = list(test)
            tried[i] = replace(tried[i], overflow=part)
            m = self.memory(tried, to)
            ok = m[i] < self.targets[i] and (i + 1 == nd or m[i + 1] < self.targets[i + 1])
            return (tried, m) if ok else None

        up = fits(LayerPart.UP)
        if up is None:
            attn = fits(LayerPart.ATTN)
            return (attn[0], to, attn[1], start) if attn else (layers, overflow_to, mem, dense_start)
        gate = fits(LayerPart.GATE)
        chosen = gate or up
        return chosen[0], to, chosen[1], start


def _convert(layers: Sequence[DeviceFit], i: int, dense_start: int, step: int) -> tuple[list[DeviceFit], int]:
    """`step` dense-only layers, from the first device holding them on, become full layers of device i."""
    test = list(layers)
    converted = 0
    start = dense_start
    while start < len(test):
        n = min(step - converted, test[start].n_part)
        test[start] = replace(test[start], n_layer=test[start].n_layer - n, n_part=test[start].n_part - n)
        test[i] = replace(test[i], n_layer=test[i].n_layer + n)
        converted += n
        if test[start].n_part > 0:
            break
        start += 1
    return test, start


def _margins(request: FitParams, nd: int) -> list[int]:
    m = request.margins
    return [m[min(i, len(m) - 1)] for i in range(nd)]


def fit_placement(request: FitParams, devices: Sequence[str], measure: Measure) -> PlacementFit:
    """common_params_fit_impl on `devices` (each GPU's buffer type, in llama.cpp's device order; at least one)."""
    nd = len(devices)
    n_streams = 1 if request.kv_unified else max(1, request.n_seq)
    n_ctx_max = min(request.n_ctx_train * n_streams, FULL_CONTEXT)
    n_ctx_min = min(request.n_ctx_min * n_streams, FULL_CONTEXT)
    n_ctx = n_ctx_max if request.n_ctx == 0 else request.n_ctx
    initial = Offload()
    full = list(measure(n_ctx, initial))
    margins = _margins(request, nd)
    free = [d.free - d.total for d in full]
    if all(f >= m for f, m in zip(free, margins, strict=True)):
        return PlacementFit(n_ctx, initial, True, f"every device keeps its margin ({margins[0] // MIB} MiB)")
    why = ""
    surplus = sum(free) - sum(margins)
    if surplus < 0 and request.n_ctx == 0 and n_ctx_max > n_ctx_min:
        used_target = sum(d.free for d in full) - sum(margins)
        if nd > 1:  # whole layers (dense) or whole tensors (MoE, <= 1/3 layer) waste half of one per device
            per_layer = sum(d.model for d in full) // min(_u32(request.gpu_layers), request.n_layer)
            used_target -= (nd + 1) * per_layer // (6 if request.n_expert else 2)
        used_max = sum(d.total for d in full)
        used_min = sum(d.total for d in measure(n_ctx_min, initial))
        reduced = interpolated_context(n_ctx_max, n_ctx_min, n_streams, used_max, used_min, used_target)
        n_ctx = n_ctx_min if reduced is None else reduced
        why = f"the context reduced from {n_ctx_max} to {n_ctx}; "
        if reduced is not None and nd == 1:
            return PlacementFit(n_ctx, initial, True, why + "every layer on the GPU")
    if request.user_placement:
        gave_up = why + f"{request.user_placement} set by the launcher: the fit gives up"
        return PlacementFit(n_ctx, initial, False, gave_up, placed=False)
    search = _Search(
        request, n_ctx, measure, tuple(devices), tuple(d.free - m for d, m in zip(full, margins, strict=True))
    )
    try:
        return _assign_layers(search, margins, why)
    except _GaveUp as exc:
        return PlacementFit(n_ctx, initial, False, why + str(exc))


def _assign_layers(search: _Search, margins: Sequence[int], why: str) -> PlacementFit:
    """Steps 3 and 4: the layers per device, and for MoE where the devices hold more than the dense tensors, full
    layers front to back."""
    request, nd = search.request, len(search.devices)
    surplus_cpu_moe = 0
    if request.n_expert > 0:
        dense_only = search.measure(search.n_ctx, Offload(overrides=((_MOE_ALL, CPU),)))
        surplus_cpu_moe = sum(d.free - d.total - m for d, m in zip(dense_only, margins, strict=True))
    layers = [DeviceFit()] * nd
    overflow_to = [CPU] * nd
    layers, mem = search.fill_back_to_front(layers, search.memory(layers, overflow_to))
    if request.n_expert > 0 and surplus_cpu_moe > 0:
        layers, overflow_to = search.fill_front_to_back(layers, mem)
    offload = _offload(request, layers, overflow_to)
    where = ", ".join(
        f"{d}: {f.n_layer} layers ({f.n_part} partial)" for d, f in zip(search.devices, layers, strict=True)
    )
    return PlacementFit(search.n_ctx, offload, True, why + where, tuple(layers))


def draft_memory(
    model: ModelTensors, memory: Memory, devices: Sequence[Device], base: Placement, variant: CpuVariant
) -> dict[str, tuple[int, int]]:
    """common_fit_params' add_extra_memory under llama-server's draft-mtp (common_init_result's common_fit_extra_model:
    the MTP draft context on the target's model, shares_model): each model device's (context, compute) bytes of the
    draft context at `memory`'s context, from a dry run laid out by the extra's own model parameters, the launcher's
    (`base`: a copy of its -ngl, -ts and overrides, which the fitter's trials never reach), its weights not counted.
    The context is the draft's KV cache in its layers' buffer types (placement.draft_kv_placed), the compute the
    scheduler's buffer of each backend for the draft's DECODER_MTP graph (estimator/graph_mtp.py: its block the NextN
    layer's, the token rows and the LM head the input and output layers'). Empty without a draft context."""
    draft = draft_context(model.architecture, memory.layout) if memory.geometry.nextn_width else None
    if draft is None:
        return {}
    used = model_devices(devices, base)
    layers = layer_devices(model.n_layer, base.gpu_layers, used, split_points(used, base.tensor_split))
    kv = draft_kv_placed(model, memory, base, layers)
    result = place(model, memory, devices, base, variant)
    buffers = draft_pool_buffers(model, memory, devices, base, result, Mode.DRY)
    compute = dict(buffers.floors) if buffers else {}
    return {d.name: (kv.get(d.name, 0), compute.get(d.name, 0)) for d in used}


def forecast_measure(
    model: ModelTensors,
    memory_at: Callable[[int], Memory],
    devices: Sequence[Device],
    base: Placement,
    variant: CpuVariant,
) -> Measure:
    """common_get_device_memory_data as memfit forecasts it: for a total context and the fitter's -ngl, -ts and
    overrides over the launcher's other flags (`base`), each model device's weights (its own buffer type), KV cache
    and recurrent state (estimator/placement.py) and compute buffer (estimator/scheduler.py's dry run); under
    draft-mtp (the memory's nextn rows) the target's dry run without the draft, and the draft context's bytes
    (draft_memory, once per context) added to each device's."""
    used = model_devices(devices, base)
    base = replace(base, mmap=False)  # common_get_device_memory_data: load_mode NONE, no_alloc
    extra: dict[int, dict[str, tuple[int, int]]] = {}  # add_extra_memory's measurement, by context

    def measure(n_ctx: int, offload: Offload) -> list[DeviceMemory]:
        memory = memory_at(n_ctx)
        if memory.geometry.nextn_width:
            if n_ctx not in extra:
                extra[n_ctx] = draft_memory(model, memory, devices, base, variant)
            memory = replace(memory, geometry=replace(memory.geometry, nextn_width=0))
        added = extra.get(n_ctx, {})
        request = replace(
            base,
            gpu_layers=base.gpu_layers if offload.gpu_layers is None else offload.gpu_layers,
            tensor_split=offload.tensor_split or base.tensor_split,
            overrides=offload.overrides or base.overrides,
        )
        result = place(model, memory, devices, request, variant)
        compute = dict(pool_buffers(model, memory, tuple(devices), request, result, Mode.DRY).floors)
        pools = result.by_pool()
        empty = Buffers("", "")
        return [
            DeviceMemory(
                d.free,
                pools.get(d.name, empty).weights,
                pools.get(d.name, empty).kv + pools.get(d.name, empty).recurrent + added.get(d.name, (0, 0))[0],
                compute.get(d.name, 0) + added.get(d.name, (0, 0))[1],
            )
            for d in used
        ]

    return measure


# --- the fitter's choice for a request ---------------------------------------------------------------------------


def refused_flags(request: WorkloadRequest, workload: Workload, n_devices: int) -> str:
    """The placement flags the launcher set that make the fitter keep the placement and give up (common_params_fit_
    impl's checks before step 3): -ngl other than auto (a count, or `all`: fullGpu), -ot (--n-cpu-moe writes its
    overrides there), and on several devices a non-zero -ts or -sm row; empty where the fitter places."""
    flags = []
    if request.gpu_layers is not None or workload.mode != vocabulary.Mode.CPU_OFFLOAD:
        flags.append(f"-ngl {workload.placement.gpu_layers}")
    if request.tensor_overrides or request.n_cpu_moe:
        flags.append("-ot")
    if n_devices > 1 and any(workload.placement.tensor_split):
        flags.append("-ts")
    if n_devices > 1 and workload.placement.split_mode == SplitMode.ROW.value:
        flags.append("-sm row")
    return ", ".join(flags)


def predicted_fit(
    request: WorkloadRequest,
    subject: Subject,
    workload: Workload,
    gpus: Sequence[GpuMemory],
    variant: CpuVariant,
    choose_context: bool,
) -> PlacementFit | None:
    """What llama.cpp's fitter does for the workload on `gpus` (-c 0 where `choose_context`); None where it has no
    GPU to place on or memfit cannot forecast the candidates (the model's tensors, its graph, a placement memfit
    does not mirror, or under draft-mtp a draft context memfit does not derive, which the fitter fits beside the
    target: common_fit_extra_model, forecast_measure)."""
    subject = with_mtp(subject, workload)  # draft-mtp loads the NextN layers (load_mtp): hp_ngl counts them
    layout, devices = subject.layout, gpu_devices(gpus)
    if not devices or not subject.tensors or layout is None or subject.context_limit is None:
        return None
    if workload.multi_token_prediction and mtp_refusal(subject, workload) is not None:
        return None
    if workload.placement.gpu_layers is None:  # an unknown mode names no -ngl
        return None
    model = subject.tensors[0]
    refused = refused_flags(request, workload, len(devices))
    if refused and not choose_context and not _auto_layers(workload):  # the launcher's placement and context
        return None
    flags = replace(workload.placement, gpu_layers=ALL_LAYERS) if _auto_layers(workload) else workload.placement
    try:
        base = placement_request(flags, model.n_layer)
        used = model_devices(devices, base)
    except PlacementUnsupported:
        return None
    if not used:
        return None
    streams = workload.streams
    kernel = ContextKernel(layout, subject.n_vocab, subject.architecture, workload)
    if kernel.draft_unknown:
        return None

    def memory_at(n_ctx: int) -> Memory:
        return Memory(layout, kernel.geometry(max(1, n_ctx // streams)), kernel.k_type, kernel.v_type)

    fit_params = FitParams(
        # hp_ngl: llama_model_n_layer, and under draft-mtp (load_mtp) llama_model_n_layer_nextn too
        n_layer=model.n_layer if workload.multi_token_prediction else model.n_trunk,
        n_expert=expert_count(layout),
        n_ctx_train=subject.context_limit,
        n_ctx=0 if choose_context else workload.n_ctx,
        n_seq=streams,
        kv_unified=workload.kv_unified,
        gpu_layers=-1 if base.gpu_layers is None or not refused else base.gpu_layers,
        user_placement=refused,
    )
    try:
        return fit_placement(
            fit_params, [d.name for d in used], forecast_measure(model, memory_at, devices, base, variant)
        )
    except PlacementUnsupported:
        return None


def _auto_layers(workload: Workload) -> bool:
    """-ngl auto: cpuOffload without a gpuLayers the request names."""
    named = any(s.setting == "gpuLayers" and s.source is SettingSource.REQUEST for s in workload.sources)
    return workload.mode == vocabulary.Mode.CPU_OFFLOAD and not named


def fitted_workload(workload: Workload, fit: PlacementFit, choose_context: bool) -> Workload:
    """The workload with the fitter's context (where it chose one) and, for -ngl auto, its placement: the layers,
    split and overrides it chose, or every layer (llama.cpp's -1) with the flags the request names where it gave
    up; each such setting's source the fitter."""
    detail = f"llama.cpp's fitter (common/fit.cpp common_fit_params, --fit on): {fit.why}"
    if not fit.fitted:
        detail += "; the fit fails and llama.cpp loads with that"
    chosen = {}
    if choose_context:
        workload = replace(
            workload, allocated_tokens=max(1, fit.n_ctx // workload.streams), context_source=ContextSource.LAUNCHER
        )
        chosen["allocatedTokens"] = ResolvedSetting("allocatedTokens", SettingSource.FITTER, detail)
    if _auto_layers(workload):
        offload = fit.offload if fit.placed else Offload()
        placement = replace(
            workload.placement,
            gpu_layers=ALL_LAYERS if offload.gpu_layers is None else offload.gpu_layers,
            tensor_split=offload.tensor_split or workload.placement.tensor_split,
            tensor_overrides=tuple(f"{p}={b}" for p, b in offload.overrides) or workload.placement.tensor_overrides,
        )
        workload = replace(workload, placement=placement)
        named = {s.setting for s in workload.sources if s.source is SettingSource.REQUEST}
        chosen |= {s: ResolvedSetting(s, SettingSource.FITTER, detail) for s in PLACED if s not in named}
    return replace(workload, sources=tuple(chosen.get(s.setting, s) for s in workload.sources))
