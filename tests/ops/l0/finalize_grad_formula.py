"""The grad_scales check of MoeFinalizeRoutingV2Grad that shares no code with its kernels or their goldens (the
template without a cut H and the cut-H one both use it)."""
from __future__ import annotations

import numpy as np

from ...sum_bound import assert_within_sum_bound


def formula_check(gsc, grad_y, idx, expanded_x, scales, dim0):
    """grad_scales against the float64 dot products, sharing no code with the kernels, `row_sum`, `_block_sum` or
    LANE_TREE: H products, each rounded once in fp32, then H - 1 fp32 additions in some order (m = H), then the
    rounding to S."""
    k = scales.shape[1]
    hidden = grad_y.shape[1]
    x64 = expanded_x.reshape(-1, hidden).astype(np.float64)
    g64 = grad_y.astype(np.float64)
    ok = np.flatnonzero((idx >= 0) & (idx < dim0))
    terms = g64[ok // k] * x64[idx[ok]]
    got = gsc.reshape(-1)[ok]
    finite = np.isfinite(got.astype(np.float64)) & np.isfinite(terms).all(axis=1)
    assert_within_sum_bound(got[finite], terms.sum(axis=1)[finite], np.abs(terms).sum(axis=1)[finite], hidden,
                            scales.dtype, what="grad_scales vs the exact dot products")
