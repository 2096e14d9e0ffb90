"""The fit service: one environment reading per request, one forecast and verdict per model, in domain types."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Protocol, TypeVar

from memfit.estimator.artifact import HubArtifact, HubMiss
from memfit.estimator.artifact_cache import ArtifactCache
from memfit.estimator.bounds import REFUSED, Bounds, Part, bounds
from memfit.estimator.budget import Budget, BudgetSetting, budget_from
from memfit.estimator.catalog import Catalog
from memfit.estimator.context import context_geometry
from memfit.estimator.cpu_variant import AUTO, VariantChoice, resolve_variant
from memfit.estimator.errors import Cancelled, EvidenceError, ObservationRefused
from memfit.estimator.fit_types import (
    FitRequest,
    FitResult,
    ModelEntry,
    Observation,
    ObservationReceipt,
    ObservationRow,
    ObservedParts,
    ObservedWorkload,
    PlanResult,
    QuantPlan,
    StoredObservation,
)
from memfit.estimator.forecast import forecast_parts, workspace_ceiling, workspace_floor
from memfit.estimator.gpu_admission import gpu_admits
from memfit.estimator.history import KV_ROUNDING, NO_MATCH, History, HistoryMatch, kv_contradiction, weak_identity
from memfit.estimator.kv_cache import is_llama_cpp_type
from memfit.estimator.machine import CpuFeatures, GpuMemory, HostMemory
from memfit.estimator.model_ids import Suggestions, hub_id, suggestions, typed_id
from memfit.estimator.plan import Estimator, Maxima, PlanBudget, Probes, is_quant_tag, maxima, precision_key
from memfit.estimator.registry import ModelIndex
from memfit.estimator.subject import Subject, hub_subject, local_subject
from memfit.estimator.verdict import DEFAULT_MARGIN, verdict
from memfit.estimator.vocabulary import (
    Basis,
    BudgetBasis,
    Component,
    Limit,
    ModelSource,
    ObservationFlag,
    Refusal,
    Verdict,
)
from memfit.estimator.workload import Workload, exceeds_limit, input_refusal, resolve_workload
from memfit.readers.gpu_memory import GpuReader
from memfit.readers.history_db import REPLACED, HistoryDB
from memfit.readers.model_roots import LocalArtifact
from memfit.readers.state_health import (
    HEADERS,
    HISTORY,
    HISTORY_WRITES,
    StateFileError,
    StateHealth,
    describe,
)

T = TypeVar("T")


class HubLookups(Protocol):
    """The Hugging Face Hub as the service asks it (memfit.readers.hub.HubModels): models and repositories' quants
    by id, at once within a deadline, each a HubArtifact (or a tuple of quant tags) or a HubMiss; the models
    answered before, for GET /v1/models; `version` moves when one is recorded."""

    version: int

    def lookup(self, model_ids: Sequence[str], cancelled: Callable[[], bool] = ...) -> Mapping[str, object]: ...

    def quants(self, repos: Sequence[str], cancelled: Callable[[], bool] = ...) -> Mapping[str, object]: ...

    def remember_model(self, entry: dict) -> None: ...

    def models(self) -> list[dict]: ...


@dataclass(frozen=True)
class Settings:
    margin: Fraction = DEFAULT_MARGIN
    budget: BudgetSetting = BudgetSetting.AVAILABLE


@dataclass(frozen=True)
class Environment:
    """What one request is judged against, read once and shared by every answer in it."""

    budget: Budget
    gpus: list[GpuMemory] | None


@dataclass(frozen=True)
class Answer:
    model_id: str  # as the request named it
    subject: Subject
    workload: Workload
    refusal: Refusal
    parts: list[Part]
    bounds: Bounds
    limits: list[Limit]


def _ordered_limits(limits: Sequence[Limit]) -> tuple[str, ...]:
    present = set(limits)
    return tuple(limit.value for limit in Limit if limit in present)


class FitService:
    """Built by memfit.service_builder.build_service, which chooses the readers."""

    def __init__(
        self,
        *,
        index: ModelIndex,
        cache: ArtifactCache,
        settings: Settings,
        read_host: Callable[[], HostMemory],
        gpus: GpuReader,
        catalog: Catalog,
        history: History,
        read_committed: Callable[[], int | None],
        cpu: CpuFeatures,
        state: StateHealth | None = None,
        hub: HubLookups | None = None,
    ) -> None:
        self.index = index
        self.hub = hub  # the Hugging Face Hub, for ids that name no local file (None: not asked)
        self.cache = cache
        self.catalog = catalog
        self.history = history
        self.read_committed = read_committed
        self.settings = settings
        self.read_host = read_host
        self.gpu_reader = gpus  # NVML's or Metal's (service_builder chooses)
        self.cpu = cpu  # fixed per process: the cached artifact facts do not depend on it
        self.auto = resolve_variant(AUTO, cpu)  # the variant ggml's loader picks here
        self.state = state if state is not None else StateHealth()  # faults of the state directory's files
        self._listing: tuple[tuple[int, int, int], tuple[ModelEntry, ...]] | None = None
        self._listing_lock = threading.Lock()
        self.listings_built = 0  # work counted: how often the listing was derived
        self._local_entries: dict[tuple, ModelEntry] = {}  # (artifact, file identities) -> its listing entry
        index.warm = self.warm
        index.health = self.state  # a model root that cannot be listed shows in /health

    def warm(self, artifacts: Sequence[LocalArtifact]) -> None:
        """Read the facts of these artifacts and their projectors, where not yet cached (called by the index's
        thread with what a change made new), then build the listing, so that requests find both ready."""
        self._reserve(self.index.artifacts())
        for artifact in artifacts:
            for paths in (artifact.paths, (artifact.projector,) if artifact.projector else ()):
                if paths:
                    try:
                        self.cache.facts(paths)
                    except EvidenceError:  # answered (and cached) as unreadable; a request says why
                        pass
        self.model_list()

    def _reserve(self, artifacts: Sequence[LocalArtifact]) -> None:
        self.cache.reserve(len(artifacts) + len({a.projector for a in artifacts if a.projector}))

    def _read_history(self, read: Callable[[HistoryDB], T], otherwise: T, probing: bool = False) -> T:
        """A read of the measurement history; when it cannot be read, `otherwise` (answers use the derived numbers)
        and the fault is reported (state_health) and left to rest before it is tried again (by a probe of GET
        /health, `probing`, sooner after a lock)."""
        db = self.history.db
        if db is None or (self.state.resting(HISTORY) and not (probing and self.state.due(HISTORY))):
            return otherwise
        try:
            if not db.still_at_path():
                raise sqlite3.OperationalError(REPLACED)
            value = read(db)
        except (sqlite3.Error, OSError) as exc:
            self.state.fault(
                HISTORY,
                f"the measurement history {db.path} cannot be read ({describe(exc)}); answers use the derived numbers",
                exc,
            )
            return otherwise
        self.state.ok(HISTORY)
        return value

    def history_match(self, subject: Subject, workload: Workload) -> HistoryMatch:
        """The measurement history's observation for this answer (one indexed query), or none."""
        return self._read_history(lambda _: self.history.match(subject, workload), NO_MATCH)

    def history_rows(self) -> int | None:
        """How many observations the measurement history holds; None without one, or when it cannot be read."""
        return self._read_history(HistoryDB.count, None)

    def check_state(self) -> None:
        """For GET /health: read the history once, so that a fault since the last request shows, and try each
        state file a lock made fail again once the fault is state_health.PROBE_S old, so that `degraded` ends soon
        after the lock is let go, although no request may have used the file since. No probe waits for a lock."""
        self._read_history(HistoryDB.probe, None, probing=True)
        db, store = self.history.db, self.cache.store
        if db is not None and self.state.due(HISTORY_WRITES):
            with contextlib.suppress(StateFileError):  # reported as a fault by _history_request
                self._history_request(HISTORY_WRITES, db.probe_write)
        if store is not None and self.state.due(HEADERS):
            store.probe()

    def _history_request(self, name: str, use: Callable[[], T]) -> T:
        """An operation a request asked of the history: a StateFileError is reported as the fault `name`
        (HISTORY for a read, HISTORY_WRITES for a write) and raised again (a 503); a success ends that fault."""
        try:
            value = use()
        except StateFileError as exc:
            done = "read" if name == HISTORY else "written"
            self.state.fault(name, f"the measurement history {exc.path} cannot be {done} ({exc.reason})", exc.__cause__)
            raise
        self.state.ok(name)
        return value

    # --- one request ------------------------------------------------------------------------------

    def read_environment(self) -> Environment:
        return Environment(
            budget=budget_from(self.read_host(), self.settings.budget, self.read_committed()),
            gpus=self.gpu_reader.read(),
        )

    def subject(
        self, model_id: str, choice: VariantChoice | None = None, looked_up: Mapping[str, object] | None = None
    ) -> Subject | None:
        """A model on disk beats the Hub's header of its repository, which beats a catalog entry with the same id
        (measured beats exact beats proxy); its weights under the CPU variants `choice` names (by default the one
        ggml's loader picks on this host). A catalog answer for an id the Hub could not answer says why.
        `looked_up`: what this request's lookups found on the Hub (hub_lookup's answer), so that each answer says
        what its own request fetched; an id not in it is looked up now."""
        variants = (choice or self.auto).variants
        model_id = typed_id(model_id)
        artifact = self._local(model_id)
        if artifact is not None:
            return local_subject(artifact, self.cache, variants)
        found = (looked_up if looked_up and model_id in looked_up else self.hub_lookup([model_id])).get(model_id)
        if isinstance(found, HubArtifact):
            remote = hub_subject(found, self.cache, variants)
            self._listed_from_hub(remote, found)
            return remote
        subject = self.catalog.subject(model_id.partition("@")[0], variants)
        if subject is not None and isinstance(found, HubMiss) and not found.offline:
            note = f"{subject.weights.note}; the Hub was not used ({found.reason}): the bundled catalog answers"
            subject = replace(subject, weights=replace(subject.weights, note=note))
        return subject

    def _local(self, model_id: str) -> LocalArtifact | None:
        """The local artifact an id names; `org/repo:QUANT@revision` names one of a hub cache's snapshot when the
        revision is its commit or `main`."""
        artifact = self.index.get(model_id)
        if artifact is None and "@" in model_id:
            base, _, revision = model_id.partition("@")
            artifact = self.index.get(base)
            if artifact is not None and revision not in ("main", artifact.revision):
                return None
        return artifact

    def hub_lookup(
        self, model_ids: Sequence[str], cancelled: Callable[[], bool] = lambda: False
    ) -> Mapping[str, object]:
        """What the Hub holds for each of these ids that names no local file (all looked up at once, within the
        Hub's deadline; each answered from memfit's cache when it was asked before): a HubArtifact, or a HubMiss
        that says why not. Empty without a Hub."""
        if self.hub is None:
            return {}
        wanted = [m for m in (typed_id(i) for i in model_ids) if self._local(m) is None]
        return self.hub.lookup(wanted, cancelled) if wanted else {}

    def _hub_quants(
        self, repositories: Sequence[str], cancelled: Callable[[], bool] = lambda: False
    ) -> Mapping[str, object]:
        """Each Hub repository's quant tags from its file list (or a HubMiss), at once; empty without a Hub."""
        if self.hub is None:
            return {}
        return self.hub.quants([typed_id(r) for r in repositories], cancelled)

    def _listed_from_hub(self, subject: Subject, found: HubArtifact) -> None:
        """Record a model answered from the Hub, for GET /v1/models (a file that is not a model is not listed)."""
        if self.hub is not None and subject.is_model and not subject.unreadable:
            self.hub.remember_model(
                {
                    "model_id": subject.model_id,
                    "revision": found.commit,
                    "architecture": subject.architecture,
                    "quant": subject.quant,
                    "context_limit": subject.context_limit,
                    "has_projector": found.projector is not None,
                }
            )

    def variant_choice(self, request: FitRequest) -> VariantChoice:
        """The CPU variants a request's `cpuVariant` names on this host."""
        requested = request.workload.cpu_variant
        return self.auto if requested in (None, AUTO) else resolve_variant(requested, self.cpu)

    def fit_batch(
        self, requests: Sequence[FitRequest], cancelled: Callable[[], bool] = lambda: False
    ) -> list[FitResult]:
        """Answers in request order; a request naming no known model is left out. Raises Cancelled as soon as
        `cancelled()` says so, between two models."""
        environment = self.read_environment()
        looked_up = self.hub_lookup([r.model_id for r in requests], cancelled)  # at once
        answers: list[Answer] = []
        for request in requests:
            if cancelled():
                raise Cancelled(f"cancelled after {len(answers)} of {len(requests)} models")
            answer = self.answer(request, looked_up)
            if answer is not None:
                answers.append(answer)
        return self.judge(answers, environment)

    def fit_one(self, request: FitRequest) -> FitResult | None:
        answer = self.answer(request)
        if answer is None:
            return None
        return self.judge([answer], self.read_environment())[0]

    def model_list(self) -> tuple[ModelEntry, ...]:
        """Local artifacts in index order (roots in order, then by id), then catalog entries not on disk, by id.
        GGUFs that are not models (adapters, vocabulary-only files) are left out.

        A maintained view: derived again only when the index moved (a rescan, a file changed in place) or new
        facts were cached; otherwise the same tuple is returned, at no cost per model."""
        key = self._listing_key()
        listing = self._listing
        if listing is not None and listing[0] == key:
            return listing[1]
        with self._listing_lock:
            listing = self._listing
            key = self._listing_key()
            if listing is not None and listing[0] == key:
                return listing[1]
            entries = self._derive_list()
            self.listings_built += 1
            self._listing = (key, entries)  # the key taken before deriving: facts read meanwhile move it again
            return entries

    def _listing_key(self) -> tuple[int, int, int]:
        return self.index.generation, self.cache.version, self.hub.version if self.hub is not None else 0

    def _derive_list(self) -> tuple[ModelEntry, ...]:
        """The listing; a local artifact's entry is taken from the last listing while the index saw its files
        unchanged, so a change costs what it changed (an unreadable one is always read again)."""
        artifacts = self.index.artifacts()
        self._reserve(artifacts)
        entries = []
        known, self._local_entries = self._local_entries, {}
        for artifact in artifacts:
            seen = self.index.file_identities(artifact)
            key = None if seen is None else (artifact, seen)
            local = known.get(key) if key is not None else None
            if local is None:
                subject = local_subject(artifact, self.cache, self.auto.variants)
                if not subject.is_model:
                    continue
                local = ModelEntry(
                    model_id=artifact.model_id,
                    source=ModelSource.LOCAL,
                    root=artifact.root,
                    architecture=subject.architecture,
                    quant=subject.quant,
                    revision=artifact.revision,
                    artifact_bytes=subject.artifact_bytes,
                    context_limit=subject.context_limit,
                    has_projector=artifact.projector is not None,
                    unreadable=subject.unreadable or None,
                )
            if key is not None and local.unreadable is None:
                self._local_entries[key] = local
            entries.append(local)
        listed = {e.model_id.lower() for e in entries}
        for remote in self._hub_entries():
            if remote.model_id.lower() not in listed:
                listed.add(remote.model_id.lower())
                entries.append(remote)
        for entry, quant in self.catalog.ids():
            model_id = f"{entry.model_id}:{quant}"
            if model_id.lower() not in listed and self.index.get(model_id) is None:
                entries.append(
                    ModelEntry(
                        model_id=model_id,
                        source=ModelSource.CATALOG,
                        root="",
                        architecture=entry.architecture,
                        quant=quant,
                        revision="",
                        artifact_bytes=None,
                        context_limit=entry.context_length,
                        has_projector=False,
                    )
                )
        return tuple(entries)

    def _hub_entries(self) -> list[ModelEntry]:
        """The models answered from the Hub before (by any process of this state directory), newest first."""
        entries = []
        for e in self.hub.models() if self.hub is not None else ():
            limit = e.get("context_limit")
            entries.append(
                ModelEntry(
                    model_id=str(e.get("model_id", "")),
                    source=ModelSource.HUB,
                    root="",
                    architecture=str(e.get("architecture", "")),
                    quant=str(e.get("quant", "")),
                    revision=str(e.get("revision", "")),
                    artifact_bytes=None,
                    context_limit=limit if isinstance(limit, int) and limit >= 0 else None,
                    has_projector=e.get("has_projector") is True,
                )
            )
        return [e for e in entries if hub_id(e.model_id) is not None]

    def record_observation(self, observation: Observation, store: bool = True) -> ObservationReceipt:
        """Store what a runtime allocated. An observation answers would use (a known model, under exactly the
        strong identity memfit derives from) is refused when a part contradicts what memfit derives exactly: a
        workspace below its floor or above its derived ceiling, or a KV cache off the derived one by more than
        llama.cpp's log rounding.
        Any other observation about a known model is stored, its contradicting KV cache flagged. With `store`
        false it is checked the same way and not stored (a dry run: no observation id)."""
        subject = self.subject(observation.model_id)
        p = observation.parts
        w = resolve_workload(observation.workload, subject.context_limit if subject is not None else None)
        observed_at = (observation.observed_at or datetime.now(UTC)).isoformat(timespec="seconds")
        flags: list[str] = []
        note = ""
        if subject is not None:
            parts, _ = forecast_parts(subject, w)
            kv, workspace = parts[1], parts[3]
            derived_kv = kv.bytes if kv.basis is Basis.DERIVED_LAYOUT else None
            note = kv_contradiction(p.kv_cache, derived_kv)
            if self._checked(observation, subject):
                self._refuse_contradictions(p, note, derived_kv, subject, w, workspace)
            if note:
                flags.append(ObservationFlag.KV_CONTRADICTS_DERIVED)
        model_id = subject.model_id if subject is not None else observation.model_id
        row = ObservationRow(
            model_id=model_id,
            revision=observation.revision,
            quant=observation.quant,
            artifact_bytes=observation.artifact_bytes,
            allocated_tokens=w.allocated_tokens,
            streams=w.streams,
            key_element_bytes=w.key_element_bytes,
            value_element_bytes=w.value_element_bytes,
            mode=w.mode,
            weights_bytes=p.weights,
            kv_cache_bytes=p.kv_cache,
            recurrent_state_bytes=p.recurrent_state,
            workspace_bytes=p.workspace,
            companions_bytes=p.companions,
            runtime=observation.runtime,
            observed_at=observed_at,
            note=note.lstrip("; "),
        )
        observation_id = self._history_request(HISTORY_WRITES, lambda: self.history.record(row)) if store else None
        return ObservationReceipt(
            observation_id=observation_id, model_id=model_id, known=subject is not None, flags=tuple(flags)
        )

    @staticmethod
    def _checked(observation: Observation, subject: Subject) -> bool:
        """Whether answers would use this observation: the identity is the subject's, and strong."""
        identity = (observation.revision, observation.quant, observation.artifact_bytes)
        return identity == (subject.revision, subject.quant, subject.artifact_bytes) and not weak_identity(
            subject.revision, subject.artifact_bytes
        )

    @staticmethod
    def _refuse_contradictions(
        p: ObservedParts, kv_note: str, derived_kv: int | None, subject: Subject, w: Workload, workspace: Part
    ) -> None:
        if kv_note and is_llama_cpp_type(w.key_element_bytes) and is_llama_cpp_type(w.value_element_bytes):
            raise ObservationRefused(
                Component.KV_CACHE,
                f"parts.kvCache: {p.kv_cache} bytes contradicts the {derived_kv} bytes memfit derives exactly for"
                f" this model and workload (llama.cpp's log rounds to {KV_ROUNDING} bytes); was it loaded with"
                " another workload?",
            )
        geometry = (
            context_geometry(w.allocated_tokens, w.streams, causal=subject.layout.causal)
            if subject.layout is not None
            else None
        )
        floor, ceiling = workspace_floor(subject, geometry, workspace), workspace_ceiling(workspace)
        if p.workspace is not None and floor is not None and p.workspace < floor[0]:
            raise ObservationRefused(
                Component.WORKSPACE,
                f"parts.workspace: {p.workspace} bytes is below {floor[1]}, the least llama.cpp allocates for"
                " this model and workload",
            )
        if p.workspace is not None and ceiling is not None and p.workspace > ceiling:
            raise ObservationRefused(
                Component.WORKSPACE,
                f"parts.workspace: {p.workspace} bytes is above the derived workspace ceiling ({ceiling} bytes), the"
                " most llama.cpp allocates for this model and workload",
            )

    def observations(self, limit: int, model_id: str | None = None) -> list[StoredObservation]:
        """The newest `limit` observations, newest first; only those stored under `model_id` (an alias is
        resolved to the full id observations are stored under) when given."""
        if model_id is not None:
            subject = self.subject(model_id)
            model_id = subject.model_id if subject is not None else model_id
        return [
            StoredObservation(
                observation_id=r.id or 0,
                model_id=r.model_id,
                revision=r.revision,
                quant=r.quant,
                artifact_bytes=r.artifact_bytes,
                workload=ObservedWorkload(
                    r.allocated_tokens, r.streams, r.key_element_bytes, r.value_element_bytes, r.mode
                ),
                parts=ObservedParts(
                    r.weights_bytes, r.kv_cache_bytes, r.recurrent_state_bytes, r.workspace_bytes, r.companions_bytes
                ),
                runtime=r.runtime,
                observed_at=r.observed_at,
                note=r.note,
            )
            for r in self._history_request(HISTORY, lambda: self.history.newest(limit, model_id))
        ]

    def delete_observation(self, observation_id: int) -> bool:
        """Remove one observation; False when none has that id. Answers stop using it at once."""
        return self._history_request(HISTORY_WRITES, lambda: self.history.delete(observation_id))

    # --- one model --------------------------------------------------------------------------------

    def answer(self, request: FitRequest, looked_up: Mapping[str, object] | None = None) -> Answer | None:
        choice = self.variant_choice(request)
        subject = self.subject(request.model_id, choice, looked_up)
        if subject is None:
            return None
        return self.answer_for(request, subject, choice)

    def answer_for(self, request: FitRequest, subject: Subject, choice: VariantChoice) -> Answer:
        """The answer about `subject` (its weights under the CPU variants of `choice`), the model
        `request.model_id` names."""
        workload = replace(resolve_workload(request.workload, subject.context_limit), cpu_variant=choice.name)
        refusal = input_refusal(workload)
        parts: list[Part] = []
        limits = list(subject.limits)
        if not choice.variants:  # a variant this host cannot run: its weights are not llama.cpp's here
            limits.append(Limit.WORKLOAD_UNSUPPORTED)
        estimate = REFUSED
        if refusal is None:
            parts, more_limits = forecast_parts(subject, workload, self.history_match(subject, workload))
            estimate = bounds(parts)
            if estimate.overflows:
                refusal = Refusal.NON_FINITE_INPUT
            elif exceeds_limit(workload, subject.context_limit):
                refusal = Refusal.CONTEXT_EXCEEDS_MODEL_LIMIT
            else:
                limits.extend(more_limits)
        if refusal is not None:
            return Answer(request.model_id, subject, workload.clamped(), refusal, [], REFUSED, limits)
        return Answer(request.model_id, subject, workload, Refusal.NONE, parts, estimate, limits)

    # --- plans: the largest context each verdict holds at ----------------------------------------------

    def plan_subjects(
        self, model_id: str, choice: VariantChoice | None = None, looked_up: Mapping[str, object] | None = None
    ) -> tuple[list[Subject], bool]:
        """The models a plan request names, highest precision first, and whether it named a repository: a
        repository id without a tag means every quant its file list on the Hub holds (else, the Hub not asked or
        not answering, every quant the catalog lists for it), and every quant-tagged artifact of it on this machine
        (a file beats the Hub's header, which beats the catalog entry with the same id)."""
        model_id = typed_id(model_id)
        tags = self._quant_tags(model_id)
        subjects = [s for tag in tags if (s := self.subject(_tagged(model_id, tag), choice, looked_up)) is not None]
        if subjects:
            return sorted(subjects, key=lambda s: precision_key(s.model_id.rpartition(":")[2])), True
        subject = self.subject(model_id, choice, looked_up)
        return ([subject] if subject is not None else []), False

    def _quant_tags(self, repository: str) -> list[str]:
        """The quants a repository id without a tag names: its files' on the Hub (else the catalog's), then those
        of its quant-tagged artifacts on this machine; none for an id with a tag."""
        if ":" in repository:
            return []
        base = repository.partition("@")[0]
        listed = self._hub_quants([repository]).get(repository)
        tags = dict.fromkeys(listed if isinstance(listed, tuple) else self.catalog.quants(base))
        for artifact in self.index.artifacts():
            repo, sep, tag = artifact.model_id.rpartition(":")
            if sep and repo == base and is_quant_tag(tag):
                tags.setdefault(tag.upper())
        return list(tags)

    def _prefetch_plans(
        self, requests: Sequence[FitRequest], cancelled: Callable[[], bool]
    ) -> tuple[int, Mapping[str, object]]:
        """Ask the Hub at once for what the plans will answer: the repositories' file lists, then every quant's
        headers. The number of models the plans name (at most: an id that names none is counted), and what the
        Hub answered."""
        ids = [typed_id(r.model_id) for r in requests]
        repositories = [i for i in ids if ":" not in i]
        self._hub_quants(repositories, cancelled)
        wanted = [_tagged(i, tag) for i in repositories for tag in self._quant_tags(i)]
        wanted += [i for i in ids if ":" in i or not self._quant_tags(i)]
        return len(wanted), self.hub_lookup(wanted, cancelled)

    def left_out(self, model_ids: Sequence[str], repositories: bool = False) -> list[tuple[str, Suggestions, str]]:
        """The ids, each once in order, that no model answers to (with `repositories`, as a plan reads them: nor a
        repository with quants), each with the known ids to suggest instead and why it was left out where more is
        known than that no model has the id (the Hub's answer; '' otherwise)."""
        why = {m: self._why_left_out(m, repositories) for m in dict.fromkeys(model_ids)}
        missing = [(m, reason) for m, reason in why.items() if reason is not None]
        if not missing:
            return []
        known = [e.model_id for e in self.model_list()]
        return [(m, suggestions(m, known), why) for m, why in missing]

    def _why_left_out(self, model_id: str, repositories: bool) -> str | None:
        """None when `subject` (and with `repositories`, `plan_subjects`) finds a model, without building one; else
        why it finds none."""
        model_id = typed_id(model_id)
        if self._names_a_model(model_id):
            return None
        if repositories and any(self._names_a_model(_tagged(model_id, t)) for t in self._quant_tags(model_id)):
            return None
        found = self.hub_lookup([model_id]).get(model_id)
        return found.reason if isinstance(found, HubMiss) else ""

    def _names_a_model(self, model_id: str) -> bool:
        if self._local(model_id) is not None or self.catalog.find(model_id.partition("@")[0]) is not None:
            return True
        return isinstance(self.hub_lookup([model_id]).get(model_id), HubArtifact)

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
        named_quants, looked_up = self._prefetch_plans(requests, cancelled)
        if budget is not None:
            budget.check_quants(named_quants)  # before the Hub is asked for a header more
        choices = [self.variant_choice(request) for request in requests]
        named = [
            (request, choice, *self.plan_subjects(request.model_id, choice, looked_up))
            for request, choice in zip(requests, choices, strict=True)
        ]
        if budget is not None:
            budget.check_quants(sum(len(subjects) for _, _, subjects, _ in named))
        environment = self.read_environment()
        probes = Probes(budget)
        planned: list[tuple[FitRequest, bool, list[tuple[Subject, Maxima, int]]]] = []
        answers: list[Answer] = []
        for request, choice, subjects, repository in named:
            if cancelled():
                raise Cancelled(f"cancelled after {len(planned)} of {len(requests)} plans")
            rows = []
            for subject in subjects:
                workload = resolve_workload(request.workload, subject.context_limit)
                found = maxima(
                    Estimator(subject, workload, probes),
                    environment.budget.bytes,
                    self.settings.margin,
                    subject.context_limit,
                )
                tokens = request.workload.allocated_tokens
                at = replace(request.workload, allocated_tokens=found.good if tokens is None else tokens)
                answers.append(self.answer_for(FitRequest(subject.model_id, at), subject, choice))
                asked = workload.allocated_tokens  # the requested context, else the documented default (capped)
                rows.append((subject, found, asked))
            if rows:
                planned.append((request, repository, rows))
        judged = iter(self.judge(answers, environment))
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

    # --- judged against one environment ---------------------------------------------------------

    def judge(self, answers: Sequence[Answer], environment: Environment) -> list[FitResult]:
        """Answers judged against one environment; sharedKey marks file sets used twice."""
        uses: Counter[str] = Counter()
        for a in answers:
            if a.parts:
                uses.update({a.subject.weights_key, a.subject.companions_key} - {""})
        budget = environment.budget
        results = []
        for a in answers:
            keys = {Component.WEIGHTS: a.subject.weights_key, Component.COMPANIONS: a.subject.companions_key}
            parts = tuple(
                replace(p, shared_key=keys[p.component]) if uses[keys.get(p.component, "")] > 1 else p for p in a.parts
            )
            admits = None if a.refusal is not Refusal.NONE else gpu_admits(a.workload.mode, parts, environment.gpus)
            limits = list(a.limits)
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
                    verdict=verdict(a.bounds, budget.bytes, self.settings.margin, a.refusal is not Refusal.NONE),
                    budget=budget,
                    gpu_admits=admits,
                    limits=_ordered_limits(limits),
                )
            )
        return results


def _tagged(repository: str, tag: str) -> str:
    """The id of one quant of a repository id (`org/repo@revision` -> `org/repo:TAG@revision`)."""
    base, at, revision = repository.partition("@")
    return f"{base}:{tag}{at}{revision}"
