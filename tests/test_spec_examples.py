"""The docs page's examples: every JSON answer the contract documents has one, each is valid against its own schema,
and each is what memfit answers now (tools/spec_examples.py asks the real app; `--check` compares)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import pytest
import yaml

from memfit.http.validation import json_schema
from tools import spec_examples

SPEC = yaml.safe_load(spec_examples.SPEC.read_text())
JSON_MEDIA = ("application/json", "application/problem+json")


def _resolved(node: Any) -> Any:
    """The object a `$ref` names (the spec's own components only)."""
    while isinstance(node, dict) and "$ref" in node:
        target: Any = SPEC
        for key in node["$ref"].removeprefix("#/").split("/"):
            target = target[key]
        node = target
    return node


def _documented() -> Iterator[tuple[str, Any]]:
    """(name, media object) of every JSON request body and response of every operation."""
    for path, item in SPEC["paths"].items():
        for method, op in item.items():
            bodies = [("request", op["requestBody"])] if "requestBody" in op else []
            for status, response in [*bodies, *op["responses"].items()]:
                for media_type, media in _resolved(response).get("content", {}).items():
                    if media_type in JSON_MEDIA and "schema" in media and media["schema"].get("type") != "object":
                        yield f"{method.upper()} {path} {status}", media


DOCUMENTED = list(_documented())


def test_every_json_answer_and_body_has_an_example() -> None:
    assert len(DOCUMENTED) > 40
    missing = [name for name, media in DOCUMENTED if "example" not in media]
    assert not missing, missing


@pytest.mark.parametrize("name, media", DOCUMENTED, ids=[name for name, _ in DOCUMENTED])
def test_each_example_is_valid_against_its_schema(name: str, media: Any) -> None:
    schema = json_schema({**_resolved(media["schema"]), "components": SPEC["components"]})
    errors = [e.message for e in jsonschema_rs.Draft4Validator(schema).iter_errors(media["example"])]
    assert not errors, errors[:3]
    if media["schema"] == {"$ref": "#/components/schemas/Problem"}:  # a problem: the status it is the answer of
        assert name.endswith(f" {media['example']['status']}"), name


def test_a_problem_example_carries_its_own_status() -> None:
    """No 599: each shared problem response's example is that response's status."""
    statuses = {
        "InvalidRequest": 400,
        "Unauthorized": 401,
        "NotFound": 404,
        "RequestTimeout": 408,
        "PayloadTooLarge": 413,
        "Cancelled": 499,
        "Failed": 500,
        "ServiceUnavailable": 503,
    }
    for name, status in statuses.items():
        (media,) = SPEC["components"]["responses"][name]["content"].values()
        assert media["example"]["status"] == status, name
    not_found = SPEC["components"]["responses"]["NotFound"]["content"]["application/problem+json"]["example"]
    assert not_found["suggestions"]  # the known ids nearest to the one asked


def test_the_examples_are_what_memfit_answers_now() -> None:
    """Regenerated from the real app over the catalog and a described host: a change to an answer's numbers or
    words shows here (rewrite them with `python -m tools.spec_examples`, then scripts/regenerate)."""
    spec = spec_examples._yaml().load(spec_examples.SPEC.read_text())
    assert list(spec_examples.differences(spec, spec_examples.answers())) == []
