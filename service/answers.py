"""Fit answers: one environment reading per request, one forecast per model, and every answer judged against that
one reading."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import lru_cache

from memfit.estimator.bounds import REFUSED, Bounds, Part, bounds
from memfit.estimator.budget import Budget, BudgetSetting, budget_from
from memfit.estimator.cpu_variant import CpuVariant, VariantChoice
from memfit.estimator.device_forecast import DeviceShare, device_shares, judge_devices
from memfit.estimator.errors import Cancelled
from memfit.estimator.fit_types import FitRequest, FitResult
from memfit.estimator.forecast import forecast_parts
from memfit.estimator.machine import GpuMemory, HostMemory
from memfit.estimator.observations import NO_MATCH
from memfit.estimator.profiles import NO_FACTS, LaunchFacts, resolved_workload
from memfit.estimator.server_args import RunningServer
from memfit.estimator.subject import Subject
from memfit.estimator.verdict import DEFAULT_MARGIN
from memfit.estimator.vocabulary import BudgetBasis, Component, Limit, Mode, Profile, Refusal, Verdict
from memfit.estimator.workload import Workload, WorkloadRequest, exceeds_limit, input_refusal
from memfit.readers.gpu_memory import GpuReader
from memfit.service.history import HistoryAccess
from memfit.service.memo import Memo
from memfit.service.running import ReadRunning, server_for
from memfit.service.subjects import Subjects

ANSWERS_KEPT = 1024  # answers kept for the next request (each small: its parts; its subject is kept anyway)
JUDGED_KEPT = 8  # batches' judgements kept: a launcher's few batches, each against the last readings


@dataclass(frozen=True)
class Settings:
    margin: Fraction = DEFAULT_MARGIN
    budget: BudgetSetting = BudgetSetting.AVAILABLE
    gpus: tuple[GpuMemory, ...] | None = None  # declared GPUs (memfit serve --gpu), in place of those read


@dataclass(frozen=True)
class Environment:
    """What one request is judged against, read once and shared by every answer in it."""

    budget: Budget
    gpus: list[GpuMemory] | None
    host_total: int | None = None


@dataclass(frozen=True)
class Answer:
    model_id: str  # as the request named it
    subject: Subject
    workload: Workload
    refusal: Refusal
    parts: list[Part]
    bounds: Bounds
    limits: list[Limit]
    variants: tuple[CpuVariant, ...] = ()  # the CPU variants its weights are for
    observed: bool = False  # the measurement history held a record for it (an observation, or a weak identity's)


class Answers:
    def __init__(
        self,
        subjects: Subjects,
        history: HistoryAccess,
        settings: Settings,
        read_host: Callable[[], HostMemory],
        gpus: GpuReader,
        read_committed: Callable[[], int | None],
        read_ollama_env: Callable[[], Mapping[str, str] | None] = lambda: None,
        read_running: ReadRunning = lambda: (),
    ) -> None:
        self.subjects = subjects
        self.history = history
        self.settings = settings
        self.read_host = read_host
        self.gpu_reader = gpus  # NVML's or Metal's (service_builder chooses)
        self.read_committed = read_committed
        self.read_ollama_env = read_ollama_env  # the OLLAMA_* variables `ollama serve` runs with
        self.read_running = read_running  # the llama-servers running on this host
        # each answer per (its subject, the request, the CPU variants, the launch facts, the history's version):
        # what answer_for computes from them alone, so a warm batch only judges
        self._answers: Memo[tuple, Answer] = Memo(ANSWERS_KEPT)
        self._placed: Memo[tuple, tuple[Answer, tuple[Part, ...], tuple[DeviceShare, ...]]] = Memo(ANSWERS_KEPT)
        # each batch's results per (its answers, the environment): the host's memory reading moves about once a
        # second (the kernel folds its counters at vm.stat_interval), so a launcher's repeated batch is judged once
        # per reading, and the same results given again let memfit.wire_json keep its bytes
        self._judged: Memo[tuple, tuple[tuple[Answer, ...], tuple[FitResult, ...]]] = Memo(JUDGED_KEPT)

    def read_environment(self) -> Environment:
        host = self.read_host()
        return Environment(
            budget=budget_from(host, self.settings.budget, self.read_committed()),
            gpus=self.read_gpus(),
            host_total=host.total,
        )

    def fit_batch(
        self, requests: Sequence[FitRequest], cancelled: Callable[[], bool] = lambda: False
    ) -> list[FitResult]:
        """Answers in request order; a request naming no known model is left out. Raises Cancelled as soon as
        `cancelled()` says so, between two models."""
        environment = self.read_environment()
        looked_up = self.subjects.hub_lookup([r.model_id for r in requests], cancelled)  # at once
        reading = Reading(self)
        answers: list[Answer] = []
        for request in requests:
            if cancelled():
                raise Cancelled(f"cancelled after {len(answers)} of {len(requests)} models")
            answer = self.answer(request, looked_up, reading)
            if answer is not None:
                answers.append(answer)
        return self.judge(answers, environment)

    def fit_one(self, request: FitRequest) -> FitResult | None:
        answer = self.answer(request)
        if answer is None:
            return None
        return self.judge([answer], self.read_environment())[0]

    def answer(
        self, request: FitRequest, looked_up: Mapping[str, object] | None = None, reading: Reading | None = None
    ) -> Answer | None:
        """The answer about the model `request` names, or None. `reading`: what the request has read so far (read
        now when not given). The same answer is given again while its subject, the request, the launch facts and
        the history's version stay (the CPU variants are the request's: this host's CPU is read once)."""
        reading = reading or Reading(self)
        choice = self.subjects.variant_choice(request)
        subject = reading.subject(request.model_id, choice, looked_up)
        if subject is None:
            return None
        return self.kept_answer(
            request, subject, choice, reading.facts(request.workload, request.model_id), reading.history
        )

    def kept_answer(
        self, request: FitRequest, subject: Subject, choice: VariantChoice, facts: LaunchFacts, history: int
    ) -> Answer:
        """answer_for's answer, given again while its subject, the request, the launch facts `facts` and the
        history's version `history` (HistoryAccess.version, read once per request) stay."""
        key = (id(subject), request, facts_key(facts), history)
        kept = self._answers.get(key)
        if kept is not None and kept.subject is subject:  # not another subject at a freed one's address
            return kept
        answer = self.answer_for(request, subject, choice, facts)
        if answer.observed:  # its record is looked up again each time: a history that breaks falls back to derived
            return answer
        return self._answers.put(key, answer)

    def answer_for(
        self, request: FitRequest, subject: Subject, choice: VariantChoice, facts: LaunchFacts | None = None
    ) -> Answer:
        """The answer about `subject` (its weights under the CPU variants of `choice`), the model
        `request.model_id` names; `facts`: what the request's launch profile reads of this machine (read now when
        not given)."""
        if facts is None:
            facts = self.launch_facts(request.workload, request.model_id)
        variant = choice.variants[0] if choice.variants else None
        workload = replace(resolved_workload(request.workload, subject, facts, variant), cpu_variant=choice.name)
        refusal = input_refusal(workload)
        parts: list[Part] = []
        limits = list(subject.limits)
        if request.workload.profile == Profile.RUNNING and not _read_whole(facts):
            limits.append(Limit.RUNNING_SERVER_UNREAD)
        if not choice.variants:  # a variant this host cannot run: its weights are not llama.cpp's here
            limits.append(Limit.WORKLOAD_UNSUPPORTED)
        estimate = REFUSED
        observed = False
        if refusal is None:
            match = self.history.match(subject, workload)
            observed = match != NO_MATCH
            parts, more_limits = forecast_parts(subject, workload, match)
            estimate = bounds(parts)
            if estimate.overflows:
                refusal = Refusal.NON_FINITE_INPUT
            elif exceeds_limit(workload, subject.context_limit):
                refusal = Refusal.CONTEXT_EXCEEDS_MODEL_LIMIT
            else:
                limits.extend(more_limits)
        if refusal is not None:
            return Answer(request.model_id, subject, workload.clamped(), refusal, [], REFUSED, limits)
        return Answer(
            request.model_id, subject, workload, Refusal.NONE, parts, estimate, limits, choice.variants, observed
        )

    def read_gpus(self) -> list[GpuMemory] | None:
        """The GPUs the server was told to assume, else those NVML (or Metal) reports; None where none are read."""
        return list(self.settings.gpus) if self.settings.gpus is not None else self.gpu_reader.read()

    def launch_facts(self, workload: WorkloadRequest, model_id: str = "") -> LaunchFacts:
        """What a launch profile reads of this machine: the host's and the GPUs' total memory (llama.cpp's fitter,
        Ollama's VRAM tiers), for Ollama its server's environment, for `running` the llama-server that has the local
        model `model_id` loaded; for `custom`, the GPUs alone where the fitter places (cpuOffload), else nothing."""
        profile = workload.profile
        if profile in (None, Profile.CUSTOM):
            if workload.mode != Mode.CPU_OFFLOAD:
                return NO_FACTS
            gpus = self.read_gpus()
            return LaunchFacts(gpus=tuple(gpus) if gpus is not None else None)
        gpus = self.read_gpus()
        return LaunchFacts(
            host_total=self.read_host().total,
            gpu_total=sum(g.total for g in gpus) if gpus is not None else None,
            gpus=tuple(gpus) if gpus is not None else None,
            ollama_env=self.read_ollama_env() if profile == Profile.OLLAMA else None,
            running=self.running_server(model_id) if profile == Profile.RUNNING else None,
        )

    def running_server(self, model_id: str) -> RunningServer | None:
        """The llama-server running on this host that has the local model `model_id` loaded, if one does."""
        return server_for(self.subjects.index, self.read_running(), model_id)

    def judge(self, answers: Sequence[Answer], environment: Environment) -> list[FitResult]:
        """Answers judged against one environment; sharedKey marks file sets used twice. The same answers against
        an equal environment are given the same results again."""
        gpus = None if environment.gpus is None else tuple(environment.gpus)
        key = (*map(id, answers), environment.budget, gpus, environment.host_total)
        kept = self._judged.get(key)
        if kept is not None and len(kept[0]) == len(answers) and all(map(operator.is_, kept[0], answers)):
            return list(kept[1])
        results = self._judged_anew(answers, environment, gpus)
        self._judged.put(key, (tuple(answers), tuple(results)))
        return results

    def _judged_anew(
        self, answers: Sequence[Answer], environment: Environment, gpus: tuple[GpuMemory, ...] | None
    ) -> list[FitResult]:
        uses: Counter[str] = Counter()
        for a in answers:
            if a.parts:
                uses.update({a.subject.weights_key, a.subject.companions_key} - {""})
        budget = environment.budget
        results = []
        for a in answers:
            refused = a.refusal is not Refusal.NONE
            shared = (uses[a.subject.weights_key] > 1, uses[a.subject.companions_key] > 1)
            parts, shares = self.placed(a, shared, gpus)
            judged = judge_devices(shares, budget.bytes, self.settings.margin, environment.gpus is not None)
            limits = list(a.limits)
            if any(s.unsupported for s in shares):
                limits.append(Limit.WORKLOAD_UNSUPPORTED)
            if budget.basis is BudgetBasis.UNKNOWN:
                limits.append(Limit.HOST_TELEMETRY_UNAVAILABLE)
            if environment.gpus is None:
                limits.append(Limit.GPU_TELEMETRY_UNAVAILABLE)
            results.append(
                FitResult(
                    model_id=a.model_id,
                    subject=a.subject,
                    workload=a.workload,
                    refusal=a.refusal,
                    parts=parts,
                    bounds=a.bounds,
                    verdict=Verdict.UNKNOWN if refused else judged.verdict,
                    budget=budget,
                    # an unknown mode without gpuLayers names no placement to admit
                    gpu_admits=None if refused or a.workload.placement.gpu_layers is None else judged.gpu_admits,
                    limits=_ordered_limits(limits),
                    devices=shares,
                    device_verdicts=judged.verdicts,
                    decided_by=judged.decided_by,
                    host_total=environment.host_total,
                )
            )
        return results

    def placed(
        self, a: Answer, shared: tuple[bool, bool], gpus: tuple[GpuMemory, ...] | None
    ) -> tuple[tuple[Part, ...], tuple[DeviceShare, ...]]:
        """An answer's parts (sharedKey set on its weights and companions where `shared` says their file sets are
        used twice in the request) and its share of each pool of `gpus`; kept per (answer, shared, gpus), with the
        same objects given again, so that what is built from them can be kept too (memfit.wire)."""
        key = (id(a), shared, gpus)
        kept = self._placed.get(key)
        if kept is not None and kept[0] is a:
            return kept[1], kept[2]
        weights, companions = a.subject.weights_key, a.subject.companions_key
        keys = {Component.WEIGHTS: weights if shared[0] else "", Component.COMPANIONS: companions if shared[1] else ""}
        parts = tuple(replace(p, shared_key=keys[p.component]) if keys.get(p.component) else p for p in a.parts)
        refused = a.refusal is not Refusal.NONE
        shares = () if refused else device_shares(a.subject, a.workload, parts, a.variants, gpus or ())
        self._placed.put(key, (a, parts, shares))
        return parts, shares


class Reading:
    """What one request reads once, for all its answers: the history's version, the launch facts of each profile
    and mode it names (for `running`, the server that has each model loaded) and each model it names (a batch
    naming one file 32 times stats it once)."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.history = answers.history.version()
        self.launches: dict[tuple, LaunchFacts] = {}
        self.subjects: dict[tuple[str, VariantChoice], Subject | None] = {}

    def subject(self, model_id: str, choice: VariantChoice, looked_up: Mapping[str, object] | None) -> Subject | None:
        key = (model_id, choice)
        if key not in self.subjects:
            self.subjects[key] = self.answers.subjects.subject(model_id, choice, looked_up)
        return self.subjects[key]

    def facts(self, workload: WorkloadRequest, model_id: str) -> LaunchFacts:
        key = (workload.profile, workload.mode)
        found = self.launches.get(key)
        if found is None:
            found = self.launches[key] = self.answers.launch_facts(workload)
        if workload.profile == Profile.RUNNING:
            found = replace(found, running=self.answers.running_server(model_id))
        return found


def facts_key(facts: LaunchFacts) -> tuple:
    """Launch facts as a key (the Ollama server's environment as sorted pairs, a running server by its fields)."""
    env = facts.ollama_env
    return (
        facts.host_total,
        facts.gpu_total,
        facts.gpus,
        None if env is None else tuple(sorted(env.items())),
        None if facts.running is None else repr(facts.running),
    )


def _read_whole(facts: LaunchFacts) -> bool:
    """Whether the running profile found the server, heard it answer, and could express all its command line."""
    return facts.running is not None and facts.running.answered and not facts.running.args.unread


def _ordered_limits(limits: Sequence[Limit]) -> tuple[str, ...]:
    return _in_order(frozenset(limits))


@lru_cache(maxsize=256)  # a few sets of limits recur in every answer
def _in_order(present: frozenset[Limit]) -> tuple[str, ...]:
    return tuple(limit.value for limit in Limit if limit in present)
