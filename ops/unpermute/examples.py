"""Consistent example inputs for MoeTokenUnpermute, as MoeTokenPermute (V1) leaves them.

A softmax-like router picks `topk` distinct experts per token; the forward permute sorts the N*K
(token, slot) pairs by expert (stable), so permuted row r holds the r-th pair in that order and
sorted_indices[t*K + k] is the permuted row of token t's slot k. With `num_out_tokens` < N*K the forward
keeps only the first rows (R = num_out_tokens): the slots beyond point at rows >= R, which the unpermute
skips. probs are the router's scores of the chosen experts.

source: moe/moe_token_unpermute/docs/aclnnMoeTokenUnpermute.md (the arguments' meaning) @ 25fb6b92890d.
"""
from __future__ import annotations

import numpy as np

from tiling.common import as_dtype

from ..common.half_cast import cast
from ..common.routing import skewed_scores
from ..permute.examples import forward_sorted_indices


def make_inputs(tokens: int, hidden: int, experts: int = 8, topk: int = 2, *, dtype="bf16", probs_dtype=None,
                with_probs: bool = True, num_out_tokens: int | None = None, seed: int = 0,
                values: bool = True, zipf: float | None = None) -> dict:
    """Arrays in aclnn argument order: permuted_tokens (R, H), sorted_indices (N*K,) int32, probs (N, K) or
    None, padded_mode False, restore_shape None. Without probs K is 1 (the op's rule), whatever `topk` says.
    `values=False` leaves permuted_tokens zero (cheap for large shapes). `zipf`: the router's logits are
    Zipf-skewed (ops.common.routing); None: standard normal."""
    rng = np.random.default_rng(seed)
    dtype = as_dtype(dtype)
    probs_dtype = as_dtype(probs_dtype) if probs_dtype is not None else dtype
    k = topk if with_probs else 1
    if k > experts:
        raise ValueError(f"topk {k} needs at least as many experts, got {experts}")
    logits = rng.standard_normal((tokens, experts)).astype(np.float32) if zipf is None \
        else skewed_scores(rng, tokens, experts, zipf)
    scores = np.exp(logits - logits.max(axis=1, keepdims=True))
    scores /= scores.sum(axis=1, keepdims=True)
    chosen = np.argsort(-scores, axis=1, kind="stable")[:, :k]                # (N, K) expert ids
    sorted_indices = forward_sorted_indices(chosen)                            # flat slot -> permuted row
    rows = tokens * k if num_out_tokens is None else int(num_out_tokens)
    if values:
        permuted = cast(rng.random((rows, hidden), dtype=np.float32) * 4 - 2, dtype)
    else:
        permuted = np.zeros((rows, hidden), dtype=dtype)
    probs = cast(np.take_along_axis(scores, chosen, axis=1), probs_dtype) if with_probs else None
    return dict(permuted_tokens=permuted, sorted_indices=sorted_indices, probs=probs, padded_mode=False,
                restore_shape=None)
