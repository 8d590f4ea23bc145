"""Consistent example inputs for MoeTokenPermuteWithRoutingMapGrad, as the forward
MoeTokenPermuteWithRoutingMap would have produced its outputs' layout.

A softmax-like router scores every (token, expert) pair.
* no dropAndPad: each token routes to its `topk` best experts (1..topk of them when `full_topk` is
  False: the real op's non-topK routing); M = tokens * topk permuted rows; sorted_indices[t*topk + r]
  is the permuted row (expert-major numbering) of token t's r-th expert in ascending expert order, -1
  for a slot the token does not use; the gradients of rows beyond the routed count are zero.
* dropAndPad: each token routes to its `topk` best experts; each expert keeps at most `capacity` of
  its tokens (the best scored); sorted_indices[e*capacity + c] lists the expert's kept tokens
  ascending, then (if it kept fewer than capacity) its other tokens ascending, as the forward's
  stable descending sort of the routing-map column does; M = experts * capacity.
"""
from __future__ import annotations

import numpy as np

from tiling.common import as_dtype

from ..common.half_cast import cast
from ..common.routing import skewed_scores


def _uniform(rng, low: float, high: float, shape, dtype, values: bool) -> np.ndarray:
    if not values:
        return np.zeros(shape, dtype=dtype)
    out = rng.random(shape, dtype=np.float32)
    out *= high - low
    out += low
    return cast(out, dtype)


def _router_rank(rng, tokens: int, experts: int, zipf: float | None = None) -> np.ndarray:
    """rank[t, e] = position of expert e in token t's descending softmax scores (0 = best); Zipf-skewed logits
    for a `zipf` exponent (ops.common.routing)."""
    logits = rng.standard_normal((tokens, experts)) if zipf is None else skewed_scores(rng, tokens, experts, zipf)
    scores = np.exp(logits - logits.max(axis=1, keepdims=True))
    scores /= scores.sum(axis=1, keepdims=True)
    order = np.argsort(-scores, axis=1, kind="stable")
    return np.argsort(order, axis=1), scores


def make_inputs(tokens: int, hidden: int, experts: int, topk: int | None = None, capacity: int | None = None,
                dtype="bf16", probs_dtype=None, drop_and_pad: bool = False, with_probs: bool = True,
                routing_map_dtype="bool", seed: int = 0, values: bool = True, full_topk: bool = True,
                zipf: float | None = None) -> dict:
    """Arrays in aclnn argument order: permuted_token_output_grad (M, H), permuted_probs_output_grad (M,) or
    None, sorted_indices (M,) int32, routing_map (N, E) or None (None only without probs), num_experts,
    tokens_num, drop_and_pad. `values=False` leaves the floating-point tensors zero. `zipf`: the routing skew's
    exponent (None: uniform)."""
    rng = np.random.default_rng(seed)
    dtype = as_dtype(dtype)
    probs_dtype = as_dtype(probs_dtype) if probs_dtype is not None else dtype
    topk = int(topk if topk is not None else min(2, experts))
    rank, scores = _router_rank(rng, tokens, experts, zipf)
    counts = np.full(tokens, topk) if full_topk else rng.integers(1, topk + 1, size=tokens)
    routing = rank < counts[:, None]
    if drop_and_pad:
        capacity = int(capacity if capacity is not None else max(1, tokens * topk // max(experts, 1)))
        sorted_indices = np.empty(experts * capacity, dtype=np.int32)
        for e in range(experts):
            routed = np.flatnonzero(routing[:, e])
            if routed.size > capacity:                       # the expert keeps its best-scored tokens
                best = routed[np.argsort(-scores[routed, e], kind="stable")[:capacity]]
                routing[np.setdiff1d(routed, best), e] = False
            column = np.concatenate([np.flatnonzero(routing[:, e]), np.flatnonzero(~routing[:, e])])
            sorted_indices[e * capacity:(e + 1) * capacity] = column[:capacity]
        rows = experts * capacity
    else:
        row_of = np.cumsum(routing.T.reshape(-1)).reshape(experts, tokens).T - 1   # expert-major numbering
        sel = np.argsort(~routing, axis=1, kind="stable")[:, :topk]                # chosen experts ascending
        slots = np.full((tokens, topk), -1, dtype=np.int64)
        valid = np.arange(topk)[None, :] < counts[:, None]
        slots[valid] = row_of[np.arange(tokens)[:, None], sel][valid]
        sorted_indices = slots.reshape(-1).astype(np.int32)
        rows = tokens * topk
    routed_rows = int(routing.sum()) if not drop_and_pad else rows
    grad = _uniform(rng, -2, 2, (rows, hidden), dtype, values)
    grad[routed_rows:] = 0
    args = dict(permuted_token_output_grad=grad, permuted_probs_output_grad=None, sorted_indices=sorted_indices,
                routing_map=routing.astype(as_dtype(routing_map_dtype)), num_experts=experts, tokens_num=tokens,
                drop_and_pad=drop_and_pad)
    if with_probs:
        probs_grad = _uniform(rng, -1, 1, (rows,), probs_dtype, values)
        probs_grad[routed_rows:] = 0
        args["permuted_probs_output_grad"] = probs_grad
    return args
