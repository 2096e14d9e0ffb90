"""The built wheel: one top-level package, `memfit`, carrying the spec and the catalog, and a server started from a
venv that holds only it (its dependencies are the test venv's, made visible by a path file) answers a batch."""

from __future__ import annotations

import os
import shutil
import site
import socket
import subprocess
import sys
import sysconfig
import time
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from memfit.app import served_spec_yaml

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "wheel-test-token"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"  # a copy: setuptools writes build/ and *.egg-info beside the sources it builds
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_symlink():  # memfit/estimator -> ../estimator, ...: kept as links
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        timeout=600,
        cwd=out,
    )
    (built,) = out.glob("memfit-*.whl")
    return built


def test_the_wheel_holds_only_memfit_with_its_spec_and_catalog(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"memfit"}
    for needed in (
        "memfit/generated/openapi.yaml",
        "memfit/generated/models.py",
        "memfit/service/fit_service.py",
        "memfit/handlers/fit.py",
        "memfit/data/catalog.json",
        "memfit/app.py",
    ):
        assert needed in names
    spec = zipfile.ZipFile(wheel).read("memfit/generated/openapi.yaml")
    assert spec == (ROOT / "openapi.yaml").read_bytes()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_from_the_installed_wheel_answers_a_batch(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as z:  # what pip does for a pure wheel, without the scripts
        z.extractall(purelib)
    # the dependencies of the test venv, but not its memfit: a path file adds directories, not their .pth files
    deps = [p for p in site.getsitepackages() if p != purelib] + [sysconfig.get_paths()["purelib"]]
    Path(purelib, "test-deps.pth").write_text("\n".join(dict.fromkeys(deps)) + "\n")
    where = subprocess.run(
        [python, "-c", "import memfit.estimator, memfit.generated; print(memfit.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert where.startswith(purelib)

    port = _free_port()
    env = {**os.environ, "MEMFIT_TOKEN": TOKEN, "MEMFIT_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    server = subprocess.Popen(
        [python, "-m", "memfit.cli", "serve", "--port", str(port), "--no-usual-dirs"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"{url}/health", timeout=2).status_code == 200
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        answer = httpx.post(
            f"{url}/v1/models/fit/batch",
            headers={"Authorization": f"Bearer {TOKEN}"},
            json=[{"modelId": "Qwen/Qwen3-8B-GGUF:Q4_K_M"}],
            timeout=30,
        )
        assert answer.status_code == 200
        (result,) = answer.json()["results"]
        assert (
            result["identity"]["modelId"] == "Qwen/Qwen3-8B-GGUF:Q4_K_M" and result["estimate"]["lowerBoundBytes"] > 0
        )
        served = httpx.get(f"{url}/v1/openapi.yaml", timeout=5).text  # the contract, its `servers` relative
        assert served == served_spec_yaml((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    finally:
        server.terminate()
        server.wait(timeout=10)
