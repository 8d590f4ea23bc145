"""Reductions across the lanes of one register: ReduceSum (pairwise tree), ReduceMax / ReduceMin and
ReduceMaxWithDataBlock (one result per 32-byte block)."""
from __future__ import annotations

from .._jit import aicore
from ..layout import CALL_R_REDUCE_MAX, CALL_R_REDUCE_MAX_WITH_DATABLOCK, CALL_R_REDUCE_MIN, CALL_R_REDUCE_SUM
from .registers import KIND_REDUCE, _instr, _same_type


@aicore
def vreduce_sum(c, dst, src, mask):
    """MicroAPI::ReduceSum(dst, src, mask): dst lane 0 = pairwise-tree sum of the active lanes (inactive ones add
    0), the other lanes 0. Integers wrap."""
    if not _instr(c, CALL_R_REDUCE_SUM, KIND_REDUCE):
        return
    if not _same_type(c, CALL_R_REDUCE_SUM, dst, src):
        return
    isz = src.itemsize
    n = src.size
    for i in range(n):
        dst[i] = src[i] if mask[i * isz] != 0 else 0
    w = n // 2
    while w >= 1:
        for i in range(w):
            dst[i] = dst[2 * i] + dst[2 * i + 1]
        w //= 2
    for i in range(1, n):
        dst[i] = 0


@aicore
def _reduce_ext(c, call, dst, src, mask, want_max):
    if not _instr(c, call, KIND_REDUCE):
        return
    if not _same_type(c, call, dst, src):
        return
    isz = src.itemsize
    found = False
    best = src[0]
    for i in range(src.size):
        if mask[i * isz] != 0:
            v = src[i]
            if not found or (v != v) or (best == best and (v > best if want_max else v < best)):
                if not (found and best != best):
                    best = v
            found = True
    for i in range(dst.size):
        dst[i] = 0
    if found:
        dst[0] = best


@aicore
def vreduce_max(c, dst, src, mask):
    """MicroAPI::ReduceMax: dst lane 0 = the largest active lane (a NaN wins), others 0; no active lane: all 0."""
    _reduce_ext(c, CALL_R_REDUCE_MAX, dst, src, mask, True)


@aicore
def vreduce_min(c, dst, src, mask):
    """MicroAPI::ReduceMin, as vreduce_max."""
    _reduce_ext(c, CALL_R_REDUCE_MIN, dst, src, mask, False)


@aicore
def vreduce_max_with_datablock(c, dst, src, mask):
    """MicroAPI::ReduceMaxWithDataBlock(dst, src, mask): lane k of dst (k < 8) = the largest active lane of the
    register's 32-byte block k (0 if none is active; a NaN wins for floats), lanes 8.. zeroed; in place allowed."""
    if not _instr(c, CALL_R_REDUCE_MAX_WITH_DATABLOCK, KIND_REDUCE):
        return
    if not _same_type(c, CALL_R_REDUCE_MAX_WITH_DATABLOCK, dst, src):
        return
    isz = src.itemsize
    per = 32 // isz
    # block k's result goes to lane k, which lies in block 0 (already read): in place is safe
    for k in range(8):
        found = False
        best = src[k * per]
        for j in range(k * per, k * per + per):
            if mask[j * isz] != 0:
                v = src[j]
                if not found or (best == best and (v != v or v > best)):
                    best = v
                found = True
        dst[k] = best if found else 0
    for i in range(8, dst.size):
        dst[i] = 0
