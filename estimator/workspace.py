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


def output_buffer(n_vocab: int, geometry: ContextGeometry) -> int:
    """llama_context::output_reserve at start: logits for one output per sequence."""
    return n_vocab * geometry.n_seq * LOGIT_BYTES


def workspace_bounds(n_vocab: int, geometry: ContextGeometry, bytes_per_cell: int) -> tuple[int, int]:
    """(floor, slack): the logits of a worst-case ubatch plus the output buffer, and the documented remainder:
    16 MiB plus `bytes_per_cell` (the architecture's masks and scores) per KV cell and ubatch token."""
    floor = n_vocab * geometry.n_ubatch * LOGIT_BYTES + output_buffer(n_vocab, geometry)
    return floor, COMPUTE_REMAINDER + bytes_per_cell * geometry.n_ctx_seq * geometry.n_ubatch
