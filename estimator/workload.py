"""The workload a request asks about: defaults, the context cap, and the refusals that stop an estimate."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypeVar

from memfit.estimator.context import DEFAULT_N_UBATCH
from memfit.estimator.cpu_variant import AUTO
from memfit.estimator.kv_cache import CacheType, cache_type
from memfit.estimator.vocabulary import (
    INT64_MAX,
    ContextSource,
    FlashAttention,
    LoadMode,
    Mode,
    Profile,
    Refusal,
    SettingSource,
)

T = TypeVar("T")
DEFAULT_ALLOCATED_TOKENS = 4096
DEFAULT_STREAMS = 1
DEFAULT_ELEMENT_BYTES = 2  # f16
DEFAULT_MODE = Mode.FULL_GPU
# llama.cpp's own defaults for the settings launchers pass it (llama_context_default_params)
DEFAULT_FLASH_ATTENTION = FlashAttention.AUTO
FLASH_ATTENTION_VALUES = frozenset(f.value for f in FlashAttention)  # the settings memfit knows
DEFAULT_UBATCH_TOKENS = DEFAULT_N_UBATCH
DEFAULT_KV_UNIFIED = False
DEFAULT_CPU_VARIANT = AUTO  # the variant ggml's loader picks on this host
# common/common.h's defaults for the placement flags: -ngl (here: what the mode means), --n-cpu-moe 0, no -ot, no
# -ts, -sm layer, -mg 0, KV offload on
ALL_LAYERS = "all"  # -ngl all
DEFAULT_SPLIT_MODE = "layer"
# memfit's own answer (`custom`): llama.cpp's library defaults, the weights loaded into memory, nothing that grows
DEFAULT_PROFILE = Profile.CUSTOM
DEFAULT_SWA_FULL = False  # common_params::swa_full (llama-server's; the library's own default is true)
DEFAULT_LOAD_MODE = LoadMode.NONE  # the weights read into allocated buffers, as memfit has always answered
DEFAULT_CACHE_RAM_MIB = 0  # no prompt cache
DEFAULT_CONTEXT_CHECKPOINTS = 0  # no context checkpoints
DEFAULT_ROLLBACK_SNAPSHOTS = 0  # llama_context_default_params: n_rs_seq = 0 (no speculative rollback)
DEFAULT_MULTI_TOKEN_PREDICTION = False  # llama_model_default_params: load_mtp false (no --spec-type draft-mtp)
DEFAULT_DRAFT_TOKENS = 0  # common_params_speculative::types = {NONE}: llama-server verifies no draft
# common_params_speculative_draft::n_max (common/common.h): the draft length of --spec-type draft-mtp, which always
# drafts, where the request names none
MTP_DRAFT_TOKENS = 3
# common_params_speculative_draft (common/common.h): the MTP draft context's cache types (cache_type_k/v f16) and its
# sampling on the backend (backend_sampling = true)
DEFAULT_DRAFT_ELEMENT_BYTES = DEFAULT_ELEMENT_BYTES
DEFAULT_DRAFT_BACKEND_SAMPLING = True
DEFAULT_EMBEDDINGS = False  # common_params::embedding = false (common/common.h): no --embedding, --rerank
# common_params::pooling_type = LLAMA_POOLING_TYPE_UNSPECIFIED (common/common.h): the model's own (None)
DEFAULT_POOLING: str | None = None
LLAMA_MAX_SEQ = 256  # llama-cparams.h: llama_context's constructor refuses more sequences
# llama_init_from_model: "flash_attn is not compatible with Grok - forcing off", whatever was asked
FLASH_ATTENTION_FORCED_OFF = frozenset({"grok"})
# plm.cpp hands build_attn its V as [n_head * n_embd_head_v, n_tokens]: with flash attention llama_kv_cache::cpy_v
# takes that as one row of every token's values, which its ggml_set_rows (over several streams, the ggml_reshape_2d
# before it) asserts on unless the ubatch llama.cpp reserves is one token
FLASH_ATTENTION_ABORTS = frozenset({"plm"})


@dataclass(frozen=True)
class WorkloadRequest:
    """What a caller asked for; None means "the documented default"."""

    allocated_tokens: int | None = None
    streams: int | None = None
    key_element_bytes: int | None = None
    value_element_bytes: int | None = None
    mode: str | None = None
    flash_attention: str | None = None
    ubatch_tokens: int | None = None
    kv_unified: bool | None = None
    cpu_variant: str | None = None
    gpu_layers: int | str | None = None  # a count, or ALL_LAYERS
    n_cpu_moe: int | None = None
    tensor_overrides: tuple[str, ...] | None = None  # PATTERN=BUFFER_TYPE, as -ot writes them
    tensor_split: tuple[float, ...] | None = None
    split_mode: str | None = None
    main_gpu: int | None = None
    kv_offload: bool | None = None
    profile: str | None = None
    swa_full: bool | None = None
    load_mode: str | None = None
    cache_ram_mib: int | None = None
    context_checkpoints: int | None = None
    rollback_snapshots: int | None = None
    multi_token_prediction: bool | None = None
    draft_tokens: int | None = None
    embeddings: bool | None = None
    pooling: str | None = None  # --pooling's name (none, mean, cls, last, rank)
    draft_key_element_bytes: int | None = None
    draft_value_element_bytes: int | None = None
    draft_backend_sampling: bool | None = None


@dataclass(frozen=True)
class PlacementFlags:
    """llama.cpp's placement flags as a request resolved them (common_params' defaults filled in); gpu_layers None:
    an unknown mode named no count."""

    gpu_layers: int | str | None = ALL_LAYERS
    n_cpu_moe: int = 0
    tensor_overrides: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()
    split_mode: str = DEFAULT_SPLIT_MODE
    main_gpu: int = 0
    kv_offload: bool = True


def mode_gpu_layers(mode: str) -> int | str | None:
    """What a mode means as -ngl: fullGpu every layer and the output layer (-ngl all); cpuOffload is -ngl auto, the
    fitter's choice (estimator/fit_placement.py, on the GPUs read), answered as -ngl 0 (everything on the host but
    the compute the GPUs take) where it is not predicted; an unknown mode names none."""
    meaning: dict[str, int | str] = {Mode.FULL_GPU.value: ALL_LAYERS, Mode.CPU_OFFLOAD.value: 0}
    return meaning.get(mode)


@dataclass(frozen=True)
class ResolvedSetting:
    """Where one setting of an answer's workload came from, and the rule it follows."""

    setting: str  # the workload field's name on the wire (allocatedTokens, streams, ...)
    source: SettingSource
    detail: str = ""


# the request fields a workload's settings come from, by their names on the wire
SETTINGS = (
    ("allocated_tokens", "allocatedTokens"),
    ("streams", "streams"),
    ("key_element_bytes", "keyElementBytes"),
    ("value_element_bytes", "valueElementBytes"),
    ("mode", "mode"),
    ("flash_attention", "flashAttention"),
    ("ubatch_tokens", "ubatchTokens"),
    ("kv_unified", "kvUnified"),
    ("cpu_variant", "cpuVariant"),
    ("swa_full", "swaFull"),
    ("load_mode", "loadMode"),
    ("cache_ram_mib", "cacheRamMib"),
    ("context_checkpoints", "contextCheckpoints"),
    ("rollback_snapshots", "rollbackSnapshots"),
    ("multi_token_prediction", "multiTokenPrediction"),
    ("draft_tokens", "draftTokens"),
    ("embeddings", "embeddings"),
    ("pooling", "pooling"),
    ("draft_key_element_bytes", "draftKeyElementBytes"),
    ("draft_value_element_bytes", "draftValueElementBytes"),
    ("draft_backend_sampling", "draftBackendSampling"),
    ("gpu_layers", "gpuLayers"),
    ("tensor_split", "tensorSplit"),
    ("tensor_overrides", "tensorOverrides"),
)


# the profiles whose launcher runs llama-server (profiles.py): itself (and the one running here), Ollama's
# startLlamaServer, LM Studio's llama.cpp engine as memfit models it (llama-server's defaults past its own)
LLAMA_SERVER_PROFILES = frozenset({Profile.LLAMA_SERVER, Profile.RUNNING, Profile.OLLAMA, Profile.LM_STUDIO})


@dataclass(frozen=True)
class Workload:
    allocated_tokens: int  # KV capacity per stream
    context_source: ContextSource
    streams: int
    key_element_bytes: int
    value_element_bytes: int
    mode: str
    flash_attention: str = DEFAULT_FLASH_ATTENTION  # as requested: an unknown value is kept
    ubatch_tokens: int = DEFAULT_UBATCH_TOKENS  # as requested, before llama.cpp's cap
    kv_unified: bool = DEFAULT_KV_UNIFIED
    cpu_variant: str = DEFAULT_CPU_VARIANT  # as requested, until the answer names the variant it resolved to
    placement: PlacementFlags = field(default_factory=PlacementFlags)
    profile: str = DEFAULT_PROFILE
    swa_full: bool = DEFAULT_SWA_FULL
    load_mode: str = DEFAULT_LOAD_MODE
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB  # llama-server's --cache-ram: -1 no limit, 0 no prompt cache
    context_checkpoints: int = DEFAULT_CONTEXT_CHECKPOINTS  # llama-server's --ctx-checkpoints, per slot
    slot_tokens: int | None = None  # the context one slot may use (llama-server's n_ctx_slot); None: per stream
    sources: tuple[ResolvedSetting, ...] = ()  # where each setting came from
    rollback_snapshots: int = DEFAULT_ROLLBACK_SNAPSHOTS  # llama.cpp's n_rs_seq, as asked (before the arch's clamp)
    # llama-server's --spec-type draft-mtp: the model loaded with its NextN/MTP layers (load_mtp) and the target
    # context's nextn embeddings output (estimator/mtp.py)
    multi_token_prediction: bool = DEFAULT_MULTI_TOKEN_PREDICTION
    # the draft tokens each slot's verification batch carries under llama-server's speculative decoding (its
    # logits rows in the output buffer: context.output_rows)
    draft_tokens: int = DEFAULT_DRAFT_TOKENS
    # llama-server serves embeddings (--embedding, --rerank): cparams.embeddings, every token of a decode an output
    # with its embeddings beside its logits, and llama-server's output limit lifted to its n_batch (the ubatch)
    embeddings: bool = DEFAULT_EMBEDDINGS
    # llama-server's --pooling (--rerank: rank), cparams.pooling_type; None: unspecified, the model's own. Other
    # than none it lifts llama-server's output limit to n_batch even without embeddings (context.pooled_limit)
    pooling: str | None = DEFAULT_POOLING
    # llama-server's MTP draft context's own settings under multi_token_prediction (estimator/mtp.py): its cache
    # types (--spec-draft-type-k/-v) and its sampling on the backend (--spec-draft-backend-sampling)
    draft_key_element_bytes: int = DEFAULT_DRAFT_ELEMENT_BYTES
    draft_value_element_bytes: int = DEFAULT_DRAFT_ELEMENT_BYTES
    draft_backend_sampling: bool = DEFAULT_DRAFT_BACKEND_SAMPLING

    @property
    def under_llama_server(self) -> bool:
        """Whether the profile launches llama-server (LLAMA_SERVER_PROFILES), which caps the reserved graph's
        outputs at its output limit (context.server_outputs_max); custom is a plain llama.cpp context."""
        return self.profile in LLAMA_SERVER_PROFILES

    @property
    def n_ctx(self) -> int:
        """The total context llama.cpp is asked for: tokens per stream times the streams."""
        return self.allocated_tokens * self.streams

    @property
    def knobs_at_defaults(self) -> bool:
        """Whether the runtime settings are llama.cpp's defaults (what the measurement history records)."""
        return (
            self.flash_attention,
            self.ubatch_tokens,
            self.kv_unified,
            self.swa_full,
            self.rollback_snapshots,
            self.multi_token_prediction,
            self.draft_tokens,
            self.embeddings,
            self.pooling,
            self.draft_key_element_bytes,
            self.draft_value_element_bytes,
            self.draft_backend_sampling,
        ) == (
            DEFAULT_FLASH_ATTENTION,
            DEFAULT_UBATCH_TOKENS,
            DEFAULT_KV_UNIFIED,
            DEFAULT_SWA_FULL,
            DEFAULT_ROLLBACK_SNAPSHOTS,
            DEFAULT_MULTI_TOKEN_PREDICTION,
            DEFAULT_DRAFT_TOKENS,
            DEFAULT_EMBEDDINGS,
            DEFAULT_POOLING,
            DEFAULT_DRAFT_ELEMENT_BYTES,
            DEFAULT_DRAFT_ELEMENT_BYTES,
            DEFAULT_DRAFT_BACKEND_SAMPLING,
        )

    @property
    def flash_attention_on(self) -> bool | None:
        """Whether llama.cpp runs with flash attention: `auto` resolves to on (its CPU backend); None when the
        value is not one memfit knows."""
        if self.flash_attention not in FLASH_ATTENTION_VALUES:
            return None
        return self.flash_attention != FlashAttention.OFF

    def clamped(self) -> Workload:
        """The same workload with every number held inside int64, for echoing a refused request."""
        clamp = lambda v: max(-INT64_MAX - 1, min(INT64_MAX, v))  # noqa: E731
        return replace(
            self,
            allocated_tokens=clamp(self.allocated_tokens),
            streams=clamp(self.streams),
            key_element_bytes=clamp(self.key_element_bytes),
            value_element_bytes=clamp(self.value_element_bytes),
            ubatch_tokens=clamp(self.ubatch_tokens),
            cache_ram_mib=clamp(self.cache_ram_mib),
            context_checkpoints=clamp(self.context_checkpoints),
            slot_tokens=None if self.slot_tokens is None else clamp(self.slot_tokens),
            rollback_snapshots=clamp(self.rollback_snapshots),
            draft_tokens=clamp(self.draft_tokens),
            draft_key_element_bytes=clamp(self.draft_key_element_bytes),
            draft_value_element_bytes=clamp(self.draft_value_element_bytes),
        )


def given(value: T | None, default: T) -> T:
    """A request's value, or the default where it names none."""
    return default if value is None else value


def resolve_workload(request: WorkloadRequest, context_limit: int | None) -> Workload:
    """Fill in the documented defaults; the default capacity (never a requested one) is capped to the model's limit."""
    if request.allocated_tokens is None:
        tokens = DEFAULT_ALLOCATED_TOKENS
        if context_limit is not None and context_limit > 0:
            tokens = min(tokens, context_limit)
        source = ContextSource.DOCUMENTED_DEFAULT
    else:
        tokens, source = request.allocated_tokens, ContextSource.REQUESTED
    r, mode = request, given(request.mode, DEFAULT_MODE)
    return Workload(
        allocated_tokens=tokens,
        context_source=source,
        streams=given(r.streams, DEFAULT_STREAMS),
        key_element_bytes=given(r.key_element_bytes, DEFAULT_ELEMENT_BYTES),
        value_element_bytes=given(r.value_element_bytes, DEFAULT_ELEMENT_BYTES),
        mode=mode,
        flash_attention=given(r.flash_attention, DEFAULT_FLASH_ATTENTION),
        ubatch_tokens=given(r.ubatch_tokens, DEFAULT_UBATCH_TOKENS),
        kv_unified=given(r.kv_unified, DEFAULT_KV_UNIFIED),
        cpu_variant=given(r.cpu_variant, DEFAULT_CPU_VARIANT),
        profile=given(r.profile, DEFAULT_PROFILE),
        swa_full=given(r.swa_full, DEFAULT_SWA_FULL),
        load_mode=given(r.load_mode, DEFAULT_LOAD_MODE),
        cache_ram_mib=given(r.cache_ram_mib, DEFAULT_CACHE_RAM_MIB),
        context_checkpoints=given(r.context_checkpoints, DEFAULT_CONTEXT_CHECKPOINTS),
        rollback_snapshots=given(r.rollback_snapshots, DEFAULT_ROLLBACK_SNAPSHOTS),
        multi_token_prediction=given(r.multi_token_prediction, DEFAULT_MULTI_TOKEN_PREDICTION),
        draft_tokens=given(r.draft_tokens, default_draft_tokens(r)),
        embeddings=given(r.embeddings, DEFAULT_EMBEDDINGS),
        pooling=given(r.pooling, DEFAULT_POOLING),
        draft_key_element_bytes=given(r.draft_key_element_bytes, DEFAULT_DRAFT_ELEMENT_BYTES),
        draft_value_element_bytes=given(r.draft_value_element_bytes, DEFAULT_DRAFT_ELEMENT_BYTES),
        draft_backend_sampling=given(r.draft_backend_sampling, DEFAULT_DRAFT_BACKEND_SAMPLING),
        sources=tuple(
            ResolvedSetting(
                wire, SettingSource.REQUEST if getattr(request, name) is not None else SettingSource.DEFAULT
            )
            for name, wire in SETTINGS
        ),
        placement=resolve_placement(request, mode),
    )


def resolve_placement(request: WorkloadRequest, mode: str) -> PlacementFlags:
    """The placement flags, each as requested or llama.cpp's default; -ngl from the mode when not requested."""
    d, r = PlacementFlags(), request
    return PlacementFlags(
        gpu_layers=given(r.gpu_layers, mode_gpu_layers(mode)),
        n_cpu_moe=given(r.n_cpu_moe, d.n_cpu_moe),
        tensor_overrides=given(r.tensor_overrides, d.tensor_overrides),
        tensor_split=given(r.tensor_split, d.tensor_split),
        split_mode=given(r.split_mode, d.split_mode),
        main_gpu=given(r.main_gpu, d.main_gpu),
        kv_offload=given(r.kv_offload, d.kv_offload),
    )


def default_draft_tokens(request: WorkloadRequest) -> int:
    """The draft tokens where a request names none: under multiTokenPrediction llama-server's draft length
    (common_params_speculative_draft::n_max), since draft-mtp always drafts; else none."""
    return MTP_DRAFT_TOKENS if request.multi_token_prediction else DEFAULT_DRAFT_TOKENS


def input_refusal(workload: Workload) -> Refusal | None:
    """The refusals the inputs alone decide, in the documented order.

    `nonFiniteInput` for a derived byte count and `contextExceedsModelLimit` need the model; the
    estimate checks those around this one, keeping the order nonFinite, nonPositive*, exceeds.
    """
    w = workload
    element_bytes = (w.key_element_bytes, w.value_element_bytes, w.draft_key_element_bytes, w.draft_value_element_bytes)
    numbers = (w.allocated_tokens, w.streams, *element_bytes)
    if any(not -INT64_MAX - 1 <= n <= INT64_MAX for n in numbers):
        return Refusal.NON_FINITE_INPUT
    if workload.allocated_tokens <= 0:
        return Refusal.NON_POSITIVE_CONTEXT
    if workload.streams <= 0:
        return Refusal.NON_POSITIVE_STREAMS
    return None


def flash_attention_for(workload: Workload, architecture: str) -> bool | None:
    """Whether llama.cpp runs this architecture with flash attention under this workload (None: a value memfit
    does not know)."""
    on = workload.flash_attention_on
    return False if on is not None and architecture in FLASH_ATTENTION_FORCED_OFF else on


def refused_setting(workload: Workload, architecture: str) -> str | None:
    """Why llama.cpp refuses to create a context with these settings for any model of this architecture, or None
    (llama_init_from_model and llama_context's constructor; the model's own cache-type checks are
    kv_cache.cache_type_problem). The weights are loaded before the context is refused."""
    if workload.streams > LLAMA_MAX_SEQ:
        return f"llama.cpp refuses {workload.streams} sequences: n_seq_max must be <= {LLAMA_MAX_SEQ} (llama_context)"
    if flash_attention_aborts(workload, architecture):
        return (
            f"llama.cpp aborts building {architecture}'s graph with flash attention on (auto turns it on): its V"
            " reaches the cache flattened over the ubatch's tokens (GGML_ASSERT in llama_kv_cache::cpy_v);"
            " -fa off runs it"
        )
    return quantized_v_refusal(cache_type(workload.value_element_bytes), workload, architecture)


def flash_attention_aborts(workload: Workload, architecture: str) -> bool:
    """Whether llama.cpp's graph for this architecture aborts under the workload's flash attention: on, and a reserved
    ubatch of more than one token (the prompt's min(n_ctx, n_ubatch), rounded up to a multiple of the sequences;
    auto's probe reserves one token a sequence)."""
    if architecture not in FLASH_ATTENTION_ABORTS or not flash_attention_for(workload, architecture):
        return False
    return workload.streams > 1 or min(workload.n_ctx, workload.ubatch_tokens) > 1


def quantized_v_refusal(v_type: CacheType, workload: Workload, architecture: str) -> str | None:
    """llama_init_from_model's "quantized V cache requires flash_attn to be enabled": a V cache of `v_type` under
    the workload's flash attention, or None."""
    if not v_type.quantized or flash_attention_for(workload, architecture) is not False:
        return None
    off = (
        f"flash attention, which llama.cpp forces off for {architecture}"
        if architecture in FLASH_ATTENTION_FORCED_OFF
        else "flash attention off"
    )
    return f"llama.cpp refuses a {v_type.name} V cache with {off}: quantized V cache requires flash_attn"


def exceeds_limit(workload: Workload, context_limit: int | None) -> bool:
    return context_limit is not None and workload.allocated_tokens > context_limit
