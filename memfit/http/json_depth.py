"""Refuses, with a 400, a body the parsers behind the validator would break on: nesting past MAX_JSON_DEPTH
(recursive parsers overflow on thousands of levels) or an integer longer than Python converts. Runs behind
body.py, which hands over the whole body as one message."""

from __future__ import annotations

import json
import re
import sys

from starlette.types import ASGIApp, Receive, Scope, Send

from memfit.handlers.problems import send_problem
from memfit.http.body import replay

MAX_JSON_DEPTH = 64  # a fit request nests 3 deep; parsers deeper down the stack would overflow on thousands
LONG_DIGITS = re.compile(rb"\d{%d}" % (sys.get_int_max_str_digits() + 1))


class JsonDepth:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = await receive()
        body = message.get("body", b"")
        if body and (refused := unparseable(body)):
            await send_problem(send, 400, refused)
            return
        await self.app(scope, replay(message, receive), send)


def unparseable(body: bytes) -> str | None:
    """Why a JSON body would break the parsers behind the validator, or None. Nesting past MAX_JSON_DEPTH
    overflows recursive ones; an integer longer than Python converts (sys.get_int_max_str_digits) raises
    inside json.loads. Only a body with that many brackets or digits is parsed to see; a body that is not
    JSON at all is left to the validator, which says so."""
    deep = body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH
    if not deep and not LONG_DIGITS.search(body):
        return None
    too_deep = f"the request body nests deeper than {MAX_JSON_DEPTH} levels"
    try:
        document = json.loads(body)
    except RecursionError:
        return too_deep
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    except ValueError:  # json.loads's only other ValueError: an integer past the digit limit
        return f"a number in the request body has more than {sys.get_int_max_str_digits()} digits"
    return too_deep if deep and _depth(document) > MAX_JSON_DEPTH else None


def _depth(document: object) -> int:
    deepest, level = 0, [(document, 1)]
    while level:
        node, depth = level.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        level.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
