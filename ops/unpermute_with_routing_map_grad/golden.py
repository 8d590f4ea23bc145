"""NumPy golden of MoeTokenUnpermuteWithRoutingMapGrad, written from the op's formulas.

source: moe/moe_token_unpermute_with_routing_map_grad/docs/aclnnMoeTokenUnpermuteWithRoutingMapGrad.md (formulas)
and the reduction order of op_kernel/moe_token_unpermute_with_routing_map_grad_base.h @ 25fb6b92890d (the
arch35/ base.h is identical, so one golden serves every chip).

It follows the kernel's fp32 path so results compare bit for bit:

* products G * prob and permutedTokens * G in fp32 (both operands widened exactly),
* each hidden piece (of `hidden_piece` elements, the tiling's hiddenSizeAlign) reduced with
  ReduceSumFunc's order: fold halves to <= 2x a block size (4096 / 512 / 64), BlockReduceSum
  of 8-element blocks as pairwise trees, a final 64-lane pairwise tree;
* pieces combined per slot: pairwise tree of the partial sums (dropAndPad) or a running
  fp32 sum 0 + p0 + p1 + ... (no dropAndPad),
* fp32 -> fp16/bf16 with round-half-even.

Which slots exist and where they point (the op's index conventions, N tokens, M = len(out_index)
slots, E experts, topK = M // N in C integer division, 0 when N = 0):

* no probs, no dropAndPad: all M slots; slot r copies token r // topK (token 0 when topK = 0) to
  row out_index[r], slots with a negative out_index are skipped.
* no probs, dropAndPad: all M slots; slot r copies token permute_token_id[r] to row out_index[r].
* probs, no dropAndPad: only the first N * topK slots; slot t * topK + k belongs to token t's k-th
  selected expert (ascending), and a negative out_index skips it. Slots from N * topK on are never
  read, whatever they hold, so topK = 0 (M < N) gives all-zero outputs.
* probs, dropAndPad: all M slots; with capacity = M // E the slot's probs element is the flat
  offset token * E + out_index // capacity (C division, 0 when capacity is 0). When M is not a
  multiple of E that quotient can reach E and the offset runs into the next token's row; the
  golden does the same.

Rows of the permuted-token gradient that no slot writes are 0 (the friendly call zero-fills).
With hidden size 0 no row is moved: row indices go unchecked and both gradients are all zero (the
dropAndPad probs offset and the routing-map rule below still apply; the dropAndPad + probs kernel
itself then reads one element of an empty buffer, which the simulator reports as a fault).
Inputs for which the kernel would touch GM outside a tensor (an index out of range that is not
skipped, a flat probs offset past N * E) or for which its result depends on more than the
formulas (a routing-map row selecting more than topK experts) raise
ValueError("outside golden domain: ..."). When several slots write one output element the
hardware result depends on core timing; the golden keeps one of them, unspecified which.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ops.common.half_cast import cast, to_f32
from ops.common.reduce_sum_golden import reduce_sum_rows as _reduce_sum_rows

ROW_CHUNK = 2048   # slots per vectorised step (bounds the fp32 temporaries)


def _to_f32(a: np.ndarray) -> np.ndarray:
    return to_f32(a)


# ReduceSumFunc with this op's strict tiers (> 4096 / 512 / 64); shared with MoeTokenUnpermuteGrad's golden
reduce_sum_rows = partial(_reduce_sum_rows, strict=True)


def _piece_bounds(hidden: int, piece: int):
    """[start, end) of every hidden piece; none when hidden is 0."""
    if hidden <= 0:
        return []
    piece = hidden if not piece or piece <= 0 else piece
    return [(s, min(s + piece, hidden)) for s in range(0, hidden, piece)]


def _cast_out(x: np.ndarray, dtype) -> np.ndarray:
    return cast(x, dtype)


def _c_div(a: np.ndarray, b: int) -> np.ndarray:
    """C integer division of an int64 array by b (truncates toward zero); 0 when b is 0, like SafeDiv."""
    if b == 0:
        return np.zeros(a.shape, dtype=np.int64)
    q = np.abs(a) // abs(b)
    return np.where((a >= 0) == (b >= 0), q, -q)


def _outside(message: str):
    raise ValueError(f"outside golden domain: {message}")


def _require_in_range(name: str, values: np.ndarray, slots: np.ndarray, bound: int, what: str) -> None:
    """Every value must index one of `bound` rows; otherwise the kernel would fault."""
    bad = np.nonzero((values < 0) | (values >= bound))[0]
    if bad.size:
        j = bad[0]
        _outside(f"{name} of slot {int(slots[j])} is {int(values[j])}, not a {what} in [0, {bound}); "
                 "the kernel would access GM outside the tensor")


def golden(unpermuted_tokens_grad, out_index, permute_token_id, routing_map=None, permuted_tokens=None, probs=None,
           drop_and_pad=False, *, hidden_piece: int | None = None):
    """(permuted_tokens_grad, probs_grad or None). `hidden_piece` is the kernel's hidden split (tiling
    hiddenSizeAlign). Raises ValueError("outside golden domain: ...") where the module docstring says."""
    g = np.asarray(unpermuted_tokens_grad)
    o = np.asarray(out_index).astype(np.int64)
    i = np.asarray(permute_token_id).astype(np.int64)
    n, h = g.shape
    m = o.shape[0]
    top_k = m // n if n else 0
    out = np.zeros((m, h), dtype=g.dtype)
    if probs is None:
        if drop_and_pad:
            slots = np.arange(m)
            tokens, rows = i, o
        else:
            slots = np.nonzero(o >= 0)[0]
            tokens = slots // top_k if top_k else np.zeros(slots.size, dtype=np.int64)
            rows = o[slots]
        if h:   # with hidden size 0 the kernel moves no bytes, so no index is dereferenced
            _require_in_range("permute_token_id" if drop_and_pad else "token (slot // topK)", tokens, slots, n,
                              "token")
            _require_in_range("out_index", rows, slots, m, "permuted row")
            out[rows] = g[tokens]
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
        slots = np.arange(m)
        flat = tokens * e + _c_div(rows, capacity)   # probOffset: read for every slot, before anything else
        _require_in_range("probs offset (token * E + out_index // capacity)", flat, slots, n * e, "probs element")
        if h:
            _require_in_range("permute_token_id", tokens, slots, n, "token")
            _require_in_range("out_index", rows, slots, m, "permuted row")
        slot_prob = pr32.reshape(-1)[flat]
        slot_written = np.ones(m, dtype=bool)
        live_rows = np.ones(m, dtype=bool)
        combine = "tree"
    else:
        used = n * top_k   # rowIdMap: the kernel never reads a slot past N * topK
        rm = np.asarray(routing_map) != 0
        counts = rm.sum(axis=1)
        if top_k and (counts > top_k).any():
            t = int(np.argmax(counts > top_k))
            _outside(f"routing_map row {t} selects {int(counts[t])} experts, more than topK = {top_k}; the "
                     "kernel's per-batch prob arrays would then pair slots with other tokens' experts")
        tokens = np.repeat(np.arange(n), top_k)
        rank = np.tile(np.arange(top_k), n)
        # the r-th selected expert of each token (ascending); slots past a token's count get prob 0, no address
        order = np.argsort(~rm, axis=1, kind="stable")[:, :top_k]
        has_expert = rank < counts[tokens]
        experts = order[tokens, rank]
        flat = tokens * e + experts
        slot_prob = np.where(has_expert, pr32.reshape(-1)[flat], np.float32(0))
        rows = o[:used]
        slots = np.arange(used)
        live_rows = rows >= 0
        if h:
            _require_in_range("out_index", rows[live_rows], slots[live_rows], m, "permuted row")
        slot_written = has_expert
        combine = "sequential"

    slot_grad = np.zeros(rows.size, dtype=np.float32)
    for start in range(0, rows.size if pieces else 0, ROW_CHUNK):
        sl = slice(start, min(start + ROW_CHUNK, rows.size))
        r, t, live = rows[sl], tokens[sl], live_rows[sl]
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
    probs_grad.reshape(-1)[flat[w]] = slot_grad[w]
    return out, _cast_out(probs_grad, pr.dtype)
