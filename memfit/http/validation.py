"""connexion's request-body validation, compiled: jsonschema-rs accepts valid bodies fast, and anything it
does not accept goes through connexion's own validator, so every problem response stays exactly the same.
The cases connexion would answer with a 500 (a body that is not UTF-8, or nests past Python's limit) are 400s.
"""

from __future__ import annotations

import typing as t

import jsonschema_rs
from connexion.datastructures import MediaTypeDict
from connexion.exceptions import BadRequestProblem
from connexion.validators import VALIDATOR_MAP, JSONRequestBodyValidator
from starlette.types import Scope


def json_schema(schema: t.Any, root: bool = True) -> t.Any:
    """The OpenAPI 3.0 schema as plain JSON Schema: `nullable: true` becomes a `null` type (and enum member).

    connexion hands a body schema with the spec's `components` beside it, for `$ref`s to resolve, and leaves
    that same key on the schemas inside them: only the root's is kept, or the structure would be a cycle.
    """
    if isinstance(schema, list):
        return [json_schema(item, False) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {
        key: json_schema(value, False)
        for key, value in schema.items()
        if key != "nullable" and (root or key != "components")
    }
    if schema.get("nullable") is True:
        if isinstance(schema.get("type"), str):
            converted["type"] = [schema["type"], "null"]
        if "enum" in schema:
            converted["enum"] = [*schema["enum"], None]
    return converted


class _Compiled:
    """One compiled validator per schema object (held, so its id is never reused while cached)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[dict, jsonschema_rs.Draft4Validator]] = {}

    def __call__(self, schema: dict) -> jsonschema_rs.Draft4Validator:
        entry = self._by_id.get(id(schema))
        if entry is None or entry[0] is not schema:
            entry = (schema, jsonschema_rs.Draft4Validator(json_schema(schema)))
            self._by_id[id(schema)] = entry
        return entry[1]


COMPILED = _Compiled()


def operation_schemas(spec: dict, path: str, method: str) -> tuple[jsonschema_rs.Draft4Validator, ...]:
    """The compiled validators of one operation's JSON request body and of its 200 answer's JSON, as connexion
    checks them (the spec's components beside each, for their `$ref`s)."""
    operation = spec["paths"][path][method]
    schemas = (
        operation["requestBody"]["content"]["application/json"]["schema"],
        operation["responses"]["200"]["content"]["application/json"]["schema"],
    )
    return tuple(jsonschema_rs.Draft4Validator(json_schema({**s, "components": spec["components"]})) for s in schemas)


class RequestBodyValidator(JSONRequestBodyValidator):
    async def _parse(self, stream: t.AsyncGenerator[bytes, None], scope: Scope) -> t.Any:
        try:
            return await super()._parse(stream, scope)
        except UnicodeDecodeError:
            raise BadRequestProblem(detail="the request body is not UTF-8 JSON") from None
        except RecursionError:
            raise BadRequestProblem(detail="the request body nests too deeply") from None

    def _validate(self, body: t.Any) -> dict | None:
        if body is not None and COMPILED(self._schema).is_valid(body):
            return None
        try:
            return super()._validate(body)  # connexion's own check: the same problem for an invalid body
        except BadRequestProblem as problem:
            rule = self._rule(body)
            if rule:  # the rule first: connexion's message quotes the body and is cut before "is too long"
                problem.detail = f"{rule}: {problem.detail}"
            raise

    def _rule(self, body: t.Any) -> str | None:
        """The broken size rule of the first error, said plainly ('at most 32 requests, got 33')."""
        error = next(iter(self._validator.iter_errors(body)), None) if body is not None else None
        if error is None or error.validator not in ("maxItems", "minItems") or not isinstance(error.instance, list):
            return None
        noun = "requests" if not error.absolute_path else "items at " + "/".join(map(str, error.absolute_path))
        bound = "at most" if error.validator == "maxItems" else "at least"
        return f"{bound} {error.validator_value} {noun}, got {len(error.instance)}"


VALIDATORS = {**VALIDATOR_MAP, "body": MediaTypeDict({**VALIDATOR_MAP["body"], "*/*json": RequestBodyValidator})}
