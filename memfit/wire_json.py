"""POST /v1/models/fit/batch's answer as the JSON the server sends, put together from fragments kept per answer.

What a result says that does not depend on the request's environment reading (its model id, identity, estimate and
soft bytes; a device's name, parts, bounds and note) is dumped once per answer: the fit service gives the same
objects again while a warm answer holds (service/answers.py), and the fragments are kept by those objects. What
the environment decides (the budget, the verdicts, free and total memory, the limits) is written per request: the
budget applied last. Byte for byte what WireFitVerdictBatch.model_dump_json(by_alias=True) writes
(tests/test_wire_json.py holds them equal), each fragment cut out of that same dump of the generated models.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic_core import to_json

from memfit import wire
from memfit.estimator.device_forecast import DeviceShare
from memfit.estimator.fit_types import FitRequest, FitResult, ModelEntry
from memfit.estimator.vocabulary import Verdict
from memfit.service.fit_service import FitService
from memfit.service.memo import Memo

if TYPE_CHECKING:
    from memfit.generated import models as generated

KEPT = 4096  # results' and devices' fragments kept (a few KiB each)
RESULT_KEPT = ("model_id", "identity", "estimate", "soft_bytes")  # the rest: from the environment
DEVICE_KEPT = ("name", "kind", "declared", "unified", "parts", "lower_bound_bytes", "upper_bound_bytes", "note")

SMALL_KEPT = 4096  # the JSON of the few values a request's environment gives (verdicts, limits, sources)
BATCHES_KEPT = 8  # whole batches' JSON, kept by their results (Answers.judge gives the same ones again)


class Template:
    """A generated model's JSON with the kept fields' values written in and gaps for the others, in the model's
    order (its fields by alias, as model_dump_json(by_alias=True) writes them)."""

    def __init__(self, model: type[BaseModel], kept: Mapping[str, bytes]) -> None:
        self.chunks: list[bytes] = []
        self.gaps: list[str] = []
        chunk = b"{"
        for i, (name, field) in enumerate(model.model_fields.items()):
            chunk += b'%s"%s":' % (b"," if i else b"", (field.alias or name).encode())
            if name in kept:
                chunk += kept[name]
            else:
                self.chunks.append(chunk)
                self.gaps.append(name)
                chunk = b""
        self.chunks.append(chunk + b"}")

    def fill(self, values: Mapping[str, bytes]) -> bytes:
        """The JSON with each gap's value (by field name) written in."""
        parts = [self.chunks[0]]
        for name, chunk in zip(self.gaps, self.chunks[1:], strict=True):
            parts += (values[name], chunk)
        return b"".join(parts)


_results: Memo[tuple, tuple[tuple, Template]] = Memo(KEPT)
_devices: Memo[int, tuple[tuple, Template]] = Memo(KEPT)
_small: dict[tuple, bytes] = {}
_batches: Memo[tuple, tuple[tuple[FitResult, ...], list, bytes]] = Memo(BATCHES_KEPT)


def fragments(model: BaseModel, names: Iterable[str]) -> dict[str, bytes]:
    """Each named field's value as model_dump_json writes it inside `model`."""
    found = {}
    for name in names:
        dumped = model.model_dump_json(by_alias=True, include={name}).encode()  # {"alias":value}
        found[name] = dumped[dumped.index(b'":') + 2 : -1]
    return found


def _kept(memo: Memo, key: Any, holds: tuple, build: Callable[[], Template]) -> Template:
    """The template kept under `key` for the objects `holds` (the same objects, not others at their addresses)."""
    kept = memo.get(key)
    if kept is None or len(kept[0]) != len(holds) or any(a is not b for a, b in zip(kept[0], holds, strict=True)):
        kept = memo.put(key, (holds, build()))
    return kept[1]


def _json(value: object) -> bytes:
    """A plain value's JSON, as pydantic writes it: an int written out, anything else (a verdict, a source, a
    tuple of limits, None, a bool) dumped once (keyed with its type: True is not 1)."""
    if type(value) is int:
        return b"%d" % value
    key = (type(value), value)
    found = _small.get(key)
    if found is None:
        found = to_json(value)
        if len(_small) < SMALL_KEPT:
            _small[key] = found
    return found


def result_json(r: FitResult, budget: bytes, m: Any) -> bytes:
    """One result: its kept fragments, and what the environment decided (`budget`: the request's, dumped)."""
    holds = (r.subject, r.workload, r.parts, r.bounds)
    key = (r.model_id, r.refusal, *map(id, holds))
    template = _kept(
        _results, key, holds, lambda: Template(m.WireFitVerdictResult, fragments(wire.fit_result(r, m), RESULT_KEPT))
    )
    devices = b",".join(device_json(r, s, v, m) for s, v in zip(r.devices, r.device_verdicts, strict=True))
    return template.fill(
        {
            "verdict": _json(r.verdict),
            "budget": budget,
            "gpu_admits": _json(r.gpu_admits),
            "devices": b"[" + devices + b"]",
            "decided_by": _json(r.decided_by),
            "limits": _json(r.limits),
        }
    )


def device_json(r: FitResult, share: DeviceShare, verdict: Verdict, m: Any) -> bytes:
    template = _kept(
        _devices,
        id(share),
        (share,),
        lambda: Template(m.WireFitDevice, fragments(wire.device(r, share, verdict, m), DEVICE_KEPT)),
    )
    source, free, total = wire.pool_memory(r, share)
    return template.fill(
        {"source": _json(source), "free_bytes": _json(free), "total_bytes": _json(total), "verdict": _json(verdict)}
    )


def batch_json(results: Sequence[FitResult], left_out: list[generated.WireLeftOut], m: Any) -> bytes:
    """The batch: its results, and `leftOut` as the generated model writes it; dumped once for the same results
    (the same objects) and an equal `leftOut`."""
    key = tuple(map(id, results))
    kept = _batches.get(key)
    if kept is not None and all(map(operator.is_, kept[0], results)) and kept[1] == left_out:
        return kept[2]
    return _batches.put(key, (tuple(results), left_out, _batch_json(results, left_out, m)))[2]


def _batch_json(results: Sequence[FitResult], left_out: list[generated.WireLeftOut], m: Any) -> bytes:
    shell = m.WireFitVerdictBatch(results=[], left_out=left_out).model_dump_json(by_alias=True).encode()
    start = b'{"results":['
    if not shell.startswith(start + b"]"):
        raise AssertionError(f"WireFitVerdictBatch no longer starts with its results: {shell[:40]!r}")
    budgets: dict[int, bytes] = {}  # one per environment reading: every result of a request shares it
    parts = []
    for r in results:
        budget = budgets.get(id(r.budget))
        if budget is None:
            budget = budgets[id(r.budget)] = wire.fit_budget(r.budget, m).model_dump_json(by_alias=True).encode()
        parts.append(result_json(r, budget, m))
    return start + b",".join(parts) + shell[len(start) :]


# The last listing dumped: (the service's entries, their JSON). The service returns the same tuple while nothing
# changed, so a warm listing is not dumped again.
_listing: tuple[object, bytes] | None = None


def model_list_json(service: FitService) -> bytes:
    """GET /v1/models' body, dumped once per change of the listing."""
    global _listing
    entries = service.model_list()
    kept = _listing
    if kept is None or kept[0] is not entries:
        kept = _listing = (entries, models_json(entries, wire.generated()))
    return kept[1]


def models_json(entries: Sequence[ModelEntry], m: Any) -> bytes:
    """What WireModelList.model_dump_json(by_alias=True) writes for these entries, without a model built and
    validated per entry first (most of a first listing's time at 50,000 models): each entry's fields written into
    the model's template (an entry naming the llama-servers that loaded it, a rare one, is dumped whole)."""
    shell = m.WireModelList(models=[]).model_dump_json(by_alias=True).encode()
    start = b'{"models":['
    if not shell.startswith(start + b"]"):
        raise AssertionError(f"WireModelList no longer starts with its models: {shell[:40]!r}")
    template = Template(m.WireModelEntry, {"loaded_by": b"null"})  # the domain's and the wire's names are one
    parts = [
        template.fill({name: _field_json(getattr(e, name)) for name in template.gaps})
        if not e.loaded_by
        else wire.model_entry(e, m).model_dump_json(by_alias=True).encode()
        for e in entries
    ]
    return start + b",".join(parts) + shell[len(start) :]


def _field_json(value: object) -> bytes:
    """A listing field's JSON: text (ids, paths: too many to keep) dumped each time, the rest as _json does."""
    return to_json(value) if type(value) is str else _json(value)


@dataclass(frozen=True)
class Batch:
    """A batch's requests as the contract names them (for leftOut) and as the fit service takes them."""

    requests: tuple[generated.WireFitVerdictRequest, ...]
    fits: tuple[FitRequest, ...]


def batch_of(requests: Sequence[generated.WireFitVerdictRequest]) -> Batch:
    return Batch(tuple(requests), tuple(wire.fit_request(r) for r in requests))


def fit_batch_json(service: FitService, batch: Batch, cancelled: Callable[[], bool] = lambda: False) -> bytes:
    """wire.fit_batch's answer, dumped: the bytes POST /v1/models/fit/batch sends."""
    m = wire.generated()
    results = service.fit_batch(batch.fits, cancelled)
    return batch_json(results, wire.left_out_entries(service, batch.requests, False, m), m)
