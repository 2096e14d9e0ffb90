"""The workspace: llama.cpp's compute buffer (estimator/compute_buffer.py) and its output buffer.

The output buffer is exact: n_vocab * rows * 4 (a float of logits per vocabulary entry and output row: one per
sequence, or while llama-server verifies drafts 1 + the draft length per sequence, at most n_batch), and under
llama-server's draft-mtp n_embd_out * n_batch * 4 more (the target's nextn embeddings, a row per batch token).
Under cparams.embeddings every token of a decode is an output, and a row holds n_embd_out floats of embeddings
beside the logits: (n_vocab + n_embd_out) * n_batch * 4. Under llama-server a model without a memory module that
computes no embeddings decodes only the server's warmup, whose one or two tokens (the vocabulary's BOS and EOS) may
add a row past n_seq: that row is the ceiling's (warmup_slack_rows).
The compute buffer is bounded from the graph llama.cpp reserves for a worst-case ubatch.
"""

from __future__ import annotations

from memfit.estimator.compute_buffer import compute_bounds
from memfit.estimator.context import ContextGeometry, output_rows, warmup_slack_rows
from memfit.estimator.layout import GraphShape

LOGIT_BYTES = 4


def output_buffer(n_vocab: int, geometry: ContextGeometry) -> int:
    """llama_context::output_reserve: logits for one output per sequence (at init; the verification batches of
    llama-server's speculative decoding grow them to output_rows, the old buffer freed before the new one is
    allocated, so the larger is the peak), and where nextn embeddings are
    set unmasked (common_speculative_impl_draft_mtp does on the target, after init) n_embd_out floats per batch
    token (embd_nextn.size = n_embd_out * n_batch), which the first decode's output_reserve allocates; under
    cparams.embeddings each row also n_embd_out floats of embeddings (embd.size = n_embd_out * n_outputs_max), a
    row per token of the batch."""
    return output_floats(n_vocab, geometry) * LOGIT_BYTES


def output_floats(n_vocab: int, geometry: ContextGeometry) -> int:
    """The floats of llama.cpp's output buffer (output_buffer)."""
    return (n_vocab + geometry.embd_width) * output_rows(geometry) + geometry.nextn_width * geometry.n_batch


def workspace_bounds(graph: GraphShape, n_vocab: int, geometry: ContextGeometry) -> tuple[int, int] | None:
    """(floor, slack): the compute buffer's floor plus the output buffer, and how far above it the ceiling is (the
    compute buffer's, and the rows llama-server's warmup may add: warmup_slack_rows); None where the compute buffer
    is not derived for this workload."""
    bounds = compute_bounds(graph, n_vocab, geometry)
    if bounds is None:
        return None
    floor, ceiling = bounds
    warmup = (n_vocab + geometry.embd_width) * warmup_slack_rows(geometry) * LOGIT_BYTES
    return floor + output_buffer(n_vocab, geometry), ceiling - floor + warmup
