"""NumPy golden of building block R (ReduceSumFunc): the fp32 row sum behind every probs gradient, in the
kernels' addition order (written from the tree description of facts §1.6, independently of the simulated
vector instructions in ops/common/reduce_sum.py).

Order for a row of length L: fold the upper half onto the lower half (halves rounded up to 8 elements)
until the valid prefix is at most twice the tier size T (4096, 512 or 64), fold it onto its first T
elements, sum each 8-element block as a pairwise tree, keep doing that until 8 values remain, then a
pairwise tree over 64 lanes (the unused ones +0). L below the smallest tier: one 64-lane pairwise tree.

The tier of a row of exactly 4096, 512 or 64 elements depends on the copy of the function: strict
(`>`, MoeTokenUnpermuteWithRoutingMapGrad @ 25fb6b92890d) or inclusive (`>=`, MoeTokenUnpermuteGrad). At 64 both
give the same value; at 512 and 4096 they differ (the inclusive copy block-reduces the row directly, the
strict one folds it down to the next tier first).
"""
from __future__ import annotations

import numpy as np


def tree_lanes(x: np.ndarray) -> np.ndarray:
    """Pairwise tree over the last axis (length a power of two): ((x0+x1)+(x2+x3))+..."""
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


def _fold(buf: np.ndarray, length: int, threshold: int, offset: int) -> None:
    """Halve the valid prefix (halves rounded up to 8 elements) until <= threshold, then fold onto `offset`."""
    def half_of(n):   # AlignUp(CeilDiv(n, 2), 8)
        return ((n + 1) // 2 + 7) // 8 * 8
    total = length
    half = half_of(total)
    while total > threshold:
        buf[:, : total - half] += buf[:, half:total]
        total, half = half, half_of(half)
    buf[:, : total - offset] += buf[:, offset:total]


def _tier(length: int, strict: bool) -> int:
    for target in (4096, 512, 64):
        if (length > target) if strict else (length >= target):
            return target
    return 0


def reduce_sum_rows(x: np.ndarray, strict: bool = True) -> np.ndarray:
    """ReduceSumFunc of every row of x (rows, L) in fp32, as the kernel orders the additions.
    strict=True: the `>` tiers of the routing-map gradient; strict=False: the `>=` tiers of
    MoeTokenUnpermuteGrad."""
    rows, length = x.shape
    if length == 0:
        return np.zeros(rows, dtype=np.float32)
    target = _tier(length, strict)
    if target == 0:
        lanes = np.zeros((rows, 64), dtype=np.float32)
        lanes[:, :length] = x
        return tree_lanes(lanes)
    buf = np.array(x, dtype=np.float32, copy=True)
    _fold(buf, length, 2 * target, target)
    blocks = buf[:, :target]
    while blocks.shape[1] > 8:   # BlockReduceSum: each 8-element block to one value
        blocks = tree_lanes(blocks.reshape(rows, -1, 8))
    lanes = np.zeros((rows, 64), dtype=np.float32)
    lanes[:, :8] = blocks
    return tree_lanes(lanes)
