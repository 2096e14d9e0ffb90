"""llama-server's --spec-type draft-mtp (multi-token prediction) on the target model, the one the answer is about.

common.cpp's common_model_params_to_llama sets load_mtp under draft-mtp: each architecture's load_arch_tensors then
loads the NextN/MTP layers' tensors (the last nextn_predict_layers of block_count) instead of skipping them
(TENSOR_SKIP), on the devices their layers are assigned to. common_speculative_impl_draft_mtp's constructor sets
the target context's nextn embeddings, unmasked (llama_set_embeddings_nextn(ctx_tgt, true, false)), after the
context is made: the first decode's llama_context::output_reserve then grows the output buffer by n_embd_out
floats per batch token (workspace.output_buffer; the geometry's nextn_width, set by context_kernel). The MTP draft
context's own KV cache and compute buffer are not counted (the contract's rollbackSnapshots says so), nor is its
share of llama-server's --fit (common_fit_extra_model fits it with the target).
"""

from __future__ import annotations

from dataclasses import replace

from memfit.estimator.bounds import Part
from memfit.estimator.subject import Subject
from memfit.estimator.vocabulary import Basis, Component
from memfit.estimator.workload import Workload

NO_MTP_LAYERS = (
    "llama-server's --spec-type draft-mtp needs the model's NextN/MTP layers, and it has none: llama_init_from_model"
    ' refuses the MTP context ("model doesn\'t contain MTP layers") and the server stops'
)


def mtp_refusal(subject: Subject, workload: Workload) -> str | None:
    """Why llama-server does not start under draft-mtp with this model (one without NextN layers), or None."""
    if not workload.multi_token_prediction or subject.layout is None or subject.layout.nextn_width:
        return None
    return NO_MTP_LAYERS


def with_mtp(subject: Subject, workload: Workload) -> Subject:
    """The subject as llama-server loads it under the workload: with draft-mtp, its weights (and the part of them
    the CPU's extra buffer types pack, and the tensors placement assigns) hold the NextN/MTP layers' tensors too;
    unchanged otherwise, or when they are held already."""
    if not workload.multi_token_prediction or subject.mtp_loaded:
        return subject
    w, mtp = subject.weights, subject.mtp
    has_layers = subject.layout is not None and subject.layout.nextn_width > 0
    if w.bytes is None or w.basis in (Basis.UNKNOWN, Basis.NOT_APPLICABLE) or not has_layers:
        weights = w
    elif mtp is None:
        weights = Part.unknown(
            Component.WEIGHTS,
            f"{w.note}; under --spec-type draft-mtp llama.cpp also loads its NextN/MTP layers' tensors (load_mtp),"
            " which this description of the model does not list",
        )
    else:
        note = (
            f"{w.note}; with the {mtp.count} tensors ({mtp.floor} bytes) of its NextN/MTP layers, which llama-server"
            " loads under --spec-type draft-mtp (load_mtp)"
        )
        weights = replace(w, bytes=w.bytes + mtp.floor, slack=w.slack + mtp.slack, note=note)
    packed = subject.packed
    if packed is not None and mtp is not None:
        packed = (packed[0] + mtp.packed[0], packed[1] + mtp.packed[1])
    tensors = tuple(t.with_mtp() for t in subject.tensors)
    return replace(subject, weights=weights, packed=packed, tensors=tensors, mtp_loaded=True)
