"""The one way the estimator says "this evidence is unusable": the limit word and why."""

from memfit.estimator.vocabulary import Limit


class EvidenceError(ValueError):
    """Evidence for one model could not be used; `limit` is the answer's limits entry for it."""

    def __init__(self, limit: Limit, message: str) -> None:
        super().__init__(message)
        self.limit = limit


class NotAModel(EvidenceError):
    """The file is a GGUF of another kind llama.cpp does not run as a model: an adapter, an importance matrix, a
    projector, a vocabulary without weights. `kind` says which."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(Limit.ARTIFACT_UNREADABLE, message)
        self.kind = kind


class Cancelled(Exception):
    """The request was cancelled (its client went away, or the server is stopping): the rest is not worked out."""


class ObservationRefused(ValueError):
    """An observation contradicts what memfit derives exactly for the model it names; `part` is the part."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part


class OverBudget(ValueError):
    """A plan request past one of its budgets (estimator/plan.py's PlanBudget); the message names which and its
    limit."""
