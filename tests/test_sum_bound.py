"""tests/sum_bound.py, the formula check beside the order-goldens: it accepts fp32 sums in any order and rejects a
result one step past the bound."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from .sum_bound import U_FP32, assert_within_sum_bound, gamma, ulp


def test_gamma_and_ulp():
    assert gamma(0) == 0.0
    assert gamma(2 ** 8, 2.0 ** -8) == np.inf             # m u >= 1: no bound
    assert gamma(3) == pytest.approx(3 * U_FP32 / (1 - 3 * U_FP32), rel=0, abs=0)
    assert ulp(1.0, np.float32) == 2.0 ** -23
    assert ulp(1.5, ml_dtypes.bfloat16) == 2.0 ** -7
    assert ulp(0.0, np.float16) == 2.0 ** -24             # the smallest fp16 subnormal


@pytest.mark.parametrize("order", ["forward", "backward", "pairwise", "sorted"])
def test_any_fp32_order_is_within_the_bound(order):
    rng = np.random.default_rng(7)
    terms = (rng.standard_normal((50, 1000)) * np.exp2(rng.integers(-8, 8, (50, 1000)))).astype(np.float32)
    if order == "backward":
        terms = terms[:, ::-1]
    if order == "sorted":
        terms = np.sort(terms, axis=1)
    if order == "pairwise":
        got = terms.copy()
        while got.shape[1] > 1:
            if got.shape[1] % 2:
                got = np.concatenate([got, np.zeros((got.shape[0], 1), np.float32)], axis=1)
            got = got[:, 0::2] + got[:, 1::2]
        got = got[:, 0]
    else:
        got = np.zeros(terms.shape[0], np.float32)
        for j in range(terms.shape[1]):
            got = got + terms[:, j]
    t64 = terms.astype(np.float64)
    assert_within_sum_bound(got, t64.sum(axis=1), np.abs(t64).sum(axis=1), terms.shape[1] - 1, np.float32)


def test_a_result_past_the_bound_is_rejected():
    terms = np.full(8, 0.1, np.float64)
    exact, magnitude = terms.sum(), np.abs(terms).sum()
    bound = gamma(7) * magnitude + 0.5 * ulp(exact, np.float32)
    assert_within_sum_bound(np.float64(exact + 0.99 * bound), exact, magnitude, 7, np.float32)
    with pytest.raises(AssertionError, match="over the bound"):
        assert_within_sum_bound(np.float64(exact + 1.01 * bound), exact, magnitude, 7, np.float32)
