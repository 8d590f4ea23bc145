"""Consistent example inputs for MoeTokenUnpermuteWithRoutingMapGrad, as a forward pass would produce them.

* no dropAndPad: every token routes to 1..topK distinct experts (exactly topK unless
  `full_topk` is False); the forward permute lists (token, expert) pairs expert-major, so
  out_index[t * topK + r] is the permuted row of token t's r-th expert (ascending) and -1
  for unused slots; permute_token_id[t * topK + r] = t.
* dropAndPad: every expert takes `capacity` distinct tokens; L is that expert-major token
  list and (permute_token_id, out_index) = (values, positions) of its stable ascending sort.
"""
from __future__ import annotations

import numpy as np

from tiling.common import as_dtype

from ..common.half_cast import cast
from ..common.routing import padded_columns, skewed_scores


def _uniform(rng, low: float, high: float, shape, dtype, values: bool = True) -> np.ndarray:
    """Uniform values in [low, high) as `dtype`, drawn in float32 (half the memory traffic of float64).
    Zeros, neither drawn nor touched, for values=False."""
    if not values:
        return np.zeros(shape, dtype=dtype)
    out = rng.random(shape, dtype=np.float32)
    out *= high - low
    out += low
    return cast(out, dtype)


def make_inputs(tokens: int, hidden: int, experts: int, *, topk: int | None = None, capacity: int | None = None,
                dtype="bf16", probs_dtype=None, drop_and_pad: bool = False, with_probs: bool = True,
                routing_map_dtype="bool", full_topk: bool = True, seed: int = 0, values: bool = True,
                zipf: float | None = None) -> dict:
    """Arrays in aclnn argument order: unpermuted_tokens_grad, out_index, permute_token_id, routing_map,
    permuted_tokens, probs, drop_and_pad (probs / routing_map / permuted_tokens None without probs).

    `values=False` leaves the floating-point tensors zero (the routing is real): enough to tile a case and
    compile its kernel, at no cost for large shapes.

    `zipf`: Zipf-skewed routing (ops.common.routing): each token's experts are its best by skewed scores, and
    with dropAndPad each expert's token list is the forward's drop-and-pad column for tokens routed to their
    `topk` (default 2) best experts (best `capacity` routed tokens, then padding tokens)."""
    rng = np.random.default_rng(seed)
    dtype = as_dtype(dtype)
    probs_dtype = as_dtype(probs_dtype) if probs_dtype is not None else dtype
    routing = np.zeros((tokens, experts), dtype=bool)
    if drop_and_pad:
        capacity = int(capacity if capacity is not None else max(1, tokens // 2))
        if zipf is None:
            # each expert's tokens: the first `capacity` of a random permutation, ascending
            picks = np.argsort(rng.random((experts, tokens)), axis=1)[:, :capacity]
            picks.sort(axis=1)
        else:
            picks = padded_columns(skewed_scores(rng, tokens, experts, zipf),
                                   int(topk if topk is not None else min(2, experts)), capacity)[1]
        expert_major = picks.reshape(-1)
        routing[expert_major, np.repeat(np.arange(experts), capacity)] = True
        order = np.argsort(expert_major, kind="stable")
        permute_token_id = expert_major[order].astype(np.int32)
        out_index = order.astype(np.int32)
        rows = experts * capacity
    else:
        topk = int(topk if topk is not None else min(2, experts))
        counts = np.full(tokens, topk) if full_topk else rng.integers(1, topk + 1, size=tokens)
        if zipf is None:
            chosen = np.argsort(rng.random((tokens, experts)), axis=1)
        else:
            chosen = np.argsort(-skewed_scores(rng, tokens, experts, zipf), axis=1, kind="stable")
        rank = np.argsort(chosen, axis=1)           # rank of each expert in the token's (skewed) random order
        routing = rank < counts[:, None]
        # permuted row of every routed (token, expert) pair, numbered expert-major
        row_of = np.cumsum(routing.T.reshape(-1)).reshape(experts, tokens).T - 1
        slots = np.full((tokens, topk), -1, dtype=np.int64)
        sel = np.argsort(~routing, axis=1, kind="stable")[:, :topk]   # selected experts ascending
        valid = np.arange(topk)[None, :] < counts[:, None]
        slots[valid] = row_of[np.arange(tokens)[:, None], sel][valid]
        out_index = slots.reshape(-1).astype(np.int32)
        permute_token_id = np.repeat(np.arange(tokens, dtype=np.int32), topk)
        rows = tokens * topk
    grad = _uniform(rng, -2, 2, (tokens, hidden), dtype, values)
    args = dict(unpermuted_tokens_grad=grad, out_index=out_index, permute_token_id=permute_token_id,
                routing_map=None, permuted_tokens=None, probs=None, drop_and_pad=drop_and_pad)
    if with_probs:
        args["routing_map"] = routing.astype(as_dtype(routing_map_dtype))
        args["permuted_tokens"] = _uniform(rng, -2, 2, (rows, hidden), dtype, values)
        args["probs"] = _uniform(rng, 0, 1, (tokens, experts), probs_dtype, values)
    return args
