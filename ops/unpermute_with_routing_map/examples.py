"""Consistent example inputs for MoeTokenUnpermuteWithRoutingMap, as the forward permute produces them.

A softmax-like router scores every (token, expert); probs are those softmax values.
* not padded: every token keeps its topK best experts (routing_map has topK ones per row); the permuted
  rows are the (token, expert) pairs expert-major (expert ascending, then token ascending), and
  sorted_indices[t * topK + k] is the permuted row of token t's k-th selected expert (ascending expert).
* padded: every expert keeps its `capacity` best-scoring tokens (ascending token id in the expert's block);
  sorted_indices[e * capacity + j] is the token of permuted row e * capacity + j.

source: moe/moe_token_unpermute_with_routing_map/docs/aclnnMoeTokenUnpermuteWithRoutingMap.md
(the arguments' meaning) @ 25fb6b92890d.
"""
from __future__ import annotations

import numpy as np

from tiling.common import as_dtype

from ..common.half_cast import cast
from ..common.routing import padded_columns, skewed_scores, softmax


def _router(rng, tokens: int, experts: int) -> np.ndarray:
    """(tokens, experts) float32 softmax of random logits."""
    logits = rng.standard_normal((tokens, experts), dtype=np.float32)
    logits -= logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=1, keepdims=True)
    return logits


def _uniform(rng, shape, dtype, values: bool) -> np.ndarray:
    if not values:
        return np.zeros(shape, dtype=dtype)
    out = rng.random(shape, dtype=np.float32)
    out *= 4
    out -= 2
    return cast(out, dtype)


def make_inputs(tokens: int, hidden: int, experts: int, topk: int | None = None, capacity: int | None = None,
                dtype="bf16", probs_dtype=None, drop_and_pad: bool = False, with_probs: bool = True,
                routing_map_dtype="bool", seed: int = 0, values: bool = True, zipf: float | None = None) -> dict:
    """Arrays in aclnn argument order: permuted_tokens, sorted_indices, routing_map, probs, padded_mode,
    restore_shape. routing_map and probs are None without probs; restore_shape is always (tokens, hidden).

    `values=False` leaves permuted_tokens zero (the routing is real): enough to tile a case and compile its
    kernel cheaply for large shapes.

    `zipf`: the router's logits are Zipf-skewed (ops.common.routing); probs are their softmax. Padded and
    skewed, each token routes to its `topk` (default 2) best experts and each expert's block is the forward's
    drop-and-pad column (its best `capacity` routed tokens, then padding tokens), marked in routing_map."""
    rng = np.random.default_rng(seed)
    dtype = as_dtype(dtype)
    probs_dtype = as_dtype(probs_dtype) if probs_dtype is not None else dtype
    scores = _router(rng, tokens, experts) if zipf is None else skewed_scores(rng, tokens, experts, zipf)
    if drop_and_pad and zipf is not None:
        capacity = int(capacity if capacity is not None else max(1, tokens // 2))
        _, columns = padded_columns(scores, int(topk if topk is not None else min(2, experts)), capacity)
        routing = np.zeros((tokens, experts), dtype=bool)
        routing[columns.reshape(-1), np.repeat(np.arange(experts), capacity)] = True
        sorted_indices = columns.reshape(-1).astype(np.int32)
        rows = experts * capacity
    elif drop_and_pad:
        capacity = int(capacity if capacity is not None else max(1, tokens // 2))
        # each expert's `capacity` best tokens, in ascending token order
        best = np.argsort(-scores, axis=0, kind="stable")[:capacity].T          # (experts, capacity)
        best = np.sort(best, axis=1)
        routing = np.zeros((tokens, experts), dtype=bool)
        routing[best.reshape(-1), np.repeat(np.arange(experts), capacity)] = True
        sorted_indices = best.reshape(-1).astype(np.int32)
        rows = experts * capacity
    else:
        topk = int(topk if topk is not None else min(2, experts))
        chosen = np.argsort(-scores, axis=1, kind="stable")[:, :topk]
        routing = np.zeros((tokens, experts), dtype=bool)
        routing[np.arange(tokens)[:, None], chosen] = True
        row_of = (np.cumsum(routing.T.reshape(-1)) - 1).reshape(experts, tokens).T    # expert-major numbering
        selected = np.sort(chosen, axis=1)
        sorted_indices = row_of[np.arange(tokens)[:, None], selected].reshape(-1).astype(np.int32)
        rows = tokens * topk
    args = dict(permuted_tokens=_uniform(rng, (rows, hidden), dtype, values), sorted_indices=sorted_indices,
                routing_map=None, probs=None, padded_mode=drop_and_pad, restore_shape=(tokens, hidden))
    if with_probs:
        args["routing_map"] = routing.astype(as_dtype(routing_map_dtype))
        args["probs"] = cast(scores if zipf is None else softmax(scores), probs_dtype)
    return args
