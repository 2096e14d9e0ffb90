"""The workload flags of `memfit fit`, `plan` and `measure`, in memfit's names and in llama.cpp's.

llama.cpp's own flags are aliases with llama.cpp's meaning: `-c/--ctx-size` is the whole context, which
llama.cpp divides among `-np/--parallel` sequences (memfit's `--tokens` is per stream), `-ctk/-ctv` take cache
type names, and `-fa`, `-ub` and `-kvu` are the same settings as memfit's. Counts may be written `32k` (32,768).
A value no request could mean is a usage error (exit 2) in words, not an answer.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from memfit.estimator.context import CELL_PADDING
from memfit.estimator.devices import CPU
from memfit.estimator.kv_cache import ELEMENT_BYTES_BY_NAME, GGML_CACHE_TYPES
from memfit.estimator.placement import FFN_EXPS, SplitMode
from memfit.estimator.vocabulary import INT64_MAX, FlashAttention, Mode, Profile
from memfit.estimator.workload import ALL_LAYERS
from memfit.integers import round_up

SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20}
_COUNT = re.compile(r"\s*(\d+)\s*([kKmM]?)\s*")
SPLIT_MODES = [m.value for m in SplitMode]
ROLLBACK_SNAPSHOTS_MAX = 256  # the contract's maximum of rollbackSnapshots
DRAFT_TOKENS_MAX = 256  # the contract's maximum of draftTokens

EXAMPLES = {
    "fit": """examples:
  memfit fit Qwen/Qwen3-8B-GGUF:Q4_K_M --tokens 32k --streams 2 --key-bytes 1
  memfit fit Qwen/Qwen3-8B-GGUF:Q4_K_M -c 64k -np 2 -ctk q8_0   # the same, in llama.cpp's flags
  memfit fit Qwen/Qwen3-30B-A3B-GGUF -ngl 20 --n-cpu-moe 8 --gpu cuda:24GiB   # one row per device
  memfit fit Qwen/Qwen3-8B-GGUF:Q4_K_M --profile llama-server     # as llama-server runs it with no flags
""",
    "plan": """examples:
  memfit plan Qwen/Qwen3-8B-GGUF --tokens 16k --streams 4   # every quant: the most context that fits
  memfit plan Qwen/Qwen3-8B-GGUF -c 64k -np 4 -fa off
  memfit plan Qwen/Qwen3-8B-GGUF --profile llama-server   # the context llama-server could run at, per verdict
""",
    "measure": """examples:
  memfit measure qwen3-f16 --tokens 8192 --streams 2
  memfit measure qwen3-f16 -c 16k -np 2 -ub 1024
""",
}


def count(text: str) -> int:
    """A whole number of at least 1, written 4096, 32k or 1M (k: 1,024, M: 1,048,576)."""
    match = _COUNT.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a whole number such as 4096 or 32k, got {text!r}")
    value = int(match.group(1)) * SIZE_SUFFIXES[match.group(2).lower()]
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {text!r}")
    if value > INT64_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {INT64_MAX:,}, got {text!r}")
    return value


def cache_type(text: str) -> int:
    """llama.cpp's cache type name (-ctk, -ctv) as the contract's bytes per element."""
    name = text.strip().lower()
    if name in ELEMENT_BYTES_BY_NAME:
        return ELEMENT_BYTES_BY_NAME[name]
    known = ", ".join(ELEMENT_BYTES_BY_NAME)
    if name in GGML_CACHE_TYPES:
        raise argparse.ArgumentTypeError(f"llama.cpp takes {name}, but memfit's API names only {known}")
    raise argparse.ArgumentTypeError(f"expected a cache type ({known}), got {text!r}")


def gpu_layers(text: str) -> int | str:
    """llama.cpp's -ngl: a number of layers (0 or more) or `all`."""
    if text.strip().lower() == ALL_LAYERS:
        return ALL_LAYERS
    if text.strip().isdigit():
        return min(int(text), INT64_MAX)
    raise argparse.ArgumentTypeError(f"expected a number of layers or all, got {text!r}")


def layers(text: str) -> int:
    """A count of 0 or more (--n-cpu-moe)."""
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of layers, got {text!r}")
    return min(int(text), INT64_MAX)


def rollback_snapshots(text: str) -> int:
    """--rollback-snapshots: 0 to ROLLBACK_SNAPSHOTS_MAX, the contract's bounds."""
    if not text.strip().isdigit() or int(text) > ROLLBACK_SNAPSHOTS_MAX:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {ROLLBACK_SNAPSHOTS_MAX}, got {text!r}")
    return int(text)


def draft_tokens(text: str) -> int:
    """--draft-tokens: 0 to DRAFT_TOKENS_MAX, the contract's bounds."""
    if not text.strip().isdigit() or int(text) > DRAFT_TOKENS_MAX:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {DRAFT_TOKENS_MAX}, got {text!r}")
    return int(text)


def tensor_split(text: str) -> list[float]:
    """llama.cpp's -ts: proportions separated by , or / (common/arg.cpp splits on both)."""
    try:
        shares = [float(x) for x in re.split(r"[,/]", text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected proportions such as 3,1, got {text!r}") from None
    if not all(0 <= x <= 1e30 for x in shares):
        raise argparse.ArgumentTypeError(f"proportions must be 0 or more, got {text!r}")
    return shares


def tensor_overrides(text: str) -> list[str]:
    """llama.cpp's -ot: PATTERN=BUFFER_TYPE pairs separated by commas."""
    pairs = [p for p in text.split(",") if p]
    bad = [p for p in pairs if p.count("=") != 1 or p.startswith("=") or p.endswith("=")]
    if not pairs or bad:
        raise argparse.ArgumentTypeError(f"expected PATTERN=BUFFER_TYPE pairs (e.g. exps=CPU), got {text!r}")
    return pairs


def add_placement_flags(parser: argparse.ArgumentParser) -> None:
    """llama.cpp's placement flags, with its names and meanings."""
    parser.add_argument(
        "-ngl",
        "--gpu-layers",
        "--n-gpu-layers",
        type=gpu_layers,
        metavar="N",
        help="llama.cpp's -ngl: layers on the GPUs, counted from the output layer, or all (default: what --mode means)",
    )
    parser.add_argument(
        "--n-cpu-moe",
        "-ncmoe",
        type=layers,
        metavar="N",
        help="keep the expert tensors of the first N layers on the CPU",
    )
    parser.add_argument(
        "--cpu-moe", "-cmoe", action="store_true", help="keep every expert tensor on the CPU (an -ot of llama.cpp's)"
    )
    parser.add_argument(
        "-ot",
        "--override-tensor",
        type=tensor_overrides,
        action="append",
        metavar="PATTERN=TYPE,...",
        help="llama.cpp's -ot: tensors whose names match PATTERN in buffer type TYPE (CPU, CUDA0, ...); repeatable",
    )
    parser.add_argument(
        "-ts", "--tensor-split", type=tensor_split, metavar="N,N,...", help="each GPU's share of the layers, e.g. 3,1"
    )
    parser.add_argument("-sm", "--split-mode", choices=SPLIT_MODES, help="llama.cpp's -sm (default layer)")
    parser.add_argument("-mg", "--main-gpu", type=int, metavar="N", help="the GPU -sm none uses (default 0)")
    parser.add_argument(
        "-nkvo",
        "--no-kv-offload",
        dest="kv_offload",
        action="store_false",
        default=None,
        help="keep the KV cache and recurrent state on the host",
    )


def placement_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The placement flags as the fit request's fields (--cpu-moe is llama.cpp's override of every expert tensor)."""
    overrides = [o for group in args.override_tensor or [] for o in group]
    if args.cpu_moe:
        overrides.append(f"{FFN_EXPS}={CPU}")
    return {
        "gpu_layers": args.gpu_layers,
        "n_cpu_moe": args.n_cpu_moe,
        "tensor_overrides": overrides or None,
        "tensor_split": args.tensor_split,
        "split_mode": args.split_mode,
        "main_gpu": args.main_gpu,
        "kv_offload": args.kv_offload,
    }


def profile(text: str) -> str:
    """A launch profile, in the API's name (llamaServer) or the command's (llama-server)."""
    names = {p.value.lower(): p.value for p in Profile} | {"llama-server": Profile.LLAMA_SERVER.value}
    names["lm-studio"] = Profile.LM_STUDIO.value
    found = names.get(text.strip().lower())
    if found is None:
        raise argparse.ArgumentTypeError(f"expected custom, llama-server, ollama, lm-studio or running, got {text!r}")
    return found


def add_profile_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        type=profile,
        metavar="NAME",
        help="whose launch settings fill the ones not given: custom (default: memfit's), llama-server (no flags:"
        " 4 slots, --fit's context, mmap, its prompt cache and checkpoints), ollama, lm-studio, or running (as the"
        " llama-server running here with the model loaded runs it)",
    )


def add_workload_flags(parser: argparse.ArgumentParser) -> None:
    tokens = parser.add_mutually_exclusive_group()
    tokens.add_argument(
        "--tokens",
        type=count,
        metavar="N",
        help="KV capacity per stream (default 4096, or the model's limit when lower; more than the limit is refused)",
    )
    tokens.add_argument(
        "-c",
        "--ctx-size",
        type=count,
        metavar="N",
        help="llama.cpp's -c: the whole context, divided among the streams as llama.cpp divides it",
    )
    parser.add_argument(
        "--streams", "-np", "--parallel", type=count, metavar="N", help="concurrent sequences (default 1)"
    )
    key = parser.add_mutually_exclusive_group()
    key.add_argument("--key-bytes", type=count, metavar="B", help="bytes per K element: 4 f32, 2 f16 (default), 1 q8_0")
    key.add_argument(
        "-ctk", "--cache-type-k", dest="key_bytes", type=cache_type, metavar="TYPE", help="llama.cpp's: f32, f16, q8_0"
    )
    value = parser.add_mutually_exclusive_group()
    value.add_argument("--value-bytes", type=count, metavar="B", help="bytes per V element, as --key-bytes")
    value.add_argument(
        "-ctv", "--cache-type-v", dest="value_bytes", type=cache_type, metavar="TYPE", help="as -ctk, for V"
    )
    parser.add_argument("--mode", choices=[m.value for m in Mode], help="where it runs (default fullGpu)")
    parser.add_argument(
        "--flash-attention",
        "-fa",
        choices=[f.value for f in FlashAttention],
        help="llama.cpp's -fa: auto (default, forecast as on), on or off",
    )
    parser.add_argument(
        "--ubatch",
        "-ub",
        "--ubatch-size",
        type=count,
        metavar="N",
        help="llama.cpp's -ub, the physical batch size (default 512)",
    )
    parser.add_argument(
        "--kv-unified",
        "-kvu",
        action="store_true",
        default=None,
        help="llama.cpp's --kv-unified: one KV stream shared by every sequence (default: one per sequence)",
    )
    parser.add_argument(
        "--cpu-variant",
        metavar="NAME",
        help="ggml's CPU variant (haswell, skylakex, sapphirerapids, ...), any, or auto (default: the one this host"
        " loads)",
    )
    parser.add_argument(
        "--rollback-snapshots",
        type=rollback_snapshots,
        metavar="N",
        help="llama.cpp's n_rs_seq: recurrent-state snapshots per sequence for a speculative rollback (llama-server:"
        " --spec-draft-n-max under --spec-type draft-mtp, eagle3, dflash or dspark; default 0)",
    )
    parser.add_argument(
        "--mtp",
        action="store_true",
        default=None,
        help="llama-server's --spec-type draft-mtp: the model loaded with its NextN/MTP layers, its context's"
        " output buffer holding their input, and the MTP draft context beside it",
    )
    parser.add_argument(
        "-ctkd",
        "--cache-type-k-draft",
        "--spec-draft-type-k",
        dest="draft_key_bytes",
        type=cache_type,
        metavar="TYPE",
        help="with --mtp, llama-server's draft context's K cache type: f32, f16 (default), q8_0",
    )
    parser.add_argument(
        "-ctvd",
        "--cache-type-v-draft",
        "--spec-draft-type-v",
        dest="draft_value_bytes",
        type=cache_type,
        metavar="TYPE",
        help="as -ctkd, for V",
    )
    parser.add_argument(
        "--no-spec-draft-backend-sampling",
        dest="draft_backend_sampling",
        action="store_false",
        default=None,
        help="with --mtp, the draft's sampling on the host, as llama-server's flag: no sampler rows in its output"
        " buffer (default: on the backend)",
    )
    parser.add_argument(
        "--draft-tokens",
        type=draft_tokens,
        metavar="N",
        help="the draft tokens each slot's verification carries under llama-server's speculative decoding (its"
        " --spec-draft-n-max, default 3, for the draft types; its output buffer holds 1 + N logits rows a slot;"
        " default 0, or 3 with --mtp)",
    )
    parser.add_argument(
        "--embedding",
        action="store_true",
        default=None,
        help="llama-server serves embeddings (its --embedding or --rerank): every token of a batch an output, its"
        " embeddings beside its logits in the output buffer, the output limit lifted",
    )
    parser.add_argument(
        "--pooling",
        choices=("none", "mean", "cls", "last", "rank"),
        default=None,
        help="llama-server's --pooling (--rerank: rank): the pooling the graph holds under --embedding (default: the"
        " model's own); other than none without --embedding, llama-server's output limit is lifted to its n_batch"
        " but no embeddings are computed",
    )


def tokens_per_stream(args: argparse.Namespace) -> int | None:
    """--tokens, or -c divided as llama_context's constructor divides n_ctx: padded to 256 cells, then per stream
    (padded again) for a cache per sequence; a unified cache is one stream of them all, which memfit counts as
    tokens x streams, so there the streams must divide it. ValueError, in words, for a -c llama.cpp refuses or
    the contract cannot say."""
    if args.ctx_size is None:
        return args.tokens
    streams = args.streams or 1
    n_ctx = round_up(args.ctx_size, CELL_PADDING)
    if not args.kv_unified:
        if n_ctx < streams:  # llama_context: "n_ctx_seq == 0"
            raise ValueError(f"llama.cpp refuses -c {args.ctx_size} over {streams} streams: under one cell each")
        return round_up(n_ctx // streams, CELL_PADDING)
    if n_ctx % streams:
        fits = round_up(n_ctx, math.lcm(CELL_PADDING, streams))
        raise ValueError(
            f"-c {args.ctx_size} with --kv-unified is one stream of {n_ctx} cells, which memfit's API counts as"
            f" tokens x {streams} streams: {streams} do not divide it (-c {fits} would; or give --tokens, per stream)"
        )
    return n_ctx // streams
