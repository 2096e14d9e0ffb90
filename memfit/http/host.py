"""Refuses, with a 421 problem, a request whose `Host` does not name the server: the address the connection
reached (and its port, when it names one), `localhost` when that address is a loopback one, or this machine's
own name (socket.gethostname()). A web page whose name an attacker points at 127.0.0.1 (DNS rebinding) thus
never gets an answer, and no redirect echoes its name. A request without a Host (HTTP/1.0) passes."""

from __future__ import annotations

import functools
import ipaddress
import socket

from starlette.types import Receive, Scope, Send

from memfit.http.middleware import HttpMiddleware
from memfit.http.problems import send_problem

MISDIRECTED = 421
LOCALHOST = "localhost"


@functools.cache
def machine_name() -> str:
    """This machine's own name, which its owner chose (an attacker's DNS cannot change it; no lookup made)."""
    return socket.gethostname().lower().rstrip(".")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header's name (lower case, an IPv6 literal without its brackets) and port (None when it names
    none); None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else ""
    else:
        name, colon, port_text = value.rpartition(":") if ":" in value else (value, "", "")
        if colon and ":" in name:
            return None
    if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        return None
    return name.rstrip("."), int(port_text) if port_text else None


@functools.lru_cache(maxsize=256)  # a few Host values reach a server; parsing addresses was a tenth of a refusal
def names_server(host: str, server: tuple[str, int]) -> bool:
    """Whether the Host header `host` names the server whose connection's local address is `server`."""
    parts = split_host(host)
    if parts is None or parts[1] not in (server[1], None):
        return False
    name, local = parts[0], _address(server[0])
    if local is None:  # not served on an IP socket (a test client's made-up server name)
        return name == server[0].lower()
    if _address(name) is not None:
        return _address(name) == local
    return (name == LOCALHOST and local.is_loopback) or (bool(name) and name == machine_name())


class HostCheck(HttpMiddleware):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = next((v for k, v in scope.get("headers", []) if k == b"host"), None)
        server = scope.get("server")
        if host is not None and server is not None and not names_server(host.decode("latin-1"), tuple(server)):
            where = f"http://[{server[0]}]:{server[1]}" if ":" in server[0] else f"http://{server[0]}:{server[1]}"
            detail = f"the Host header does not name this server: ask {where}"
            await send_problem(send, MISDIRECTED, detail, [(b"connection", b"close")])
            return
        await self.app(scope, receive, send)
