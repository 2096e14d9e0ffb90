"""The words of the contract, named once. Every string memfit puts in an answer comes from here."""

from enum import StrEnum


class Component(StrEnum):
    WEIGHTS = "weights"
    KV_CACHE = "kvCache"
    RECURRENT_STATE = "recurrentState"
    WORKSPACE = "workspace"
    COMPANIONS = "companions"
    PACKED_WEIGHTS = "packedWeights"  # a mapped file's weights the CPU's extra buffer types copy (anonymous)
    PROMPT_CACHE = "promptCache"  # llama-server's saved prompt states, after load
    CONTEXT_CHECKPOINTS = "contextCheckpoints"  # llama-server's checkpoints of each slot, after load


class Residency(StrEnum):
    """How a part holds the host's memory."""

    HARD = "hard"  # allocated at load, anonymous or locked: not reclaimable without swap
    SOFT = "soft"  # a mapped model file's page cache: reclaimable, read again as the model runs
    GROWS = "grows"  # allocated after load as requests come, from `bytes` up to its ceiling


class Basis(StrEnum):
    MEASURED_ARTIFACT = "measuredArtifact"
    DERIVED_LAYOUT = "derivedLayout"
    PARAMETER_PROXY = "parameterProxy"
    NOT_APPLICABLE = "notApplicable"
    UNKNOWN = "unknown"


# Strongest first; `notApplicable` parts do not weaken an estimate.
BASIS_STRENGTH = (Basis.MEASURED_ARTIFACT, Basis.DERIVED_LAYOUT, Basis.PARAMETER_PROXY, Basis.UNKNOWN)


class Verdict(StrEnum):
    GOOD = "good"
    TIGHT = "tight"
    OVERSIZE = "oversize"
    UNKNOWN = "unknown"


class Refusal(StrEnum):
    NONE = "none"
    NON_FINITE_INPUT = "nonFiniteInput"
    NON_POSITIVE_CONTEXT = "nonPositiveContext"
    NON_POSITIVE_STREAMS = "nonPositiveStreams"
    CONTEXT_EXCEEDS_MODEL_LIMIT = "contextExceedsModelLimit"


class Limit(StrEnum):
    ARTIFACT_NOT_ON_DISK = "artifactNotOnDisk"
    ARTIFACT_UNREADABLE = "artifactUnreadable"
    WORKLOAD_UNSUPPORTED = "workloadUnsupported"
    LAYOUT_UNPUBLISHED = "layoutUnpublished"
    LAYOUT_NOT_UNIFORM = "layoutNotUniform"
    HISTORY_IDENTITY_INSUFFICIENT = "historyIdentityInsufficient"
    WORKSPACE_UNMEASURED = "workspaceUnmeasured"
    PREPARED_COUNT_UNAVAILABLE = "preparedCountUnavailable"
    HOST_TELEMETRY_UNAVAILABLE = "hostTelemetryUnavailable"
    GPU_TELEMETRY_UNAVAILABLE = "gpuTelemetryUnavailable"
    RUNNING_SERVER_UNREAD = "runningServerUnread"  # the running profile read less than the server's settings


class BudgetBasis(StrEnum):
    HOST_AVAILABLE = "hostAvailable"
    HOST_TOTAL = "hostTotal"
    UNKNOWN = "unknown"


class ContextSource(StrEnum):
    DOCUMENTED_DEFAULT = "documentedDefault"
    REQUESTED = "requested"
    LAUNCHER = "launcher"  # the profile's launcher chose it (its default, its environment, llama.cpp's fitter)


class Profile(StrEnum):
    """Whose launch settings a workload takes where the request names none."""

    CUSTOM = "custom"  # only what the request says, memfit's defaults for the rest
    LLAMA_SERVER = "llamaServer"
    OLLAMA = "ollama"
    LM_STUDIO = "lmStudio"
    RUNNING = "running"  # as the llama-server running on this host with the model loaded was started


class SettingSource(StrEnum):
    REQUEST = "request"  # the request named it
    DEFAULT = "default"  # memfit's documented default
    PROFILE = "profile"  # the profile's launcher's default
    ENVIRONMENT = "environment"  # the launcher's environment, as its running server was started with
    FITTER = "fitter"  # llama.cpp's --fit chose it
    RUNNING = "running"  # the running llama-server: what it answered on GET /props, or its command line names


class LoadMode(StrEnum):
    """llama.cpp's --load-mode (llama_load_mode)."""

    AUTO = "auto"  # mmap unless a device lacks mmap support
    NONE = "none"
    MMAP = "mmap"
    MLOCK = "mlock"
    MMAP_MLOCK = "mmap+mlock"
    DIRECT_IO = "dio"


class Mode(StrEnum):
    FULL_GPU = "fullGpu"
    CPU_OFFLOAD = "cpuOffload"


class FlashAttention(StrEnum):
    AUTO = "auto"
    ON = "on"
    OFF = "off"


class ModelSource(StrEnum):
    LOCAL = "local"
    HUB = "hub"
    CATALOG = "catalog"


class ObservationFlag(StrEnum):
    KV_CONTRADICTS_DERIVED = "kvContradictsDerived"


class ProblemType(StrEnum):
    INVALID_REQUEST = "invalidRequest"
    UNAUTHORIZED = "unauthorized"
    NOT_FOUND = "notFound"
    CANCELLED = "cancelled"
    FAILED = "failed"


INT64_MAX = 2**63 - 1
