"""Instructions that move lanes without arithmetic: Duplicate (scalar or lane 0 of a register), Copy, Arange,
GatherMask (compress), Interleave / DeInterleave, Pack (lowest half) and UnPack (lower half)."""
from __future__ import annotations

import numpy as np

from .._jit import aicore
from .._memory import data_address
from ..faults import fault
from ..layout import (
    CALL_R_ARANGE,
    CALL_R_COPY,
    CALL_R_DEINTERLEAVE,
    CALL_R_DUPLICATE,
    CALL_R_GATHER_MASK,
    CALL_R_INTERLEAVE,
    CALL_R_PACK,
    CALL_R_UNPACK,
    F_ELEM_TYPE,
    F_PARAM,
    P_MASK,
)
from .registers import KIND_CAST, KIND_MOVE, ZEROING, _instr, _same_type, _vtmp_u8


@aicore
def vduplicate(c, dst, s, mask, mode=ZEROING):
    """MicroAPI::Duplicate(dst, scalar, mask)."""
    if not _instr(c, CALL_R_DUPLICATE, KIND_MOVE):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = s
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vduplicate_all(c, dst, s):
    """MicroAPI::Duplicate(dst, scalar) without a mask: every lane."""
    if not _instr(c, CALL_R_DUPLICATE, KIND_MOVE):
        return
    for i in range(dst.size):
        dst[i] = s


# vduplicate_reg and vcopy keep their own lane loops: one loop shared through a device function of its own (the
# operand read its argument) compiles 8 more specialisations over the test_regbase* files than these 6 lines cost.
@aicore
def vduplicate_reg(c, dst, src, mask, mode=ZEROING):
    """MicroAPI::Duplicate(dst, srcReg, mask): lane 0 of src in every active lane of dst."""
    if not _instr(c, CALL_R_DUPLICATE, KIND_MOVE):
        return
    if not _same_type(c, CALL_R_DUPLICATE, dst, src):
        return
    isz = dst.itemsize
    v = src[0]
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = v
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vcopy(c, dst, src, mask, mode=ZEROING):
    """MicroAPI::Copy<T, mode>(dst, src, mask): the active lanes of src into dst; the others zeroed (ZEROING) or
    kept (MERGING)."""
    if not _instr(c, CALL_R_COPY, KIND_MOVE):
        return
    if not _same_type(c, CALL_R_COPY, dst, src):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = src[i]
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def varange(c, dst, start):
    """MicroAPI::Arange(dst, start): lane i gets start + i (every lane)."""
    if not _instr(c, CALL_R_ARANGE, KIND_MOVE):
        return
    for i in range(dst.size):
        dst[i] = start + i


@aicore
def vgather_mask(c, dst, src, mask):
    """MicroAPI::GatherMask (GatherMaskMode::NO_STORE_REG, compress): the active lanes of src packed, in order,
    into the first lanes of dst, the rest of dst zeroed. Returns how many lanes were kept."""
    if not _instr(c, CALL_R_GATHER_MASK, KIND_MOVE):
        return 0
    if not _same_type(c, CALL_R_GATHER_MASK, dst, src):
        return 0
    isz = src.itemsize
    n = 0
    for i in range(src.size):
        if mask[i * isz] != 0:
            dst[n] = src[i]      # n <= i, so an in-place gather reads each lane before it is overwritten
            n += 1
    for i in range(n, dst.size):
        dst[i] = 0
    return n


@aicore
def vinterleave(c, dst0, dst1, a, b):
    """MicroAPI::Interleave(dst0, dst1, a, b): a0 b0 a1 b1 ... ; dst0 takes the first VL bytes, dst1 the rest.
    The four registers must be distinct."""
    if not _instr(c, CALL_R_INTERLEAVE, KIND_MOVE):
        return
    if not _same_type(c, CALL_R_INTERLEAVE, dst0, a) or not _same_type(c, CALL_R_INTERLEAVE, dst1, b):
        return
    n = a.size
    h = n // 2
    for i in range(h):
        dst0[2 * i] = a[i]
        dst0[2 * i + 1] = b[i]
    for i in range(h):
        dst1[2 * i] = a[h + i]
        dst1[2 * i + 1] = b[h + i]


@aicore
def vdeinterleave(c, dst0, dst1, a, b):
    """MicroAPI::DeInterleave(dst0, dst1, a, b): the even elements of the pair (a, b) to dst0, the odd ones to
    dst1. The four registers must be distinct."""
    if not _instr(c, CALL_R_DEINTERLEAVE, KIND_MOVE):
        return
    if not _same_type(c, CALL_R_DEINTERLEAVE, dst0, a) or not _same_type(c, CALL_R_DEINTERLEAVE, dst1, b):
        return
    n = a.size
    h = n // 2
    for i in range(h):
        dst0[i] = a[2 * i]
        dst1[i] = a[2 * i + 1]
        dst0[h + i] = b[2 * i]
        dst1[h + i] = b[2 * i + 1]


@aicore
def vinterleave_inplace(c, a, b):
    """MicroAPI::Interleave(a, b, a, b): a0 b0 a1 b1 ... of the two registers, the first VL bytes back into a and
    the rest into b (the in-place form both MX gathers use)."""
    if not _instr(c, CALL_R_INTERLEAVE, KIND_MOVE):
        return
    if not _same_type(c, CALL_R_INTERLEAVE, a, b):
        return
    if data_address(a) == data_address(b):
        fault(c, F_PARAM, CALL_R_INTERLEAVE, P_MASK, 0, 1, 1)
        return
    # whole elements (not bytes) through the scratch pair: one typed copy per lane
    if a.itemsize == 4:
        _interleave_words(_vtmp_u8(c).view(np.uint32), a.view(np.uint32), b.view(np.uint32))
    elif a.itemsize == 2:
        _interleave_words(_vtmp_u8(c).view(np.uint16), a.view(np.uint16), b.view(np.uint16))
    else:
        _interleave_words(_vtmp_u8(c), a.view(np.uint8), b.view(np.uint8))


@aicore
def _interleave_words(tmp, a, b):
    """a, b = the first / second half of a0 b0 a1 b1 ... (tmp: scratch of 2 registers of the same element type)."""
    n = a.size
    tmp[:n] = a
    tmp[n:2 * n] = b
    h = n // 2
    for i in range(h):
        a[2 * i] = tmp[i]
        a[2 * i + 1] = tmp[n + i]
        b[2 * i] = tmp[h + i]
        b[2 * i + 1] = tmp[n + h + i]


@aicore
def vpack_lowest(c, dst, src):
    """MicroAPI::Pack<uint16_t, uint32_t, HighLowPart::LOWEST>(dst, src): the low 16 bits of the 64 32-bit lanes
    of src to the first 64 16-bit lanes of dst, the upper 64 lanes zeroed; in place allowed."""
    if not _instr(c, CALL_R_PACK, KIND_MOVE):
        return
    if dst.itemsize != 2 or src.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_PACK, dst.itemsize, src.itemsize)
        return
    for i in range(64):
        dst[i] = src[i] & 0xFFFF        # lane i's low half is dst[2i] >= dst[i]: read before it is overwritten
    for i in range(64, 128):
        dst[i] = 0


@aicore
def vunpack_u16_to_u32(c, dst, src):
    """MicroAPI::UnPack(RegTensor<uint32_t>& dst, RegTensor<uint16_t>& src) (lower half): uint16 element i of src
    (i < 64) zero-extended into 32-bit lane i of dst (dst a vreg_u32)."""
    if not _instr(c, CALL_R_UNPACK, KIND_CAST):
        return
    if src.itemsize != 2 or dst.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_UNPACK, dst.itemsize, src.itemsize)
        return
    for i in range(64):
        dst[i] = src[i]
