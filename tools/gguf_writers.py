"""Writers of GGUF models with the tensor names, shapes and metadata keys llama.cpp expects.

A model is described by its metadata and its tensor list (names, ggml shapes, types). `write_model`
writes the real header and, by default, leaves the data region a sparse hole: a full-size artifact
(the file is as long as the real model) that costs almost no disk. The memory llama.cpp allocates
depends only on the header, so these files give the same answers as real weights.

The tiny models below have exactly the shapes of the public ground-truth set
(`shared/groundtruth/make_models.py`), whose llama.cpp measurements live in tests/data/.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from memfit.integers import round_up

ALIGNMENT = 32


@dataclass
class Model:
    arch: str
    kv: dict[str, Any] = field(default_factory=dict)
    tensors: list[tuple[str, tuple[int, ...], QT]] = field(default_factory=list)  # (name, ne, type)
    vocab: int = 0
    tokenizer: str = "llama"  # "llama" (sentencepiece-like), "gpt2" (byte-level BPE) or "bert" (WordPiece)
    merges: int = 0  # a gpt2 tokenizer's merges beyond the letter pairs (real vocabularies have ~150-280k)
    seed: int | None = None  # random weights from this seed (write_model's `_fill_random`); None: a sparse hole

    def tensor(self, name: str, ne: list[int] | tuple[int, ...], qtype: QT) -> None:
        if len(ne) == 1:
            qtype = QT.F32  # norms and biases are F32 in real conversions
        self.tensors.append((name, tuple(int(x) for x in ne), qtype))

    def arch_kv(self, **values: Any) -> None:
        """Add `<arch>.<key>` entries; a `__` in a keyword becomes a dot (attention__head_count)."""
        for key, value in values.items():
            self.kv[f"{self.arch}.{key.replace('__', '.')}"] = value


def tensor_nbytes(ne: tuple[int, ...], qtype: QT) -> int:
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
    return ne[0] // block * type_size * rows


_ARRAY_ITEM_TYPES = {
    np.dtype(np.uint64): gguf.GGUFValueType.UINT64,
    np.dtype(np.int64): gguf.GGUFValueType.INT64,
    np.dtype(np.uint32): gguf.GGUFValueType.UINT32,
    np.dtype(np.int32): gguf.GGUFValueType.INT32,
}


def _add_kv(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, np.int32):  # a signed scalar, as a hostile or careless converter might write
        w.add_int32(key, int(value))
    elif isinstance(value, int):
        w.add_uint32(key, value) if 0 <= value < 2**32 else w.add_uint64(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, (list, tuple)):
        w.add_array(key, list(value))  # bools -> BOOL array, ints -> INT32, floats -> FLOAT32
    elif isinstance(value, np.ndarray):  # an array of an explicit item type, e.g. dtype=np.uint64
        w.add_key_value(key, value.tolist(), gguf.GGUFValueType.ARRAY, sub_type=_ARRAY_ITEM_TYPES[value.dtype])
    else:
        raise TypeError(f"{key}: {type(value)}")


def _add_tokenizer(w: gguf.GGUFWriter, kind: str, n_vocab: int, extra_merges: int = 0) -> None:
    if kind == "llama":
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        tokens += [f"\u2581t{i}" for i in range(n_vocab - len(tokens))]
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * 259 + [-float(k) for k in range(n_vocab - 259)])
        w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259))
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        return
    if kind == "bert":  # WordPiece: [PAD] [UNK] [CLS] [SEP] [MASK], word-start pieces, fillers
        letters = "abcdefghijklmnopqrstuvwxyz"
        tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"\u2581{c}" for c in letters] + list(letters)
        tokens += [f"[unused{i}]" for i in range(n_vocab - len(tokens))]
        w.add_tokenizer_model("bert")
        w.add_token_list(tokens)
        w.add_token_types([3, 2, 3, 3, 3] + [1] * (n_vocab - 5))
        w.add_token_type_count(2)
        w.add_pad_token_id(0)
        w.add_unk_token_id(1)
        w.add_bos_token_id(2)
        w.add_sep_token_id(3)
        w.add_mask_token_id(4)
        return
    tokens = [f"b{i}" for i in range(256)]
    merges = []
    letters = "abcdefghijklmnopqrstuvwxyz"
    for a in letters:
        for b in letters:
            if len(tokens) < n_vocab - 1:
                tokens.append(a + b)
                merges.append(f"{a} {b}")
    tokens += [f"<filler_{i}>" for i in range(n_vocab - 1 - len(tokens))] + ["<|endoftext|>"]
    merges += [f"<filler_{i % n_vocab} ab{i}" for i in range(extra_merges)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * (n_vocab - 1) + [3])
    w.add_token_merges(merges)
    w.add_eos_token_id(n_vocab - 1)


def write_model(model: Model, path: str | os.PathLike[str]) -> int:
    """Write `model` to `path` with a sparse data region; returns the file's size."""
    w = _header_writer(model, path)
    data_bytes = sum(round_up(tensor_nbytes(ne, qtype), ALIGNMENT) for _, ne, qtype in model.tensors)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    data_offset = round_up(os.path.getsize(path), ALIGNMENT)
    os.truncate(path, data_offset + data_bytes)
    if model.seed is not None:
        _fill_random(model, path, data_offset)
    return data_offset + data_bytes


def write_split_model(model: Model, path: str | os.PathLike[str], max_tensors: int) -> list[Path]:
    """Write `model` as the converter's `--split-max-tensors` does: `name-00001-of-0000N.gguf` beside `path`, the
    first with every key, each with its own tensor infos and the split keys (`split.no`, `split.count`,
    `split.tensors.count`), data regions sparse. Returns the files, first split first."""
    w = _header_writer(model, path, max_tensors)
    files = w.format_shard_names(Path(path))
    w.write_header_to_file(Path(path))
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    for file, tensors in zip(files, w.tensors, strict=True):
        data_offset = round_up(os.path.getsize(file), ALIGNMENT)
        os.truncate(file, data_offset + sum(round_up(t.nbytes, ALIGNMENT) for t in tensors.values()))
    return files


def _header_writer(model: Model, path: str | os.PathLike[str], max_tensors: int = 0) -> gguf.GGUFWriter:
    """A writer holding the model's keys, tokenizer and tensor infos (split every `max_tensors` tensors)."""
    w = gguf.GGUFWriter(str(path), model.arch, split_max_tensors=max_tensors)
    for key, value in model.kv.items():
        _add_kv(w, key, value)
    if model.vocab:
        _add_tokenizer(w, model.tokenizer, model.vocab, model.merges)
    for name, ne, qtype in model.tensors:
        nbytes = tensor_nbytes(ne, qtype)
        shape = tuple(reversed(ne))
        byte_shape = shape[:-1] + (nbytes // max(1, int(np.prod(shape[:-1]))),)
        w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)
    return w


def _random_data(rng: np.random.Generator, name: str, ne: tuple[int, ...], qtype: QT) -> bytes:
    """One tensor's bytes: norm weights 1, everything else N(0, 0.02) (finite activations for a real decode),
    as the ground-truth harness's make_models.py writes them."""
    shape = tuple(reversed(ne))
    if "norm" in name:
        values = np.ones(shape, dtype=np.float32)
    else:
        values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    if qtype == QT.F32:
        return values.tobytes()
    if qtype == QT.F16:
        return values.astype(np.float16).tobytes()
    return gguf.quants.quantize(values, qtype).tobytes()


def _fill_random(model: Model, path: str | os.PathLike[str], data_offset: int) -> None:
    """Write seeded random data into the data region of a file write_model laid out (same tensor order, each
    tensor at a multiple of ALIGNMENT): the header is byte for byte the sparse file's."""
    rng = np.random.default_rng(model.seed)
    offset = data_offset
    with open(path, "r+b") as f:
        for name, ne, qtype in model.tensors:
            data = _random_data(rng, name, ne, qtype)
            assert len(data) == tensor_nbytes(ne, qtype), name
            f.seek(offset)
            f.write(data)
            offset += round_up(len(data), ALIGNMENT)


# --- building blocks ------------------------------------------------------------------------------


def transformer_kv(
    m: Model,
    *,
    ctx: int,
    embd: int,
    layers: int,
    ff: int | list[int] | None,
    heads: int | list[int],
    heads_kv: int | list[int] | None,
    head_dim: int | None = None,
    name: str = "",
    file_type: int | None = None,
    rope_base: float | None = 10000.0,
    eps: float | None = 1e-6,
) -> None:
    """The common hyperparameters; a list is a per-layer array, None leaves the key out."""
    if name:
        m.kv["general.name"] = name
    if file_type is not None:
        m.kv["general.file_type"] = int(file_type)
    m.arch_kv(context_length=ctx, embedding_length=embd, block_count=layers)
    if ff is not None:
        m.arch_kv(feed_forward_length=ff)
    m.arch_kv(attention__head_count=heads)
    if heads_kv is not None:
        m.arch_kv(attention__head_count_kv=heads_kv)
    if head_dim is not None:
        m.arch_kv(attention__key_length=head_dim, attention__value_length=head_dim)
    if rope_base is not None:
        m.arch_kv(rope__freq_base=rope_base)
    if eps is not None:
        m.arch_kv(attention__layer_norm_rms_epsilon=eps)


def attention(
    m: Model,
    i: int,
    embd: int,
    heads: int,
    heads_kv: int,
    head_dim: int,
    qtype: QT,
    qk_norm: bool = False,
    post_norm: bool = False,
    *,
    norm: bool = True,
    fused: bool = False,
    bias: bool = False,
    out_bias: bool = False,
    gated: bool = False,
    v_head_dim: int | None = None,
) -> None:
    """fused: one attn_qkv matrix; bias: q/k/v biases; gated: a Q projection twice as wide (Q + output gate);
    v_head_dim: a value head size other than head_dim (the K head size)."""
    v_head_dim = head_dim if v_head_dim is None else v_head_dim
    q_width, k_width, v_width = heads * head_dim * (2 if gated else 1), heads_kv * head_dim, heads_kv * v_head_dim
    if norm:
        m.tensor(f"blk.{i}.attn_norm.weight", [embd], QT.F32)
    if fused:
        m.tensor(f"blk.{i}.attn_qkv.weight", [embd, q_width + k_width + v_width], qtype)
    else:
        for part, width in (("q", q_width), ("k", k_width), ("v", v_width)):
            m.tensor(f"blk.{i}.attn_{part}.weight", [embd, width], qtype)
            if bias:
                m.tensor(f"blk.{i}.attn_{part}.bias", [width], QT.F32)
    m.tensor(f"blk.{i}.attn_output.weight", [heads * v_head_dim, embd], qtype)
    if out_bias:
        m.tensor(f"blk.{i}.attn_output.bias", [embd], QT.F32)
    if qk_norm:
        m.tensor(f"blk.{i}.attn_q_norm.weight", [head_dim], QT.F32)
        m.tensor(f"blk.{i}.attn_k_norm.weight", [head_dim], QT.F32)
    if post_norm:
        m.tensor(f"blk.{i}.post_attention_norm.weight", [embd], QT.F32)


def feed_forward(
    m: Model, i: int, embd: int, ff: int, qtype: QT, post_norm: bool = False, *, norm: bool = True, gate: bool = True
) -> None:
    if norm:
        m.tensor(f"blk.{i}.ffn_norm.weight", [embd], QT.F32)
    if gate:
        m.tensor(f"blk.{i}.ffn_gate.weight", [embd, ff], qtype)
    m.tensor(f"blk.{i}.ffn_up.weight", [embd, ff], qtype)
    m.tensor(f"blk.{i}.ffn_down.weight", [ff, embd], qtype)
    if post_norm:
        m.tensor(f"blk.{i}.post_ffw_norm.weight", [embd], QT.F32)


def fused_gate_up(m: Model) -> Model:
    """`m` with each layer's experts' gate and up in one ffn_gate_up_exps in the gate's place (the converters'
    --fuse-gate-up-exps)."""
    tensors = []
    for name, ne, qtype in m.tensors:
        if name.endswith("ffn_up_exps.weight"):
            continue
        if name.endswith("ffn_gate_exps.weight"):
            name, ne = name.replace("ffn_gate_exps", "ffn_gate_up_exps"), (ne[0], 2 * ne[1], *ne[2:])
        tensors.append((name, ne, qtype))
    m.tensors = tensors
    return m


def moe_feed_forward(
    m: Model,
    i: int,
    embd: int,
    expert_ff: int,
    experts: int,
    qtype: QT,
    *,
    norm: bool = True,
    gate: bool = True,
    shared_ff: int = 0,
    shared_gate_inp: bool = False,
    probs_bias: bool = False,
    fused_gate_up: bool = False,
) -> None:
    """shared_ff > 0 adds a shared expert of that width (shared_gate_inp: with its own gate input);
    probs_bias adds the router's exp_probs_b bias; fused_gate_up writes the experts' gate and up as one
    ffn_gate_up_exps (the converters' --fuse-gate-up-exps, Mistral 4's stacked gate_up_proj)."""
    if norm:
        m.tensor(f"blk.{i}.ffn_norm.weight", [embd], QT.F32)
    m.tensor(f"blk.{i}.ffn_gate_inp.weight", [embd, experts], QT.F32)
    if fused_gate_up:
        m.tensor(f"blk.{i}.ffn_gate_up_exps.weight", [embd, 2 * expert_ff, experts], qtype)
    elif gate:
        m.tensor(f"blk.{i}.ffn_gate_exps.weight", [embd, expert_ff, experts], qtype)
    if not fused_gate_up:
        m.tensor(f"blk.{i}.ffn_up_exps.weight", [embd, expert_ff, experts], qtype)
    m.tensor(f"blk.{i}.ffn_down_exps.weight", [expert_ff, embd, experts], qtype)
    if probs_bias:
        m.tensor(f"blk.{i}.exp_probs_b.bias", [experts], QT.F32)
    if shared_ff:
        if shared_gate_inp:
            m.tensor(f"blk.{i}.ffn_gate_inp_shexp.weight", [embd], QT.F32)
        if gate:
            m.tensor(f"blk.{i}.ffn_gate_shexp.weight", [embd, shared_ff], qtype)
        m.tensor(f"blk.{i}.ffn_up_shexp.weight", [embd, shared_ff], qtype)
        m.tensor(f"blk.{i}.ffn_down_shexp.weight", [shared_ff, embd], qtype)


def mamba2_block(
    m: Model,
    i: int,
    embd: int,
    d_inner: int,
    d_state: int,
    groups: int,
    heads: int,
    d_conv: int,
    qtype: QT,
    ssm_norm: bool = True,
) -> None:
    """A Mamba-2 mixer (ssm_norm False: no grouped norm, as the published Falcon-H1 files)."""
    conv_dim = d_inner + 2 * groups * d_state
    m.tensor(f"blk.{i}.attn_norm.weight", [embd], QT.F32)
    m.tensor(f"blk.{i}.ssm_in.weight", [embd, 2 * d_inner + 2 * groups * d_state + heads], qtype)
    m.tensor(f"blk.{i}.ssm_conv1d.weight", [d_conv, conv_dim], QT.F32)
    m.tensor(f"blk.{i}.ssm_conv1d.bias", [conv_dim], QT.F32)
    m.tensor(f"blk.{i}.ssm_dt.bias", [heads], QT.F32)
    m.tensor(f"blk.{i}.ssm_a", [1, heads], QT.F32)
    m.tensor(f"blk.{i}.ssm_d", [1, heads], QT.F32)
    if ssm_norm:
        m.tensor(f"blk.{i}.ssm_norm.weight", [d_inner // groups, groups], QT.F32)
    m.tensor(f"blk.{i}.ssm_out.weight", [d_inner, embd], qtype)


def ssm_kv(m: Model, *, d_conv: int, d_inner: int, d_state: int, heads: int, groups: int | None) -> None:
    """groups=None leaves ssm.group_count out (Mamba-1 models have no groups)."""
    m.arch_kv(ssm__conv_kernel=d_conv, ssm__inner_size=d_inner, ssm__state_size=d_state, ssm__time_step_rank=heads)
    if groups is not None:
        m.arch_kv(ssm__group_count=groups)


def nextn_tensors(m: Model, i: int, embd: int, qtype: QT = QT.F16, shared_head_norm: bool = True) -> None:
    """The fusion tensors of a NextN / MTP block i: eh_proj, enorm, hnorm and (shared_head_norm) its head norm."""
    m.tensor(f"blk.{i}.nextn.eh_proj.weight", [2 * embd, embd], qtype)
    for norm in ("enorm", "hnorm") + (("shared_head_norm",) if shared_head_norm else ()):
        m.tensor(f"blk.{i}.nextn.{norm}.weight", [embd], QT.F32)


def embeddings(m: Model, embd: int, vocab: int, qtype: QT, tied: bool) -> None:
    m.tensor("token_embd.weight", [embd, vocab], qtype)
    m.tensor("output_norm.weight", [embd], QT.F32)
    if not tied:
        m.tensor("output.weight", [embd, vocab], qtype)


def with_vocab(m: Model, vocab: int) -> Model:
    """`m` with a vocabulary of `vocab` tokens: its tokenizer and its embedding and output matrices (llama.cpp
    refuses a token_embd whose rows the vocabulary contradicts)."""
    m.vocab = vocab
    m.tensors = [
        (name, (ne[0], vocab), qtype) if name in ("token_embd.weight", "output.weight") else (name, ne, qtype)
        for name, ne, qtype in m.tensors
    ]
    return m


def layer_norm(m: Model, prefix: str, n: int) -> None:
    """A LayerNorm: `<prefix>.weight` and `<prefix>.bias`."""
    m.tensor(f"{prefix}.weight", [n], QT.F32)
    m.tensor(f"{prefix}.bias", [n], QT.F32)


def mla_kv(m: Model, *, kv_lora: int, rope: int, k_head: int, v_head: int) -> None:
    """Multi-head latent attention keys as MLA conversions write them: the cache holds one "head" of
    kv_lora + rope (key_length / value_length), the per-head sizes are the *_mla keys."""
    m.arch_kv(
        attention__kv_lora_rank=kv_lora,
        attention__key_length=kv_lora + rope,
        attention__value_length=kv_lora,
        attention__key_length_mla=k_head,
        attention__value_length_mla=v_head,
        rope__dimension_count=rope,
    )


def mla_attention(
    m: Model,
    i: int,
    embd: int,
    heads: int,
    kv_lora: int,
    rope: int,
    k_head: int,
    v_head: int,
    qtype: QT,
    *,
    q_lora: int = 0,
    split_kv_b: bool = True,
) -> None:
    """DeepSeek-style latent attention (no attn_norm): Q (low-rank when q_lora), the latent kv_a_mqa,
    its up-projection (split attn_k_b / attn_v_b, or the legacy fused attn_kv_b) and the output."""
    if q_lora:
        m.tensor(f"blk.{i}.attn_q_a.weight", [embd, q_lora], qtype)
        m.tensor(f"blk.{i}.attn_q_a_norm.weight", [q_lora], QT.F32)
        m.tensor(f"blk.{i}.attn_q_b.weight", [q_lora, heads * k_head], qtype)
    else:
        m.tensor(f"blk.{i}.attn_q.weight", [embd, heads * k_head], qtype)
    m.tensor(f"blk.{i}.attn_kv_a_mqa.weight", [embd, kv_lora + rope], qtype)
    m.tensor(f"blk.{i}.attn_kv_a_norm.weight", [kv_lora], QT.F32)
    if split_kv_b:
        m.tensor(f"blk.{i}.attn_k_b.weight", [k_head - rope, kv_lora, heads], qtype)
        m.tensor(f"blk.{i}.attn_v_b.weight", [kv_lora, v_head, heads], qtype)
    else:
        m.tensor(f"blk.{i}.attn_kv_b.weight", [kv_lora, heads * (k_head - rope + v_head)], qtype)
    m.tensor(f"blk.{i}.attn_output.weight", [heads * v_head, embd], qtype)


_FILE_TYPES = {
    QT.F16: gguf.LlamaFileType.MOSTLY_F16,
    QT.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
    QT.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0,
    QT.Q4_K: gguf.LlamaFileType.MOSTLY_Q4_K_M,
}


# --- the public ground-truth set (tiny; shapes of shared/groundtruth/make_models.py) ---------------


def llama_gqa(wtype: QT = QT.F16) -> Model:
    m = Model("llama", vocab=8192)
    transformer_kv(
        m,
        ctx=8192,
        embd=256,
        layers=4,
        ff=768,
        heads=8,
        heads_kv=2,
        rope_base=500000.0,
        eps=1e-5,
        name=f"tiny-llama-gqa-{wtype.name.lower()}",
        file_type=_FILE_TYPES[wtype],
    )
    m.arch_kv(rope__dimension_count=32, vocab_size=8192)
    embeddings(m, 256, 8192, wtype, tied=False)
    for i in range(4):
        attention(m, i, 256, 8, 2, 32, wtype)
        feed_forward(m, i, 256, 768, wtype)
    return m


def qwen3() -> Model:
    m = Model("qwen3", vocab=8192, tokenizer="gpt2")
    transformer_kv(
        m,
        ctx=32768,
        embd=256,
        layers=4,
        ff=768,
        heads=8,
        heads_kv=4,
        head_dim=64,
        rope_base=1000000.0,
        name="tiny-qwen3",
        file_type=gguf.LlamaFileType.MOSTLY_F16,
    )
    embeddings(m, 256, 8192, QT.F16, tied=True)
    for i in range(4):
        attention(m, i, 256, 8, 4, 64, QT.F16, qk_norm=True)
        feed_forward(m, i, 256, 768, QT.F16)
    return m


def gemma3_swa() -> Model:
    m = Model("gemma3", vocab=8192)
    transformer_kv(
        m,
        ctx=32768,
        embd=256,
        layers=6,
        ff=768,
        heads=4,
        heads_kv=1,
        head_dim=64,
        rope_base=1000000.0,
        name="tiny-gemma3-swa",
        file_type=gguf.LlamaFileType.MOSTLY_F16,
    )
    m.arch_kv(attention__sliding_window=512, attention__sliding_window_pattern=6, rope__freq_base_swa=10000.0)
    embeddings(m, 256, 8192, QT.F16, tied=True)
    for i in range(6):
        attention(m, i, 256, 4, 1, 64, QT.F16, qk_norm=True, post_norm=True)
        feed_forward(m, i, 256, 768, QT.F16, post_norm=True)
    return m


def gemma2_swa() -> Model:
    m = Model("gemma2", vocab=8192)
    transformer_kv(
        m,
        ctx=8192,
        embd=256,
        layers=4,
        ff=768,
        heads=4,
        heads_kv=2,
        head_dim=64,
        name="tiny-gemma2-swa",
        file_type=gguf.LlamaFileType.MOSTLY_F16,
    )
    m.arch_kv(attention__sliding_window=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    embeddings(m, 256, 8192, QT.F16, tied=True)
    for i in range(4):
        attention(m, i, 256, 4, 2, 64, QT.F16, post_norm=True)
        feed_forward(m, i, 256, 768, QT.F16, post_norm=True)
    return m


def qwen3moe() -> Model:
    m = Model("qwen3moe", vocab=8192, tokenizer="gpt2")
    transformer_kv(
        m,
        ctx=32768,
        embd=256,
        layers=4,
        ff=768,
        heads=8,
        heads_kv=2,
        head_dim=64,
        rope_base=1000000.0,
        name="tiny-qwen3moe",
        file_type=gguf.LlamaFileType.MOSTLY_F16,
    )
    m.arch_kv(expert_count=8, expert_used_count=2, expert_feed_forward_length=256)
    embeddings(m, 256, 8192, QT.F16, tied=False)
    for i in range(4):
        attention(m, i, 256, 8, 2, 64, QT.F16, qk_norm=True)
        moe_feed_forward(m, i, 256, 256, 8, QT.F16)
    return m


def mamba2() -> Model:
    m = Model("mamba2", vocab=8192)
    m.kv.update({"general.name": "tiny-mamba2", "general.file_type": int(gguf.LlamaFileType.MOSTLY_F16)})
    m.arch_kv(
        context_length=1048576,
        embedding_length=256,
        block_count=4,
        feed_forward_length=0,
        attention__head_count=0,
        attention__layer_norm_rms_epsilon=1e-5,
    )
    ssm_kv(m, d_conv=4, d_inner=512, d_state=64, heads=8, groups=1)
    embeddings(m, 256, 8192, QT.F16, tied=False)
    for i in range(4):
        mamba2_block(m, i, 256, 512, 64, 1, 8, 4, QT.F16)
    return m


def granitehybrid() -> Model:
    heads_kv = [0, 0, 2, 0, 0, 2]  # 0 marks a mamba2 layer
    m = Model("granitehybrid", vocab=8192)
    transformer_kv(
        m,
        ctx=131072,
        embd=256,
        layers=6,
        ff=512,
        heads=8,
        heads_kv=heads_kv,
        eps=1e-5,
        name="tiny-granitehybrid",
        file_type=gguf.LlamaFileType.MOSTLY_F16,
    )
    ssm_kv(m, d_conv=4, d_inner=512, d_state=64, heads=8, groups=1)
    m.arch_kv(logit_scale=1.0, residual_scale=1.0, embedding_scale=1.0, attention__scale=1.0 / 32)
    embeddings(m, 256, 8192, QT.F16, tied=True)
    for i, kv in enumerate(heads_kv):
        if kv == 0:
            mamba2_block(m, i, 256, 512, 64, 1, 8, 4, QT.F16)
        else:
            attention(m, i, 256, 8, kv, 32, QT.F16)
        feed_forward(m, i, 256, 512, QT.F16)
    return m


def lfm2() -> Model:
    heads_kv = [0, 0, 2, 0, 0, 2]  # 0 marks a short-conv layer
    m = Model("lfm2", vocab=8192)
    transformer_kv(
        m,
        ctx=128000,
        embd=256,
        layers=6,
        ff=768,
        heads=8,
        heads_kv=heads_kv,
        rope_base=1000000.0,
        eps=1e-5,
        name="tiny-lfm2",
        file_type=gguf.LlamaFileType.MOSTLY_F16,
    )
    m.arch_kv(shortconv__l_cache=3, vocab_size=8192)
    m.tensor("token_embd.weight", [256, 8192], QT.F16)
    m.tensor("token_embd_norm.weight", [256], QT.F32)
    for i, kv in enumerate(heads_kv):
        m.tensor(f"blk.{i}.attn_norm.weight", [256], QT.F32)
        if kv == 0:
            m.tensor(f"blk.{i}.shortconv.conv.weight", [3, 256], QT.F32)
            m.tensor(f"blk.{i}.shortconv.in_proj.weight", [256, 768], QT.F16)
            m.tensor(f"blk.{i}.shortconv.out_proj.weight", [256, 256], QT.F16)
        else:
            m.tensor(f"blk.{i}.attn_q.weight", [256, 256], QT.F16)
            m.tensor(f"blk.{i}.attn_k.weight", [256, kv * 32], QT.F16)
            m.tensor(f"blk.{i}.attn_v.weight", [256, kv * 32], QT.F16)
            m.tensor(f"blk.{i}.attn_output.weight", [256, 256], QT.F16)
            m.tensor(f"blk.{i}.attn_q_norm.weight", [32], QT.F32)
            m.tensor(f"blk.{i}.attn_k_norm.weight", [32], QT.F32)
        feed_forward(m, i, 256, 768, QT.F16)
    return m


PUBLIC_SET: dict[str, Callable[[], Model]] = {
    "llama-gqa-f16": lambda: llama_gqa(QT.F16),
    "llama-gqa-q8_0": lambda: llama_gqa(QT.Q8_0),
    "llama-gqa-q4_0": lambda: llama_gqa(QT.Q4_0),
    "qwen3-f16": qwen3,
    "gemma3-swa-f16": gemma3_swa,
    "gemma2-swa-f16": gemma2_swa,
    "qwen3moe-f16": qwen3moe,
    "mamba2-f16": mamba2,
    "granitehybrid-f16": granitehybrid,
    "lfm2-f16": lfm2,
}


# --- real-scale shapes (published dimensions; sparse, so a 4-17 GB file costs no disk) -------------


def llama31_8b(wtype: QT = QT.Q4_0) -> Model:
    m = Model("llama", vocab=128256)
    transformer_kv(
        m,
        ctx=131072,
        embd=4096,
        layers=32,
        ff=14336,
        heads=32,
        heads_kv=8,
        rope_base=500000.0,
        eps=1e-5,
        name="llama-3.1-8b-shape",
    )
    m.arch_kv(rope__dimension_count=128, vocab_size=128256)
    embeddings(m, 4096, 128256, wtype, tied=False)
    for i in range(32):
        attention(m, i, 4096, 32, 8, 128, wtype)
        feed_forward(m, i, 4096, 14336, wtype)
    return m


def gemma3_4b(wtype: QT = QT.Q4_0) -> Model:
    m = Model("gemma3", vocab=262144)
    transformer_kv(
        m,
        ctx=131072,
        embd=2560,
        layers=34,
        ff=10240,
        heads=8,
        heads_kv=4,
        head_dim=256,
        rope_base=1000000.0,
        name="gemma-3-4b-shape",
    )
    m.arch_kv(attention__sliding_window=1024, attention__sliding_window_pattern=6, rope__freq_base_swa=10000.0)
    embeddings(m, 2560, 262144, wtype, tied=True)
    for i in range(34):
        attention(m, i, 2560, 8, 4, 256, wtype, qk_norm=True, post_norm=True)
        feed_forward(m, i, 2560, 10240, wtype, post_norm=True)
    return m


def qwen3_30b_a3b(wtype: QT = QT.Q4_0) -> Model:
    m = Model("qwen3moe", vocab=151936, tokenizer="gpt2")
    transformer_kv(
        m,
        ctx=40960,
        embd=2048,
        layers=48,
        ff=6144,
        heads=32,
        heads_kv=4,
        head_dim=128,
        rope_base=1000000.0,
        name="qwen3-30b-a3b-shape",
    )
    m.arch_kv(expert_count=128, expert_used_count=8, expert_feed_forward_length=768)
    embeddings(m, 2048, 151936, wtype, tied=False)
    for i in range(48):
        attention(m, i, 2048, 32, 4, 128, wtype, qk_norm=True)
        moe_feed_forward(m, i, 2048, 768, 128, wtype)
    return m


def mamba2_2_7b(wtype: QT = QT.F16) -> Model:
    m = Model("mamba2", vocab=50288)
    m.kv["general.name"] = "mamba2-2.7b-shape"
    m.arch_kv(
        context_length=1048576,
        embedding_length=2560,
        block_count=64,
        feed_forward_length=0,
        attention__head_count=0,
        attention__layer_norm_rms_epsilon=1e-5,
    )
    ssm_kv(m, d_conv=4, d_inner=5120, d_state=128, heads=80, groups=1)
    embeddings(m, 2560, 50288, wtype, tied=True)
    for i in range(64):
        mamba2_block(m, i, 2560, 5120, 128, 1, 80, 4, wtype)
    return m


SHAPE_SET: dict[str, Callable[[], Model]] = {
    "llama31-8b-shape-q4_0": llama31_8b,
    "gemma3-4b-shape-q4_0": gemma3_4b,
    "qwen3-30b-a3b-shape-q4_0": qwen3_30b_a3b,
    "mamba2-2.7b-shape-f16": mamba2_2_7b,
    # a tied Q2_K embedding: AVX-512 variants (skylakex) repack Q2_K and keep the output copy, haswell does not
    "gemma3-4b-shape-q2_k": lambda: gemma3_4b(QT.Q2_K),
}


def main(argv: list[str]) -> int:
    """`python -m tools.gguf_writers DIR`: write the public set into DIR (for a live server to answer about)."""
    directory = argv[0]
    os.makedirs(directory, exist_ok=True)
    for name, build in PUBLIC_SET.items():
        write_model(build(), os.path.join(directory, f"{name}.gguf"))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
