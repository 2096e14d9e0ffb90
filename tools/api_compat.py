"""Does a new revision of the API document break a client generated from an old one?

A change breaks a client when it removes a path, an operation or a success response; removes a field a
response had; makes a request field required; narrows a type (a different type, a tighter bound, null no
longer allowed in a request or newly possible in a response); or closes a string with an `enum`.
`python -m tools.api_compat OLD.yaml NEW.yaml` prints the breaks and exits 1 when there are any.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import yaml

Schema = dict[str, Any]
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


class Spec:
    def __init__(self, document: dict) -> None:
        self.document = document

    def resolve(self, schema: Schema | None) -> Schema:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            node: Any = self.document
            for part in schema["$ref"].lstrip("#/").split("/"):
                node = node[part]
            schema, seen = node, seen + 1
        return schema or {}

    @property
    def major(self) -> int:
        return int(str(self.document["info"]["version"]).split(".")[0])


def _narrowed_bounds(old: Schema, new: Schema) -> Iterator[str]:
    for key, tighter in (
        ("minimum", max),
        ("minItems", max),
        ("minLength", max),
        ("maximum", min),
        ("maxItems", min),
        ("maxLength", min),
    ):
        if key in new and (key not in old or tighter(old[key], new[key]) == new[key] != old[key]):
            yield f"{key} tightened to {new[key]}"


def _values(old: Schema, new: Schema, request: bool) -> Iterator[str]:
    """The changes to the values one (resolved) schema allows: its enum, a request's bounds, null."""
    if "enum" in new and ("enum" not in old or set(old["enum"]) != set(new["enum"])):
        if "enum" not in old or not (request and set(old["enum"]) <= set(new["enum"])):
            yield f"closed to the values {new['enum']}"
    if request:
        yield from _narrowed_bounds(old, new)
        if old.get("nullable") and not new.get("nullable"):
            yield "no longer accepts null"
    elif new.get("nullable") and not old.get("nullable"):
        yield "may now be null"


def _members(old: Schema, new: Schema, request: bool) -> Iterator[tuple[str, str]]:
    """(property, change) of an object schema's members: required in a request, removed or optional in an answer."""
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    old_required, new_required = set(old.get("required", [])), set(new.get("required", []))
    if request:
        for name in sorted(new_required - old_required):
            yield name, "now required"
    else:
        for name in sorted(set(old_props) - set(new_props)):
            yield name, "removed"
        for name in sorted(old_required - new_required):
            yield name, "no longer always present"


def _compare(
    old_spec: Spec, new_spec: Spec, old: Schema, new: Schema, where: str, request: bool, depth: int = 0
) -> Iterator[str]:
    old, new = old_spec.resolve(old), new_spec.resolve(new)
    if depth > 16:
        return
    if old.get("type") != new.get("type") and old.get("type") is not None:
        yield f"{where}: type {old.get('type')} became {new.get('type')}"
        return
    for why in _values(old, new, request):
        yield f"{where}: {why}"
    for name, why in _members(old, new, request):
        yield f"{where}.{name}: {why}"
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name in sorted(set(old_props) & set(new_props)):
        yield from _compare(old_spec, new_spec, old_props[name], new_props[name], f"{where}.{name}", request, depth + 1)
    if "items" in old and "items" in new:
        yield from _compare(old_spec, new_spec, old["items"], new["items"], f"{where}[]", request, depth + 1)


def _content(spec: Spec, node: Schema) -> dict[str, Schema]:
    node = spec.resolve(node)
    return {media: body.get("schema", {}) for media, body in node.get("content", {}).items()}


def breaking_changes(old_document: dict, new_document: dict) -> list[str]:
    old_spec, new_spec = Spec(old_document), Spec(new_document)
    breaks = []
    for path, old_item in old_document.get("paths", {}).items():
        new_item = new_document.get("paths", {}).get(path)
        if new_item is None:
            breaks.append(f"{path}: removed")
            continue
        for method in (m for m in METHODS if m in old_item):
            where = f"{method.upper()} {path}"
            new_op, old_op = new_item.get(method), old_item[method]
            if new_op is None:
                breaks.append(f"{where}: removed")
            else:
                breaks.extend(_operation_changes(old_spec, new_spec, old_op, new_op, where))
    return breaks


def _operation_changes(old_spec: Spec, new_spec: Spec, old_op: dict, new_op: dict, where: str) -> Iterator[str]:
    """The breaking changes to one operation present in both documents: its request body, then its answers."""
    old_body = _content(old_spec, old_op.get("requestBody", {}))
    new_body = _content(new_spec, new_op.get("requestBody", {}))
    for media, schema in old_body.items():
        if media in new_body:
            yield from _compare(old_spec, new_spec, schema, new_body[media], f"{where} body", True)
        else:
            yield f"{where} body: {media} no longer accepted"
    for status, old_response in old_op.get("responses", {}).items():
        new_response = new_op.get("responses", {}).get(status)
        if new_response is None:
            if str(status).startswith("2"):
                yield f"{where} {status}: removed"
            continue
        new_content = _content(new_spec, new_response)
        for media, schema in _content(old_spec, old_response).items():
            if media not in new_content:
                yield f"{where} {status}: no longer {media}"
            else:
                yield from _compare(old_spec, new_spec, schema, new_content[media], f"{where} {status}", False)


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def main(argv: list[str]) -> int:
    breaks = breaking_changes(load(argv[0]), load(argv[1]))
    for line in breaks:
        print(line)
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
