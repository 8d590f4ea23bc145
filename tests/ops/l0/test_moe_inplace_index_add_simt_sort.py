"""MoeInplaceIndexAdd's SIMT-sort kernel (key 500000) against goldens written from the kernel's formula
(op_kernel/arch35/moe_inplace_index_add_simt_sort.h):

* per core, windows of indicesUbFactor ids; a window is scored (index_add_golden.window_score);
* score > 0.01 (any window length): per pre row, the runs of equal ids in [0, varInAxis), ascending, each summed in
  fp32 from 0 in slot order, rounded half-even to T, then added to var in T;
* otherwise: every slot added to var in T by its own thread (order-dependent where a window repeats an id);
* ids outside [0, varInAxis) add nothing.

One core whose windows all sort: bit-exact. Several cores, or windows that do not sort: within the order bound of
index_add_golden.check_within_bound.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import OutOfBoundsError
from ops.l0 import moe_inplace_index_add as l0
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.moe_inplace_index_add import KEY_SIMT_SORT

from .index_add_golden import check_within_bound, window_score

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
DTYPES = {"fp32": F32, "fp16": F16, "bf16": BF16}
# The family's chains reach this template only with an fp32 accumulator; the 16-bit element carrier is a
# second compilation of the kernel (~15-25 s cold), so its cases are slow
DTYPE_PARAMS = [pytest.param(d, marks=[] if d == "fp32" else [pytest.mark.slow]) for d in DTYPES]
CHIP = "ascend950"


def _windows(f):
    """(first slot, length) of every window, core by core."""
    window, used = f["indices_ub_factor"], f["used_core_num"]
    for core in range(used):
        last = core == used - 1
        loops = f["tail_block_indices_loop_size"] if last else f["indices_loop_size"]
        for k in range(loops):
            n = f["indice_axis_tail_num"] if last and k == loops - 1 else window
            yield core * f["each_core_index_count"] + k * window, n


def golden(var, idx, upd, f):
    """The sort path's sequence of roundings, windows in core order (var (P, N, H) or (N, H)). Returns (result,
    windows that sorted, windows that did not: those are left out of the result)."""
    var3 = var.reshape((1,) + var.shape) if var.ndim == 2 else var
    upd3 = upd.reshape((1,) + upd.shape) if upd.ndim == 2 else upd
    dt, rows = var.dtype, var3.shape[1]
    out = var3.astype(np.float32)
    sorted_windows = unsorted_windows = 0
    for first, n in _windows(f):
        ids, terms = idx[first:first + n], upd3[:, first:first + n].astype(np.float32)
        if window_score(ids, var3.shape[2]) <= np.float32(0.01):
            unsorted_windows += 1
            continue
        sorted_windows += 1
        for v in np.unique(ids):
            if not 0 <= v < rows:
                continue
            s = np.zeros((var3.shape[0], var3.shape[2]), np.float32)
            for r in np.flatnonzero(ids == v):          # slot order within the run
                s = s + terms[:, r]
            out[:, v] = (out[:, v] + s.astype(dt).astype(np.float32)).astype(dt).astype(np.float32)
    return out.astype(dt).reshape(var.shape), sorted_windows, unsorted_windows


def _inputs(n, m, h, dtype, ids="random", seed=0, pre=None):
    rng = np.random.default_rng(seed)
    lead = () if pre is None else (pre,)
    var = rng.uniform(-2, 2, lead + (n, h)).astype(dtype)
    if ids == "random":
        idx = rng.integers(0, n, m)
    else:                    # "spread-passes": multiples of 8 (distinct after the statistic's >> 3) again and again
        idx = np.tile(np.arange(0, n, 8), -(-m // (n // 8)))[:m]
    upd = rng.uniform(-2, 2, lead + (m, h)).astype(dtype)
    return var, idx.astype(np.int32), upd


def _tiling(var, idx, upd, profile, axis=0):
    _, ex = l0.get_workspace_size(var, idx, upd, axis=axis, soc=get_soc(CHIP, **profile))
    return ex.tiling


def _launch(var, idx, upd, profile, axis=0, check=None):
    size, ex = l0.get_workspace_size(var, idx, upd, axis=axis, soc=get_soc(CHIP, **profile))
    l0.run(np.empty(size, np.uint8), size, ex, check=check)
    return ex


def _h(dtype, h_fp32):
    return h_fp32 if dtype == "fp32" else 2 * h_fp32      # rows of the same bytes: the same tiling


# (profile, n rows, m ids, h columns for fp32, pre rows (axis 1) or None, ids): one core, every window sorts
ONE_CORE = {
    # 16 rows: uint8 ids (cast mode 4), 400 ids in one window
    "u8-ids": (dict(aiv_num=1), 16, 400, 16, None, "random"),
    # 300 rows: int16 ids (cast mode 1)
    "i16-ids": (dict(aiv_num=1), 300, 2000, 8, None, "random"),
    # 33000 rows: int32 ids sorted as they are (cast mode 0), several windows
    "i32-ids-windows": (dict(aiv_num=1), 33000, 165000, 1, None, "random"),
    # axis 1 of (5, 16, 8) with a 51 KiB UB: the 100 ids in one window, two pre rows of updates per batch, three
    # batches (the last of one)
    "pre-rows-in-batches": (dict(aiv_num=1, ub_size=52224), 16, 100, 8, 5, "random"),
}


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("case", list(ONE_CORE), ids=list(ONE_CORE))
def test_one_core_is_bit_exact(case, dtype):
    profile, n, m, h, pre, ids = ONE_CORE[case]
    var, idx, upd = _inputs(n, m, _h(dtype, h), DTYPES[dtype], ids, seed=1, pre=pre)
    axis = 0 if pre is None else 1
    f = _tiling(var, idx, upd, profile, axis).fields
    want, sorted_windows, unsorted_windows = golden(var, idx, upd, f)
    assert sorted_windows >= 1 and unsorted_windows == 0
    ex = _launch(var, idx, upd, profile, axis)
    assert ex.tiling.tiling_key == KEY_SIMT_SORT and ex.report.kernel == "MoeInplaceIndexAddSimtSort"
    assert_bits_equal(var, want)


BRANCHES = {
    "u8-ids": dict(indices_cast_mode=4, used_core_num=1, indices_loop_size=1),
    "i16-ids": dict(indices_cast_mode=1, used_core_num=1, indices_loop_size=1),
    "i32-ids-windows": dict(indices_cast_mode=0, used_core_num=1),
    "pre-rows-in-batches": dict(indices_cast_mode=4, indices_ub_factor=100, normal_updates_pre_num=2,
                                tail_updates_pre_num=1, updates_pre_loop=3),
}


@pytest.mark.parametrize("case", list(BRANCHES), ids=list(BRANCHES))
def test_the_one_core_cases_reach_their_branch(case):
    fields = BRANCHES[case]
    profile, n, m, h, pre, ids = ONE_CORE[case]
    var, idx, upd = _inputs(n, m, h, F32, ids, pre=pre)
    f = _tiling(var, idx, upd, profile, 0 if pre is None else 1).fields
    assert {k: f[k] for k in fields} == fields
    if case == "i32-ids-windows":
        assert f["indices_loop_size"] > 1


@pytest.mark.slow     # bf16: the 16-bit carrier's compilation
def test_the_sort_path_rounds_differently_from_slot_order():
    """bf16 run sums are rounded once per run, not once per add: the kernel matches the former, bit for bit."""
    var, idx, upd = _inputs(16, 400, 32, BF16, seed=2)
    want, _, _ = golden(var, idx, upd, _tiling(var, idx, upd, dict(aiv_num=1)).fields)
    slot_order = var.astype(np.float32)
    for v, r in zip(idx, upd.astype(np.float32)):
        slot_order[v] = (slot_order[v] + r).astype(BF16).astype(np.float32)
    assert not np.array_equal(want.view(np.uint16), slot_order.astype(BF16).view(np.uint16))
    _launch(var, idx, upd, dict(aiv_num=1))
    assert_bits_equal(var, want)


# (profile, n, m, h, ids): cores meet on rows, or windows that do not sort
MULTI = {
    # stock 64 cores: windows halved until 32 cores have work, rows shared between cores
    "stock-u8-ids": (dict(), 16, 2000, 16, "random"),
    "stock-i16-ids": (dict(), 1000, 6000, 4, "random"),
    # 4 cores, windows of 768 ids: three passes over 256 ids distinct after the statistic's >> 3, so every bin holds
    # 3 of 768 (whole 256-id rounds: no tail bytes), no window sorts: one atomic add per slot (ComputeNoSort), an
    # id three times per window
    "no-sort-windows": (dict(aiv_num=4, ub_size=117344), 2048, 10240, 16, "spread-passes"),
}


@pytest.mark.parametrize("dtype", [d for d in DTYPE_PARAMS if d.values[0] in ("fp32", "bf16")])
@pytest.mark.parametrize("case", list(MULTI), ids=list(MULTI))
def test_within_the_order_bound(case, dtype):
    profile, n, m, h, ids = MULTI[case]
    var, idx, upd = _inputs(n, m, _h(dtype, h), DTYPES[dtype], ids, seed=5)
    f = _tiling(var, idx, upd, profile).fields
    _, sorted_windows, unsorted_windows = golden(var, idx, upd, f)
    if case == "no-sort-windows":
        assert sorted_windows == 0 and unsorted_windows >= 1
    else:
        assert f["used_core_num"] > 1 and sorted_windows >= 1
    before = var.copy()
    ex = _launch(var, idx, upd, profile)
    assert ex.tiling.tiling_key == KEY_SIMT_SORT
    check_within_bound(var, before, idx, upd)


@pytest.mark.parametrize("n,bad", [(16, [-1, -7, 16, 200]), (40000, [-1, -2, 40000, 2 ** 31 - 1])],
                         ids=["u8-ids-negative-and-past-the-rows", "i32-ids-negative-and-past-the-rows"])
def test_ids_outside_var_add_nothing(n, bad):
    """The SIMT bodies skip them; uint8 mode first turns negatives into 255 (whose run the 255 end pad leaves open:
    dropped)."""
    var, idx, upd = _inputs(n, 5 * n + 50, 1, F32, seed=8)
    idx[[3, 10, 11, 40][:len(bad)]] = bad
    want, sorted_windows, unsorted_windows = golden(var, idx, upd, _tiling(var, idx, upd, dict(aiv_num=1)).fields)
    assert sorted_windows >= 1 and unsorted_windows == 0
    _launch(var, idx, upd, dict(aiv_num=1))
    assert_bits_equal(var, want)


@pytest.mark.parametrize("n,bad", [(16, 256), (300, 40000), (300, -40000)],
                         ids=["u8-mode-256", "i16-mode-40000", "i16-mode-minus-40000"])
def test_an_id_the_narrowing_cast_cannot_hold_faults(n, bad):
    var, idx, upd = _inputs(n, 6 * n, 4, F32, seed=9)
    idx[5] = bad
    with pytest.raises(OutOfBoundsError):
        _launch(var, idx, upd, dict(aiv_num=1))


def test_a_window_of_pad_ids_only_faults():
    """Every id -1 (int16 mode): no run start, uniqueIdNum 0 - 1 (the chip reads past its run table)."""
    var, idx, upd = _inputs(300, 1500, 4, F32, seed=10)
    idx[:] = -1
    with pytest.raises(OutOfBoundsError):
        _launch(var, idx, upd, dict(aiv_num=1))


@pytest.mark.parametrize("case", ["u8-ids", "pre-rows-in-batches"])
def test_checked_mode_is_clean(case):
    profile, n, m, h, pre, ids = ONE_CORE[case]
    var, idx, upd = _inputs(n, m, h, F32, ids, seed=6, pre=pre)
    axis = 0 if pre is None else 1
    want, _, _ = golden(var, idx, upd, _tiling(var, idx, upd, profile, axis).fields)
    _launch(var, idx, upd, profile, axis, check="race")
    assert_bits_equal(var, want)


def test_checked_mode_is_clean_on_the_no_sort_path():
    profile, n, m, h, ids = MULTI["no-sort-windows"]
    var, idx, upd = _inputs(n, m, h, F32, ids, seed=6)
    before = var.copy()
    _launch(var, idx, upd, profile, check="race")
    check_within_bound(var, before, idx, upd)
