"""Tiny models of llama.cpp's architecture families, each module's FAMILY_SET by name: `attention`, `recurrent`
and `more`, measured in real llama.cpp (tests/data/results_attn.jsonl, results_rec.jsonl, results_more.jsonl), and
`tiny_real`, random-weight copies of one or more per family whose graph differs, allocated and decoded
(results_tiny_real.jsonl)."""
