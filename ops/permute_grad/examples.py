"""Example inputs for MoeTokenPermuteGrad laid out as the forward MoeTokenPermute leaves them.

Each token picks `topk` distinct experts; the forward orders the N*topK slots by expert (stable) and
keeps the first `num_out_tokens` rows (0 = all). sorted_indices[t*topK + k] is the permuted row of token
t's k-th slot; rows >= R = num_out_tokens were dropped by the forward and are skipped by the gradient.
"""
from __future__ import annotations

import numpy as np

from tiling.common import as_dtype

from ..common.half_cast import cast
from ..common.routing import skewed_scores, top_experts
from ..permute.examples import forward_sorted_indices


def make_inputs(tokens: int, hidden: int, topk: int = 2, *, experts: int | None = None, dtype="bf16",
                num_out_tokens: int = 0, seed: int = 0, zipf: float | None = None) -> dict:
    """Arrays in aclnn argument order: permuted_output_grad (R, H) uniform in [-2, 2), sorted_indices
    (tokens * topk,) int32 (a permutation of the slots), num_topk = topk, padded_mode False. `zipf`: the routing
    skew's exponent (None: uniform; ops.common.routing)."""
    rng = np.random.default_rng(seed)
    experts = max(topk, 4) if experts is None else experts
    if zipf is None:
        expert_ids = np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk].reshape(-1)
    else:
        expert_ids = top_experts(skewed_scores(rng, tokens, experts, zipf), topk).reshape(-1)
    sorted_indices = forward_sorted_indices(expert_ids)
    total = tokens * topk
    rows = total if num_out_tokens <= 0 else min(num_out_tokens, total)
    grad = cast(rng.random((rows, hidden), dtype=np.float32) * 4 - 2, as_dtype(dtype))
    return dict(permuted_output_grad=grad, sorted_indices=sorted_indices, num_topk=topk, padded_mode=False)
