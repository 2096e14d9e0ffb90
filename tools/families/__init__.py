"""Tiny models of llama.cpp's architecture families, each module's FAMILY_SET by name: `attention`, `recurrent`
and `more`, measured in real llama.cpp (tests/data/results_attn.jsonl, results_rec.jsonl, results_more.jsonl)."""
