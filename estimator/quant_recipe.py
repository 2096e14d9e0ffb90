"""llama.cpp's quantization recipe: the type `llama-quantize` gives each tensor of a model for a file type.

Mirrors src/llama-quant.cpp of arch_rules.LLAMA_CPP_RELEASE: `llama_model_quantize_impl` (which tensors it
visits, in the loader's order), `tensor_allows_quantization` (1-D tensors, norms, routers, ... keep their type),
`llama_ftype_get_default_type`, `llama_tensor_get_type_impl` (the per-category overrides), and
`tensor_type_fallback` (a row that is not whole blocks of the chosen type). Checked tensor by tensor against that
quantizer's output for every catalog shape and file type (tests/data/quantized_catalog.jsonl).

Only the file types below are mirrored (those llama-quantize makes without an importance matrix). Where the
recipe depends on whether an importance matrix was given (Q4_0 / Q5_0 ffn_down, IQ4_NL / IQ4_XS ffn_down),
`tensor_types` takes it as an argument: a catalog answer spans both.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memfit import gguf_constants as gguf
from memfit.estimator.tensor_list import Tensor
from memfit.gguf_constants import GGMLQuantizationType as QT

# llama_ftype_get_default_type, for the file types mirrored here (MXFP4 is llama-quantize's MXFP4_MOE)
DEFAULT_TYPE: dict[str, QT] = {
    "F32": QT.F32,
    "F16": QT.F16,
    "BF16": QT.BF16,
    "Q8_0": QT.Q8_0,
    "Q6_K": QT.Q6_K,
    "Q5_K_M": QT.Q5_K,
    "Q5_K_S": QT.Q5_K,
    "Q5_0": QT.Q5_0,
    "Q5_1": QT.Q5_1,
    "Q4_K_M": QT.Q4_K,
    "Q4_K_S": QT.Q4_K,
    "Q4_0": QT.Q4_0,
    "Q4_1": QT.Q4_1,
    "Q3_K_L": QT.Q3_K,
    "Q3_K_M": QT.Q3_K,
    "Q3_K_S": QT.Q3_K,
    "Q2_K": QT.Q2_K,
    "IQ4_NL": QT.IQ4_NL,
    "IQ4_XS": QT.IQ4_XS,
    "MXFP4_MOE": QT.MXFP4,
    "MXFP4": QT.MXFP4,
}
UNQUANTIZED = (QT.F32, QT.F16, QT.BF16)

# tensor_type_fallback: the type a row of ne[0] elements falls back to when it is not whole blocks of the target
FALLBACK: dict[QT, QT] = {
    QT.IQ4_XS: QT.IQ4_NL,
    QT.Q2_K: QT.Q4_0,
    QT.Q3_K: QT.Q4_0,
    QT.Q4_K: QT.Q5_0,
    QT.Q5_K: QT.Q5_1,
    QT.Q6_K: QT.Q8_0,
}

# tensor_allows_quantization: name fragments that keep their converted type (those of the mirrored architectures)
_NOT_QUANTIZED = (
    "_norm.weight",
    "ffn_gate_inp.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
)
_NOT_QUANTIZED_NAMES = ("position_embd.weight", "token_types.weight")

_LAYER = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class ModelFacts:
    """What llama_tensor_get_type_impl reads of the model besides the tensor (llama_hparams, llama_model::type)."""

    arch: str
    n_layer: int  # hparams.n_layer_all: the ffn_* layer count
    n_expert: int
    n_gqa: int  # hparams.n_gqa(): layer 0's n_head / n_head_kv, 0 without KV heads
    is_70b: bool  # llama_model::type == LLM_TYPE_70B


def block_size(t: QT) -> int:
    return gguf.GGML_QUANT_SIZES[t][0]


def category(name: str) -> str:
    """tensor_get_category: broad roles by name (the first match wins)."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for fragment, role in (
        ("attn_qkv.weight", "attn_v"),  # category_is_attn_v: attn_v, attn_qkv and attn_kv_b are counted together
        ("attn_kv_b.weight", "attn_v"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if fragment in name:
            return role
    return "other"


def allows_quantization(t: Tensor) -> bool:
    """tensor_allows_quantization: 2-D and 3-D `*weight` tensors, but for norms, routers and small tables."""
    if len(t.ne) < 2 or not t.name.endswith("weight"):
        return False
    return not any(f in t.name for f in _NOT_QUANTIZED) and t.name not in _NOT_QUANTIZED_NAMES


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    # llama_tensor_get_type_impl's use_more_bits: the first and last eighths, and every third layer between
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def _output(ftype: str, default: QT, ne0: int, facts: ModelFacts) -> QT:
    # output.weight, and token_embd when it is tied to the output
    if ftype in ("MXFP4_MOE", "MXFP4") or facts.arch == "falcon" or ne0 % block_size(default):
        return QT.Q8_0
    return default if default == QT.Q8_0 else QT.Q6_K


def _attn_v(ftype: str, default: QT, i: int, n: int, facts: ModelFacts) -> QT:
    more_bits = {"Q4_K_M": use_more_bits(i, n), "Q5_K_M": use_more_bits(i, n)}
    t = {
        "Q2_K": QT.Q4_K if facts.n_gqa >= 4 else QT.Q3_K,
        "Q3_K_M": QT.Q5_K if i < 2 else QT.Q4_K,
        "Q3_K_L": QT.Q5_K,
        "IQ4_NL": QT.Q5_K if facts.n_gqa >= 4 else default,
        "IQ4_XS": QT.Q5_K if facts.n_gqa >= 4 else default,
        "Q4_K_M": QT.Q6_K if more_bits.get(ftype) else default,
        "Q5_K_M": QT.Q6_K if more_bits.get(ftype) else default,
        "Q4_K_S": QT.Q5_K if i < 4 else default,
    }.get(ftype, default)
    if facts.is_70b and t in (QT.Q3_K, QT.Q4_K):  # 8 heads share attn_v: more bits for little size
        t = QT.Q5_K
    return QT.Q8_0 if facts.n_expert == 8 else t


def _ffn_down(ftype: str, default: QT, i: int, n: int, facts: ModelFacts, imatrix: bool) -> QT:
    falcon = facts.arch == "falcon"
    if ftype == "Q2_K":
        return QT.Q3_K
    if ftype == "Q3_K_M":
        return QT.Q5_K if i < n // 16 else QT.Q4_K if not falcon or use_more_bits(i, n) else QT.Q3_K
    if ftype == "Q3_K_L":
        return QT.Q4_K if falcon else QT.Q5_K
    if ftype == "Q4_K_M":
        if falcon:
            return QT.Q6_K if i < n // 16 else QT.Q5_K if use_more_bits(i, n) else QT.Q4_K
        return QT.Q6_K if use_more_bits(i, n) else default
    if i < n // 8 and ftype in ("IQ4_NL", "IQ4_XS") and not imatrix:
        return QT.Q5_K
    if ftype == "Q5_K_M" and use_more_bits(i, n):
        return QT.Q6_K
    if ftype == "Q4_K_S" and not falcon and i < n // 8:
        return QT.Q5_K
    if ftype in ("Q4_0", "Q5_0") and imatrix and i < n // 8:
        return QT.Q4_1 if ftype == "Q4_0" else QT.Q5_1
    return default


_ATTN_OUTPUT_MOE8 = ("Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ4_XS")
_ATTN_OUTPUT = {"Q2_K": QT.Q3_K, "Q3_K_M": QT.Q4_K, "Q3_K_L": QT.Q5_K}


def _attn_output(ftype: str, default: QT, facts: ModelFacts) -> QT:
    if facts.arch == "falcon":
        return QT.Q4_K if ftype == "Q3_K_L" else default
    if facts.n_expert == 8:
        return QT.Q5_K if ftype in _ATTN_OUTPUT_MOE8 else default
    return _ATTN_OUTPUT.get(ftype, default)


def fallback(ne0: int, t: QT) -> QT:
    """tensor_type_fallback: a smaller-block type when ne[0] is not whole blocks of `t`, else F16."""
    if ne0 % block_size(t) == 0:
        return t
    if t not in FALLBACK and block_size(t) > 32:
        raise ValueError(f"llama.cpp defines no fallback for {t.name}")
    t = FALLBACK.get(t, t)
    return t if ne0 % block_size(t) == 0 else QT.F16


def _layer_of(name: str) -> int:
    m = _LAYER.match(name)
    return int(m.group(1)) if m else -1


def loader_order(tensors: Sequence[Tensor]) -> list[Tensor]:
    """llama_model_loader::weights_map's order (weight_name_comparer): by layer (-1 outside blocks), then name."""
    return sorted(tensors, key=lambda t: (_layer_of(t.name), t.name))


def tensor_types(tensors: Sequence[Tensor], ftype: str, facts: ModelFacts, imatrix: bool = False) -> dict[str, QT]:
    """Each tensor's type after `llama-quantize` to `ftype` (default parameters, no overrides, not --pure)."""
    if ftype not in DEFAULT_TYPE:
        raise ValueError(f"memfit does not mirror llama.cpp's {ftype} recipe")
    default = DEFAULT_TYPE[ftype]
    order = loader_order(tensors)
    tied = all(t.name != "output.weight" for t in order)
    n_attention_wv = sum(1 for t in order if category(t.name) == "attn_v")
    i_attention_wv = i_ffn_down = 0
    types: dict[str, QT] = {}
    for t in order:
        if not allows_quantization(t):
            types[t.name] = t.source
            continue
        if default in UNQUANTIZED:
            types[t.name] = default
            continue
        role = category(t.name)
        new = default
        if role == "output" or (tied and role == "token_embd"):
            new = _output(ftype, default, t.ne[0], facts)
        elif ftype in ("MXFP4_MOE", "MXFP4"):  # experts (3-D) MXFP4, the rest Q8_0
            new = QT.MXFP4 if len(t.ne) > 2 and t.ne[2] > 1 else QT.Q8_0
        elif role == "attn_v":  # its ATTENTION_QKV branch is never reached: attn_qkv takes this one
            new = _attn_v(ftype, default, i_attention_wv, n_attention_wv, facts)
            i_attention_wv += 1
        elif role == "attn_k" and facts.n_expert == 8:
            new = QT.Q8_0
        elif role == "ffn_down":
            layer = _layer_of(t.name) if facts.n_expert > 1 else i_ffn_down
            new = _ffn_down(ftype, default, layer, facts.n_layer, facts, imatrix)
            i_ffn_down += 1
        elif role == "attn_output":
            new = _attn_output(ftype, default, facts)
        types[t.name] = fallback(t.ne[0], new)
    return types
