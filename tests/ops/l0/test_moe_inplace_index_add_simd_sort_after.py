"""MoeInplaceIndexAdd's SIMD-sort column split (key 200000, ProcessAfter, selected when afterAxis * sizeof(var) >=
1024 B * cores) against a golden written from the kernel's formula (op_kernel/arch35/moe_inplace_index_add_simd_sort.h):

* every core takes its own columns and walks all the ids in windows of ubIndexFactor, scoring each window (the
  FNV-1a histogram of index_add_golden.window_score);
* score > 0.01, whatever the window's length (ProcessIndices also wants more than 128 ids): runs of equal ids
  (ascending), each summed in fp32 from +0 in slot order, rounded half-even to T, then added to var in T;
* otherwise: every slot added to var in T, slots ascending.

No element is written by two cores and one core's windows follow each other, so the result is the golden's, bit for
bit, on any number of cores and whatever the column pieces: a column's sequence of roundings does not depend on
which core or piece holds it.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import OutOfBoundsError
from ops.l0 import moe_inplace_index_add as l0
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.moe_inplace_index_add import KEY_SIMD_SORT

from .index_add_golden import add_windows, check_formula, check_within_bound

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
DTYPES = {"fp32": F32, "fp16": F16, "bf16": BF16}
CHIP = "ascend950"
SPLIT_AFTER_BYTES_PER_CORE = 1024    # the selection: afterAxis * sizeof(var) >= this * cores


def _windows(f, m):
    """(first slot, length) of every window: the same for every core (all ids, windows of ubIndexFactor)."""
    window = f["ub_index_factor"]
    return [(start, min(window, m - start)) for start in range(0, m, window)]


def golden(var, idx, upd, f, sort_floor=0):
    """sort_floor=0: the column split's rule (score alone); 128 would be the id split's, 2**62 never sorts. The result
    also passes the formula check (index_add_golden.check_formula), which shares nothing with the windows."""
    want, sorted_windows = add_windows(var, idx, upd, _windows(f, len(idx)), sort_floor)
    check_formula(want, var, idx, upd)
    return want, sorted_windows


def _inputs(n, m, h, dtype, ids="random", seed=0):
    rng = np.random.default_rng(seed)
    var = rng.uniform(-2, 2, (n, h)).astype(dtype)
    if ids == "random":
        idx = rng.integers(0, n, m)
    else:                                     # "passes": arange(n) again and again
        idx = np.tile(np.arange(n), -(-m // n))[:m]
    upd = rng.uniform(-2, 2, (m, h)).astype(dtype)
    return var, idx.astype(np.int32), upd


def _fields(var, idx, upd, profile):
    _, ex = l0.get_workspace_size(var, idx, upd, soc=get_soc(CHIP, **profile))
    return ex.tiling.fields


def _launch(var, idx, upd, profile, check=None):
    soc = get_soc(CHIP, **profile)
    assert l0.modelled(var, idx, upd, soc=soc)
    size, ex = l0.get_workspace_size(var, idx, upd, soc=soc)
    l0.run(np.empty(size, np.uint8), size, ex, check=check)
    return ex


def _h(dtype, h_fp32):
    return h_fp32 if dtype == "fp32" else 2 * h_fp32      # 2-byte rows need twice the columns for the same bytes


# profile, var rows, ids, fp32 columns (doubled for 2-byte T); ids repeat >= 5 times (the sort templates)
CASES = {
    # one core from 256 fp32 columns: windows of 36, uint8 ids
    "1core-h256-u8ids": (dict(aiv_num=1), 16, 400, 256),
    # 300 rows: int16 ids
    "1core-h256-i16ids": (dict(aiv_num=1), 300, 1500, 256),
    # 4 cores x 256 columns
    "4cores-h1024": (dict(aiv_num=4), 16, 400, 1024),
    # 258 columns per core, 256 on the last: core ranges that start inside a 32-byte block
    "4cores-tail-core-h1030": (dict(aiv_num=4), 16, 400, 1030),
    # a 64 KiB UB: windows of 8 ids, 94 column pieces of 32 per core and tails of 25 / 23
    "ub64k-3cores-94-pieces": (dict(aiv_num=3, ub_size=65536), 8, 48, 9001),
    # a 96 KiB UB: windows of one id (each sorts: a run of one)
    "ub96k-3cores-1-id-windows": (dict(aiv_num=3, ub_size=98304), 8, 40, 9001),
    # the stock 64-core 950 from 16384 fp32 columns
    "stock-64cores-h16384": (dict(), 6, 40, 16384),
}
SLOW_16BIT = [pytest.param(d, marks=pytest.mark.slow) for d in ("fp16", "bf16")]


@pytest.mark.parametrize("dtype", ["fp32"] + SLOW_16BIT)
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bit_exact_on_any_core_count(case, dtype):
    profile, n, m, h = CASES[case]
    var, idx, upd = _inputs(n, m, _h(dtype, h), DTYPES[dtype], seed=1)
    f = _fields(var, idx, upd, profile)
    assert f["is_split_after_axis"] == 1 and f["after_axis_factor"] > 0
    want, sorted_windows = golden(var, idx, upd, f)
    assert sorted_windows >= 1
    before = var.copy()
    ex = _launch(var, idx, upd, profile)
    assert ex.tiling.tiling_key == KEY_SIMD_SORT
    assert_bits_equal(var, want)
    if f["used_core_num_before"] > 1:
        check_within_bound(var, before, idx, upd)     # and the golden itself within the order bound of the exact sum


def test_windows_of_128_ids_or_fewer_sort():
    """Windows of 36 ids: ProcessAfter sorts them (the id split would add them slot by slot); the two orders give
    different bits here and the kernel has the sorted one."""
    profile = dict(aiv_num=1)
    var, idx, upd = _inputs(16, 400, 256, F32, seed=2)
    f = _fields(var, idx, upd, profile)
    assert f["ub_index_factor"] == 36
    want, sorted_windows = golden(var, idx, upd, f)
    slot_order, none_sorted = golden(var, idx, upd, f, sort_floor=2 ** 62)
    assert sorted_windows == 12 and none_sorted == 0
    assert not np.array_equal(want.view(np.uint32), slot_order.view(np.uint32))
    _launch(var, idx, upd, profile)
    assert_bits_equal(var, want)


@pytest.mark.parametrize("ids,sorts", [("passes", False), ("random", True)], ids=["score-0.0039", "score-high"])
def test_the_score_threshold(ids, sorts):
    """Windows of 256 ids (one core, a 1650 KiB UB): ids 0..255 once each hash to 256 different low bytes (score
    1/256: slot order); random ids fill some bin past 0.01 (sorted runs)."""
    profile = dict(aiv_num=1, ub_size=1650 * 1024)
    var, idx, upd = _inputs(256, 1280, 256, F32, ids, seed=3)
    f = _fields(var, idx, upd, profile)
    assert f["ub_index_factor"] == 256 and f["is_split_after_axis"] == 1
    want, sorted_windows = golden(var, idx, upd, f)
    assert sorted_windows == (5 if sorts else 0)
    _launch(var, idx, upd, profile)
    assert_bits_equal(var, want)


@pytest.mark.parametrize("profile,h_fp32", [(dict(aiv_num=1), 256), (dict(aiv_num=4), 1024)],
                         ids=["1core-256cols", "4cores-1024cols"])
@pytest.mark.parametrize("side", ["one-column-under", "at-the-threshold"])
def test_both_sides_of_the_selection_threshold(profile, h_fp32, side):
    """afterAxis * 4 bytes against 1024 B * cores: one column under it the id split runs, at it the column split;
    both simulated."""
    cores = profile["aiv_num"]
    assert h_fp32 * 4 == SPLIT_AFTER_BYTES_PER_CORE * cores
    h = h_fp32 - (side == "one-column-under")
    var, idx, upd = _inputs(16, 400, h, F32, seed=4)
    f = _fields(var, idx, upd, profile)
    assert (f["is_split_after_axis"], f["is_split_indices_axis"]) == ((0, 1) if h < h_fp32 else (1, 0))
    before = var.copy()
    _launch(var, idx, upd, profile)
    if h == h_fp32:
        want, _ = golden(before, idx, upd, f)
        assert_bits_equal(var, want)
    else:                                             # the id split: cores' adds meet in a row
        check_within_bound(var, before, idx, upd)


def test_checked_mode_is_clean_but_for_the_waived_pad_race():
    """The one race checked mode lets pass is the real kernel's (kernel.SORTED_PAD_RACE): once per sorted window
    per core, every core sorting every window itself. The core ranges start inside 32-byte blocks (258 columns)."""
    profile, n, m, h = CASES["4cores-tail-core-h1030"]
    var, idx, upd = _inputs(n, m, h, F32, seed=5)
    f = _fields(var, idx, upd, profile)
    want, sorted_windows = golden(var, idx, upd, f)
    ex = _launch(var, idx, upd, profile, check="race")
    assert ex.report.extra.get("waived_races") == sorted_windows * f["used_core_num_before"]
    assert_bits_equal(var, want)


@pytest.mark.parametrize("bad,slot", [(-1, 7), (16, 399)], ids=["negative", "rows"])
def test_an_index_outside_var_faults(bad, slot):
    var, idx, upd = _inputs(16, 400, 256, F32, seed=6)
    idx[slot] = bad
    with pytest.raises(OutOfBoundsError):
        _launch(var, idx, upd, dict(aiv_num=1))
