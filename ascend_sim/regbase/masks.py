"""MaskReg instructions: CreateMask (MaskPattern), UpdateMask (the tail-loop mask), MaskAnd / MaskOr and
MaskDeInterleave. CreateMask / UpdateMask set every byte of a lane, so a mask made for one width reads the same lanes
at that width."""
from __future__ import annotations

import numpy as np

from .._jit import aicore
from ..faults import fault
from ..layout import (
    CALL_R_CREATE_MASK,
    CALL_R_MASK_AND,
    CALL_R_MASK_DEINTERLEAVE,
    CALL_R_MASK_OR,
    CALL_R_UPDATE_MASK,
    F_PARAM,
    P_COUNT,
    P_MASK,
)
from .registers import KIND_MASK, VL, _instr, _vtmp_u8

# MaskPattern (CreateMask): a positive value n is VLn (the first n lanes); the others are:
PAT_ALL = -1             # every lane
PAT_ALLF = -2            # no lane
PAT_H = -3               # the first half of the lanes
PAT_Q = -4               # the first quarter
PAT_M3 = -5              # the largest multiple of 3 lanes
PAT_M4 = -6              # the largest multiple of 4 lanes


@aicore
def _set_lanes(mask, elem_bytes, n):
    """The first min(n, lanes) lanes of elem_bytes set (every byte of each), the rest clear."""
    nbytes = max(0, min(n, VL // elem_bytes)) * elem_bytes
    mask[:nbytes] = 1
    mask[nbytes:] = 0


@aicore
def create_mask(c, mask, elem_bytes, pattern):
    """CreateMask<T, pattern>: `mask` (an mreg) gets the lanes of T (elem_bytes 1, 2 or 4) the pattern names
    (PAT_*, or n for VLn; n above the lane count means every lane)."""
    if not _instr(c, CALL_R_CREATE_MASK, KIND_MASK):
        return
    if elem_bytes != 1 and elem_bytes != 2 and elem_bytes != 4:
        fault(c, F_PARAM, CALL_R_CREATE_MASK, P_MASK, elem_bytes, 1, 4)
        return
    lanes = VL // elem_bytes
    if pattern == PAT_ALL:
        n = lanes
    elif pattern == PAT_ALLF:
        n = 0
    elif pattern == PAT_H:
        n = lanes // 2
    elif pattern == PAT_Q:
        n = lanes // 4
    elif pattern == PAT_M3:
        n = lanes // 3 * 3
    elif pattern == PAT_M4:
        n = lanes // 4 * 4
    elif pattern > 0:
        n = pattern
    else:
        fault(c, F_PARAM, CALL_R_CREATE_MASK, P_MASK, pattern, PAT_M4, lanes)
        return
    _set_lanes(mask, elem_bytes, n)


@aicore
def update_mask(c, mask, elem_bytes, remaining):
    """UpdateMask<T>(sreg): the first min(remaining, lanes) lanes active; returns the new sreg (remaining - that)."""
    if not _instr(c, CALL_R_UPDATE_MASK, KIND_MASK):
        return remaining
    if remaining < 0:
        fault(c, F_PARAM, CALL_R_UPDATE_MASK, P_COUNT, remaining, 0, 4294967295)
        return remaining
    lanes = VL // elem_bytes
    n = min(remaining, lanes)
    _set_lanes(mask, elem_bytes, n)
    return remaining - n


@aicore
def vmask_and(c, dst, a, b, mask):
    """MicroAPI::MaskAnd(dst, a, b, mask): predicate bytes a & b where mask is set, else 0."""
    if not _instr(c, CALL_R_MASK_AND, KIND_MASK):
        return
    for i in range(VL):
        dst[i] = a[i] & b[i] if mask[i] != 0 else 0


@aicore
def vmask_or(c, dst, a, b, mask):
    """MicroAPI::MaskOr(dst, a, b, mask): predicate bytes a | b where mask is set, else 0."""
    if not _instr(c, CALL_R_MASK_OR, KIND_MASK):
        return
    for i in range(VL):
        dst[i] = (1 if a[i] != 0 or b[i] != 0 else 0) if mask[i] != 0 else 0


@aicore
def vmask_deinterleave(c, dst0, dst1, a, b, elem_bytes):
    """MicroAPI::MaskDeInterleave<T>(dst0, dst1, a, b): the 2 * lanes predicates of T-lanes (a's, then b's) split
    into the even lanes (to dst0) and the odd ones (to dst1); in place allowed."""
    if not _instr(c, CALL_R_MASK_DEINTERLEAVE, KIND_MASK):
        return
    if elem_bytes != 1 and elem_bytes != 2 and elem_bytes != 4:
        fault(c, F_PARAM, CALL_R_MASK_DEINTERLEAVE, P_MASK, elem_bytes, 1, 4)
        return
    tmp = _vtmp_u8(c)
    lanes = VL // elem_bytes
    for i in range(lanes):
        tmp[i] = a[i * elem_bytes]
        tmp[lanes + i] = b[i * elem_bytes]
    # a lane's predicate goes to each of its bytes: one store per lane through a view of the lane width
    if elem_bytes == 1:
        for j in range(lanes):
            dst0[j] = tmp[2 * j]
            dst1[j] = tmp[2 * j + 1]
    elif elem_bytes == 2:
        d0, d1 = dst0.view(np.uint16), dst1.view(np.uint16)
        for j in range(lanes):
            d0[j] = np.uint16(tmp[2 * j]) * np.uint16(0x0101)
            d1[j] = np.uint16(tmp[2 * j + 1]) * np.uint16(0x0101)
    else:
        d0, d1 = dst0.view(np.uint32), dst1.view(np.uint32)
        for j in range(lanes):
            d0[j] = np.uint32(tmp[2 * j]) * np.uint32(0x01010101)
            d1[j] = np.uint32(tmp[2 * j + 1]) * np.uint32(0x01010101)
