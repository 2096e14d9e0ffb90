"""One model under one workload with the context left open: the context llama.cpp makes at any size, and the bytes
of the parts that depend on it (KV cache, recurrent state, workspace). The fit asks it at one context
(estimator/forecast.py), the plan's search at many (estimator/plan.py), the fitter's projection at every n_ctx
it tries (estimator/fitter.py): one derivation, whoever asks."""

from __future__ import annotations

from functools import cached_property

from memfit.estimator.compute_buffer import compute_fallback
from memfit.estimator.context import ContextGeometry, DraftSettings, llama_geometry
from memfit.estimator.kv_cache import KvGroup, cache_type, cache_type_problem, grouped_kv_bytes, kv_groups
from memfit.estimator.layout import Layout
from memfit.estimator.mtp import draft_context, draft_fallback, draft_kv_bytes, draft_workspace
from memfit.estimator.recurrent_state import recurrent_state_bytes
from memfit.estimator.vocabulary import FlashAttention
from memfit.estimator.workload import Workload, flash_attention_for
from memfit.estimator.workspace import workspace_bounds


class ContextKernel:
    """The context-dependent parts of a model (its layout, vocabulary and architecture) under a workload, its
    allocatedTokens aside: built once, asked at any context."""

    def __init__(self, layout: Layout, n_vocab: int | None, architecture: str, workload: Workload) -> None:
        self.layout, self.n_vocab, self.workload = layout, n_vocab, workload
        # an unknown flash attention setting is taken as on (forecast.kv_cache_part tries both)
        self.flash_attention = flash_attention_for(workload, architecture) is not False
        # asked as `auto`: llama_context::resolve_fused_ops turns it off where a placement puts a layer's flash
        # attention on another device than the layer's (estimator/scheduler.py's compute_buffers resolves it)
        self.flash_attention_auto = workload.flash_attention == FlashAttention.AUTO
        self.k_type = cache_type(workload.key_element_bytes)
        self.v_type = cache_type(workload.value_element_bytes)
        self._groups: dict[bool, tuple[KvGroup, ...]] = {}  # by flash attention: the KV cache's groups of layers
        # llama-server's MTP draft context beside the model's under --spec-type draft-mtp (estimator/mtp.py): its KV
        # cache counted with the model's, its compute and output buffers with the workspace; `draft_unknown` where
        # the model has NextN layers but memfit does not derive the draft context's buffers for its architecture
        mtp = workload.multi_token_prediction and layout.nextn_width > 0
        self.draft = draft_context(architecture, layout) if mtp else None
        self.draft_unknown = mtp and self.draft is None

    @cached_property
    def kv_problem(self) -> str | None:
        """Why llama.cpp refuses these cache types for this model (asked only of a model with attention layers),
        or None."""
        return cache_type_problem(self.layout, self.k_type, self.v_type) if self.layout.attention else None

    def geometry(self, tokens: int) -> ContextGeometry:
        """The context llama.cpp makes for `tokens` allocatedTokens per stream (context.context_geometry: n_ctx is
        tokens x streams)."""
        return self.geometry_total(tokens * self.workload.streams)

    def geometry_total(self, n_ctx: int) -> ContextGeometry:
        """The context llama.cpp makes for a total n_ctx under the workload's streams, ubatch, unified cache,
        full-size SWA cache, flash attention, cache types, rollback snapshots, MTP's nextn embeddings, the
        draft tokens each verification carries, the embeddings served and their pooling, a model without a
        memory module, under llama-server its output limit, and the MTP draft context's own settings."""
        w = self.workload
        return llama_geometry(
            n_ctx,
            w.streams,
            w.ubatch_tokens,
            unified=w.kv_unified,
            swa_full=w.swa_full,
            causal=self.layout.causal,
            flash_attention=self.flash_attention,
            quantized_k=self.k_type.quantized,
            k_type=self.k_type.name,
            v_type=self.v_type.name,
            quantized_v=self.v_type.quantized,
            rs_snapshots=w.rollback_snapshots,
            nextn_width=self.layout.nextn_width if w.multi_token_prediction else 0,
            draft_tokens=w.draft_tokens,
            server=w.under_llama_server,
            embeddings=w.embeddings,
            embd_width=self.layout.embd_width,
            memoryless=not self.layout.memory,
            warmup_tokens=self.layout.warmup_tokens,
            pooling=w.pooling,
            draft=DraftSettings(w.draft_key_element_bytes, w.draft_value_element_bytes, w.draft_backend_sampling),
            flash_attention_auto=self.flash_attention_auto,
        )

    def kv_bytes(self, geometry: ContextGeometry, flash_attention: bool | None = None) -> tuple[int, int]:
        """(K bytes, V bytes) of every cache at `geometry`, V laid out as flash attention on or off lays it (by
        default the workload's); (0, 0) for a model without attention layers."""
        flash = self.flash_attention if flash_attention is None else flash_attention
        groups = self._groups.get(flash)
        if groups is None:
            groups = self._groups[flash] = kv_groups(self.layout, self.k_type, self.v_type, flash)
        k, v = grouped_kv_bytes(self.layout, groups, geometry)
        if self.draft is not None:
            dk, dv = draft_kv_bytes(self.draft, geometry)
            k, v = k + dk, v + dv
        return k, v

    def recurrent_bytes(self, geometry: ContextGeometry) -> tuple[int, int]:
        """(R bytes, S bytes) of the recurrent state at `geometry`."""
        return recurrent_state_bytes(self.layout, geometry)

    def workspace(self, geometry: ContextGeometry) -> tuple[int, int] | None:
        """(floor, slack) of the workspace at `geometry` (workspace.workspace_bounds); None where it is not
        derived (no graph, no vocabulary, or a graph memfit does not rebuild)."""
        graph = self.layout.graph
        if graph is None or self.n_vocab is None or self.draft_unknown:
            return None
        bounds = workspace_bounds(graph, self.n_vocab, geometry)
        if bounds is None or self.draft is None:
            return bounds
        draft = draft_workspace(self.draft, self.n_vocab, self.layout.nextn_width, geometry)
        return None if draft is None else (bounds[0] + draft[0], bounds[1] + draft[1])

    def fallback(self, geometry: ContextGeometry) -> int:
        """How far the workspace's bounds at `geometry` can fall at a larger context (compute_buffer.compute_fallback);
        0 where it is not derived."""
        graph = self.layout.graph
        if graph is None or self.n_vocab is None:
            return 0
        fallback = compute_fallback(graph, self.n_vocab, geometry, self.workload.ubatch_tokens)
        if self.draft is not None:
            fallback += draft_fallback(self.draft, self.n_vocab, geometry, self.workload.ubatch_tokens)
        return fallback
