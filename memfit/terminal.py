"""Text from elsewhere (a server's answer, a file's name or metadata) made safe to write to a terminal: no
control character (ESC and the sequences it starts, CSI, any other C0 or C1 code, DEL) reaches it raw; each is
written as its escape (`\\x1b`), so the text stays readable and can move no cursor, set no title, run nothing."""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_C1 = re.compile("[\x7f-\x9f]")  # what JSON leaves raw (it escapes C0 itself)


def printable(text: str, *, newlines: bool = False) -> str:
    """`text` with every control character (but newlines, when `newlines`) written as its escape."""
    pattern = _CONTROL_BUT_NEWLINE if newlines else _CONTROL
    return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if pattern.search(text) else text


def printable_json(text: str) -> str:
    """A JSON document with DEL and the C1 controls inside its strings as \\u escapes: the same document."""
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
