"""MoeInplaceIndexAddWithSorted (l0): tiling figures, the executor's checks, and results against a NumPy golden.

Golden (written from the op's definition, not from the kernel): row r of the result is var[r] plus
alpha * updates[positions[k]] for every k with sorted_values[k] == r.
* Keys 2 / 3 / 6 (Fix) add a row's terms in sorted order on one core: fp32 accumulation from var[r],
  one round-half-even cast at the end, so the golden repeats that order and must match bit for bit.
* Keys 4 / 5 (int) are exact in any order (two's-complement wrap).
* Key 1 (fp32, atomic adds) adds per-core partial sums in the cores' race order: the result must lie
  within the classic bound |fl(sum) - sum| <= gamma(k) * sum|terms| of the exact (float64) sum, k being
  the number of fp32 additions any order makes for that row; with integer-valued data it is exact.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import OutOfBoundsError
from ops import InnerNullptrError, ParamInvalidError
from ops.common.inplace_index_add_with_sorted import index_add_with_sorted_executor
from tests.bits import assert_bits_equal
from tiling import TensorDesc, TilingError, get_soc
from tiling.moe_inplace_index_add_with_sorted import moe_inplace_index_add_with_sorted as tiling_fn

BF16 = np.dtype(ml_dtypes.bfloat16)
U = 2.0 ** -24   # unit roundoff of fp32


# --- golden -----------------------------------------------------------------------------------------------------
def golden_fixed_order(var, sorted_values, positions, updates, alpha=None):
    """Each row: fp32 accumulator = var row, plus each of its terms in sorted order (times alpha in fp32),
    cast once to var's dtype (round half to even)."""
    out = var.astype(np.float32)
    upd = updates.astype(np.float32)
    a = np.float32(1.0 if alpha is None else alpha)
    for k in range(sorted_values.size):
        term = upd[positions[k]] if alpha is None or a == 1 else upd[positions[k]] * a
        out[sorted_values[k]] = out[sorted_values[k]] + term
    return out.astype(var.dtype)


def golden_exact(var, sorted_values, positions, updates, alpha=None):
    """The sum in float64 (ints: int64 then wrapped to var's dtype)."""
    wide = np.int64 if var.dtype.kind == "i" else np.float64
    out = var.astype(wide)
    terms = updates.astype(wide) * (1 if alpha is None else wide(alpha))
    np.add.at(out, sorted_values, terms[positions])
    return out.astype(var.dtype) if var.dtype.kind == "i" else out


def atomic_error_bound(var, sorted_values, positions, updates, cores):
    """gamma(k) * (|var| + sum |terms|) per element, k = terms of the row + cores + 1 (every addition a
    race order can make: each core's run starts from 0, then one atomic add per core)."""
    mags = np.abs(var.astype(np.float64))
    np.add.at(mags, sorted_values, np.abs(updates.astype(np.float64))[positions])
    counts = np.bincount(sorted_values, minlength=var.shape[0]).reshape((-1,) + (1,) * (var.ndim - 1))
    k = counts + cores + 1
    return k * U / (1 - k * U) * mags


def make_case(rng, dtype, rows, adds, hidden, id_pool=None, var_init="zeros", integer_values=False):
    """Random ids over `rows` rows (or drawn from the list `id_pool`; a tuple is used as the ids themselves),
    stably sorted: (var, sorted_values, positions, updates)."""
    if isinstance(id_pool, tuple):
        ids, adds = np.array(id_pool), len(id_pool)
    else:
        ids = rng.choice(id_pool, adds) if id_pool is not None else rng.integers(0, rows, adds)
    ids = ids.astype(np.int32)
    order = np.argsort(ids, kind="stable").astype(np.int32)
    shape = (adds, hidden) if hidden else (adds,)
    vshape = (rows, hidden) if hidden else (rows,)
    if np.dtype(dtype).kind == "i":
        updates = rng.integers(-1000, 1000, shape).astype(dtype)
        var = rng.integers(-1000, 1000, vshape).astype(dtype) if var_init == "random" else np.zeros(vshape, dtype)
    else:
        src = rng.integers(-64, 64, shape) if integer_values else rng.standard_normal(shape) * 4
        updates = src.astype(dtype)
        var = (rng.standard_normal(vshape).astype(dtype) if var_init == "random" else np.zeros(vshape, dtype))
    return var, ids[order], order, updates


def run_case(var, sv, pos, upd, *, soc="ascend910b", alpha=None, deterministic=False, threads=2):
    ex = index_add_with_sorted_executor(var, sv, pos, upd, soc=soc, alpha=alpha, deterministic=deterministic)
    ex.run(threads=threads)
    return ex


def small_soc(aiv_num, ub_size=None):
    return get_soc("ascend910b", aiv_num=aiv_num, ub_size=ub_size)


# --- exact (Fix keys and ints) --------------------------------------------------------------------------------
# id: (dtype, deterministic, soc, rows, adds, hidden, id pool, var init, alpha)
EXACT_CASES = {
    "bf16-48cores-duplicates": (BF16, False, "ascend910b", 9, 300, 40, None, "zeros", None),
    "fp16-runs-span-many-cores": (np.float16, False, "ascend910_93", 3, 500, 24, None, "random", None),
    "fp32-deterministic-key6": (np.float32, True, "ascend910b", 11, 260, 33, None, "random", None),
    "bf16-one-id-on-every-core": (BF16, False, small_soc(6), 4, 90, 16, [2], "random", None),
    # 4 cores x 3-4 ids: the last core's ids all continue core 1's run
    "bf16-last-core-inside-previous-run": (BF16, False, small_soc(4), 3, 0, 8, (0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2),
                                           "random", None),
    # core 0's run of id 1 covers all of core 1 and the first id of core 2
    "fp32-det-run-through-a-whole-core": (np.float32, True, small_soc(4), 4, 0, 8, (0, 1, 1, 1, 1, 1, 1, 2, 2, 3, 3),
                                          "random", None),
    "fp16-all-distinct-ids-1d": (np.float16, False, "ascend950", 400, 400, 0, None, "random", None),
    "bf16-hidden-split-in-3-pieces": (BF16, False, small_soc(5, 16384), 6, 70, 450, None, "random", None),
    "fp32-det-hidden-split": (np.float32, True, small_soc(3, 16384), 5, 40, 600, None, "random", None),
    "bf16-id-windows-over-1536": (BF16, False, small_soc(2), 40, 4000, 4, None, "zeros", None),
    "bf16-alpha-half": (BF16, False, small_soc(7), 6, 80, 20, None, "random", 0.5),
    "fp16-alpha-one-skips-muls": (np.float16, False, small_soc(7), 6, 80, 20, None, "random", 1.0),
    "int32-key5-atomic-wraps": (np.int32, False, "ascend910b", 5, 300, 17, None, "random", 3),
    "int16-key4-atomic": (np.int16, False, small_soc(9), 4, 120, 40, None, "random", None),
}


# the integer kernels (keys 4 / 5; no caller in this family uses them) each cost a cold compile: marked slow
SLOW_EXACT = {"int32-key5-atomic-wraps", "int16-key4-atomic"}


@pytest.mark.parametrize("case", [pytest.param(v, id=k, marks=pytest.mark.slow if k in SLOW_EXACT else ())
                                  for k, v in EXACT_CASES.items()])
def test_exact_against_the_golden(case, rng):
    dtype, det, soc, rows, adds, hidden, pool, init, alpha = case
    var, sv, pos, upd = make_case(rng, dtype, rows, adds, hidden, pool, init)
    before = var.copy()
    ex = run_case(var, sv, pos, upd, soc=soc, alpha=alpha, deterministic=det, threads=4)
    if np.dtype(dtype).kind == "i":
        want = golden_exact(before, sv, pos, upd, alpha)
    else:
        want = golden_fixed_order(before, sv, pos, upd, alpha)
    assert_bits_equal(var, want)
    assert ex.report.block_dim == ex.tiling.block_dim


def test_fix_kernels_are_bit_identical_for_every_thread_count(rng):
    var, sv, pos, upd = make_case(rng, BF16, 5, 200, 24, var_init="random")
    results = []
    for threads in (1, 3, 8):
        out = var.copy()
        run_case(out, sv, pos, upd, threads=threads)
        results.append(out.view(np.uint16))
    assert all(np.array_equal(results[0], r) for r in results[1:])


# --- key 1: fp32 atomic adds -----------------------------------------------------------------------------------
# id: (soc, rows, adds, hidden, var init, threads)
ATOMIC_CASES = {
    "48cores-8threads-few-rows": ("ascend910b", 4, 400, 32, "zeros", 8),
    "64cores-16threads-random-var": ("ascend950", 7, 700, 20, "random", 16),
    "hidden-split-3cores": (small_soc(3, 16384), 5, 60, 800, "random", 3),
}


@pytest.mark.parametrize("case", ATOMIC_CASES.values(), ids=ATOMIC_CASES.keys())
def test_fp32_atomic_within_the_order_bound(case, rng):
    soc, rows, adds, hidden, init, threads = case
    var, sv, pos, upd = make_case(rng, np.float32, rows, adds, hidden, var_init=init)
    before = var.copy()
    ex = run_case(var, sv, pos, upd, soc=soc, threads=threads)
    assert ex.tiling.tiling_key == 1
    exact = golden_exact(before, sv, pos, upd)
    bound = atomic_error_bound(before, sv, pos, upd, ex.tiling.block_dim)
    assert np.all(np.abs(var.astype(np.float64) - exact) <= bound)


def test_fp32_atomic_exact_values_lose_no_update(rng):
    """Integer-valued fp32 sums are exact in any order: a lost or torn atomic add would show."""
    var, sv, pos, upd = make_case(rng, np.float32, 3, 960, 64, integer_values=True)
    run_case(var, sv, pos, upd, threads=12)
    assert np.array_equal(var, golden_exact(np.zeros_like(var), sv, pos, upd).astype(np.float32))


# --- tiling ----------------------------------------------------------------------------------------------------
def _desc(var_shape, adds, dtype):
    return (TensorDesc(var_shape, dtype), TensorDesc((adds,) + tuple(var_shape[1:]), dtype),
            TensorDesc((adds,), "int32"), TensorDesc((adds,), "int32"))


# id: (dtype, deterministic, soc, var shape, adds, key, expected fields); figures worked out by hand from the
# tiling formulas: UB = ub_size - 256 - 12288 - 1024; maxSize = AlignDown(UB / buffers, 32) / bytes
TILING_CASES = {
    "bf16-910b-7168": (BF16, False, "ascend910b", (512, 7168), 4096, 3,
                       [48, 0, 86, 54, 1, 1, 1, 512 * 7168, 4096, 4096 * 7168, 7168, 13072, 7168, 1, 7168, 512,
                        1, 86, 86, 1, 54, 54]),
    "fp32-910b-key1": (np.float32, False, "ascend910b", (64, 100), 10, 1,
                       [10, 0, 1, 1, 1, 1, 1, 6400, 10, 1000, 100, 22880, 100, 1, 100, 64, 1, 1, 1, 1, 1, 1]),
    "fp32-det-950-split": (np.float32, True, "ascend950", (8, 50000), 130, 6,
                           # UB 253696 - 13312 = 240384; /3 = 80128 -> /4 = 20032; 50000 = 2 x 20032 + 9936;
                           # ids: ceil(130 / 64) = 3 per core, ceil(130 / 3) = 44 cores, the last one gets 1
                           [44, 0, 3, 1, 1, 1, 1, 400000, 130, 6500000, 50000, 20032, 20032, 3, 9936, 8,
                            1, 3, 3, 1, 1, 1]),
    "fp16-windows": (np.float16, False, small_soc(2), (10, 8), 4000, 2,
                     [2, 0, 2000, 2000, 1, 1, 1, 80, 4000, 32000, 8, 13072, 8, 1, 8, 10, 2, 1536, 464, 2, 1536, 464]),
    "int16-key4": (np.int16, False, "ascend910_93", (3, 5), 100, 4,
                   [34, 0, 3, 1, 1, 1, 1, 15, 100, 500, 5, 45760, 5, 1, 5, 3, 1, 3, 3, 1, 1, 1]),
}


@pytest.mark.parametrize("case", TILING_CASES.values(), ids=TILING_CASES.keys())
def test_tiling_figures(case):
    dtype, det, soc, var_shape, adds, key, fields = case
    result = tiling_fn(*_desc(var_shape, adds, dtype), soc=soc, deterministic=det)
    assert result.tiling_key == key
    assert result.data() == fields
    assert result.block_dim == fields[0]
    assert result.workspace_size == 16 * 1024 * 1024
    assert result.ub_fits


def test_tiling_enable_alpha_and_negative_axis():
    result = tiling_fn(*_desc((4, 6), 8, np.float32), TensorDesc((1,), np.float32), -2)
    assert result.fields["enable_alpha"] == 1


# id: (arguments, soc, message fragment)
TILING_FAILURES = {
    "value-dtype-differs": (lambda: _desc((4, 6), 8, BF16)[:1] + _desc((4, 6), 8, np.float16)[1:], "ascend910b",
                            "must be the same as var"),
    "int64-ids": (lambda: _desc((4, 6), 8, BF16)[:2] + (TensorDesc((8,), "int64"),) * 2, "ascend910b", "int32"),
    "dims-differ": (lambda: (TensorDesc((4, 6), BF16), TensorDesc((8, 6, 1), BF16)) + _desc((4, 6), 8, BF16)[2:],
                    "ascend910b", "number of dims"),
    "row-length-differs": (lambda: (TensorDesc((4, 6), BF16), TensorDesc((8, 7), BF16)) + _desc((4, 6), 8, BF16)[2:],
                           "ascend910b", "dimension 1"),
    "no-ids": (lambda: _desc((4, 6), 0, BF16), "ascend910b", "cannot equal 0"),
    "zero-length-piece": (lambda: _desc((4, 600), 8, BF16), get_soc("ascend910b", ub_size=13312 + 256 + 100),
                          "divides by zero"),
}


@pytest.mark.parametrize("case", TILING_FAILURES.values(), ids=TILING_FAILURES.keys())
def test_tiling_failures(case):
    args, soc, fragment = case
    with pytest.raises(TilingError, match=fragment) as err:
        tiling_fn(*args(), soc=soc)
    assert err.value.status == 561002


def test_tiling_axis_other_than_zero_fails():
    with pytest.raises(TilingError, match="dim only supports 0"):
        tiling_fn(*_desc((4, 6), 8, BF16), None, 1)


# --- executor checks -------------------------------------------------------------------------------------------
def _good(rng, dtype=BF16):
    return make_case(rng, dtype, 4, 12, 8)


# id: (mutation of (var, sv, pos, upd) -> args, expected error, status, message fragment)
EXECUTOR_ERRORS = {
    "float64-var": (lambda v, s, p, u: (v.astype(np.float64), s, p, u.astype(np.float64)), InnerNullptrError,
                    "not supported"),
    "updates-dtype-differs": (lambda v, s, p, u: (v, s, p, u.astype(np.float32)), InnerNullptrError,
                              "must equal var dtype"),
    "int64-ids": (lambda v, s, p, u: (v, s.astype(np.int64), p, u), InnerNullptrError, "int32"),
    "2d-ids": (lambda v, s, p, u: (v, s.reshape(3, 4), p.reshape(3, 4), u), InnerNullptrError, "1-D"),
    "positions-shorter": (lambda v, s, p, u: (v, s, p[:-1], u), InnerNullptrError, "one updates row per sorted id"),
    "row-length-differs": (lambda v, s, p, u: (v, s, p, np.zeros((12, 9), u.dtype)), InnerNullptrError,
                           "dimension 1"),
    "empty-ids": (lambda v, s, p, u: (v, s[:0], p[:0], u), InnerNullptrError, "cannot equal 0"),
    "read-only-var": (lambda v, s, p, u: (np.broadcast_to(v, v.shape), s, p, u), ParamInvalidError, "writeable"),
    "var-aliases-updates": (lambda v, s, p, u: (u, s, p, u), ParamInvalidError, "shares memory"),
}


@pytest.mark.parametrize("case", EXECUTOR_ERRORS.values(), ids=EXECUTOR_ERRORS.keys())
def test_executor_refuses(case, rng):
    mutate, error, fragment = case
    with pytest.raises(error, match=fragment):
        index_add_with_sorted_executor(*mutate(*_good(rng)), soc="ascend910b")


def test_executor_alpha_must_be_a_number(rng):
    with pytest.raises(ParamInvalidError, match="alpha"):
        index_add_with_sorted_executor(*_good(rng), alpha="2")
    with pytest.raises(ParamInvalidError, match="whole number"):
        index_add_with_sorted_executor(*_good(rng, np.int32), alpha=0.5)


# id: (which array gets a bad value, value, named source)
BAD_INDEX = {
    "id-past-var": ("sv", 4, "sorted_values"),
    "negative-id": ("sv", -3, "sorted_values"),
    "position-past-updates": ("pos", 12, "positions"),
}


@pytest.mark.parametrize("dtype", [BF16, np.float32], ids=["fix-kernel", "avg-kernel"])
@pytest.mark.parametrize("case", BAD_INDEX.values(), ids=BAD_INDEX.keys())
def test_bad_indices_end_in_out_of_bounds(case, dtype, rng):
    which, value, source = case
    var, sv, pos, upd = _good(rng, dtype)
    if which == "sv":
        sv = sv.copy()
        sv[-1 if value >= 0 else 0] = value
    else:
        pos = pos.copy()
        pos[5] = value
    before = var.copy()
    ex = index_add_with_sorted_executor(var, sv, pos, upd)
    with pytest.raises(OutOfBoundsError) as err:
        ex.run(threads=2)
    assert source in str(err.value)
    assert var.shape == before.shape
