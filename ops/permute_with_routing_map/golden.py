"""NumPy goldens of MoeTokenPermuteWithRoutingMap, written from the formulas (facts §7.a) and the ST
executor's torch reference, not from the kernel: pure index arithmetic, so every output is bit-exact.

Non-pad: the selected (expert, token) pairs listed expert-major give the permuted rows; a token's r-th
selected expert (ascending expert order) is its slot t * topK + r, which sortedIndices maps to the row.
With exactly topK ones per token this equals a stable argsort of the expert-major token list; with fewer
ones (non-topK routing) the unused slots hold -1 and rows at and beyond the number of ones are not written.
Pad: per expert, the routed tokens in ascending order, then the others, the first `capacity` of them.

source (the definition): moe/moe_token_permute_with_routing_map/docs/aclnnMoeTokenPermuteWithRoutingMap.md and
moe/moe_token_permute_with_routing_map/tests/st/aclnnMoeTokenPermuteWithRoutingMap/
executor_aclnnMoeTokenPermuteWithRoutingMap.py @ 25fb6b92890d.
"""
from __future__ import annotations

import numpy as np


def permute_with_routing_map_golden(tokens: np.ndarray, routing_map: np.ndarray, probs: np.ndarray | None,
                                    num_out_tokens: int, drop_and_pad: bool = False):
    """(permute_tokens, permute_probs or None, sorted_indices int32, rows_written).

    tokens (N, H) any dtype; routing_map (N, E) bool / int8 with 0 / 1 entries; probs (N, E) or None.
    Non-pad: outputs have N * topK rows (topK = num_out_tokens // N); rows >= rows_written are zero here and
    left unwritten by the kernel. Pad: E * capacity rows (capacity = num_out_tokens // E), all written.
    """
    n, e = routing_map.shape
    selected = routing_map.astype(bool)
    if drop_and_pad:
        cap = num_out_tokens // e if e else 0
        # for each expert column: routed tokens first, each group in ascending token order
        order = np.argsort(~selected, axis=0, kind="stable")[:cap]          # (cap, E)
        sorted_indices = np.ascontiguousarray(order.T).reshape(-1).astype(np.int32)
        permute_tokens = tokens[sorted_indices]
        permute_probs = None
        if probs is not None:
            experts = np.repeat(np.arange(e), cap)
            permute_probs = probs[sorted_indices, experts]
        return permute_tokens, permute_probs, sorted_indices, e * cap
    top_k = num_out_tokens // n
    out_rows = n * top_k
    expert_of, token_of = np.nonzero(selected.T)           # expert-major, tokens ascending inside an expert
    actual = token_of.size
    # rank of each pair among its token's pairs in ascending expert order = slot within the token
    order = np.lexsort((expert_of, token_of))                # the pairs token-major
    token_sorted = token_of[order]
    rank = np.empty(actual, dtype=np.int64)
    rank[order] = np.arange(actual) - np.searchsorted(token_sorted, token_sorted)
    sorted_indices = np.full(out_rows, -1, dtype=np.int32)
    sorted_indices[token_of * top_k + rank] = np.arange(actual, dtype=np.int32)
    permute_tokens = np.zeros((out_rows, *tokens.shape[1:]), dtype=tokens.dtype)
    permute_tokens[:actual] = tokens[token_of]
    permute_probs = None
    if probs is not None:
        permute_probs = np.zeros(out_rows, dtype=probs.dtype)
        permute_probs[:actual] = probs[token_of, expert_of]
    return permute_tokens, permute_probs, sorted_indices, actual
