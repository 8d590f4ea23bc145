"""Data types of the machine model and exact fp32 <-> fp16 / bf16 conversions.

GM and UB hold fp16 and bf16 values as their uint16 bit patterns (numba cannot take
float16 arrays on the CPU, and has no bfloat16 at all). The conversions below work on
bit patterns, so every rounding mode of AscendC `Cast` is exact:

* widening (fp16/bf16 -> fp32) is exact,
* narrowing implements CAST_RINT / CAST_NONE (round half to even), CAST_ROUND (half away
  from zero), CAST_FLOOR, CAST_CEIL, CAST_TRUNC and, for fp16 only, CAST_ODD (round to odd).

NaN inputs give a quiet NaN of the same sign; overflow goes to infinity under the
to-nearest and away-from-zero directions and to the largest finite value otherwise.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from numba import types
from numba.extending import intrinsic

from ._jit import aicore, host_jit
from .errors import UnsupportedDtypeError

# ge::DataType codes (CANN graph engine); used as dtype tags inside kernels.
DT_FLOAT = 0
DT_FLOAT16 = 1
DT_INT8 = 2
DT_INT32 = 3
DT_UINT8 = 4
DT_INT16 = 6
DT_UINT16 = 7
DT_UINT32 = 8
DT_INT64 = 9
DT_UINT64 = 10
DT_DOUBLE = 11
DT_BOOL = 12
DT_BF16 = 27
DT_FLOAT8_E5M2 = 35
DT_FLOAT8_E4M3FN = 36
DT_FLOAT8_E8M0 = 37
DT_FLOAT4_E2M1 = 40

DT_NAMES = {
    DT_FLOAT: "float32", DT_FLOAT16: "float16", DT_INT8: "int8", DT_INT32: "int32", DT_UINT8: "uint8",
    DT_INT16: "int16", DT_UINT16: "uint16", DT_UINT32: "uint32", DT_INT64: "int64", DT_UINT64: "uint64",
    DT_DOUBLE: "float64", DT_BOOL: "bool", DT_BF16: "bfloat16", DT_FLOAT8_E5M2: "float8_e5m2",
    DT_FLOAT8_E4M3FN: "float8_e4m3fn", DT_FLOAT8_E8M0: "float8_e8m0fnu", DT_FLOAT4_E2M1: "float4_e2m1",
}

_NUMPY_TO_DT = {
    np.dtype(np.float32): DT_FLOAT, np.dtype(np.float16): DT_FLOAT16, np.dtype(np.int8): DT_INT8,
    np.dtype(np.int32): DT_INT32, np.dtype(np.uint8): DT_UINT8, np.dtype(np.int16): DT_INT16,
    np.dtype(np.uint16): DT_UINT16, np.dtype(np.uint32): DT_UINT32, np.dtype(np.int64): DT_INT64,
    np.dtype(np.uint64): DT_UINT64, np.dtype(np.float64): DT_DOUBLE, np.dtype(np.bool_): DT_BOOL,
    np.dtype(ml_dtypes.bfloat16): DT_BF16, np.dtype(ml_dtypes.float8_e5m2): DT_FLOAT8_E5M2,
    np.dtype(ml_dtypes.float8_e4m3fn): DT_FLOAT8_E4M3FN, np.dtype(ml_dtypes.float8_e8m0fnu): DT_FLOAT8_E8M0,
}

# Bit-carrier dtype of GM arrays handed to kernels, by ge code.
_CARRIER = {
    DT_FLOAT: np.float32, DT_FLOAT16: np.uint16, DT_BF16: np.uint16, DT_INT8: np.int8, DT_BOOL: np.int8,
    DT_UINT8: np.uint8, DT_INT16: np.int16, DT_UINT16: np.uint16, DT_INT32: np.int32, DT_UINT32: np.uint32,
    DT_INT64: np.int64, DT_UINT64: np.uint64, DT_DOUBLE: np.float64, DT_FLOAT8_E5M2: np.uint8,
    DT_FLOAT8_E4M3FN: np.uint8, DT_FLOAT8_E8M0: np.uint8,
}


def dt_of(dtype) -> int:
    """ge::DataType code of a numpy / ml_dtypes dtype."""
    try:
        return _NUMPY_TO_DT[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise UnsupportedDtypeError(f"unsupported dtype {dtype!r}", dtype=dtype) from None


def dt_name(code: int) -> str:
    return DT_NAMES.get(code, f"dtype {code}")


def gm_view(array: np.ndarray) -> np.ndarray:
    """A flat, bit-identical view of an array in the carrier dtype kernels use (no copy)."""
    code = dt_of(array.dtype)
    return array.reshape(-1).view(_CARRIER[code])


# --- AscendC RoundMode ------------------------------------------------------------------
CAST_NONE = 0
CAST_RINT = 1
CAST_FLOOR = 2
CAST_CEIL = 3
CAST_ROUND = 4
CAST_TRUNC = 5
CAST_ODD = 6
ROUND_MODE_NAMES = ("CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC", "CAST_ODD")


# --- scalar bit casts ---------------------------------------------------------------------
@intrinsic
def f32_from_bits(typingctx, bits):
    """Reinterpret a uint32 bit pattern as float32."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))

    return sig, codegen


@intrinsic
def view_f32_as_u32(typingctx, x):
    """The bit pattern of a float32 as uint32."""
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.uint32))

    return sig, codegen


@intrinsic
def leading_zeros64(typingctx, x):
    """Count of leading zero bits of a uint64 (64 for 0): one llvm.ctlz."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctlz(args[0], context.get_constant(types.boolean, False))

    return sig, codegen


# --- widening (exact) ---------------------------------------------------------------------
@aicore
def bf16_bits_to_f32_bits(h):
    """bf16 bits (uint16) -> float32 bits (uint32) of the same value: exact, the bits shifted up 16."""
    return np.uint32(np.uint32(h) << np.uint32(16))     # kept 32-bit: a loop of it vectorises 8 lanes wide


@aicore
def f16_bits_to_f32_bits(h):
    """fp16 bits (uint16) -> float32 bits (uint32) of the same value: exact; subnormals normalised, Inf / NaN
    keep sign and payload."""
    h = np.uint32(h)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    exp = (h >> np.uint32(10)) & np.uint32(0x1F)
    man = h & np.uint32(0x3FF)
    if exp == 0x1F:  # inf / NaN keep their payload
        return sign | np.uint32(0x7F800000) | (man << np.uint32(13))
    if exp == 0:
        if man == 0:
            return sign
        e = np.int64(-14)
        while (man & np.uint32(0x400)) == 0:  # normalise the subnormal
            man <<= np.uint32(1)
            e -= 1
        man &= np.uint32(0x3FF)
        return sign | (np.uint32(e + 127) << np.uint32(23)) | (man << np.uint32(13))
    return sign | ((exp + np.uint32(112)) << np.uint32(23)) | (man << np.uint32(13))


# --- narrowing ----------------------------------------------------------------------------
@aicore
def _round_increment(mode, negative, lsb, rem, half):
    """1 if dropping `rem` (compared with `half`) must bump the kept magnitude by one ulp."""
    if mode == CAST_RINT or mode == CAST_NONE:
        return 1 if (rem > half or (rem == half and lsb == 1)) else 0
    if mode == CAST_ROUND:
        return 1 if rem >= half else 0
    if mode == CAST_FLOOR:
        return 1 if (negative and rem != 0) else 0
    if mode == CAST_CEIL:
        return 1 if ((not negative) and rem != 0) else 0
    return 0  # CAST_TRUNC; CAST_ODD is handled by the caller


@aicore
def f32_bits_to_bf16_bits(x, mode):
    """float32 bits (uint32) -> bf16 bits (uint16), rounded by `mode` (CAST_RINT / NONE half to even, ROUND half
    away from zero, FLOOR, CEIL, TRUNC, ODD); NaN stays a quiet NaN, the directed modes that round towards zero
    stop at the largest finite bf16."""
    x = np.uint32(x)
    sign = np.uint32((x >> np.uint32(16)) & np.uint32(0x8000))
    mag = x & np.uint32(0x7FFFFFFF)
    if mag > np.uint32(0x7F800000):  # NaN: keep it quiet
        return np.uint16(sign | np.uint32(0x7FC0) | ((mag >> np.uint32(16)) & np.uint32(0x3F)))
    if mag == np.uint32(0x7F800000):
        return np.uint16(sign | np.uint32(0x7F80))
    kept = mag >> np.uint32(16)
    rem = mag & np.uint32(0xFFFF)
    if mode == CAST_ODD:
        if rem != 0:
            kept |= np.uint32(1)
    else:
        kept += np.uint32(_round_increment(mode, sign != 0, kept & np.uint32(1), rem, np.uint32(0x8000)))
    if kept >= np.uint32(0x7F80) and (mode == CAST_TRUNC or mode == CAST_ODD
                                      or (mode == CAST_FLOOR and sign == 0)
                                      or (mode == CAST_CEIL and sign != 0)):
        kept = np.uint32(0x7F7F)  # directed rounding towards zero never reaches infinity
    return np.uint16(sign | kept)


@aicore
def f32_bits_to_bf16_bits_rint(x):
    """f32_bits_to_bf16_bits(x, CAST_RINT) without branches, so a loop of it vectorises: round half to even
    by adding 0x7FFF plus the kept lowest bit (a carry into the exponent rounds up to the next binade or to
    infinity, as it must); a NaN keeps its sign and top payload bits and becomes quiet."""
    u32 = np.uint32     # every step cast back to 32 bits: numba widens to 64, and 64-bit lanes halve the speed
    x = u32(x)
    hi = u32(x >> u32(16))
    rounded = u32(u32(u32(x + u32(0x7FFF)) + u32(hi & u32(1))) >> u32(16))   # only NaNs can wrap: not used
    quiet_nan = u32(hi | u32(0x0040))
    is_nan = u32(x & u32(0x7FFFFFFF)) > u32(0x7F800000)
    return np.uint16(quiet_nan if is_nan else rounded)


@aicore
def f32_bits_to_f16_bits(x, mode):
    x = np.uint32(x)
    sign = np.uint32((x >> np.uint32(16)) & np.uint32(0x8000))
    mag = x & np.uint32(0x7FFFFFFF)
    if mag > np.uint32(0x7F800000):  # NaN: keep it quiet
        return np.uint16(sign | np.uint32(0x7E00) | ((mag >> np.uint32(13)) & np.uint32(0x1FF)))
    if mag == np.uint32(0x7F800000):
        return np.uint16(sign | np.uint32(0x7C00))
    exp32 = np.int64(mag >> np.uint32(23))
    man32 = np.int64(mag & np.uint32(0x7FFFFF))
    e16 = exp32 - 112  # rebias 127 -> 15
    toward_zero = (mode == CAST_TRUNC or mode == CAST_ODD or (mode == CAST_FLOOR and sign == 0)
                   or (mode == CAST_CEIL and sign != 0))
    if e16 >= 31:
        return np.uint16(sign | (np.uint32(0x7BFF) if toward_zero else np.uint32(0x7C00)))
    if e16 >= 1:
        kept = (e16 << 10) | (man32 >> 13)
        rem = man32 & 0x1FFF
        half = np.int64(0x1000)
    else:
        sig = man32 | (np.int64(0x800000) if exp32 != 0 else np.int64(0))
        shift = 14 - e16  # 13 bits dropped for a normal, plus the distance below the normal range
        if shift > 25:
            kept = np.int64(0)
            rem = np.int64(1) if sig != 0 else np.int64(0)  # far below half: only stickiness matters
            half = np.int64(2)
        else:
            kept = sig >> shift
            rem = sig & ((np.int64(1) << shift) - 1)
            half = np.int64(1) << (shift - 1)
    if mode == CAST_ODD:
        if rem != 0:
            kept |= 1
    else:
        kept += _round_increment(mode, sign != 0, kept & 1, rem, half)
    if kept >= 0x7C00:
        kept = np.int64(0x7BFF) if toward_zero else np.int64(0x7C00)
    return np.uint16(sign | np.uint32(kept))


@aicore
def i64_to_f32_bits(x, mode):
    """int32 / int64 -> fp32 bit pattern under a round mode (exact below 2^24; sort keys are cast this way)."""
    x = np.int64(x)
    if x == 0:
        return np.uint32(0)
    negative = x < 0
    mag = np.uint64(0) - np.uint64(x) if negative else np.uint64(x)   # two's complement magnitude, INT64_MIN safe
    e = 63 - leading_zeros64(mag)       # index of the leading one
    if e <= 23:
        kept = np.uint64(mag << np.uint64(23 - e))
    else:
        shift = e - 23
        kept = mag >> np.uint64(shift)
        rem = mag & ((np.uint64(1) << np.uint64(shift)) - np.uint64(1))
        half = np.uint64(1) << np.uint64(shift - 1)
        if mode == CAST_ODD:
            if rem != np.uint64(0):
                kept |= np.uint64(1)
        else:
            kept += np.uint64(_round_increment(mode, negative, kept & np.uint64(1), rem, half))
        if kept == (np.uint64(1) << np.uint64(24)):
            kept >>= np.uint64(1)
            e += 1
    sign = np.uint32(0x80000000) if negative else np.uint32(0)
    return sign | np.uint32((e + 127) << 23) | np.uint32(kept & np.uint64(0x7FFFFF))


@host_jit
def int_array_to_f32_bits(x, mode):
    """int32 / int64 array -> fp32 bit patterns (tests)."""
    out = np.empty(x.size, dtype=np.uint32)
    for i in range(x.size):
        out[i] = i64_to_f32_bits(x[i], mode)
    return out


@aicore
def _mini_format(dt):
    """(mantissa bits, exponent bias, largest finite magnitude code, sign bit) of an FP8 / FP4 format."""
    if dt == DT_FLOAT8_E4M3FN:
        return 3, 7, 0x7E, 7
    if dt == DT_FLOAT8_E5M2:
        return 2, 15, 0x7B, 7
    return 1, 1, 0x7, 3          # DT_FLOAT4_E2M1


@aicore
def _mini_from_parts(negative, full, msb, e2, dt):
    """FP8 / FP4 code of (-1)^negative * full * 2^e2 (full > 0 with its leading one at bit `msb`),
    rounded half to even onto the format's grid and saturated to its largest finite value."""
    mbits, bias, max_code, sign_bit = _mini_format(dt)
    sign = (1 << sign_bit) if negative else 0
    target = msb + e2 + bias            # biased exponent of the value in the small format
    if target > 40:
        return np.uint8(max_code | sign)
    step = (target if target > 1 else 1) - bias - mbits     # log2 of the grid spacing there
    shift = step - e2
    if shift <= 0:
        kept = np.int64(full) << (-shift)
    elif shift > msb + 1:
        kept = np.int64(0)                # below half the smallest step
    else:
        kept = np.int64(full) >> shift
        rem = np.int64(full) & ((np.int64(1) << shift) - 1)
        half = np.int64(1) << (shift - 1)
        if rem > half or (rem == half and (kept & 1) == 1):
            kept += 1
    # for normals `kept` carries the implicit one, which adds (target - 1) << mbits up to the exponent field
    code = ((target - 1) << mbits) + kept if target >= 1 else kept
    if code > max_code:
        code = np.int64(max_code)
    return np.uint8(code | sign)


@aicore
def f32_bits_to_mini_float_bits(x, dt, pow2):
    """fp32 bit pattern times 2^pow2 -> FP8 E4M3FN / E5M2 or FP4 E2M1 code: Cast with CAST_RINT and
    SatMode::SAT of the exact product (the MX kernels multiply by a power-of-two inverse scale first).

    Round half to even onto the format's grid (subnormals included); magnitudes beyond the largest
    finite value saturate to it; Inf saturates; NaN gives +0 (the SAT cast with the default
    CTRL[50] = 0); the sign of zero is kept. FP4 codes use the low nibble.
    """
    x = np.uint32(x)
    negative = (x >> np.uint32(31)) != np.uint32(0)
    exp = np.int64((x >> np.uint32(23)) & np.uint32(0xFF))
    man = np.int64(x & np.uint32(0x7FFFFF))
    if exp == 0xFF:
        if man != 0:
            return np.uint8(0)
        _, _, max_code, sign_bit = _mini_format(dt)
        return np.uint8(max_code | ((1 << sign_bit) if negative else 0))
    if exp == 0:
        if man == 0:
            _, _, _, sign_bit = _mini_format(dt)
            return np.uint8((1 << sign_bit) if negative else 0)
        msb = 63 - leading_zeros64(np.uint64(man))
        return _mini_from_parts(negative, man, msb, -149 + pow2, dt)
    return _mini_from_parts(negative, man | (1 << 23), 23, exp - 150 + pow2, dt)


# --- vectorised helpers (tests and host-side use) ------------------------------------------
@host_jit
def f32_array_to_mini_float_bits(x_bits, dt, pow2):
    """fp32 bit patterns times 2^pow2 -> FP8 / FP4 codes, as f32_bits_to_mini_float_bits (tests)."""
    out = np.empty(x_bits.size, dtype=np.uint8)
    for i in range(x_bits.size):
        out[i] = f32_bits_to_mini_float_bits(x_bits[i], dt, pow2)
    return out


@host_jit
def f32_array_to_half_bits(x_bits, to_bf16, mode):
    """uint32 fp32 bit patterns -> uint16 fp16 or bf16 bit patterns under a round mode."""
    out = np.empty(x_bits.size, dtype=np.uint16)
    for i in range(x_bits.size):
        out[i] = f32_bits_to_bf16_bits(x_bits[i], mode) if to_bf16 else f32_bits_to_f16_bits(x_bits[i], mode)
    return out


@host_jit
def half_bits_array_to_f32_bits(h_bits, is_bf16):
    """uint16 fp16 or bf16 bit patterns -> uint32 fp32 bit patterns (exact)."""
    out = np.empty(h_bits.size, dtype=np.uint32)
    for i in range(h_bits.size):
        out[i] = bf16_bits_to_f32_bits(h_bits[i]) if is_bf16 else f16_bits_to_f32_bits(h_bits[i])
    return out
