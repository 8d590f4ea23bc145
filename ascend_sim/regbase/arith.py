"""Lane-wise arithmetic: Add / Sub / Mul / Div / Max / Min of two registers, the scalar forms Adds / Muls /
Maxs, Abs, the bitwise And and shifts, and the bf16 Mul on bit patterns. Inactive lanes of the destination are
zeroed (MaskMergeMode::ZEROING) or kept (MERGING)."""
from __future__ import annotations

import operator

import numpy as np

from .._jit import aicore
from ..dtypes import (
    CAST_RINT,
    bf16_bits_to_f32_bits,
    f32_bits_to_bf16_bits,
    f32_bits_to_bf16_bits_rint,
    f32_from_bits,
    view_f32_as_u32,
)
from ..faults import fault
from ..layout import (
    CALL_R_ABS,
    CALL_R_ADD,
    CALL_R_ADDS,
    CALL_R_AND,
    CALL_R_DIV,
    CALL_R_MAX,
    CALL_R_MAXS,
    CALL_R_MIN,
    CALL_R_MUL,
    CALL_R_MULS,
    CALL_R_SHIFT_LEFTS,
    CALL_R_SHIFT_RIGHTS,
    CALL_R_SUB,
    F_PARAM,
    P_COUNT,
)
from .registers import KIND_ARITH, ZEROING, _b16_operands, _instr, _int_operands, _same_type


@aicore
def _max_lane(x, y):
    return x if x >= y or x != x else y     # a NaN in the first operand propagates


@aicore
def _min_lane(x, y):
    return x if x <= y or x != x else y


def _lane_loop(op, name: str):
    """The masked lane loop of one two-register instruction: dst[i] = op(a[i], b[i]) on the active lanes, the
    others zeroed (ZEROING) or kept (MERGING). `op` is bound when the loop is made, so the loop has no branch on
    the operation and an instruction compiles only its own loop. Each loop is its own device function under its
    own name (numba keys compilations and disk-cache entries on the function and its qualified name). One factory
    with the operand fetch (b[i] or a scalar) as an argument would make the fetch a device function of its own,
    compiled per signature: 3 more specialisations over the test_regbase* files, so the two factories stay."""
    def lanes(dst, a, b, mask, mode):
        isz = dst.itemsize
        for i in range(dst.size):
            if mask[i * isz] != 0:
                dst[i] = op(a[i], b[i])
            elif mode == ZEROING:
                dst[i] = 0
    lanes.__name__ = lanes.__qualname__ = name
    return aicore(lanes)


_add_lanes = _lane_loop(operator.add, "_add_lanes")
_sub_lanes = _lane_loop(operator.sub, "_sub_lanes")
_mul_lanes = _lane_loop(operator.mul, "_mul_lanes")
_div_lanes = _lane_loop(operator.truediv, "_div_lanes")
_max_lanes = _lane_loop(_max_lane, "_max_lanes")
_min_lanes = _lane_loop(_min_lane, "_min_lanes")
_and_lanes = _lane_loop(operator.and_, "_and_lanes")


@aicore
def _binary_operands(c, call, dst, a, b):
    """The prologue of Add / Sub / Mul / Div / Max / Min (`call` the instruction's id): False if the instruction
    must do nothing."""
    if not _instr(c, call, KIND_ARITH):
        return False
    return _same_type(c, call, dst, a) and _same_type(c, call, dst, b)


@aicore
def vadd(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::Add(dst, a, b, mask)."""
    if _binary_operands(c, CALL_R_ADD, dst, a, b):
        _add_lanes(dst, a, b, mask, mode)


@aicore
def vsub(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::Sub(dst, a, b, mask)."""
    if _binary_operands(c, CALL_R_SUB, dst, a, b):
        _sub_lanes(dst, a, b, mask, mode)


@aicore
def vmul(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::Mul(dst, a, b, mask)."""
    if _binary_operands(c, CALL_R_MUL, dst, a, b):
        _mul_lanes(dst, a, b, mask, mode)


@aicore
def vdiv(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::Div(dst, a, b, mask) (IEEE: x/0 is +-Inf, 0/0 NaN)."""
    if _binary_operands(c, CALL_R_DIV, dst, a, b):
        _div_lanes(dst, a, b, mask, mode)


@aicore
def vmax(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::Max(dst, a, b, mask) (a NaN in a propagates)."""
    if _binary_operands(c, CALL_R_MAX, dst, a, b):
        _max_lanes(dst, a, b, mask, mode)


@aicore
def vmin(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::Min(dst, a, b, mask) (a NaN in a propagates)."""
    if _binary_operands(c, CALL_R_MIN, dst, a, b):
        _min_lanes(dst, a, b, mask, mode)


def _scalar_lane_loop(op, name: str):
    """As _lane_loop, for the register-and-scalar instructions: dst[i] = op(a[i], s)."""
    def lanes(dst, a, s, mask, mode):
        isz = dst.itemsize
        for i in range(dst.size):
            if mask[i * isz] != 0:
                dst[i] = op(a[i], s)
            elif mode == ZEROING:
                dst[i] = 0
    lanes.__name__ = lanes.__qualname__ = name
    return aicore(lanes)


_adds_lanes = _scalar_lane_loop(operator.add, "_adds_lanes")
_muls_lanes = _scalar_lane_loop(operator.mul, "_muls_lanes")
_maxs_lanes = _scalar_lane_loop(_max_lane, "_maxs_lanes")
_shl_lanes = _scalar_lane_loop(operator.lshift, "_shl_lanes")
_shr_lanes = _scalar_lane_loop(operator.rshift, "_shr_lanes")


@aicore
def _unary_operands(c, call, dst, a):
    """The prologue of the one-register (and register-and-scalar) instructions (`call` the instruction's id)."""
    if not _instr(c, call, KIND_ARITH):
        return False
    return _same_type(c, call, dst, a)


@aicore
def vadds(c, dst, a, s, mask, mode=ZEROING):
    """MicroAPI::Adds: s must already be of dst's element type (np.float32(..) for fp32)."""
    if _unary_operands(c, CALL_R_ADDS, dst, a):
        _adds_lanes(dst, a, s, mask, mode)


@aicore
def vmuls(c, dst, a, s, mask, mode=ZEROING):
    """MicroAPI::Muls: s must already be of dst's element type."""
    if _unary_operands(c, CALL_R_MULS, dst, a):
        _muls_lanes(dst, a, s, mask, mode)


@aicore
def vmaxs(c, dst, a, s, mask, mode=ZEROING):
    """MicroAPI::Maxs(dst, a, scalar, mask); s of dst's element type (a NaN in a propagates)."""
    if _unary_operands(c, CALL_R_MAXS, dst, a):
        _maxs_lanes(dst, a, s, mask, mode)


@aicore
def vabs(c, dst, a, mask, mode=ZEROING):
    """MicroAPI::Abs (-0 -> +0, NaN stays NaN)."""
    if not _unary_operands(c, CALL_R_ABS, dst, a):
        return
    isz = dst.itemsize
    for i in range(dst.size):
        if mask[i * isz] != 0:
            dst[i] = abs(a[i])
        elif mode == ZEROING:
            dst[i] = 0


@aicore
def vand(c, dst, a, b, mask, mode=ZEROING):
    """MicroAPI::And(dst, a, b, mask) on 16- or 32-bit integer registers (vreg_u16 / vreg_i32 ...)."""
    if not _instr(c, CALL_R_AND, KIND_ARITH):
        return
    if _int_operands(c, CALL_R_AND, dst, a) and _int_operands(c, CALL_R_AND, dst, b):
        _and_lanes(dst, a, b, mask, mode)


@aicore
def _shift_operands(c, call, dst, a, n):
    """The prologue of ShiftLefts / ShiftRights (`call`): integer registers of one width, 0 <= n < element bits."""
    if not _instr(c, call, KIND_ARITH):
        return False
    if not _int_operands(c, call, dst, a):
        return False
    bits = dst.itemsize * 8
    if n < 0 or n >= bits:
        fault(c, F_PARAM, call, P_COUNT, n, 0, bits - 1)
        return False
    return True


@aicore
def vshift_rights(c, dst, a, n, mask, mode=ZEROING):
    """MicroAPI::ShiftRights(dst, a, n, mask): logical for unsigned registers, arithmetic for signed ones;
    0 <= n < element bits."""
    if _shift_operands(c, CALL_R_SHIFT_RIGHTS, dst, a, n):
        _shr_lanes(dst, a, n, mask, mode)


@aicore
def vshift_lefts(c, dst, a, n, mask, mode=ZEROING):
    """MicroAPI::ShiftLefts(dst, a, n, mask): bits shifted past the top are lost; 0 <= n < element bits."""
    if _shift_operands(c, CALL_R_SHIFT_LEFTS, dst, a, n):
        _shl_lanes(dst, a, n, mask, mode)


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
    if not _instr(c, CALL_R_MUL, KIND_ARITH):
        return
    if not _b16_operands(c, CALL_R_MUL, dst, a) or not _b16_operands(c, CALL_R_MUL, dst, b):
        return
    for i in range(128):
        if mask[i * 2] != 0:
            dst[i] = _bf16_mul_bits(a[i], b[i])
        elif mode == ZEROING:
            dst[i] = 0
