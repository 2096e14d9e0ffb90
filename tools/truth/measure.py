"""Run the truth probe (tools/truth/probe.cpp) on one model and settings and flatten its JSON into a truth row.

A row holds the probe's exact byte counts (weights per buffer type, K and V per cache, recurrent state, compute,
output) and the sizes llama.cpp's own log lines print (MiB with two decimals, `*_approx`), as tests/data holds them.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
# The log lines llama.cpp prints per buffer type ("CPU model buffer size = 12.00 MiB"), summed per kind.
_BUFFER_LOGS = {
    key: re.compile(rf"^\S+:\s+(\S+)\s+{what} buffer size =\s+([\d.]+) MiB", re.M)
    for key, what in (
        ("log_model_buffer", "model"),
        ("log_kv_buffer", "KV"),
        ("log_rs_buffer", "RS"),
        ("log_compute_buffer", "compute"),
        ("log_output_buffer", "output"),
    )
}
# llama_kv_cache's and llama_memory_recurrent's size lines.
_KV_LOG = re.compile(
    r"^(\S+): size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/(\d+) seqs\), "
    r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB",
    re.M,
)
_RS_LOG = re.compile(
    r"^(\S+): size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+) seqs.*?\), "
    r"R \((\w+)\):\s+([\d.]+) MiB, S \((\w+)\):\s+([\d.]+) MiB",
    re.M,
)
TIMEOUT_S = 600
# What llama.cpp prints when the backend folder held no CPU backend the host runs.
NO_BACKEND = "no backends are loaded"
# A KV cache's fields a row keeps.
_CACHE_FIELDS = ("role", "cells", "n_stream", "n_layer", "layers", "v_trans", "k_bytes", "v_bytes", "k0", "v0")


@dataclass(frozen=True)
class Probe:
    """A compiled probe (tools/truth/build.sh), the CPU backends it loads ("" = the library's own folder) and
    the tokens it decodes after allocating."""

    path: Path
    backend_dir: str = ""
    decode: int = 32


def parse_log(text: str) -> dict[str, Any]:
    """llama.cpp's log lines' sizes: per buffer kind MiB per buffer type, and each cache's size line."""
    out: dict[str, Any] = {}
    for key, pattern in _BUFFER_LOGS.items():
        sizes: dict[str, float] = {}
        for buft, mib in pattern.findall(text):
            sizes[buft] = sizes.get(buft, 0.0) + float(mib)
        if sizes:
            out[key + "_mib"] = sizes
    kv = [
        dict(
            name=m[0],
            mib=float(m[1]),
            cells=int(m[2]),
            layers=int(m[3]),
            seqs=int(m[5]),
            type_k=m[6],
            k_mib=float(m[7]),
            type_v=m[8],
            v_mib=float(m[9]),
        )
        for m in _KV_LOG.findall(text)
    ]
    if kv:
        out["log_kv_caches"] = kv
    rs = [
        dict(name=m[0], mib=float(m[1]), cells=int(m[2]), layers=int(m[3]), r_mib=float(m[6]), s_mib=float(m[8]))
        for m in _RS_LOG.findall(text)
    ]
    if rs:
        out["log_recurrent"] = rs
    return out


def run(probe: Probe, model: Path, settings: dict[str, Any], extra: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """The probe's JSON for one run (an `error` key when it failed) and its parsed log."""
    asked = {"decode": probe.decode} | settings  # a run's own decode=N over the file's
    cmd = [str(probe.path), str(model), *(f"{k}={v}" for k, v in asked.items())]
    cmd += extra.split()
    if probe.backend_dir:
        cmd.append(f"backend_dir={probe.backend_dir}")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    if NO_BACKEND in p.stderr:
        raise RuntimeError(f"no CPU backend in {probe.backend_dir or 'the library folder'} runs on this host")
    lines = p.stdout.strip().splitlines()
    try:
        raw = json.loads(lines[-1]) if lines else {"error": "no json"}
    except json.JSONDecodeError:
        raw = {"error": "no json", "stdout_tail": p.stdout[-500:]}
    if p.returncode != 0 and "error" not in raw:
        raw["error"] = f"exit {p.returncode}"
    if "error" in raw:
        raw["stderr_tail"] = p.stderr[-1500:]
    return raw, parse_log(p.stderr)


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """The probe's JSON flattened into a row's headline numbers."""
    if "error" in raw:
        return {"error": raw["error"], "stderr_tail": raw.get("stderr_tail", "")}
    kvs = raw.get("kv_caches") or []
    rs = raw.get("recurrent") or {}
    breakdown = raw.get("breakdown", {})
    rss0 = raw["rss_after_backend"]["rss"]
    c = raw["cparams"]
    out: dict[str, Any] = {
        "model_desc": raw["model_desc"],
        "n_params": raw["n_params"],
        **{k: c[k] for k in ("n_ctx", "n_ctx_seq", "n_seq_max", "n_batch", "n_ubatch", "flash_attn", "kv_unified")},
        "weights_bytes": sum(raw["model_buffers"].values()),
        "weights_buffers": raw["model_buffers"],
        "model_tensor_bytes": raw["model_size_bytes"],
        "kv_k_bytes": sum(k["k_bytes"] for k in kvs),
        "kv_v_bytes": sum(k["v_bytes"] for k in kvs),
        "kv_bytes": sum(k["total_bytes"] for k in kvs),
        "kv_caches": [
            {
                key: k[key]
                for key in (
                    "role",
                    "cells",
                    "n_stream",
                    "n_layer",
                    "layers",
                    "v_trans",
                    "k_bytes",
                    "v_bytes",
                    "k0",
                    "v0",
                )
                if key in k
            }
            for k in kvs
        ],
        "rs_r_bytes": rs.get("r_bytes", 0),
        "rs_s_bytes": rs.get("s_bytes", 0),
        "rs_p_bytes": rs.get("p_bytes", 0),
        "rs_bytes": rs.get("total_bytes", 0),
        "rs_cells": rs.get("cells", 0),
        "rs_layers": rs.get("n_layer", 0),
        "rs_shapes": {k: rs[k] for k in ("r0", "s0") if k in rs},
        "memory_bytes": sum(raw.get("memory_buffers", {}).values()),
        "compute_bytes": sum(v["compute"] for v in breakdown.values()),
        "compute_buffers": {b: v["compute"] for b, v in breakdown.items() if v["compute"]},
        "output_buffer_bytes_init": raw["output_buffer_bytes"],
        "rss_growth_model": raw["rss_after_model"]["rss"] - rss0,
        "rss_growth_ctx": raw["rss_after_ctx"]["rss"] - raw["rss_after_model"]["rss"],
        "rss_after_ctx_total_growth": raw["rss_after_ctx"]["rss"] - rss0,
    }
    if "rss_after_decode" in raw:
        out["decode_tokens"] = raw["decode_tokens"]
        out["decode_rc"] = raw["decode_rc"]
        out["rss_growth_total_after_decode"] = raw["rss_after_decode"]["rss"] - rss0
        out["peak_rss_growth"] = raw["rss_after_decode"]["hwm"] - rss0
        out["compute_bytes_after_decode"] = sum(v["compute"] for v in raw["breakdown_after_decode"].values())
        # the output buffer the decode's output_reserve grew (mtp=1, verify=D, embeddings=1, and encode()'s every
        # token of a model without a memory module)
        if raw.get("mtp") or "verify" in raw or raw.get("embeddings") or raw.get("memory_kind") == "none":
            out["output_buffer_bytes_after_decode"] = raw["output_buffer_bytes_after_decode"]
    if "state_seq_bytes" in raw:  # one sequence's state after state_tokens tokens (probe state_tokens=T)
        out |= {
            k: raw[k] for k in ("state_tokens", "state_seq", "state_rc", "state_seq_bytes", "state_seq_partial_bytes")
        }
    if "fit_n_ctx" in raw:  # common_fit_params' choice (probe fit_used=B)
        out |= {k: raw[k] for k in ("fit_used", "fit_host_total", "fit_status", "fit_n_ctx")}
    if "mtp_ctx" in raw:  # llama-server's MTP draft context beside the target (probe mtp_ctx=1)
        out["draft_ctx"] = summarize_draft(raw["mtp_ctx"])
    out["no_alloc"] = raw.get("no_alloc", 0)
    out |= server_settings(raw)
    if "graph" in raw:
        out["graph"] = raw["graph"]
    out["rss_baseline_bytes"] = rss0
    out["sum_buffers_bytes"] = (
        out["weights_bytes"] + out["memory_bytes"] + out["compute_bytes"] + out["output_buffer_bytes_init"]
    )
    return out


def summarize_draft(raw: dict[str, Any]) -> dict[str, Any]:
    """The MTP draft context's part of the probe's JSON: its sizes, memory module, compute and output buffers
    (after its draft step where one was decoded)."""
    if "error" in raw:
        return {"error": raw["error"]}
    kvs = raw.get("kv_caches") or []
    rs = raw.get("recurrent") or {}
    breakdown = raw["breakdown"]
    c = raw["cparams"]
    out: dict[str, Any] = {
        **{k: c[k] for k in ("n_ctx", "n_ctx_seq", "n_seq_max", "n_batch", "n_ubatch", "flash_attn", "kv_unified")},
        "n_outputs_max": c["n_outputs_max"],
        "type_k": raw["type_k"],
        "type_v": raw["type_v"],
        "memory_kind": raw["memory_kind"],
        "kv_bytes": sum(k["total_bytes"] for k in kvs),
        "kv_caches": [
            {key: k[key] for key in ("role", "cells", "n_stream", "n_layer", "layers", "v_trans", "k_bytes", "v_bytes")}
            for k in kvs
        ],
        "rs_bytes": rs.get("total_bytes", 0),
        "memory_bytes": sum(raw.get("memory_buffers", {}).values()),
        "compute_bytes": sum(v["compute"] for v in breakdown.values()),
        "compute_buffers": {b: v["compute"] for b, v in breakdown.items() if v["compute"]},
        "output_buffer_bytes_init": raw["output_buffer_bytes"],
        "backend_samplers": raw.get("draft_sampling", 0),  # sequences whose draft sampling is on the backend
    }
    if "breakdown_after_decode" in raw:
        out["decode_tokens"] = raw["decode_tokens"]
        out["decode_rc"] = raw["decode_rc"]
        out["compute_bytes_after_decode"] = sum(v["compute"] for v in raw["breakdown_after_decode"].values())
        out["output_buffer_bytes_after_decode"] = raw["output_buffer_bytes_after_decode"]
    if "graph" in raw:  # its reserved DECODER_MTP graph node by node (probe graph=1)
        out["graph"] = raw["graph"]
    return out


def server_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """The probe's llama-server options a run was made with, where set."""
    out: dict[str, Any] = {}
    if raw.get("mtp"):  # llama-server's target under --spec-type draft-mtp (probe mtp=1)
        out["mtp"] = 1
    if raw.get("mtp_ctx"):  # and its MTP draft context (probe mtp_ctx=1)
        out["mtp_ctx"] = 1
    if "verify" in raw:  # the decode was llama-server's verification batch of verify draft tokens a sequence
        out["verify"] = raw["verify"]
    if "outputs_max" in raw:  # llama_context_params.n_outputs_max as llama-server sets it (probe outputs_max=N)
        out["outputs_max"] = raw["outputs_max"]
    if raw.get("embeddings"):  # llama_context_params.embeddings as llama-server's --embedding sets it
        out["embeddings"] = 1
    return out


def summarize_log(log: dict[str, Any]) -> dict[str, Any]:
    """The log's sizes in bytes (rounded from MiB with two decimals), plus each KV cache's size line."""
    out: dict[str, Any] = {}
    for key in ("log_model_buffer", "log_kv_buffer", "log_rs_buffer", "log_compute_buffer", "log_output_buffer"):
        if key + "_mib" in log:
            out[key + "_bytes_approx"] = round(sum(log[key + "_mib"].values()) * MIB)
    if "log_kv_caches" in log:
        out["log_kv_k_bytes_approx"] = round(sum(c["k_mib"] for c in log["log_kv_caches"]) * MIB)
        out["log_kv_v_bytes_approx"] = round(sum(c["v_mib"] for c in log["log_kv_caches"]) * MIB)
    if "log_recurrent" in log:
        out["log_rs_r_bytes_approx"] = round(sum(c["r_mib"] for c in log["log_recurrent"]) * MIB)
        out["log_rs_s_bytes_approx"] = round(sum(c["s_mib"] for c in log["log_recurrent"]) * MIB)
    if "log_kv_caches" in log:
        out["log_kv_caches"] = log["log_kv_caches"]
    return out
