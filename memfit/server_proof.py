"""The proof a memfit server gives that it holds this state directory's token, before a client sends it.

The client sends `GET /health` with `Memfit-Challenge: <nonce>` (a fresh random nonce); the server answers with
`Memfit-Proof: <HMAC-SHA256 of the nonce and the address the connection reached, keyed by a key derived from the
token>`. A process that does not hold the token cannot make it, and a proof one server made cannot be replayed by
a listener at another address (the address is in it) or for another nonce. The client checks it and only then
sends the token, on the same connection. Light on purpose (no server stack): the CLI and memfit.http.proof use it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

CHALLENGE_HEADER = "Memfit-Challenge"
PROOF_HEADER = "Memfit-Proof"
NONCE_BYTES = 32
CHALLENGE = re.compile(r"[A-Za-z0-9_-]{16,128}")  # what a server answers: a URL-safe nonce of a sane length
_KEY_LABEL = b"memfit server proof v1"


def new_nonce() -> str:
    return secrets.token_urlsafe(NONCE_BYTES)


def proof(token: str, nonce: str, host: str, port: int) -> str:
    """The proof for `nonce` on a connection to `host`:`port` (the numeric address, as the socket names it)."""
    key = hmac.new(token.encode("utf-8", "surrogateescape"), _KEY_LABEL, hashlib.sha256).digest()
    return hmac.new(key, f"{nonce}\n{host}\n{port}".encode(), hashlib.sha256).hexdigest()


def proves(answer: str | None, token: str, nonce: str, host: str, port: int) -> bool:
    """Whether `answer` (the Memfit-Proof header, None when absent) is the proof, compared in constant time."""
    return answer is not None and hmac.compare_digest(answer.encode(), proof(token, nonce, host, port).encode())
