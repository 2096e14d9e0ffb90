"""The API's answers as tables for people at a terminal (`memfit models`, `memfit fit`)."""

from __future__ import annotations

from memfit.estimator.vocabulary import Refusal
from memfit.generated import models as wire


def size(n: int | None) -> str:
    """Bytes in the largest binary unit that keeps the number readable; '?' for unknown."""
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def render_models(listing: wire.WireModelList) -> str:
    rows = [
        [
            m.model_id,
            m.source,
            m.architecture or "?",
            m.quant or "-",
            size(m.artifact_bytes),
            str(m.context_limit or "?"),
            "yes" if m.has_projector else "",
            m.revision.removeprefix("sha256:")[:12],  # an Ollama manifest digest shows as Ollama shows its ID
            m.root,
        ]
        for m in listing.models
    ]
    return table(rows, ["MODEL", "SOURCE", "ARCH", "QUANT", "SIZE", "CONTEXT", "PROJECTOR", "REVISION", "ROOT"])


def render_result(result: wire.WireFitVerdictResult) -> str:
    e, w, b = result.estimate, result.estimate.workload, result.budget
    identity = result.identity
    lines = [
        f"{result.model_id}: {result.verdict.upper()}",
        f"  identity  {identity.model_id}  quant {identity.quant or '-'}  revision {identity.revision or '-'}"
        f"  artifact {size(identity.artifact_bytes) if identity.artifact_bytes is not None else 'not on disk'}",
        f"  workload  {w.allocated_tokens} tokens ({w.context_source}) x {w.streams} stream(s), "
        f"K {w.key_element_bytes} B / V {w.value_element_bytes} B per element, mode {w.mode}",
    ]
    if e.refusal != Refusal.NONE:
        lines.append(f"  refused   {e.refusal}")
    else:
        rows = [[p.component, size(p.bytes), p.basis, p.shared_key or "", p.note] for p in e.parts]
        lines += ["  " + row for row in table(rows, ["PART", "BYTES", "BASIS", "SHARED", "NOTE"]).splitlines()]
        lines.append(
            f"  total     {size(e.lower_bound_bytes)} .. {size(e.upper_bound_bytes)}"
            f"  (weakest basis {e.weakest_basis}{', missing ' + ', '.join(e.missing) if e.missing else ''})"
        )
    gpu = {True: "admits", False: "does not admit", None: "no answer"}[result.gpu_admits]
    lines.append(
        f"  budget    {size(b.bytes)} ({b.basis}), committed to running engines {size(b.committed_bytes)}; GPU {gpu}"
    )
    if result.limits:
        lines.append(f"  limits    {', '.join(result.limits)}")
    return "\n".join(lines)
