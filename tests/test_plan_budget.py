"""A plan request's budgets (estimator/plan.py's PlanBudget): the quants its answer holds and the estimates its
searches compute; past either, a 400 naming the budget. And the plans the server computes at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import pytest

from memfit.estimator.errors import OverBudget
from memfit.estimator.fit_types import FitRequest
from memfit.estimator.plan import PLAN_QUANTS, PlanBudget
from memfit.estimator.workload import WorkloadRequest
from memfit.handlers.context import ServerState
from memfit.http.plan_limit import PlanLimit, PlansBusy
from memfit.http.state import WithState
from memfit.readers.model_roots import Root, RootKind
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.gguf_writers import qwen3, write_model

COMMIT = "c" * 40
REPOS = {"acme/Over-GGUF": PLAN_QUANTS + 1, "acme/Within-GGUF": PLAN_QUANTS}  # quant-tagged files in each


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face cache whose repositories hold many quant-named files (links to one small model)."""
    root = tmp_path_factory.mktemp("hub")
    model = root / "model.gguf"
    write_model(qwen3(), model)
    for repo, quants in REPOS.items():
        repo_dir = root / f"models--{repo.replace('/', '--')}"
        snapshot = repo_dir / "snapshots" / COMMIT
        snapshot.mkdir(parents=True)
        (repo_dir / "refs").mkdir()
        (repo_dir / "refs" / "main").write_text(COMMIT)
        for i in range(quants):
            os.link(model, snapshot / f"Many-Q4_X{i}.gguf")
    return root


@pytest.fixture(scope="module")
def server(hub: Path) -> Iterator[LiveServer]:
    with LiveServer(build_service([Root(str(hub), RootKind.HF_CACHE)])) as live:
        live.service.index.wait_for(lambda: len(live.service.index.artifacts()) == sum(REPOS.values()), 20)
        yield live


def test_a_repository_past_the_answer_size_budget_is_a_400(server: LiveServer) -> None:
    with server.client() as client:
        response = client.post("/v1/models/fit/plan", json=[{"modelId": "acme/Over-GGUF"}])
        assert response.status_code == 400, response.text
        problem = response.json()
        assert problem["type"] == "invalidRequest"
        assert "answer-size budget" in problem["detail"] and f"at most {PLAN_QUANTS}" in problem["detail"]
        within = client.post("/v1/models/fit/plan", json=[{"modelId": "acme/Within-GGUF"}])
        assert within.status_code == 200, within.text
        assert len(within.json()["results"][0]["quants"]) == PLAN_QUANTS


def test_the_quants_of_every_request_count_together(server: LiveServer) -> None:
    with server.client() as client:
        body = [{"modelId": "acme/Within-GGUF"}, {"modelId": "acme/Within-GGUF:Q4_X0"}]
        response = client.post("/v1/models/fit/plan", json=body)
        assert response.status_code == 400 and "answer-size budget" in response.json()["detail"]


def test_a_plan_past_the_work_budget_stops(server: LiveServer) -> None:
    """The search counts its estimates and stops past the budget; the same plan within it answers."""
    requests = [
        FitRequest("acme/Within-GGUF:Q4_X0", WorkloadRequest(streams=64 + i, kv_unified=True)) for i in range(8)
    ]
    service = server.service
    with pytest.raises(OverBudget, match="more than 20 estimates \\(its work budget\\)"):
        service.plan_batch(requests, budget=PlanBudget(estimates=20))
    assert len(service.plan_batch(requests, budget=PlanBudget())) == len(requests)


def test_plans_past_the_slots_wait_then_are_refused() -> None:
    limit = PlanLimit(slots=1, wait_s=0.2)
    release = threading.Event()

    async def both() -> Sequence[object]:
        async def plan(work: Callable[[], Awaitable[object]]) -> object:
            async with limit.slot():
                return await work()

        held = asyncio.create_task(plan(lambda: asyncio.to_thread(release.wait, 10)))
        await asyncio.sleep(0.05)  # the first plan holds the only slot
        try:
            return await asyncio.gather(plan(lambda: asyncio.sleep(0, "second")), return_exceptions=True)
        finally:
            release.set()
            await held

    (second,) = asyncio.run(both())
    assert isinstance(second, PlansBusy)

    async def after() -> str:
        async with limit.slot():
            return "after"

    assert asyncio.run(after()) == "after"  # the slot is free again


def test_a_busy_plan_is_a_503_with_retry_after(server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the handler answers when no slot freed up in time (the wait itself: the test above)."""

    @contextlib.asynccontextmanager
    async def busy(_limit: PlanLimit) -> AsyncIterator[None]:
        raise PlansBusy("every plan slot stayed taken")
        yield

    monkeypatch.setattr(PlanLimit, "slot", busy)
    with server.client() as client:
        response = client.post("/v1/models/fit/plan", json=[{"modelId": "acme/Within-GGUF:Q4_X0"}])
    assert response.status_code == 503 and int(response.headers["Retry-After"]) > 0
    assert response.json()["type"] == "failed"


def test_a_plan_waits_for_a_slot_before_its_body_is_validated(server: LiveServer) -> None:
    """44 plans at once had their bodies validated on the event loop before waiting; now a plan past every slot
    waits first: a body that would be a 400 is a 503 when no slot frees up, and a 400 once one is free."""
    app = server.app  # create_app's outermost layer holds the server state
    assert isinstance(app, WithState) and isinstance(app.state, ServerState)
    plans = app.state.plans
    saved = plans.slots, plans.wait_s
    plans.slots, plans.wait_s = 0, 0.2
    invalid = [{"modelId": 5}]
    try:
        with server.client() as client:
            waited = client.post("/v1/models/fit/plan", json=invalid)
    finally:
        plans.slots, plans.wait_s = saved
    assert waited.status_code == 503 and waited.headers["Retry-After"], waited.text
    with server.client() as client:
        assert client.post("/v1/models/fit/plan", json=invalid).status_code == 400
