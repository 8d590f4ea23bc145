"""The error bound of a floating-point sum: the formula check beside the order-goldens.

Several goldens rebuild the order in which a kernel adds (MoeInplaceIndexAdd's windows, the ReduceSum lane tree of
the arch35 FinalizeRoutingV2Grad sums). They pin the bits, but they share the order with the kernel they test. The
check here shares nothing with either: the caller forms the exact sum in float64 from the inputs, and the result must
lie within what any order of the same roundings allows (Higham, Accuracy and Stability of Numerical Algorithms, 4.2):

    |got - exact| <= gamma_m * sum |terms| + ulp(out dtype at the result) / 2,    gamma_m = m u / (1 - m u)

m is the longest chain of roundings a term goes through before the last one: n - 1 for n terms accumulated in fp32
(u = 2^-24), one more when each term is itself a rounded fp32 product. The half ulp is the final rounding into the
output dtype (none for fp32 output when the last rounding is already counted in m; it only loosens the bound then).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

U_FP32 = 2.0 ** -24
UNIT_ROUNDOFF = {np.dtype(np.float32): U_FP32, np.dtype(np.float16): 2.0 ** -11,
                 np.dtype(ml_dtypes.bfloat16): 2.0 ** -8}


def gamma(m, u: float = U_FP32):
    """gamma_m = m u / (1 - m u) (m may be an array); infinite where m u >= 1: there the worst-case bound says
    nothing (long chains of 16-bit roundings), and only the order-golden's bits hold the result."""
    mu = np.asarray(m, np.float64) * u
    with np.errstate(divide="ignore"):
        return np.where(mu < 1, mu / np.where(mu < 1, 1.0 - mu, 1.0), np.inf)


def ulp(x, dtype) -> np.ndarray:
    """The spacing of `dtype` numbers at |x| (float64 array): eps * 2^floor(log2 |x|), at least the smallest
    subnormal."""
    info = ml_dtypes.finfo(dtype) if np.dtype(dtype) == np.dtype(ml_dtypes.bfloat16) else np.finfo(dtype)
    a = np.abs(np.asarray(x, np.float64))
    tiny = float(info.smallest_subnormal)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.where(a > 0, np.maximum(float(info.eps) * np.exp2(e), tiny), tiny)


def assert_within_sum_bound(got, exact, abs_sum, m, out_dtype, *, u: float = U_FP32, what: str = "sum") -> None:
    """got: the kernel's results (any float dtype); exact: the float64 sums of the same terms; abs_sum: the float64
    sums of |term|; m: the rounding-chain length per element (scalar or array, see the module docstring)."""
    g = np.asarray(got).astype(np.float64)
    ex = np.asarray(exact, np.float64)
    assert g.shape == ex.shape, what
    bound = gamma(m, u) * np.asarray(abs_sum, np.float64) + 0.5 * ulp(np.maximum(np.abs(ex), np.abs(g)), out_dtype)
    err = np.abs(g - ex)
    bad = np.flatnonzero(~(err <= bound))
    assert not bad.size, (f"{what}: element {bad[0]} is {g.reshape(-1)[bad[0]]!r}, exact {ex.reshape(-1)[bad[0]]!r}, "
                          f"error {err.reshape(-1)[bad[0]]:.3e} over the bound {bound.reshape(-1)[bad[0]]:.3e}")
