"""Example inputs for MoeTokenPermuteWithRoutingMap, as a MoE router produces them: a softmax over random
logits per token, the topK largest experts routed (exactly topK ones per row, or 1..topK with
full_topk=False for non-topK routing); probs are the softmax values. Pad mode routes the same way and
sets num_out_tokens = capacity * experts."""
from __future__ import annotations

import numpy as np

from tiling.common import as_dtype

from ..common.half_cast import cast
from ..common.routing import skewed_scores


def make_inputs(tokens: int, hidden: int, experts: int, topk: int | None = None, capacity: int | None = None,
                dtype="bf16", probs_dtype=None, drop_and_pad: bool = False, with_probs: bool = True,
                routing_map_dtype="bool", seed: int = 0, values: bool = True, *, full_topk: bool = True,
                zipf: float | None = None) -> dict:
    """Arrays in aclnn argument order: tokens (N, H), routing_map (N, E), probs (N, E) or None, num_out_tokens,
    drop_and_pad. `values=False` gives zero tokens / probs with the same routing (to tile or compile a case).
    `zipf`: the router's logits are Zipf-skewed (ops.common.routing); None: standard normal."""
    rng = np.random.default_rng(seed)
    dtype = as_dtype(dtype)
    probs_dtype = as_dtype(probs_dtype) if probs_dtype is not None else dtype
    topk = int(topk if topk is not None else min(2, experts))
    logits = rng.standard_normal((tokens, experts), dtype=np.float32) if zipf is None \
        else skewed_scores(rng, tokens, experts, zipf)
    soft = np.exp(logits - logits.max(axis=1, keepdims=True))
    soft /= soft.sum(axis=1, keepdims=True)
    counts = np.full(tokens, topk) if full_topk else rng.integers(1, max(topk, 1) + 1, size=tokens)
    rank = np.argsort(np.argsort(-soft, axis=1, kind="stable"), axis=1)     # 0 = the largest prob
    routing = rank < counts[:, None]
    if drop_and_pad:
        capacity = int(capacity if capacity is not None else max(1, tokens * topk // max(experts, 1)))
        num_out_tokens = capacity * experts
    else:
        num_out_tokens = tokens * topk
    if values:
        x = cast(rng.standard_normal((tokens, hidden), dtype=np.float32), dtype)
        probs = cast(soft, probs_dtype)
    else:
        x = np.zeros((tokens, hidden), dtype=dtype)
        probs = np.zeros((tokens, experts), dtype=probs_dtype)
    return dict(tokens=x, routing_map=routing.astype(as_dtype(routing_map_dtype)),
                probs=probs if with_probs else None, num_out_tokens=num_out_tokens, drop_and_pad=drop_and_pad)
