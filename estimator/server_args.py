"""A running llama-server's settings: what its command line names (common/arg.cpp's flags) and what it answers on
GET /props and GET /slots (tools/server/server-context.cpp), as the running profile reads them.

Only the flags that change memory are read, as the pinned llama.cpp parses them (common/arg.cpp
common_params_parse_ex: a `--` flag's underscores read as dashes, a flag named twice keeps its last value, a value is
the next argument). A value memfit cannot express (a cache type other than f32, f16 and q8_0, a number that is not
one) is not taken: the flag is listed in `unread` and the setting stays llama-server's default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from memfit.estimator.kv_cache import BY_ELEMENT_BYTES
from memfit.estimator.vocabulary import FlashAttention, LoadMode

ARG_CPP = "llama.cpp common/arg.cpp"
INT32_MAX = 2**31 - 1
CACHE_TYPE_BYTES = {t.name: element_bytes for element_bytes, t in BY_ELEMENT_BYTES.items()}
# common/arg.cpp common_arg_utils::is_truthy, is_falsey and is_autoy: --flash-attn's values
FLASH_ATTENTION = (
    dict.fromkeys(("on", "enabled", "true", "1"), FlashAttention.ON)
    | dict.fromkeys(("off", "disabled", "false", "0"), FlashAttention.OFF)
    | dict.fromkeys(("auto", "-1"), FlashAttention.AUTO)
)


@dataclass(frozen=True)
class Named:
    """A setting the server's command line names: its value, and the flag that named it."""

    value: object
    detail: str


@dataclass(frozen=True)
class ServerArgs:
    """What a llama-server's command line names: the settings on the wire (by their wire names), and the flags
    that size its context or say where it listens and what it loaded."""

    named: Mapping[str, Named] = field(default_factory=dict)
    ctx_size: int | None = None  # -c (0: the trained context)
    parallel: int | None = None  # -np (-1: auto)
    per_slot: int | None = None  # --kv-unified-per-slot
    model: str | None = None  # -m
    port: int | None = None  # --port
    host: str | None = None  # --host
    unread: tuple[str, ...] = ()  # flags whose value memfit cannot express


def _int(text: str) -> int | None:
    """std::stoi's reading of a plain decimal (memfit takes nothing looser); None for any other text."""
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or not digits.isascii() or len(digits) > 10:
        return None
    value = int(text)
    return value if -INT32_MAX - 1 <= value <= INT32_MAX else None


def _cache_type(text: str) -> int | None:
    return CACHE_TYPE_BYTES.get(text)


def _load_mode(text: str) -> LoadMode | None:
    return next((m for m in LoadMode if m.value == text), None)


def _ubatch(text: str) -> int | None:
    value = _int(text)
    return value if value is not None and value > 0 else None


# flag -> (the wire setting it names, how its value reads); common/arg.cpp's add_opt entries
VALUE_SETTINGS: dict[str, tuple[str, Callable[[str], object | None]]] = {
    "-ctk": ("keyElementBytes", _cache_type),
    "--cache-type-k": ("keyElementBytes", _cache_type),
    "-ctv": ("valueElementBytes", _cache_type),
    "--cache-type-v": ("valueElementBytes", _cache_type),
    "-fa": ("flashAttention", FLASH_ATTENTION.get),
    "--flash-attn": ("flashAttention", FLASH_ATTENTION.get),
    "-ub": ("ubatchTokens", _ubatch),
    "--ubatch-size": ("ubatchTokens", _ubatch),
    "-cram": ("cacheRamMib", _int),
    "--cache-ram": ("cacheRamMib", _int),
    "-ctxcp": ("contextCheckpoints", _int),
    "--ctx-checkpoints": ("contextCheckpoints", _int),
    "--swa-checkpoints": ("contextCheckpoints", _int),
    "-lm": ("loadMode", _load_mode),
    "--load-mode": ("loadMode", _load_mode),
}
# flags without a value -> (the wire setting, the value they set)
SWITCHES: dict[str, tuple[str, object]] = {
    "--swa-full": ("swaFull", True),
    "-kvu": ("kvUnified", True),
    "--kv-unified": ("kvUnified", True),
    "-no-kvu": ("kvUnified", False),
    "--no-kv-unified": ("kvUnified", False),
    "--mlock": ("loadMode", LoadMode.MLOCK),  # deprecated for --load-mode mlock
    "--mmap": ("loadMode", LoadMode.MMAP),
    "--no-mmap": ("loadMode", LoadMode.NONE),
    "-dio": ("loadMode", LoadMode.DIRECT_IO),
    "--direct-io": ("loadMode", LoadMode.DIRECT_IO),
    "-ndio": ("loadMode", LoadMode.NONE),
    "--no-direct-io": ("loadMode", LoadMode.NONE),
}
# flags whose value sizes the context, or says where the server listens and what it loaded
SIZES = {"-c": "ctx_size", "--ctx-size": "ctx_size", "-np": "parallel", "--parallel": "parallel"}
SIZES |= {"--kv-unified-per-slot": "per_slot", "--port": "port"}
TEXTS = {"-m": "model", "--model": "model", "--host": "host"}


def server_args(argv: Sequence[str]) -> ServerArgs:
    """The settings a llama-server command line names (argv[0] the program, as the process table gives it)."""
    named: dict[str, Named] = {}
    found: dict[str, object] = {}
    unread: dict[str, None] = {}
    i = 1
    while i < len(argv):
        flag = argv[i].replace("_", "-") if argv[i].startswith("--") else argv[i]
        takes_value = flag in VALUE_SETTINGS or flag in SIZES or flag in TEXTS
        value = argv[i + 1] if takes_value and i + 1 < len(argv) else None
        i += 2 if takes_value else 1
        if flag in SWITCHES:
            wire, setting = SWITCHES[flag]
            named[wire] = Named(setting, f"its command line: {flag} ({ARG_CPP})")
        elif value is None:
            continue  # another flag, or one without its value (llama-server would not have started)
        elif flag in VALUE_SETTINGS:
            wire, read = VALUE_SETTINGS[flag]
            setting = read(value)
            if setting is None:
                unread[flag] = None
            else:
                named[wire] = Named(setting, f"its command line: {flag} {value} ({ARG_CPP})")  # a value it knows
        elif flag in SIZES:
            found[SIZES[flag]] = _int(value)
        else:
            found[TEXTS[flag]] = value
    return ServerArgs(
        named=named,
        ctx_size=_as_int(found.get("ctx_size")),
        parallel=_as_int(found.get("parallel")),
        per_slot=_as_int(found.get("per_slot")),
        model=_as_str(found.get("model")),
        port=_as_int(found.get("port")),
        host=_as_str(found.get("host")),
        unread=tuple(unread),
    )


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


def server_json_int(value: object, least: int = 1) -> int | None:
    """A count the server's JSON gives, taken only as an integer within int32 (never a bool, a float, a text)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if least <= value <= INT32_MAX else None


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
    if not isinstance(slots, list) or not slots or len(slots) > INT32_MAX:
        return None, None
    contexts = {server_json_int(s.get("n_ctx")) if isinstance(s, dict) else None for s in slots}
    n_ctx = contexts.pop() if len(contexts) == 1 else None
    return len(slots), n_ctx
