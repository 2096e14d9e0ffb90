"""The host CPU's family, and what it decides: whether a tied token embedding's second copy is certain, never
or unknown on that host's llama.cpp CPU backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as QT

from memfit.estimator.artifact import padded
from memfit.estimator.cpu_repack import TiedCopy, tied_output_copy
from memfit.readers.cpu_features import (
    UNKNOWN_CPU,
    CpuFamily,
    CpuFeatures,
    darwin_features,
    parse_cpuinfo,
    read_cpu_features,
)
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
AVX512 = AVX2 + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"
AMX = AVX512 + " avx512_bf16 amx_bf16 avx512_fp16 amx_tile amx_int8"
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
    ("text", "machine", "family"),
    [
        (x86(AVX2, AVX2), "x86_64", CpuFamily.X86_AVX2),
        (x86(AVX512, AVX512), "x86_64", CpuFamily.X86_AVX512),
        (x86(AMX, AMX), "x86_64", CpuFamily.X86_AMX),
        (x86("", ""), "x86_64", CpuFamily.X86_BASIC),
        (x86(AVX512, AVX2), "x86_64", CpuFamily.X86_AVX2),  # a feature counts only when every processor has it
        (x86(AMX), "AMD64", CpuFamily.X86_AMX),
        (arm("asimddp i8mm sve", "asimddp i8mm sve"), "aarch64", CpuFamily.ARM_I8MM),
        (arm("asimddp lrcpc dcpop", "asimddp"), "aarch64", CpuFamily.ARM_DOTPROD),
        (arm("", ""), "aarch64", CpuFamily.ARM_NEON),
        (arm("i8mm"), "aarch64", CpuFamily.UNKNOWN),  # i8mm without dotprod: not a family ggml's tables name
        (x86(AVX2), "aarch64", CpuFamily.UNKNOWN),  # no `Features` line: nothing stated
        ("\x00\xff garbage\nflags without a colon\n:::\n", "x86_64", CpuFamily.UNKNOWN),
        ("", "x86_64", CpuFamily.UNKNOWN),
        (x86(AVX2), "ppc64le", CpuFamily.OTHER),
        (x86(AVX2), "riscv64", CpuFamily.UNKNOWN),  # ggml repacks with zvfh there: not modelled
        (x86(AVX2), "i686", CpuFamily.UNKNOWN),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 12 else None,
)
def test_cpuinfo_samples(text: str, machine: str, family: CpuFamily) -> None:
    assert parse_cpuinfo(text, machine).family is family


def test_macos_sysctl() -> None:
    def fake(values: dict[str, str]):
        return values.get

    m1 = {"hw.optional.arm.FEAT_DotProd": "1", "hw.optional.arm.FEAT_I8MM": "0"}
    assert darwin_features("arm64", fake(m1)).family is CpuFamily.ARM_DOTPROD
    m2 = {"hw.optional.arm.FEAT_DotProd": "1", "hw.optional.arm.FEAT_I8MM": "1"}
    assert darwin_features("arm64", fake(m2)).family is CpuFamily.ARM_I8MM
    assert darwin_features("arm64", fake({})) == UNKNOWN_CPU
    intel = {"machdep.cpu.leaf7_features": "RDWRFSGS TSC_THREAD_OFFSET SGX BMI1 AVX2 SMEP BMI2 ERMS INVPCID"}
    assert darwin_features("x86_64", fake(intel)).family is CpuFamily.X86_AVX2
    xeon = {"machdep.cpu.leaf7_features": "BMI1 AVX2 AVX512F AVX512DQ AVX512VNNI"}
    assert darwin_features("x86_64", fake(xeon)).family is CpuFamily.X86_AVX512


def test_the_host_is_read_once() -> None:
    first = read_cpu_features()
    assert isinstance(first.family, CpuFamily) and read_cpu_features() is first


# --- the rule ----------------------------------------------------------------------------------------------

EMBD, VOCAB = 2560, 262144


def copy(family: CpuFamily, qtype: QT, vocab: int = VOCAB, embd: int = EMBD):
    return tied_output_copy(family, qtype, (embd, vocab), tensor_nbytes((embd, vocab), qtype))


@pytest.mark.parametrize(
    ("family", "qtype", "outcome"),
    [
        # repack.cpp: x86 AVX2 repacks Q4_0, Q4_K, IQ4_NL, MXFP4 (8-row interleaves), not Q8_0
        (CpuFamily.X86_AVX2, QT.Q4_0, TiedCopy.CERTAIN),
        (CpuFamily.X86_AVX2, QT.Q4_K, TiedCopy.CERTAIN),
        (CpuFamily.X86_AVX2, QT.IQ4_NL, TiedCopy.CERTAIN),
        (CpuFamily.X86_AVX2, QT.MXFP4, TiedCopy.CERTAIN),
        (CpuFamily.X86_AVX2, QT.Q8_0, TiedCopy.NEVER),
        (CpuFamily.X86_AVX2, QT.F16, TiedCopy.NEVER),
        # an AVX-512 host may run an AVX2 build (Q2_K is repacked by AVX-512 builds only)
        (CpuFamily.X86_AVX512, QT.Q4_0, TiedCopy.CERTAIN),
        (CpuFamily.X86_AVX512, QT.Q2_K, TiedCopy.UNKNOWN),
        # AMX builds also store Q8_0, Q6_K, F16 ... in the AMX buffer; other builds do not
        (CpuFamily.X86_AMX, QT.Q4_0, TiedCopy.CERTAIN),
        (CpuFamily.X86_AMX, QT.Q8_0, TiedCopy.UNKNOWN),
        (CpuFamily.X86_AMX, QT.F16, TiedCopy.UNKNOWN),
        (CpuFamily.X86_AMX, QT.F32, TiedCopy.NEVER),
        # ARM with dotprod (or i8mm): Q4_0, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4, Q8_0
        (CpuFamily.ARM_DOTPROD, QT.Q8_0, TiedCopy.CERTAIN),
        (CpuFamily.ARM_I8MM, QT.Q6_K, TiedCopy.CERTAIN),
        (CpuFamily.ARM_DOTPROD, QT.F16, TiedCopy.NEVER),
        (CpuFamily.ARM_NEON, QT.Q4_0, TiedCopy.NEVER),
        (CpuFamily.X86_BASIC, QT.Q4_0, TiedCopy.NEVER),
        (CpuFamily.OTHER, QT.Q4_0, TiedCopy.NEVER),
        (CpuFamily.UNKNOWN, QT.Q4_0, TiedCopy.UNKNOWN),
        (CpuFamily.UNKNOWN, QT.F32, TiedCopy.NEVER),
    ],
    ids=str,
)
def test_tied_copy_per_family(family: CpuFamily, qtype: QT, outcome: TiedCopy) -> None:
    got = copy(family, qtype)
    assert got.outcome is outcome
    nbytes = tensor_nbytes((EMBD, VOCAB), qtype)
    if outcome is TiedCopy.CERTAIN:
        assert got.floor == nbytes <= got.ceiling
    elif outcome is TiedCopy.UNKNOWN:
        assert got.floor == 0 and got.ceiling >= nbytes
    else:
        assert got.floor == got.ceiling == 0


def test_rows_that_are_not_whole_interleaves_are_not_repacked() -> None:
    assert copy(CpuFamily.X86_AVX2, QT.Q4_0, vocab=VOCAB + 4).outcome is TiedCopy.NEVER  # ne[1] % 8
    assert copy(CpuFamily.ARM_DOTPROD, QT.Q4_0, vocab=VOCAB + 4).outcome is TiedCopy.CERTAIN  # ne[1] % 4 suffices
    assert copy(CpuFamily.ARM_DOTPROD, QT.Q4_K, vocab=VOCAB + 4).outcome is TiedCopy.NEVER  # Q4_K needs 8
    # AMX wants ne[1] % 32; where it refuses, the AVX2 repack still takes a multiple of 8
    assert copy(CpuFamily.X86_AMX, QT.Q4_0, vocab=VOCAB + 8).outcome is TiedCopy.CERTAIN
    assert copy(CpuFamily.X86_AMX, QT.Q8_0, vocab=VOCAB + 8).outcome is TiedCopy.NEVER


def test_amx_packs_q8_0_larger() -> None:
    """amx/mmq.cpp get_row_size: a Q8_0 block of 34 bytes gains a 4-byte compensation."""
    got = copy(CpuFamily.X86_AMX, QT.Q8_0)
    assert got.ceiling == tensor_nbytes((EMBD, VOCAB), QT.Q8_0) // 34 * 38


def test_an_unknown_shape_is_never_certain() -> None:
    nbytes = tensor_nbytes((EMBD, VOCAB), QT.Q4_0)
    got = tied_output_copy(CpuFamily.X86_AVX2, QT.Q4_0, None, nbytes)
    assert got.outcome is TiedCopy.UNKNOWN and got.ceiling == nbytes


# --- through the service, on written models ----------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tied")
    write_model(gemma3_4b(QT.Q4_0), root / "gemma-tied-Q4_0.gguf")
    write_model(gemma3_4b(QT.Q8_0), root / "gemma-tied-Q8_0.gguf")
    write_model(llama31_8b(QT.Q4_0), root / "llama-untied-Q4_0.gguf")
    return root


def weights(models: Path, family: CpuFamily, name: str, state_dir: str | None = None):
    service = build_service(
        [Root(str(models), RootKind.PLAIN)], state_dir=state_dir, read_cpu=lambda: CpuFeatures(family, "test")
    )
    service.index.refresh()
    (artifact,) = [a for a in service.index.artifacts() if a.paths[0].endswith(name)]
    subject = service.subject(artifact.model_id)
    assert subject is not None
    return subject.weights


def test_three_outcomes_on_a_tied_embedding(models: Path) -> None:
    embedding = padded(tensor_nbytes((EMBD, VOCAB), QT.Q4_0))
    certain = weights(models, CpuFamily.X86_AVX2, "gemma-tied-Q4_0.gguf")
    never = weights(models, CpuFamily.X86_BASIC, "gemma-tied-Q4_0.gguf")
    unknown = weights(models, CpuFamily.UNKNOWN, "gemma-tied-Q4_0.gguf")
    assert certain.bytes == never.bytes + embedding and certain.slack == 0 and "certainly keeps" in certain.note
    assert never.slack == 0 and "keeps no second copy" in never.note
    assert unknown.bytes == never.bytes and unknown.slack == embedding and "may keep" in unknown.note
    assert "x86-64 AVX2" in certain.note and "Q4_0" in certain.note


def test_q8_0_depends_on_the_family(models: Path) -> None:
    embedding = padded(tensor_nbytes((EMBD, VOCAB), QT.Q8_0))
    x86_avx2 = weights(models, CpuFamily.X86_AVX2, "gemma-tied-Q8_0.gguf")
    arm_dot = weights(models, CpuFamily.ARM_DOTPROD, "gemma-tied-Q8_0.gguf")
    amx = weights(models, CpuFamily.X86_AMX, "gemma-tied-Q8_0.gguf")
    assert x86_avx2.slack == 0 and arm_dot.bytes == x86_avx2.bytes + embedding
    assert amx.bytes == x86_avx2.bytes and amx.slack == padded(embedding // 34 * 38)


def test_an_untied_model_does_not_depend_on_the_cpu(models: Path) -> None:
    parts = {weights(models, f, "llama-untied-Q4_0.gguf") for f in (CpuFamily.X86_AVX2, CpuFamily.UNKNOWN)}
    assert len(parts) == 1 and next(iter(parts)).slack == 0


def test_stored_summaries_serve_every_cpu(models: Path, tmp_path: Path) -> None:
    """The header store (and the in-memory facts) hold nothing CPU-specific: a service with another CPU fact
    over the same state directory answers for its own CPU."""
    state = str(tmp_path)
    first = weights(models, CpuFamily.X86_AVX2, "gemma-tied-Q4_0.gguf", state)
    second = weights(models, CpuFamily.X86_BASIC, "gemma-tied-Q4_0.gguf", state)
    assert first.bytes == second.bytes + padded(tensor_nbytes((EMBD, VOCAB), QT.Q4_0))


def test_the_default_reads_the_host_once(models: Path) -> None:
    calls = []

    def reader() -> CpuFeatures:
        calls.append(1)
        return CpuFeatures(CpuFamily.X86_AVX2)

    service = build_service([Root(str(models), RootKind.PLAIN)], read_cpu=reader)
    service.index.refresh()
    for artifact in service.index.artifacts():
        service.subject(artifact.model_id)
    assert len(calls) == 1 and service.cpu.family is CpuFamily.X86_AVX2
