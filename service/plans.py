"""POST /v1/models/fit/plan: for every quant a request names, the largest context at which each verdict holds
(searched over the estimator, estimator/plan.py), and the full answer at the context asked about."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial

from memfit.estimator.cpu_variant import VariantChoice
from memfit.estimator.errors import Cancelled
from memfit.estimator.fit_types import FitRequest, LayerMaxima, PlanResult, QuantPlan
from memfit.estimator.model_ids import typed_id
from memfit.estimator.placement import FFN_EXPS
from memfit.estimator.plan import Estimator, Maxima, PlanBudget, Probes, largest_placed, maxima
from memfit.estimator.profiles import resolved_workload
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Mode, Profile, Refusal, SettingSource, Verdict
from memfit.estimator.workload import ALL_LAYERS
from memfit.service.answers import Answer, Answers, Environment
from memfit.service.subjects import Subjects, tagged


class Plans:
    def __init__(self, subjects: Subjects, answers: Answers) -> None:
        self.subjects = subjects
        self.answers = answers

    def plan_batch(
        self,
        requests: Sequence[FitRequest],
        cancelled: Callable[[], bool] = lambda: False,
        budget: PlanBudget | None = None,
    ) -> list[PlanResult]:
        """Per request, in request order (a request naming no known model is left out): for every quant it names,
        the largest allocatedTokens whose verdict is good, whose ceiling fits and whose floor fits, searched over
        the derived estimate (estimator/plan.py), and the full answer at the requested context, else at the
        good maximum, else at the default; all against ONE environment reading. Past `budget` (the quants
        named, checked before any search; the estimates computed), OverBudget."""
        subjects, answers = self.subjects, self.answers
        named_quants, looked_up = self._prefetch(requests, cancelled)
        if budget is not None:
            budget.check_quants(named_quants)  # before the Hub is asked for a header more
        choices = [subjects.variant_choice(request) for request in requests]
        named = [
            (request, choice, *subjects.plan_subjects(request.model_id, choice, looked_up))
            for request, choice in zip(requests, choices, strict=True)
        ]
        if budget is not None:
            budget.check_quants(sum(len(found) for _, _, found, _ in named))
        environment, history = answers.read_environment(), answers.history.version()
        probes = Probes(budget)
        planned: list[tuple[FitRequest, bool, list[tuple[Subject, Maxima, int, LayerMaxima | None]]]] = []
        fits: list[Answer] = []
        for request, choice, found_subjects, repository in named:
            if cancelled():
                raise Cancelled(f"cancelled after {len(planned)} of {len(requests)} plans")
            rows = []
            facts = answers.launch_facts(request.workload)
            for subject in found_subjects:
                if request.workload.profile == Profile.RUNNING:  # the server that has this one loaded
                    facts = replace(facts, running=answers.running_server(subject.model_id))
                # under a launch profile, its settings (the context aside: the search varies it)
                workload = resolved_workload(request.workload, subject, facts)
                found = maxima(
                    Estimator(subject, workload, probes),
                    environment.budget.bytes,
                    answers.settings.margin,
                    subject.context_limit,
                )
                tokens = request.workload.allocated_tokens
                at = replace(request.workload, allocated_tokens=found.good if tokens is None else tokens)
                fit = answers.kept_answer(FitRequest(subject.model_id, at), subject, choice, facts, history)
                fits.append(fit)
                asked = workload.allocated_tokens  # the requested context, else the documented default (capped)
                # a refused workload (no sequences, say) places nothing: llama.cpp would not make the context
                refused = fit.refusal is not Refusal.NONE
                layers = (
                    None
                    if refused
                    else self._layers(FitRequest(subject.model_id, at), subject, choice, environment, probes, history)
                )
                rows.append((subject, found, asked, layers))
            if rows:
                planned.append((request, repository, rows))
        judged = iter(answers.judge(fits, environment))
        results = []
        for request, repository, rows in planned:
            quants = tuple(
                QuantPlan(
                    s.model_id,
                    s.quant or s.model_id.rpartition(":")[2],
                    m.good,
                    m.tight,
                    m.possible,
                    next(judged),
                    layers,
                )
                for s, m, _, layers in rows
            )
            best = None
            if repository:
                requested = request.workload.allocated_tokens is not None
                best = next(
                    (
                        q.quant
                        for q, (_, m, asked, _) in zip(quants, rows, strict=True)
                        if (q.fit.verdict is Verdict.GOOD if requested else m.good is not None and m.good >= asked)
                    ),
                    None,
                )
            results.append(PlanResult(request.model_id, quants, best))
        return results

    def _layers(
        self,
        request: FitRequest,
        subject: Subject,
        choice: VariantChoice,
        environment: Environment,
        probes: Probes,
        history: int,
    ) -> LayerMaxima | None:
        """On GPUs (read or declared), at the request's context: the largest gpuLayers whose verdict is good and at
        least tight, every pool judged (the host against the budget, each GPU against its free memory), and the
        gpuLayers llama.cpp's fitter chooses; None without GPUs or without the model's tensors."""
        answers = self.answers
        if not environment.gpus or not subject.tensors:
            return None
        tensors = subject.tensors[0]
        high = tensors.n_trunk + 1  # every layer and the output layer (llama_model::load_tensors)
        judged: dict[tuple, tuple[tuple[Verdict, bool], ...]] = {}  # placement -> each pool's verdict, if it holds

        def pools(gpu_layers: int | str, n_cpu_moe: int | None) -> tuple[tuple[Verdict, bool], ...]:
            key = (gpu_layers, n_cpu_moe)
            if key not in judged:
                probes.count()
                placement = replace(request.workload, gpu_layers=gpu_layers, n_cpu_moe=n_cpu_moe)
                facts = answers.launch_facts(placement, request.model_id)
                answer = answers.kept_answer(FitRequest(request.model_id, placement), subject, choice, facts, history)
                result = answers.judge([answer], environment)[0]
                holding = [d.holds_model for d in result.devices]
                refused = result.refusal is not Refusal.NONE
                judged[key] = () if refused else tuple(zip(result.device_verdicts, holding, strict=True))
            return judged[key]

        def meets(allowed: frozenset[Verdict], placed: Callable[[int], tuple]) -> Callable[[int], tuple[bool, bool]]:
            def at(n: int) -> tuple[bool, bool]:  # a pool holding none of the model decides nothing, as in the verdict
                found = pools(*placed(n))
                if not found:  # refused
                    return False, False
                (host, *gpus) = (v in allowed or not holds for v, holds in found)
                return all(gpus), host

            return at

        good, tight = frozenset({Verdict.GOOD}), frozenset({Verdict.GOOD, Verdict.TIGHT})
        layers = partial(_placed_layers, n_cpu_moe=request.workload.n_cpu_moe)
        n_moe = tensors.n_trunk if any(re.search(FFN_EXPS, w.name) for w in tensors.weights) else 0
        experts = partial(_experts_on_gpus, n_moe)  # m: the layers whose experts stay on the GPUs

        def fewest_on_host(allowed: frozenset[Verdict]) -> int | None:
            m = largest_placed(n_moe, meets(allowed, experts))
            return None if m is None else n_moe - m

        fitter = replace(request.workload, mode=Mode.CPU_OFFLOAD, gpu_layers=None)
        chosen = answers.answer_for(FitRequest(request.model_id, fitter), subject, choice).workload
        by_fitter = any(r.setting == "gpuLayers" and r.source is SettingSource.FITTER for r in chosen.sources)
        ngl = chosen.placement.gpu_layers
        return LayerMaxima(
            good=largest_placed(high, meets(good, layers)),
            tight=largest_placed(high, meets(tight, layers)),
            fitter=(high if ngl == ALL_LAYERS else int(ngl or 0)) if by_fitter else None,
            n_cpu_moe_good=fewest_on_host(good) if n_moe else None,
            n_cpu_moe_tight=fewest_on_host(tight) if n_moe else None,
        )

    def _prefetch(
        self, requests: Sequence[FitRequest], cancelled: Callable[[], bool]
    ) -> tuple[int, Mapping[str, object]]:
        """Ask the Hub at once for what the plans will answer: the repositories' file lists, then every quant's
        headers. The number of models the plans name (at most: an id that names none is counted), and what the
        Hub answered."""
        s = self.subjects
        ids = [typed_id(r.model_id) for r in requests]
        repositories = [i for i in ids if ":" not in i]
        s.hub_quants(repositories, cancelled)
        wanted = [tagged(i, tag) for i in repositories for tag in s.quant_tags(i)]
        wanted += [i for i in ids if ":" in i or not s.quant_tags(i)]
        return len(wanted), s.hub_lookup(wanted, cancelled)


def _placed_layers(n: int, n_cpu_moe: int | None) -> tuple[int | str, int | None]:
    """(gpuLayers, nCpuMoe) with n layers on the GPUs (the request's nCpuMoe)."""
    return n, n_cpu_moe


def _experts_on_gpus(n_moe: int, m: int) -> tuple[int | str, int | None]:
    """(gpuLayers, nCpuMoe) with every layer on the GPUs and the experts of all but the last m of the n_moe layers
    on the host (--n-cpu-moe counts from the first layer)."""
    return ALL_LAYERS, n_moe - m
