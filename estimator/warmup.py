"""What llama-server aborts on at its warmup: common_init_from_params decodes the vocabulary's BOS and EOS before the
server takes a request, and a model without a memory module decodes them through llama_context::encode, every token
an output, so two of them past the server's output limit of one (one slot, no draft) fail its output_reserve
(GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)), and past the ubatch encode()'s own assertion."""

from __future__ import annotations

from memfit.estimator.context import llama_geometry, warmup_only, warmup_room
from memfit.estimator.layout import Layout
from memfit.estimator.workload import Workload


def warmup_refusal(layout: Layout | None, workload: Workload) -> str | None:
    """Why llama-server aborts at its warmup with this model under the workload, or None (a plain llama.cpp context,
    the custom profile, makes no warmup; a vocabulary memfit does not know is not refused)."""
    if layout is None or layout.memory or not layout.warmup_tokens or not workload.under_llama_server:
        return None
    geometry = llama_geometry(
        1,
        workload.streams,
        workload.ubatch_tokens,
        causal=False,
        draft_tokens=workload.draft_tokens,
        server=True,
        embeddings=workload.embeddings,
        memoryless=True,
        pooling=workload.pooling,
        warmup_tokens=layout.warmup_tokens,
    )
    room = warmup_room(geometry)
    if not warmup_only(geometry) or layout.warmup_tokens <= room:
        return None
    return (
        f"llama-server's warmup decodes the vocabulary's BOS and EOS ({layout.warmup_tokens} tokens) through encode(),"
        f" every token an output, past the {room} its output limit and ubatch take: llama.cpp aborts"
        " (GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) in output_reserve)"
    )
