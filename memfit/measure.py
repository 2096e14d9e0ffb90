"""`memfit measure`: load a model in a real llama.cpp (llama-cpp-python, the `memfit[measure]` extra) with the
workload's settings, and record in the measurement history what llama.cpp says it allocated.

llama.cpp reports its buffers in its log, in MiB with two decimals; the parts are read from those lines:
weights = the model buffers, kvCache = the KV buffers, recurrentState = the RS buffers, workspace = the
compute buffers plus the output buffer.
"""

from __future__ import annotations

import ctypes
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType

from memfit.estimator.context import DEFAULT_N_BATCH
from memfit.estimator.fit_types import ObservationRow
from memfit.estimator.kv_cache import BY_ELEMENT_BYTES
from memfit.estimator.vocabulary import FlashAttention, Mode
from memfit.estimator.workload import Workload

MIB = 1 << 20
BUFFER_LINE = re.compile(r"\b(\S+)\s+(model|KV|RS|compute|output) buffer size =\s+([\d.]+) MiB")


def ggml_cache_type(element_bytes: int) -> int:
    """The ggml type id of the llama.cpp cache type `element_bytes` names (the CLI checks it names one)."""
    ggml_type = BY_ELEMENT_BYTES[element_bytes].ggml_type
    if ggml_type is None:
        raise ValueError(f"{element_bytes} bytes per element is not a llama.cpp cache type")
    return int(ggml_type)


def flash_attn_type(lib: ModuleType, setting: str) -> int:
    """llama.cpp's flash_attn_type for the contract's `flashAttention` (the CLI offers only the known ones)."""
    names = {
        FlashAttention.AUTO: "LLAMA_FLASH_ATTN_TYPE_AUTO",
        FlashAttention.ON: "LLAMA_FLASH_ATTN_TYPE_ENABLED",
        FlashAttention.OFF: "LLAMA_FLASH_ATTN_TYPE_DISABLED",
    }
    if setting not in names:
        raise ValueError(f"{setting!r} is not a llama.cpp flash attention setting")
    return int(getattr(lib, names[FlashAttention(setting)]))


@dataclass(frozen=True)
class MeasuredParts:
    weights: int | None
    kv_cache: int | None
    recurrent_state: int | None
    workspace: int | None


def parse_llama_log(text: str) -> MeasuredParts:
    """The parts from llama.cpp's `... buffer size = X MiB` lines, summed over devices."""
    sums: dict[str, float] = {}
    for _device, kind, mib in BUFFER_LINE.findall(text):
        sums[kind] = sums.get(kind, 0.0) + float(mib)

    def total(*kinds: str) -> int | None:
        found = [sums[k] for k in kinds if k in sums]
        return round(sum(found) * MIB) if found else None

    return MeasuredParts(
        weights=total("model"),
        kv_cache=total("KV") or 0,
        recurrent_state=total("RS") or 0,
        workspace=total("compute", "output"),
    )


class LlamaCppLoad:
    """One load of a model in llama-cpp-python's llama.cpp, capturing its log and showing progress."""

    def __init__(self, llama_cpp: ModuleType) -> None:
        self.lib = llama_cpp
        self.log: list[str] = []
        self._log_callback = llama_cpp.llama_log_callback(self._on_log)
        self._progress_callback = llama_cpp.llama_progress_callback(self._on_progress)
        self._shown = -1

    def _on_log(self, _level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        self.log.append(text.decode("utf-8", "replace"))

    def _on_progress(self, progress: float, _user: ctypes.c_void_p) -> bool:
        percent = int(progress * 100)
        if percent // 10 != self._shown // 10:  # one update per tenth
            self._shown = percent
            print(f"\rloading in llama.cpp: {percent:3d}%", end="", file=sys.stderr, flush=True)
        return True

    def run(self, path: str, workload: Workload) -> str:
        """Load the model and create a context as memfit models them; returns llama.cpp's log."""
        lib = self.lib
        lib.llama_log_set(self._log_callback, ctypes.c_void_p(0))
        lib.llama_backend_init()
        model_params = lib.llama_model_default_params()
        model_params.load_mode = lib.LLAMA_LOAD_MODE_NONE  # weights loaded, not mmapped
        model_params.n_gpu_layers = 0 if workload.mode == Mode.CPU_OFFLOAD else -1
        model_params.progress_callback = self._progress_callback
        model = lib.llama_model_load_from_file(path.encode(), model_params)
        print(file=sys.stderr)
        if not model:
            raise RuntimeError("llama.cpp could not load the model:\n" + "".join(self.log[-5:]))
        try:
            params = lib.llama_context_default_params()
            params.n_ctx = workload.allocated_tokens * workload.streams
            params.n_seq_max = workload.streams
            params.n_batch, params.n_ubatch = DEFAULT_N_BATCH, workload.ubatch_tokens  # llama.cpp caps the ubatch
            params.flash_attn_type = flash_attn_type(lib, workload.flash_attention)
            params.type_k = ggml_cache_type(workload.key_element_bytes)
            params.type_v = ggml_cache_type(workload.value_element_bytes)
            params.kv_unified, params.swa_full = workload.kv_unified, False
            context = lib.llama_init_from_model(model, params)
            if not context:
                raise RuntimeError("llama.cpp could not create the context:\n" + "".join(self.log[-5:]))
            lib.llama_free(context)
        finally:
            lib.llama_model_free(model)
        return "".join(self.log)


def observation(
    model_id: str,
    revision: str,
    quant: str,
    artifact_bytes: int | None,
    workload: Workload,
    parts: MeasuredParts,
    runtime: str,
) -> ObservationRow:
    return ObservationRow(
        model_id=model_id,
        revision=revision,
        quant=quant,
        artifact_bytes=artifact_bytes,
        allocated_tokens=workload.allocated_tokens,
        streams=workload.streams,
        key_element_bytes=workload.key_element_bytes,
        value_element_bytes=workload.value_element_bytes,
        mode=workload.mode,
        weights_bytes=parts.weights,
        kv_cache_bytes=parts.kv_cache,
        recurrent_state_bytes=parts.recurrent_state,
        workspace_bytes=parts.workspace,
        companions_bytes=None,
        runtime=runtime,
        observed_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
