"""llama.cpp's measured allocations (the ground-truth harness's JSON lines), for tests to compare against."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).with_name("data")
ELEMENT_BYTES = {"f32": 4, "f16": 2, "q8_0": 1}


def records(name: str) -> list[dict]:
    """Every run of a truth file whose settings memfit models: weights loaded (not mmapped), non-unified KV,
    a known cache type."""
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
    return [r for r in rows if not r["settings"].get("unified") and not r["settings"].get("mmap")
            and r["settings"]["type_k"] in ELEMENT_BYTES]


def run_id(record: dict) -> str:
    s = record["settings"]
    return (f"{record['model']}-ctx{s['n_ctx']}-seq{s['n_seq']}-{s['type_k']}-fa{s['fa']}"
            f"-ub{record['n_ubatch']}{'-mmap' if s.get('mmap') else ''}")
