"""llama.cpp's measured allocations (the ground-truth harness's JSON lines), for tests to compare against."""

from __future__ import annotations

import json
from pathlib import Path

from memfit.estimator.cpu_variant import BY_NAME, CpuVariant

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
ELEMENT_BYTES = {"f32": 4, "f16": 2, "q8_0": 1}
# The CPU variant a run was measured with, unless it says (`cpu_variant`, or an AMX buffer: sapphirerapids, the
# only variant with one): node-llama-cpp's prebuilt libllama on an AVX2 host loads haswell.
DEFAULT_VARIANT = BY_NAME["haswell"]
AMX_VARIANT = BY_NAME["sapphirerapids"]


def measured_variant(record: dict) -> CpuVariant:
    """The CPU variant whose weights a run measured."""
    named = record.get("cpu_variant")
    if isinstance(named, str) and named in BY_NAME:
        return BY_NAME[named]
    if "AMX" in record.get("weights_buffers", {}) or AMX_VARIANT.name in record.get("runtime_label", ""):
        return AMX_VARIANT
    return DEFAULT_VARIANT


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def records(name: str) -> list[dict]:
    """The runs of a truth file made with memfit's own settings: weights loaded (not mmapped), a non-unified
    cache, cache types the contract names, llama.cpp's default n_ubatch and no rollback snapshots."""
    return [
        r
        for r in load(DATA / name)
        if "error" not in r
        and not r["settings"].get("unified")
        and not r["settings"].get("mmap")
        and not r["settings"].get("n_rs_seq")
        and r["settings"]["type_k"] in ELEMENT_BYTES
        and r["settings"]["type_v"] in ELEMENT_BYTES
    ]


# in a run's id where set
RUN_EXTRAS: tuple[str, ...] = ("unified", "mmap", "n_rs_seq", "swa_full", "state_tokens", "fit_used", "mtp", "mtp_ctx")
RUN_EXTRAS += ("verify", "outputs_max", "embeddings", "pooling", "decode", "warmup", "type_k_draft", "type_v_draft")
# in a run's id where named, 0 included (a default of 1 turned off)
RUN_SWITCHES = ("draft_sampling",)


def run_id(record: dict) -> str:
    s = record["settings"]
    extras = "".join(f"-{k}{s[k]}" for k in RUN_EXTRAS if s.get(k))
    extras += "".join(f"-{k}{s[k]}" for k in RUN_SWITCHES if k in s)
    return (
        f"{record['model']}-ctx{s['n_ctx']}-seq{s['n_seq']}-{s['type_k']}-{s['type_v']}-fa{s['fa']}"
        f"-ub{record.get('n_ubatch', s.get('n_ubatch', 512))}{extras}"
    )
