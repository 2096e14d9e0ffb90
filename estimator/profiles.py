"""Launch profiles: the settings llama-server, Ollama and LM Studio give llama.cpp where a request names none.

A profile resolves every setting that changes memory (the context and the slots, the unified cache, swa_full, the
load mode, the prompt cache's RAM, the checkpoints, flash attention, the K and V types, the ubatch) and says where
each came from: the request (which always wins), the launcher's default, the launcher's environment, or llama.cpp's
fitter (estimator/fitter.py), which picks llama-server's context when no -c is given.

`running` takes the settings of the llama-server running on this host with the model loaded: its slots and slot
context as it answered GET /props (tools/server/server-context.cpp), what its command line names (common/arg.cpp,
read by estimator/server_args.py), llama-server's defaults for the rest.

llama-server's defaults are read from the pinned llama.cpp (arch_rules.LLAMA_CPP_RELEASE): common/common.h
(common_params), common/arg.cpp and tools/server/server.cpp. Ollama's from its llama-server launch (llm/
llama_server.go's startLlamaServer, server/routes.go's VRAM tiers, server/sched.go's automatic batch, envconfig/
config.go). LM Studio is closed source: its documented load defaults, the rest its llama.cpp engine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from memfit.estimator.cpu_variant import CpuVariant
from memfit.estimator.fit_placement import fitted_workload, predicted_fit
from memfit.estimator.fitter import FitOutcome, fitted_context, host_projection
from memfit.estimator.kv_cache import ELEMENT_BYTES_BY_NAME
from memfit.estimator.machine import GpuBackend, GpuMemory
from memfit.estimator.mtp import with_mtp
from memfit.estimator.server_args import RunningServer
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import ContextSource, FlashAttention, LoadMode, Mode, Profile, SettingSource
from memfit.estimator.workload import (
    MTP_DRAFT_TOKENS,
    SETTINGS,
    ResolvedSetting,
    Workload,
    WorkloadRequest,
    input_refusal,
    resolve_workload,
)

GIB = 1 << 30
PROFILE_NAMES = {p.value: p for p in Profile}

COMMON_H = "llama.cpp common/common.h"
SERVER_CPP = "llama.cpp tools/server/server.cpp"
OLLAMA_LAUNCH = "Ollama llm/llama_server.go startLlamaServer"
OLLAMA_ENV = "Ollama envconfig/config.go"
LM_STUDIO_DOCS = "LM Studio's documentation"


@dataclass(frozen=True)
class Default:
    value: object
    cite: str  # the file (or document) the value is read from


# llama-server with no flags: the settings that change memory, by their names on the wire
LLAMA_SERVER: dict[str, Default] = {
    "mode": Default(
        Mode.CPU_OFFLOAD, f"{COMMON_H}: n_gpu_layers = -1 (auto) and fit_params = true: llama.cpp's fitter places"
    ),
    "streams": Default(4, f"{SERVER_CPP}: -np auto (n_parallel -1, common/arg.cpp's server default) runs 4 slots"),
    "kvUnified": Default(True, f"{SERVER_CPP}: with -np auto, kv_unified = true"),
    "keyElementBytes": Default(2, f"{COMMON_H}: cache_type_k = GGML_TYPE_F16"),
    "valueElementBytes": Default(2, f"{COMMON_H}: cache_type_v = GGML_TYPE_F16"),
    "flashAttention": Default(FlashAttention.AUTO, f"{COMMON_H}: flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO"),
    "ubatchTokens": Default(512, f"{COMMON_H}: n_ubatch = 512"),
    "swaFull": Default(False, f"{COMMON_H}: swa_full = false"),
    "loadMode": Default(LoadMode.AUTO, f"{COMMON_H}: load_mode = LLAMA_LOAD_MODE_AUTO (mmap where it can)"),
    "cacheRamMib": Default(8192, f"{COMMON_H}: cache_ram_mib = 8192, one prompt cache per server"),
    "contextCheckpoints": Default(32, f"{COMMON_H}: n_ctx_checkpoints = 32 per slot"),
    "rollbackSnapshots": Default(0, f"{COMMON_H}: need_n_rs_seq() is 0 with no speculative type that rolls back"),
    "multiTokenPrediction": Default(False, f"{COMMON_H}: speculative.types names no draft-mtp, so load_mtp is false"),
    # after multiTokenPrediction: under it, the draft length (_Resolving.defaults)
    "draftTokens": Default(0, f"{COMMON_H}: speculative.types = {{NONE}}, so no slot verifies a draft"),
    "embeddings": Default(False, f"{COMMON_H}: embedding = false: no embeddings served"),
    "pooling": Default(None, f"{COMMON_H}: pooling_type = LLAMA_POOLING_TYPE_UNSPECIFIED: the model's own"),
    "draftKeyElementBytes": Default(2, f"{COMMON_H}: speculative.draft.cache_type_k = GGML_TYPE_F16"),
    "draftValueElementBytes": Default(2, f"{COMMON_H}: speculative.draft.cache_type_v = GGML_TYPE_F16"),
    "draftBackendSampling": Default(True, f"{COMMON_H}: speculative.draft.backend_sampling = true"),
}
MTP_DRAFT = Default(MTP_DRAFT_TOKENS, f"{COMMON_H}: draft-mtp drafts speculative.draft.n_max = 3 tokens a step")
# the placement Ollama and LM Studio launch with is their own (Ollama's llm/server.go passes --n-gpu-layers from its
# own estimate, LM Studio's GPU offload setting): not llama-server's -ngl auto, so their mode stays memfit's default
OWN_PLACEMENT = frozenset({"mode"})
# (its ubatch is not llama-server's: OLLAMA_BATCH_TIERS)
OLLAMA: dict[str, Default] = {k: v for k, v in LLAMA_SERVER.items() if k not in OWN_PLACEMENT | {"ubatchTokens"}} | {
    "streams": Default(1, f"{OLLAMA_ENV}: OLLAMA_NUM_PARALLEL, default 1; passed as -np"),
    "kvUnified": Default(False, f"{OLLAMA_LAUNCH}: -np given, so common_params' kv_unified = false ({COMMON_H})"),
}
LM_STUDIO: dict[str, Default] = {k: v for k, v in LLAMA_SERVER.items() if k not in OWN_PLACEMENT} | {
    "streams": Default(4, f"{LM_STUDIO_DOCS} (app/advanced/parallel-requests): Max Concurrent Predictions, default 4"),
    "kvUnified": Default(True, f"{LM_STUDIO_DOCS}: the slots share one context (a unified cache, as llama-server's)"),
    "loadMode": Default(LoadMode.MMAP, f"{LM_STUDIO_DOCS}: Try mmap(), on by default"),
}
DEFAULTS: dict[Profile, dict[str, Default]] = {
    Profile.LLAMA_SERVER: LLAMA_SERVER,
    Profile.OLLAMA: OLLAMA,
    Profile.LM_STUDIO: LM_STUDIO,
}

# server/routes.go: the default num_ctx by the GPUs' total memory (less OLLAMA_GPU_OVERHEAD), 47 and 23 GiB
# "to account for small differences" from 48 and 24
OLLAMA_CONTEXT_TIERS = ((47 * GIB, 262144), (23 * GIB, 32768), (0, 4096))
# server/sched.go generationBatchForContext: -b and -ub by the context llama-server is started with
# (llamaServerGenerationBatchLarge, _Medium, _Default)
OLLAMA_BATCH_LARGE, OLLAMA_BATCH_MEDIUM, OLLAMA_BATCH_DEFAULT = 2048, 1024, 512
OLLAMA_BATCH_TIERS = ((32768, OLLAMA_BATCH_LARGE), (4096, OLLAMA_BATCH_MEDIUM), (0, OLLAMA_BATCH_DEFAULT))
# server/sched.go automaticGenerationBatch: flash attention off on a CUDA device, 256 above a 4096 context where a
# CUDA device has at most 8 GiB (constrainedCUDAWithoutFlashAttention), else 512
OLLAMA_BATCH_CONSTRAINED = 256
OLLAMA_CONSTRAINED_CONTEXT, OLLAMA_CONSTRAINED_GPU = 4096, 8 * GIB
# server/sched.go generationBatchFits: its prediction within 80% of the available memory, within the batch's
# headroom (generationBatchHasHeadroom: 60% from 2048, 75% from 1024) and leaving its surcharge
# (generationBatchSurcharge: 2 GiB from 2048, 768 MiB from 1024): (least batch, headroom percent, surcharge)
OLLAMA_FIT_PERCENT = 80
OLLAMA_BATCH_HEADROOM = ((OLLAMA_BATCH_LARGE, 60, 2 * GIB), (OLLAMA_BATCH_MEDIUM, 75, 768 << 20), (0, 100, 0))
# llm/llama_server.go: an embedding model's num_batch default (DefaultEmbeddingNumBatch), capped by num_ctx
OLLAMA_EMBEDDING_BATCH = 2048
LM_STUDIO_CONTEXT = 4096  # LM Studio's loader: Context Length, default 4096

# server/sched.go processPending: architectures "not safe with num_parallel > 1" (ollama/ollama#4165), loaded with
# one slot whatever OLLAMA_NUM_PARALLEL says, as every embedding model is
OLLAMA_ONE_SLOT = frozenset(
    {"mllama", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen3next", "lfm2", "lfm2moe", "nemotron_h"}
    | {"nemotron_h_moe", "nemotron_h_omni"}
)
OLLAMA_NUM_PARALLEL = "OLLAMA_NUM_PARALLEL"
OLLAMA_CONTEXT_LENGTH = "OLLAMA_CONTEXT_LENGTH"
OLLAMA_KV_CACHE_TYPE = "OLLAMA_KV_CACHE_TYPE"
OLLAMA_FLASH_ATTENTION = "OLLAMA_FLASH_ATTENTION"
OLLAMA_READ = (OLLAMA_NUM_PARALLEL, OLLAMA_FLASH_ATTENTION, OLLAMA_KV_CACHE_TYPE)
TRUTHY = frozenset({"1", "t", "true"})  # Go's strconv.ParseBool, lower-cased
FALSEY = frozenset({"0", "f", "false"})


@dataclass(frozen=True)
class LaunchFacts:
    """What the profiles read of this machine, once per request."""

    host_total: int | None = None  # physical memory: what llama.cpp's CPU device reports (free = total)
    gpu_total: int | None = None  # the visible GPUs' memory together (0: none; None: unknown)
    gpus: tuple[GpuMemory, ...] | None = None  # the GPUs llama.cpp's fitter places on (None: not read)
    ollama_env: Mapping[str, str] | None = None  # the OLLAMA_* variables `ollama serve` runs with (None: not read)
    running: RunningServer | None = None  # the llama-server running with the model loaded (None: none found)


NO_FACTS = LaunchFacts()


class _Resolving:
    """A request being filled in: a setting it names is kept, one it leaves unset takes the profile's value."""

    def __init__(self, request: WorkloadRequest) -> None:
        self.request = request
        self.sources: dict[str, ResolvedSetting] = {}

    def set(self, wire: str, value: object, source: SettingSource, detail: str) -> None:
        attr = _ATTR[wire]
        if getattr(self.request, attr) is None:
            self.request = replace(self.request, **{attr: cast(Any, value)})  # a value of the field's type
            self.sources[wire] = ResolvedSetting(wire, source, detail)

    def defaults(self, table: Mapping[str, Default]) -> None:
        for wire, default in table.items():
            if wire == "draftTokens" and self.request.multi_token_prediction:
                default = MTP_DRAFT
            self.set(wire, default.value, SettingSource.PROFILE, default.cite)


_ATTR = {wire: attr for attr, wire in SETTINGS}


def _tier(tiers: tuple[tuple[int, int], ...], amount: int) -> int:
    return next(value for least, value in tiers if amount >= least)


def _ollama_environment(r: _Resolving, env: Mapping[str, str]) -> None:
    """The variables of `ollama serve` that reach llama-server's memory (envconfig's parsing: quotes and spaces
    trimmed, an unparsable value ignored)."""
    value = {k: env.get(k, "").strip("\"' ") for k in OLLAMA_READ}
    env_source = SettingSource.ENVIRONMENT
    if value[OLLAMA_NUM_PARALLEL].isdigit() and int(value[OLLAMA_NUM_PARALLEL]) > 0:
        detail = f"{OLLAMA_NUM_PARALLEL}={value[OLLAMA_NUM_PARALLEL]}: -np ({OLLAMA_LAUNCH})"
        r.set("streams", int(value[OLLAMA_NUM_PARALLEL]), env_source, detail)
    flash = value[OLLAMA_FLASH_ATTENTION].lower()
    if flash in TRUTHY | FALSEY:  # llm/llama_server.go LlamaServerFlashAttention: --flash-attn on or off
        mode = FlashAttention.ON if flash in TRUTHY else FlashAttention.OFF
        r.set("flashAttention", mode, env_source, f"{OLLAMA_FLASH_ATTENTION}={flash}: --flash-attn {mode}")
    kv = value[OLLAMA_KV_CACHE_TYPE].lower()  # llm/server.go: lower-cased, passed as -ctk and -ctv
    if kv in ELEMENT_BYTES_BY_NAME:
        for wire in ("keyElementBytes", "valueElementBytes"):
            r.set(wire, ELEMENT_BYTES_BY_NAME[kv], env_source, f"{OLLAMA_KV_CACHE_TYPE}={kv}: -ctk {kv} -ctv {kv}")


def _ollama_batch(r: _Resolving, total: int, subject: Subject, facts: LaunchFacts, embedding: bool) -> None:
    """-b and -ub: an embedding model's min(2048, num_ctx) (routes.go's embedding batch default, appendBatchArgs'
    cap at num_ctx x num_parallel), else automaticGenerationBatch (server/sched.go): the context's tier, stepped
    down (generation_batch) where Ollama's own prediction (PredictServerVRAM) leaves it too little of the GPUs'
    free memory."""
    if embedding:
        batch = min(OLLAMA_EMBEDDING_BATCH, max(1, total // max(1, r.request.streams or 1)))
        detail = f"-b and -ub {batch}: an embedding model's min(2048, num_ctx) ({OLLAMA_LAUNCH} appendBatchArgs)"
        r.set("ubatchTokens", batch, SettingSource.PROFILE, detail)
        return
    batch, why = generation_batch(total, subject, facts, r.request.flash_attention == FlashAttention.OFF)
    detail = f"-b and -ub {batch} for the context {total}{why} (Ollama server/sched.go automaticGenerationBatch)"
    r.set("ubatchTokens", batch, SettingSource.PROFILE, detail)


def generation_batch(total: int, subject: Subject, facts: LaunchFacts, flash_off: bool) -> tuple[int, str]:
    """automaticGenerationBatch's batch for a generation model at the context `total` (and why, where not its
    tier): with flash attention off on a CUDA device, 256 or 512; else the tier ("> 32768", "> 4096"; a context of
    negative streams, refused later, takes the lowest), stepped down to 1024 then 512 while generationBatchFits
    fails: PredictServerVRAM (the file's size and its f16 KV estimate, Layout.ollama_kv_row, at `total`) against
    the placement's free memory (availableMemoryForLoad: the GPUs' free memory together; on an integrated or
    unified GPU Ollama takes the smaller of its free memory and the system's, which memfit reads as the device's).
    Without GPUs, or where the file's size or its KV estimate is unknown, the tier stands."""
    gpus = facts.gpus or ()
    cuda = [g for g in gpus if g.backend is GpuBackend.CUDA]
    if flash_off and cuda:
        small = any(0 < (g.free if 0 < g.free <= g.total else g.total) <= OLLAMA_CONSTRAINED_GPU for g in cuda)
        if total > OLLAMA_CONSTRAINED_CONTEXT and small:
            return OLLAMA_BATCH_CONSTRAINED, ", flash attention off on a CUDA device of at most 8 GiB"
        return OLLAMA_BATCH_DEFAULT, ", flash attention off on a CUDA device"
    batch = _tier(OLLAMA_BATCH_TIERS, max(0, total - 1))
    kv_row = subject.layout.ollama_kv_row if subject.layout is not None else 0
    if not gpus or subject.artifact_bytes is None or not kv_row:
        return batch, ""
    predicted = subject.artifact_bytes + kv_row * max(0, total)
    available = sum(g.free for g in gpus)
    tier = batch
    while batch > OLLAMA_BATCH_DEFAULT and not _batch_fits(batch, predicted, available):
        batch = OLLAMA_BATCH_MEDIUM if batch > OLLAMA_BATCH_MEDIUM else OLLAMA_BATCH_DEFAULT  # nextLowerGenerationBatch
    if batch == tier:
        return batch, ""
    return batch, (
        f", stepped down from {tier}: Ollama predicts {predicted / GIB:.1f} GiB of the GPUs' {available / GIB:.1f} GiB"
        " free (PredictServerVRAM: the file and an f16 KV estimate)"
    )


def _batch_fits(batch: int, predicted: int, available: int) -> bool:
    """server/sched.go generationBatchFits."""
    if predicted == 0 or available == 0:
        return True
    threshold = available * OLLAMA_FIT_PERCENT // 100
    headroom, surcharge = next((h, c) for least, h, c in OLLAMA_BATCH_HEADROOM if batch >= least)
    if predicted > threshold or predicted > available * headroom // 100:
        return False
    return surcharge <= threshold - predicted


def _ollama_context(r: _Resolving, facts: LaunchFacts, trained: int | None) -> tuple[int, ResolvedSetting]:
    """num_ctx (OLLAMA_CONTEXT_LENGTH, else the VRAM tier), capped to the trained context (llm/server.go), times
    the slots: -c num_ctx x num_parallel (llm/llama_server.go)."""
    env = facts.ollama_env or {}
    length = env.get(OLLAMA_CONTEXT_LENGTH, "").strip("\"' ")
    if length.isdigit() and int(length) > 0:
        num_ctx, source, detail = int(length), SettingSource.ENVIRONMENT, f"{OLLAMA_CONTEXT_LENGTH}={length}"
    else:
        vram = facts.gpu_total or 0
        num_ctx, source = _tier(OLLAMA_CONTEXT_TIERS, vram), SettingSource.PROFILE
        detail = f"num_ctx {num_ctx} for {vram / GIB:.1f} GiB of GPU memory (Ollama server/routes.go's VRAM tiers)"
    if trained is not None and 0 < trained < num_ctx:
        num_ctx, detail = trained, f"{detail}, capped to the trained context {trained} (Ollama llm/server.go)"
    slots = r.request.streams or 1
    total = num_ctx * slots
    return total, ResolvedSetting("allocatedTokens", source, f"{detail}; -c {num_ctx} x {slots} ({OLLAMA_LAUNCH})")


SERVER_CONTEXT = "llama.cpp tools/server/server-context.cpp"


def _running_settings(r: _Resolving, server: RunningServer) -> None:
    """The slots as the server answered (else its -np), the unified cache as its -np decided (server.cpp: -np auto
    runs 4 slots over a unified cache), what its command line names, llama-server's defaults for the rest."""
    source, args = SettingSource.RUNNING, server.args
    if server.total_slots is not None:
        detail = f"GET /props on port {server.port}: total_slots {server.total_slots} ({SERVER_CONTEXT})"
        r.set("streams", server.total_slots, source, detail)
    elif args.parallel is not None and args.parallel > 0:
        r.set("streams", args.parallel, source, f"its command line: -np {args.parallel}")
    if args.parallel is None or args.parallel < 0:
        detail = f"its command line names no -np: auto, 4 slots over a unified cache ({SERVER_CPP})"
        r.set("kvUnified", True, source, detail)
    for wire, named in args.named.items():
        r.set(wire, named.value, source, named.detail)
    if args.parallel is not None and args.parallel > 0:
        r.set("kvUnified", False, source, f"its command line names -np and no --kv-unified ({COMMON_H})")
    r.defaults(LLAMA_SERVER)


def _running_context(r: _Resolving, server: RunningServer, trained: int | None) -> tuple[int, ResolvedSetting] | None:
    """The server's total context: its slot context as it answered (n_ctx_slot: the whole context of a unified
    cache, a stream's otherwise), else its -c (0: the trained context); None where neither is known (its --fit
    chose it). The slot context is capped to the trained one and to --kv-unified-per-slot (server-context.cpp
    n_ctx_slot), so there the command line's -c, or n_parallel x --kv-unified-per-slot (server.cpp), is the
    context."""
    args, streams = server.args, r.request.streams or 1
    capped = args.per_slot is not None or (trained is not None and server.slot_tokens == trained)
    if server.slot_tokens is not None and not (capped and (args.ctx_size or args.per_slot)):
        n_ctx = server.slot_tokens if r.request.kv_unified else server.slot_tokens * streams
        per = "one stream the slots share" if r.request.kv_unified else f"x {streams} slots"
        detail = f"GET /props on port {server.port}: a slot's n_ctx {server.slot_tokens}, {per} ({SERVER_CONTEXT})"
    elif args.ctx_size is not None and args.ctx_size > 0:
        n_ctx, detail = args.ctx_size, f"its command line: -c {args.ctx_size}"
    elif args.ctx_size == 0 and trained:
        n_ctx, detail = trained, f"its command line: -c 0, the trained context {trained} ({COMMON_H})"
    elif args.per_slot is not None and args.per_slot > 0:
        n_ctx = args.per_slot * streams
        detail = f"its command line: --kv-unified-per-slot {args.per_slot} x {streams} slots ({SERVER_CPP})"
    else:
        return None
    return n_ctx, ResolvedSetting("allocatedTokens", SettingSource.RUNNING, detail)


@dataclass(frozen=True)
class Resolution:
    """A request with every setting the profile gives filled in, where each came from, and the total context:
    the profile's (with its source), or None where llama.cpp's fitter picks it (or the request names it)."""

    request: WorkloadRequest
    profile: Profile
    sources: Mapping[str, ResolvedSetting]
    context: tuple[int, ResolvedSetting] | None
    fit: bool  # llama.cpp's fitter picks n_ctx (llama-server without -c)


def resolve_profile(request: WorkloadRequest, facts: LaunchFacts, subject: Subject) -> Resolution:
    """The settings `request.profile` gives where the request names none; `custom` (and none) gives none."""
    profile = PROFILE_NAMES.get(request.profile or Profile.CUSTOM, Profile.CUSTOM)
    r = _Resolving(request)
    context = None
    if profile is Profile.OLLAMA:
        embedding = subject.layout is not None and subject.layout.pooling_named
        if embedding:  # NewLlamaServerRunner: a pooling_type key makes an embedding model, launched with --embedding
            r.set("embeddings", True, SettingSource.PROFILE, f"{OLLAMA_LAUNCH}: the file names a pooling type")
        if embedding or subject.architecture in OLLAMA_ONE_SLOT:
            why = "an embedding model" if embedding else f"{subject.architecture}, not safe with num_parallel > 1"
            r.set("streams", 1, SettingSource.PROFILE, f"-np 1: {why} (Ollama server/sched.go processPending)")
        if facts.ollama_env:
            _ollama_environment(r, facts.ollama_env)
        r.defaults(OLLAMA)
        context = _ollama_context(r, facts, subject.context_limit)
        _ollama_batch(r, context[0], subject, facts, embedding)
    elif profile is Profile.LM_STUDIO:
        r.defaults(LM_STUDIO)
        n_ctx = min(LM_STUDIO_CONTEXT, subject.context_limit or LM_STUDIO_CONTEXT)
        context = n_ctx, ResolvedSetting("allocatedTokens", SettingSource.PROFILE, f"{LM_STUDIO_DOCS}: Context Length")
    elif profile is Profile.LLAMA_SERVER:
        r.defaults(LLAMA_SERVER)
    elif profile is Profile.RUNNING and facts.running is not None:
        _running_settings(r, facts.running)
        context = _running_context(r, facts.running, subject.context_limit)
    elif profile is Profile.RUNNING:  # no server runs it: llama-server's defaults (the answer says so in a limit)
        r.defaults(LLAMA_SERVER)
    fit = profile in (Profile.LLAMA_SERVER, Profile.RUNNING) and context is None and request.allocated_tokens is None
    if request.allocated_tokens is not None:
        context = None
    return Resolution(r.request, profile, r.sources, context, fit)


def host_weights(subject: Subject) -> int | None:
    """The weights in host buffer types: the weights less what the CPU's extra buffer types hold (not host buffers,
    so llama.cpp's fitter leaves them out); None where either is unknown."""
    if subject.weights.bytes is None or subject.packed is None:
        return None
    return max(0, subject.weights.bytes - subject.packed[0])


def fitter_context(subject: Subject, workload: Workload, facts: LaunchFacts) -> tuple[int, ResolvedSetting] | None:
    """The total context llama-server's fitter chooses on a host without GPUs (common/fit.cpp), from the bytes the
    host buffers would hold (the compute buffer's replayed size where the graph is rebuilt, else its floor);
    None where the trained context is unknown."""
    train, host_total = subject.context_limit, facts.host_total
    if train is None:
        return None
    n_streams = 1 if workload.kv_unified else max(1, workload.streams)
    if facts.gpu_total:
        detail = (
            "llama.cpp's fitter (common/fit.cpp) starts from the trained context; with GPUs it fits per device"
            " (estimator/fit_placement.py), which needs the model's tensors and graph: the context it starts from"
        )
        return train * n_streams, ResolvedSetting("allocatedTokens", SettingSource.FITTER, detail)
    # under draft-mtp the fitter's model loads the NextN layers' tensors (load_mtp) and host_projection adds the MTP
    # draft context it fits beside (common_fit_extra_model)
    weights = host_weights(with_mtp(subject, workload))
    projection = host_projection(subject, workload, weights) if weights is not None else None
    if projection is None or host_total is None:
        why = "the host's memory is unknown" if host_total is None else "the compute buffer is not derived"
        if host_total is not None and workload.multi_token_prediction:
            why = "the compute buffer or the MTP draft context beside it (common_fit_extra_model) is not derived"
        detail = f"llama.cpp's fitter (common/fit.cpp) starts from the trained context; {why}, so it is kept"
        return train * n_streams, ResolvedSetting("allocatedTokens", SettingSource.FITTER, detail)
    outcome: FitOutcome = fitted_context(train, workload.streams, workload.kv_unified, projection, host_total)
    detail = f"llama.cpp's fitter (common/fit.cpp) on {host_total / GIB:.1f} GiB of host memory: {outcome.why}"
    if not outcome.fitted:
        detail += "; the fit fails and llama-server loads at that context"
    return outcome.n_ctx, ResolvedSetting("allocatedTokens", SettingSource.FITTER, detail)


def resolved_workload(
    request: WorkloadRequest, subject: Subject, facts: LaunchFacts = NO_FACTS, variant: CpuVariant | None = None
) -> Workload:
    """The workload an answer is about: the request, the profile's settings where it names none (the fitter's
    context for llama-server), memfit's defaults for the rest, and where each setting came from; on GPUs (`facts`)
    with the CPU backend of `variant`, the placement llama.cpp's fitter chooses for cpuOffload (-ngl auto) and
    llama-server's context, per device."""
    resolution = resolve_profile(request, facts, subject)
    base = resolve_workload(resolution.request, subject.context_limit)
    if resolution.profile is Profile.CUSTOM:
        return _on_gpus(resolution.request, subject, base, facts, variant, False)
    sources = {s.setting: s for s in base.sources} | dict(resolution.sources)
    context = resolution.context
    if resolution.fit and input_refusal(base) is None:  # a refused request (0 streams) has nothing to fit
        context = fitter_context(subject, base, facts)
    workload = base
    if context is not None:
        n_ctx, source = context
        # memfit counts the context as tokens x streams; n_ctx // streams pads to llama.cpp's cells (256 | n_ctx)
        # (streams the request names below 1 are refused after; the split must not divide by them first)
        per_stream = max(1, n_ctx // max(1, base.streams))
        workload = replace(base, allocated_tokens=per_stream, context_source=ContextSource.LAUNCHER)
        sources["allocatedTokens"] = source
    ordered = tuple(sources.get(wire, ResolvedSetting(wire, SettingSource.DEFAULT)) for _, wire in SETTINGS)
    workload = _on_gpus(resolution.request, subject, replace(workload, sources=ordered), facts, variant, resolution.fit)
    slot = workload.n_ctx if workload.kv_unified else workload.allocated_tokens
    if subject.context_limit:  # server_context: the slot context is capped to the trained one
        slot = min(slot, subject.context_limit)
    return replace(workload, slot_tokens=slot)


def _on_gpus(
    request: WorkloadRequest,
    subject: Subject,
    workload: Workload,
    facts: LaunchFacts,
    variant: CpuVariant | None,
    choose_context: bool,
) -> Workload:
    """The fitter's placement (cpuOffload) and context (`choose_context`) on the GPUs, where they are read and
    memfit forecasts the fitter's candidates; else the workload as it is (a refused one too: 0 streams, say)."""
    if not facts.gpus or variant is None or not (choose_context or workload.mode == Mode.CPU_OFFLOAD):
        return workload
    if input_refusal(workload) is not None:  # llama.cpp makes no context to place
        return workload
    fit = predicted_fit(request, subject, workload, facts.gpus, variant, choose_context)
    return workload if fit is None else fitted_workload(workload, fit, choose_context)
