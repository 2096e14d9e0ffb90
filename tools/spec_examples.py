"""Examples for the responses of openapi.yaml, as memfit answers them (Swagger UI shows these on the docs page).

    python -m tools.spec_examples            rewrite openapi.yaml's response examples (then run scripts/regenerate)
    python -m tools.spec_examples --check    exit 1, naming them, when they differ from what memfit answers now

Every example is a real answer of the real app (its validation, handlers and wire adapter) over the bundled catalog,
asked of a described host: 32 GiB available of 64 GiB, one 24 GiB GPU with 22 GiB free, an AVX2 CPU (ggml's haswell
variant), no engine running. Where an answer cannot be provoked here (a client gone, a timed-out body, the history
locked, a failure of the whole request) the example is the problem document the server sends, with its wording.
tests/test_spec_examples.py checks that each validates against its schema and that the spec holds these answers.
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

SPEC = Path(__file__).resolve().parent.parent / "openapi.yaml"
TOKEN = "example-token"
GiB = 1 << 30
FIT_REQUEST = {"modelId": "Qwen/Qwen3-8B-GGUF:Q4_K_M", "allocatedTokens": 8192}  # the request schema's example
PLAN_REQUEST = [{"modelId": "Qwen/Qwen3-8B-GGUF", "allocatedTokens": 32768}]  # the plan request's example
OBSERVATION = {  # the observation schema's example, but for a model memfit knows at this workload
    "modelId": "Qwen/Qwen3-8B-GGUF:Q4_K_M",
    "revision": "",
    "quant": "Q4_K_M",
    "artifactBytes": None,
    "workload": {
        "allocatedTokens": 8192,
        "streams": 1,
        "keyElementBytes": 2,
        "valueElementBytes": 2,
        "mode": "fullGpu",
    },
    "parts": {"workspace": 560000000},
    "runtime": "llama.cpp b6500",
    "observedAt": "2026-11-01T10:00:00Z",
}
LISTED = 3  # entries of GET /v1/models shown (the catalog lists 259)
REQUEST = "request"  # the request body's example, beside the responses'
BATCH_REQUEST = [FIT_REQUEST, {"modelId": "qwen3-8b"}]  # one id that names no model: leftOut


def _problem(status: int, detail: str) -> Any:
    """The problem document the server sends (memfit/http/problems.py) for an answer not provoked here."""
    from memfit.http.problems import problem_body

    return json.loads(problem_body(status, detail))


def answers() -> dict[tuple[str, str], Any]:
    """(where, status) -> the example: `where` an operationId (`status` a response's, or REQUEST), or a shared
    response's name (no status)."""
    from starlette.testclient import TestClient

    from memfit.app import create_app
    from memfit.estimator.machine import CpuArch, CpuFeatures, GpuMemory, HostMemory
    from memfit.http.body import BODY_TIMEOUT_S
    from memfit.http.problems import FAILED_DETAIL
    from memfit.service_builder import build_service

    class OneGpu:
        def read(self) -> list[GpuMemory]:
            return [GpuMemory(0, "GPU-00000000-0000-0000-0000-000000000000", 22 * GiB, 24 * GiB)]

    with tempfile.TemporaryDirectory() as state:
        service = build_service(
            state_dir=state,
            read_host=lambda: HostMemory(available=32 * GiB, total=64 * GiB),
            read_cpu=lambda: CpuFeatures(CpuArch.X86_64, frozenset("SSE42 AVX F16C FMA AVX2 BMI2".split())),
            nvml=OneGpu(),
            read_committed=lambda: 0,
        )
        service.listing.weigh_catalog()  # as the index's thread does soon after start-up: the settled listing
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with TestClient(create_app(service, TOKEN), headers=auth) as c:
            out: dict[tuple[str, str], Any] = {
                ("fitBatch", "200"): c.post("/v1/models/fit/batch", json=BATCH_REQUEST),
                ("fitOne", "200"): c.post("/v1/models/fit", json=FIT_REQUEST),
                ("fitPlan", "200"): c.post("/v1/models/fit/plan", json=PLAN_REQUEST),
                ("fitPlan", "400"): c.post("/v1/models/fit/plan", json=[{"modelId": "Qwen/Qwen3-8B-GGUF"}] * 17),
                ("recordObservation", "200"): c.post(
                    "/v1/models/observations", params={"dryRun": "true"}, json=OBSERVATION
                ),
                ("recordObservation", "201"): c.post("/v1/models/observations", json=OBSERVATION),
                ("listObservations", "200"): c.get("/v1/models/observations", params={"limit": 20}),
                ("deleteObservation", "404"): c.delete("/v1/models/observations/42"),
                ("listModels", "200"): c.get("/v1/models"),
                ("health", "200"): c.get("/health"),
                ("InvalidRequest", ""): c.post("/v1/models/fit/batch", json=[FIT_REQUEST] * 33),
                ("Unauthorized", ""): c.post("/v1/models/fit", json=FIT_REQUEST, headers={"Authorization": ""}),
                ("NotFound", ""): c.post("/v1/models/fit", json={"modelId": "qwen/qwen3-8b-gguf:q1_0"}),
                ("PayloadTooLarge", ""): c.post(
                    "/v1/models/fit/batch", content=b"[" + b" " * (2 << 20) + b"]", headers={"Content-Type": "x"}
                ),
            }
    for key, response in out.items():
        out[key] = response.json()
    requests = (
        ("fitOne", FIT_REQUEST),
        ("fitBatch", BATCH_REQUEST),
        ("fitPlan", PLAN_REQUEST),
        ("recordObservation", OBSERVATION),
    )
    for operation, body in requests:
        out[(operation, REQUEST)] = body
    listing = out[("listModels", "200")]
    listing["models"] = listing["models"][:LISTED]
    out[("RequestTimeout", "")] = _problem(408, f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s")
    out[("Cancelled", "")] = _problem(499, "cancelled after 1 of 2 models")
    out[("ServiceUnavailable", "")] = _problem(
        503,
        "the observation was not stored: the measurement history in the state directory"
        " /home/me/.local/share/memfit cannot be written (database is locked)",
    )
    out[("Failed", "")] = _problem(500, FAILED_DETAIL)
    return out


def _media(spec: Any, where: str, status: str) -> Any:
    """The media object the example goes in: an operation's response (`status`) or request body (REQUEST), or a
    shared response (no status)."""
    if not status:
        response = spec["components"]["responses"][where]
    else:
        (op,) = [
            op
            for item in spec["paths"].values()
            for op in item.values()
            if isinstance(op, dict) and op.get("operationId") == where
        ]
        response = op["requestBody"] if status == REQUEST else op["responses"][status]
    (media,) = response["content"].values()
    return media


def _yaml() -> YAML:
    y = YAML()
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return y


def differences(spec: Any, examples: dict[tuple[str, str], Any]) -> Iterator[str]:
    for (where, status), example in examples.items():
        if _media(spec, where, status).get("example") != example:
            yield f"{where} {status or '(shared)'}".strip()


def main(argv: list[str]) -> int:
    y = _yaml()
    spec = y.load(SPEC.read_text())
    examples = answers()
    if "--check" in argv:
        stale = list(differences(spec, examples))
        for name in stale:
            print(f"openapi.yaml: the example of {name} is not what memfit answers now", file=sys.stderr)
        return 1 if stale else 0
    for (where, status), example in examples.items():
        _media(spec, where, status)["example"] = example
    out = io.StringIO()
    y.dump(spec, out)
    SPEC.write_text(out.getvalue())
    print(f"{len(examples)} response examples written into {SPEC.name}; now run scripts/regenerate")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
