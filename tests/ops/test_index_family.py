"""The index family (MoeTokenPermute, MoeTokenUnpermute, MoeTokenPermuteGrad, MoeTokenUnpermuteGrad) checked
against each other through the public API only (ops.*).

1. Adjoints: the permute is a linear map x -> P and MoeTokenPermuteGrad must be its transpose,
   <permute(x), G> = <x, permute_grad(G)>, also when numOutTokens drops rows. The unpermute is bilinear in
   (P, probs), and MoeTokenUnpermuteGrad returns both partial derivatives of <unpermute(P, probs), Y>:
   <unpermute(P, probs), Y> = <P, dP> = <probs, dprobs>. Inner products are taken in float64 of the
   operators' fp32 (or bf16) results; the bound is Higham's gamma for the roundings each side saw.
2. Round trip: permute then unpermute with probs gives every token times the sum of its probs.
3. Every profile runs every check (fp32 on 910B / 910_93, bf16 on 950, whose fp32 gradient stage is
   compiled only by the slow tests).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops
from tests.conftest import PROFILE_NAMES

BF16 = np.dtype(ml_dtypes.bfloat16)


def _dtype(profile: str):
    return BF16 if profile == "ascend950" else np.dtype(np.float32)


def _unit(dtype) -> float:
    return float(ml_dtypes.finfo(dtype).eps) / 2


def _routing(rng, tokens: int, experts: int, topk: int) -> np.ndarray:
    return np.argsort(rng.random((tokens, experts)), axis=1)[:, :topk].astype(np.int32)


def _dot(a, b) -> float:
    return float((np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)).sum())


def _abs_dot(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)).sum())


@pytest.mark.parametrize("profile", PROFILE_NAMES)
@pytest.mark.parametrize("keep", [0, 150], ids=["all-rows", "numOutTokens-150"])
def test_permute_grad_is_the_adjoint_of_permute(profile, keep):
    rng = np.random.default_rng(11)
    tokens, hidden, experts, topk = 60, 72, 8, 3
    dtype = _dtype(profile)
    x = rng.standard_normal((tokens, hidden)).astype(dtype)
    idx = _routing(rng, tokens, experts, topk)
    permuted, sorted_indices, _ = ops.moe_token_permute(x, idx, keep, soc=profile)
    g = rng.standard_normal(permuted.shape).astype(dtype)
    back = ops.moe_token_permute_grad(g, sorted_indices, topk, soc=profile)
    assert back.shape == x.shape
    lhs, rhs = _dot(permuted, g), _dot(x, back)
    # the permute copies exactly; permute_grad sums K rows in fp32 and rounds once: each term of <x, back> is
    # off by at most (K + 1) u of sum_k |x| |G|, whose total is <|permuted|, |G|>
    bound = (topk + 1) * _unit(dtype) * _abs_dot(permuted, g)
    assert abs(lhs - rhs) <= bound, (profile, keep, lhs, rhs, bound)
    if keep:
        assert permuted.shape[0] == keep and (sorted_indices >= keep).sum() == tokens * topk - keep


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_unpermute_grad_returns_both_partials_of_unpermute(profile):
    rng = np.random.default_rng(12)
    tokens, hidden, experts, topk = 40, 96, 6, 4
    dtype = _dtype(profile)
    idx = _routing(rng, tokens, experts, topk)
    x = rng.standard_normal((tokens, hidden)).astype(dtype)
    permuted, sorted_indices, _ = ops.moe_token_permute(x, idx, soc=profile)
    p = rng.standard_normal(permuted.shape).astype(dtype)           # expert outputs, any values
    probs = rng.random((tokens, topk)).astype(dtype)
    y_grad = rng.standard_normal((tokens, hidden)).astype(dtype)
    y = ops.moe_token_unpermute(p, sorted_indices, probs, soc=profile)
    dp, dprobs = ops.moe_token_unpermute_grad(p, y_grad, sorted_indices, probs, soc=profile)
    assert dp.shape == p.shape and dprobs.shape == probs.shape and dprobs.dtype == probs.dtype
    value = _dot(y, y_grad)
    # exactly, all three inner products are sum over (t, k, h) of probs[t,k] P[s,h] Y[t,h]; m bounds the sum of
    # their magnitudes. y saw K fp32 products and sums and one rounding, dP one product and one rounding,
    # dprobs H-long fp32 sums and one rounding: each is off by at most that many unit roundoffs of m
    m = _abs_dot(p, dp)
    u = _unit(dtype)
    assert abs(value - _dot(p, dp)) <= (topk + 4) * u * m, profile
    assert abs(value - _dot(probs, dprobs)) <= (topk + hidden + 4) * u * m, profile
    assert abs(value) > 100 * (topk + hidden + 4) * _unit(np.float32) * m or dtype == BF16, "a degenerate case"


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_unpermute_without_probs_is_the_adjoint_of_its_grad(profile):
    rng = np.random.default_rng(13)
    tokens, hidden = 50, 40
    dtype = _dtype(profile)
    sorted_indices = rng.permutation(tokens).astype(np.int32)       # K = 1: a pure row permutation
    p = rng.standard_normal((tokens, hidden)).astype(dtype)
    y = ops.moe_token_unpermute(p, sorted_indices, soc=profile)
    g = rng.standard_normal((tokens, hidden)).astype(dtype)
    dp, dprobs = ops.moe_token_unpermute_grad(p, g, sorted_indices, soc=profile)
    assert dprobs is None
    # both are pure copies (y[t] = p[s[t]], dp[s[t]] = g[t]): the identity holds up to float64 summation order
    assert np.array_equal(y, p[sorted_indices]) and np.array_equal(dp[sorted_indices], g)
    assert abs(_dot(y, g) - _dot(p, dp)) <= 1e-12 * _abs_dot(y, g)


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_permute_then_unpermute_scales_each_token_by_its_probs(profile):
    rng = np.random.default_rng(14)
    tokens, hidden, experts, topk = 64, 48, 8, 4
    dtype = _dtype(profile)
    x = (rng.integers(-64, 64, (tokens, hidden)) / 16).astype(dtype)    # few mantissa bits: every product and
    idx = _routing(rng, tokens, experts, topk)
    probs = (rng.integers(1, 5, (tokens, topk)) / 8).astype(dtype)      # sum below is exact in fp32 and bf16
    permuted, sorted_indices, _ = ops.moe_token_permute(x, idx, soc=profile)
    y = ops.moe_token_unpermute(permuted, sorted_indices, probs, soc=profile)
    want = (x.astype(np.float64) * probs.astype(np.float64).sum(axis=1, keepdims=True)).astype(dtype)
    assert np.array_equal(np.asarray(y, dtype=np.float64), np.asarray(want, dtype=np.float64)), profile
