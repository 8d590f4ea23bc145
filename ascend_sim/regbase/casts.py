"""Cast between the standard element types: fp32 <-> int32, fp32 -> fp16 / bf16, fp16 / bf16 -> fp32 (with a
RegLayout: which half of the wide lane the narrow element sits in), fp16 -> bf16, uint16 -> uint32, int32 -> uint8, and
Truncate (fp32 to an integral fp32)."""
from __future__ import annotations

import numpy as np

from .._jit import aicore
from ..dtypes import (
    CAST_CEIL,
    CAST_FLOOR,
    CAST_ODD,
    CAST_RINT,
    CAST_ROUND,
    CAST_TRUNC,
    DT_BF16,
    DT_FLOAT,
    DT_FLOAT16,
    DT_INT32,
    bf16_bits_to_f32_bits,
    f16_bits_to_f32_bits,
    f32_bits_to_bf16_bits,
    f32_bits_to_f16_bits,
)
from ..faults import fault
from ..layout import CALL_R_CAST, CALL_R_TRUNCATE, F_CAST_PAIR, F_ELEM_TYPE, F_PARAM, P_MASK
from .registers import KIND_CAST, ZEROING, _b16_operands, _instr

LAYOUT_ZERO = 0          # RegLayout::ZERO: the narrow element sits in the even (low) half of its wide lane
LAYOUT_ONE = 1           # RegLayout::ONE: in the odd (high) half

NO_SAT = 0               # SatMode
SAT = 1


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
def vtruncate(c, dst, src, rnd, mask, mode=ZEROING):
    """MicroAPI::Truncate<float, rnd>(dst, src, mask): fp32 rounded to an integral fp32 (RINT / ROUND / FLOOR /
    CEIL / TRUNC); the sign of a zero result is the source's; Inf and NaN pass through."""
    if not _instr(c, CALL_R_TRUNCATE, KIND_CAST):
        return
    if src.itemsize != 4 or dst.itemsize != 4:
        fault(c, F_ELEM_TYPE, CALL_R_TRUNCATE, dst.itemsize, src.itemsize)
        return
    if rnd != CAST_RINT and rnd != CAST_ROUND and rnd != CAST_FLOOR and rnd != CAST_CEIL and rnd != CAST_TRUNC:
        fault(c, F_CAST_PAIR, CALL_R_TRUNCATE, DT_FLOAT, DT_FLOAT, rnd)
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
    """vcast_half_to_f32 with the source type as a flag: is_bf16 True reads the bits as bfloat16_t, False as half."""
    vcast_half_to_f32(c, dst, src, DT_BF16 if is_bf16 else DT_FLOAT16, layout, mask, mode)


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


def _f32_to_b16_cast(convert, dst_t, name, doc):
    """MicroAPI::Cast<half | bfloat16_t, float, CastTrait{layout, .., rnd}>(dst, src, mask) as its own device
    function: fp32 lane i (active by mask byte 4i) to the 16-bit value convert(bits, rnd) in uint16 slot 2i + layout
    of dst (a vreg_u16), the lane's other slot zeroed. Round modes RINT / ROUND / FLOOR / CEIL / TRUNC / ODD; dst_t
    (DT_FLOAT16 or DT_BF16) names the pair in an F_CAST_PAIR fault. `convert` is bound when the cast is made, so
    each compiles only its own rounding."""
    def cast(c, dst, src, rnd, layout, mask, mode=ZEROING):
        if not _instr(c, CALL_R_CAST, KIND_CAST):
            return
        if src.itemsize != 4 or dst.itemsize != 2:
            fault(c, F_ELEM_TYPE, CALL_R_CAST, dst.itemsize, src.itemsize)
            return
        if (rnd != CAST_RINT and rnd != CAST_ROUND and rnd != CAST_FLOOR and rnd != CAST_CEIL and rnd != CAST_TRUNC
                and rnd != CAST_ODD):
            fault(c, F_CAST_PAIR, CALL_R_CAST, dst_t, DT_FLOAT, rnd)
            return
        if layout != LAYOUT_ZERO and layout != LAYOUT_ONE:
            fault(c, F_PARAM, CALL_R_CAST, P_MASK, layout, LAYOUT_ZERO, LAYOUT_ONE)
            return
        bits = src.view(np.uint32)
        for i in range(64):
            if mask[i * 4] != 0:
                dst[2 * i + layout] = convert(bits[i], rnd)
                dst[2 * i + 1 - layout] = 0
            elif mode == ZEROING:
                dst[2 * i] = 0
                dst[2 * i + 1] = 0
    cast.__name__ = cast.__qualname__ = name
    cast.__doc__ = doc
    return aicore(cast)


vcast_f32_to_f16 = _f32_to_b16_cast(f32_bits_to_f16_bits, DT_FLOAT16, "vcast_f32_to_f16", """\
MicroAPI::Cast<half, float, CastTrait{layout, .., rnd}>(dst, src, mask): fp32 lane i (active by mask byte 4i) to the
half in uint16 slot 2i + layout of dst (a vreg_u16); the other slot of the lane is zeroed. Round modes RINT / ROUND /
FLOOR / CEIL / TRUNC / ODD; overflow goes to +-Inf (or the largest finite for the modes that round towards it), NaN
stays a quiet NaN.""")

vcast_f32_to_bf16 = _f32_to_b16_cast(f32_bits_to_bf16_bits, DT_BF16, "vcast_f32_to_bf16", """\
MicroAPI::Cast<bfloat16_t, float, CastTrait{layout, .., rnd}>(dst, src, mask): fp32 lane i to the bf16 in 16-bit slot
2i + layout of dst (a vreg_u16), the lane's other slot zeroed; RINT / ROUND / FLOOR / CEIL / TRUNC / ODD as
f32_bits_to_bf16_bits (NaN stays NaN).""")
