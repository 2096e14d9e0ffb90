"""The GPU check's bundle: node-llama-cpp's CUDA prebuilt of the pinned release, made small enough to travel.

    python -m tools.truth.gpu_bundle CACHE [DEST]      (DEST defaults to .gpucheck in the repository root)

A lent GPU machine reaches no registry and takes at most 64 MiB of working tree and carried paths in one call.
@node-llama-cpp/linux-x64-cuda (3.21.1: llama.cpp v0.4.0, built against CUDA 13) ships libggml-cuda.so at 152 MiB:
its device code is a fat binary of cubins for sm_86, sm_89, sm_120a and sm_121a and PTX for compute_75, 80 and 90.
An H100 or H200 (sm_90) runs none of those cubins: the driver compiles the compute_90 PTX. So the bundle keeps the
library byte for byte but for the payloads of the other fat-binary entries, which it zeroes (their headers stay,
so the driver picks as it would from the stock file); xz then packs it to about 21 MiB. CUDA's own runtime and
cuBLAS (libcudart.so.13, libcublas.so.13) are not carried: the machine's image has CUDA 13 (nvcc, and the
nvidia-cuda-runtime and nvidia-cublas wheels), and gpu_check.py finds them there.

DEST/bundle.tar.xz holds: the probe (tools/truth/mock/probe_mock.cpp, linked here against the CUDA package's
libllama, libllama-common, libggml and libggml-base, run path $ORIGIN), those libraries, the haswell CPU backend
and the pruned libggml-cuda.so (backends/). DEST/wheels/ holds the wheels memfit needs that the image lacks
(pydantic and its parts, gguf), for CPython 3.12 on manylinux x86-64. Needs node 20 with npm, g++, pip, and the
cache tools/truth/mock/build.sh made (its llama.cpp source gives the probe's headers).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tools.truth.mock.matrix import RELEASE
from tools.truth.regenerate import release_dir

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DEST = ROOT / ".gpucheck"
CUDA_PACKAGE = "@node-llama-cpp/linux-x64-cuda"
CUDA_LIBS = ("libllama.cuda.v0.4.0.so", "libggml.cuda.v0.4.0.so", "libggml-base.so", "libllama-common.so")
CPU_BACKEND = "libggml-cpu-haswell.so"
CUDA_BACKEND = "libggml-cuda.so"
PROBE = "probe_mock-cuda"
KEEP_ARCH = ("ptx", 90)  # what an sm_90 device loads from the fat binary
# memfit's imports that the GPU image lacks (KINDS.md lists what it has), at the versions constraints.txt pins
WHEELS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "gguf")
FATBIN_MAGIC = 0xBA55ED50


def _section(elf: bytes, name: str) -> tuple[int, int]:
    """(offset, size) of an ELF64 section."""
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    strings = headers[shstrndx][4]
    for h in headers:
        end = elf.index(b"\0", strings + h[0])
        if elf[strings + h[0] : end].decode() == name:
            return h[4], h[5]
    raise ValueError(f"no section {name}")


def fatbin_entries(elf: bytes) -> list[tuple[str, int, int, int]]:
    """Each entry of the .nv_fatbin section: (kind: ptx or elf, arch, payload offset, payload size)."""
    offset, size = _section(elf, ".nv_fatbin")
    end, out = offset + size, []
    while offset < end:
        if struct.unpack_from("<I", elf, offset)[0] != FATBIN_MAGIC:
            offset += 8  # containers are 8-byte aligned
            continue
        _, _, header, body = struct.unpack_from("<IHHQ", elf, offset)
        p, stop = offset + header, offset + header + body
        while p < stop:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", elf, p)
            arch = struct.unpack_from("<I", elf, p + 28)[0]
            out.append(("ptx" if kind == 1 else "elf", arch, p + entry_header, payload))
            p += entry_header + payload
        offset = stop
    return out


def prune(elf: bytes, keep: tuple[str, int] = KEEP_ARCH) -> bytes:
    """The library with every fat-binary payload but `keep`'s zeroed (same size, same headers)."""
    out = bytearray(elf)
    for kind, arch, start, size in fatbin_entries(elf):
        if (kind, arch) != keep:
            out[start : start + size] = bytes(size)
    return bytes(out)


def _cuda_libs(cache: Path) -> Path:
    """The CUDA package's library folder in the cache, unpacked from npm's tarball on first use."""
    release = release_dir(cache, RELEASE)
    libs = release / "cuda" / "package" / "bins" / "linux-x64-cuda"
    if not libs.is_dir():
        (release / "cuda").mkdir(parents=True, exist_ok=True)
        tgz = subprocess.run(
            ["npm", "pack", "--silent", f"{CUDA_PACKAGE}@{RELEASE}"],
            cwd=release / "cuda",
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[-1]
        with tarfile.open(release / "cuda" / tgz) as t:
            t.extractall(release / "cuda", filter="data")
    return libs


def _compile_probe(cache: Path, libs: Path, out: Path) -> None:
    src = release_dir(cache, RELEASE) / "llama.cpp"
    here = Path(__file__).resolve().parent / "mock"
    includes = [f"-I{src / d}" for d in ("include", "ggml/include", "ggml/src", "src", "common")] + [f"-I{here}"]
    libs_args = [f"-l:{name}" for name in ("libllama-common.so", CUDA_LIBS[0], CUDA_LIBS[1], "libggml-base.so")]
    cmd = ["g++", "-std=c++17", "-O1", "-w", *includes, str(here / "probe_mock.cpp"), str(here / "mock_gpu.cpp")]
    subprocess.run([*cmd, "-o", str(out), f"-L{libs}", *libs_args, "-Wl,-rpath,$ORIGIN"], check=True)


def _wheels(dest: Path) -> None:
    from importlib.metadata import version

    dest.mkdir(parents=True, exist_ok=True)
    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 27, 28)] + ["--platform=manylinux2014_x86_64"]
    pins = [f"{name}=={version(name)}" for name in WHEELS]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version=3.12"]
        + ["--implementation=cp", *platforms, "-d", str(dest), *pins],
        check=True,
    )


def prepare(cache: Path, dest: Path = DEFAULT_DEST) -> Path:
    """Write DEST/bundle.tar.xz and DEST/wheels/; the bundle's path."""
    libs = _cuda_libs(cache)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        (stage / "backends").mkdir()
        _compile_probe(cache, libs, stage / PROBE)
        for name in CUDA_LIBS:
            shutil.copy2(libs / name, stage / name)
        shutil.copy2(libs / CPU_BACKEND, stage / "backends" / CPU_BACKEND)
        (stage / "backends" / CUDA_BACKEND).write_bytes(prune((libs / CUDA_BACKEND).read_bytes()))
        bundle = dest / "bundle.tar.xz"
        with tarfile.open(bundle, "w:xz", preset=6) as t:
            t.add(stage, arcname="gpucheck")
    _wheels(dest / "wheels")
    return bundle


def unpack(bundle: Path, dest: Path) -> Path:
    """The bundle unpacked under `dest`: the folder holding the probe, its libraries and backends/."""
    with tarfile.open(bundle) as t:
        t.extractall(dest, filter="data")
    return dest / "gpucheck"


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    dest = Path(argv[1]) if len(argv) > 1 else DEFAULT_DEST
    bundle = prepare(Path(argv[0]).resolve(), dest)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"{bundle} and {dest / 'wheels'}: {size / 2**20:.1f} MiB to carry")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
