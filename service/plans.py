"""POST /v1/models/fit/plan: for every quant a request names, the largest context at which each verdict holds
(searched over the estimator, estimator/plan.py), and the full answer at the context asked about."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from memfit.estimator.errors import Cancelled
from memfit.estimator.fit_types import FitRequest, PlanResult, QuantPlan
from memfit.estimator.model_ids import typed_id
from memfit.estimator.plan import Estimator, Maxima, PlanBudget, Probes, maxima
from memfit.estimator.profiles import resolved_workload
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Profile, Verdict
from memfit.service.answers import Answer, Answers
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
        environment = answers.read_environment()
        probes = Probes(budget)
        planned: list[tuple[FitRequest, bool, list[tuple[Subject, Maxima, int]]]] = []
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
                fits.append(answers.answer_for(FitRequest(subject.model_id, at), subject, choice))
                asked = workload.allocated_tokens  # the requested context, else the documented default (capped)
                rows.append((subject, found, asked))
            if rows:
                planned.append((request, repository, rows))
        judged = iter(answers.judge(fits, environment))
        results = []
        for request, repository, rows in planned:
            quants = tuple(
                QuantPlan(
                    s.model_id, s.quant or s.model_id.rpartition(":")[2], m.good, m.tight, m.possible, next(judged)
                )
                for s, m, _ in rows
            )
            best = None
            if repository:
                requested = request.workload.allocated_tokens is not None
                best = next(
                    (
                        q.quant
                        for q, (_, m, asked) in zip(quants, rows, strict=True)
                        if (q.fit.verdict is Verdict.GOOD if requested else m.good is not None and m.good >= asked)
                    ),
                    None,
                )
            results.append(PlanResult(request.model_id, quants, best))
        return results

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
