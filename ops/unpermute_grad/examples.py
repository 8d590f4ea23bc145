"""Consistent example inputs for MoeTokenUnpermuteGrad, as a forward MoeTokenUnpermute would have seen them:
sorted_indices[t * topK + k] is the permuted row of token t's k-th expert (a permutation of N * topK rows),
permuted_tokens holds those N * topK rows, probs the routing weights in [0, 1).

source: moe/moe_token_unpermute_grad/docs/aclnnMoeTokenUnpermuteGrad.md (the arguments' meaning) @ 25fb6b92890d.
"""
from __future__ import annotations

import numpy as np

from tiling.common import as_dtype

from ..common.half_cast import cast
from ..common.routing import skewed_scores, top_experts
from ..permute.examples import forward_sorted_indices


def _uniform(rng, low: float, high: float, shape, dtype, values: bool) -> np.ndarray:
    """Uniform values in [low, high) drawn in float32, then cast; zeros for values=False."""
    if not values:
        return np.zeros(shape, dtype=dtype)
    out = rng.random(shape, dtype=np.float32)
    out *= high - low
    out += low
    return cast(out, dtype)


def _skewed_layout(rng, tokens: int, k: int, experts: int | None, zipf: float) -> np.ndarray:
    if experts is None or experts < k:
        raise ValueError(f"skewed routing needs at least topK={k} experts, got {experts}")
    return forward_sorted_indices(top_experts(skewed_scores(rng, tokens, experts, zipf), k))


def make_inputs(tokens: int, hidden: int, *, topk: int = 2, dtype="bf16", probs_dtype=None, with_probs: bool = True,
                seed: int = 0, values: bool = True, experts: int | None = None, zipf: float | None = None) -> dict:
    """Arrays in aclnn argument order: permuted_tokens (N*topK, H), unpermuted_tokens_grad (N, H),
    sorted_indices int32 (N*topK,), probs (N, topK) or None, padded_mode False. Without probs topK is 1
    (the op's rule) whatever `topk` says. `values=False` leaves the float tensors zero (enough to tile a
    case and compile its kernel at no cost).

    Uniform routing (`zipf` None) draws sorted_indices as a random permutation of the rows. With a Zipf exponent
    each token draws its topK distinct experts from `experts` skewed ones (ops.common.routing) and sorted_indices
    is the layout the forward permute leaves for them (rows grouped by expert), so the skew shows in the order
    the rows are read."""
    rng = np.random.default_rng(seed)
    dtype = as_dtype(dtype)
    k = topk if with_probs else 1
    probs_dtype = as_dtype(probs_dtype) if probs_dtype is not None else dtype
    rows = tokens * k
    return dict(
        permuted_tokens=_uniform(rng, -2, 2, (rows, hidden), dtype, values),
        unpermuted_tokens_grad=_uniform(rng, -2, 2, (tokens, hidden), dtype, values),
        sorted_indices=rng.permutation(rows).astype(np.int32) if zipf is None else _skewed_layout(rng, tokens, k,
                                                                                                    experts, zipf),
        probs=_uniform(rng, 0, 1, (tokens, k), probs_dtype, values) if with_probs else None,
        padded_mode=False,
    )
