"""The devices llama.cpp places a model on: each GPU's buffer types and how they size a tensor.

A GPU backend gives llama.cpp a device buffer type (the device's memory, named as the device: CUDA0), and may give
a host buffer type (pinned host memory, one per backend: CUDA_Host) that llama.cpp prefers for the weights it keeps
on the CPU and for the output buffer. Each buffer type aligns every tensor it holds (ggml_backend_buft_get_alignment)
and may allocate more than the tensor's bytes (ggml_backend_buft_get_alloc_size): ggml-cuda pads each quantized
matrix with one row of MATRIX_ROW_PADDING elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memfit.estimator.cpu_repack import TENSOR_ALIGNMENT
from memfit.estimator.machine import GpuBackend, GpuMemory
from memfit.gguf_constants import GGML_QUANT_SIZES
from memfit.gguf_constants import GGMLQuantizationType as QT
from memfit.integers import round_up

CPU = "CPU"  # the CPU device, and its buffer type (ggml_backend_cpu_buffer_type)
# ggml_backend_cpu_buffer_from_ptr's buffer type: an mmapped model's CPU weights, the file's pages mapped in place
CPU_MAPPED = "CPU_Mapped"
HOST = "Host"  # the host pool: every is_host buffer type (CPU, a GPU's pinned host buffer), as llama.cpp sums it
CPU_ALIGNMENT = TENSOR_ALIGNMENT
# ggml-cuda.cu: MATRIX_ROW_PADDING, the elements a quantized row is padded to (its kernels read whole 512 blocks)
MATRIX_ROW_PADDING = 512
# ggml-metal.cpp: ggml_backend_metal_buffer_type_shared_get_alignment
METAL_ALIGNMENT = 32
# ggml_is_quantized: the types whose elements are stored in blocks
_UNQUANTIZED = frozenset({QT.F32, QT.F16, QT.BF16, QT.F64, QT.I8, QT.I16, QT.I32, QT.I64})


class AllocRule(Enum):
    """How a device buffer type sizes a tensor (ggml_backend_buft_get_alloc_size)."""

    PLAIN = "plain"  # ggml_nbytes (no get_alloc_size: Metal, Vulkan, the mock's default)
    CUDA = "cuda"  # ggml_backend_cuda_buffer_type_get_alloc_size: one padded row for quantized matrices


class DeviceKind(Enum):
    """ggml_backend_dev_type of a device llama.cpp may offload to."""

    GPU = "gpu"  # a discrete GPU: its buffer type holds only its own tensors
    IGPU = "igpu"  # an integrated GPU: used only where there is no discrete one


@dataclass(frozen=True)
class Device:
    """A GPU as llama.cpp's backend registry shows it."""

    name: str  # the device and its buffer type: CUDA0, Vulkan1, MOCK0
    backend: str  # the backend registering it: CUDA, MOCK; its host buffer type is <backend>_Host
    free: int  # bytes free (ggml_backend_dev_memory): the default layer split and the fitter read it
    total: int
    alignment: int = 128  # ggml-cuda's buffer alignment
    alloc: AllocRule = AllocRule.CUDA
    host_buffer: bool = True  # a pinned host buffer type (ggml-cuda's, unless GGML_CUDA_NO_PINNED)
    kind: DeviceKind = DeviceKind.GPU
    async_events: bool = True  # async compute and events (its props' caps): pipeline parallelism needs both
    moe_alloc_dep: bool = True  # ggml-cuda's graph_optimize keeps a fused MoE sum's sources (add_alloc_dep)

    @property
    def host_buffer_type(self) -> str | None:
        return f"{self.backend}_Host" if self.host_buffer else None


def is_quantized(ggml_type: int) -> bool:
    return QT(ggml_type) not in _UNQUANTIZED


def row_bytes(ggml_type: int, elements: int) -> int:
    """ggml_row_size: whole blocks of the type."""
    block, block_bytes = GGML_QUANT_SIZES[QT(ggml_type)]
    return elements // block * block_bytes


def cuda_alloc_size(nbytes: int, ggml_type: int, ne0: int) -> int:
    # ggml_backend_cuda_buffer_type_get_alloc_size: a quantized tensor whose rows are not a multiple of
    # MATRIX_ROW_PADDING gets ggml_row_size(type, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING) more (one row)
    if is_quantized(ggml_type) and ne0 % MATRIX_ROW_PADDING:
        return nbytes + row_bytes(ggml_type, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING)
    return nbytes


def alloc_size(device: Device | None, nbytes: int, ggml_type: int, ne0: int) -> int:
    """The bytes a buffer type allocates for a tensor (before alignment): a device's rule, or ggml_nbytes on the
    host (the CPU, CPU_REPACK and pinned host buffer types have no get_alloc_size)."""
    if device is not None and device.alloc is AllocRule.CUDA:
        return cuda_alloc_size(nbytes, ggml_type, ne0)
    return nbytes


def padded(device: Device | None, size: int) -> int:
    """ggml_backend_alloc_ctx_tensors_from_buft: each tensor at a multiple of its buffer type's alignment."""
    return round_up(size, device.alignment if device is not None else CPU_ALIGNMENT)


def mock_gpus(
    count: int,
    *,
    total: tuple[int, ...],
    free: tuple[int, ...] = (),
    alloc: AllocRule = AllocRule.PLAIN,
    alignment: int = 128,
    host_buffer: bool = True,
    name: str = "MOCK",
    async_events: bool = True,
    moe_alloc_dep: bool = False,
) -> tuple[Device, ...]:
    """The devices the mock-GPU probe registers (tools/truth/mock/mock_gpu.cpp): one total and free per device, a
    single value standing for every device, free = total when not given."""
    free = free or total
    return tuple(
        Device(
            f"{name}{i}",
            name,
            free[min(i, len(free) - 1)],
            total[min(i, len(total) - 1)],
            alignment,
            alloc,
            host_buffer,
            async_events=async_events,
            moe_alloc_dep=moe_alloc_dep,
        )
        for i in range(count)
    )


def device_of(gpu: GpuMemory, position: int) -> Device:
    """A GPU that was read (or declared) as llama.cpp's backend registers it: the position-th device of its backend
    (CUDA numbers the devices CUDA_VISIBLE_DEVICES shows from 0), with that backend's buffer rules: ggml-cuda's
    128-byte alignment, padded quantized rows and pinned host buffer; ggml-metal's 32-byte alignment, plain sizes
    and no host buffer type (its buffers are the host's memory)."""
    name = f"{gpu.backend.value}{position}"
    if gpu.backend is GpuBackend.METAL:
        return Device(name, gpu.backend.value, gpu.free, gpu.total, METAL_ALIGNMENT, AllocRule.PLAIN, False)
    return Device(name, gpu.backend.value, gpu.free, gpu.total)
