"""llm_graph_context::build_ffn and build_moe_ffn (src/llama-graph.cpp), rebuilt node for node: the FFN of every
builder's block, dense or shared (gate and up, their GLU, down) and routed (the router, the picked experts' weights,
the experts over [n_ff, k, T], their weighted views summed). Ops in place on a tensor's only consumer take no memory
of their own; weights and biases are left out (not the compute buffer's).
"""

from __future__ import annotations

from memfit.estimator.ggml_graph import (
    F32,
    NORM_PIN,
    Graph,
    Tensor,
    argsort_top_k,
    cont,
    get_rows,
    glu,
    mul_mat,
    op,
    pinned,
    reshape,
    same,
    same_shape,
    set_rows,
    view,
)
from memfit.estimator.layout import FfnOp, Gating, GraphLayer, Routing

DENSE = ("ffn_up", "ffn_gate", "ffn_down")  # the FFN's weights (LLM_TENSOR_FFN_UP, _GATE, _DOWN)
SHARED = ("ffn_up_shexp", "ffn_gate_shexp", "ffn_down_shexp")  # the shared experts' (LLM_TENSOR_FFN_*_SHEXP)
# llm_ffn_op_type without a gate: the element-wise ops build_ffn / build_moe_ffn run on up, each in place
UNGATED = {FfnOp.SILU: ("SILU",), FfnOp.GELU: ("GELU",), FfnOp.RELU_SQR: ("RELU", "SQR"), FfnOp.RELU: ("RELU",)}
GLU = {FfnOp.GELU: "GEGLU", FfnOp.RELU: "REGLU"}  # a gated type_op's GLU (else SWIGLU)
# ggml's gating ops over the router's logits, each in place (SOFTMAX_WEIGHT: none, the logits select)
GATING_OPS = {
    Gating.SOFTMAX: ("SOFT_MAX",),
    Gating.SIGMOID: ("SIGMOID",),
    Gating.SOFTMAX_WEIGHT: (),
    Gating.SQRT_SOFTPLUS: ("SOFTPLUS", "SQRT"),
}


def gated_op(gate: Tensor, up: Tensor, activation: FfnOp, clamped: bool, fused_clamp: bool = False) -> Tensor:
    """build_ffn's / build_moe_ffn's type_op over a gate and up: LLM_FFN_SILU's ggml_swiglu_split, LLM_FFN_GELU's
    ggml_geglu_split or LLM_FFN_RELU's ggml_reglu_split (a new tensor), or with a swiglu clamp limit silu(gate)
    clamped times the clamped up, each in place (`fused_clamp`: deepseek4's one ggml_swiglu_clamp, a new tensor)."""
    if not clamped:
        return glu(gate, up, GLU.get(activation, "SWIGLU"))
    if fused_clamp:
        return glu(gate, up, "SWIGLU_CLAMP")
    return same_shape(same(gate, "SILU", "CLAMP"), "MUL", same_shape(up, "CLAMP"))


def situ(gate: Tensor, up: Tensor, linear: bool) -> Tensor:
    """build_moe_ffn's LLM_FFN_SITU (and kimi_k3_situ): beta * tanh(gate / beta) * sigmoid(gate) times up (itself
    lb * tanh(up / lb) where the linear beta is set)."""
    act = same_shape(same(same_shape(gate, "SCALE"), "TANH", "SCALE"), "MUL", same_shape(gate, "SIGMOID"))
    if linear:
        up = same(up, "SCALE", "TANH", "SCALE")
    return same_shape(act, "MUL", up)


def build_ffn(
    cur: Tensor,
    n_ff: int,
    gated: bool = True,
    fused_up: bool = False,
    activation: FfnOp = FfnOp.SILU,
    clamped: bool = False,
    weights: tuple[str, str, str] = DENSE,
    fused_clamp: bool = False,
    biases: frozenset[str] = frozenset(),
) -> Tensor:
    """build_ffn with a parallel gate: gate and up, then their GLU (`gated_op`) | one up 2 x n_ff wide, ggml_swiglu over
    its halves (a new tensor) | up, then the activation in place; then down (`weights`: up's, gate's and down's
    names; `fused_clamp`: a clamped SwiGLU as deepseek4's one ggml_swiglu_clamp; `biases`: the weights whose bias
    (up_b, gate_b, down_b) is added in place after their matmul)."""
    up_w, gate_w, down_w = weights

    def mm(name: str, x: Tensor, rows: int) -> Tensor:
        out = mul_mat(name, x, rows)
        return same_shape(out, "ADD", f"{name}.bias") if name in biases else out

    if fused_up:
        up = mm(up_w, cur, 2 * n_ff)
        act = op("SWIGLU", F32, (n_ff, *up.ne[1:]), up)
    elif gated:
        act = gated_op(mm(gate_w, cur, n_ff), mm(up_w, cur, n_ff), activation, clamped, fused_clamp)
    else:
        act = same(mm(up_w, cur, n_ff), *UNGATED[activation])
    return mm(down_w, act, cur.ne[0])


def route(r: Routing, logits: Tensor) -> tuple[Tensor, Tensor]:
    """build_moe_ffn's gating: the probabilities the weights are read from (in place over the logits), and those the
    experts are picked on: biased by exp_probs_b (a new tensor: the probabilities stay for the weights), llama4's
    logits themselves (the gating is then a new tensor: the logits are read twice), then limited to the best expert
    groups."""
    probs = same(logits, *GATING_OPS[r.gating])
    selection = same_shape(probs, "ADD", "exp_probs_b.bias") if r.probs_bias else probs  # ffn_moe_probs_biased
    if r.weight_before_ffn:  # LLM_ARCH_LLAMA4: the experts picked on the logits, the gating only weighs them
        selection = logits
    return probs, best_groups(selection, r.groups, r.groups_used) if r.groups > 1 else selection


def best_groups(selection: Tensor, groups: int, used: int) -> Tensor:
    """build_moe_ffn with n_expert_groups > 1: each group scored by the sum of its two best experts, the `used` best
    groups' rows written into a copy of the selection filled with -inf (ffn_moe_probs_masked)."""
    n_exp, t = selection.ne[0], selection.ne[1]
    per = n_exp // groups
    grouped = reshape(selection, per, groups, t)
    best = get_rows(reshape(grouped, 1, per, groups, t), argsort_top_k(grouped, 2), 1)  # [1, 2, groups, T]
    scores = reshape(op("SUM_ROWS", F32, (1, groups, t), reshape(best, 2, groups, t)), groups, t)
    kept = argsort_top_k(scores, used)  # ffn_moe_group_topk
    picked = get_rows(grouped, kept, per)  # [per, used, T]
    return reshape(set_rows(same_shape(grouped, "FILL"), picked, kept), n_exp, t)


def expert_weights(r: Routing, weights: Tensor) -> Tensor:
    """build_moe_ffn's picked experts' weights [1, k, T]: soft-maxed (SOFTMAX_WEIGHT, in place), divided by their
    clamped sum (ffn_moe_weights_norm: a new tensor, the rows are read twice), scaled (in place)."""
    k, t = weights.ne[1], weights.ne[2]
    if r.gating is Gating.SOFTMAX_WEIGHT:
        weights = reshape(same_shape(reshape(weights, k, t), "SOFT_MAX"), 1, k, t)
    if r.norm:
        rows = reshape(weights, k, t)
        total = same_shape(op("SUM_ROWS", F32, (1, t), rows), "CLAMP")  # ffn_moe_weights_sum_clamped
        weights = reshape(same_shape(rows, "DIV", total), 1, k, t)
    return same_shape(weights, "SCALE") if r.scale else weights


def expert_activation(r: Routing, gate: Tensor | None, up: Tensor) -> Tensor:
    """build_moe_ffn's type_op over the experts' gate and up (up alone where they have no gate)."""
    if r.activation is FfnOp.SITU:
        assert gate is not None  # GGML_ASSERT(has_gate)
        return situ(gate, up, r.situ_linear)
    if gate is None:
        return same(up, *UNGATED[r.activation])
    return gated_op(gate, up, r.activation, r.clamped, r.fused_clamp)


def expert_bias(r: Routing, x: Tensor, name: str, picked: Tensor) -> Tensor:
    """ggml_add_id: each picked expert's bias (`name`.bias, [width, n_expert]) added to its rows, in place."""
    return op("ADD_ID", F32, x.ne, x, f"{name}.bias", picked) if r.biases else x


def build_moe_ffn(
    gf: Graph, b: GraphLayer, cur: Tensor, logits: Tensor | None = None, picked: Tensor | None = None
) -> Tensor:
    """build_moe_ffn over cur [width, T] (the router's logits computed here, or given: probs_in): the gating, the
    selection, top-k (or `picked`, the experts given: selected_experts_in, no argsort), the picked weights expanded
    early; llama4's input repeated per picked expert and weighted (weight_before_ffn); the experts' gate and up (one
    gate_up matmul's views, or two; or up alone), the activation, down (scaled per picked expert by down_exps_s),
    times the weights (not llama4's), each expert's view, the partial sums."""
    r, width, t, k = b.routing, cur.ne[0], cur.ne[1], b.n_expert_used
    if logits is None:
        logits = mul_mat("ffn_gate_inp", cur, b.n_expert)  # ffn_moe_logits
    if r.biases:  # ffn_moe_logits_biased
        logits = same_shape(logits, "ADD", "ffn_gate_inp.bias")
    probs, selection = route(r, logits)
    picked = argsort_top_k(selection, k) if picked is None else picked  # ffn_moe_topk
    weights = gf.expand(expert_weights(r, get_rows(reshape(probs, 1, b.n_expert, t), picked, 1)))
    rows, ff = reshape(cur, width, 1, t), b.n_ff_exp
    if r.weight_before_ffn:  # ffn_moe_weighted: cur repeated to [width, k, T], times the weights
        rows = same_shape(op("REPEAT", F32, (width, k, t), rows), "MUL", weights)
    gate: Tensor | None = None
    if r.fused_gate_up:  # ffn_moe_gate_up: gate and up its halves' views
        gate_up = op("MUL_MAT_ID", F32, (2 * ff, k, t), "ffn_gate_up_exps", rows, picked)
        gate, up = (view(gate_up, (ff, k, t), gate_up.nb[1:3], i * ff * gate_up.nb[0]) for i in (0, 1))
    else:
        up = expert_bias(r, op("MUL_MAT_ID", F32, (ff, k, t), "ffn_up_exps", rows, picked), "ffn_up_exps", picked)
        if r.gated:
            gate = op("MUL_MAT_ID", F32, (ff, k, t), "ffn_gate_exps", rows, picked)
            gate = expert_bias(r, gate, "ffn_gate_exps", picked)
    down = op("MUL_MAT_ID", F32, (width, k, t), "ffn_down_exps", expert_activation(r, gate, up), picked)
    down = expert_bias(r, down, "ffn_down_exps", picked)
    if r.down_scale:  # build_lora_mm_id: the scales [1, E] repeated over the tokens, the picked experts' rows
        down = same_shape(down, "MUL", get_rows(op("REPEAT", F32, (1, b.n_expert, t)), picked, 1))
    experts = gf.expand(down if r.weight_before_ffn else same_shape(down, "MUL", weights))  # ffn_moe_weighted
    views = [gf.expand(view(experts, (width, t), (experts.nb[2],), i * experts.nb[1])) for i in range(k)]
    out = views[0]
    for x in views[1:]:
        out = gf.expand(same_shape(out, "ADD", x))
    return out if k > 1 else cont(out)  # one expert: made contiguous


def routed_experts(gf: Graph, b: GraphLayer, cur: Tensor, logits: Tensor | None = None) -> Tensor:
    """The routed experts as a builder calls build_moe_ffn: over the block's normed input (`logits`: the router's,
    where the builder computes them, probs_in); or in the builder's latent (nemotron-h's ffn_latent_down / _up,
    kimi-k3's build_latent_moe: ffn_routed_down / _norm / _up), the router's logits from the input (probs_in), the
    experts over its projection, their output RMS-normed where the builder norms it, projected back."""
    r = b.routing
    if not r.latent:
        return build_moe_ffn(gf, b, cur, logits)
    logits = mul_mat("ffn_gate_inp", cur, b.n_expert)
    down, up = r.latent_weights
    out = build_moe_ffn(gf, b, mul_mat(down, cur, r.latent), logits)
    if r.latent_norm:  # build_norm(..., il), RMS: its "norm" pinned, the weight in place
        out = same_shape(pinned(same_shape(out, "RMS_NORM"), NORM_PIN), "MUL", "ffn_routed_norm")
    return mul_mat(up, out, cur.ne[0])
