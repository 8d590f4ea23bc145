"""NumPy golden of MoeTokenUnpermuteGrad, written from the op's formulas (facts §6.a) in the kernel's fp32 order.

source: moe/moe_token_unpermute_grad/docs/aclnnMoeTokenUnpermuteGrad.md (formulas),
op_kernel/moe_token_unpermute_grad_prob_not_none.h and moe/moe_finalize_routing_v2_grad/op_kernel/arch35/ (the summation
orders) @ 25fb6b92890d.

Shapes: G = unpermuted_tokens_grad (N, H); S = sorted_indices (N * K,) int32; probs (N, K) or None
(K = 1 then); P = permuted_tokens (M, H) with M = len(S) = numOutTokens (the tiling's len(sorted_indices)).

* permuted_tokens_grad[S[j]] = G[j // K] * probs_flat[j] for every slot j whose S[j] < M: the product of
  the two values widened to fp32, rounded half to even to the token dtype (G[j] itself without probs).
  Rows no slot writes are 0 here (the kernel leaves them alone; the friendly call zero-fills).
* probs_grad[t, k] = sum_h P[S[j], h] * G[t, h] (j = t * K + k) in the probs dtype, from fp32 products:
  - membase (910B / 910_93): each hidden piece of `hidden_piece` elements (the tiling's hiddenSizeAlign)
    is summed in ReduceSumFunc's order with the inclusive `>=` tiers, and the piece sums are added in
    piece order to 0.0. A slot with S[j] >= M sums a zero row (0 * G).
  - arch35 (Ascend 950, l0op::MoeFinalizeRoutingV2Grad): the whole row is summed in the arch35 order
    (see reduce_sum_rows_arch35); a slot with S[j] < 0 or S[j] >= M gets exactly 0 and writes no row.

Outside the golden's domain (ValueError "outside golden domain: ..."): a negative index on membase (the
kernel addresses GM before the tensor) and S[j] in [P rows, M) when P has fewer than M rows. When several
slots name one row the hardware result depends on core timing; the golden keeps the last slot's row.
"""
from __future__ import annotations

import numpy as np

from ops.common.half_cast import cast, to_f32
from ops.common.reduce_sum_golden import reduce_sum_rows, tree_lanes

VL_FP32 = 64


def _f32(a) -> np.ndarray:
    return to_f32(a)


def reduce_sum_rows_arch35(x: np.ndarray) -> np.ndarray:
    """Row sums of x (rows, L) fp32 in the order of the arch35 CalcGradScaleVF (l0op::MoeFinalizeRoutingV2Grad):

    L <= 64: a 64-lane pairwise tree, the unused lanes +0 (an inactive lane of ReduceSum counts as +0, so an
    all -0.0 row shorter than 64 sums to +0). Otherwise, with Q the largest power of two <= L and C = ceil(L / 64):
    every lane of the first C - Q / 64 head chunks takes one Add of the tail chunk Q / 64 chunks on (+0 where the
    tail has run out), each 64-lane chunk of the head becomes one pairwise-tree sum, the Q / 64 chunk sums are
    folded in halves of 64 while more than 64 remain, and a last 64-lane pairwise tree (+0 lanes) sums them.
    """
    rows, length = x.shape
    x = np.asarray(x, dtype=np.float32)
    lanes = np.zeros((rows, VL_FP32), dtype=np.float32)     # inactive lanes count as +0
    if length <= VL_FP32:
        lanes[:, :length] = x
        return tree_lanes(lanes)
    q = 1 << (length.bit_length() - 1)
    paired = (-(-length // VL_FP32) - q // VL_FP32) * VL_FP32      # head lanes that take a tail Add
    head = x[:, :q].copy()
    tail = np.zeros((rows, paired), dtype=np.float32)
    tail[:, : length - q] = x[:, q:]
    head[:, :paired] += tail
    sums = tree_lanes(head.reshape(rows, q // VL_FP32, VL_FP32))   # (rows, Q / 64)
    while sums.shape[1] > VL_FP32:
        half = sums.shape[1] // 2
        sums = sums[:, :half] + sums[:, half:]
    lanes[:, : sums.shape[1]] = sums
    return tree_lanes(lanes)


def _outside(message: str):
    raise ValueError(f"outside golden domain: {message}")


def golden(permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs=None, *, hidden_piece: int | None = None,
           arch35: bool = False):
    """(permuted_tokens_grad (M, H) in G's dtype, probs_grad (N, K) in the probs dtype or None).

    hidden_piece: the kernel's hidden split (tiling hiddenSizeAlign; None = one piece). arch35: the
    Ascend 950 result (hidden_piece is then ignored: the 950 kernel sums whole rows)."""
    g = np.asarray(unpermuted_tokens_grad)
    s = np.asarray(sorted_indices).astype(np.int64).reshape(-1)
    n, h = g.shape
    m = s.size
    k = 1 if probs is None else np.asarray(probs).shape[1]
    out = np.zeros((m, h), dtype=g.dtype)
    slots = np.arange(n * k)
    idx = s[: n * k]
    if not arch35 and (idx < 0).any():
        j = int(np.argmax(idx < 0))
        _outside(f"sorted_indices[{j}] = {int(idx[j])} is negative: the membase kernel addresses GM before the tensor")
    written = (idx >= 0) & (idx < m)
    tokens = slots // k
    if probs is None:
        out[idx[written]] = g[tokens[written]]
        return out, None

    pr = np.asarray(probs)
    w = _f32(pr).reshape(-1)
    g32 = _f32(g)
    out[idx[written]] = cast(g32[tokens[written]] * w[written][:, None], g.dtype)

    p = np.asarray(permuted_tokens)
    if written.any() and idx[written].max() >= p.shape[0]:
        _outside(f"an index reaches row {int(idx[written].max())} of permuted_tokens, which has {p.shape[0]} rows")
    prows = np.zeros((n * k, h), dtype=np.float32)      # a zero row where the kernel zero-fills
    prows[written] = _f32(p[idx[written]])
    prod = prows * g32[tokens]
    if arch35:
        grad = np.zeros(n * k, dtype=np.float32)
        grad[written] = reduce_sum_rows_arch35(prod[written])
    else:
        piece = hidden_piece if hidden_piece else h
        grad = np.zeros(n * k, dtype=np.float32)       # Duplicate(0) of the accumulator
        for a in range(0, h, piece):
            grad = grad + reduce_sum_rows(prod[:, a: a + piece], strict=False)
    return out, grad.reshape(n, k).astype(pr.dtype)
