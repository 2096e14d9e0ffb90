"""The fit service: what the handlers, the CLI and the plan processes ask of memfit, put together from the parts
that each do one job: Subjects (what an id names), Listing (GET /v1/models), Answers (fits, judged against one
environment reading), Plans, Observations, and the measurement history's access with its faults reported."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from memfit.estimator.catalog import Catalog
from memfit.estimator.cpu_variant import VariantChoice
from memfit.estimator.fit_types import (
    FitRequest,
    FitResult,
    ModelEntry,
    Observation,
    ObservationReceipt,
    PlanResult,
)
from memfit.estimator.machine import CpuFeatures, HostMemory
from memfit.estimator.model_ids import Suggestions, suggestions
from memfit.estimator.plan import PlanBudget
from memfit.estimator.subject import Subject
from memfit.readers.gpu_memory import GpuReader
from memfit.readers.state_health import StateHealth
from memfit.service.answers import Answer, Answers, Environment, Settings
from memfit.service.artifact_cache import ArtifactCache
from memfit.service.history import History, HistoryAccess
from memfit.service.index import ModelIndex
from memfit.service.listing import Listing
from memfit.service.observations import Observations
from memfit.service.plans import Plans
from memfit.service.running import LoadedMarks, ReadRunning
from memfit.service.subjects import HubLookups, Subjects


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
        read_ollama_env: Callable[[], Mapping[str, str] | None] = lambda: None,
        read_running: ReadRunning = lambda: (),
        state: StateHealth | None = None,
        hub: HubLookups | None = None,
    ) -> None:
        self.state = state if state is not None else StateHealth()  # faults of the state directory's files
        self.subjects = Subjects(index, cache, catalog, cpu, hub)
        self.history = history
        self.history_access = HistoryAccess(history, self.state, cache.store)
        self.listing = Listing(self.subjects)
        self.answers = Answers(
            self.subjects, self.history_access, settings, read_host, gpus, read_committed, read_ollama_env, read_running
        )
        self.loaded = LoadedMarks(index, read_running)
        self.plans = Plans(self.subjects, self.answers)
        self.observations = Observations(self.subjects, self.history_access)
        index.warm = self.listing.warm
        index.health = self.state  # a model root that cannot be listed shows in /health

    # --- what the parts share -------------------------------------------------------------------------

    @property
    def index(self) -> ModelIndex:
        return self.subjects.index

    @property
    def cache(self) -> ArtifactCache:
        return self.subjects.cache

    @property
    def catalog(self) -> Catalog:
        return self.subjects.catalog

    @property
    def hub(self) -> HubLookups | None:
        return self.subjects.hub

    @property
    def auto(self) -> VariantChoice:
        return self.subjects.auto

    @property
    def settings(self) -> Settings:
        return self.answers.settings

    @property
    def listings_built(self) -> int:
        return self.listing.built

    # --- one request --------------------------------------------------------------------------------

    def subject(
        self, model_id: str, choice: VariantChoice | None = None, looked_up: Mapping[str, object] | None = None
    ) -> Subject | None:
        return self.subjects.subject(model_id, choice, looked_up)

    def read_environment(self) -> Environment:
        return self.answers.read_environment()

    def fit_batch(
        self, requests: Sequence[FitRequest], cancelled: Callable[[], bool] = lambda: False
    ) -> list[FitResult]:
        return self.answers.fit_batch(requests, cancelled)

    def fit_one(self, request: FitRequest) -> FitResult | None:
        return self.answers.fit_one(request)

    def answer(self, request: FitRequest, looked_up: Mapping[str, object] | None = None) -> Answer | None:
        return self.answers.answer(request, looked_up)

    def plan_batch(
        self,
        requests: Sequence[FitRequest],
        cancelled: Callable[[], bool] = lambda: False,
        budget: PlanBudget | None = None,
    ) -> list[PlanResult]:
        return self.plans.plan_batch(requests, cancelled, budget)

    def model_list(self) -> tuple[ModelEntry, ...]:
        """The listing, each local model a running llama-server has loaded marked."""
        return self.loaded.marked(self.listing.models())

    def left_out(self, model_ids: Sequence[str], repositories: bool = False) -> list[tuple[str, Suggestions, str]]:
        """The ids, each once in order, that no model answers to (with `repositories`, as a plan reads them: nor a
        repository with quants), each with the known ids to suggest instead and why it was left out where more is
        known than that no model has the id (the Hub's answer; '' otherwise)."""
        why = {m: self.subjects.why_left_out(m, repositories) for m in dict.fromkeys(model_ids)}
        missing = [(m, reason) for m, reason in why.items() if reason is not None]
        if not missing:
            return []
        known = [e.model_id for e in self.model_list()]
        return [(m, suggestions(m, known), reason) for m, reason in missing]

    # --- observations and the state directory -------------------------------------------------------

    def record_observation(self, observation: Observation, store: bool = True) -> ObservationReceipt:
        return self.observations.record(observation, store)

    def delete_observation(self, observation_id: int) -> bool:
        return self.observations.delete(observation_id)

    def history_rows(self) -> int | None:
        return self.history_access.rows()

    def check_state(self) -> None:
        self.history_access.check()
