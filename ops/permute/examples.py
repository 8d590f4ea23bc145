"""Example inputs for MoeTokenPermute: routed tokens with topK distinct experts each, as a router produces."""
from __future__ import annotations

import numpy as np

from tiling.common import as_dtype

from ..common.half_cast import cast
from ..common.routing import expert_weights, skewed_scores, top_experts


def make_inputs(tokens: int, hidden: int, experts: int, *, topk: int = 2, dtype="bf16", indices_dtype="int32",
                distinct: bool = True, one_dim: bool = False, seed: int = 0,
                zipf: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(tokens (N, H), indices (N, topK) or (N,)): each token picks topK experts (distinct unless asked);
    uniformly, or with Zipf-skewed expert popularity of exponent `zipf` (ops.common.routing)."""
    rng = np.random.default_rng(seed)
    dtype = as_dtype(dtype)
    if np.issubdtype(dtype, np.integer):
        x = rng.integers(-100, 100, (tokens, hidden)).astype(dtype)
    else:
        x = cast(rng.uniform(-5, 5, (tokens, hidden)), dtype)
    if zipf is not None and distinct and topk <= experts:
        idx = top_experts(skewed_scores(rng, tokens, experts, zipf), topk)
    elif zipf is not None:
        idx = rng.choice(experts, size=(tokens, topk), p=expert_weights(rng, experts, zipf))
    elif distinct and topk <= experts:
        idx = np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk]
    else:
        idx = rng.integers(0, experts, (tokens, topk))
    idx = idx.astype(as_dtype(indices_dtype))
    return x, (idx[:, 0] if one_dim else idx)


def forward_sorted_indices(expert_ids: np.ndarray) -> np.ndarray:
    """sortedIndicesOut of MoeTokenPermute for small ids: the permuted row of every flat slot (slots ordered by
    expert id, stably), as int32. Lets the gradient and unpermute examples lay out inputs as the forward does."""
    flat = np.asarray(expert_ids).reshape(-1)
    order = np.argsort(flat, kind="stable")                  # permuted row -> flat slot
    sorted_indices = np.empty(flat.size, dtype=np.int32)
    sorted_indices[order] = np.arange(flat.size, dtype=np.int32)
    return sorted_indices
