"""Refuses, with a 400, a request the parsers behind the validator would break on: a body nesting past
MAX_JSON_DEPTH (recursive parsers overflow on thousands of levels), or an integer longer than Python converts in
the body or the path (connexion converts an integer path parameter before anything validates it). Runs behind
body.py, which hands over the whole body as one message.

The depth is counted without parsing: the brackets outside strings, in one pass over the body. Only a body
with an integer past the digit limit is parsed (json.loads, to tell it from a long float), and a large body's
check runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import json
import re
import sys

from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from memfit.http.body import replay
from memfit.http.middleware import HttpMiddleware
from memfit.http.problems import send_problem

MAX_JSON_DEPTH = 64  # a fit request nests 3 deep; parsers deeper down the stack would overflow on thousands
MAX_DIGITS = sys.get_int_max_str_digits()
INLINE_BYTES = 16 << 10  # a body up to this size is checked on the event loop (microseconds); larger ones off it
_DIGITS_AS_ZERO = bytes(ord("0") if chr(i).isdigit() and i < 128 else ord(" ") for i in range(256))
_NOT_BRACKETS = bytes(i for i in range(256) if i not in b"[]{}")
_BRACES_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")
_RUNS = re.compile(rb"\[+|\]+")
_DIGIT_RUNS = re.compile("[0-9]+")


class JsonDepth(HttpMiddleware):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if any(len(run) > MAX_DIGITS for run in _DIGIT_RUNS.findall(scope["path"])):
            await send_problem(send, 400, f"a number in the request path has more than {MAX_DIGITS} digits")
            return
        message = await receive()
        body = message.get("body", b"")
        if body:
            refused = unparseable(body) if len(body) <= INLINE_BYTES else await run_in_threadpool(unparseable, body)
            if refused:
                await send_problem(send, 400, refused)
                return
        await self.app(scope, replay(message, receive), send)


def unparseable(body: bytes) -> str | None:
    """Why a JSON body would break the parsers behind the validator, or None. Nesting past MAX_JSON_DEPTH
    overflows recursive ones; an integer longer than Python converts (sys.get_int_max_str_digits) raises
    inside json.loads. A body that is not JSON at all is left to the validator, which says so."""
    outside = outside_strings(body)
    if nests_deeper(outside, MAX_JSON_DEPTH):
        return f"the request body nests deeper than {MAX_JSON_DEPTH} levels"
    if b"0" * (MAX_DIGITS + 1) not in outside.translate(_DIGITS_AS_ZERO):
        return None
    try:  # a run of digits that long outside strings: an integer json.loads refuses, or a float it takes
        json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None
    except ValueError:  # json.loads's only other ValueError: an integer past the digit limit
        return f"a number in the request body has more than {MAX_DIGITS} digits"
    return None


def outside_strings(body: bytes) -> bytes:
    """The body with its JSON strings left out (each replaced by a space). Escaped backslashes, then escaped
    quotes, go first, so every quote left opens or closes a string; an unterminated one runs to the end."""
    if b'"' not in body:
        return body
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b" ".join(unescaped.split(b'"')[::2])


def nests_deeper(outside: bytes, limit: int) -> bool:
    """Whether the brackets of `outside` (a body without its strings) nest deeper than `limit`: the running
    count of open brackets goes past it somewhere.

    Counted with bytes operations rather than a Python step per byte: with only the brackets left (closed at
    the end if some stay open), each pass that removes every adjacent `[]` lowers the deepest point by exactly
    one level. Passes go on while they shrink the brackets by a quarter or more (wide, shallow bodies vanish
    in a few); then the rest, which has few runs of one bracket, is counted run by run. (A body whose count
    goes below zero is not JSON; it may be called too deep, still a 400.)"""
    if outside.count(b"[") + outside.count(b"{") <= limit:
        return False
    brackets = outside.translate(_BRACES_AS_BRACKETS, _NOT_BRACKETS)
    still_open = brackets.count(b"[") - brackets.count(b"]")
    if still_open > 0:
        brackets += b"]" * still_open
    while limit > 0:
        shallower = brackets.replace(b"[]", b"")
        if not shallower:
            return False
        if len(shallower) > len(brackets) * 3 // 4:
            break
        brackets, limit = shallower, limit - 1
    depth = 0
    for run in _RUNS.finditer(brackets):
        depth += len(run[0]) if run[0][0] == ord("[") else -len(run[0])
        if depth > limit:
            return True
    return False
