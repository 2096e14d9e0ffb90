"""A running llama-server's settings: what its command line and its LLAMA_ARG_* variables name (common/arg.cpp's
options) and what it answers on GET /props and GET /slots (tools/server/server-context.cpp), as the running profile
reads them.

Only the options that change memory are read, as the pinned llama.cpp parses them (common/arg.cpp
common_params_parse_ex): the environment first, in the order arg.cpp declares the options (a LLAMA_ARG_NO_ variable
turns a flag with a negative form off), then the command line, which overrides it (a `--` flag's underscores read as
dashes, a flag named twice keeps its last value, a value is the next argument). A value memfit cannot express (a
cache type other than f32, f16 and q8_0, a number that is not one) is not taken: the flag or variable is listed in
`unread` and the setting stays llama-server's default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from memfit.estimator.kv_cache import ELEMENT_BYTES_BY_NAME
from memfit.estimator.vocabulary import FlashAttention, LoadMode

ARG_CPP = "llama.cpp common/arg.cpp"
INT32_MAX = 2**31 - 1
# common/arg.cpp common_arg_utils::is_truthy, is_falsey and is_autoy
TRUTHY, FALSEY, AUTOY = ("on", "enabled", "true", "1"), ("off", "disabled", "false", "0"), ("auto", "-1")
# common/speculative.cpp's speculative type names; common_params_speculative::need_n_rs_seq (common/common.h): under
# any of ROLLBACK_SPEC_TYPES llama-server asks n_rs_seq = the draft length (common_context_params_to_llama)
MTP_SPEC_TYPE = "draft-mtp"  # common_model_params_to_llama: load_mtp where the types name it
ROLLBACK_SPEC_TYPES = frozenset({MTP_SPEC_TYPE, "draft-eagle3", "draft-dflash", "draft-dspark"})
SPEC_TYPES = ROLLBACK_SPEC_TYPES | {"none", "draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v"}
SPEC_TYPES |= {"ngram-mod", "ngram-cache"}
DEFAULT_DRAFT_N_MAX = 3  # common_params_speculative_draft::n_max
# common/speculative.cpp common_speculative_n_max: each type's draft length, as the option (a ServerArgs target)
# that sets it and its default (common/common.h); the draft types' is --spec-draft-n-max
DRAFT_TYPES = frozenset({"draft-simple", "draft-eagle3", MTP_SPEC_TYPE, "draft-dflash", "draft-dspark"})
NGRAM_DRAFTS = {
    "ngram-simple": ("ngram_simple_m", 48),  # common_params_speculative_ngram_map::size_m
    "ngram-map-k": ("ngram_map_k_m", 48),
    "ngram-map-k4v": ("ngram_map_k4v_m", 48),
    "ngram-mod": ("ngram_mod_max", 64),  # common_params_speculative_ngram_mod::n_max
}
NGRAM_CACHE_DRAFT = 8  # common_speculative_n_max: ngram-cache drafts at most 8
MAX_ROLLBACK_SNAPSHOTS = 256  # the contract's maximum of rollbackSnapshots: a longer draft is not read
MAX_DRAFT_TOKENS = 256  # the contract's maximum of draftTokens
POOLING_TYPES = frozenset({"none", "mean", "cls", "last", "rank"})  # --pooling's values (another stops the server)
FLASH_ATTENTION = (
    dict.fromkeys(TRUTHY, FlashAttention.ON)
    | dict.fromkeys(FALSEY, FlashAttention.OFF)
    | dict.fromkeys(AUTOY, FlashAttention.AUTO)
)


@dataclass(frozen=True)
class Named:
    """A setting the server's command line or environment names: its value, and what named it."""

    value: object
    detail: str


@dataclass(frozen=True)
class ServerArgs:
    """What a llama-server's command line and environment name: the settings on the wire (by their wire names), and
    the options that size its context or say where it listens and what it loaded."""

    named: Mapping[str, Named] = field(default_factory=dict)
    ctx_size: int | None = None  # -c (0: the trained context)
    parallel: int | None = None  # -np (-1: auto)
    per_slot: int | None = None  # --kv-unified-per-slot
    model: str | None = None  # -m
    port: int | None = None  # --port
    host: str | None = None  # --host
    unread: tuple[str, ...] = ()  # flags or variables whose value memfit cannot express


def _int(text: str) -> int | None:
    """std::stoi's reading of a plain decimal (memfit takes nothing looser); None for any other text."""
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or not digits.isascii() or len(digits) > 10:
        return None
    value = int(text)
    return value if -INT32_MAX - 1 <= value <= INT32_MAX else None


def _positive(text: str) -> int | None:
    value = _int(text)
    return value if value is not None and value > 0 else None


def _spec_types(text: str) -> tuple[str, ...] | None:
    """--spec-type's comma-separated names (common_speculative_types_from_names: an unknown one stops the server)."""
    names = tuple(text.split(","))
    if not all(name in SPEC_TYPES for name in names):
        return None
    return ("none",) if "none" in names else names  # `none` anywhere in one list drops that list's others


def _load_mode(text: str) -> LoadMode | None:
    return next((m for m in LoadMode if m.value == text), None)


def _text(text: str) -> str:
    return text


def _pooling(text: str) -> str | None:
    return text if text in POOLING_TYPES else None


@dataclass(frozen=True)
class Option:
    """One of common/arg.cpp's options: its flags, its variable, what it sets (a wire setting, or a ServerArgs
    field), and either how its value reads or the values its flags without one set (on; off for its negative
    flags)."""

    flags: tuple[str, ...]
    env: str
    target: str
    read: Callable[[str], object | None] | None = None
    on: object = True
    off_flags: tuple[str, ...] = ()
    off: object = False
    appends: bool = False  # each value adds to the ones before (a list option), not replaces them


# In common/arg.cpp's order (the environment is applied in it): the options that change memory, and -m, --host,
# --port, and the speculative options that decide n_rs_seq
OPTIONS = (
    Option(("-c", "--ctx-size"), "LLAMA_ARG_CTX_SIZE", "ctx_size", _int),
    Option(("--kv-unified-per-slot",), "LLAMA_ARG_KV_UNIFIED_PER_SLOT", "per_slot", _int),
    Option(("-ub", "--ubatch-size"), "LLAMA_ARG_UBATCH", "ubatchTokens", _positive),
    Option(("--swa-full",), "LLAMA_ARG_SWA_FULL", "swaFull"),
    Option(
        ("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), "LLAMA_ARG_CTX_CHECKPOINTS", "contextCheckpoints", _int
    ),
    Option(("-cram", "--cache-ram"), "LLAMA_ARG_CACHE_RAM", "cacheRamMib", _int),
    Option(("-kvu", "--kv-unified"), "LLAMA_ARG_KV_UNIFIED", "kvUnified", off_flags=("-no-kvu", "--no-kv-unified")),
    Option(("-fa", "--flash-attn"), "LLAMA_ARG_FLASH_ATTN", "flashAttention", FLASH_ATTENTION.get),
    Option(("-ctk", "--cache-type-k"), "LLAMA_ARG_CACHE_TYPE_K", "keyElementBytes", ELEMENT_BYTES_BY_NAME.get),
    Option(("-ctv", "--cache-type-v"), "LLAMA_ARG_CACHE_TYPE_V", "valueElementBytes", ELEMENT_BYTES_BY_NAME.get),
    Option(("-np", "--parallel"), "LLAMA_ARG_N_PARALLEL", "parallel", _int),
    Option(("--mlock",), "LLAMA_ARG_MLOCK", "loadMode", on=LoadMode.MLOCK),  # deprecated for --load-mode
    Option(("--mmap",), "LLAMA_ARG_MMAP", "loadMode", on=LoadMode.MMAP, off_flags=("--no-mmap",), off=LoadMode.NONE),
    Option(
        ("-dio", "--direct-io"),
        "LLAMA_ARG_DIO",
        "loadMode",
        on=LoadMode.DIRECT_IO,
        off_flags=("-ndio", "--no-direct-io"),
        off=LoadMode.NONE,
    ),
    Option(("-lm", "--load-mode"), "LLAMA_ARG_LOAD_MODE", "loadMode", _load_mode),
    Option(("-m", "--model"), "LLAMA_ARG_MODEL", "model", _text),
    Option(("--host",), "LLAMA_ARG_HOST", "host", _text),
    Option(("--port",), "LLAMA_ARG_PORT", "port", _int),
    Option(
        ("--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"), "LLAMA_ARG_SPEC_DRAFT_HF_REPO", "draft_model", _text
    ),
    Option(
        ("--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"),
        "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K",
        "draftKeyElementBytes",
        ELEMENT_BYTES_BY_NAME.get,
    ),
    Option(
        ("--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"),
        "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V",
        "draftValueElementBytes",
        ELEMENT_BYTES_BY_NAME.get,
    ),
    Option(("--spec-draft-n-max",), "LLAMA_ARG_SPEC_DRAFT_N_MAX", "draft_max", _int),
    Option(
        ("--spec-draft-backend-sampling",),
        "LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING",
        "draftBackendSampling",
        off_flags=("--no-spec-draft-backend-sampling",),
    ),
    Option(("--spec-draft-model", "-md", "--model-draft"), "LLAMA_ARG_SPEC_DRAFT_MODEL", "draft_model", _text),
    Option(("--spec-type",), "LLAMA_ARG_SPEC_TYPE", "spec_types", _spec_types, appends=True),
    # the ngram types' draft lengths (no LLAMA_ARG_ variable)
    Option(("--spec-ngram-mod-n-max",), "", "ngram_mod_max", _int),
    Option(("--spec-ngram-simple-size-m",), "", "ngram_simple_m", _int),
    Option(("--spec-ngram-map-k-size-m",), "", "ngram_map_k_m", _int),
    Option(("--spec-ngram-map-k4v-size-m",), "", "ngram_map_k4v_m", _int),
    # what decides whether it serves embeddings (_embeddings); --pooling comes first in arg.cpp
    Option(("--pooling",), "LLAMA_ARG_POOLING", "pooling", _pooling),
    Option(("--embedding", "--embeddings"), "LLAMA_ARG_EMBEDDINGS", "embedding"),
    Option(("--rerank", "--reranking"), "LLAMA_ARG_RERANKING", "rerank"),
)
BY_FLAG = {flag: (option, True) for option in OPTIONS for flag in option.flags}
BY_FLAG |= {flag: (option, False) for option in OPTIONS for flag in option.off_flags}
FIELDS: tuple[str, ...] = ("ctx_size", "parallel", "per_slot", "model", "port", "host", "draft_model", "draft_max")
FIELDS += ("spec_types", *(target for target, _ in NGRAM_DRAFTS.values()), "pooling", "embedding", "rerank")


class _Reading:
    """The options read so far: the last value each target took, and what could not be read."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[object, str]] = {}
        self.unread: dict[str, str] = {}  # target -> the flag or variable whose value could not be read

    def take(self, option: Option, name: str, value: object | None, said: str) -> None:
        """The value `name` gives the option's target (the last one named wins, as in llama.cpp)."""
        if value is None:
            self.unread[option.target] = name
            return
        before = self.values.pop(option.target, None)  # re-inserted: the values in the order last named
        if option.appends and isinstance(before, tuple) and isinstance(before[0], tuple) and isinstance(value, tuple):
            value, said = before[0] + value, f"{before[1]}; {said}"
        self.values[option.target] = value, said
        self.unread.pop(option.target, None)

    def environment(self, env: Mapping[str, str]) -> None:
        """common_params_parse_ex's environment pass: a LLAMA_ARG_NO_ variable first, for a flag with a negative
        form; a switch's variable counts when truthy (a two-way switch's also when falsey)."""
        for option in OPTIONS:
            negative = option.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_") if option.off_flags else None
            if negative is not None and negative in env:
                self.take(option, negative, option.off, f"its environment: {negative} ({ARG_CPP})")
            elif option.env and option.env in env:
                self._variable(option, env[option.env])

    def _variable(self, option: Option, text: str) -> None:
        if option.read is not None:
            value = option.read(text)
        elif text in TRUTHY:
            value = option.on
        elif text in FALSEY and option.off_flags:
            value = option.off
        elif text in FALSEY:
            return  # a switch without a negative form, not truthy: nothing set
        else:
            value = None
        # a value is echoed only once read: it is then one memfit knows
        self.take(option, option.env, value, f"its environment: {option.env}={text} ({ARG_CPP})")

    def command_line(self, argv: Sequence[str]) -> None:
        i = 1
        while i < len(argv):
            flag = argv[i].replace("_", "-") if argv[i].startswith("--") else argv[i]
            option, positive = BY_FLAG.get(flag, (None, True))
            takes_value = option is not None and option.read is not None
            if option is None or (takes_value and i + 1 >= len(argv)):
                i += 1  # another flag, or one without its value (llama-server would not have started)
                continue
            if takes_value and option.read is not None:
                text = argv[i + 1]
                self.take(option, flag, option.read(text), f"its command line: {flag} {text} ({ARG_CPP})")
                i += 2
            else:
                self.take(option, flag, option.on if positive else option.off, f"its command line: {flag} ({ARG_CPP})")
                i += 1


def server_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServerArgs:
    """The settings a llama-server's environment and command line name (argv[0] the program, as the process table
    gives it)."""
    reading = _Reading()
    reading.environment(env or {})
    reading.command_line(argv)
    values = reading.values
    sized = {name: values[name][0] for name in FIELDS if name in values}
    named = {wire: Named(value, said) for wire, (value, said) in values.items() if wire not in FIELDS}
    rollback = _rollback_snapshots(values, reading.unread)
    if rollback is not None:
        named["rollbackSnapshots"] = rollback
    mtp = _multi_token_prediction(values)
    if mtp is not None:
        named["multiTokenPrediction"] = mtp
    draft = _draft_tokens(values, reading.unread)
    if draft is not None:
        named["draftTokens"] = draft
    embeddings = _embeddings(values)
    if embeddings is not None:
        named["embeddings"] = embeddings
    pooling = _pooling_type(values)
    if pooling is not None:
        named["pooling"] = pooling
    return ServerArgs(
        named=named,
        ctx_size=_as_int(sized.get("ctx_size")),
        parallel=_as_int(sized.get("parallel")),
        per_slot=_as_int(sized.get("per_slot")),
        model=_as_str(sized.get("model")),
        port=_as_int(sized.get("port")),
        host=_as_str(sized.get("host")),
        unread=tuple(reading.unread.values()),
    )


def _rollback_snapshots(values: Mapping[str, tuple[object, str]], unread: dict[str, str]) -> Named | None:
    """llama-server's n_rs_seq (common_params_speculative::need_n_rs_seq): the draft length where a speculative type
    that rolls back is named, 0 where only others are; where none is named but a draft model is, llama-server infers
    the types from the draft's GGUF or its repository's sidecars, which memfit does not read (`unread`); None where
    nothing speculative is named (llama-server's default, 0)."""
    named_types, said = values.get("spec_types", ((), ""))
    types = named_types if isinstance(named_types, tuple) else ()
    if not types:
        if "draft_model" in values and "spec_types" not in unread:
            unread["spec_types"] = "--spec-draft-model"  # its types inferred from the draft model
        return None
    if not ROLLBACK_SPEC_TYPES.intersection(types):
        return Named(0, f"{said}: no type that rolls back (common/common.h need_n_rs_seq)")
    n_max, n_said = values.get("draft_max", (DEFAULT_DRAFT_N_MAX, f"--spec-draft-n-max {DEFAULT_DRAFT_N_MAX}, default"))
    if not isinstance(n_max, int) or not 0 <= n_max <= MAX_ROLLBACK_SNAPSHOTS:
        unread["draft_max"] = "--spec-draft-n-max"
        return None
    return Named(n_max, f"{said}; {n_said}: n_rs_seq = the draft length (common/common.h need_n_rs_seq)")


def _multi_token_prediction(values: Mapping[str, tuple[object, str]]) -> Named | None:
    """Whether llama-server loads the model's MTP layers: common_model_params_to_llama sets load_mtp where the
    --spec-type list names draft-mtp (common/common.cpp); None where no --spec-type is named (a draft model's
    types, inferred from its metadata, are `unread` by _rollback_snapshots)."""
    named_types, said = values.get("spec_types", ((), ""))
    types = named_types if isinstance(named_types, tuple) else ()
    if not types:
        return None
    if MTP_SPEC_TYPE in types:
        return Named(True, f"{said}: load_mtp, and the target's nextn embeddings (common/common.cpp, speculative.cpp)")
    return Named(False, f"{said}: no draft-mtp, so load_mtp is false (common/common.cpp)")


def _draft_tokens(values: Mapping[str, tuple[object, str]], unread: dict[str, str]) -> Named | None:
    """The draft tokens a slot's verification batch carries at most: common_speculative_n_max over the --spec-type
    list (common/speculative.cpp; server_output_limits sizes the outputs by it), 0 under `none`; None where no
    --spec-type is named (a draft model's types, read from its metadata, are `unread` by _rollback_snapshots) or a
    length is past the contract's bound."""
    named_types, said = values.get("spec_types", ((), ""))
    types = named_types if isinstance(named_types, tuple) else ()
    if not types:
        return None
    drafting = bool(DRAFT_TYPES.intersection(types))
    needed = [NGRAM_DRAFTS[name][0] for name in types if name in NGRAM_DRAFTS] + (["draft_max"] if drafting else [])
    if any(target in unread for target in needed):
        return None  # a length memfit could not read
    lengths = [(0, "")]
    if drafting:
        default = (DEFAULT_DRAFT_N_MAX, f"--spec-draft-n-max {DEFAULT_DRAFT_N_MAX}, default")
        n_max, n_said = values.get("draft_max", default)
        lengths.append((max(0, _as_int(n_max) or 0), n_said))
    for name in types:
        if name in NGRAM_DRAFTS:
            target, length_default = NGRAM_DRAFTS[name]
            length, length_said = values.get(target, (length_default, f"{name}'s default {length_default}"))
            lengths.append((max(0, _as_int(length) or 0), length_said))
        elif name == "ngram-cache":
            lengths.append((NGRAM_CACHE_DRAFT, f"ngram-cache's {NGRAM_CACHE_DRAFT}"))
    n, n_said = max(lengths, key=lambda x: x[0])
    if n > MAX_DRAFT_TOKENS:
        unread["draftTokens"] = "--spec-type"
        return None
    why = f"; {n_said}" if n_said else ""
    return Named(n, f"{said}{why}: the draft length (common/speculative.cpp common_speculative_n_max)")


def _embeddings(values: Mapping[str, tuple[object, str]]) -> Named | None:
    """Whether llama-server's context computes embeddings: params.embedding, which --embedding and --rerank set and
    common_context_params_to_llama copies into cparams.embeddings (common/common.cpp); None where neither is named
    (llama-server's default, false). A --pooling alone does not set it (see _pooling_type)."""
    for target in ("embedding", "rerank"):
        if target in values:
            return Named(True, f"{values[target][1]}: params.embedding, cparams.embeddings (common/common.cpp)")
    return None


def _pooling_type(values: Mapping[str, tuple[object, str]]) -> Named | None:
    """params.pooling_type as common/arg.cpp leaves it: --pooling's name, or rank where --rerank is named later (the
    last one parsed wins, the environment before the command line); None where neither is named (unspecified: the
    model's own)."""
    named = [target for target in values if target in ("pooling", "rerank")]
    if not named:
        return None
    value, said = values[named[-1]]
    if named[-1] == "rerank":
        return Named("rank", f"{said}: pooling_type = LLAMA_POOLING_TYPE_RANK ({ARG_CPP})")
    if value == "none":
        return Named(value, f"{said}: pooling none, so the output limit stays (server_output_limits)")
    return Named(value, f"{said}: a pooling type, so the output limit is n_batch (server_output_limits)")


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class RunningServer:
    """A llama-server running on this host: what its command line names and, when it answered over loopback, what
    GET /props (or GET /slots) said of its slots (tools/server/server-context.cpp get_res_props)."""

    pid: int
    port: int | None  # where it was asked; None where it listens on no loopback address memfit could find
    args: ServerArgs
    model_file: tuple[int, int] | None = None  # (device, inode) of the model file it loaded
    answered: bool = False  # GET /props (or /slots) answered with the shape of the pinned server
    total_slots: int | None = None  # /props total_slots: params.n_parallel, after -np auto became 4
    slot_tokens: int | None = None  # /props default_generation_settings.n_ctx (a slot's n_ctx): n_ctx_slot()

    def loaded(self, identity: tuple[int, int]) -> bool:
        return self.model_file == identity


def running_for(servers: Sequence[RunningServer], identity: tuple[int, int] | None) -> RunningServer | None:
    """The server that has the file `identity` loaded: one that answered first, then the lowest port."""
    if identity is None:
        return None
    holding = [s for s in servers if s.loaded(identity)]
    return min(holding, key=lambda s: (not s.answered, s.port or 0, s.pid), default=None)


def server_json_int(value: object) -> int | None:
    """A count the server's JSON gives, taken only as a positive integer within int32 (never a bool, a float, a
    text)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= INT32_MAX else None


def props_settings(props: object) -> tuple[int | None, int | None, str | None]:
    """GET /props' total_slots, default_generation_settings.n_ctx and model_path (server-context.cpp
    get_res_props), each only where it has the type the pinned source writes."""
    if not isinstance(props, dict):
        return None, None, None
    generation = props.get("default_generation_settings")
    n_ctx = server_json_int(generation.get("n_ctx")) if isinstance(generation, dict) else None
    path = props.get("model_path")
    path_ok = isinstance(path, str) and 0 < len(path) <= 4096 and "\0" not in path
    return server_json_int(props.get("total_slots")), n_ctx, path if path_ok else None


def slots_settings(slots: object) -> tuple[int | None, int | None]:
    """GET /slots' slot count and their n_ctx (server_slot::to_json), where every slot agrees."""
    if not isinstance(slots, list) or not slots:
        return None, None
    contexts = {server_json_int(s.get("n_ctx")) if isinstance(s, dict) else None for s in slots}
    n_ctx = contexts.pop() if len(contexts) == 1 else None
    return len(slots), n_ctx
