"""The wire models' shapes as plain objects, for the tables `memfit fit`, `plan` and `models` print.

memfit.wire builds an answer from the estimator's types with the generated pydantic models (the server, `--json`)
or, given this module in their place, with these: the same converters fill the same fields, so a table shows what
the API answers, and a command that prints a table never imports pydantic (a tenth of a second of start-up).
`plain.WireFitVerdictResult(model_id=..., ...)` is an object with those attributes; no field is checked or
defaulted (the converters set every one; tests/test_cli.py compares both builds of the same answers).
"""

from __future__ import annotations

from typing import Any


class Plain:
    """The fields given, as attributes."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    def model_copy(self, update: dict[str, Any] | None = None) -> Plain:
        """A shallow copy with `update` applied, as pydantic's model_copy."""
        return type(self)(**{**self.__dict__, **(update or {})})


_classes: dict[str, type[Plain]] = {}


def __getattr__(name: str) -> type[Plain]:
    """Any wire model's name: a Plain class of that name."""
    if not name.startswith("Wire"):
        raise AttributeError(name)
    cls = _classes.get(name)
    if cls is None:
        cls = _classes[name] = type(name, (Plain,), {})
    return cls
