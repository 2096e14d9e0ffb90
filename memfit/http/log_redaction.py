"""Keeps credentials out of the access log: uvicorn logs each request's path with its query string, and a client
may put a token there (`?access_token=...`, which memfit never accepts). Every query value is replaced by
REDACTED except those of the query parameters the contract declares (`limit`, `modelId`)."""

from __future__ import annotations

import logging
import re

ACCESS_LOGGER = "uvicorn.access"
REDACTED = "REDACTED"
_PARAMETER = re.compile(r"(?<=[?&;])([^=&;#\s\"]*)(=?)([^&;#\s\"]*)")


class RedactQuery(logging.Filter):
    def __init__(self, kept: frozenset[str]) -> None:
        super().__init__()
        self.kept = kept

    def redact(self, text: str) -> str:
        head, mark, query = text.partition("?")
        if not mark:
            return text

        def value(m: re.Match[str]) -> str:
            name, equals, given = m.groups()
            return m.group(0) if name in self.kept or not given else f"{name}{equals}{REDACTED}"

        return head + mark + _PARAMETER.sub(value, "?" + query)[1:]

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in record.args)
        return True


def query_parameters(spec: dict) -> frozenset[str]:
    """The names of the query parameters the contract declares, on any operation."""
    return frozenset(
        p["name"]
        for item in spec.get("paths", {}).values()
        for op in item.values()
        if isinstance(op, dict)
        for p in op.get("parameters", [])
        if p.get("in") == "query"
    )


def redact_access_log(kept: frozenset[str]) -> None:
    """Install the filter on uvicorn's access logger, once per process (a second app replaces the first's)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    for old in [f for f in logger.filters if isinstance(f, RedactQuery)]:
        logger.removeFilter(old)
    logger.addFilter(RedactQuery(kept))
