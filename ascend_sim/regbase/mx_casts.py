"""The casts to the MX element formats the quantising gathers emit: fp32 -> FP8 (E4M3FN / E5M2, RINT + SAT) and
bf16 -> FP4 (E2M1, two codes a byte)."""
from __future__ import annotations

import numpy as np

from .._jit import aicore
from ..dtypes import (
    CAST_RINT,
    DT_BF16,
    DT_FLOAT,
    DT_FLOAT4_E2M1,
    DT_FLOAT8_E4M3FN,
    DT_FLOAT8_E5M2,
    bf16_bits_to_f32_bits,
    f32_bits_to_mini_float_bits,
)
from ..faults import fault
from ..layout import CALL_R_CAST, F_CAST_PAIR, F_ELEM_TYPE
from .casts import SAT
from .registers import KIND_CAST, ZEROING, _instr


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
