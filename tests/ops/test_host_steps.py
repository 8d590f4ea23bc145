"""The host l0 steps' half-precision paths (ops/_host.py) against references that do not share their code.

Mul and the index add widen bf16 / fp16 bits to fp32, compute there, and round once (half to even). For one
multiply or add of two half values that is the correctly rounded result, since fp32 carries more than
2p + 2 bits of either half type; the references here are the exact result (float64: products and sums of
two half values in one binade fit) rounded by ml_dtypes (bf16) or NumPy's float64 -> float16 cast, plus
ml_dtypes' own bf16 arithmetic. Every pair of values of chosen binades (every mantissa, both signs) is
checked, and every pair of a list of special values against the computation the steps used to run.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ops._host import (
    gather_rows,
    index_add_rows_step,
    masked_scatter_rows,
    mul_rows,
    nonzero_mask,
    round_to_half,
    sort_ids_as_fp32_step,
    transpose_2d,
    widen_half,
    zeros_like_step,
)
from tests.bits import assert_bits_equal

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
MANTISSA_BITS = {BF16: 7, F16: 10}
HALVES = [pytest.param(BF16, id="bf16"), pytest.param(F16, id="fp16")]


def binade(dtype, biased_exponent: int) -> np.ndarray:
    """Every value of one biased exponent, both signs: (2 * 2**mantissa_bits,) of dtype (exponent 0: the
    subnormals and the zeros)."""
    m = MANTISSA_BITS[dtype]
    mantissas = np.arange(1 << m, dtype=np.uint16)
    magnitudes = np.uint16(biased_exponent << m) | mantissas
    return np.concatenate([magnitudes, magnitudes | np.uint16(0x8000)]).view(dtype)


def specials(dtype) -> np.ndarray:
    """Zeros, infinities, NaNs with payloads, the smallest and largest subnormals and normals, max finite,
    values around 1 and 2 (either sign)."""
    if dtype == BF16:
        bits = [0x0000, 0x7F80, 0x7FC0, 0x7F81, 0x7FFF, 0x0001, 0x007F, 0x0080, 0x0081, 0x7F7F, 0x7F7E,
                0x3F80, 0x3F81, 0x3FFF, 0x4000, 0x3F00, 0x1F80, 0x5F80, 0x00FF, 0x0040]
    else:
        bits = [0x0000, 0x7C00, 0x7E00, 0x7C01, 0x7FFF, 0x0001, 0x03FF, 0x0400, 0x0401, 0x7BFF, 0x7BFE,
                0x3C00, 0x3C01, 0x3FFF, 0x4000, 0x3800, 0x1C00, 0x5C00, 0x07FF, 0x0200]
    bits = np.array(bits, dtype=np.uint16)
    return np.concatenate([bits, bits | np.uint16(0x8000)]).view(dtype)


def exact_then_round(exact: np.ndarray, dtype) -> np.ndarray:
    """float64 results (exact) rounded once to dtype by the dtype's own library."""
    with np.errstate(over="ignore", invalid="ignore"):
        return exact.astype(dtype)


def host_mul(a_values: np.ndarray, b_values: np.ndarray) -> np.ndarray:
    """out[i, j] = b[i] * a[j] through mul_rows (row i of a tiled matrix times b[i])."""
    a = np.ascontiguousarray(np.broadcast_to(a_values, (b_values.size, a_values.size)))
    out = np.empty(a.shape, dtype=a.dtype)
    mul_rows(a, b_values, out)
    return out


def host_add(a_values: np.ndarray, b_values: np.ndarray) -> np.ndarray:
    """out[i, j] = b[i] + a[j] through index_add_rows_step (var rows b[i] broadcast, each source row added once)."""
    var = np.ascontiguousarray(np.broadcast_to(b_values[:, None], (b_values.size, a_values.size)))
    source = np.ascontiguousarray(np.broadcast_to(a_values, var.shape))
    ids = np.arange(b_values.size, dtype=np.int32)
    index_add_rows_step(var, ids, source, lambda k, v: AssertionError((k, v))).run()
    return var


# biased exponents: the products / sums of the first stay normal, the second's overflow to infinity (or
# round to max finite), the third's fall in (or are) the subnormal range
MUL_BINADES = {BF16: [127, 192, 64], F16: [15, 23, 5]}
ADD_BINADES = {BF16: [127, 254, 0], F16: [15, 30, 0]}
BINADE_IDS = ["around-1", "overflow", "subnormal"]


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("which", range(3), ids=BINADE_IDS)
def test_mul_of_every_pair_of_one_binade_is_the_exact_product_rounded_once(dtype, which):
    v = binade(dtype, MUL_BINADES[dtype][which])
    got = host_mul(v, v)
    v64 = v.astype(np.float64)
    assert_bits_equal(got, exact_then_round(v64[:, None] * v64[None, :], dtype))
    if dtype == BF16:       # and ml_dtypes' own bf16 multiply
        with np.errstate(over="ignore"):
            assert_bits_equal(got, v[:, None] * v[None, :])


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("which", range(3), ids=BINADE_IDS)
def test_add_of_every_pair_of_one_binade_is_the_exact_sum_rounded_once(dtype, which):
    v = binade(dtype, ADD_BINADES[dtype][which])
    got = host_add(v, v)
    v64 = v.astype(np.float64)
    assert_bits_equal(got, exact_then_round(v64[:, None] + v64[None, :], dtype))
    if dtype == BF16:
        with np.errstate(over="ignore"):
            assert_bits_equal(got, v[:, None] + v[None, :])


@pytest.mark.parametrize("dtype", HALVES)
def test_mul_and_add_of_special_values_keep_the_bits_of_the_fp32_computation(dtype):
    """NaN payloads and signs are whatever the fp32 hardware operation gives and the cast then keeps, so the
    reference is that computation in NumPy (what these steps ran before): widen, operate, cast back."""
    v = specials(dtype)
    w32 = v.astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        want_mul = (w32[None, :] * w32[:, None]).astype(dtype)
        want_add = (w32[:, None] + w32[None, :]).astype(dtype)
        assert_bits_equal(host_mul(v, v), want_mul)
        assert_bits_equal(host_add(v, v), want_add)
    # and, NaNs aside, the exact results rounded once
    with np.errstate(invalid="ignore"):
        v64 = v.astype(np.float64)
        exact_results = (v64[:, None] * v64[None, :], v64[:, None] + v64[None, :])
    for got, exact in zip((want_mul, want_add), exact_results):
        keep = ~np.isnan(exact)
        assert_bits_equal(got, exact_then_round(exact, dtype), mask=keep)


@pytest.mark.parametrize("dtype", HALVES)
def test_widening_every_half_pattern_is_exact(dtype):
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    out = np.empty(h.shape, dtype=F32)
    widen_half(h, out)
    with np.errstate(invalid="ignore"):
        want = h.astype(F32)
    assert_bits_equal(out, want)


def fp32_patterns() -> np.ndarray:
    """fp32 bit patterns that stress a rounding to half: random ones, and every pattern of the ranges where
    the half types overflow, turn subnormal and are NaN (low bits spread), with both signs."""
    rng = np.random.default_rng(7)
    parts = [rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32),
             np.arange(0x477F0000, 0x47800100, dtype=np.uint32),          # fp16 max finite .. overflow
             np.arange(0x7F7F0000, 0x7F800001, dtype=np.uint32),          # bf16 max finite .. infinity
             np.arange(0x7F800001, 0x80000000, 251, dtype=np.uint32),     # NaN payloads
             np.arange(0x33000000, 0x38810000, 61, dtype=np.uint32),      # fp16 subnormal range
             np.arange(0, 0x00900000, 97, dtype=np.uint32)]               # fp32 subnormals, bf16's too
    ties = (np.arange(1 << 16, dtype=np.uint32) << 16)
    parts += [ties | 0x8000, ties | 0x7FFF, ties | 0x8001, ties | 0x1000, ties | 0x0FFF, ties | 0x3000]
    x = np.concatenate(parts)
    return np.concatenate([x, x | np.uint32(0x80000000)])


@pytest.mark.parametrize("dtype", HALVES)
def test_rounding_fp32_to_half_gives_the_bits_of_astype(dtype):
    f = fp32_patterns().view(F32)
    out = np.empty(f.shape, dtype=dtype)
    round_to_half(f, out)
    with np.errstate(over="ignore", invalid="ignore"):
        assert_bits_equal(out, f.astype(dtype))


@pytest.mark.parametrize("dtype", HALVES + [pytest.param(F32, id="fp32")])
def test_index_add_matches_np_add_at_with_repeated_ids_in_slot_order(dtype):
    """Rows hit several times accumulate in fp32 in slot order and round once at the end."""
    rng = np.random.default_rng(3)
    var = rng.standard_normal((40, 33)).astype(dtype)
    source = (rng.standard_normal((300, 33)) * 2.0 ** rng.integers(-20, 12, (300, 1))).astype(dtype)
    ids = rng.integers(0, 40, 310).astype(np.int32)         # more ids than source rows: the extra are unused
    acc = var.astype(F32)
    np.add.at(acc, ids[:300].astype(np.int64), source.astype(F32))
    with np.errstate(over="ignore"):
        want = acc.astype(dtype)
    index_add_rows_step(var, ids, source, lambda k, v: AssertionError((k, v))).run()
    assert_bits_equal(var, want)


def test_index_add_of_a_bad_id_raises_before_writing():
    var = np.ones((4, 3), dtype=BF16)
    source = np.ones((3, 3), dtype=BF16)
    step = index_add_rows_step(var, np.array([0, 4, 1], dtype=np.int32), source, lambda k, v: KeyError((k, v)))
    with pytest.raises(KeyError, match=r"\(1, 4\)"):
        step.run()
    assert np.array_equal(var, np.ones((4, 3), dtype=BF16))


@pytest.mark.parametrize("values", ["random", "specials"])
def test_mixed_mul_widens_bf16_and_keeps_the_fp32_product(values):
    if values == "random":
        rng = np.random.default_rng(5)
        a = rng.standard_normal((64, 130)).astype(BF16)
        w = rng.random(64, dtype=np.float32)
    else:       # every special bf16 times every special (fp32 NaN payloads included)
        sp = specials(BF16)
        a = np.ascontiguousarray(np.broadcast_to(sp, (sp.size + 2, sp.size)))
        w = np.concatenate([sp.astype(F32), np.array([0x7F800123, 0xFFA00001], dtype=np.uint32).view(F32)])
    out = np.empty(a.shape, dtype=F32)
    mul_rows(a, w, out)
    with np.errstate(invalid="ignore", over="ignore"):
        want = np.multiply(a.astype(F32), w[:, None])
    assert_bits_equal(out, want)


@pytest.mark.parametrize("dtype", HALVES + [pytest.param(F32, id="fp32")])
def test_gather_moves_bits_and_counts_negative_indices_from_the_end(dtype):
    x = np.arange(5 * 6, dtype=np.uint32).astype(f"u{dtype.itemsize}").reshape(5, 6)
    x[2, 3] = 0x7F81 if dtype.itemsize == 2 else 0x7F800001          # a signalling NaN pattern survives
    x = x.view(dtype)
    idx = np.array([4, 0, -1, 2, -5, 2], dtype=np.int32)
    out = np.empty((6, 6), dtype=dtype)
    gather_rows(x, idx, out)
    assert_bits_equal(out, np.take(x, idx, axis=0))        # np.take copies the stored bits


@pytest.mark.parametrize("bad", [5, -6], ids=["past-the-end", "before-the-start"])
def test_gather_out_of_range_raises_np_take_error(bad):
    x = np.zeros((5, 2), dtype=BF16)
    idx = np.array([0, bad], dtype=np.int32)
    with pytest.raises(IndexError) as want:
        np.take(x, idx, axis=0, out=np.empty((2, 2), dtype=BF16))
    with pytest.raises(IndexError) as got:
        gather_rows(x, idx, np.empty((2, 2), dtype=BF16))
    assert str(got.value) == str(want.value)


def test_masked_scatter_and_transposes_move_half_bits_unchanged():
    rng = np.random.default_rng(9)
    mask = rng.random((6, 10)) < 0.4
    values = rng.integers(0, 1 << 16, int(mask.sum()), dtype=np.uint64).astype(np.uint16)
    dst = np.zeros((6, 10), dtype=np.uint16)
    dst[mask] = values
    got = np.zeros((6, 10), dtype=BF16)
    masked_scatter_rows(got, mask, values.view(BF16))
    assert_bits_equal(got, dst.view(BF16))
    back = np.empty((10, 6), dtype=BF16)
    transpose_2d(got, back)
    assert_bits_equal(back, dst.T.view(BF16))


@pytest.mark.parametrize("dtype", HALVES + [pytest.param(F32, id="fp32"), pytest.param(np.dtype(bool), id="bool")])
def test_zeros_like_writes_zeros(dtype):
    arr = np.ones((3, 7), dtype=dtype)
    zeros_like_step(arr).run()
    assert np.array_equal(arr, np.zeros((3, 7), dtype=dtype))


@pytest.mark.parametrize("dtype", [pytest.param(np.dtype(bool), id="bool"), pytest.param(np.dtype(np.int8), id="int8")])
def test_routing_map_cast_to_bool_is_not_equal_zero(dtype):
    rm = np.array([[0, 1, -3 if dtype != np.dtype(bool) else 1], [0, 0, 1]], dtype=np.int8).astype(dtype)
    out = np.empty(rm.shape, dtype=bool)
    nonzero_mask(rm, out)
    assert np.array_equal(out, np.not_equal(rm, 0))


@pytest.mark.parametrize("shape", [(6, 10), (2048, 1100)], ids=["small", "tiled"])
def test_transpose_moves_bits_at_every_size(shape):
    src = np.random.default_rng(2).integers(0, 1 << 16, shape, dtype=np.uint64).astype(np.uint16).view(BF16)
    dst = np.empty(shape[::-1], dtype=BF16)
    transpose_2d(src, dst)
    assert_bits_equal(dst, src.T)


def test_masked_scatter_of_another_dtype_converts_as_numpy_does():
    mask = np.array([[True, False], [True, True]])
    dst = np.zeros((2, 2), dtype=BF16)
    masked_scatter_rows(dst, mask, np.array([1.5, 2.0, 3.25], dtype=F32))
    assert np.array_equal(dst.astype(F32), np.array([[1.5, 0.0], [2.0, 3.25]], dtype=F32))


@pytest.mark.parametrize("ids", [
    pytest.param(np.random.default_rng(4).integers(0, 300, 1000), id="token-ids"),
    pytest.param(np.random.default_rng(4).integers(0, 1 << 20, 1000), id="wide-ids"),
    pytest.param(np.array([5, -1, 0, 0x7F800001, 3, -2147483648, 0, 0x7F800000, -8388608, 5]), id="negative-nan-inf"),
])
def test_sort_is_the_stable_argsort_of_the_ids_fp32_bits(ids):
    ids = ids.astype(np.int32)
    values, order = np.empty_like(ids), np.empty_like(ids)
    sort_ids_as_fp32_step(ids, values, order).run()
    with np.errstate(invalid="ignore"):
        perm = np.argsort(ids.view(F32), kind="stable")
    assert np.array_equal(order, perm) and np.array_equal(values, ids[perm])
