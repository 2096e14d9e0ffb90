"""Bearer tokens: MEMFIT_TOKEN, else one generated at first start into a 0600 file in the state directory.

Loading, creating and reading the token is memfit.token_file's job (light, so that the CLI can read it without the
server stack); checking a request's token is memfit.http.auth's, and openapi.yaml's x-bearerInfoFunc names it
here."""

from __future__ import annotations

from memfit.http.auth import bearer_info  # noqa: F401  (openapi.yaml: x-bearerInfoFunc: memfit.auth.bearer_info)
from memfit.token_file import (  # noqa: F401  (the names callers import from here)
    TOKEN_FILE,
    Token,
    UnsafeStateError,
    load_token,
    read_token,
    write_token_file,
)
