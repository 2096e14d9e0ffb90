"""The API's answers as tables for people at a terminal (`memfit models`, `memfit fit`, `memfit plan`).

Every table fits the terminal's width (100 columns when the output is not a terminal): long cells are
shortened with an ellipsis and notes are wrapped. Colour only on a terminal, never with NO_COLOR set. Every string
of an answer (a server's, or one read from a model file) is made printable first (memfit.terminal): no control
character in it reaches the terminal raw.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import textwrap
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from memfit.estimator.vocabulary import Refusal
from memfit.terminal import printable

if TYPE_CHECKING:
    from memfit import answer_shapes as shapes

DEFAULT_WIDTH = 100
ELLIPSIS = "…"
COLOURS = {"good": "32", "tight": "33", "oversize": "31", "unknown": "35"}
A = TypeVar("A")


_SCALARS = (int, float, bool, type(None))


def printable_answer(answer: A) -> A:
    """`answer` (a generated model, pydantic's or a dataclass, or a list of them) with every string in it printable;
    enum members (a closed set, never from elsewhere) and the rest unchanged. What has nothing to escape is returned
    as it is, uncopied (a listing of 10,000 models is walked in a few hundredths of a second)."""
    value: Any = answer
    if type(value) is str:
        return printable(value)  # type: ignore[return-value]
    if isinstance(value, list):
        items = [printable_answer(v) for v in value]
        return answer if all(a is b for a, b in zip(items, value, strict=True)) else items  # type: ignore[return-value]
    if not (dataclasses.is_dataclass(value) or hasattr(value, "model_copy")):
        return answer
    changed = {}
    for k, v in vars(value).items():
        if not isinstance(v, _SCALARS) and (new := printable_answer(v)) is not v:
            changed[k] = new
    return replaced(answer, changed) if changed else answer


def replaced(answer: A, changes: dict[str, Any]) -> A:
    """A copy of `answer` (a generated model, pydantic's or a dataclass) with the fields `changes` names set."""
    value: Any = answer
    return value.model_copy(update=changes) if hasattr(value, "model_copy") else dataclasses.replace(value, **changes)


def terminal_width() -> int:
    """The terminal's columns; 100 when the output is not a terminal (COLUMNS wins, as shutil reads it)."""
    return max(40, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def use_colour(stream: TextIO) -> bool:
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def size(n: int | None) -> str:
    """Bytes in the largest binary unit that keeps the number readable; '?' for unknown."""
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def part_size(part: shapes.MemoryPart) -> str:
    """A part's floor, and its ceiling where the part has slack (the floor..ceiling of the summary)."""
    if part.upper_bytes is None or part.upper_bytes == part.bytes:
        return size(part.bytes)
    return f"{size(part.bytes)}..{size(part.upper_bytes)}"


_BYTE_COUNT = re.compile(r"\b(\d+)\b(?=(?: \+ [A-Za-z0-9_ ]+?)? bytes\b)")
_UNIT_BYTES = re.compile(r"\b(GiB|MiB|KiB|B) bytes\b")


def human_note(note: str) -> str:
    """A part's note with its raw byte counts in human units ('K f16 301989888 + V f16 ... bytes')."""
    return _UNIT_BYTES.sub(r"\1", _BYTE_COUNT.sub(lambda m: size(int(m.group(1))), note))


KEPT_START = 3  # characters of the start a shortened cell keeps before its ellipsis and its whole tag


def _tag(text: str) -> str:
    """What tells rows apart at the end of a cell: a model id's `:QUANT` (empty when it has none)."""
    return text[text.rfind(":") :] if ":" in text else ""


def shorten(text: str, width: int) -> str:
    """`text` within `width`, shortened in the middle: the end is what tells rows apart (a model id's `:QUANT`,
    kept whole when there is room for KEPT_START characters of the start; a path's file name)."""
    if len(text) <= width:
        return text
    room = max(0, width - 1)
    tag = _tag(text)
    tail = len(tag) if 0 < len(tag) <= room - KEPT_START else room // 2
    return text[: room - tail] + ELLIPSIS + (text[len(text) - tail :] if tail else "")


def table(
    rows: Sequence[Sequence[str]],
    header: Sequence[str],
    width: int | None = None,
    shrink: Sequence[int] = (),
    wrap: int | None = None,
) -> str:
    """Columns two spaces apart. Within `width`: the `shrink` columns (in that order) are shortened down to
    8 characters, or to what keeps every cell's tag whole (shorten), then the `wrap` column (the last) is wrapped
    onto further lines."""
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    if width is not None:
        for i in [*shrink, *([wrap] if wrap is not None else [])]:
            excess = sum(widths) + 2 * (len(widths) - 1) - width
            least = 20 if i == wrap else max(8, *(len(_tag(r[i])) + KEPT_START + 1 for r in cells))
            if excess > 0:
                widths[i] = min(widths[i], max(least, widths[i] - excess))

    def lines(r: list[str]) -> list[str]:
        columns = [
            textwrap.wrap(c, widths[i]) or [""] if i == wrap else [shorten(c, widths[i])] for i, c in enumerate(r)
        ]
        depth = max(len(c) for c in columns)
        return [
            "  ".join((c[k] if k < len(c) else "").ljust(widths[i]) for i, c in enumerate(columns)).rstrip()
            for k in range(depth)
        ]

    out = lines(cells[0]) + ["  ".join("-" * w for w in widths)]
    for r in cells[1:]:
        out += lines(r)
    return "\n".join(out)


WEIGHED = "~"  # marks a catalog row's size: its weights, not a file's bytes
READING = "(reading)"  # a local row's architecture while the server has not read its header


def _listed_size(m: shapes.ModelEntry) -> str:
    """A file's bytes, else (a catalog entry) the weights a fit of it counts, marked."""
    if m.artifact_bytes is None and m.weights_bytes is not None:  # null in a server's answer before API 1.14.0
        return f"{WEIGHED}{size(m.weights_bytes)}"
    return size(m.artifact_bytes)


def _loaded_by(m: shapes.ModelEntry) -> str:
    """The running llama-servers that have the model loaded: each by its port, else its pid."""
    servers = m.loaded_by or ()  # null in a server's answer before API 1.15.0
    return ", ".join(f":{s.port}" if s.port is not None else f"pid {s.pid}" for s in servers)


def render_models(listing: shapes.ModelList, width: int | None = None, detail: bool = False) -> str:
    """One row per model; the projector column only when some model has one, the running llama-servers' column
    only when one has a model loaded, revision and root with `detail`."""
    width = width or terminal_width()
    listing = printable_answer(listing)
    header = ["MODEL", "SOURCE", "ARCH", "QUANT", "SIZE", "CONTEXT"]
    projector = any(m.has_projector for m in listing.models)
    header += ["MMPROJ"] if projector else []
    loaded = any(_loaded_by(m) for m in listing.models)
    header += ["LOADED"] if loaded else []
    header += ["REVISION", "ROOT"] if detail else []
    rows = []
    for m in listing.models:
        row = [
            m.model_id,
            m.source,
            m.architecture or ("UNREADABLE" if m.unreadable else READING if m.reading else "?"),
            m.quant or "-",
            _listed_size(m),
            str(m.context_limit or "?"),
        ]
        row += ["yes" if m.has_projector else ""] if projector else []
        row += [_loaded_by(m)] if loaded else []
        row += (
            [m.revision.removeprefix("sha256:")[:12], m.root] if detail else []
        )  # an Ollama digest as Ollama shows it
        rows.append(row)
    out = table(rows, header, width, shrink=(len(header) - 1, 0) if detail else (0,))
    if any(m.artifact_bytes is None and m.weights_bytes is not None for m in listing.models):
        out += "\n\n" + textwrap.fill(
            f"{WEIGHED} the weights llama.cpp would load here (a catalog entry: no file on this machine)", width
        )
    reading = sum(1 for m in listing.models if m.reading)
    if reading:
        out += "\n\n" + textwrap.fill(
            f"{READING}: the server has not read the header of {reading} of these files yet; ask again in a moment",
            width,
        )
    unreadable = [m for m in listing.models if m.unreadable]
    if unreadable:
        out += "\n\n" + "\n".join(
            textwrap.fill(f"{m.model_id} is unreadable: {m.unreadable}", width, subsequent_indent="  ")
            for m in unreadable
        )
    return out


def _verdict_word(verdict: str, colour: bool) -> str:
    word = verdict.upper()
    return f"\033[{COLOURS[verdict]}m{word}\033[0m" if colour and verdict in COLOURS else word


def _deciding(result: shapes.FitResult) -> shapes.Device | None:
    """The GPU whose verdict is the answer's, where one decided it (else None: the host's, the estimate's)."""
    return next((d for d in result.devices if d.name == result.decided_by and d.kind == "gpu"), None)


def explain(result: shapes.FitResult, margin: Fraction) -> str:
    """What the verdict means and what decided it, in one sentence: the estimate against the host budget, or the
    share of the GPU that decided it against its free memory."""
    e, budget = result.estimate, result.budget.bytes
    floor, ceiling, parts, missing = e.lower_bound_bytes, e.upper_bound_bytes, e.parts, e.missing
    verdict = result.verdict.upper()
    gpu = _deciding(result)
    pool = gpu if gpu is not None else result.devices[0] if len(result.devices) > 1 else None
    if pool is not None:  # the deciding GPU's share, else (several pools) the host's
        floor, ceiling, parts = pool.lower_bound_bytes, pool.upper_bound_bytes, pool.parts
        missing = [p.component for p in pool.parts if p.bytes is None]
        verdict = f"{verdict} ({pool.name if gpu is not None else 'host'})"
        budget = gpu.free_bytes if gpu is not None else budget
    percent = f"{float(margin) * 100:g}%"
    if e.refusal == Refusal.CONTEXT_EXCEEDS_MODEL_LIMIT and result.identity.context_limit is not None:
        limit = result.identity.context_limit
        return f"{verdict}: refused ({e.refusal}): the limit is {limit} per stream"
    if e.refusal != Refusal.NONE:
        return f"{verdict}: no estimate, the request was refused ({e.refusal})"
    if budget is None:
        return f"{verdict}: the memory budget could not be read"
    if result.verdict == "oversize":
        return f"{verdict}: even the floor {size(floor)} exceeds the budget {size(budget)} by {size(floor - budget)}"
    if result.verdict == "good":
        return (
            f"{verdict}: the ceiling {size(ceiling)} plus the {percent} margin fits the budget {size(budget)}"
            f" ({size(budget - (ceiling or 0))} to spare)"
        )
    if result.verdict == "tight":
        return (
            f"{verdict}: fits, but within the {percent} margin: the ceiling {size(ceiling)}"
            f" leaves {size(budget - (ceiling or 0))} of the budget {size(budget)}"
        )
    if ceiling is None:
        unknown = [p for p in parts if p.bytes is None or p.basis == "unknown"]
        by_note: dict[str, list[str]] = {}  # parts unknown for the same reason, named together with it once
        for p in unknown:
            by_note.setdefault(human_note(p.note) if p.note else "", []).append(p.component)
        which = "; ".join(
            f"{', '.join(names)} ({note})" if note else ", ".join(names) for note, names in by_note.items()
        )
        return (
            f"{verdict}: the floor {size(floor)} fits the budget {size(budget)} but the ceiling is unknown:"
            f" a part is unknown: {which or ', '.join(missing) or '?'}"
        )
    return f"{verdict}: the floor {size(floor)} fits the budget {size(budget)} but the ceiling {size(ceiling)} does not"


def ledger_sentence(result: shapes.FitResult) -> str:
    """What of the answer is soft (a mapped file's page cache) and what grows after load, where any is."""
    grows = [p for p in result.estimate.parts if p.residency == "grows" and p.upper_bytes]
    said = ""
    if result.soft_bytes:
        said += f"; up to {size(result.soft_bytes)} of it is soft (the mapped file's page cache, reclaimable)"
    if grows:
        said += "; grows after load: " + ", ".join(f"{p.component} up to {size(p.upper_bytes)}" for p in grows)
    return said


def render_fit(
    results: Sequence[shapes.FitResult],
    margin: Fraction,
    width: int | None = None,
    colour: bool = False,
    detail: bool = False,
) -> str:
    """One summary row per model (floor..ceiling, verdict), each followed by its explanation; the budget once;
    with `detail`, each model's parts with their notes."""
    width = width or terminal_width()
    results = printable_answer(list(results))
    gpu = {True: "yes", False: "no", None: "?"}
    rows = [
        [
            r.model_id,
            f"{r.estimate.workload.allocated_tokens} x {r.estimate.workload.streams}",
            f"{size(r.estimate.lower_bound_bytes)}..{size(r.estimate.upper_bound_bytes)}",
            gpu[r.gpu_admits],
            r.verdict.upper(),
        ]
        for r in results
    ]
    rendered = table(rows, ["MODEL", "TOKENS x STREAMS", "FLOOR..CEILING", "GPU", "VERDICT"], width, shrink=(0,))
    header, rule, *lines = rendered.splitlines()
    out = [header, rule]
    for r, line in zip(results, lines, strict=True):
        if colour:
            word = r.verdict.upper()
            line = line[: len(line) - len(word)] + _verdict_word(r.verdict, True)
        out.append(line)
        said = explain(r, margin) + ledger_sentence(r)
        out.append(textwrap.fill(said, width, initial_indent="  ", subsequent_indent="    "))
        if len(r.devices) > 1:
            out += ["  " + row for row in render_devices(r, width - 2, colour).splitlines()]
    if results:
        b = results[0].budget
        out.append(
            textwrap.fill(
                f"budget {size(b.bytes)} ({b.basis}; running engines hold {size(b.committed_bytes)})"
                + ("" if detail else "; --detail shows each part"),
                width,
            )
        )
    if detail:
        out += ["", *("\n\n".join(render_result(r, width) for r in results).splitlines())]
    return "\n".join(out)


def _span(floor: int, ceiling: int | None) -> str:
    """floor..ceiling, one size where the bounds meet (an exact share)."""
    return size(floor) if floor == ceiling else f"{size(floor)}..{size(ceiling)}"


def render_devices(result: shapes.FitResult, width: int, colour: bool = False) -> str:
    """One row per device: what it holds, its floor..ceiling, its free memory (a declared GPU's marked), its
    verdict."""
    rows = [
        [
            d.name,
            d.note,
            _span(d.lower_bound_bytes, d.upper_bound_bytes),
            size(d.free_bytes) + (" declared" if d.declared else ""),
            d.verdict.upper(),
        ]
        for d in result.devices
    ]
    rendered = table(rows, ["DEVICE", "HOLDS", "FLOOR..CEILING", "FREE", "VERDICT"], width, shrink=(1,))
    if not colour:
        return rendered
    out = rendered.splitlines()
    for k, d in enumerate(result.devices, 2):
        word = d.verdict.upper()
        out[k] = out[k][: len(out[k]) - len(word)] + _verdict_word(d.verdict, True)
    return "\n".join(out)


def render_result(result: shapes.FitResult, width: int | None = None) -> str:
    """One model's answer in full: identity, workload, the parts with their notes, bounds, budget, limits."""
    width = width or terminal_width()
    result = printable_answer(result)
    e, w, b = result.estimate, result.estimate.workload, result.budget
    identity = result.identity

    def fill(text: str) -> str:
        return textwrap.fill(text, width, initial_indent="  ", subsequent_indent="            ")

    lines = [
        f"{result.model_id}: {result.verdict.upper()}",
        fill(
            f"identity  {identity.model_id}  quant {identity.quant or '-'}  revision {identity.revision or '-'}"
            f"  artifact {size(identity.artifact_bytes) if identity.artifact_bytes is not None else 'not on disk'}"
        ),
        fill(
            f"workload  {w.allocated_tokens} tokens ({w.context_source}) x {w.streams} stream(s), "
            f"K {w.key_element_bytes} B / V {w.value_element_bytes} B per element, mode {w.mode}"
        ),
    ]
    if w.profile != "custom":  # each setting the profile resolved, and where from
        lines += [
            fill(f"{'profile' if i == 0 else '':9s} {s.setting}: {s.detail}")
            for i, s in enumerate(x for x in w.settings if x.source != "default")
        ]
    if e.refusal != Refusal.NONE:
        lines.append(f"  refused   {e.refusal}")
    else:
        rows = [[p.component, part_size(p), p.basis, p.shared_key or "", human_note(p.note)] for p in e.parts]
        headers = ["PART", "SIZE", "BASIS", "SHARED", "NOTE"]
        if any(p.residency != "hard" for p in e.parts):  # how each part holds memory, where not all alike
            rows = [[*row[:3], p.residency, *row[3:]] for row, p in zip(rows, e.parts, strict=True)]
            headers = [*headers[:3], "HOLDS", *headers[3:]]
        parts = table(rows, headers, width - 2, shrink=(len(headers) - 2,), wrap=len(headers) - 1)
        lines += ["  " + row for row in parts.splitlines()]
        lines.append(
            fill(
                f"total     {size(e.lower_bound_bytes)} .. {size(e.upper_bound_bytes)}"
                f"  (weakest basis {e.weakest_basis}{', missing ' + ', '.join(e.missing) if e.missing else ''})"
            )
        )
    if len(result.devices) > 1:
        rows = [[d.name, *(part_size(p) for p in d.parts)] for d in result.devices]
        header = ["DEVICE", *(p.component for p in result.devices[0].parts)]
        lines += ["  " + row for row in table(rows, header, width - 2).splitlines()]
    gpu = {True: "admits", False: "does not admit", None: "no answer"}[result.gpu_admits]
    lines.append(
        fill(
            f"budget    {size(b.bytes)} ({b.basis}), committed to running engines {size(b.committed_bytes)}; GPU {gpu}"
        )
    )
    if result.limits:
        lines.append(fill(f"limits    {', '.join(result.limits)}"))
    return "\n".join(lines)


def _tokens(n: int | None) -> str:
    return "-" if n is None else str(n)


def _plan_blocks(rows: Sequence[Sequence[str]], verdicts: Sequence[str], width: int, colour: bool) -> list[str]:
    """The plan's rows where its table does not fit: the id (shortened in the middle, its `:QUANT` whole) and the
    verdict on one line, the numbers indented below it."""
    out = []
    for (model, tokens, bounds, maxima, word), verdict in zip(rows, verdicts, strict=True):
        shown = _verdict_word(verdict, True) if colour else word
        out.append(f"{shorten(model, width - len(word) - 2)}  {shown}")
        out += textwrap.wrap(
            f"{tokens}  {bounds}  max {maxima}", width, initial_indent="    ", subsequent_indent="    "
        )
    return out


def render_plan(plans: Sequence[shapes.PlanResult], width: int | None = None, colour: bool = False) -> str:
    """One row per model and quant: floor..ceiling and the verdict at the asked context, the largest context whose
    verdict is good, whose ceiling fits and whose floor fits; a repository's best quant marked with `*`."""
    width = width or terminal_width()
    plans = printable_answer(list(plans))
    rows, verdicts = [], []
    for plan in plans:
        for q in plan.quants:
            e = q.fit.estimate
            best = plan.best_quant is not None and q.quant == plan.best_quant
            m = q.max_allocated_tokens
            rows.append(
                [
                    f"{'*' if best else ' '} {q.model_id}",
                    f"{e.workload.allocated_tokens}x{e.workload.streams}",
                    f"{size(e.lower_bound_bytes)}..{size(e.upper_bound_bytes)}",
                    "/".join(_tokens(n) for n in (m.good, m.tight, m.possible)),
                    q.fit.verdict.upper(),
                ]
            )
            verdicts.append(q.fit.verdict)
    header = ["  MODEL", "TOKENSxS", "FLOOR..CEILING", "MAX GOOD/TIGHT/POSSIBLE", "VERDICT"]
    rendered = table(rows, header, width, shrink=(0,))
    if max(map(len, rendered.splitlines())) > width:  # a narrow terminal: two lines a quant
        out = _plan_blocks(rows, verdicts, width, colour)
    else:
        out = rendered.splitlines()
        if colour:
            for k, verdict in enumerate(verdicts, 2):
                word = verdict.upper()
                out[k] = out[k][: len(out[k]) - len(word)] + _verdict_word(verdict, True)
    for plan in plans:
        for q in plan.quants:
            layers = q.max_gpu_layers  # null in a server's answer before API 1.16.0
            if layers is not None:
                experts = layers.n_cpu_moe_good is not None or layers.n_cpu_moe_tight is not None
                moe = f"; -ngl all --n-cpu-moe {_tokens(layers.n_cpu_moe_good)} good, {_tokens(layers.n_cpu_moe_tight)}"
                out += textwrap.wrap(
                    f"{q.model_id}: -ngl {_tokens(layers.good)} good, {_tokens(layers.tight)} tight;"
                    f" the fitter: {_tokens(layers.fitter)}{moe + ' tight' if experts else ''}",
                    width,
                    subsequent_indent="    ",
                )
    first = next((q for p in plans for q in p.quants), None)
    if first is not None:
        b = first.fit.budget
        out.append(
            textwrap.fill(
                f"budget {size(b.bytes)} ({b.basis}; running engines hold {size(b.committed_bytes)}); MAX: the most"
                " tokens per stream at which the verdict is good / the ceiling fits / the floor fits (- none);"
                " * the best quant: the most precise one that is good at the asked context (default 4096)",
                width,
            )
        )
    return "\n".join(out)
