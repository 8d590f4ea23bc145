"""Register loads (UB -> RegTensor): DataCopy LoadDist NORM / BRC / UNPACK_B16 / UNPACK4_B8 / DINTLV_B16 /
E2B_B16, LoadAlign, the unaligned load and DataCopyGather. In checked mode every UB byte read is a PIPE_V access of
CALL_VF."""
from __future__ import annotations

import numpy as np

from .. import check as chk
from .._jit import aicore
from .._memory import data_address, ub_view
from ..faults import fault
from ..layout import (
    CALL_R_GATHER,
    CALL_R_LOAD,
    CALL_R_LOAD_ALIGN,
    CALL_R_LOAD_UNALIGN,
    CALL_VF,
    F_ELEM_TYPE,
    F_PARAM,
    F_UB_OOB,
    P_COUNT,
    P_MASK,
    PIPE_V,
)
from ..local import ub_offset
from .registers import HALF_LANES, KIND_LOAD, VL, _b16_operands, _instr
from .ub_access import _ub_reach, _ub_span

LOAD_NORM = 0            # LoadDist::DIST_NORM: VL bytes from a 32-byte aligned address
LOAD_BRC = 1             # DIST_BRC_B8/B16/B32: one element broadcast to every lane


@aicore
def reg_load(c, dst, t, offset, dist):
    """DataCopy<T, dist>(dst, t + offset): LOAD_NORM reads VL bytes from a 32-byte aligned address, LOAD_BRC
    reads t[offset] into every lane. Returns offset + lanes (POST_MODE_UPDATE)."""
    lanes = dst.size
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return offset + lanes
    if dst.itemsize != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_LOAD, dst.itemsize, t.itemsize)
        return offset + lanes
    if dist == LOAD_NORM:
        a = _ub_span(c, CALL_R_LOAD, t, offset, VL, 32)
        if a < 0:
            return offset + lanes
        chk.ub(c, CALL_VF, PIPE_V, a, VL, False)
        for i in range(lanes):
            dst[i] = t[offset + i]
    elif dist == LOAD_BRC:
        a = _ub_span(c, CALL_R_LOAD, t, offset, t.itemsize, t.itemsize)
        if a < 0:
            return offset + lanes
        chk.ub(c, CALL_VF, PIPE_V, a, t.itemsize, False)
        v = t[offset]
        for i in range(lanes):
            dst[i] = v
    else:
        fault(c, F_PARAM, CALL_R_LOAD, P_MASK, dist, LOAD_NORM, LOAD_BRC)
    return offset + lanes


@aicore
def reg_load_unalign(c, dst, t, offset, count):
    """DataCopyUnAlign (with its UnalignReg pre-load): `count` (<= lanes) elements from any element address into the
    first lanes of dst; the rest of dst is zeroed. Returns offset + count (post-update)."""
    lanes = dst.size
    if not _instr(c, CALL_R_LOAD_UNALIGN, KIND_LOAD):
        return offset + count
    if dst.itemsize != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_LOAD_UNALIGN, dst.itemsize, t.itemsize)
        return offset + count
    if count < 0 or count > lanes:
        fault(c, F_PARAM, CALL_R_LOAD_UNALIGN, P_COUNT, count, 0, lanes)
        return offset + count
    a = _ub_span(c, CALL_R_LOAD_UNALIGN, t, offset, count * t.itemsize, t.itemsize)
    if a < 0:
        return offset + count
    chk.ub(c, CALL_VF, PIPE_V, a, count * t.itemsize, False)
    for i in range(count):
        dst[i] = t[offset + i]
    for i in range(count, lanes):
        dst[i] = 0
    return offset + count


@aicore
def reg_load_span(c, dst, t, offset):
    """DataCopy<T, PostLiteral::POST_MODE_UPDATE>(dst, addr, lanes) through a raw UB pointer: VL bytes from a
    32-byte aligned address that may run past t's end (not past the UB; only t's part is a checked-mode read).
    Returns offset + lanes."""
    lanes = dst.size
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return offset + lanes
    if dst.itemsize != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_LOAD, dst.itemsize, t.itemsize)
        return offset + lanes
    a = _ub_reach(c, CALL_R_LOAD, t, offset, VL, 32)
    if a < 0:
        return offset + lanes
    chk.ub(c, CALL_VF, PIPE_V, a, min(VL, max(t.nbytes - offset * t.itemsize, 0)), False)
    src = c.ub[a: a + VL]
    out = dst.view(np.uint8)
    for i in range(VL):
        out[i] = src[i]
    return offset + lanes


@aicore
def reg_load_dintlv(c, dst0, dst1, t, offset):
    """DataCopy<T, POST_MODE_UPDATE, LoadDist::DIST_DINTLV_B16>(dst0, dst1, addr, 2 * lanes): 2 VL bytes from a
    32-byte aligned UB address (a raw pointer: it may run past t's end), de-interleaved: element 2i to lane i of
    dst0, element 2i + 1 to lane i of dst1. 16-bit elements only; dst0 and dst1 must be different registers.
    Returns offset + 2 * lanes."""
    lanes = VL // 2
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return offset + 2 * lanes
    if not _b16_operands(c, CALL_R_LOAD, dst0, t) or not _b16_operands(c, CALL_R_LOAD, dst1, t):
        return offset + 2 * lanes
    if data_address(dst0) == data_address(dst1):
        fault(c, F_PARAM, CALL_R_LOAD, P_MASK, 0, 1, 1)
        return offset + 2 * lanes
    a = _ub_reach(c, CALL_R_LOAD, t, offset, 2 * VL, 32)
    if a < 0:
        return offset + 2 * lanes
    chk.ub(c, CALL_VF, PIPE_V, a, min(2 * VL, max(t.nbytes - offset * 2, 0)), False)
    src = ub_view(c.ub, np.uint16, a, 2 * lanes)
    d0 = dst0.view(np.uint16)
    d1 = dst1.view(np.uint16)
    for i in range(lanes):
        d0[i] = src[2 * i]
        d1[i] = src[2 * i + 1]
    return offset + 2 * lanes


@aicore
def reg_load_e2b(c, dst, t, offset):
    """DataCopy<T, POST_MODE_UPDATE, LoadDist::DIST_E2B_B16>(dst, addr, 8): 8 16-bit elements (16 bytes, from a
    16-byte aligned address: the span it reads; the model's assumption), element k broadcast to the 16 lanes of
    the register's 32-byte block k. Returns offset + 8."""
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return offset + 8
    if not _b16_operands(c, CALL_R_LOAD, dst, t):
        return offset + 8
    a = _ub_reach(c, CALL_R_LOAD, t, offset, 16, 16)
    if a < 0:
        return offset + 8
    chk.ub(c, CALL_VF, PIPE_V, a, min(16, max(t.nbytes - offset * 2, 0)), False)
    src = ub_view(c.ub, np.uint16, a, 8)
    d = dst.view(np.uint16)
    for k in range(8):
        v = src[k]
        for j in range(16):
            d[16 * k + j] = v
    return offset + 8


@aicore
def reg_load_unpack_b16(c, dst, t, offset):
    """DataCopy<T, LoadDist::DIST_UNPACK_B16>(dst, t + offset) for a 16-bit T: VL / 2 bytes (64 elements) from a
    32-byte aligned address, element i into uint16 slot 2i of dst (the low half of 32-bit lane i), slot 2i + 1
    zeroed. No mask: all 128 bytes are read. Returns offset + 64 (POST_MODE_UPDATE)."""
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return offset + HALF_LANES
    if dst.itemsize != 2 or t.itemsize != 2:
        fault(c, F_ELEM_TYPE, CALL_R_LOAD, dst.itemsize, t.itemsize)
        return offset + HALF_LANES
    a = _ub_span(c, CALL_R_LOAD, t, offset, VL // 2, 32)
    if a < 0:
        return offset + HALF_LANES
    chk.ub(c, CALL_VF, PIPE_V, a, VL // 2, False)
    for i in range(HALF_LANES):
        dst[2 * i] = t[offset + i]
        dst[2 * i + 1] = 0
    return offset + HALF_LANES


@aicore
def reg_load_align(c, dst, t, offset, unpack):
    """LoadAlign<T, DIST_NORM> (unpack False) or LoadAlign<b16, DIST_UNPACK_B16> (unpack True, dst and t 2-byte)
    from the 32-byte aligned element `offset` of t. NORM fills every lane from VL bytes; UNPACK_B16 reads VL / 2
    bytes (lanes / 2 elements) and puts element i in slot 2i, slot 2i + 1 zeroed (each in the low half of its
    32-bit lane). The hardware reads the whole span whatever follows t in UB; here only the elements inside t are
    read and the lanes past its end are zeroed (every VF that loads past a buffer's end masks those lanes off).
    Returns offset + the elements of the span (POST_MODE_UPDATE)."""
    lanes = dst.size
    n = lanes // 2 if unpack else lanes
    if not _instr(c, CALL_R_LOAD_ALIGN, KIND_LOAD):
        return offset + n
    if dst.itemsize != t.itemsize or (unpack and dst.itemsize != 2):
        fault(c, F_ELEM_TYPE, CALL_R_LOAD_ALIGN, dst.itemsize, t.itemsize)
        return offset + n
    avail = t.size - offset
    if avail > n:
        avail = n
    if avail < 1:
        avail = 1           # the first element must lie in t (the fault names it)
    a = _ub_span(c, CALL_R_LOAD_ALIGN, t, offset, avail * t.itemsize, 32)
    if a < 0:
        return offset + n
    chk.ub(c, CALL_VF, PIPE_V, a, avail * t.itemsize, False)
    for i in range(lanes):
        dst[i] = 0
    for i in range(avail):
        if unpack:
            dst[2 * i] = t[offset + i]
        else:
            dst[i] = t[offset + i]
    return offset + n


@aicore
def reg_load_unpack4_b8(c, dst, t, offset):
    """DataCopy<uint8_t, POST_MODE_UPDATE, LoadDist::DIST_UNPACK4_B8>(dst, addr, VL / 4): VL / 4 = 64 bytes of t
    (uint8) from a 32-byte aligned address, byte i into the low byte of 32-bit lane i, the other three bytes 0
    (dst: a vreg_u8 view; read it back as vreg_i32 / vreg_u32). Returns offset + 64."""
    n = VL // 4
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return offset + n
    if dst.itemsize != 1 or t.itemsize != 1:
        fault(c, F_ELEM_TYPE, CALL_R_LOAD, dst.itemsize, t.itemsize)
        return offset + n
    a = _ub_span(c, CALL_R_LOAD, t, offset, n, 32)
    if a < 0:
        return offset + n
    chk.ub(c, CALL_VF, PIPE_V, a, n, False)
    for i in range(n):
        dst[4 * i] = t[offset + i]
        dst[4 * i + 1] = 0
        dst[4 * i + 2] = 0
        dst[4 * i + 3] = 0
    return offset + n


@aicore
def reg_gather(c, dst, t, index, mask):
    """MicroAPI::DataCopyGather(dst, ubAddr, index, mask): active lane i reads element index[i] of t (element
    indices of t's type, every one checked to lie in t); inactive lanes are zeroed."""
    if not _instr(c, CALL_R_GATHER, KIND_LOAD):
        return
    if dst.itemsize != t.itemsize or index.itemsize != dst.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_GATHER, dst.itemsize, t.itemsize)
        return
    base = ub_offset(c, t, CALL_R_GATHER)
    if base < 0:
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            k = np.int64(index[i])
            if k < 0 or k >= t.size:
                fault(c, F_UB_OOB, CALL_R_GATHER, base, k * isz + isz, t.nbytes)
                return
    for i in range(dst.size):
        if mask[i * isz] != 0:
            k = np.int64(index[i])
            chk.ub(c, CALL_VF, PIPE_V, base + k * isz, isz, False)
            dst[i] = t[k]
        else:
            dst[i] = 0
