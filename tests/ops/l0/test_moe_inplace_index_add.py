"""l0op::MoeInplaceIndexAddAiCore on Ascend 950 (MoeInplaceIndexAdd arch35 kernels): SIMT and SIMD against goldens
written from the formula var[indices[j]] += updates[j].

* SIMD (key 400000): every element gets its adds from one core, in index order, each rounded to T: bit-exact
  against `_slot_order_golden`.
* SIMT (keys 1000xx): atomic adds from many threads and cores in a timing-dependent order. The exact sum (float64)
  must be within ((1 + u)**k - 1) * sum |terms| (k = adds into the element, u = unit roundoff of T: 2**-24 fp32,
  2**-11 fp16, 2**-8 bf16) of the result, the bound of recursive summation in T in any order (valid for any k,
  also where k * u >= 1); an element with one add is exact.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import OutOfBoundsError
from ops.l0 import moe_inplace_index_add as l0
from tests.bits import assert_bits_equal
from tiling import get_soc

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
DTYPES = {"fp32": F32, "fp16": F16, "bf16": BF16}
UNIT_ROUNDOFF = {F32: 2.0 ** -24, F16: 2.0 ** -11, BF16: 2.0 ** -8}
CHIP = "ascend950"


def _inputs(n, m, h, dtype, indices="random", seed=0, zero_var=False):
    rng = np.random.default_rng(seed)
    var = np.zeros((n, h), dtype) if zero_var else rng.uniform(-2, 2, (n, h)).astype(dtype)
    if indices == "unique":
        idx = rng.permutation(n)[:m]
    elif indices == "sorted":
        idx = np.sort(rng.integers(0, n, m))
    elif indices == "one-row":
        idx = np.full(m, n // 2)
    else:
        idx = rng.integers(0, n, m)
    upd = rng.uniform(-2, 2, (m, h)).astype(dtype)
    return var, idx.astype(np.int32), upd


def _launch(var, idx, upd, soc=CHIP, check=None):
    size, ex = l0.get_workspace_size(var, idx, upd, soc=soc)
    l0.run(np.empty(size, np.uint8), size, ex, check=check)
    return ex


def _slot_order_golden(var, idx, upd):
    """var[idx[j]] = T(var[idx[j]] + upd[j]) for j ascending, the sum in fp32 rounded half to even to T."""
    out = var.astype(np.float32)
    dtype = var.dtype
    for j, row in enumerate(idx):
        out[row] = (out[row] + upd[j].astype(np.float32)).astype(dtype).astype(np.float32)
    return out.astype(dtype)


def _check_within_order_bound(got, var, idx, upd):
    exact = var.astype(np.float64)
    magnitude = np.abs(var.astype(np.float64))
    adds = np.zeros(var.shape[0], np.int64)
    np.add.at(exact, idx, upd.astype(np.float64))
    np.add.at(magnitude, idx, np.abs(upd.astype(np.float64)))
    np.add.at(adds, idx, 1)
    u = UNIT_ROUNDOFF[var.dtype]
    k = adds[:, None].astype(np.float64)
    bound = ((1 + u) ** k - 1) * magnitude        # every partial sum within (1+u)^i of the magnitudes
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= bound), f"max excess {np.max(err - bound)}"
    once = adds == 1                                  # one rounding of an exact sum: the golden's bits
    want = _slot_order_golden(var, idx, upd)
    assert_bits_equal(got, want, "rows added to once", mask=once[:, None])


# --- SIMT --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("indices", ["random", "unique", "sorted", "one-row"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n,m,h", [(16, 32, 100), (8, 3, 5), (200, 700, 190)],
                         ids=["4cores", "1core", "64cores-2-strides"])
def test_simt_within_the_order_bound(n, m, h, dtype, indices):
    if indices == "unique":
        m = min(m, n)                                   # one slot per row at most
    var, idx, upd = _inputs(n, m, h, DTYPES[dtype], indices)
    before = var.copy()
    ex = _launch(var, idx, upd)
    assert ex.tiling.tiling_key == 100000 + {"fp32": 0, "fp16": 1, "bf16": 27}[dtype]
    assert ex.tiling.block_dim == min(-(-m * h // 1024), 64)
    _check_within_order_bound(var, before, idx, upd)


def test_simt_unique_indices_are_bit_exact_from_zeros():
    var, idx, upd = _inputs(64, 40, 33, BF16, "unique", zero_var=True)
    _launch(var, idx, upd)
    assert_bits_equal(var, _slot_order_golden(np.zeros_like(var), idx, upd))


def test_simt_rows_of_no_index_keep_their_bits():
    var, idx, upd = _inputs(32, 10, 17, F32, "sorted")
    before = var.copy()
    _launch(var, idx, upd)
    untouched = np.setdiff1d(np.arange(32), idx)
    assert_bits_equal(var[untouched], before[untouched])


# --- SIMD --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("indices", ["random", "sorted", "one-row"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("profile,n,m,h", [
    ({}, 6, 12, 8192),                                   # 64 cores x 128 columns, one index window
    (dict(ub_size=65536), 7, 32, 8192),                  # 3 index windows of 15 (32 div 7 < 5: no sort)
    (dict(ub_size=65536, aiv_num=2), 5, 20, 4100),       # 37 column pieces per core
    (dict(aiv_num=3), 5, 9, 1000),                       # the last core's shorter slice
], ids=["stock", "ub64k-windows", "ub64k-2cores-pieces", "3cores-tail"])
def test_simd_is_slot_order_exact(profile, n, m, h, dtype, indices):
    var, idx, upd = _inputs(n, m, h, DTYPES[dtype], indices, seed=3)
    want = _slot_order_golden(var, idx, upd)
    ex = _launch(var, idx, upd, soc=get_soc(CHIP, **profile))
    assert ex.tiling.tiling_key == 400000
    assert_bits_equal(var, want)


# --- checked mode, bad indices, what is not modelled ------------------------------------------------------------
@pytest.mark.parametrize("case", ["simt", "simd"])
def test_checked_mode_is_clean(case):
    h = 8192 if case == "simd" else 300
    var, idx, upd = _inputs(6, 12, h, F32, seed=4)
    want_ex = _launch(var.copy(), idx, upd)
    ex = _launch(var, idx, upd, check="race", soc=get_soc(CHIP, ub_size=65536) if case == "simd" else CHIP)
    assert ex.tiling.tiling_key == want_ex.tiling.tiling_key
    assert not ex.report.extra.get("waived_races")


@pytest.mark.parametrize("bad", [-1, 6, 2 ** 31 - 1], ids=["negative", "rows", "int32-max"])
@pytest.mark.parametrize("h", [300, 8192], ids=["simt", "simd"])
def test_an_index_outside_var_faults_and_writes_nothing_outside(bad, h):
    var, idx, upd = _inputs(6, 12, h, F32, seed=5)
    idx[7] = bad
    with pytest.raises(OutOfBoundsError):
        _launch(var, idx, upd)


@pytest.mark.parametrize("var_dtype,index_dtype,alpha", [(np.int32, np.int32, None), (np.float32, np.int64, None),
                                                         (np.float32, np.int32, np.ones(1, np.float32))],
                         ids=["int32-var", "int64-indices", "alpha"])
def test_what_is_not_modelled_raises_after_the_tiling(var_dtype, index_dtype, alpha):
    var = np.zeros((4, 5), var_dtype)
    with pytest.raises(NotImplementedError):
        l0.get_workspace_size(var, np.zeros(3, index_dtype), np.ones((3, 5), var_dtype), alpha)
