"""The hyperparameter record: read once from a header, with llama_hparams' defaults, and refusing a value only
where a rule reads it, as llama.cpp's getters throw only for the keys an architecture's loader asks for.

Expected values are written out by hand from llama.cpp's llama_hparams defaults and the test headers' own keys.
"""

from __future__ import annotations

import pytest

from memfit.estimator.architectures import derive_layout
from memfit.estimator.errors import EvidenceError
from memfit.estimator.gguf_file import Value
from memfit.estimator.hparams import HParams, Layers
from memfit.estimator.vocabulary import Limit
from tools.accuracy import model_writers


def _metadata(writer: str) -> dict:
    """A recorded test model's header, as the reader gives it (arrays as tuples)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in model_writers()[writer]().kv.items()}


def test_absent_keys_take_llama_hparams_defaults() -> None:
    hp = HParams({"llama.block_count": 3}, "llama")
    assert (hp.n_layer, hp.n_embd, hp.n_expert, hp.n_expert_used, hp.n_ff_exp) == (3, 0, 0, 0, 0)
    assert hp.token_shift_count == 2  # llama_hparams::token_shift_count
    assert hp.n_moe_layer_step == 1
    assert hp.causal_attn is True and hp.rope_finetuned is True and hp.expert_weights_norm is False
    assert hp.n_head_arr == (0, 0, 0) and hp.n_ff_arr == (0, 0, 0)
    # defaults that depend on other fields are left to the rules that know them
    assert hp.n_head_kv_arr is None and hp.n_rot is None and hp.n_swa is None and hp.full_attn_interval is None
    assert hp.recurrent_layer_arr is None and hp.expert_weights_scale is None


def test_fields_hold_the_files_values() -> None:
    hp = HParams(_metadata("mamba"), "mamba")
    assert (hp.n_layer, hp.n_embd, hp.n_ctx_train) == (4, 256, 1048576)
    assert (hp.ssm_d_conv, hp.ssm_d_inner, hp.ssm_d_state, hp.ssm_dt_rank) == (4, 512, 16, 16)
    assert hp.f_norm_rms_eps == pytest.approx(1e-05)
    assert hp.has(HParams.ssm_d_conv) and not hp.has(HParams.ssm_n_group)


def test_per_layer_keys_take_one_value_or_one_per_layer() -> None:
    one = HParams({"llama.block_count": 3, "llama.attention.head_count_kv": 4}, "llama")
    each = HParams({"llama.block_count": 3, "llama.attention.head_count_kv": (4, 0, 2)}, "llama")
    assert (one.n_head_kv_arr, each.n_head_kv_arr) == ((4, 4, 4), (4, 0, 2))


def test_a_malformed_key_no_rule_of_the_architecture_reads_leaves_its_layout() -> None:
    """llama.cpp loads a granite model whatever its ssm.*, wkv.* or expert_gating_func keys hold: its loader never
    asks (memfit read the ssm.* sizes of every model until this test)."""
    metadata = _metadata("granite")
    hostile = metadata | {
        "granite.ssm.conv_kernel": "wide",
        "granite.wkv.head_size": "wide",
        "granite.expert_gating_func": -1,
    }
    assert derive_layout(hostile, "granite") == derive_layout(metadata, "granite")


def test_a_malformed_key_the_architecture_reads_refuses_it() -> None:
    metadata = _metadata("mamba") | {"mamba.ssm.conv_kernel": "wide"}
    with pytest.raises(EvidenceError) as refused:
        derive_layout(metadata, "mamba")
    assert (refused.value.limit, str(refused.value)) == (
        Limit.ARTIFACT_UNREADABLE,
        "mamba.ssm.conv_kernel is not a non-negative integer",
    )


def test_a_required_key_the_file_lacks_is_named() -> None:
    hp = HParams({"deepseek2.block_count": 4, "deepseek2.attention.q_lora_rank": 0}, "deepseek2")
    assert hp.required(HParams.n_lora_q) == 0
    with pytest.raises(EvidenceError, match=r"^deepseek2\.attention\.kv_lora_rank is missing$"):
        hp.required(HParams.n_lora_kv)


def test_a_per_layer_array_of_another_length_is_not_uniform() -> None:
    hp = HParams({"llama.block_count": 3, "llama.embedding_length": 64, "llama.attention.head_count": (8, 8)}, "llama")
    with pytest.raises(EvidenceError) as refused:
        Layers(hp)
    assert (refused.value.limit, str(refused.value)) == (
        Limit.ARTIFACT_UNREADABLE,
        "llama.attention.head_count has 2 entries for 3 layers",
    )


@pytest.mark.parametrize("block_count", [None, 0, 513, "four"], ids=["missing", "zero", "past-max", "string"])
def test_block_count_is_read_first_and_refused_at_once(block_count: int | str | None) -> None:
    metadata: dict[str, Value] = {} if block_count is None else {"llama.block_count": block_count}
    with pytest.raises(EvidenceError):
        HParams(metadata, "llama")
