"""Model ids as people type them: what a lookup reads of the id a request names."""

from __future__ import annotations

# A Hub repository's address as Ollama (`ollama run hf.co/org/repo:QUANT`) and browsers write it
HUB_PREFIXES = ("https://huggingface.co/", "https://hf.co/", "huggingface.co/", "hf.co/")


def typed_id(model_id: str) -> str:
    """The id a lookup reads: surrounding whitespace dropped, and a Hub address read as its `org/repo:QUANT`."""
    model_id = model_id.strip()
    lowered = model_id.lower()
    for prefix in HUB_PREFIXES:
        if lowered.startswith(prefix):
            return model_id[len(prefix) :]
    return model_id
