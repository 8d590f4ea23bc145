"""A whole MoE layer, forward and backward, through the simulated operators, checked.

The layer (tokens x (N, H), router weights w_router (H, E), one weight matrix per expert w_experts (E, H, H)):

    s      = softmax(x @ w_router)                      router probabilities (N, E)
    mask   = top-k of each row of s                      (N, E) bool, ties to the lower expert id
    p      = s * mask                                    routed probabilities (no renormalisation)
    y[t]   = sum over routed e of p[t, e] * (x[t] @ w_experts[e])
    loss   = sum(y * upstream)                           upstream: a fixed random (N, H) gradient

Three styles move the tokens to their experts and back:

* "topk": MoeTokenPermute (indices (N, K)) -> expert matmuls -> MoeTokenUnpermute with probs (N, K);
  backward MoeTokenUnpermuteGrad -> expert matmuls transposed -> MoeTokenPermuteGrad.
* "routing_map": MoeTokenPermuteWithRoutingMap (mask, dense probs) -> experts ->
  MoeTokenUnpermuteWithRoutingMap; backward MoeTokenUnpermuteWithRoutingMapGrad ->
  MoeTokenPermuteWithRoutingMapGrad.
* "routing_map_pad": the same with drop-and-pad: every expert takes exactly `capacity` rows, its lowest routed
  token ids first; routed pairs beyond the capacity are dropped (they contribute nothing, also in the
  reference), and empty rows are filled with unrouted tokens whose probability is 0.

The expert matmuls and the router's softmax backward are NumPy (they are not in this operator family); every
permute / unpermute and gradient is a simulated kernel run of the operator's aclnn. `moe_layer` compares:

* the output and all three gradients (x, w_router, w_experts) with a dense NumPy layer in float64 that never
  permutes anything (so a wrong index in any simulated operator shows up);
* the simulated gradients with central finite differences of the float64 layer's loss along random directions
  (a directional derivative per parameter and direction), where the perturbation does not change the routing.

Each operator call is listed with its tiling key and block dim (of the operator's own l0 kernel), the work per
pipe summed over every simulated kernel it launched, and how many of its steps were simulated kernels and how
many host steps (l0 operators of other CANN libraries, such as Sort or InplaceIndexAdd, run in NumPy).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from tiling import get_soc

from ._framework import recorded_runs

STYLES = ("topk", "routing_map", "routing_map_pad")
DTYPES = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(ml_dtypes.bfloat16)}
# relative error allowed against the float64 layer: fp32 rounding of H-long dot products and K-term sums, or
# the storage rounding of the half-precision tensors the operators move (2^-11 / 2^-8 per value, a few values)
TOLERANCE = {"fp32": 1e-4, "fp16": 4e-3, "bf16": 2e-2}
FD_TOLERANCE = {"fp32": 2e-3, "fp16": 1e-2, "bf16": 5e-2}
# relative rounding of one simulated gradient element (fp32 sums of a few terms; the half-precision tensors the
# operators move): a directional derivative may be off by that much of the sum of |gradient * direction|
GRAD_ROUNDING = {"fp32": 1e-6, "fp16": 2e-3, "bf16": 1e-2}
FD_DIRECTIONS = 2          # random directions per parameter
FD_STEP = 1e-4             # relative to the parameter's RMS; float64 central differences are exact to ~1e-8 there


@dataclass(frozen=True)
class OpRun:
    """One simulated operator call: its aclnn, tiling key, block dim and the work of all its kernels per pipe."""
    op: str
    tiling_key: int | None
    block_dim: int
    mte2_bytes: int
    mte3_bytes: int
    vec_elem_ops: int
    scalar_ops: int
    sync_events: int
    wall_ms: float
    kernels: int          # simulated kernel launches (a composite aclnn may run several, or none)
    host_steps: int       # l0 operators of other libraries, run as NumPy host steps
    # the call's RunReport / CompositeReport, for front ends that list its steps (`ascend-sim moe-layer --json`)
    report: object = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, executor) -> "OpRun":
        rep = executor.report
        t = rep.total
        tiling = executor.tiling
        steps = getattr(rep, "steps", None)
        kernels = 1 if steps is None else sum(s.kind == "kernel" for s in steps)
        host = 0 if steps is None else len(steps) - kernels
        return cls(executor.op, None if tiling is None else tiling.tiling_key,
                   0 if tiling is None else tiling.block_dim, t.mte2_bytes, t.mte3_bytes, t.vec_elem_ops,
                   t.scalar_gm_reads + t.scalar_gm_writes + t.scalar_ub_ops, t.events + t.pipe_barriers + t.sync_all,
                   rep.wall_time_s * 1e3, kernels, host, rep)


@dataclass(frozen=True)
class FdCheck:
    """A directional derivative: analytic (simulated gradient . v) against the central difference of the
    float64 loss along v. ok: |analytic - numeric| <= FD_TOLERANCE * max(|analytic|, |numeric|) +
    GRAD_ROUNDING * sum(|gradient * v|)."""
    param: str
    analytic: float
    numeric: float
    rel_err: float
    ok: bool


@dataclass
class MoeLayerResult:
    """What `moe_layer` ran and found. Arrays are float32 (simulated) / float64 (reference)."""
    style: str
    soc: str
    dtype: str
    shape: dict
    output: np.ndarray
    grads: dict
    reference_output: np.ndarray
    reference_grads: dict
    errors: dict                     # relative max error per checked quantity ("y", "x", "w_router", "w_experts")
    tolerance: float
    fd_checks: list = field(default_factory=list)
    runs: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(e <= self.tolerance for e in self.errors.values()) and all(f.ok for f in self.fd_checks)

    def __str__(self) -> str:
        s = self.shape
        lines = [f"MoE layer, style {self.style}, {self.dtype}, on {self.soc}: tokens {s['tokens']}, hidden "
                 f"{s['hidden']}, experts {s['experts']}, topK {s['topk']}"
                 + (f", capacity {s['capacity']}" if s.get("capacity") else ""),
                 f"  {'operator':<40} {'key':>5} {'blocks':>6} {'MTE2 B':>10} {'MTE3 B':>10} {'V elem-ops':>11} "
                 f"{'S ops':>7} {'sync':>6} {'ms':>8}  steps"]
        for r in self.runs:
            lines.append(f"  {r.op:<40} {'-' if r.tiling_key is None else r.tiling_key:>5} {r.block_dim:>6} "
                         f"{r.mte2_bytes:>10,d} {r.mte3_bytes:>10,d} {r.vec_elem_ops:>11,d} {r.scalar_ops:>7,d} "
                         f"{r.sync_events:>6,d} {r.wall_ms:>8.2f}  {r.kernels} kernel"
                         + ("s" if r.kernels != 1 else "") + (f" + {r.host_steps} host" if r.host_steps else ""))
        lines.append("  against the dense float64 layer (max |error| / max |reference|, tolerance "
                     f"{self.tolerance:g}): " + ", ".join(f"{k} {v:.2e}" for k, v in self.errors.items()))
        for f in self.fd_checks:
            lines.append(f"  d loss / d {f.param:<9} along a random direction: simulated {f.analytic:+.6e}, "
                         f"finite difference {f.numeric:+.6e}, rel. error {f.rel_err:.1e} "
                         f"{'ok' if f.ok else 'FAILED'}")
        lines.append(f"  {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)


@dataclass(frozen=True)
class LayerParams:
    """x (N, H), w_router (H, E), w_experts (E, H, H), upstream (N, H): float64."""
    x: np.ndarray
    w_router: np.ndarray
    w_experts: np.ndarray
    upstream: np.ndarray


def make_params(tokens: int, hidden: int, experts: int, seed: int = 0) -> LayerParams:
    """Random layer parameters, scaled so activations stay O(1) and router logits spread the experts."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, hidden))
    w_router = rng.standard_normal((hidden, experts)) * (2.0 / np.sqrt(hidden))
    w_experts = rng.standard_normal((experts, hidden, hidden)) / np.sqrt(hidden)
    upstream = rng.standard_normal((tokens, hidden))
    return LayerParams(x, w_router, w_experts, upstream)


# --- the dense reference ------------------------------------------------------------------------------------
def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def top_k(s: np.ndarray, k: int) -> np.ndarray:
    """(N, k) expert ids of each row's k largest probabilities, largest first, ties to the lower id."""
    return np.argsort(-s, axis=1, kind="stable")[:, :k]


def routing_mask(indices: np.ndarray, experts: int) -> np.ndarray:
    mask = np.zeros((indices.shape[0], experts), dtype=bool)
    np.put_along_axis(mask, indices, True, axis=1)
    return mask


def kept_mask(mask: np.ndarray, capacity: int | None) -> np.ndarray:
    """Routed pairs that reach their expert: all of them, or with a capacity the lowest token ids per expert."""
    if capacity is None:
        return mask
    rank = np.cumsum(mask, axis=0) - 1
    return mask & (rank < capacity)


def _route(p: LayerParams, topk: int, capacity: int | None):
    """(router probabilities s, routing mask, pairs that reach their expert) of the layer's parameters."""
    s = softmax(p.x @ p.w_router)
    mask = routing_mask(top_k(s, topk), s.shape[1])
    return s, mask, kept_mask(mask, capacity)


def reference_layer(p: LayerParams, topk: int, capacity: int | None):
    """Dense float64 forward and analytic gradients: (y, loss, grads, mask)."""
    s, mask, kept = _route(p, topk, capacity)
    h = np.einsum("nh,ehk->enk", p.x, p.w_experts)                # every expert on every token
    weight = (s * kept).T[:, :, None]                              # (E, N, 1)
    y = (weight * h).sum(axis=0)
    dy = p.upstream
    dp = np.einsum("enk,nk->ne", h, dy) * kept                    # dloss / dp, zero where p is not used
    dlogits = s * (dp - (s * dp).sum(axis=1, keepdims=True))
    dx = np.einsum("en,nk,ehk->nh", weight[:, :, 0], dy, p.w_experts) + dlogits @ p.w_router.T
    dw_experts = np.einsum("nh,en,nk->ehk", p.x, weight[:, :, 0], dy)
    grads = {"x": dx, "w_router": p.x.T @ dlogits, "w_experts": dw_experts}
    return y, float((y * dy).sum()), grads, mask


def _loss(p: LayerParams, topk: int, capacity: int | None) -> tuple[float, np.ndarray]:
    """The float64 loss alone (for finite differences) and the routing mask it used."""
    s, mask, kept = _route(p, topk, capacity)
    y = np.einsum("ne,nh,ehk->nk", s * kept, p.x, p.w_experts)
    return float((y * p.upstream).sum()), mask


# --- the simulated layer ------------------------------------------------------------------------------------
def _experts_forward(rows: np.ndarray, counts, w: np.ndarray) -> np.ndarray:
    """Expert e's matmul on its contiguous block of permuted rows (fp32)."""
    out = np.empty_like(rows)
    start = 0
    for e, n in enumerate(counts):
        out[start:start + n] = rows[start:start + n] @ w[e]
        start += n
    return out


def _experts_backward(rows: np.ndarray, d_out: np.ndarray, counts, w: np.ndarray):
    """(d rows, d w) of the expert matmuls (fp32)."""
    d_rows = np.empty_like(d_out)
    d_w = np.empty_like(w)
    start = 0
    for e, n in enumerate(counts):
        blk = slice(start, start + n)
        d_rows[blk] = d_out[blk] @ w[e].T
        d_w[e] = rows[blk].T @ d_out[blk]
        start += n
    return d_rows, d_w


def _f32(a) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def simulated_layer(p: LayerParams, style: str, topk: int, capacity: int | None, soc, dtype: np.dtype):
    """Forward and backward with the simulated operators: (y, grads, runs). Router and experts in fp32 NumPy;
    the operators move `dtype` tensors."""
    import ops  # the operators package imports this module

    x, wr, we, dy = (a.astype(np.float32) for a in (p.x, p.w_router, p.w_experts, p.upstream))
    n, e_num = x.shape[0], wr.shape[1]
    s = softmax(x @ wr)
    idx = top_k(s, topk)
    mask = routing_mask(idx, e_num)
    xd, dyd = x.astype(dtype), dy.astype(dtype)
    with recorded_runs() as log:
        if style == "topk":
            probs = np.take_along_axis(s, idx, axis=1).astype(dtype)
            permuted, sorted_indices, _ = ops.moe_token_permute(xd, idx.astype(np.int32), soc=soc)
            counts = np.bincount(idx.ravel(), minlength=e_num)
            rows = _f32(permuted)
            expert_out = _experts_forward(rows, counts, we).astype(dtype)
            y = ops.moe_token_unpermute(expert_out, sorted_indices, probs, soc=soc)
            d_out, d_probs = ops.moe_token_unpermute_grad(expert_out, dyd, sorted_indices, probs, soc=soc)
            d_rows, d_we = _experts_backward(rows, _f32(d_out), counts, we)
            dx_tokens = ops.moe_token_permute_grad(d_rows.astype(dtype), sorted_indices, topk, soc=soc)
            dp = np.zeros((n, e_num), dtype=np.float32)
            np.put_along_axis(dp, idx, _f32(d_probs), axis=1)
        elif style in ("routing_map", "routing_map_pad"):
            pad = style == "routing_map_pad"
            probs = (s * mask).astype(dtype)
            slots = capacity * e_num if pad else n * topk
            permuted, _, sorted_indices = ops.moe_token_permute_with_routing_map(xd, mask, probs, slots, pad, soc=soc)
            counts = [capacity] * e_num if pad else mask.sum(axis=0)
            rows = _f32(permuted)
            expert_out = _experts_forward(rows, counts, we).astype(dtype)
            y, out_index, permute_token_id, _ = ops.moe_token_unpermute_with_routing_map(
                expert_out, sorted_indices, mask, probs, pad, soc=soc)
            if not pad:      # the non-pad forward leaves these unwritten: slot t * K + k is token t's k-th expert
                out_index = sorted_indices
                permute_token_id = np.repeat(np.arange(n, dtype=np.int32), topk)
            d_out, dp = ops.moe_token_unpermute_with_routing_map_grad(dyd, out_index, permute_token_id, mask,
                                                                      expert_out, probs, pad, soc=soc)
            d_rows, d_we = _experts_backward(rows, _f32(d_out), counts, we)
            dx_tokens, _ = ops.moe_token_permute_with_routing_map_grad(d_rows.astype(dtype), None, sorted_indices,
                                                                       mask, e_num, n, pad, soc=soc)
            dp = _f32(dp)
        else:
            raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
    dp *= mask        # p = s * mask: pairs outside the routing are constants 0, whatever a kernel wrote there
    dlogits = s * (dp - (s * dp).sum(axis=1, keepdims=True))
    grads = {"x": _f32(dx_tokens) + dlogits @ wr.T, "w_router": x.T @ dlogits, "w_experts": d_we}
    return _f32(y), grads, [OpRun.of(r.executor) for r in log]


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-30)
    return float(np.abs(got.astype(np.float64) - want).max(initial=0.0)) / scale


def _finite_differences(p: LayerParams, grads: dict, topk: int, capacity: int | None, rng, tol: float,
                        rounding: float) -> list:
    """Directional derivatives of the float64 loss, FD_DIRECTIONS per parameter; a direction whose step changes
    the routing (a top-k tie crossed) is redrawn."""
    _, base_mask = _loss(p, topk, capacity)
    checks = []
    for name in ("x", "w_router", "w_experts"):
        value = getattr(p, name)
        step = FD_STEP * float(np.sqrt(np.mean(value ** 2)))
        done = 0
        for _attempt in range(8 * FD_DIRECTIONS):
            if done == FD_DIRECTIONS:
                break
            v = rng.standard_normal(value.shape)
            plus = LayerParams(**{**p.__dict__, name: value + step * v})
            minus = LayerParams(**{**p.__dict__, name: value - step * v})
            (lp, mp), (lm, mm) = _loss(plus, topk, capacity), _loss(minus, topk, capacity)
            if not (np.array_equal(mp, base_mask) and np.array_equal(mm, base_mask)):
                continue
            numeric = (lp - lm) / (2 * step)
            terms = grads[name].astype(np.float64) * v
            analytic = float(terms.sum())
            diff = abs(analytic - numeric)
            rel = diff / max(abs(numeric), abs(analytic), 1e-12)
            # the rounding of the simulated gradient enters a dot product through the sum of its terms'
            # magnitudes, not through its value: where the terms cancel that part dominates
            bound = tol * max(abs(numeric), abs(analytic)) + rounding * float(np.abs(terms).sum())
            checks.append(FdCheck(name, analytic, numeric, rel, diff <= bound))
            done += 1
    return checks


def default_capacity(tokens: int, experts: int, topk: int) -> int:
    """Rows per expert in drop-and-pad mode when none is given: the average load, so both drops and fills occur."""
    return max(1, -(-tokens * topk // experts))


class LayerArgumentError(ValueError):
    """A moe_layer argument outside its domain: `argument` is its name, `value` what was given."""

    def __init__(self, argument: str, value, rule: str):
        self.argument = argument
        self.value = value
        super().__init__(f"{argument} {rule}, got {value!r}")


def _whole(name: str, value, low: int) -> int:
    """value as an int if it is a whole number >= low (Python or NumPy integer, not bool; a float, even 2.0,
    inf or NaN, is not one), else LayerArgumentError naming the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        rule = "must be a positive whole number" if low == 1 else f"must be a whole number >= {low}"
        raise LayerArgumentError(name, value, rule)
    return int(value)


def check_arguments(style: str, dtype: str, tokens: int, hidden: int, experts: int, topk: int,
                    capacity: int | None, seed: int = 0) -> int | None:
    """Validate moe_layer's arguments (LayerArgumentError, a ValueError, naming the argument); returns the
    drop-and-pad capacity (ceil(N * K / E) when not given), or None for the other styles."""
    if style not in STYLES:
        raise LayerArgumentError("style", style, f"must be one of {', '.join(STYLES)}")
    if dtype not in DTYPES:
        raise LayerArgumentError("dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    for name, v in (("tokens", tokens), ("hidden", hidden), ("experts", experts), ("topk", topk)):
        _whole(name, v, 1)
    _whole("seed", seed, 0)
    if topk > experts:
        raise LayerArgumentError("topk", topk, f"must not exceed experts ({experts})")
    if capacity is not None:
        _whole("capacity", capacity, 1)
        # every expert takes exactly `capacity` distinct tokens in drop-and-pad mode
        if capacity > tokens:
            raise LayerArgumentError("capacity", capacity, f"must not exceed tokens ({tokens})")
    if style != "routing_map_pad":
        return None
    return default_capacity(tokens, experts, topk) if capacity is None else int(capacity)


def largest_arrays_bytes(tokens: int, hidden: int, experts: int) -> int:
    """Bytes of the layer's largest float64 arrays: the parameters (x, upstream (N, H), w_router (H, E),
    w_experts (E, H, H)) and the dense reference's every-expert-on-every-token activations (E, N, H)."""
    return 8 * (2 * tokens * hidden + hidden * experts + experts * hidden * hidden + experts * tokens * hidden)


def moe_layer(style: str = "topk", *, tokens: int = 64, hidden: int = 64, experts: int = 8, topk: int = 2,
              capacity: int | None = None, dtype: str = "fp32", soc="ascend910b", seed: int = 0,
              finite_differences: bool = True) -> MoeLayerResult:
    """Run one MoE layer forward and backward through the simulated operators and check it.

    Args:
        style: "topk", "routing_map" or "routing_map_pad" (see the module docstring).
        tokens, hidden, experts, topk: N, H, E, K (K <= E).
        capacity: rows per expert for "routing_map_pad" (default: ceil(N * K / E)); ignored otherwise.
        dtype: "fp32", "fp16" or "bf16": the dtype of the tensors the operators move. The router and the
            expert matmuls are fp32 NumPy; the tolerances grow with the storage rounding.
        soc: chip profile name or tiling.SocProfile.
        seed: seed of the random parameters and FD directions.
        finite_differences: also check the gradients against central differences.

    Returns a MoeLayerResult; `.passed` is the verdict, `str(result)` the report.
    """
    cap = check_arguments(style, dtype, tokens, hidden, experts, topk, capacity, seed)
    profile = get_soc(soc)
    params = make_params(tokens, hidden, experts, seed)
    y_ref, _, grads_ref, _ = reference_layer(params, topk, cap)
    y, grads, runs = simulated_layer(params, style, topk, cap, profile, DTYPES[dtype])
    errors = {"y": _rel_err(y, y_ref)}
    errors.update({k: _rel_err(grads[k], grads_ref[k]) for k in ("x", "w_router", "w_experts")})
    fd = []
    if finite_differences:
        fd = _finite_differences(params, grads, topk, cap, np.random.default_rng(seed + 1), FD_TOLERANCE[dtype],
                                 GRAD_ROUNDING[dtype])
    shape = {"tokens": tokens, "hidden": hidden, "experts": experts, "topk": topk, "capacity": cap}
    return MoeLayerResult(style, profile.name, dtype, shape, y, grads, y_ref, grads_ref, errors, TOLERANCE[dtype],
                          fd, runs)
