"""Independent NumPy golden of MoeTokenUnpermuteWithRoutingMap, written from the formulas (facts §9.a), not from
the kernels.

source: moe/moe_token_unpermute_with_routing_map/docs/aclnnMoeTokenUnpermuteWithRoutingMap.md (formulas),
op_kernel/*_not_pad.h / *_pad.h and op_host/op_api/aclnn_moe_token_unpermute_with_routing_map.cpp (which slots are kept,
the chain's order) @ 25fb6b92890d.

Not padded (topK = R / tokens):
    permute_probs = probs[routing_map == 1] in token-major (row-major) order, packed: entry j is the j-th one
    unpermuted[t] = cast( sum_{k < topK, kept} w[t*topK + k] * P[S[t*topK + k]] ),   kept: 0 <= S < R and w != 0
  w = permute_probs (1 without probs), read at the slot's own position t*topK + k whatever the row's count of
  ones: a row with fewer than topK ones shifts every later token onto other tokens' probs, and positions past
  the ones were never written by the masked select (on the chip whatever the l0's buffer held; 0 here, the
  simulator's buffer). The sum is fp32 with k ascending, the first kept term taken as it is (zero when no term
  is kept); cast = round half to even. out_index / permute_token_id are not written (None).
Padded (capacity = L / E):
    permute_probs[i] = probs[S[i], i / capacity]                (i < E * capacity; later slots 0 here)
    (permute_token_id, out_index) = stable ascending sort of S  (values, positions)
    unpermuted[t] = cast( 0 + sum over slots i with S[i] == t, ascending i, of source[i] )
  source = P * permute_probs[:, None] rounded to the token dtype (fp32 when BF16 tokens have FP32 probs), or P
  without probs; the sum is fp32 (an fp32 accumulator stays fp32).
Routing maps are 0 / 1 (the device selects bytes equal to 1).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ops.common.half_cast import cast, to_f32

_F32 = np.dtype(np.float32)
_HALF = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))


def _f64(a: np.ndarray) -> np.ndarray:
    """a as float64, exactly; a half array through float32 (exact), not through the library's scalar loop."""
    return to_f32(a).astype(np.float64) if a.dtype in _HALF else a.astype(np.float64)


def _permute_probs_not_pad(routing_map, probs):
    flat_map = np.asarray(routing_map).reshape(-1).view(np.uint8) if np.asarray(routing_map).dtype.itemsize == 1 \
        else np.asarray(routing_map).reshape(-1)
    return np.asarray(probs).reshape(-1)[flat_map == 1]


def golden_not_pad(permuted_tokens, sorted_indices, routing_map, probs, restore_shape):
    """(unpermuted (N, H), permute_probs (L,) or None) of the non-padded mode."""
    p = np.asarray(permuted_tokens)
    rows, hidden = p.shape
    s = np.asarray(sorted_indices).astype(np.int64)
    if probs is not None:
        tokens = probs.shape[0]
        top_k = rows // tokens
        pp = _permute_probs_not_pad(routing_map, probs)
        if pp.size < s.size:        # the l0's permuteProbs holds len(S) entries; the select fills the first ones
            pp = np.concatenate([pp, np.zeros(s.size - pp.size, dtype=pp.dtype)])
        weights = np.zeros(tokens * top_k, dtype=_F32)
        head = pp[: tokens * top_k]
        weights[: head.size] = head.astype(np.float64).astype(_F32)
        weights = weights.reshape(tokens, top_k)
    else:
        top_k = rows // restore_shape[0]
        tokens = s.size // top_k
        pp = None
        weights = np.ones((tokens, top_k), dtype=_F32)
    idx = s[: tokens * top_k].reshape(tokens, top_k)
    keep = (idx >= 0) & (idx < rows) & (weights != 0)
    x = to_f32(p)
    # slot 0 initialises the accumulator (a skipped slot 0 leaves +0.0); later kept slots are added
    acc = np.zeros((tokens, hidden), dtype=_F32)
    for k in range(top_k):
        rows_k = np.flatnonzero(keep[:, k])
        term = x[idx[rows_k, k]] * weights[rows_k, k][:, None] if probs is not None else x[idx[rows_k, k]]
        acc[rows_k] = term if k == 0 else acc[rows_k] + term
    return cast(acc, p.dtype), pp


def golden_pad(permuted_tokens, sorted_indices, probs, out_shape):
    """(unpermuted out_shape, out_index, permute_token_id, permute_probs or None) of the padded mode."""
    p = np.asarray(permuted_tokens)
    s = np.asarray(sorted_indices)
    pp = None
    source = p
    mixed = probs is not None and probs.dtype == _F32 and p.dtype == np.dtype(ml_dtypes.bfloat16)
    if probs is not None:
        experts = probs.shape[1]
        capacity = s.size // experts
        pp = np.zeros(s.size, dtype=probs.dtype)
        i = np.arange(experts * capacity)
        pp[i] = probs[s[i], i // capacity]
        # the fp64 product of two <= 24-bit significands is exact: one rounding to fp32 is the fp32 product, and
        # for 2-byte tokens (exact in fp32) one rounding to the token dtype
        product = (_f64(p) * _f64(pp)[:, None]).astype(_F32)
        source = product if mixed else cast(product, p.dtype)
    order = np.argsort(s.view(np.float32), kind="stable").astype(np.int32)
    values = s[order]
    acc = np.zeros(out_shape, dtype=_F32)
    src = to_f32(source)
    # rows of one token in ascending slot order: a sequential fp32 sum per token, vectorised over tokens by
    # walking the k-th occurrence of each token id
    rank = np.zeros(s.size, dtype=np.int64)
    if s.size:
        starts = np.r_[0, np.flatnonzero(np.diff(values)) + 1]
        run_id = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, s.size]))
        rank = np.arange(s.size) - starts[run_id]
    for r in range(int(rank.max()) + 1 if s.size else 0):
        at = np.flatnonzero(rank == r)
        acc[values[at]] = acc[values[at]] + src[order[at]]
    return cast(acc, p.dtype), order, values, pp


def golden(permuted_tokens, sorted_indices, routing_map=None, probs=None, padded_mode=False, restore_shape=None,
           out_shape=None):
    """(unpermuted, out_index or None, permute_token_id or None, permute_probs or None) for the given inputs.
    out_shape: the caller's unpermuted shape in padded mode (default restore_shape, else (probs.dim0, H))."""
    if not padded_mode:
        out, pp = golden_not_pad(permuted_tokens, sorted_indices, routing_map, probs, restore_shape)
        return out, None, None, pp
    if out_shape is None:
        h = np.asarray(permuted_tokens).shape[1]
        out_shape = tuple(restore_shape) if restore_shape is not None else (probs.shape[0], h)
    return golden_pad(permuted_tokens, sorted_indices, probs, out_shape)
