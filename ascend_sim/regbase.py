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

Not modelled: LoadDist / StoreDist other than NORM and BRC, the UnalignReg stream state (unaligned loads and
stores here read / write their bytes directly, so DataCopyUnAlignPost has nothing to flush), casts between widths
other than fp32 -> fp16, uint16 -> uint32 and int32 -> uint8.
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
    lanes = VL // elem_bytes
    for i in range(VL):
        mask[i] = 1 if i // elem_bytes < n and i // elem_bytes < lanes else 0


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
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            x = a[i]
            y = b[i]
            if op == OP_ADD:
                dst[i] = x + y
            elif op == OP_SUB:
                dst[i] = x - y
            elif op == OP_MUL:
                dst[i] = x * y
            elif op == OP_DIV:
                dst[i] = x / y
            elif op == OP_MAX:
                dst[i] = x if x >= y or x != x else y
            else:
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


# --- MoeFinalizeRoutingV2 (arch35): the B16 load / unpack / widen of its VFs ---------------------------------------
from .dtypes import DT_BF16, bf16_bits_to_f32_bits, f16_bits_to_f32_bits  # noqa: E402
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


@aicore
def vcast_b16_to_f32(c, dst, src, src_dt, layout, mask, mode=ZEROING):
    """MicroAPI::Cast<float, half | bfloat16_t, CastTrait{layout}>(dst, src, mask): fp32 lane i (active by mask byte
    4i) gets the fp16 (src_dt DT_FLOAT16) or bf16 (DT_BF16) bits in uint16 slot 2i + layout of src (a vreg_u16),
    widened exactly (NaN payloads kept, subnormal fp16 normalised)."""
    if not _instr(c, CALL_R_CAST, KIND_CAST):
        return
    if src.itemsize != 2 or dst.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
        return
    if src_dt != DT_FLOAT16 and src_dt != DT_BF16:
        fault(c, F_CAST_PAIR, CALL_R_CAST, DT_FLOAT, src_dt, 0)
        return
    if layout != LAYOUT_ZERO and layout != LAYOUT_ONE:
        fault(c, F_PARAM, CALL_R_CAST, P_MASK, layout, LAYOUT_ZERO, LAYOUT_ONE)
        return
    bits = dst.view(np.uint32)
    for i in range(64):
        if mask[i * 4] != 0:
            h = src[2 * i + layout]
            bits[i] = bf16_bits_to_f32_bits(h) if src_dt == DT_BF16 else f16_bits_to_f32_bits(h)
        elif mode == ZEROING:
            bits[i] = 0
