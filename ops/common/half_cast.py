"""Exact dtype conversions for example inputs and goldens, without NumPy's half-precision loops.

`a.astype(float32)` of a bfloat16 array and `x.astype(bfloat16)` run ml_dtypes' per-element scalar loops
(float16 a slow software cast): at the demo's shapes they cost more than the simulated kernels. These
functions give the same bits through the compiled bit conversions of ops._host (round half to even, NaN
handling as ml_dtypes / NumPy), and fall back to `astype` for every dtype pair they do not cover, so a
caller can use them wherever it called `astype`.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .._host import round_to_half, widen_half

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_HALF = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))


def to_f32(a) -> np.ndarray:
    """A new float32 array (a's shape) equal to `np.asarray(a).astype(np.float32)`, bit for bit."""
    a = np.asarray(a)
    if a.dtype not in _HALF:
        return a.astype(_F32)
    out = np.empty(a.shape, dtype=_F32)
    # a strided half array is gathered as its uint16 bits (never through the dtype's own copy)
    src = a if a.flags.c_contiguous else np.ascontiguousarray(a.view(np.uint16)).view(a.dtype)
    widen_half(src, out)
    return out


def _f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """float32 of float64 x (no NaN) rounded to odd: the truncation toward zero, with the lowest mantissa bit
    set when the conversion is inexact. Rounding that to a format with at least two fewer significand bits
    (bfloat16: 8, float16: 11, float32: 24) rounds x itself correctly, so no double-rounding error."""
    y = x.astype(_F32)                         # round to nearest even, overflow to inf
    bits = y.view(np.uint32)
    back = y.astype(_F64)
    inexact = back != x
    # sign-magnitude encoding: one less in the bits is one ulp less in magnitude (inf -> the largest finite)
    bits -= (inexact & (np.abs(back) > np.abs(x))).astype(np.uint32)
    bits |= inexact.astype(np.uint32)
    return y


def cast(x, dtype) -> np.ndarray:
    """A new array equal to `np.asarray(x).astype(dtype)`, bit for bit; float32 or float64 to bfloat16 /
    float16 without the scalar loops."""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    if dtype not in _HALF or x.dtype not in (_F32, _F64):
        return x.astype(dtype)
    if x.dtype == _F64:
        if np.isnan(x).any():                  # NaN payloads: leave them to the library's own rules
            return x.astype(dtype)
        x = _f64_to_f32_round_to_odd(x)
    elif not x.flags.c_contiguous:
        x = np.ascontiguousarray(x)
    out = np.empty(x.shape, dtype=dtype)
    round_to_half(x, out)
    return out
