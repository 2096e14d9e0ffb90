"""The workspace: llama.cpp's compute buffer and its output buffer, under its defaults (flash attention on).

The output buffer is exact: n_vocab * max(1, n_seq) * 4 (a float of logits per vocabulary entry and
sequence). The compute buffer has no closed form; its floor is the logits of a worst-case ubatch
(n_vocab * n_ubatch * 4), and what llama.cpp reserves beyond that (graph intermediates, attention masks)
measured within a fixed remainder plus a term per KV cell and ubatch token.
"""

from __future__ import annotations

from memfit.estimator.context import ContextGeometry

LOGIT_BYTES = 4
COMPUTE_REMAINDER = 16 << 20  # what graphs reserve beyond the logits, independent of the context
MASK_BYTES_PER_CELL = 8  # per KV cell and ubatch token: the masks and scores that grow with the context


def output_buffer(n_vocab: int, geometry: ContextGeometry) -> int:
    """llama_context::output_reserve at start: logits for one output per sequence."""
    return n_vocab * geometry.n_seq * LOGIT_BYTES


def workspace_bounds(n_vocab: int, geometry: ContextGeometry) -> tuple[int, int]:
    """(floor, slack): the logits of a worst-case ubatch plus the output buffer, and the documented remainder."""
    floor = n_vocab * geometry.n_ubatch * LOGIT_BYTES + output_buffer(n_vocab, geometry)
    return floor, COMPUTE_REMAINDER + MASK_BYTES_PER_CELL * geometry.n_ctx_seq * geometry.n_ubatch
