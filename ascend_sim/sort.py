"""Sorting instructions of the vector unit (numba): ArithProgression, Concat, Sort, Extract, MrgSort.

Sorted data is a list of (score, index) pairs interleaved in fp32 storage: pair i is
score = s[2i], index = bits of s[2i + 1] (GetSortLen<float>(n) = 2n floats). Sort<float, true>
orders all repeat * 32 pairs by score, descending; MrgSort merges up to four sorted lists.
Equal scores keep their input order in both (the documented rule: of score[i] == score[j]
with i > j, j comes first; across MrgSort lists the earlier list comes first), which is what
makes the MoE permute sort stable.
"""
from __future__ import annotations

import numpy as np

from . import check as chk
from ._jit import aicore
from ._outline import outline
from .dtypes import view_f32_as_u32
from .faults import fault, issue
from .layout import (
    CALL_ARITH_PROGRESSION,
    CALL_CONCAT,
    CALL_DUPLICATE_MASK,
    CALL_EXTRACT,
    CALL_MRG_SORT,
    CALL_SORT,
    CHK_MODE,
    CNT_V_ELEMS,
    F_PARAM,
    F_UB_OOB,
    P_COUNT,
    P_MASK,
    P_REPEAT,
    PIPE_V,
)
from .local import check_count, note_ub_write, ub_aligned_offset, ub_offset
from .timeline import repeats_of, vector

ONE_REPEAT_SORT_NUM = 32
MAX_REPEAT = 255


@aicore
def _begin(c, call, repeat, elems):
    if not issue(c, call):
        return False
    if repeat < 0 or repeat > MAX_REPEAT:
        fault(c, F_PARAM, call, P_REPEAT, repeat, 0, MAX_REPEAT)
        return False
    vector(c, call, repeat)
    c.state[CNT_V_ELEMS] += elems
    return repeat > 0


@aicore
def _descending_key(x):
    """uint32 whose ascending order is x's descending float order; -0 and +0 share one key (equal)."""
    bits = np.uint32(view_f32_as_u32(x))
    if bits == np.uint32(0x80000000):
        bits = np.uint32(0)
    ordered = ~bits if (bits >> np.uint32(31)) != 0 else bits | np.uint32(0x80000000)
    return ~ordered


@aicore
def _stable_descending_order(scores):
    """Permutation sorting `scores` (fp32) descending, equal scores in input order: an LSD radix sort
    on 8-bit digits, skipping digits every key shares (sort keys are mostly small integers)."""
    n = scores.size
    keys = np.empty(n, dtype=np.uint32)
    for i in range(n):
        keys[i] = _descending_key(scores[i])
    order = np.arange(n)
    scratch = np.empty(n, dtype=np.int64)
    counts = np.zeros(257, dtype=np.int64)
    for shift in range(0, 32, 8):
        counts[:] = 0
        for i in range(n):
            counts[((keys[i] >> np.uint32(shift)) & np.uint32(0xFF)) + 1] += 1
        if counts.max() == n:
            continue                      # every key has the same digit here
        for d in range(256):
            counts[d + 1] += counts[d]
        for j in range(n):
            i = order[j]
            d = (keys[i] >> np.uint32(shift)) & np.uint32(0xFF)
            scratch[counts[d]] = i
            counts[d] += 1
        order, scratch = scratch, order
    return order


@outline
def arith_progression(c, dst, first_value, diff_value, count):
    """ArithProgression(dst, first, diff, count): dst[i] = first + diff * i in dst's type (int32 wraps)."""
    if not issue(c, CALL_ARITH_PROGRESSION):
        return
    if count < 0:
        fault(c, F_PARAM, CALL_ARITH_PROGRESSION, P_COUNT, count, 0, 2147483647)
        return
    d = ub_aligned_offset(c, dst, CALL_ARITH_PROGRESSION)
    if d < 0 or not check_count(c, dst, count, CALL_ARITH_PROGRESSION):
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, CALL_ARITH_PROGRESSION, d, count * dst.itemsize, -1, 0, -1, 0)
    vector(c, CALL_ARITH_PROGRESSION, repeats_of(count, dst.itemsize))
    c.state[CNT_V_ELEMS] += count
    for i in range(count):
        dst[i] = first_value + diff_value * i
    note_ub_write(c, d + count * dst.itemsize)


@aicore
def concat(c, src, tmp, repeat):
    """Concat(concat, src, tmp, repeat): on A2/A3/950 the scores are sorted as they are; returns src."""
    if _begin(c, CALL_CONCAT, repeat, 0):
        check_count(c, src, repeat * ONE_REPEAT_SORT_NUM, CALL_CONCAT)
    return src


@outline
def sort(c, dst, concat_local, index, tmp, repeat):
    """Sort<float, true>(dst, concat, index, tmp, repeat): all repeat * 32 (score, index) pairs, descending
    by score, equal scores in input order; dst receives the interleaved pairs (2 floats each)."""
    n = repeat * ONE_REPEAT_SORT_NUM
    if not _begin(c, CALL_SORT, repeat, n):
        return
    d = ub_aligned_offset(c, dst, CALL_SORT)
    if (d < 0 or ub_aligned_offset(c, concat_local, CALL_SORT) < 0 or ub_aligned_offset(c, index, CALL_SORT) < 0
            or ub_aligned_offset(c, tmp, CALL_SORT) < 0):
        return
    if (not check_count(c, dst, 2 * n, CALL_SORT) or not check_count(c, concat_local, n, CALL_SORT)
            or not check_count(c, index, n, CALL_SORT)):
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, CALL_SORT, d, 2 * n * 4, ub_offset(c, concat_local, CALL_SORT), n * 4,
                          ub_offset(c, index, CALL_SORT), n * 4)
    scores = concat_local[:n].copy()
    indices = index[:n].copy()
    order = _stable_descending_order(scores)
    out_bits = dst[: 2 * n].view(np.uint32)
    for k in range(n):
        j = order[k]
        dst[2 * k] = scores[j]
        out_bits[2 * k + 1] = indices[j]
    note_ub_write(c, d + 2 * n * 4)


@outline
def extract(c, dst_value, dst_index, sorted_local, repeat):
    """Extract(dstValue, dstIndex, sorted, repeat): split repeat * 32 interleaved pairs into scores and indices."""
    n = repeat * ONE_REPEAT_SORT_NUM
    if not _begin(c, CALL_EXTRACT, repeat, 2 * n):
        return
    dv = ub_aligned_offset(c, dst_value, CALL_EXTRACT)
    di = ub_aligned_offset(c, dst_index, CALL_EXTRACT)
    if dv < 0 or di < 0 or ub_aligned_offset(c, sorted_local, CALL_EXTRACT) < 0:
        return
    if (not check_count(c, dst_value, n, CALL_EXTRACT) or not check_count(c, dst_index, n, CALL_EXTRACT)
            or not check_count(c, sorted_local, 2 * n, CALL_EXTRACT)):
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, CALL_EXTRACT, dv, n * 4, ub_offset(c, sorted_local, CALL_EXTRACT), 2 * n * 4, -1, 0)
        chk.ub(c, CALL_EXTRACT, PIPE_V, di, n * 4, True)
    pairs = sorted_local[: 2 * n].copy()
    bits = pairs.view(np.uint32)
    for k in range(n):
        dst_value[k] = pairs[2 * k]
        dst_index[k] = bits[2 * k + 1]
    note_ub_write(c, max(dv, di) + n * 4)


@aicore
def _list_ok(c, src, count):
    if ub_aligned_offset(c, src, CALL_MRG_SORT) < 0:
        return False
    return check_count(c, src, 2 * count, CALL_MRG_SORT)


@aicore
def mrg_sort(c, dst, src0, src1, src2, src3, counts, valid_bit, repeat, exhausted_suspension):
    """MrgSort<float>(dst, MrgSortSrcList(src0..src3), elementCountList, sortedNum, validBit, repeat) with
    ifExhaustedSuspension: merge the valid lists (validBit 0b11 / 0b111 / 0b1111) of (score, index) pairs,
    descending, earlier list first on equal scores; with suspension the merge stops as soon as one list
    is used up. Returns the pairs taken from each list (sortedNum[0..3])."""
    z = (0, 0, 0, 0)
    if not issue(c, CALL_MRG_SORT):
        return z
    if repeat != 1:
        fault(c, F_PARAM, CALL_MRG_SORT, P_REPEAT, repeat, 1, 1)
        return z
    if valid_bit != 3 and valid_bit != 7 and valid_bit != 15:
        fault(c, F_PARAM, CALL_MRG_SORT, P_MASK, valid_bit, 3, 15)
        return z
    lists = 2 if valid_bit == 3 else 3 if valid_bit == 7 else 4
    n0, n1, n2, n3 = counts[0], counts[1], counts[2] if lists > 2 else 0, counts[3] if lists > 3 else 0
    d = ub_aligned_offset(c, dst, CALL_MRG_SORT)
    if d < 0 or not check_count(c, dst, 2 * (n0 + n1 + n2 + n3), CALL_MRG_SORT):
        return z
    if not _list_ok(c, src0, n0) or not _list_ok(c, src1, n1):
        return z
    if (lists > 2 and not _list_ok(c, src2, n2)) or (lists > 3 and not _list_ok(c, src3, n3)):
        return z
    vector(c, CALL_MRG_SORT, repeats_of(n0 + n1 + n2 + n3, 8))     # (score, index) pairs of 8 bytes
    if c.state[CHK_MODE] != 0:
        chk.ub(c, CALL_MRG_SORT, PIPE_V, ub_offset(c, src0, CALL_MRG_SORT), 8 * n0, False)
        chk.ub(c, CALL_MRG_SORT, PIPE_V, ub_offset(c, src1, CALL_MRG_SORT), 8 * n1, False)
        if lists > 2:
            chk.ub(c, CALL_MRG_SORT, PIPE_V, ub_offset(c, src2, CALL_MRG_SORT), 8 * n2, False)
        if lists > 3:
            chk.ub(c, CALL_MRG_SORT, PIPE_V, ub_offset(c, src3, CALL_MRG_SORT), 8 * n3, False)
        chk.ub(c, CALL_MRG_SORT, PIPE_V, d, 8 * (n0 + n1 + n2 + n3), True)
    # read every input before writing: dst may share UB with a source in real kernels' ping-pong use
    s0, s1, s2, s3 = src0[: 2 * n0].copy(), src1[: 2 * n1].copy(), src2[: 2 * n2].copy(), src3[: 2 * n3].copy()
    lens = (n0, n1, n2, n3)
    taken = np.zeros(4, dtype=np.int64)
    out = 0
    while True:
        best = -1
        best_score = np.float32(0.0)
        for k in range(lists):
            if taken[k] < lens[k]:
                src = s0 if k == 0 else s1 if k == 1 else s2 if k == 2 else s3
                score = src[2 * taken[k]]
                if best < 0 or score > best_score:
                    best = k
                    best_score = score
        if best < 0:
            break
        src = s0 if best == 0 else s1 if best == 1 else s2 if best == 2 else s3
        dst[2 * out] = src[2 * taken[best]]
        dst[2 * out + 1] = src[2 * taken[best] + 1]
        out += 1
        taken[best] += 1
        if exhausted_suspension and taken[best] == lens[best]:
            break
    c.state[CNT_V_ELEMS] += out * 2
    note_ub_write(c, d + out * 8)
    return (taken[0], taken[1], taken[2], taken[3])


@outline
def duplicate_mask(c, dst, scalar, mask0, mask1, repeat, dst_blk_stride, dst_rep_stride):
    """Duplicate(dst, scalar, uint64 mask[2], repeatTime, dstBlkStride, dstRepStride) for 32-bit data:
    lane k of a 64-lane repeat is written when bit k of mask0 is set (mask1 must be 0)."""
    if not _begin(c, CALL_DUPLICATE_MASK, repeat, 0):
        return
    if mask1 != 0:
        fault(c, F_PARAM, CALL_DUPLICATE_MASK, P_MASK, mask1, 0, 0)
        return
    d = ub_aligned_offset(c, dst, CALL_DUPLICATE_MASK)
    if d < 0:
        return
    top = 0
    for k in range(64):
        if (np.uint64(mask0) >> np.uint64(k)) & np.uint64(1):
            top = k + 1
    end = (repeat - 1) * dst_rep_stride * 8 + ((top - 1) // 8) * dst_blk_stride * 8 + (top - 1) % 8 + 1 \
        if top > 0 else 0
    if end > dst.size:
        fault(c, F_UB_OOB, CALL_DUPLICATE_MASK, d, end * dst.itemsize, dst.nbytes)
        return
    if c.state[CHK_MODE] != 0:
        chk.ub(c, CALL_DUPLICATE_MASK, PIPE_V, d, end * dst.itemsize, True)
    written = 0
    for r in range(repeat):
        for k in range(top):
            if (np.uint64(mask0) >> np.uint64(k)) & np.uint64(1):
                dst[r * dst_rep_stride * 8 + (k // 8) * dst_blk_stride * 8 + k % 8] = scalar
                written += 1
    c.state[CNT_V_ELEMS] += written
    note_ub_write(c, d + end * dst.itemsize)
