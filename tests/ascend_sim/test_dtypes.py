"""fp16 / bf16 <-> fp32 conversions against independent references, over every 16-bit code; int -> fp32
casts against exact rational arithmetic; fp32 -> FP8 / FP4 casts against ml_dtypes."""
from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numba
import numpy as np
import pytest

from ascend_sim.dtypes import (
    CAST_CEIL,
    CAST_FLOOR,
    CAST_NONE,
    CAST_ODD,
    CAST_RINT,
    CAST_ROUND,
    CAST_TRUNC,
    DT_FLOAT4_E2M1,
    DT_FLOAT8_E4M3FN,
    DT_FLOAT8_E5M2,
    ROUND_MODE_NAMES,
    f32_array_to_half_bits,
    f32_array_to_mini_float_bits,
    f32_bits_to_bf16_bits,
    f32_bits_to_bf16_bits_rint,
    half_bits_array_to_f32_bits,
    int_array_to_f32_bits,
)
from tests.bits import assert_bits_equal

ALL_CODES = np.arange(65536, dtype=np.uint32).astype(np.uint16)
FORMATS = {"bf16": (True, ml_dtypes.bfloat16), "fp16": (False, np.float16)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_widening_is_exact_for_every_code(fmt):
    is_bf16, np_type = FORMATS[fmt]
    got = half_bits_array_to_f32_bits(ALL_CODES, is_bf16)
    values = ALL_CODES.view(np_type)
    with np.errstate(invalid="ignore"):
        ref = values.astype(np.float32)
    assert_bits_equal(got.view(np.float32), ref, fmt, nan_equal=True)      # a NaN code widens to some NaN


def _inputs(rng):
    """Every 16-bit pattern as the upper half of an fp32, with lower halves at and around the rounding
    boundaries, plus random fp32 patterns."""
    uppers = ALL_CODES.astype(np.uint32) << 16
    lowers = np.array([0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
    grid = (uppers[:, None] | lowers[None, :]).reshape(-1)
    return np.concatenate([grid, rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32)])


def _reference_round(x32: np.ndarray, np_type, mode: int) -> np.ndarray:
    """Independent rounding: locate x between the two nearest representable values (from a sorted table
    of all finite codes, computed in float64) and choose by the mode's rule."""
    codes = ALL_CODES.view(np_type)
    with np.errstate(invalid="ignore", over="ignore"):
        table = codes.astype(np.float64)
    finite = np.isfinite(table) & ~((ALL_CODES & 0x7FFF) == 0) | (ALL_CODES == 0)
    order = np.argsort(table[finite], kind="stable")
    values = table[finite][order]
    bits = ALL_CODES[finite][order]
    x = x32.view(np.float32).astype(np.float64)
    hi_idx = np.clip(np.searchsorted(values, x, side="left"), 0, values.size - 1)
    lo_idx = np.clip(np.searchsorted(values, x, side="right") - 1, 0, values.size - 1)
    lo, hi = values[lo_idx], values[hi_idx]
    exact = lo == x
    if mode in (CAST_RINT, CAST_NONE, CAST_ROUND):
        d_lo, d_hi = x - lo, hi - x
        pick_hi = d_hi < d_lo
        tie = d_hi == d_lo
        if mode == CAST_ROUND:
            pick_hi = np.where(tie, np.abs(hi) > np.abs(lo), pick_hi)
        else:
            pick_hi = np.where(tie, (bits[hi_idx] & 1) == 0, pick_hi)
    elif mode == CAST_FLOOR:
        pick_hi = np.zeros(x.shape, bool)
    elif mode == CAST_CEIL:
        pick_hi = np.ones(x.shape, bool)
    elif mode == CAST_TRUNC:
        pick_hi = x < 0
    else:  # CAST_ODD: the odd one of the two neighbours
        pick_hi = (bits[hi_idx] & 1) == 1
    out = np.where(exact, bits[lo_idx], np.where(pick_hi, bits[hi_idx], bits[lo_idx]))
    # a zero result keeps the input's sign (IEEE): -0 for negative inputs that round to zero
    out = np.where(out == 0, (x32 >> 16).astype(np.uint16) & 0x8000, out)
    return out.astype(np.uint16)


def _max_finite(np_type) -> float:
    return float(np.finfo(np_type).max) if np_type is np.float16 else float(ml_dtypes.finfo(np_type).max)


MODES = {
    "bf16": (CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC),
    "fp16": (CAST_NONE, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD),
}


@pytest.mark.parametrize("fmt,mode", [(f, m) for f in MODES for m in MODES[f]],
                         ids=[f"{f}-{ROUND_MODE_NAMES[m]}" for f in MODES for m in MODES[f]])
def test_narrowing_matches_reference(fmt, mode, rng):
    is_bf16, np_type = FORMATS[fmt]
    x = _inputs(rng)
    xf = x.view(np.float32)
    got = f32_array_to_half_bits(x, is_bf16, mode)
    limit = _max_finite(np_type)
    with np.errstate(invalid="ignore"):
        inside = np.isfinite(xf) & (np.abs(xf.astype(np.float64)) <= limit)
    ref = _reference_round(x[inside], np_type, mode)
    mismatch = np.nonzero(got[inside] != ref)[0]
    assert mismatch.size == 0, (f"{fmt} {ROUND_MODE_NAMES[mode]}: input 0x{x[inside][mismatch[0]]:08x} -> "
                                f"0x{got[inside][mismatch[0]]:04x}, expected 0x{ref[mismatch[0]]:04x}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_rint_equals_numpy_and_ml_dtypes(fmt, rng):
    is_bf16, np_type = FORMATS[fmt]
    x = _inputs(rng)
    xf = x.view(np.float32)
    got = f32_array_to_half_bits(x, is_bf16, CAST_RINT)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = xf.astype(np_type)
    assert_bits_equal(got.view(np_type), ref, fmt, nan_equal=True)         # a NaN input narrows to some NaN


@pytest.mark.parametrize("fmt", FORMATS)
def test_overflow_saturates_only_for_directed_modes(fmt):
    is_bf16, np_type = FORMATS[fmt]
    f32_max = np.finfo(np.float32).max   # beyond bf16's largest finite value, rounds to inf under RINT
    big = np.array([f32_max, -f32_max, np.inf, -np.inf], dtype=np.float32)
    if not is_bf16:
        big[:2] = [np.float32(70000.0), np.float32(-70000.0)]
    bits = big.view(np.uint32)
    maxf = _max_finite(np_type)
    rint = f32_array_to_half_bits(bits, is_bf16, CAST_RINT).view(np_type).astype(np.float64)
    assert list(rint) == [np.inf, -np.inf, np.inf, -np.inf]
    trunc = f32_array_to_half_bits(bits, is_bf16, CAST_TRUNC).view(np_type).astype(np.float64)
    assert list(trunc[:2]) == [maxf, -maxf]
    floor = f32_array_to_half_bits(bits, is_bf16, CAST_FLOOR).view(np_type).astype(np.float64)
    assert list(floor[:2]) == [maxf, -np.inf]
    ceil = f32_array_to_half_bits(bits, is_bf16, CAST_CEIL).view(np_type).astype(np.float64)
    assert list(ceil[:2]) == [np.inf, -maxf]


# --- int32 / int64 -> fp32 (the sort keys) ---------------------------------------------------------------
def _int_to_f32_reference(v: int, mode: int) -> float:
    """fp32 value of integer v under a round mode, by exact rational comparison with its two fp32 neighbours."""
    near = np.float32(v)                       # numpy rounds to nearest even; the true value lies next to it
    cands = {float(np.nextafter(near, np.float32(-np.inf))), float(near), float(np.nextafter(near, np.float32(np.inf)))}
    below = max(c for c in cands if Fraction(c) <= v)
    above = min(c for c in cands if Fraction(c) >= v)
    if below == above:
        return below
    if mode in (CAST_RINT, CAST_NONE):
        return float(near)
    if mode == CAST_ROUND:
        d_below, d_above = v - Fraction(below), Fraction(above) - v
        return above if d_above < d_below or (d_above == d_below and abs(above) > abs(below)) else below
    if mode == CAST_TRUNC:
        return below if v > 0 else above
    return below if mode == CAST_FLOOR else above


INT_MODES = {"rint": CAST_RINT, "round": CAST_ROUND, "trunc": CAST_TRUNC, "floor": CAST_FLOOR, "ceil": CAST_CEIL}


@pytest.mark.parametrize("mode", INT_MODES.values(), ids=INT_MODES.keys())
def test_int_to_fp32_matches_exact_reference(mode):
    rng = np.random.default_rng(mode)
    x = np.concatenate([rng.integers(-2**31, 2**31, 3000), rng.integers(-2**62, 2**62, 3000),
                        np.array([2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**25 + 2, 2**25 + 6, -2**63, 2**63 - 1, 0, 1,
                                  -1, 2**24, 2**31 - 1, -2**31])]).astype(np.int64)
    got = int_array_to_f32_bits(x, mode).view(np.float32)
    want = np.array([_int_to_f32_reference(v, mode) for v in x.tolist()], dtype=np.float32)
    assert_bits_equal(got, want, f"int64 x -> fp32, mode {mode} (the index is into x)")


# --- fp32 -> FP8 / FP4 (Cast CAST_RINT + SAT of the MX kernels) --------------------------------------------
MINI = {"e4m3fn": (DT_FLOAT8_E4M3FN, ml_dtypes.float8_e4m3fn, 448.0),
        "e5m2": (DT_FLOAT8_E5M2, ml_dtypes.float8_e5m2, 57344.0),
        "e2m1": (DT_FLOAT4_E2M1, ml_dtypes.float4_e2m1fn, 6.0)}


@pytest.mark.parametrize("pow2", [0, 7, -9, 100, -100])
@pytest.mark.parametrize("fmt", MINI, ids=MINI.keys())
def test_mini_float_cast_matches_clipped_ml_dtypes(fmt, pow2):
    """Every bf16-representable fp32 pattern and random fp32 patterns, scaled by 2^pow2: RNE onto the grid,
    saturation instead of NaN/Inf (ml_dtypes needs the clip), NaN -> +0, sign of zero kept."""
    dt, ml_type, top = MINI[fmt]
    rng = np.random.default_rng(pow2 + 1000)
    bits = np.concatenate([np.arange(65536, dtype=np.uint32) << 16,
                           rng.integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32)])
    got = f32_array_to_mini_float_bits(bits, dt, pow2)
    with np.errstate(invalid="ignore", over="ignore"):
        x = bits.view(np.float32).astype(np.float64) * 2.0 ** pow2
        exact = np.isfinite(x) & (x.astype(np.float32).astype(np.float64) == x)   # ml_dtypes casts from fp32
        want = np.clip(x, -top, top).astype(np.float32).astype(ml_type).view(np.uint8)
    want = np.where(np.isnan(x), 0, want)                                          # SAT cast of NaN
    check = exact | np.isnan(x) | np.isinf(x)
    bad = np.flatnonzero(check & (got != want))
    assert bad.size == 0, f"fp32 bits {bits[bad[0]]:#010x} * 2^{pow2}: got {got[bad[0]]:#x}, want {want[bad[0]]:#x}"
    assert check.sum() > 300_000 * 0.5


@pytest.mark.parametrize("fmt", MINI, ids=MINI.keys())
def test_mini_float_cast_of_exact_products_beyond_fp32(fmt):
    """x * 2^pow2 is rounded once even when x or the product lies outside fp32's normal range."""
    dt, ml_type, _ = MINI[fmt]
    assert f32_array_to_mini_float_bits(np.array([0x3FC00000], np.uint32), dt, 0)[0] == \
        np.array([1.5], np.float32).astype(ml_type).view(np.uint8)[0]
    sub = np.array([0x00000003], np.uint32)        # 3 * 2^-149, times 2^149 is 3 (exact in every format)
    three = np.array([3.0], np.float32).astype(ml_type).view(np.uint8)[0]
    assert f32_array_to_mini_float_bits(sub, dt, 149)[0] == three
    # 1.25 * 2^130 scaled back by 2^-130: the product exists only as an exact value, never as an fp32
    big = np.array([0x7EA00000], np.uint32)        # 1.25 * 2^126
    assert f32_array_to_mini_float_bits(big, dt, -126)[0] == np.array([1.25], np.float32).astype(ml_type).view(
        np.uint8)[0]


@numba.njit(cache=True, nogil=True)
def _rint_mismatches(first: int, stop: int, step: int) -> int:
    bad = 0
    for x in range(first, stop, step):
        if f32_bits_to_bf16_bits_rint(np.uint32(x)) != f32_bits_to_bf16_bits(np.uint32(x), CAST_RINT):
            bad += 1
    return bad


@pytest.mark.parametrize("first,stop,step", [
    (0, 1 << 32, 65537),                    # every exponent and sign, scattered mantissas
    (0x7F7F0000, 0x7F810000, 1),            # around the largest finite value, infinity and the first NaNs
    (0xFF7F0000, 0xFF810000, 1),            # the same, negative
    (0xFFFF0000, 1 << 32, 1),               # negative NaNs where x + 0x7FFF wraps
    (0x00000000, 0x00020000, 1),            # subnormals and ties near zero
], ids=["sampled", "max-inf-nan", "neg-max-inf-nan", "wrapping-nans", "subnormals"])
def test_branch_free_bf16_rint_equals_the_general_narrowing(first, stop, step):
    # the fast path of Cast(CAST_RINT) to bf16; the whole 2^32 range was checked once by hand (0 mismatches)
    assert _rint_mismatches(first, stop, step) == 0
