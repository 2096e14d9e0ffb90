"""The workload flags: llama.cpp's names and values mean what they mean to llama.cpp, and a value no request
could mean is a usage error in words (exit 2), never an answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfit.cli import main
from memfit.generated.models import GpuLayers2, GpuLayers3, WireFitVerdictBatch, WireFitWorkload


def _workload(capsys: pytest.CaptureFixture[str], models: Path, *flags: str) -> WireFitWorkload:
    code = main(["fit", "qwen3-f16", *flags, "--json", "--models", str(models), "--no-usual-dirs"])
    (result,) = WireFitVerdictBatch.model_validate_json(capsys.readouterr().out).results
    assert code in (0, 3, 4, 5)
    return result.estimate.workload


def test_llama_cpp_flags_ask_what_memfit_flags_ask(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-c is the whole context, which llama.cpp divides among -np sequences: -c 64k -np 2 is 32,768 per stream."""
    ours = _workload(
        capsys,
        public_models,
        *("--tokens", "32768", "--streams", "2", "--key-bytes", "1", "--value-bytes", "2"),
        *("--flash-attention", "off", "--ubatch", "1024", "--kv-unified"),
    )
    llama_cpp = _workload(
        capsys,
        public_models,
        *("-c", "64k", "-np", "2", "-ctk", "q8_0", "-ctv", "f16", "-fa", "off", "-ub", "1024", "-kvu"),
    )
    assert llama_cpp == ours
    assert (ours.allocated_tokens, ours.streams, ours.key_element_bytes, ours.value_element_bytes) == (32768, 2, 1, 2)
    assert (ours.flash_attention, ours.ubatch_tokens, ours.kv_unified) == ("off", 1024, True)


def test_mtp_is_the_requests(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--mtp is the request's multiTokenPrediction (llama-server's --spec-type draft-mtp), echoed; false by
    default."""
    assert _workload(capsys, public_models, "--mtp").multi_token_prediction is True
    assert _workload(capsys, public_models).multi_token_prediction is False


def test_draft_tokens_are_the_requests(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--draft-tokens is the request's draftTokens (the draft a slot's verification carries), echoed; 0 by default,
    llama-server's draft length 3 (common_params_speculative_draft::n_max) under --mtp, whose draft-mtp always
    drafts."""
    assert _workload(capsys, public_models, "--draft-tokens", "5").draft_tokens == 5
    assert _workload(capsys, public_models, "--mtp", "--draft-tokens", "0").draft_tokens == 0
    assert _workload(capsys, public_models, "--mtp").draft_tokens == 3
    assert _workload(capsys, public_models).draft_tokens == 0


def test_embedding_is_the_requests(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--embedding is the request's embeddings (llama-server serving embeddings), echoed; false by default
    (common_params::embedding = false)."""
    assert _workload(capsys, public_models, "--embedding").embeddings is True
    assert _workload(capsys, public_models).embeddings is False


def test_pooling_is_the_requests(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--pooling is the request's pooling (llama-server's --pooling), echoed; unspecified (null) by default
    (common_params::pooling_type = LLAMA_POOLING_TYPE_UNSPECIFIED), and --pooling alone leaves embeddings off."""
    pooled = _workload(capsys, public_models, "--pooling", "rank")
    assert (pooled.pooling, pooled.embeddings) == ("rank", False)
    assert _workload(capsys, public_models).pooling is None


def test_the_draft_contexts_settings_are_the_requests(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-ctkd/-ctvd (llama-server's --spec-draft-type-k/-v, alias --cache-type-k-draft/-v-draft) are the request's
    draftKeyElementBytes/draftValueElementBytes, --no-spec-draft-backend-sampling its draftBackendSampling false;
    echoed, f16 and on by default (common_params_speculative_draft)."""
    asked = _workload(capsys, public_models, "--mtp", "-ctkd", "q8_0", "--cache-type-v-draft", "f32")
    assert (asked.draft_key_element_bytes, asked.draft_value_element_bytes) == (1, 4)
    assert _workload(capsys, public_models, "--mtp", "--no-spec-draft-backend-sampling").draft_backend_sampling is False
    default = _workload(capsys, public_models, "--mtp")
    assert (default.draft_key_element_bytes, default.draft_value_element_bytes) == (2, 2)
    assert default.draft_backend_sampling is True


def test_a_pooling_llama_cpp_does_not_name_is_a_usage_error(
    public_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "qwen3-f16", "--pooling", "max", "--models", str(public_models), "--no-usual-dirs"])
    assert exit_.value.code == 2 and "--pooling" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["257", "-1", "three"])
def test_draft_tokens_past_the_contract_are_a_usage_error(
    value: str, public_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "qwen3-f16", "--draft-tokens", value, "--models", str(public_models), "--no-usual-dirs"])
    assert exit_.value.code == 2 and "--draft-tokens" in capsys.readouterr().err


def test_rollback_snapshots_are_the_requests(public_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--rollback-snapshots is the request's rollbackSnapshots (llama.cpp's n_rs_seq), echoed; 0 by default."""
    assert _workload(capsys, public_models, "--rollback-snapshots", "3").rollback_snapshots == 3
    assert _workload(capsys, public_models).rollback_snapshots == 0


@pytest.mark.parametrize(
    ("flags", "per_stream"),
    [
        (("-c", "10000", "-np", "3"), 3584),  # n_ctx 10,240 (padded to 256), / 3 = 3,413, padded again
        (("-c", "4096"), 4096),
        (("-c", "1000"), 1024),
        (("-c", "12k", "-np", "4", "--kv-unified"), 3072),  # one stream of 12,288 cells, counted as 3,072 x 4
        (("--tokens", "32k"), 32768),
        (("--tokens", "1M"), 1 << 20),
    ],
)
def test_context_as_llama_cpp_sizes_it(
    public_models: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], per_stream: int
) -> None:
    assert _workload(capsys, public_models, *flags).allocated_tokens == per_stream


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--tokens", "0"), "argument --tokens: must be 1 or more, got '0'"),
        (("--streams", "0"), "must be 1 or more, got '0'"),
        (("-np", "-2"), "expected a whole number such as 4096 or 32k, got '-2'"),
        (("--tokens", "32q"), "expected a whole number such as 4096 or 32k, got '32q'"),
        (("--tokens", "99999999999999999999"), "must be at most 9,223,372,036,854,775,807"),
        (("--ubatch", "0"), "must be 1 or more"),
        (("--mode", "gpu"), "invalid choice: 'gpu' (choose from 'fullGpu', 'cpuOffload')"),
        (("-ctk", "q4_0"), "llama.cpp takes q4_0, but memfit's API names only f32, f16, q8_0"),
        (("-ctv", "fp8"), "expected a cache type (f32, f16, q8_0), got 'fp8'"),
        (("-fa", "yes"), "invalid choice: 'yes'"),
        (("-c", "8192", "--tokens", "4096"), "not allowed with argument"),
        (("-ctk", "f16", "--key-bytes", "2"), "not allowed with argument"),
        (("--rollback-snapshots", "-1"), "expected a whole number from 0 to 256, got '-1'"),
        (("--rollback-snapshots", "257"), "expected a whole number from 0 to 256, got '257'"),
    ],
)
def test_a_value_no_request_could_mean_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], said: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["fit", "qwen3-f16", *flags, "--local", "--no-usual-dirs"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and said in err
    assert "_int64" not in err and "_positive" not in err  # no internal type names


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("-c", "100", "-np", "512"), "llama.cpp refuses -c 100 over 512 streams: under one cell each"),
        (("-c", "10000", "-np", "3", "-kvu"), "3 do not divide it (-c 10752 would; or give --tokens, per stream)"),
    ],
)
def test_a_context_llama_cpp_or_the_contract_cannot_take_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], said: str
) -> None:
    assert main(["fit", "qwen3-f16", *flags, "--local", "--no-usual-dirs"]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(("command", "example"), [("fit", "-c 64k -np 2 -ctk q8_0"), ("plan", "-c 64k -np 4 -fa off")])
def test_help_shows_examples(capsys: pytest.CaptureFixture[str], command: str, example: str) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and example in out and "exit codes" in out


def test_a_narrow_table_keeps_each_ids_quant(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 60 columns every quant of a repository once printed as `Qwen/…`, and the plan's table ran to 77
    columns: a quant is a block of two lines (its whole id and verdict, then its numbers), within the width; an id
    longer than the width is shortened in the middle, keeping the whole :QUANT."""
    mistral = "bartowski/mistralai_Mistral-Small-3.1-24B-Instruct-2503-GGUF"
    for repository, columns, shortened in (("Qwen/Qwen3-8B-GGUF", 60, False), (mistral, 50, True)):
        monkeypatch.setenv("COLUMNS", str(columns))
        code = main(["plan", repository, "--local", "--no-usual-dirs"])
        lines = capsys.readouterr().out.splitlines()
        assert code in (0, 3, 4, 5) and max(map(len, lines)) <= columns, lines
        blocks = lines[: next(k for k, line in enumerate(lines) if line.startswith("budget"))]
        ids = [line[2:].split("  ")[0] for line in blocks if not line.startswith("    ")]
        assert len(ids) >= 2 and len(set(ids)) == len(ids)
        assert all(("…:" in i) == shortened for i in ids), ids  # each ends with its whole :QUANT
        assert {i.rsplit(":", 1)[1] for i in ids} >= {"Q4_K_M", "Q8_0"}


def test_llama_cpp_placement_flags_are_the_requests_placement_fields(
    public_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = _workload(
        capsys,
        public_models,
        *("-ngl", "3", "--n-cpu-moe", "2", "-ot", "blk\\.0\\.=CPU,output=CUDA0", "-ot", "token_embd=CPU"),
        *("-ts", "3/1", "-sm", "none", "-mg", "1", "--no-kv-offload", "--cpu-moe", "--gpu", "cuda:24GiB"),
    )
    assert isinstance(workload.gpu_layers, GpuLayers2)
    assert (workload.gpu_layers.root, workload.n_cpu_moe, workload.split_mode, workload.main_gpu) == (3, 2, "none", 1)
    assert [o.root if hasattr(o, "root") else o for o in workload.tensor_overrides] == [
        "blk\\.0\\.=CPU",
        "output=CUDA0",
        "token_embd=CPU",
        "\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU",  # --cpu-moe: common/common.h's LLM_FFN_EXPS_REGEX to the CPU
    ]
    assert (workload.tensor_split, workload.kv_offload) == ([3.0, 1.0], False)
    everything = _workload(capsys, public_models, "-ngl", "all", "--gpu", "cuda:24GiB")
    assert isinstance(everything.gpu_layers, GpuLayers3)
    assert (everything.gpu_layers.value, everything.kv_offload, everything.tensor_overrides) == ("all", True, [])


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("-ngl", "auto"), "expected a number of layers or all, got 'auto'"),
        (("-ngl", "-1"), "expected a number of layers or all, got '-1'"),
        (("--n-cpu-moe", "x"), "expected a whole number of layers, got 'x'"),
        (("-ot", "exps"), "expected PATTERN=BUFFER_TYPE pairs (e.g. exps=CPU), got 'exps'"),
        (("-ts", "3,x"), "expected proportions such as 3,1, got '3,x'"),
        (("-sm", "graph"), "invalid choice: 'graph'"),
        (("--gpu", "rocm:24GiB"), "expected BACKEND:TOTAL[:FREE] with BACKEND one of cuda, metal, got 'rocm:24GiB'"),
        (("--gpu", "cuda:8GiB:9GiB"), "free memory above the total in 'cuda:8GiB:9GiB'"),
    ],
)
def test_placement_flags_no_request_could_mean_are_usage_errors(
    public_models: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], said: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "qwen3-f16", *flags, "--models", str(public_models), "--no-usual-dirs"])
    assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_memfit_gpus_in_the_environment_declares_the_gpus(
    public_models: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMFIT_GPUS", "cuda:24GiB,cuda:8GiB:6GiB")
    main(["fit", "qwen3-f16", "--json", "--models", str(public_models), "--no-usual-dirs"])
    (result,) = WireFitVerdictBatch.model_validate_json(capsys.readouterr().out).results
    assert [(d.name, d.declared, d.free_bytes) for d in result.devices[1:]] == [
        ("CUDA0", True, 24 << 30),
        ("CUDA1", True, 6 << 30),
    ]
    monkeypatch.setenv("MEMFIT_GPUS", "cuda:lots")
    assert main(["fit", "qwen3-f16", "--models", str(public_models), "--no-usual-dirs"]) == 2
    assert "MEMFIT_GPUS: expected a size such as 24GiB" in capsys.readouterr().err
