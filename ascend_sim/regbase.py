"""The arch35 register-based vector model: `__VEC_SCOPE__` functions over MicroAPI registers (Ascend 950 only).

A VF is bracketed by `vec_scope_begin(c)` / `vec_scope_end(c)`. Inside it a kernel works on
* RegTensor<T>: `vreg_f32(c, r)` etc., a typed view of vector register r (256 bytes) of the per-core register
  file, which lives in the core's state array (layout.REG_BASE), so no instruction or VF allocates;
* MaskReg: `mreg(c, m)`, 256 bytes, one predicate byte per byte lane. A lane of a T-typed instruction is active
  when the predicate byte of its FIRST byte is set (the hardware's per-byte predicate, read at the lane's start);
  CreateMask / UpdateMask / Compare set every byte of a lane, so a mask made for one width reads the same
  lanes at that width.
Inactive lanes of a destination register are zeroed (MaskMergeMode::ZEROING, MicroAPI's default) or kept
(MERGING), chosen by the `mode` argument.

Each instruction counts as one call (fault records locate it) and one register instruction of the open VF;
the VF is charged at `vec_scope_end` as ONE PIPE_V instruction of n repeats, n = register instructions inside it,
at the cost model's cycles per repeat for CALL_VF (an assumed figure: one register instruction issues per
CALL_VF repeat cost, as a pipelined VF issues about one instruction per cycle). In checked mode every UB load /
store is a PIPE_V UB access of CALL_VF.

reg_load_unalign / reg_store_unalign read / write their bytes directly (no stream state). The block for the MX
gathers at the end adds LoadDist DIST_DINTLV_B16 / DIST_E2B_B16, StoreDist DIST_PACK_B16, raw-pointer loads and
stores (a `__ubuf__` address may run past the LocalTensor it starts in, not past the UB), an UnalignReg store
stream that holds bytes until their 32-byte block is complete or DataCopyUnAlignPost flushes them, and the casts
fp16 -> bf16, fp16 / bf16 -> fp32 (RegLayout), fp32 -> bf16, fp32 -> FP8 (RINT + SAT), bf16 -> FP4. Not modelled:
the other LoadDist / StoreDist modes and width casts.
"""
from __future__ import annotations

import numpy as np

from ._jit import aicore
from . import check as chk
from .dtypes import (CAST_CEIL, CAST_FLOOR, CAST_ODD, CAST_RINT, CAST_ROUND, CAST_TRUNC, DT_FLOAT, DT_FLOAT16, DT_INT32,
                     f32_bits_to_f16_bits)
from .faults import fault, issue
from .layout import (CALL_R_ARANGE, CALL_R_ARITH, CALL_R_GATHER_MASK, CALL_R_INTERLEAVE, CALL_R_CAST, CALL_R_COMPARE, CALL_R_CREATE_MASK, CALL_R_DUPLICATE,
                     CALL_R_LOAD, CALL_R_MASK_AND, CALL_R_REDUCE, CALL_R_SELECT, CALL_R_STORE, CALL_R_UPDATE_MASK, CALL_R_VEC_SCOPE,
                     CALL_VF, CAP_NPU_ARCH, CHK_MODE, ERR_BASE, F_CAST_PAIR, F_ELEM_TYPE, F_PARAM, F_UB_ALIGN,
                     F_UB_OOB, F_UNSUPPORTED, MREG_BASE, N_MREGS, N_VREGS, PIPE_V, P_COUNT, P_MASK, REG_BASE,
                     VF_INSTR, VF_KIND_BASE, VF_OPEN, VREG_WORDS)
from .local import note_ub_write, ub_offset
from .timeline import vector

VL = 256                 # bytes of one vector register
REGBASE_ARCH = 3510      # npu_arch of Ascend 950, the only chip with MicroAPI

# MaskPattern (CreateMask): a positive value n is VLn (the first n lanes); the others are:
PAT_ALL = -1             # every lane
PAT_ALLF = -2            # no lane
PAT_H = -3               # the first half of the lanes
PAT_Q = -4               # the first quarter
PAT_M3 = -5              # the largest multiple of 3 lanes
PAT_M4 = -6              # the largest multiple of 4 lanes

LOAD_NORM = 0            # LoadDist::DIST_NORM: VL bytes from a 32-byte aligned address
LOAD_BRC = 1             # DIST_BRC_B8/B16/B32: one element broadcast to every lane
STORE_NORM = 0           # StoreDist::DIST_NORM_B8/B16/B32

LAYOUT_ZERO = 0          # RegLayout::ZERO: the narrow element sits in the even (low) half of its wide lane
LAYOUT_ONE = 1           # RegLayout::ONE: in the odd (high) half

NO_SAT = 0               # SatMode
SAT = 1

ZEROING = 0              # MaskMergeMode
MERGING = 1

CMP_EQ, CMP_NE, CMP_GT, CMP_GE, CMP_LT, CMP_LE = range(6)   # CMPMODE

OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAX, OP_MIN = range(6)
KIND_MASK, KIND_LOAD, KIND_STORE, KIND_ARITH, KIND_CAST, KIND_CMPSEL, KIND_REDUCE, KIND_MOVE = range(8)

# mode -1 of an F_UNSUPPORTED record from this module: the instruction ran outside a __VEC_SCOPE__
MODE_NO_SCOPE = -1


@aicore
def vec_scope_begin(c):
    """Open a VF (`__VEC_SCOPE__`); False if it must not run (an earlier fault, or a chip without MicroAPI)."""
    if not issue(c, CALL_R_VEC_SCOPE):
        return False
    if c.state[CAP_NPU_ARCH] != REGBASE_ARCH:
        fault(c, F_UNSUPPORTED, CALL_R_VEC_SCOPE, DT_FLOAT, 0, c.state[CAP_NPU_ARCH])
        return False
    c.state[VF_OPEN] = 1
    c.state[VF_INSTR] = 0
    return True


@aicore
def vec_scope_end(c):
    """Close the VF: it takes PIPE_V as one instruction of (register instructions inside it) repeats."""
    if c.state[VF_OPEN] == 0:
        return
    c.state[VF_OPEN] = 0
    if c.state[ERR_BASE] == 0:
        vector(c, CALL_VF, c.state[VF_INSTR])


@aicore
def _instr(c, call, kind):
    """Prologue of one register instruction: False if it must do nothing."""
    if not issue(c, call):
        return False
    if c.state[CAP_NPU_ARCH] != REGBASE_ARCH:
        fault(c, F_UNSUPPORTED, call, DT_FLOAT, 0, c.state[CAP_NPU_ARCH])
        return False
    if c.state[VF_OPEN] == 0:
        fault(c, F_UNSUPPORTED, call, DT_FLOAT, MODE_NO_SCOPE, c.state[CAP_NPU_ARCH])
        return False
    c.state[VF_INSTR] += 1
    c.state[VF_KIND_BASE + kind] += 1
    return True


@aicore
def _vreg_words(c, r):
    base = REG_BASE + (r % N_VREGS) * VREG_WORDS
    return c.state[base: base + VREG_WORDS]


# RegTensor<T> views of register r (0..31); r is taken modulo 32, so a view never leaves the register file.
@aicore
def vreg_f32(c, r):
    return _vreg_words(c, r).view(np.float32)


@aicore
def vreg_i32(c, r):
    return _vreg_words(c, r).view(np.int32)


@aicore
def vreg_u32(c, r):
    return _vreg_words(c, r).view(np.uint32)


@aicore
def vreg_i16(c, r):
    return _vreg_words(c, r).view(np.int16)


@aicore
def vreg_u16(c, r):
    """RegTensor<half> / <bfloat16_t> as their bit patterns."""
    return _vreg_words(c, r).view(np.uint16)


@aicore
def vreg_u8(c, r):
    return _vreg_words(c, r).view(np.uint8)


@aicore
def vreg_i8(c, r):
    return _vreg_words(c, r).view(np.int8)


@aicore
def mreg(c, m):
    """MaskReg m (0..7, modulo 8): 256 predicate bytes."""
    base = MREG_BASE + (m % N_MREGS) * VREG_WORDS
    return c.state[base: base + VREG_WORDS].view(np.uint8)


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
def _ub_span(c, call, t, offset, nbytes, align):
    """UB byte address of element `offset` of LocalTensor t, checked: nbytes from there stay in t (and so in the
    UB), the address is `align`-byte aligned. -1 after a fault."""
    base = ub_offset(c, t, call)
    if base < 0:
        return -1
    start = base + offset * t.itemsize
    if offset < 0 or offset * t.itemsize + nbytes > t.nbytes:
        fault(c, F_UB_OOB, call, base, offset * t.itemsize + nbytes, t.nbytes)
        return -1
    if start % align != 0:
        fault(c, F_UB_ALIGN, call, start, align)
        return -1
    return start


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
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return offset + count
    if dst.itemsize != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_LOAD, dst.itemsize, t.itemsize)
        return offset + count
    if count < 0 or count > lanes:
        fault(c, F_PARAM, CALL_R_LOAD, P_COUNT, count, 0, lanes)
        return offset + count
    a = _ub_span(c, CALL_R_LOAD, t, offset, count * t.itemsize, t.itemsize)
    if a < 0:
        return offset + count
    chk.ub(c, CALL_VF, PIPE_V, a, count * t.itemsize, False)
    for i in range(count):
        dst[i] = t[offset + i]
    for i in range(count, lanes):
        dst[i] = 0
    return offset + count


@aicore
def reg_store(c, t, src, offset, mask):
    """DataCopy<T, DIST_NORM>(t + offset, src, mask): the active lanes of src to a 32-byte aligned address; the
    bytes of inactive lanes are left as they were. Only the span up to the last active lane must lie in t.
    Returns offset + lanes (POST_MODE_UPDATE)."""
    lanes = src.size
    isz = src.itemsize
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + lanes
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + lanes
    last = 0
    for i in range(lanes):
        if mask[i * isz] != 0:
            last = i + 1
    a = _ub_span(c, CALL_R_STORE, t, offset, last * isz, 32)
    if a < 0:
        return offset + lanes
    chk.ub(c, CALL_VF, PIPE_V, a, last * isz, True)
    for i in range(last):
        if mask[i * isz] != 0:
            t[offset + i] = src[i]
    note_ub_write(c, a + last * isz)
    return offset + lanes


@aicore
def reg_store_unalign(c, t, src, offset, count):
    """DataCopyUnAlign + DataCopyUnAlignPost: the first `count` lanes of src to any element address (the flush is
    implied: the bytes land at once). Returns offset + count."""
    lanes = src.size
    isz = src.itemsize
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + count
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + count
    if count < 0 or count > lanes:
        fault(c, F_PARAM, CALL_R_STORE, P_COUNT, count, 0, lanes)
        return offset + count
    a = _ub_span(c, CALL_R_STORE, t, offset, count * isz, isz)
    if a < 0:
        return offset + count
    chk.ub(c, CALL_VF, PIPE_V, a, count * isz, True)
    for i in range(count):
        t[offset + i] = src[i]
    note_ub_write(c, a + count * isz)
    return offset + count


@aicore
def _same_type(c, call, x, y):
    if x.itemsize != y.itemsize:
        fault(c, F_ELEM_TYPE, call, x.itemsize, y.itemsize)
        return False
    return True


@aicore
def _binary(c, op, dst, a, b, mask, mode):
    """Add / Sub / Mul / Div / Max / Min (dst, a, b, mask) with MaskMergeMode `mode`."""
    if not _instr(c, CALL_R_ARITH, KIND_ARITH):
        return
    if not _same_type(c, CALL_R_ARITH, dst, a) or not _same_type(c, CALL_R_ARITH, dst, b):
        return
    # one loop per operation (the operation is loop-invariant: no per-lane dispatch)
    if op == OP_ADD:
        _add_lanes(dst, a, b, mask, mode)
    elif op == OP_SUB:
        _sub_lanes(dst, a, b, mask, mode)
    elif op == OP_MUL:
        _mul_lanes(dst, a, b, mask, mode)
    elif op == OP_DIV:
        _div_lanes(dst, a, b, mask, mode)
    elif op == OP_MAX:
        _max_lanes(dst, a, b, mask, mode)
    else:
        _min_lanes(dst, a, b, mask, mode)


@aicore
def _add_lanes(dst, a, b, mask, mode):
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = a[i] + b[i]
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def _sub_lanes(dst, a, b, mask, mode):
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = a[i] - b[i]
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def _mul_lanes(dst, a, b, mask, mode):
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = a[i] * b[i]
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def _div_lanes(dst, a, b, mask, mode):
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = a[i] / b[i]
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def _max_lanes(dst, a, b, mask, mode):
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            x = a[i]
            y = b[i]
            dst[i] = x if x >= y or x != x else y
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def _min_lanes(dst, a, b, mask, mode):
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            x = a[i]
            y = b[i]
            dst[i] = x if x <= y or x != x else y
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vadd(c, dst, a, b, mask, mode=ZEROING):
    _binary(c, OP_ADD, dst, a, b, mask, mode)       # MicroAPI::Add


@aicore
def vsub(c, dst, a, b, mask, mode=ZEROING):
    _binary(c, OP_SUB, dst, a, b, mask, mode)       # MicroAPI::Sub


@aicore
def vmul(c, dst, a, b, mask, mode=ZEROING):
    _binary(c, OP_MUL, dst, a, b, mask, mode)       # MicroAPI::Mul


@aicore
def vdiv(c, dst, a, b, mask, mode=ZEROING):
    _binary(c, OP_DIV, dst, a, b, mask, mode)       # MicroAPI::Div (IEEE: x/0 is +-Inf, 0/0 NaN)


@aicore
def vmax(c, dst, a, b, mask, mode=ZEROING):
    _binary(c, OP_MAX, dst, a, b, mask, mode)       # MicroAPI::Max (a NaN in a propagates)


@aicore
def vmin(c, dst, a, b, mask, mode=ZEROING):
    _binary(c, OP_MIN, dst, a, b, mask, mode)       # MicroAPI::Min


@aicore
def _scalar_op(c, op, dst, a, s, mask, mode):
    if not _instr(c, CALL_R_ARITH, KIND_ARITH):
        return
    if not _same_type(c, CALL_R_ARITH, dst, a):
        return
    isz = dst.itemsize
    v = s
    for i in range(dst.size):
        if mask[i * isz] != 0:
            if op == OP_ADD:
                dst[i] = a[i] + v
            else:
                dst[i] = a[i] * v
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vadds(c, dst, a, s, mask, mode=ZEROING):
    """MicroAPI::Adds: s must already be of dst's element type (np.float32(..) for fp32)."""
    _scalar_op(c, OP_ADD, dst, a, s, mask, mode)


@aicore
def vmuls(c, dst, a, s, mask, mode=ZEROING):
    """MicroAPI::Muls: s must already be of dst's element type."""
    _scalar_op(c, OP_MUL, dst, a, s, mask, mode)


@aicore
def vabs(c, dst, a, mask, mode=ZEROING):
    """MicroAPI::Abs (-0 -> +0, NaN stays NaN)."""
    if not _instr(c, CALL_R_ARITH, KIND_ARITH):
        return
    if not _same_type(c, CALL_R_ARITH, dst, a):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = abs(a[i])
        elif mode == ZEROING:
            dst[i] = 0


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
def varange(c, dst, start):
    """MicroAPI::Arange(dst, start): lane i gets start + i (every lane)."""
    if not _instr(c, CALL_R_ARANGE, KIND_MOVE):
        return
    for i in range(dst.size):
        dst[i] = start + i


@aicore
def _round(x, rnd):
    if rnd == CAST_RINT:
        return np.rint(x)
    if rnd == CAST_FLOOR:
        return np.floor(x)
    if rnd == CAST_CEIL:
        return np.ceil(x)
    if rnd == CAST_TRUNC:
        return np.trunc(x)
    # ROUND: half away from zero
    return np.floor(abs(x) + 0.5) * (1.0 if x >= 0 else -1.0)


@aicore
def vcast_f32_to_i32(c, dst, src, rnd, mask, mode=ZEROING):
    """MicroAPI::Cast<int32_t, float, CastTrait{.., SatMode::SAT, rnd}>: rounded by rnd (CAST_RINT / ROUND /
    FLOOR / CEIL / TRUNC), saturated to [-2^31, 2^31-1]; NaN gives 0."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if rnd != CAST_RINT and rnd != CAST_ROUND and rnd != CAST_FLOOR and rnd != CAST_CEIL and rnd != CAST_TRUNC:
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_INT32, DT_FLOAT, rnd)
        return
    for i in range(dst.size):
        if mask[i * 4] != 0:
            x = np.float64(src[i])
            if x != x:
                dst[i] = 0
                continue
            r = _round(x, rnd)
            if r >= 2147483647.0:
                dst[i] = 2147483647
            elif r <= -2147483648.0:
                dst[i] = -2147483648
            else:
                dst[i] = np.int32(r)
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vcast_i32_to_f32(c, dst, src, rnd, mask, mode=ZEROING):
    """MicroAPI::Cast<float, int32_t, CastTrait{.., rnd}>: only CAST_RINT (round half to even) is modelled."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if rnd != CAST_RINT:
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_FLOAT, DT_INT32, rnd)
        return
    for i in range(dst.size):
        if mask[i * 4] != 0:
            dst[i] = np.float32(src[i])    # int32 -> fp32 conversion rounds to nearest even
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def _cmp(x, y, cmp):
    if cmp == CMP_EQ:
        return x == y
    if cmp == CMP_NE:
        return x != y
    if cmp == CMP_GT:
        return x > y
    if cmp == CMP_GE:
        return x >= y
    if cmp == CMP_LT:
        return x < y
    return x <= y


@aicore
def vcompare(c, dst_mask, a, b, cmp, mask):
    """MicroAPI::Compare<T, cmp>(dst_mask, a, b, mask): a lane's predicate bytes are 1 where it is active and the
    comparison holds (IEEE: NaN compares unequal to everything), else 0."""
    if not _instr(c, CALL_R_COMPARE, KIND_CMPSEL):
        return
    if not _same_type(c, CALL_R_COMPARE, a, b):
        return
    isz = a.itemsize
    for i in range(a.size):
        p = 1 if mask[i * isz] != 0 and _cmp(a[i], b[i], cmp) else 0
        for k in range(isz):
            dst_mask[i * isz + k] = p


@aicore
def vcompare_scalar(c, dst_mask, a, s, cmp, mask):
    """MicroAPI::CompareScalar(dst_mask, a, scalar, mask)."""
    if not _instr(c, CALL_R_COMPARE, KIND_CMPSEL):
        return
    isz = a.itemsize
    for i in range(a.size):
        p = 1 if mask[i * isz] != 0 and _cmp(a[i], s, cmp) else 0
        for k in range(isz):
            dst_mask[i * isz + k] = p


@aicore
def vselect(c, dst, a, b, sel):
    """MicroAPI::Select(dst, a, b, sel): lane i is a[i] where sel is set, else b[i]."""
    if not _instr(c, CALL_R_SELECT, KIND_CMPSEL):
        return
    if not _same_type(c, CALL_R_SELECT, dst, a) or not _same_type(c, CALL_R_SELECT, dst, b):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        dst[i] = a[i] if sel[i * isz] != 0 else b[i]


@aicore
def vreduce_sum(c, dst, src, mask):
    """MicroAPI::ReduceSum(dst, src, mask): dst lane 0 = pairwise-tree sum of the active lanes (inactive ones add
    0), the other lanes 0. Integers wrap."""
    if not _instr(c, CALL_R_REDUCE, KIND_REDUCE):
        return
    if not _same_type(c, CALL_R_REDUCE, dst, src):
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
def _reduce_ext(c, dst, src, mask, want_max):
    if not _instr(c, CALL_R_REDUCE, KIND_REDUCE):
        return
    if not _same_type(c, CALL_R_REDUCE, dst, src):
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
    _reduce_ext(c, dst, src, mask, True)


@aicore
def vreduce_min(c, dst, src, mask):
    """MicroAPI::ReduceMin, as vreduce_max."""
    _reduce_ext(c, dst, src, mask, False)


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
    if not _instr(c, CALL_R_INTERLEAVE, KIND_MOVE):
        return
    if not _same_type(c, CALL_R_INTERLEAVE, dst0, a) or not _same_type(c, CALL_R_INTERLEAVE, dst1, b):
        return
    n = a.size
    h = n // 2
    for i in range(h):
        dst0[i] = a[2 * i]
        dst1[i] = a[2 * i + 1]
        dst0[h + i] = b[2 * i]
        dst1[h + i] = b[2 * i + 1]


@aicore
def vmask_and(c, dst, a, b, mask):
    """MicroAPI::MaskAnd(dst, a, b, mask): predicate bytes a & b where mask is set, else 0."""
    if not _instr(c, CALL_R_MASK_AND, KIND_MASK):
        return
    for i in range(VL):
        dst[i] = a[i] & b[i] if mask[i] != 0 else 0


@aicore
def reg_store_pack4(c, t, src, offset, mask):
    """DataCopy<T, StoreDist::DIST_PACK4_B32>(t + offset, src, mask): the low byte of each active 32-bit lane of
    src to consecutive bytes of the 1-byte tensor t (32-byte aligned). Returns offset + 64."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + 64
    if t.itemsize != 1 or src.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, src.itemsize)
        return offset + 64
    last = 0
    for i in range(64):
        if mask[i * 4] != 0:
            last = i + 1
    a = _ub_span(c, CALL_R_STORE, t, offset, last, 32)
    if a < 0:
        return offset + 64
    chk.ub(c, CALL_VF, PIPE_V, a, last, True)
    for i in range(last):
        if mask[i * 4] != 0:
            t[offset + i] = src[i] & 0xFF
    note_ub_write(c, a + last)
    return offset + 64


@aicore
def vcast_f32_to_f16(c, dst, src, rnd, layout, mask, mode=ZEROING):
    """MicroAPI::Cast<half, float, CastTrait{layout, .., rnd}>(dst, src, mask): fp32 lane i (active by mask byte 4i)
    to the half in uint16 slot 2i + layout of dst (a vreg_u16); the other slot of the lane is zeroed. Round modes
    RINT / ROUND / FLOOR / CEIL / TRUNC / ODD; overflow goes to +-Inf (or the largest finite for the modes that
    round towards it), NaN stays a quiet NaN."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 4 or dst.itemsize != 2:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if (rnd != CAST_RINT and rnd != CAST_ROUND and rnd != CAST_FLOOR and rnd != CAST_CEIL and rnd != CAST_TRUNC
            and rnd != CAST_ODD):
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_FLOAT16, DT_FLOAT, rnd)
        return
    if layout != LAYOUT_ZERO and layout != LAYOUT_ONE:
        fault(c, F_PARAM, CALL_R_CAST, P_MASK, layout, LAYOUT_ZERO, LAYOUT_ONE)
        return
    bits = src.view(np.uint32)
    for i in range(64):
        if mask[i * 4] != 0:
            h = f32_bits_to_f16_bits(bits[i], rnd)
            dst[2 * i + layout] = h
            dst[2 * i + 1 - layout] = 0
        elif mode == ZEROING:
            dst[2 * i] = 0
            dst[2 * i + 1] = 0


@aicore
def vcast_u16_to_u32(c, dst, src, layout, mask, mode=ZEROING):
    """MicroAPI::Cast<uint32_t, uint16_t, CastTrait{layout}>(dst, src, mask): 32-bit lane i of dst (active by mask
    byte 4i) gets uint16 element 2i + layout of src (RegLayout ZERO: the even elements, ONE: the odd ones)."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 2 or dst.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if layout != LAYOUT_ZERO and layout != LAYOUT_ONE:
        fault(c, F_PARAM, CALL_R_CAST, P_MASK, layout, LAYOUT_ZERO, LAYOUT_ONE)
        return
    for i in range(64):
        if mask[i * 4] != 0:
            dst[i] = src[2 * i + layout]
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vcast_i32_to_u8(c, dst, src, sat, mask, mode=ZEROING):
    """MicroAPI::Cast<uint8_t, int32_t, CastTrait{RegLayout::ZERO, sat}>(dst, src, mask): int32 lane i (active by
    mask byte 4i) to byte 4i of dst (a vreg_u8), the lane's other three bytes zeroed. NO_SAT keeps the low byte
    (modulo 256), SAT clamps to [0, 255]."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 4 or dst.itemsize != 1:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    for i in range(64):
        if mask[i * 4] != 0:
            v = np.int64(src[i])
            if sat == SAT:
                v = 0 if v < 0 else (255 if v > 255 else v)
            dst[4 * i] = v & 0xFF
            dst[4 * i + 1] = 0
            dst[4 * i + 2] = 0
            dst[4 * i + 3] = 0
        elif mode == ZEROING:
            for k in range(4):
                dst[4 * i + k] = 0


# --- MX quantising gathers (MoeInitRoutingV3 moe_v3_gather_mxfp8_quant.h / moe_v3_gather_mxfp4_quant.h) ------------
# The instructions their VFs add to the model. Every one is checked (element types, bounds, alignment, modes),
# counts as one register instruction and keeps the lanes the hardware defines; in-place permutations read their
# sources through the scratch at layout.VTMP_BASE first.
from ._memory import data_address, ub_view  # noqa: E402
from .dtypes import (DT_BF16, DT_FLOAT4_E2M1, DT_FLOAT8_E4M3FN, DT_FLOAT8_E5M2, bf16_bits_to_f32_bits,  # noqa: E402
                     f16_bits_to_f32_bits, f32_bits_to_bf16_bits, f32_bits_to_bf16_bits_rint,
                     f32_bits_to_mini_float_bits, f32_from_bits,
                     view_f32_as_u32)
from .layout import N_UREGS, UREG_BASE, UREG_WORDS, VTMP_BASE  # noqa: E402

@aicore
def _vtmp_u8(c):
    return c.state[VTMP_BASE: VTMP_BASE + 2 * VREG_WORDS].view(np.uint8)


@aicore
def _ub_reach(c, call, t, offset, nbytes, align):
    """UB byte address of element `offset` of t read as a raw `__ubuf__` pointer: nbytes from there must stay
    in the UB (not in t: a register load may run past the end of the buffer it starts in, as the kernels'
    whole-register loads of short rows do), `align`-byte aligned. -1 after a fault."""
    base = ub_offset(c, t, call)
    if base < 0:
        return -1
    start = base + offset * t.itemsize
    if offset < 0 or start + nbytes > c.ub.size:
        fault(c, F_UB_OOB, call, base, offset * t.itemsize + nbytes, c.ub.size - base)
        return -1
    if start % align != 0:
        fault(c, F_UB_ALIGN, call, start, align)
        return -1
    return start


@aicore
def _b16_operands(c, call, a, b):
    if a.itemsize != 2 or b.itemsize != 2:
        fault(c, F_ELEM_TYPE, call, a.itemsize, b.itemsize)
        return False
    return True


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
def reg_store_pack_b16(c, t, src, offset, mask):
    """DataCopy<uint16_t, POST_MODE_UPDATE, StoreDist::DIST_PACK_B16>(addr, src, 64, mask): the low byte of each
    active 16-bit lane i of src to byte i from the 32-byte aligned address of t + offset (t a 16-bit tensor, so
    128 lanes fill 64 of its elements; bytes of inactive lanes are left as they were). Returns offset + 64."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + 64
    if not _b16_operands(c, CALL_R_STORE, t, src):
        return offset + 64
    last = 0
    for i in range(128):
        if mask[i * 2] != 0:
            last = i + 1
    a = _ub_reach(c, CALL_R_STORE, t, offset, last, 32)
    if a < 0:
        return offset + 64
    chk.ub(c, CALL_VF, PIPE_V, a, last, True)
    s = src.view(np.uint16)
    for i in range(last):
        if mask[i * 2] != 0:
            c.ub[a + i] = s[i] & 0xFF
    note_ub_write(c, a + last)
    return offset + 64


@aicore
def reg_store_span(c, t, src, offset, mask):
    """DataCopy<T, POST_MODE_UPDATE>(addr, src, lanes, mask) through a raw UB pointer (32-byte aligned): the
    active lanes, up to the last, must stay in the UB. Returns offset + lanes."""
    lanes = src.size
    isz = src.itemsize
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + lanes
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + lanes
    last = 0
    for i in range(lanes):
        if mask[i * isz] != 0:
            last = i + 1
    a = _ub_reach(c, CALL_R_STORE, t, offset, last * isz, 32)
    if a < 0:
        return offset + lanes
    chk.ub(c, CALL_VF, PIPE_V, a, last * isz, True)
    s = src.view(np.uint8)
    for i in range(last):
        if mask[i * isz] != 0:
            for k in range(isz):
                c.ub[a + i * isz + k] = s[i * isz + k]
    note_ub_write(c, a + last * isz)
    return offset + lanes


@aicore
def reg_store_pack4_span(c, t, src, offset, mask):
    """DataCopy<int8_t, POST_MODE_UPDATE, StoreDist::DIST_PACK4_B32>(addr, src, 64, mask) through a raw UB
    pointer: as reg_store_pack4, the low byte of each active 32-bit lane to consecutive bytes from the 32-byte
    aligned address t + offset (t a 1-byte tensor); the bytes up to the last active lane must stay in the UB.
    Returns offset + 64."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + 64
    if t.itemsize != 1 or src.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, src.itemsize)
        return offset + 64
    last = 0
    for i in range(64):
        if mask[i * 4] != 0:
            last = i + 1
    a = _ub_reach(c, CALL_R_STORE, t, offset, last, 32)
    if a < 0:
        return offset + 64
    chk.ub(c, CALL_VF, PIPE_V, a, last, True)
    s = src.view(np.uint32)
    for i in range(last):
        if mask[i * 4] != 0:
            c.ub[a + i] = s[i] & 0xFF
    note_ub_write(c, a + last)
    return offset + 64


# UnalignReg: a store stream writes a 32-byte UB block once the stream has filled it (or passed its end) and holds
# the bytes of a block it has only begun; DataCopyUnAlignPost writes what is held. The bytes of a block the stream
# starts inside are written alone (the block's other bytes are left as they were).
@aicore
def _ureg_words(c, u):
    base = UREG_BASE + (u % N_UREGS) * UREG_WORDS
    return c.state[base: base + UREG_WORDS]


@aicore
def unalign_reg(c, u):
    """`UnalignReg u;` (u 0..3): an empty store stream. Not an instruction. Returns u."""
    w = _ureg_words(c, u)
    w[4] = -1
    w[5] = 0
    return u


@aicore
def _ureg_write_held(c, w):
    held = w[0:4].view(np.uint8)
    a = w[4]
    n = w[5]
    if n > 0:
        chk.ub(c, CALL_VF, PIPE_V, a, n, True)
        for i in range(n):
            c.ub[a + i] = held[i]
        note_ub_write(c, a + n)
    w[4] = -1
    w[5] = 0


@aicore
def reg_store_unalign_stream(c, t, src, u, offset, count):
    """DataCopyUnAlign<T, POST_MODE_UPDATE>(addr, src, ureg u, count): the first `count` lanes of src continue the
    stream of UnalignReg u at element `offset` of t (any element address; the stream must go on where it stopped,
    else F_PARAM). Bytes that complete a 32-byte block are written, the rest are held in u. Returns offset + count.
    """
    lanes = src.size
    isz = src.itemsize
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + count
    if isz != t.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, isz)
        return offset + count
    if count < 0 or count > lanes:
        fault(c, F_PARAM, CALL_R_STORE, P_COUNT, count, 0, lanes)
        return offset + count
    a = _ub_reach(c, CALL_R_STORE, t, offset, count * isz, isz)
    if a < 0:
        return offset + count
    w = _ureg_words(c, u)
    held = w[0:4].view(np.uint8)
    if w[5] > 0 and w[4] + w[5] != a:
        fault(c, F_PARAM, CALL_R_STORE, P_COUNT, a, w[4] + w[5], w[4] + w[5])
        return offset + count
    if w[5] == 0:
        w[4] = a
    s = src.view(np.uint8)
    for i in range(count * isz):
        held[w[5]] = s[i]
        w[5] += 1
        if (w[4] + w[5]) % 32 == 0:
            _ureg_write_held(c, w)
            w[4] = a + i + 1
    return offset + count


@aicore
def reg_store_unalign_post(c, t, u, offset, post):
    """DataCopyUnAlignPost(addr, ureg u, post): write the bytes u holds (the stream's tail) and empty u; the
    address must be where the stream stopped. Returns offset + post."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + post
    a = _ub_reach(c, CALL_R_STORE, t, offset, 0, t.itemsize)
    if a < 0:
        return offset + post
    w = _ureg_words(c, u)
    if w[5] > 0 and w[4] + w[5] != a:
        fault(c, F_PARAM, CALL_R_STORE, P_COUNT, a, w[4] + w[5], w[4] + w[5])
        return offset + post
    _ureg_write_held(c, w)
    return offset + post


@aicore
def vmask_deinterleave(c, dst0, dst1, a, b, elem_bytes):
    """MicroAPI::MaskDeInterleave<T>(dst0, dst1, a, b): the 2 * lanes predicates of T-lanes (a's, then b's) split
    into the even lanes (to dst0) and the odd ones (to dst1); in place allowed."""
    if not _instr(c, CALL_R_MASK_AND, KIND_MASK):
        return
    if elem_bytes != 1 and elem_bytes != 2 and elem_bytes != 4:
        fault(c, F_PARAM, CALL_R_MASK_AND, P_MASK, elem_bytes, 1, 4)
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


@aicore
def vmask_or(c, dst, a, b, mask):
    """MicroAPI::MaskOr(dst, a, b, mask): predicate bytes a | b where mask is set, else 0."""
    if not _instr(c, CALL_R_MASK_AND, KIND_MASK):
        return
    for i in range(VL):
        dst[i] = (1 if a[i] != 0 or b[i] != 0 else 0) if mask[i] != 0 else 0


@aicore
def _int_operands(c, call, x, y):
    """Bitwise instructions take unsigned / signed 16- or 32-bit registers of one width."""
    if x.itemsize != y.itemsize or (x.itemsize != 2 and x.itemsize != 4):
        fault(c, F_ELEM_TYPE, call, x.itemsize, y.itemsize)
        return False
    return True


@aicore
def vand(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::And(dst, a, b, mask) on 16- or 32-bit integer registers (vreg_u16 / vreg_i32 ...)."""
    if not _instr(c, CALL_R_ARITH, KIND_ARITH):
        return
    if not _int_operands(c, CALL_R_ARITH, dst, a) or not _int_operands(c, CALL_R_ARITH, dst, b):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = a[i] & b[i]
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def _shift(c, dst, a, n, mask, mode, left):
    if not _instr(c, CALL_R_ARITH, KIND_ARITH):
        return
    if not _int_operands(c, CALL_R_ARITH, dst, a):
        return
    bits = dst.itemsize * 8
    if n < 0 or n >= bits:
        fault(c, F_PARAM, CALL_R_ARITH, P_COUNT, n, 0, bits - 1)
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = a[i] << n if left else a[i] >> n
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vshift_rights(c, dst, a, n, mask, mode=ZEROING):
    """MicroAPI::ShiftRights(dst, a, n, mask): logical for unsigned registers, arithmetic for signed ones;
    0 <= n < element bits."""
    _shift(c, dst, a, n, mask, mode, False)


@aicore
def vshift_lefts(c, dst, a, n, mask, mode=ZEROING):
    """MicroAPI::ShiftLefts(dst, a, n, mask): bits shifted past the top are lost; 0 <= n < element bits."""
    _shift(c, dst, a, n, mask, mode, True)


@aicore
def vmaxs(c, dst, a, s, mask, mode=ZEROING):
    """MicroAPI::Maxs(dst, a, scalar, mask); s of dst's element type."""
    if not _instr(c, CALL_R_ARITH, KIND_ARITH):
        return
    if not _same_type(c, CALL_R_ARITH, dst, a):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            x = a[i]
            dst[i] = x if x >= s or x != x else s
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vreduce_max_with_datablock(c, dst, src, mask):
    """MicroAPI::ReduceMaxWithDataBlock(dst, src, mask): lane k of dst (k < 8) = the largest active lane of the
    register's 32-byte block k (0 if none is active; a NaN wins for floats), lanes 8.. zeroed; in place allowed."""
    if not _instr(c, CALL_R_REDUCE, KIND_REDUCE):
        return
    if not _same_type(c, CALL_R_REDUCE, dst, src):
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
    if not _instr(c, CALL_R_INTERLEAVE, KIND_MOVE):
        return
    if dst.itemsize != 2 or src.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_INTERLEAVE, dst.itemsize, src.itemsize)
        return
    for i in range(64):
        dst[i] = src[i] & 0xFFFF        # lane i's low half is dst[2i] >= dst[i]: read before it is overwritten
    for i in range(64, 128):
        dst[i] = 0


@aicore
def vtruncate(c, dst, src, rnd, mask, mode=ZEROING):
    """MicroAPI::Truncate<float, rnd>(dst, src, mask): fp32 rounded to an integral fp32 (RINT / ROUND / FLOOR /
    CEIL / TRUNC); the sign of a zero result is the source's; Inf and NaN pass through."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 4 or dst.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if rnd != CAST_RINT and rnd != CAST_ROUND and rnd != CAST_FLOOR and rnd != CAST_CEIL and rnd != CAST_TRUNC:
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_FLOAT, DT_FLOAT, rnd)
        return
    for i in range(dst.size):
        if mask[i * 4] != 0:
            x = np.float64(src[i])
            if x != x or x == np.inf or x == -np.inf:
                dst[i] = src[i]
            else:
                r = _round(x, rnd)
                dst[i] = np.float32(np.copysign(r, x) if r == 0.0 else r)
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def _bf16_mul_bits(x, y):
    """bf16 bit patterns x * y, rounded half to even once (IEEE, subnormals kept, overflow to Inf)."""
    fx = f32_from_bits(bf16_bits_to_f32_bits(x))
    fy = f32_from_bits(bf16_bits_to_f32_bits(y))
    p32 = fx * fy
    if p32 == p32 and abs(p32) >= np.float32(2.0 ** -126):
        # at most 16 significant bits: the fp32 product is exact in fp32's normal range, and one that overflows
        # fp32 lies past bf16's rounding boundary too (Inf either way)
        return f32_bits_to_bf16_bits_rint(view_f32_as_u32(p32))
    p = np.float64(fx) * np.float64(fy)
    if p != p:
        return np.uint16(0x7FC0)
    neg = p < 0.0 or (p == 0.0 and np.copysign(1.0, p) < 0.0)
    sign = 0x8000 if neg else 0
    m = abs(p)
    if m < 2.0 ** -126:
        # bf16 subnormals are multiples of 2^-133; the exact product scaled to that grid, rounded half to even
        return np.uint16(sign | int(np.rint(m * 2.0 ** 133)))
    # a product of two bf16 values has at most 16 significant bits: exact in fp32 above its subnormals
    return np.uint16(f32_bits_to_bf16_bits(view_f32_as_u32(np.float32(p)), CAST_RINT))


@aicore
def vmul_bf16(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::Mul on RegTensor<bfloat16_t> (vreg_u16 bit patterns): the exact product rounded half to even to
    bf16 (IEEE: subnormals kept, overflow to Inf, NaN as 0x7FC0)."""
    if not _instr(c, CALL_R_ARITH, KIND_ARITH):
        return
    if not _b16_operands(c, CALL_R_ARITH, dst, a) or not _b16_operands(c, CALL_R_ARITH, dst, b):
        return
    for i in range(128):
        if mask[i * 2] != 0:
            dst[i] = _bf16_mul_bits(a[i], b[i])
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vcast_f16_to_bf16(c, dst, src, rnd, mask, mode=ZEROING):
    """MicroAPI::Cast<bfloat16_t, half, CastTrait{UNKNOWN, UNKNOWN, .., rnd}>(dst, src, mask), same width (vreg_u16
    bit patterns in and out): the fp16 value (exact in fp32) rounded to bf16 by rnd (CAST_TRUNC: towards zero;
    also RINT / ROUND / FLOOR / CEIL). Inf stays Inf; NaN becomes the quiet NaN 0x7FC0 with its sign (the model's
    choice: truncating the payload could otherwise turn a NaN into Inf)."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if not _b16_operands(c, CALL_R_CAST, dst, src):
        return
    if rnd != CAST_RINT and rnd != CAST_ROUND and rnd != CAST_FLOOR and rnd != CAST_CEIL and rnd != CAST_TRUNC:
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_BF16, DT_FLOAT16, rnd)
        return
    for i in range(128):
        if mask[i * 2] != 0:
            h = src[i]
            if (h & 0x7C00) == 0x7C00 and (h & 0x3FF) != 0:
                dst[i] = (h & 0x8000) | 0x7FC0
            else:
                dst[i] = f32_bits_to_bf16_bits(f16_bits_to_f32_bits(h), rnd)
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vcast_b16_to_f32(c, dst, src, is_bf16, layout, mask, mode=ZEROING):
    """MicroAPI::Cast<float, half / bfloat16_t, CastTrait{layout}>(dst, src, mask): fp32 lane i (active by mask byte
    4i) gets 16-bit element 2i + layout of src (RegLayout ZERO: the even elements, ONE: the odd ones), exactly."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 2 or dst.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if layout != LAYOUT_ZERO and layout != LAYOUT_ONE:
        fault(c, F_PARAM, CALL_R_CAST, P_MASK, layout, LAYOUT_ZERO, LAYOUT_ONE)
        return
    out = dst.view(np.uint32)
    for i in range(64):
        if mask[i * 4] != 0:
            h = src[2 * i + layout]
            out[i] = bf16_bits_to_f32_bits(h) if is_bf16 else f16_bits_to_f32_bits(h)
        elif mode == ZEROING:
            out[i] = 0


@aicore
def vcast_f32_to_bf16(c, dst, src, rnd, layout, mask, mode=ZEROING):
    """MicroAPI::Cast<bfloat16_t, float, CastTrait{layout, .., rnd}>(dst, src, mask): fp32 lane i to the bf16 in
    16-bit slot 2i + layout of dst (a vreg_u16), the lane's other slot zeroed; RINT / ROUND / FLOOR / CEIL / TRUNC /
    ODD as f32_bits_to_bf16_bits (NaN stays NaN)."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 4 or dst.itemsize != 2:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if (rnd != CAST_RINT and rnd != CAST_ROUND and rnd != CAST_FLOOR and rnd != CAST_CEIL and rnd != CAST_TRUNC
            and rnd != CAST_ODD):
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_BF16, DT_FLOAT, rnd)
        return
    if layout != LAYOUT_ZERO and layout != LAYOUT_ONE:
        fault(c, F_PARAM, CALL_R_CAST, P_MASK, layout, LAYOUT_ZERO, LAYOUT_ONE)
        return
    bits = src.view(np.uint32)
    for i in range(64):
        if mask[i * 4] != 0:
            dst[2 * i + layout] = f32_bits_to_bf16_bits(bits[i], rnd)
            dst[2 * i + 1 - layout] = 0
        elif mode == ZEROING:
            dst[2 * i] = 0
            dst[2 * i + 1] = 0


@aicore
def vcast_f32_to_fp8(c, dst, src, dt, rnd, sat, mask, mode=ZEROING):
    """MicroAPI::Cast<fp8_e4m3fn_t / fp8_e5m2_t, float, CastTrait{RegLayout::ZERO, SatMode::SAT, .., CAST_RINT}>:
    fp32 lane i (active by mask byte 4i) to the FP8 code in byte 4i of dst (a vreg_u8), the lane's other bytes
    zeroed. Round half to even onto the grid (subnormals included), the sign of zero kept, magnitudes past the
    largest finite (Inf included) saturate to it, NaN gives +0 (SAT with the default CTRL). Only CAST_RINT with
    SAT is modelled."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 4 or dst.itemsize != 1:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if (dt != DT_FLOAT8_E4M3FN and dt != DT_FLOAT8_E5M2) or rnd != CAST_RINT or sat != SAT:
        fault(c, F_CAST_PAIR, CALL_R_CAST, dt, DT_FLOAT, rnd)
        return
    bits = src.view(np.uint32)
    e4m3 = dt == DT_FLOAT8_E4M3FN
    bias = 7 if e4m3 else 15
    mbits = 3 if e4m3 else 2
    max_code = np.uint32(0x7E if e4m3 else 0x7B)
    # lanes that are normal in the FP8 format round by integer addition on the rebased pattern (the carry walks
    # into the exponent; anything past the largest finite code saturates to it); the rest take the general path
    min_normal = np.uint32((128 - bias) << 23)
    rebase = np.uint32((127 - bias) << 23)
    shift = np.uint32(23 - mbits)
    half_m1 = np.uint32((1 << (22 - mbits)) - 1)
    for i in range(64):
        if mask[i * 4] != 0:
            x = bits[i]
            mag = x & np.uint32(0x7FFFFFFF)
            if mag >= min_normal and mag < np.uint32(0x7F800000):
                r = np.uint32(mag - rebase)
                r = np.uint32(np.uint32(r + half_m1 + ((r >> shift) & np.uint32(1))) >> shift)
                code = r if r < max_code else max_code
                dst[4 * i] = np.uint8(code | ((x >> np.uint32(24)) & np.uint32(0x80)))
            else:
                dst[4 * i] = f32_bits_to_mini_float_bits(x, dt, 0)
            dst[4 * i + 1] = 0
            dst[4 * i + 2] = 0
            dst[4 * i + 3] = 0
        elif mode == ZEROING:
            for k in range(4):
                dst[4 * i + k] = 0


@aicore
def vcast_bf16_to_fp4(c, dst, src, rnd, mask, mode=ZEROING):
    """MicroAPI::Cast<fp4x2_e2m1_t, bfloat16_t, CastTrait{RegLayout::ZERO, .., CAST_RINT}>(dst, src, mask): the 128
    bf16 lanes to E2M1 codes two a byte, elements 2i (low nibble) and 2i + 1 (high nibble) in byte 4i of dst (a
    vreg_u8; the lane's other bytes zeroed), which is where StoreDist::DIST_PACK4_B32 takes them from. A pair is
    active by mask byte 4i (its first element's). Round half to even, saturate to +-6 (Inf too), NaN gives +0,
    the sign of zero kept. Only CAST_RINT is modelled."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 2 or dst.itemsize != 1:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if rnd != CAST_RINT:
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_FLOAT4_E2M1, DT_BF16, rnd)
        return
    for i in range(64):
        if mask[i * 4] != 0:
            lo = f32_bits_to_mini_float_bits(bf16_bits_to_f32_bits(src[2 * i]), DT_FLOAT4_E2M1, 0)
            hi = f32_bits_to_mini_float_bits(bf16_bits_to_f32_bits(src[2 * i + 1]), DT_FLOAT4_E2M1, 0)
            dst[4 * i] = (lo & 0xF) | ((hi & 0xF) << 4)
            dst[4 * i + 1] = 0
            dst[4 * i + 2] = 0
            dst[4 * i + 3] = 0
        elif mode == ZEROING:
            for k in range(4):
                dst[4 * i + k] = 0


@aicore
def vduplicate_all(c, dst, s):
    """MicroAPI::Duplicate(dst, scalar) without a mask: every lane."""
    if not _instr(c, CALL_R_DUPLICATE, KIND_MOVE):
        return
    for i in range(dst.size):
        dst[i] = s


# --- MoeInitRoutingV2Grad (arch35): 16-bit unpack load, fp16 / bf16 <-> fp32 casts, PACK_B32 store ---------------

HALF_LANES = VL // 4     # 16-bit elements an UNPACK_B16 load / PACK_B32 store moves (one per 32-bit lane)


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
def vcast_half_to_f32(c, dst, src, src_t, layout, mask, mode=ZEROING):
    """MicroAPI::Cast<float, half | bfloat16_t, CastTrait{layout}>(dst, src, mask): fp32 lane i of dst (active by
    mask byte 4i) gets the 16-bit value in uint16 slot 2i + layout of src (a vreg_u16), widened exactly. src_t is
    DT_FLOAT16 or DT_BF16 (the element type the bits are read as)."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 2 or dst.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if src_t != DT_FLOAT16 and src_t != DT_BF16:
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_FLOAT, src_t, 0)
        return
    if layout != LAYOUT_ZERO and layout != LAYOUT_ONE:
        fault(c, F_PARAM, CALL_R_CAST, P_MASK, layout, LAYOUT_ZERO, LAYOUT_ONE)
        return
    bits = dst.view(np.uint32)
    for i in range(64):
        if mask[i * 4] != 0:
            h = src[2 * i + layout]
            bits[i] = bf16_bits_to_f32_bits(h) if src_t == DT_BF16 else f16_bits_to_f32_bits(h)
        elif mode == ZEROING:
            bits[i] = 0


@aicore
def reg_store_pack_b32(c, t, src, offset, mask):
    """DataCopy<T, StoreDist::DIST_PACK_B32>(t + offset, src, mask) for a 16-bit T: the low 16 bits of each active
    32-bit lane i of src (uint16 slot 2i of a vreg_u16) to t[offset + i] (32-byte aligned address); inactive lanes
    leave their element as it was. Only the span up to the last active lane must lie in t. Returns offset + 64."""
    if not _instr(c, CALL_R_STORE, KIND_STORE):
        return offset + HALF_LANES
    if t.itemsize != 2 or src.itemsize != 2:
        fault(c, F_ELEM_TYPE, CALL_R_STORE, t.itemsize, src.itemsize)
        return offset + HALF_LANES
    last = 0
    for i in range(HALF_LANES):
        if mask[i * 4] != 0:
            last = i + 1
    a = _ub_span(c, CALL_R_STORE, t, offset, last * 2, 32)
    if a < 0:
        return offset + HALF_LANES
    chk.ub(c, CALL_VF, PIPE_V, a, last * 2, True)
    for i in range(last):
        if mask[i * 4] != 0:
            t[offset + i] = src[2 * i]
    note_ub_write(c, a + last * 2)
    return offset + HALF_LANES

# --- MoeFinalizeRoutingV2 (arch35): the B16 load / unpack / widen of its VFs ---------------------------------------

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
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return offset + n
    if dst.itemsize != t.itemsize or (unpack and dst.itemsize != 2):
        fault(c, F_ELEM_TYPE, CALL_R_LOAD, dst.itemsize, t.itemsize)
        return offset + n
    avail = t.size - offset
    if avail > n:
        avail = n
    if avail < 1:
        avail = 1           # the first element must lie in t (the fault names it)
    a = _ub_span(c, CALL_R_LOAD, t, offset, avail * t.itemsize, 32)
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
def vunpack_u16_to_u32(c, dst, src):
    """MicroAPI::UnPack(RegTensor<uint32_t>& dst, RegTensor<uint16_t>& src) (lower half): uint16 element i of src
    (i < 64) zero-extended into 32-bit lane i of dst (dst a vreg_u32)."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 2 or dst.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    for i in range(64):
        dst[i] = src[i]


# --- MoeMaskedScatter's prefix-count VF: DIST_UNPACK4_B8 load, DataCopyGather, register Duplicate, Copy -----------
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
    if not _instr(c, CALL_R_LOAD, KIND_LOAD):
        return
    if dst.itemsize != t.itemsize or index.itemsize != dst.itemsize:
        fault(c, F_ELEM_TYPE, CALL_R_LOAD, dst.itemsize, t.itemsize)
        return
    base = ub_offset(c, t, CALL_R_LOAD)
    if base < 0:
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            k = np.int64(index[i])
            if k < 0 or k >= t.size:
                fault(c, F_UB_OOB, CALL_R_LOAD, base, k * isz + isz, t.nbytes)
                return
    for i in range(dst.size):
        if mask[i * isz] != 0:
            k = np.int64(index[i])
            chk.ub(c, CALL_VF, PIPE_V, base + k * isz, isz, False)
            dst[i] = t[k]
        else:
            dst[i] = 0


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
    if not _instr(c, CALL_R_DUPLICATE, KIND_MOVE):
        return
    if not _same_type(c, CALL_R_DUPLICATE, dst, src):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = src[i]
        elif mode == ZEROING:
            dst[i] = 0
