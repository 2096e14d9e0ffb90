"""The host CPU's features, the CPU variant ggml's loader picks from them, and what a variant decides: which
buffer type takes each matrix weight, AMX's packing, and a tied token embedding's second copy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from memfit.estimator.artifact import padded
from memfit.estimator.bounds import Part
from memfit.estimator.cpu_repack import CPU, Matrix, placement, tied_copy_bytes
from memfit.estimator.cpu_variant import ANY, BY_NAME, VARIANTS, resolve_variant
from memfit.estimator.machine import UNKNOWN_CPU, CpuArch, CpuFeatures
from memfit.readers.cpu_features import darwin_features, parse_cpuinfo, read_cpu_features
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tools.gguf_writers import gemma3_4b, llama31_8b, tensor_nbytes, write_model

X86_HEAD = """processor\t: {n}
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep sse sse2 ssse3 fma cx16 sse4_1 sse4_2 popcnt avx f16c {extra}
bugs\t\t: spectre_v1 spectre_v2
"""
AVX2 = "bmi1 avx2 smep bmi2 erms"
SKYLAKE_X = AVX2 + " avx512f avx512dq avx512cd avx512bw avx512vl"  # this project's own measuring host
CASCADE_LAKE = SKYLAKE_X + " avx512_vnni"
ICE_LAKE = CASCADE_LAKE + " avx512vbmi"
ZEN4 = ICE_LAKE + " avx512_bf16"
AMX = ZEN4 + " amx_bf16 avx512_fp16 amx_tile amx_int8"
ALDER_LAKE = AVX2 + " avx_vnni"
AMX_FEATURES = "SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VNNI AVX512_VBMI AVX512_BF16 AMX_TILE AMX_INT8"
ARM = """processor\t: {n}
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm {extra}
CPU implementer\t: 0x41
CPU part\t: 0xd0c
"""


def x86(*extras: str) -> str:
    return "\n".join(X86_HEAD.format(n=n, extra=extra) for n, extra in enumerate(extras))


def arm(*extras: str) -> str:
    return "\n".join(ARM.format(n=n, extra=extra) for n, extra in enumerate(extras))


@pytest.mark.parametrize(
    ("text", "machine", "features"),
    [
        (x86(AVX2, AVX2), "x86_64", "SSE42 AVX F16C FMA AVX2 BMI2"),
        (x86(SKYLAKE_X), "x86_64", "SSE42 AVX F16C FMA AVX2 BMI2 AVX512"),
        (x86(AMX), "AMD64", AMX_FEATURES),
        (x86(""), "x86_64", "SSE42 AVX F16C FMA"),
        (x86(SKYLAKE_X, AVX2), "x86_64", "SSE42 AVX F16C FMA AVX2 BMI2"),  # a feature counts only when all have it
        (x86(AVX2 + " avx512f avx512bw"), "x86_64", "SSE42 AVX F16C FMA AVX2 BMI2"),  # AVX512 needs F CD VL DQ BW
        (arm("asimddp i8mm sve", "asimddp i8mm sve"), "aarch64", "FP16_VECTOR_ARITHMETIC DOTPROD MATMUL_INT8 SVE"),
        (arm(""), "aarch64", "FP16_VECTOR_ARITHMETIC"),
    ],
)
def test_cpuinfo_names_ggml_features(text: str, machine: str, features: str) -> None:
    got = parse_cpuinfo(text, machine)
    assert got.features == frozenset(features.split()) and got.arch in (CpuArch.X86_64, CpuArch.ARM64)


@pytest.mark.parametrize(
    ("text", "machine"),
    [(x86(AVX2), "aarch64"), ("\x00\xff garbage\nflags without a colon\n:::\n", "x86_64"), ("", "x86_64")],
)
def test_cpuinfo_that_states_nothing_is_unknown(text: str, machine: str) -> None:
    assert parse_cpuinfo(text, machine) == UNKNOWN_CPU


def test_other_machines() -> None:
    assert parse_cpuinfo(x86(AVX2), "ppc64le").arch is CpuArch.OTHER
    assert resolve_variant("auto", parse_cpuinfo(x86(AVX2), "ppc64le")).variants[0].features == frozenset()
    assert parse_cpuinfo(x86(AVX2), "") == UNKNOWN_CPU


def test_macos_sysctl() -> None:
    def fake(values: dict[str, str]) -> Callable[[str], str | None]:
        return values.get

    m1 = {"hw.optional.arm.FEAT_DotProd": "1", "hw.optional.arm.FEAT_FP16": "1", "hw.optional.arm.FEAT_I8MM": "0"}
    assert darwin_features("arm64", fake(m1)).features == {"DOTPROD", "FP16_VECTOR_ARITHMETIC"}
    assert darwin_features("arm64", fake({})) == UNKNOWN_CPU
    intel = {
        "machdep.cpu.features": "FPU SSE SSE2 SSE3 FMA SSE4.1 SSE4.2 POPCNT AVX1.0 F16C",
        "machdep.cpu.leaf7_features": "RDWRFSGS TSC_THREAD_OFFSET SGX BMI1 AVX2 SMEP BMI2 ERMS INVPCID",
    }
    assert resolve_variant("auto", darwin_features("x86_64", fake(intel))).name == "haswell"


def test_the_host_is_read_once() -> None:
    first = read_cpu_features()
    assert isinstance(first.arch, CpuArch) and read_cpu_features() is first


# --- the variant ggml's loader picks (ggml_backend_load_best: the highest score) ------------------------------


@pytest.mark.parametrize(
    ("flags", "variant"),
    [
        ("", "piledriver"),
        (AVX2, "haswell"),
        (ALDER_LAKE, "alderlake"),
        (SKYLAKE_X, "skylakex"),
        (CASCADE_LAKE, "cascadelake"),
        (ICE_LAKE, "icelake"),
        (CASCADE_LAKE + " avx512_bf16", "cooperlake"),
        (ZEN4, "zen4"),
        (AMX, "sapphirerapids"),
    ],
)
def test_auto_is_the_loaders_choice(flags: str, variant: str) -> None:
    choice = resolve_variant("auto", parse_cpuinfo(x86(flags), "x86_64"))
    assert choice.name == variant and [v.name for v in choice.variants] == [variant]


def test_arm_hosts() -> None:
    graviton3 = parse_cpuinfo(arm("asimddp i8mm sve svebf16"), "aarch64")
    assert resolve_variant("auto", graviton3).name == "armv8.6_1"
    assert resolve_variant("auto", parse_cpuinfo(arm(""), "aarch64")).name == "armv8.0_1"
    assert resolve_variant("haswell", graviton3).variants == ()


def test_any_and_a_named_variant() -> None:
    host = parse_cpuinfo(x86(SKYLAKE_X), "x86_64")
    every = resolve_variant(ANY, host)
    expected = ["x64", "sse42", "sandybridge", "ivybridge", "piledriver", "haswell", "skylakex"]
    assert every.name == ANY and [v.name for v in every.variants] == expected
    assert resolve_variant("haswell", host).variants == (BY_NAME["haswell"],)
    for beyond in ("icelake", "sapphirerapids", "alderlake", "armv8.2_1", "pentium", ""):
        assert resolve_variant(beyond, host).variants == ()
    unread = resolve_variant("auto", UNKNOWN_CPU)
    assert unread.name == ANY and unread.variants == VARIANTS  # a host memfit cannot read: every variant
    assert resolve_variant("sapphirerapids", UNKNOWN_CPU).variants == (BY_NAME["sapphirerapids"],)


# --- where a matrix weight goes, and what it takes there ------------------------------------------------------

EMBD, VOCAB = 2560, 262144


def put(variant: str, qtype: QT, vocab: int = VOCAB, embd: int = EMBD) -> tuple[str, int]:
    return placement(BY_NAME[variant], Matrix(int(qtype), (embd, vocab)))


@pytest.mark.parametrize(
    ("variant", "qtype", "buffer"),
    [
        ("haswell", QT.Q4_0, "CPU_REPACK"),
        ("haswell", QT.Q4_K, "CPU_REPACK"),
        ("haswell", QT.IQ4_NL, "CPU_REPACK"),
        ("haswell", QT.MXFP4, "CPU_REPACK"),
        ("haswell", QT.Q8_0, "CPU"),
        ("haswell", QT.Q2_K, "CPU"),
        ("skylakex", QT.Q2_K, "CPU_REPACK"),
        ("zen4", QT.Q8_0, "CPU"),
        ("sapphirerapids", QT.Q4_0, "AMX"),
        ("sapphirerapids", QT.Q8_0, "AMX"),
        ("sapphirerapids", QT.F16, "AMX"),
        ("sapphirerapids", QT.Q2_K, "CPU_REPACK"),
        ("sapphirerapids", QT.F32, "CPU"),
        ("armv8.2_1", QT.Q8_0, "CPU_REPACK"),
        ("armv8.6_1", QT.Q6_K, "CPU_REPACK"),
        ("armv8.2_1", QT.F16, "CPU"),
        ("armv8.0_1", QT.Q4_0, "CPU"),
        ("sandybridge", QT.Q4_0, "CPU"),
    ],
)
def test_buffer_type_per_variant(variant: str, qtype: QT, buffer: str) -> None:
    assert put(variant, qtype)[0] == buffer


def test_rows_that_are_not_whole_interleaves_are_not_repacked() -> None:
    assert put("haswell", QT.Q4_0, vocab=VOCAB + 4)[0] == CPU  # ne[1] % 8
    assert put("armv8.2_1", QT.Q4_0, vocab=VOCAB + 4)[0] == "CPU_REPACK"  # ne[1] % 4 suffices
    assert put("armv8.2_1", QT.Q4_K, vocab=VOCAB + 4)[0] == CPU  # Q4_K needs 8
    # AMX wants ne[1] % 32; where it refuses, the AVX-512 repack still takes a multiple of 8
    assert put("sapphirerapids", QT.Q4_0, vocab=VOCAB + 8)[0] == "CPU_REPACK"
    assert put("sapphirerapids", QT.Q8_0, vocab=VOCAB + 8)[0] == CPU


def test_amx_packs_some_types_larger() -> None:
    """amx/mmq.cpp get_row_size: a Q8_0 block of 34 bytes gains a 4-byte compensation, Q4_K's 144 and Q5_K's 176
    gain 4, IQ4_XS's 136 gains 2; Q4_0 and F16 keep their size. CPU_REPACK keeps every size."""
    n = EMBD * VOCAB
    assert put("sapphirerapids", QT.Q8_0)[1] == n // 32 * 38
    assert put("sapphirerapids", QT.Q4_K)[1] == n // 256 * 148
    assert put("sapphirerapids", QT.Q5_K)[1] == n // 256 * 180
    assert put("sapphirerapids", QT.IQ4_XS)[1] == n // 256 * 138
    assert put("sapphirerapids", QT.Q4_0)[1] == n // 32 * 18
    assert put("sapphirerapids", QT.F16)[1] == n * 2
    assert put("haswell", QT.Q4_K)[1] == n // 256 * 144


def test_a_tied_copy_only_where_an_extra_buffer_type_takes_it() -> None:
    tied = Matrix(int(QT.Q8_0), (EMBD, VOCAB))
    assert tied_copy_bytes(BY_NAME["haswell"], tied) == (CPU, 0)
    assert tied_copy_bytes(BY_NAME["sapphirerapids"], tied) == ("AMX", EMBD * VOCAB // 32 * 38)


# --- through the service, on written models ----------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tied")
    write_model(gemma3_4b(QT.Q4_0), root / "gemma-tied-Q4_0.gguf")
    write_model(gemma3_4b(QT.Q8_0), root / "gemma-tied-Q8_0.gguf")
    write_model(llama31_8b(QT.Q4_0), root / "llama-untied-Q4_0.gguf")
    return root


HOSTS = {
    "avx2": CpuFeatures(CpuArch.X86_64, frozenset("SSE42 AVX F16C FMA AVX2 BMI2".split())),
    "amx": parse_cpuinfo(x86(AMX), "x86_64"),
    "basic": CpuFeatures(CpuArch.X86_64, frozenset({"SSE42", "AVX"})),
    "unknown": UNKNOWN_CPU,
}


def weights(models: Path, host: str, name: str, state_dir: str | None = None, variant: str | None = None) -> Part:
    service = build_service([Root(str(models), RootKind.PLAIN)], state_dir=state_dir, read_cpu=lambda: HOSTS[host])
    service.index.refresh()
    (artifact,) = [a for a in service.index.artifacts() if a.paths[0].endswith(name)]
    subject = service.subject(artifact.model_id, resolve_variant(variant or "auto", HOSTS[host]))
    assert subject is not None
    return subject.weights


def test_a_tied_embedding_under_each_host(models: Path) -> None:
    embedding = padded(tensor_nbytes((EMBD, VOCAB), QT.Q4_0))
    repacked = weights(models, "avx2", "gemma-tied-Q4_0.gguf")
    plain = weights(models, "basic", "gemma-tied-Q4_0.gguf")
    unknown = weights(models, "unknown", "gemma-tied-Q4_0.gguf")
    assert plain.bytes is not None
    assert repacked.bytes == plain.bytes + embedding and repacked.slack == 0 and plain.slack == 0
    assert "haswell" in repacked.note and "CPU_REPACK" in repacked.note and "no second copy" in plain.note
    assert unknown.bytes == plain.bytes and unknown.slack == embedding  # every variant: both bounds hold


def test_q8_0_is_packed_by_amx(models: Path) -> None:
    embedding = tensor_nbytes((EMBD, VOCAB), QT.Q8_0)
    avx2 = weights(models, "avx2", "gemma-tied-Q8_0.gguf")
    amx = weights(models, "amx", "gemma-tied-Q8_0.gguf")
    assert avx2.bytes is not None and amx.bytes is not None
    assert avx2.slack == 0 and amx.slack == 0 and "sapphirerapids" in amx.note
    # every MUL_MAT weight is Q8_0 here: AMX packs them all, and keeps the output copy packed too
    assert amx.bytes - avx2.bytes > padded(embedding // 34 * 38)
    haswell_on_amx = weights(models, "amx", "gemma-tied-Q8_0.gguf", variant="haswell")
    assert haswell_on_amx == avx2
    every = weights(models, "amx", "gemma-tied-Q8_0.gguf", variant="any")
    assert every.bytes is not None and every.slack is not None
    assert (every.bytes, every.bytes + every.slack) == (avx2.bytes, amx.bytes)


def test_an_untied_q4_0_model_does_not_depend_on_the_variant(models: Path) -> None:
    parts = {weights(models, h, "llama-untied-Q4_0.gguf").bytes for h in HOSTS}
    assert len(parts) == 1


def test_stored_summaries_serve_every_variant(models: Path, tmp_path: Path) -> None:
    """The header store (and the in-memory facts) hold nothing variant-specific: a service on another host over
    the same state directory answers for its own variant."""
    state = str(tmp_path)
    first = weights(models, "avx2", "gemma-tied-Q4_0.gguf", state)
    second = weights(models, "basic", "gemma-tied-Q4_0.gguf", state)
    assert second.bytes is not None
    assert first.bytes == second.bytes + padded(tensor_nbytes((EMBD, VOCAB), QT.Q4_0))


def test_the_default_reads_the_host_once(models: Path) -> None:
    calls = []

    def reader() -> CpuFeatures:
        calls.append(1)
        return HOSTS["avx2"]

    service = build_service([Root(str(models), RootKind.PLAIN)], read_cpu=reader)
    service.index.refresh()
    for artifact in service.index.artifacts():
        service.subject(artifact.model_id)
    assert len(calls) == 1 and service.auto.name == "haswell"
