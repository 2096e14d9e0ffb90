"""Plans computed in processes of their own (memfit.plan_processes): the same answer as on a thread, the same
refusals, a process that dies replaced, and under a real `memfit serve` none outliving the server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from memfit import wire
from memfit.estimator.budget import BudgetSetting
from memfit.estimator.errors import OverBudget
from memfit.generated.models import WireFitVerdictRequest
from memfit.handlers.plan_runner import PlanProcessLost
from memfit.plan_processes import PLAN_NICENESS, PlanProcesses, ServiceSettings
from memfit.readers.model_roots import Root, RootKind
from memfit.service.answers import Settings
from memfit.service_builder import build_service
from tests.test_plan_budget import hub  # noqa: F401 - the fixture
from tests.test_workers import WAIT_S, _free_port, _kill, _until

SETTINGS = Settings(budget=BudgetSetting.TOTAL)  # the machine's total memory: the same in both processes
WITHIN: list[dict[str, object]] = [
    {"modelId": "acme/Within-GGUF:Q4_X0", "streams": 2},
    {"modelId": "acme/Within-GGUF:Q4_X1"},
]


def _children() -> set[int]:
    """The live processes this one started (an earlier test's exited, unreaped child is no plan process)."""
    pids = set()
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.NoSuchProcess):  # one that ends while it is looked at
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                pids.add(child.pid)
    return pids


@pytest.fixture
def processes(hub: Path, tmp_path: Path) -> Iterator[PlanProcesses]:  # noqa: F811 - the fixture
    plans = PlanProcesses(ServiceSettings((Root(str(hub), RootKind.HF_CACHE),), str(tmp_path / "state"), SETTINGS), 1)
    try:
        yield plans
    finally:
        plans.close()


def test_a_plan_process_answers_as_a_thread_does(processes: PlanProcesses, hub: Path, tmp_path: Path) -> None:  # noqa: F811
    service = build_service([Root(str(hub), RootKind.HF_CACHE)], state_dir=str(tmp_path / "own"), settings=SETTINGS)
    service.index.start()
    try:
        requests = [WireFitVerdictRequest.model_validate(item) for item in WITHIN]
        on_a_thread = json.loads(wire.fit_plan_json(service, requests))
    finally:
        service.index.stop()
    before = _children()
    in_a_process = json.loads(asyncio.run(processes.plan(WITHIN)))
    assert _children() - before, "no plan process was started"
    assert in_a_process == on_a_thread
    assert [len(r["quants"]) for r in in_a_process["results"]] == [1, 1]


def test_a_plan_past_its_budget_is_refused_through_the_process(processes: PlanProcesses) -> None:
    with pytest.raises(OverBudget, match="answer-size budget"):
        asyncio.run(processes.plan([{"modelId": "acme/Over-GGUF"}]))


def test_a_killed_plan_process_is_replaced(processes: PlanProcesses) -> None:
    async def plans_after_a_kill() -> list[object]:
        first = await processes.plan(WITHIN)
        for pid in _children():
            os.kill(pid, signal.SIGKILL)
        answers: list[object] = [first]
        for _ in range(2):  # a plan sent before the pool saw its process die is lost (a 503); the next is answered
            try:
                answers.append(await processes.plan(WITHIN))
                break
            except PlanProcessLost as exc:
                answers.append(exc)
        return answers

    before = _children()
    answers = asyncio.run(plans_after_a_kill())
    assert isinstance(answers[-1], bytes) and json.loads(answers[-1]) == json.loads(answers[0])  # type: ignore[arg-type]
    assert _children() and not (_children() & before)


def test_memfit_serve_computes_plans_in_a_process_that_ends_with_it(hub: Path, tmp_path: Path) -> None:  # noqa: F811
    port, state = _free_port(), tmp_path / "state"
    home = tmp_path / "home"  # the usual places: only the hub cache, which HF_HUB_CACHE names
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MEMFIT_STATE_DIR": str(state), "HOME": str(home)}
    env.update(HF_HUB_CACHE=str(hub), XDG_CACHE_HOME=str(home / ".cache"))
    for name in ("MEMFIT_TOKEN", "MEMFIT_MODELS", "HF_HOME", "LLAMA_CACHE", "OLLAMA_MODELS"):
        env.pop(name, None)
    command = [sys.executable, "-m", "memfit.cli", "serve", "--port", str(port)]
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    server = psutil.Process(proc.pid)
    try:
        _until(lambda: (state / "token").is_file() and _healthy(url), "the server answers")
        headers = {"Authorization": f"Bearer {(state / 'token').read_text().strip()}"}
        with httpx.Client(base_url=url, headers=headers, timeout=WAIT_S) as client:
            before = {p.pid for p in server.children()}
            answer = client.post("/v1/models/fit/plan", json=WITHIN)
            assert answer.status_code == 200, answer.text
            assert len(answer.json()["results"]) == len(WITHIN)
            over = client.post("/v1/models/fit/plan", json=[{"modelId": "acme/Over-GGUF"}])
            assert over.status_code == 400 and "answer-size budget" in over.json()["detail"]
        planners = [p for p in server.children() if p.pid not in before and "resource_tracker" not in p.cmdline()[-1]]
        assert planners, "the plan was not computed in a process of its own"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
        _, alive = psutil.wait_procs(planners, timeout=WAIT_S)
        assert alive == [], f"plan processes outlived the server: {alive}"
    finally:
        _kill([server, *server.children()] if proc.poll() is None else [])
        proc.wait(timeout=WAIT_S)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_plan_process_yields_the_cpu_to_the_server(processes: PlanProcesses) -> None:
    """A plan process took a core at the server's priority: under a flood of plans on busy cores /health waited for
    it. It runs PLAN_NICENESS below the server."""
    asyncio.run(processes.plan(WITHIN))
    (child,) = _children()
    assert psutil.Process(child).nice() == min(19, os.nice(0) + PLAN_NICENESS)
