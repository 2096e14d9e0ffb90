"""Which operation of the contract a request is for, known from its method and path alone, before any body is
read: its path template, whether it needs the bearer token (openapi.yaml's `security`; an operation the server
makes public, such as /metrics under `--metrics-public`, does not) and whether it takes a body (`requestBody`).
The answer goes in the scope at ROUTE_KEY; None for anything the contract does not name (connexion answers
those: 404, 405, the Swagger UI's pages), which never reads a body."""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

ROUTE_KEY = "memfit.route"
ALLOW_KEY = "memfit.allow"  # the methods the contract names for the request's path, for a 405's Allow header
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@dataclass(frozen=True)
class Route:
    secured: bool  # the bearer token is required
    takes_body: bool
    template: str = ""  # the contract's path, `/v1/models/observations/{observationId}`
    operation: str = ""  # its operationId


class RouteTable:
    def __init__(self, spec: dict, public: frozenset[str] = frozenset()) -> None:
        """`public`: the operationIds served without the token although the contract allows it (its security
        lists an empty requirement); every other operation follows its `security`."""
        default_security = spec.get("security", [])
        self._routes: list[tuple[re.Pattern[str], dict[str, Route]]] = []
        for path, item in spec.get("paths", {}).items():
            pattern = re.compile(
                "".join(
                    r"[^/]+" if part.startswith("{") else re.escape(part) for part in re.split(r"(\{[^}]*\})", path)
                )
            )
            operations = {
                method.upper(): Route(
                    secured=bool(op.get("security", default_security))
                    and not (op.get("operationId") in public and {} in op.get("security", default_security)),
                    takes_body="requestBody" in op,
                    template=path,
                    operation=op.get("operationId", ""),
                )
                for method, op in item.items()
                if method in METHODS
            }
            if "GET" in operations and "HEAD" not in operations:
                operations["HEAD"] = operations["GET"]  # answered as a GET without its body, as starlette does
            self._routes.append((pattern, operations))

    def match(self, method: str, path: str) -> Route | None:
        return self.operations(path).get(method)

    def operations(self, path: str) -> dict[str, Route]:
        for pattern, operations in self._routes:
            if pattern.fullmatch(path):
                return operations
        return {}


class Routing:
    def __init__(self, app: ASGIApp, table: RouteTable) -> None:
        self.app = app
        self.table = table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            operations = self.table.operations(scope["path"])
            scope[ROUTE_KEY] = operations.get(scope["method"])
            scope[ALLOW_KEY] = ", ".join(operations)
        await self.app(scope, receive, send)
