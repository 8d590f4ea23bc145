"""NumPy golden of MoeTokenUnpermuteWithRoutingMapGrad, written from the op's formulas.

It follows the kernel's fp32 path so results compare bit for bit:

* products G * prob and permutedTokens * G in fp32 (both operands widened exactly),
* each hidden piece (of `hidden_piece` elements, the tiling's hiddenSizeAlign) reduced with
  ReduceSumFunc's order: fold halves to <= 2x a block size (4096 / 512 / 64), BlockReduceSum
  of 8-element blocks as pairwise trees, a final 64-lane pairwise tree;
* pieces combined per slot: pairwise tree of the partial sums (dropAndPad) or a running
  fp32 sum 0 + p0 + p1 + ... (no dropAndPad),
* fp32 -> fp16/bf16 with round-half-even.

Rows of the permuted-token gradient that no slot writes are 0 (the friendly call zero-fills).
"""
from __future__ import annotations

import numpy as np

ROW_CHUNK = 2048   # slots per vectorised step (bounds the fp32 temporaries)


def _to_f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def _tree_lanes(x: np.ndarray) -> np.ndarray:
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


def reduce_sum_rows(x: np.ndarray) -> np.ndarray:
    """ReduceSumFunc of every row of x (rows, L) in fp32, as the kernel orders the additions."""
    rows, length = x.shape
    if length == 0:
        return np.zeros(rows, dtype=np.float32)
    if length <= 64:
        lanes = np.zeros((rows, 64), dtype=np.float32)
        lanes[:, :length] = x
        return _tree_lanes(lanes)
    target = 4096 if length > 4096 else 512 if length > 512 else 64
    buf = np.array(x, dtype=np.float32, copy=True)
    _fold(buf, length, 2 * target, target)
    blocks = buf[:, :target]
    while blocks.shape[1] > 8:   # BlockReduceSum: each 8-element block to one value
        blocks = _tree_lanes(blocks.reshape(rows, -1, 8))
    lanes = np.zeros((rows, 64), dtype=np.float32)
    lanes[:, :8] = blocks
    return _tree_lanes(lanes)


def _piece_bounds(hidden: int, piece: int):
    piece = hidden if not piece or piece <= 0 else piece
    return [(s, min(s + piece, hidden)) for s in range(0, hidden, piece)] or [(0, 0)]


def _cast_out(x: np.ndarray, dtype) -> np.ndarray:
    return x.astype(dtype)


def golden(unpermuted_tokens_grad, out_index, permute_token_id, routing_map=None, permuted_tokens=None, probs=None,
           drop_and_pad=False, *, hidden_piece: int | None = None):
    """(permuted_tokens_grad, probs_grad or None) for valid inputs (indices in range, at most topK
    experts per routing-map row). `hidden_piece` is the kernel's hidden split (tiling hiddenSizeAlign)."""
    g = np.asarray(unpermuted_tokens_grad)
    o = np.asarray(out_index).astype(np.int64)
    i = np.asarray(permute_token_id).astype(np.int64)
    n, h = g.shape
    m = o.shape[0]
    out = np.zeros((m, h), dtype=g.dtype)
    if probs is None:
        if drop_and_pad:
            out[o] = g[i]
        else:
            k = m // n if n else 0
            slots = np.arange(m)
            tokens = slots // k if k else np.zeros(m, dtype=np.int64)
            valid = o >= 0
            out[o[valid]] = g[tokens[valid]]
        return out, None

    pr = np.asarray(probs)
    e = pr.shape[1]
    pieces = _piece_bounds(h, hidden_piece or h)
    probs_grad = np.zeros(pr.shape, dtype=np.float32)
    g32 = _to_f32(g)
    p32 = _to_f32(permuted_tokens)
    pr32 = _to_f32(pr)

    if drop_and_pad:
        capacity = m // e if e else 0
        tokens, rows = i, o
        experts = rows // capacity if capacity else np.zeros(m, dtype=np.int64)
        slot_prob = pr32[tokens, experts]
        slot_written = np.ones(m, dtype=bool)
        combine = "tree"
    else:
        k = m // n if n else 0
        rm = np.asarray(routing_map) != 0
        tokens = np.repeat(np.arange(n), k)
        rank = np.tile(np.arange(k), n)
        # the r-th selected expert of each token (ascending); slots past a token's count get prob 0, no address
        order = np.argsort(~rm, axis=1, kind="stable")[:, :k] if k else np.zeros((n, 0), dtype=np.int64)
        counts = rm.sum(axis=1)
        has_expert = rank < counts[tokens]
        experts = order[tokens, rank] if k else np.zeros(0, dtype=np.int64)
        slot_prob = np.where(has_expert, pr32[tokens, experts], np.float32(0))
        rows = o
        slot_written = has_expert
        combine = "sequential"

    slot_grad = np.zeros(m, dtype=np.float32)
    for start in range(0, m, ROW_CHUNK):
        sl = slice(start, min(start + ROW_CHUNK, m))
        r, t = rows[sl], tokens[sl]
        live = r >= 0 if not drop_and_pad else np.ones(r.shape, dtype=bool)
        gt = g32[t[live]]
        pp = p32[r[live]]
        out[r[live]] = _cast_out(gt * slot_prob[sl][live][:, None], g.dtype)
        partials = np.stack([reduce_sum_rows(pp[:, a:b] * gt[:, a:b]) for a, b in pieces], axis=1)
        if combine == "tree":
            total = reduce_sum_rows(partials)
        else:
            total = np.zeros(partials.shape[0], dtype=np.float32)
            for q in range(partials.shape[1]):
                total = total + partials[:, q]
        chunk = np.zeros(r.shape[0], dtype=np.float32)
        chunk[live] = total
        slot_grad[sl] = chunk
    w = slot_written
    probs_grad[tokens[w], experts[w]] = slot_grad[w]
    return out, _cast_out(probs_grad, pr.dtype)
