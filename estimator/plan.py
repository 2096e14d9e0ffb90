"""The plan: for one model and workload, the largest allocatedTokens each verdict holds at, found by searching the
estimator itself (POST /v1/models/fit/plan).

KV is not linear in the context (sliding windows, 256-cell padding, recurrent state that does not grow), so the
maxima are never divided out of one estimate. The bounds are monotone non-decreasing in allocatedTokens
(tests/test_plan.py checks every family at every step), so each maximum is a binary search over llama.cpp's cell
steps (estimator/context.py): a non-unified cache is `pad(T, 256)` cells per stream, a unified one
`pad(T x streams, 256)`, so the estimate is constant between two step ends and the largest fitting T is a step
end, or the model's context limit. Below `ubatch` tokens the ubatch itself grows with T (llama.cpp caps it to the
context), so one probe past the step end found says whether the estimate moved inside the step; if it did, the
step is searched token by token. Every probe is an exact estimate: only the context-dependent parts (KV cache,
recurrent state, workspace) are computed per probe, by the kernel forecast_parts asks at one context
(estimator/context_kernel.py), shared between the quants of one plan (their layout is the same).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

from memfit.estimator.bounds import Bounds, bounds
from memfit.estimator.compute_buffer import interned
from memfit.estimator.context import CELL_PADDING
from memfit.estimator.context_kernel import ContextKernel
from memfit.estimator.errors import OverBudget
from memfit.estimator.forecast import forecast_parts, refusal
from memfit.estimator.layout import Layout
from memfit.estimator.ledger import MAPPED
from memfit.estimator.mtp import with_mtp
from memfit.estimator.quant_recipe import DEFAULT_TYPE
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, ContextSource
from memfit.estimator.workload import Workload, input_refusal
from memfit.quant_names import QUANT_NAME

SEARCH_CAP = 1 << 20  # a model without a known context limit is searched up to 1,048,576 tokens
QUANT_TAG = re.compile(QUANT_NAME, re.IGNORECASE)
SUFFIX_RANK = {"L": 3, "M": 2, "S": 1, "XS": 0}  # within one default type: _L above _M above _S (more tensors widened)
PLAN_QUANTS = 64  # the answer-size budget: quants in one plan answer, each with its full fit answer
PLAN_ESTIMATES = 1024  # the work budget: context-dependent estimates one plan request computes (2-32 per model)


@dataclass(frozen=True)
class PlanBudget:
    """What one plan request may cost (the server's bound; None: unbounded, the CLI's own plans)."""

    quants: int = PLAN_QUANTS
    estimates: int = PLAN_ESTIMATES

    def check_quants(self, quants: int) -> None:
        if quants > self.quants:
            raise OverBudget(
                f"the plan names {quants} quants and answers at most {self.quants} (its answer-size budget);"
                " send fewer models or repositories per request"
            )


@dataclass(frozen=True)
class Maxima:
    """The largest allocatedTokens whose verdict is good, whose ceiling fits, whose floor fits; None where none
    does. Each is capped at the model's context limit."""

    good: int | None
    tight: int | None
    possible: int | None


NO_MAXIMA = Maxima(None, None, None)


def precision_key(quant: str) -> tuple:
    """Sort key, highest precision first: the bits per weight of the quant's default tensor type (llama-quantize's
    recipe), then _L > _M > _S, then the name; quants memfit has no recipe for come last."""
    from memfit.estimator.catalog import bits_per_weight  # the catalog imports this module's callers

    name = quant.upper()
    qtype = DEFAULT_TYPE.get(name)
    if qtype is None:
        return (1, 0.0, 0, name)
    suffix = name.rsplit("_", 1)[-1] if name.count("_") >= 2 else ""
    return (0, -bits_per_weight(qtype.name), -SUFFIX_RANK.get(suffix, 0), name)


def is_quant_tag(tag: str) -> bool:
    return QUANT_TAG.fullmatch(tag) is not None


Varying = tuple[int | None, int, int | None, int, int]  # the parts that vary with the context, at one context


class Probes:
    """The context-dependent parts of estimates (KV cache, recurrent state, workspace), per model and workload
    (its kernel) and allocatedTokens; shared by the quants of one plan request."""

    def __init__(self, budget: PlanBudget | None = None) -> None:
        # by the id of the interned layout (its kernel holds it: the id stays its own) and the rest of the key
        self._tables: dict[tuple, tuple[ContextKernel, dict[int, Varying]]] = {}
        self.computed = 0  # work counted: context-dependent estimates actually computed
        self.budget = budget

    def count(self) -> None:
        """One more estimate computed; past the work budget, OverBudget."""
        self.computed += 1
        if self.budget is not None and self.computed > self.budget.estimates:
            raise OverBudget(
                f"the plan's search needs more than {self.budget.estimates} estimates (its work budget);"
                " send fewer models or repositories per request, or a simpler workload"
            )

    def table(self, layout: Layout, subject: Subject, workload: Workload) -> tuple[ContextKernel, dict[int, Varying]]:
        """The kernel of the subject's layout, vocabulary and architecture under the workload (its context aside),
        and the parts found so far by allocatedTokens: the quants of a plan share their layout and workload (each
        quant's equal layout interned: comparing two was a sixth of a plan)."""
        layout = interned(layout)
        key = (
            id(layout),
            subject.n_vocab,
            subject.architecture,
            replace(workload, allocated_tokens=0, context_source=ContextSource.REQUESTED),
        )
        found = self._tables.get(key)
        if found is None:
            found = self._tables[key] = (ContextKernel(layout, subject.n_vocab, subject.architecture, workload), {})
        return found


class Estimator:
    """Exact bounds of one subject under one workload at any allocatedTokens: what `bounds(forecast_parts(...))`
    gives without a measurement history."""

    def __init__(self, subject: Subject, workload: Workload, probes: Probes) -> None:
        subject = with_mtp(subject, workload)  # the weights as the workload loads them (forecast_parts does too)
        self.subject, self.workload, self.probes = subject, workload, probes
        layout = subject.layout
        # the lean path: a known layout and a known flash attention setting, and only the parts llama.cpp allocates
        # at load as memfit answers them by default (no full-size SWA cache, weights read in, nothing that grows
        # after load: estimator/ledger.py), the context-dependent ones from the kernel forecast_parts asks too;
        # otherwise forecast_parts itself
        self.lean = (
            layout is not None
            and workload.flash_attention_on is not None
            and refusal(subject, workload) is None
            and not workload.swa_full
            and workload.load_mode not in MAPPED
            and workload.cache_ram_mib == 0
            and workload.context_checkpoints <= 0
        )
        if not self.lean or layout is None:
            return
        self.kernel, self.memo = probes.table(layout, subject, workload)
        fixed = [subject.weights, subject.companions]
        self.fixed_lower = sum(p.bytes for p in fixed if p.bytes is not None)
        self.fixed_slack = sum(p.slack for p in fixed)
        self.fixed_unknown = any(p.basis is Basis.UNKNOWN for p in fixed) or self.kernel.kv_problem is not None

    def _varying(self, tokens: int) -> Varying:
        """(KV bytes or None when unknown, recurrent state bytes, workspace floor or None, workspace slack, how far
        the workspace's bounds can fall further up) at `tokens`."""
        found = self.memo.get(tokens)
        if found is not None:
            return found
        self.probes.count()
        kernel = self.kernel
        geometry = kernel.geometry(tokens)
        kv = None if kernel.kv_problem else sum(kernel.kv_bytes(geometry))
        ws = kernel.workspace(geometry)
        found = (
            kv,
            sum(kernel.recurrent_bytes(geometry)),
            ws[0] if ws else None,
            ws[1] if ws else 0,
            kernel.fallback(geometry),
        )
        self.memo[tokens] = found
        return found

    def fallback(self, tokens: int) -> int:
        """How far the bounds at `tokens` can fall at a larger context (only the workspace's replay can; nothing
        else falls)."""
        return self._varying(tokens)[4] if self.lean else 0

    def bounds(self, tokens: int) -> tuple[int, int | None]:
        """(floor, ceiling or None) at `tokens` allocatedTokens per stream."""
        if not self.lean:
            self.probes.count()
            parts, _ = forecast_parts(self.subject, replace(self.workload, allocated_tokens=tokens))
            b: Bounds = bounds(parts)
            return b.lower, b.upper
        kv, recurrent, ws_floor, ws_slack, _ = self._varying(tokens)
        lower = self.fixed_lower + (kv or 0) + recurrent + (ws_floor or 0)
        if self.fixed_unknown or kv is None or ws_floor is None:
            return lower, None
        return lower, lower + self.fixed_slack + ws_slack


class StepEnds:
    """The allocatedTokens at which the estimate can change, as the right ends of llama.cpp's cell steps (the
    estimate is constant on (previous end, end], apart from the ubatch below `ubatch` tokens), up to `limit`,
    which ends the last step. A sequence computed on demand: a unified cache of many streams has many steps, at
    most one per token (from 256 streams on, every token count moves the padded cells), so at most `limit`."""

    def __init__(self, limit: int, streams: int, unified: bool) -> None:
        self.limit = limit
        # T x streams cells padded to 256: past 256 streams each token is a step, as with exactly 256
        self.per_end = min(streams, CELL_PADDING) if unified else 1
        self.first = -(-self.per_end // CELL_PADDING)  # the first step whose end is at least 1 token
        last = (limit * self.per_end) // CELL_PADDING
        self.count = max(0, last - self.first + 1)
        self.capped = self.count == 0 or self._end(self.count - 1) != limit  # the limit ends one more step

    def _end(self, i: int) -> int:
        return (self.first + i) * CELL_PADDING // self.per_end

    def __len__(self) -> int:
        return self.count + self.capped

    def __getitem__(self, i: int) -> int:
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.limit if i == self.count else self._end(i)


def maxima(estimator: Estimator, budget: int | None, margin: Fraction, limit: int | None) -> Maxima:
    """The three maxima, each by binary search over the step ends and on past the boundary while a bound could
    still fall back under the budget (Estimator.fallback), refined inside the steps within reach (_largest). None
    when the budget is unknown or the workload is refused whatever the context."""
    w = estimator.workload
    if budget is None or input_refusal(replace(w, allocated_tokens=1)) is not None:
        return NO_MAXIMA
    if limit is not None and limit <= 0:
        return NO_MAXIMA
    ends = StepEnds(limit if limit is not None else SEARCH_CAP, w.streams, w.kv_unified)
    cache: dict[int, tuple[int, int | None]] = {}

    def at(tokens: int) -> tuple[int, int | None]:
        if tokens not in cache:
            cache[tokens] = estimator.bounds(tokens)
        return cache[tokens]

    scale, per = margin.numerator + margin.denominator, margin.denominator  # 1 + margin

    def widened(value: int) -> int:
        """ceil(value * (1 + margin)) in integers (Fraction arithmetic was a tenth of a plan)."""
        return -(-value * scale // per)

    def with_margin(tokens: int) -> int | None:
        ceiling = at(tokens)[1]
        return None if ceiling is None else widened(ceiling)

    checks = {
        "possible": Checks(lambda tokens: at(tokens)[0], budget, estimator.fallback),
        "tight": Checks(lambda tokens: at(tokens)[1], budget, estimator.fallback),
        "good": Checks(with_margin, budget, lambda tokens: widened(estimator.fallback(tokens))),
    }
    found = {name: _largest(check, ends) for name, check in checks.items()}
    return Maxima(found["good"], found["tight"], found["possible"])


def _largest(check: Checks, ends: StepEnds) -> int | None:
    """The largest allocatedTokens that fits: the last fitting step end (binary search, then on while in reach),
    refined inside the step after it; and inside every later step whose end is still within reach, where a
    smaller ubatch (the context below n_ubatch) can make a context fit that the step's end does not."""
    lo, reach = _last_fitting(check, ends.__getitem__, -1, len(ends), len(ends))
    best = _refine(check, ends, lo)
    for j in range(lo + 2, min(reach, len(ends) - 1) + 1):
        inside, _ = _last_fitting(check, _same, ends[j - 1], ends[j], ends[j])
        if inside > ends[j - 1]:
            best = max(best or 0, inside)
    return best


def _same(tokens: int) -> int:
    return tokens


@dataclass(frozen=True)
class Checks:
    """One bound of the estimate (floor, ceiling, ceiling with the margin) against the budget."""

    bound: Callable[[int], int | None]
    budget: int
    fallback: Callable[[int], int]  # how far the bound at a context can fall at a larger one

    def fits(self, tokens: int) -> bool:
        b = self.bound(tokens)
        return b is not None and b <= self.budget

    def out_of_reach(self, tokens: int) -> bool:
        """Whether no larger context fits either: the bound is unknown (it stays unknown further up) or above the
        budget by more than it can fall back."""
        b = self.bound(tokens)
        return b is None or b - self.fallback(tokens) > self.budget


def _last_fitting(check: Checks, tokens_at: Callable[[int], int], lo: int, hi: int, stop: int) -> tuple[int, int]:
    """(the last index below `stop` whose tokens fit, or `lo`; the first index out of reach, or `stop`), `lo` a
    start taken to fit and `hi` not (or `stop`): a binary search between them, then on past the boundary while an
    index is not out of reach."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if check.fits(tokens_at(mid)):
            lo = mid
        else:
            hi = mid
    i = hi
    while i < stop and not check.out_of_reach(tokens_at(i)):
        if check.fits(tokens_at(i)):
            lo = i
        i += 1
    return lo, i


def _refine(check: Checks, ends: StepEnds, i: int) -> int | None:
    """The largest fitting T in (ends[i], ends[i + 1]) when the estimate moves inside that step, else ends[i]."""
    low = ends[i] if i >= 0 else 0
    if i + 1 >= len(ends):
        return low or None  # capped at the limit
    high = ends[i + 1]  # does not fit
    if high - low <= 1 or (not check.fits(low + 1) and check.out_of_reach(low + 1)):
        return low or None  # constant over the step, or nothing in it can fit
    return _last_fitting(check, _same, low, high, high)[0] or None


def largest_placed(high: int, meets: Callable[[int], tuple[bool, bool]]) -> int | None:
    """The largest n in [0, high] (gpuLayers, up to the model's layers and the output layer) whose placement meets a
    verdict, where `meets(n)` says whether every GPU meets it and whether the host does. llama.cpp's placement moves
    whole layers from the host to the GPUs as n grows (llama_model::load_tensors, the output layer last), so each
    GPU's share grows with n and the host's shrinks: the GPUs meet it up to some n and the host from some n on. A
    binary search finds the GPUs' largest; the host is checked there (at any smaller n it holds more). None where
    no n meets it."""
    gpus_meet, host_meets = meets(0)
    if not gpus_meet:
        return None
    lo, hi = 0, high  # the GPUs meet it at lo
    while lo < hi:
        mid = (lo + hi + 1) // 2
        gpus_meet, host_meets_mid = meets(mid)
        if gpus_meet:
            lo, host_meets = mid, host_meets_mid
        else:
            hi = mid - 1
    return lo if host_meets else None
