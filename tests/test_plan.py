"""POST /v1/models/fit/plan: the largest context each verdict holds at, searched over the estimator itself.

The search is only as good as its premise, so the premise is tested first: the floor and the ceiling are
monotone non-decreasing in allocatedTokens for a model of every family. Then the three maxima are compared with
brute force over every token up to a small context limit, and the fit answered at `good` is good while one token
more is not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import httpx
import pytest
import yaml

from memfit.estimator.bounds import bounds
from memfit.estimator.compute_graph import buildable
from memfit.estimator.fit_types import FitRequest
from memfit.estimator.forecast import forecast_parts
from memfit.estimator.machine import HostMemory
from memfit.estimator.plan import Estimator, Probes, StepEnds, maxima, precision_key
from memfit.estimator.profiles import resolved_workload
from memfit.estimator.quant_recipe import DEFAULT_TYPE
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Limit, Verdict
from memfit.estimator.workload import Workload, WorkloadRequest, resolve_workload
from memfit.readers.host_memory import read_host_memory
from memfit.readers.model_roots import Root, RootKind
from memfit.service.fit_service import FitService
from memfit.service_builder import build_service
from tests.conftest import LiveServer
from tools.families import recurrent
from tools.families.attention import bert_embd, deepseek2_mla, llama_hd96
from tools.families.recurrent import deepseek4
from tools.gguf_writers import Model, gemma3_swa, granitehybrid, llama_gqa, mamba2, qwen3moe, write_model

PLAN = "/v1/models/fit/plan"
MARGIN = Fraction(1, 10)
FAMILIES: dict[str, Callable[[], Model]] = {
    "dense": llama_hd96,
    "gqa": llama_gqa,
    "sliding-window": gemma3_swa,
    "mla": deepseek2_mla,
    "moe": qwen3moe,
    "hybrid": granitehybrid,
    "recurrent": mamba2,
    "embedding": bert_embd,
    "compressed": deepseek4,
}
WORKLOADS = {
    "defaults": WorkloadRequest(),
    "3 streams, q8_0 K": WorkloadRequest(streams=3, key_element_bytes=1),
    "unified, 3 streams": WorkloadRequest(streams=3, kv_unified=True),
    "flash attention off": WorkloadRequest(flash_attention="off"),
    "ubatch 256": WorkloadRequest(ubatch_tokens=256, streams=2),
    "ubatch 2048, 2 streams": WorkloadRequest(ubatch_tokens=2048, streams=2),
}


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("plan-families")
    for name, build in FAMILIES.items():
        write_model(build(), directory / f"{name}.gguf")
    return directory


def _service(directory: Path, budget: int | None = None) -> FitService:
    read = read_host_memory if budget is None else (lambda: HostMemory(available=budget, total=budget))
    service = build_service([Root(str(directory), RootKind.PLAIN)], read_host=read)
    service.index.refresh()
    return service


@pytest.fixture(scope="module")
def subjects(family_dir: Path) -> dict[str, Subject]:
    service = _service(family_dir)
    found = {name: service.subject(name) for name in FAMILIES}
    assert all(s is not None and s.layout is not None for s in found.values())
    return {name: s for name, s in found.items() if s is not None}


def reference(subject: Subject, workload: Workload, tokens: int) -> tuple[int, int | None]:
    """The bounds a fit answer gives (forecast_parts, no measurement history): the truth the search must match."""
    b = bounds(forecast_parts(subject, replace(workload, allocated_tokens=tokens))[0])
    return b.lower, b.upper


def _workload(subject: Subject, request: WorkloadRequest) -> Workload:
    return resolve_workload(request, subject.context_limit)


@pytest.mark.parametrize("workload", WORKLOADS.values(), ids=WORKLOADS.keys())
@pytest.mark.parametrize("family", FAMILIES)
def test_bounds_are_monotone_in_allocated_tokens(
    subjects: dict[str, Subject], family: str, workload: WorkloadRequest
) -> None:
    """Floor and ceiling never fall as allocatedTokens grows below what the search allows for (ggml-alloc's best
    fit can place a larger graph in a smaller buffer, never below the bytes alive at once: Estimator.fallback), at
    every 256-cell step up to 32,768 tokens and at every token below 1,024 (where the ubatch still grows with the
    context); and the search's lean estimate is exactly the fit answer's. An unknown ceiling stays unknown."""
    subject = subjects[family]
    w = _workload(subject, workload)
    graph = subject.layout.graph if subject.layout is not None else None
    if graph is None or not buildable(graph):
        pytest.skip("no rebuilt graph: the workspace is unknown at every context")
    lean = Estimator(subject, w, Probes())
    points = sorted({*range(1, 1024), *range(256, 32768 + 1, 256)})
    reach: tuple[int, int | None] = (0, 0)  # the most any smaller context's bounds can fall to
    for tokens in points:
        floor, ceiling = reference(subject, w, tokens)
        assert lean.bounds(tokens) == (floor, ceiling), (family, tokens)
        assert floor >= reach[0], (family, tokens)
        if reach[1] is None:
            assert ceiling is None, (family, tokens)
        elif ceiling is not None:
            assert ceiling >= reach[1], (family, tokens)
        fall = lean.fallback(tokens)
        reach = (
            max(reach[0], floor - fall),
            None if ceiling is None or reach[1] is None else max(reach[1], ceiling - fall),
        )


@pytest.mark.parametrize("family", ["qwen35", "nemotron-h", "lfm2moe", "bailingmoe3", "qwen4exp-ple"])
def test_the_search_counts_rollback_snapshots_as_the_fit_answer(
    tmp_path_factory: pytest.TempPathFactory, family: str
) -> None:
    """rollbackSnapshots (llama.cpp's n_rs_seq) on architectures that keep them: the search's lean estimate is the
    fit answer's at every step, and both hold more than without the snapshots."""
    directory = tmp_path_factory.mktemp("plan-rollback")
    write_model(recurrent.FAMILY_SET[family](), directory / f"{family}.gguf")
    subject = _service(directory).subject(family)
    assert subject is not None and subject.layout is not None
    w = _workload(subject, WorkloadRequest(streams=2, rollback_snapshots=3, ubatch_tokens=8))
    plain = replace(w, rollback_snapshots=0)
    lean = Estimator(subject, w, Probes())
    for tokens in (1, 7, 100, 256, 1000, 4096, 8192):
        floor, ceiling = reference(subject, w, tokens)
        assert lean.bounds(tokens) == (floor, ceiling), tokens
        assert floor > reference(subject, plain, tokens)[0], tokens


@pytest.mark.parametrize("family", ["qwen35-mtp", "bailingmoe3"])
def test_the_search_counts_multi_token_prediction_as_the_fit_answer(
    tmp_path_factory: pytest.TempPathFactory, family: str
) -> None:
    """multiTokenPrediction (llama-server's draft-mtp) on models whose files hold their NextN layers: the search's
    lean estimate is the fit answer's at every step (the NextN weights and the nextn embeddings of the output
    buffer), and both hold more than without it."""
    directory = tmp_path_factory.mktemp("plan-mtp")
    write_model(recurrent.FAMILY_SET[family](), directory / f"{family}.gguf")
    subject = _service(directory).subject(family)
    assert subject is not None and subject.layout is not None
    w = _workload(subject, WorkloadRequest(streams=2, multi_token_prediction=True))
    plain = replace(w, multi_token_prediction=False)
    lean = Estimator(subject, w, Probes())
    for tokens in (1, 7, 100, 256, 1000, 4096, 8192):
        floor, ceiling = reference(subject, w, tokens)
        assert lean.bounds(tokens) == (floor, ceiling), tokens
        assert floor > reference(subject, plain, tokens)[0], tokens


def test_multi_token_prediction_of_unlisted_nextn_tensors_is_unknown(tmp_path: Path) -> None:
    """A subject whose NextN layers' tensors are not known (a published layout lists none: mtp None) under
    draft-mtp: its weights unknown, with workloadUnsupported, and the plan's estimate has no ceiling; its file's
    own subject is answered."""
    write_model(recurrent.FAMILY_SET["qwen35-mtp"](), tmp_path / "qwen35-mtp.gguf")
    read = _service(tmp_path).subject("qwen35-mtp")
    assert read is not None and read.mtp is not None and read.mtp.count > 0
    w = _workload(read, WorkloadRequest(multi_token_prediction=True))
    parts, limits = forecast_parts(read, w)
    assert parts[0].bytes is not None and Limit.WORKLOAD_UNSUPPORTED not in limits
    unlisted = replace(read, mtp=None)
    parts, limits = forecast_parts(unlisted, w)
    assert parts[0].bytes is None and Limit.WORKLOAD_UNSUPPORTED in limits
    assert Estimator(unlisted, w, Probes()).bounds(4096)[1] is None


def _brute(values: list[tuple[int, int | None]], budget: int) -> tuple[int | None, int | None, int | None]:
    """(good, tight, possible) by looking at every token count (values[t - 1] is at t tokens)."""

    def largest(fits: Callable[[int, int | None], bool]) -> int | None:
        return max((t for t, (lo, up) in enumerate(values, 1) if fits(lo, up)), default=None)

    return (
        largest(lambda lo, up: up is not None and up * (1 + MARGIN) <= budget),
        largest(lambda lo, up: up is not None and up <= budget),
        largest(lambda lo, up: lo <= budget),
    )


BRUTE_LIMIT = 1800  # not a multiple of 256: the last step, (1792, 1800], ends at the limit
# A ubatch above 512: the ubatch grows with the context up to 1,024 tokens x 2 streams, and ggml-alloc's best fit
# makes the workspace fall back a little here and there.
BRUTE_WORKLOADS = {
    **{k: WORKLOADS[k] for k in ("defaults", "unified, 3 streams", "ubatch 256")},
    "ubatch 2048, 2 streams": WORKLOADS["ubatch 2048, 2 streams"],
}


@pytest.mark.parametrize("workload", BRUTE_WORKLOADS.values(), ids=BRUTE_WORKLOADS.keys())
@pytest.mark.parametrize("family", FAMILIES)
def test_the_search_matches_brute_force(subjects: dict[str, Subject], family: str, workload: WorkloadRequest) -> None:
    subject = replace(subjects[family], context_limit=BRUTE_LIMIT)
    w = _workload(subject, workload)
    values = [reference(subject, w, t) for t in range(1, BRUTE_LIMIT + 1)]
    budgets = {0, values[0][0] - 1, values[-1][0] + 10**12}
    for t in (1, 200, 256, 300, 511, 512, 700, 1024, 1500, 1792, 1800):
        lo, up = values[t - 1]
        budgets |= {lo, lo + 1, lo - 1}
        if up is not None:
            budgets |= {up, up - 1, int(up * (1 + MARGIN)), int(up * (1 + MARGIN)) + 1}
    probes = Probes()
    for budget in sorted(budgets):
        found = maxima(Estimator(subject, w, probes), budget, MARGIN, BRUTE_LIMIT)
        assert (found.good, found.tight, found.possible) == _brute(values, budget), (family, budget)


def test_the_search_needs_few_estimates(family_dir: Path) -> None:
    """O(log limit): a 131,072-token limit takes a few dozen context-dependent estimates for all three maxima, on
    a real model's shape (a tiny model's KV grows so little per step that the search walks on past each boundary
    for the allocator's fall-back over dozens of steps)."""
    subject = _service(family_dir).subject("Qwen/Qwen3-8B-GGUF:Q4_K_M")
    assert subject is not None
    subject = replace(subject, context_limit=131072)
    w = _workload(subject, WorkloadRequest())
    budget = reference(subject, w, 50_000)[1]
    assert budget is not None
    probes = Probes()
    found = maxima(Estimator(subject, w, probes), budget, MARGIN, subject.context_limit)
    assert found.tight is not None and 49_000 < found.tight < 51_000
    assert probes.computed <= 3 * (9 + 2)


def _ends(limit: int, streams: int, unified: bool) -> list[int]:
    """Every step end, as list() reads a sequence that has no __iter__ (by index, up to its IndexError)."""
    return list(StepEnds(limit, streams, unified))  # type: ignore[call-overload]  # mypy knows no __getitem__ iteration


def test_step_ends() -> None:
    assert _ends(1000, 4, unified=False) == [256, 512, 768, 1000]
    assert _ends(512, 1, unified=False) == [256, 512]
    assert _ends(200, 1, unified=False) == [200]
    assert _ends(300, 3, unified=True) == [85, 170, 256, 300]
    # from 256 unified streams on, every token count moves the padded cells: one step per token, never more
    assert _ends(5, 256, unified=True) == _ends(5, 2**59, unified=True) == [1, 2, 3, 4, 5]
    assert len(StepEnds(40960, 2**59, unified=True)) == 40960  # was past len()'s range: a 500 from the plan


def test_the_fit_at_good_is_good_and_one_token_more_is_not(family_dir: Path, subjects: dict[str, Subject]) -> None:
    for family, subject in subjects.items():
        w = _workload(subject, WorkloadRequest())
        floor, upper = reference(subject, w, 3000)
        service = _service(family_dir, int(upper * (1 + MARGIN)) if upper is not None else floor)
        (plan,) = service.plan_batch([FitRequest(family)])
        (quant,) = plan.quants
        assert plan.best_quant is None  # one model named, not a repository
        limit = subject.context_limit
        assert limit is not None and quant.max_possible is not None
        if upper is None:  # a part is unknown (MLA's workspace): only the floor can fit
            assert quant.max_good is None and quant.max_tight is None
            assert quant.fit.workload.allocated_tokens == min(4096, limit)  # the documented default
            continue
        good = quant.max_good
        assert good is not None and quant.fit.verdict is Verdict.GOOD, family
        assert quant.fit.workload.allocated_tokens == good
        assert good <= (quant.max_tight or 0) <= quant.max_possible
        if good < limit:
            above = service.fit_one(FitRequest(family, WorkloadRequest(allocated_tokens=good + 1)))
            assert above is not None and above.verdict is not Verdict.GOOD, family
        else:
            assert good == limit


def test_a_repository_means_every_quant_highest_precision_first() -> None:
    service = build_service(read_host=lambda: HostMemory(available=9 << 30, total=9 << 30))
    (plan,) = service.plan_batch([FitRequest("Qwen/Qwen3-8B-GGUF")])
    assert [q.model_id for q in plan.quants] == [
        f"Qwen/Qwen3-8B-GGUF:{q}" for q in ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M")
    ]
    # no context asked: the fit is at `good`, and the best quant is the first good at the default 4096
    for q in plan.quants:
        assert q.fit.workload.allocated_tokens == (q.max_good or 4096)
    best = next(q.quant for q in plan.quants if q.max_good is not None and q.max_good >= 4096)
    assert plan.best_quant == best == "Q6_K"
    (asked,) = service.plan_batch([FitRequest("Qwen/Qwen3-8B-GGUF", WorkloadRequest(allocated_tokens=32768))])
    assert all(q.fit.workload.allocated_tokens == 32768 for q in asked.quants)
    assert asked.best_quant == next((q.quant for q in asked.quants if q.fit.verdict is Verdict.GOOD), None)


def test_the_spec_states_the_precision_order() -> None:
    spec = yaml.safe_load((Path(__file__).resolve().parent.parent / "openapi.yaml").read_text())
    description = " ".join(
        spec["components"]["schemas"]["WireFitPlanResult"]["properties"]["quants"]["description"].split()
    )
    order = " > ".join(sorted(DEFAULT_TYPE, key=precision_key))
    assert order in description


# --- over HTTP --------------------------------------------------------------------------------------------------


def test_plan_answers_in_request_order_leaving_unknown_ids_out(client: httpx.Client) -> None:
    body = [{"modelId": "qwen3-f16"}, {"modelId": "no/such:Q4_K_M"}, {"modelId": "llama-gqa-f16", "streams": 2}]
    response = client.post(PLAN, json=body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["modelId"] for r in results] == ["qwen3-f16", "llama-gqa-f16"]
    for r in results:
        (quant,) = r["quants"]
        assert r["bestQuant"] is None
        assert set(quant["maxAllocatedTokens"]) == {"good", "tight", "possible"}
        assert quant["fit"]["modelId"] == r["modelId"]
    assert results[1]["quants"][0]["fit"]["estimate"]["workload"]["streams"] == 2


@pytest.mark.parametrize(
    ("body", "rule"),
    [([{"modelId": "qwen3-f16"}] * 33, "at most 32 requests, got 33"), ([], "at least 1 requests, got 0")],
    ids=["33", "empty"],
)
def test_a_plan_of_33_or_none_is_400(client: httpx.Client, body: list, rule: str) -> None:
    response = client.post(PLAN, json=body)
    assert response.status_code == 400
    assert response.json()["type"] == "invalidRequest" and response.json()["detail"].startswith(rule)


def test_a_plan_reads_the_budget_once(public_models: Path) -> None:
    calls = []

    def counting() -> HostMemory:
        calls.append(1)
        return read_host_memory()

    service = build_service([Root(str(public_models), RootKind.PLAIN)], read_host=counting)
    with LiveServer(service) as server, server.client() as c:
        body = [{"modelId": "Qwen/Qwen3-8B-GGUF"}, {"modelId": "qwen3-f16"}, {"modelId": "llama-gqa-f16"}]
        results = c.post(PLAN, json=body).json()["results"]
    assert len(calls) == 1
    budgets = {q["fit"]["budget"]["bytes"] for r in results for q in r["quants"]}
    assert len(budgets) == 1 and len(results) == 3 and len(results[0]["quants"]) == 4


@pytest.mark.parametrize("family", ["sliding-window", "recurrent", "hybrid"])
def test_a_plan_under_llama_server_holds_its_slots_and_what_grows_after_load(
    family_dir: Path, subjects: dict[str, Subject], family: str
) -> None:
    """Under the llamaServer profile the search varies the context with llama-server's settings and the ledger's
    parts (the prompt cache, the checkpoints, the mapped weights): the fit at the good maximum is good under the
    profile, one token more is not."""
    subject = subjects[family]
    request = WorkloadRequest(profile="llamaServer")
    w = replace(resolved_workload(request, subject), allocated_tokens=1)
    floor, upper = reference(subject, w, 3000)
    assert upper is not None and upper - floor >= 8192 << 20  # the prompt cache's 8 GiB among the slack
    service = _service(family_dir, int(upper * (1 + MARGIN)))
    (plan,) = service.plan_batch([FitRequest(family, request)])
    (quant,) = plan.quants
    good = quant.max_good
    assert good is not None and quant.fit.verdict is Verdict.GOOD
    assert (quant.fit.workload.streams, quant.fit.workload.profile) == (4, "llamaServer")
    limit = subject.context_limit
    assert limit is not None
    if good < limit:
        above = service.fit_one(FitRequest(family, replace(request, allocated_tokens=good + 1)))
        assert above is not None and above.verdict is not Verdict.GOOD
