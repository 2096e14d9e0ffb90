"""Typed access to a GGUF's hyperparameters, per layer where llama.cpp reads them per layer."""

from __future__ import annotations

from collections.abc import Mapping

from gguf import Keys

from memfit.estimator.errors import EvidenceError
from memfit.estimator.vocabulary import Limit
from memfit.readers.gguf_header import SkippedArray, Value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: llama.cpp refuses a block_count above it


class HParams:
    """The `<arch>.*` keys of one model, with llama.cpp's per-layer reading rules."""

    def __init__(self, metadata: Mapping[str, Value], arch: str) -> None:
        self.metadata = metadata
        self.arch = arch
        self.n_layer = self.require_int(Keys.LLM.BLOCK_COUNT)
        if not 0 < self.n_layer <= MAX_LAYERS:
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"llama.cpp refuses a block_count of {self.n_layer}")

    def key(self, template: str) -> str:
        return template.format(arch=self.arch)

    def has(self, template: str) -> bool:
        return self.key(template) in self.metadata

    def optional_int(self, template: str, default: int | None = None) -> int | None:
        value = self.metadata.get(self.key(template))
        if value is None:
            return default
        if not _is_int(value) or value < 0:
            raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"{self.key(template)} is not a non-negative integer")
        return value

    def require_int(self, template: str) -> int:
        value = self.optional_int(template)
        if value is None:
            raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"{self.key(template)} is missing")
        return value

    def optional_float(self, template: str) -> float | None:
        value = self.metadata.get(self.key(template))
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def per_layer(self, template: str, default: int | None = None) -> tuple[int, ...]:
        """A value llama.cpp reads with get_key_or_arr: one number for every layer, or one per layer."""
        value = self.metadata.get(self.key(template))
        if value is None:
            if default is None:
                raise EvidenceError(Limit.LAYOUT_UNPUBLISHED, f"{self.key(template)} is missing")
            return (default,) * self.n_layer
        if _is_int(value) and value >= 0:
            return (value,) * self.n_layer
        if isinstance(value, SkippedArray) or not isinstance(value, tuple):
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"{self.key(template)} is not a per-layer array")
        if len(value) != self.n_layer or not all(_is_int(v) and v >= 0 for v in value):
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"{self.key(template)} has {len(value)} entries for {self.n_layer} layers")
        return value

    def per_layer_flags(self, template: str) -> tuple[bool, ...] | None:
        """A boolean per-layer array (sliding-window pattern, recurrent-layer marks), or None when absent."""
        value = self.metadata.get(self.key(template))
        if value is None:
            return None
        if not isinstance(value, tuple) or len(value) != self.n_layer:
            raise EvidenceError(Limit.LAYOUT_NOT_UNIFORM, f"{self.key(template)} is not one flag per layer")
        return tuple(bool(v) for v in value)
