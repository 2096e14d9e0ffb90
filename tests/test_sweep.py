"""tools/truth/sweep.py's pieces that need no harness: its draws and how it reads a failed run."""

from __future__ import annotations

import random

from tools.families import more
from tools.truth.sweep import CACHE_TYPES, CONTEXTS, RESERVED, SEQUENCES, UBATCHES, aborted_decoding, draw


def test_a_seed_draws_the_same_settings_within_the_model_s_context() -> None:
    model = more.FAMILY_SET["llama4-chunked"]()
    first = [draw(random.Random(7), model) for _ in range(3)]
    assert first == [draw(random.Random(7), model) for _ in range(3)]
    rng = random.Random(11)
    for s in (draw(rng, model) for _ in range(200)):
        per_seq = s["n_ctx"] // s["n_seq"]
        assert s["n_seq"] in SEQUENCES and per_seq in CONTEXTS and s["n_ubatch"] in UBATCHES
        assert (s["type_k"], s["type_v"]) in CACHE_TYPES and s["fa"] in ("auto", "on", "off")


def test_a_run_that_aborted_after_its_reserve_is_a_decode_failure_not_a_refusal() -> None:
    after = {"error": "no json", "stderr_tail": f"{RESERVED} 1.02 ms\nGGML_ASSERT(encoder requires ...) failed"}
    refused = {"error": "context init failed", "stderr_tail": "quantized V cache requires flash_attn to be enabled"}
    assert aborted_decoding(after) and not aborted_decoding(refused) and not aborted_decoding({"stderr_tail": RESERVED})
