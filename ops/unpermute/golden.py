"""Independent NumPy golden of MoeTokenUnpermute, written from the formulas (facts §5.a), not from the kernel.

source: moe/moe_token_unpermute/docs/aclnnMoeTokenUnpermute.md (formulas), op_kernel/moe_token_unpermute.h and
moe/moe_finalize_routing_v2/op_kernel/arch35/ (which slots are kept, the fp32 order) @ 25fb6b92890d.

    out[t] = cast( sum_{k < K, kept} w[t, k] * P[S[t*K + k]] )          t < N

P (R, H) permuted tokens, S (N*K,) sorted indices, w = probs (N, K) (1 without probs, K = 1).
A2 / A3 (MoeTokenUnpermute's own kernel): kept = S < R and w != 0; the fp32 sum runs over k in order:
slot 0's term initialises it (+0.0 when slot 0 is not kept), every later kept term is added, so a sum of
-0.0 terms stays -0.0 only when slot 0 is kept. Negative indices are outside the golden's domain (the kernel
reads before the tensor).
Ascend 950 (MoeFinalizeRoutingV2, dropPadMode 2): kept = S != -1 and S < R (zero probs are multiplied, so
a NaN / Inf row under a zero prob gives NaN); the fp32 sum starts from +0.0. Other negative indices are
outside the domain, and so is a skipped slot without probs where the tiling picks the K-H full-load template
(that kernel adds whatever its buffer holds for it: see ops.l0.moe_finalize_routing_v2).
Products are fp32 products of the widened operands; the cast is round half to even.
"""
from __future__ import annotations

import numpy as np

from ops.common.half_cast import cast, to_f32

_F32 = np.dtype(np.float32)


def golden(permuted_tokens, sorted_indices, probs=None, *, arch35: bool = False) -> np.ndarray:
    """(N, H) in the tokens' dtype; arch35 selects the Ascend 950 rules (see the module docstring)."""
    p = np.asarray(permuted_tokens)
    rows, hidden = p.shape
    s = np.asarray(sorted_indices).astype(np.int64).reshape(-1)
    if probs is None:
        tokens, top_k = s.size, 1
        w = np.ones((tokens, 1), dtype=_F32)
    else:
        tokens, top_k = probs.shape
        w = to_f32(probs)
    idx = s[: tokens * top_k].reshape(tokens, top_k)
    bad = idx < (-1 if arch35 else 0)
    if bad.any():
        raise ValueError(f"outside golden domain: index {int(idx[bad][0])} is read before permuted_tokens")
    keep = idx < rows
    if arch35:
        keep &= idx != -1
    elif probs is not None:
        keep &= w != 0
    x = to_f32(p)
    out = np.zeros((tokens, hidden), dtype=_F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(top_k):
            sel = np.flatnonzero(keep[:, k])
            term = x[idx[sel, k]] * w[sel, k][:, None]
            if k == 0 and not arch35:
                out[sel] = term                     # slot 0 is taken as it is (no +0.0 added to it)
            else:
                out[sel] = out[sel] + term
    return cast(out, p.dtype)
