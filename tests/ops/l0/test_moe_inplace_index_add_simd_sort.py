"""MoeInplaceIndexAdd's SIMD-sort kernel (key 200000, ProcessIndices) against goldens written from the kernel's
formula (op_kernel/arch35/moe_inplace_index_add_simd_sort.h):

* per core, windows of ubIndexFactor ids; a window is scored (FNV-1a hash of id >> lastDimShift, 256-bin histogram
  of the low hash byte, all four bytes for the window's last len % 256 ids; fullest bin / len in fp32);
* score > 0.01 and more than 128 ids: runs of equal ids (ascending), each summed in fp32 from 0 in slot order,
  rounded half-even to T, then added to var in T;
* otherwise: every slot added to var in T, slots ascending.

One core (or cores whose ids never meet): bit-exact. Several cores adding to one row: within
((1 + u)**k - 1) * sum|terms| of the exact sum, k = 2 * adds into the element (each update is rounded at most twice
on its way: in its run's fp32 sum, u32 <= u, and in the T rounding of a run or of an atomic add).
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
# The chains reach MoeInplaceIndexAddAiCore only with an fp32 accumulator; the 16-bit element carrier is a
# second compilation of the kernel (~12 s cold), so its cases are slow
DTYPE_PARAMS = [pytest.param(d, marks=[] if d == "fp32" else [pytest.mark.slow]) for d in DTYPES]
CHIP = "ascend950"
INDICES_SORT_THRESHOLD = 128     # ProcessIndices sorts a window of more ids than this only


def _windows(f, m):
    """(first slot, length) of every window of every core, core by core."""
    each, used, window = f["each_core_index_count"], f["used_core_num_before"], f["ub_index_factor"]
    for core in range(used):
        count = f["tail_core_index_count"] if core == used - 1 else each
        for start in range(0, count, window):
            yield core * each + start, min(window, count - start)


def golden(var, idx, upd, f):
    """The kernel's sequence of roundings, windows in core order; windows of 128 ids or fewer never sort.
    Returns (result, windows that sorted). The result also passes the formula check (index_add_golden.check_formula),
    so every test that holds the kernel to these bits holds it to the exact sums' error bound too."""
    want, sorted_windows = add_windows(var, idx, upd, _windows(f, len(idx)), INDICES_SORT_THRESHOLD)
    check_formula(want, var, idx, upd)
    return want, sorted_windows


def _slot_order(var, idx, upd):
    out = var.astype(np.float32)
    for v, r in zip(idx, upd.astype(np.float32)):
        out[v] = (out[v] + r).astype(var.dtype).astype(np.float32)
    return out.astype(var.dtype)


def _inputs(n, m, h, dtype, ids="random", seed=0):
    rng = np.random.default_rng(seed)
    var = rng.uniform(-2, 2, (n, h)).astype(dtype)
    if ids == "random":
        idx = rng.integers(0, n, m)
    elif ids == "sorted":
        idx = np.sort(rng.integers(0, n, m))
    elif ids == "passes":                     # arange(n) again and again: each window of n ids is duplicate-free
        idx = np.tile(np.arange(n), -(-m // n))[:m]
    else:                                     # "few": every id one of four rows
        idx = rng.choice(rng.permutation(n)[:4], m)
    upd = rng.uniform(-2, 2, (m, h)).astype(dtype)
    return var, idx.astype(np.int32), upd


def _launch(var, idx, upd, soc, check=None):
    size, ex = l0.get_workspace_size(var, idx, upd, soc=soc)
    l0.run(np.empty(size, np.uint8), size, ex, check=check)
    return ex


def _h(dtype, h_fp32):
    return h_fp32 if dtype == "fp32" else 2 * h_fp32      # 2-byte rows need 64 columns for 128 bytes


# id windows: (profile, n, m, h for fp32, ids, windows that sort)
ONE_CORE = {
    # 400 ids on one core: fp32 windows of 319 (sorted, uint8 ids) and 81 (<= 128: slot order); 2-byte rows of
    # 80 columns take other windows
    "u8-ids-2-windows": (dict(aiv_num=1), 16, 400, 40, "random", None),
    # 300 rows: int16 ids, 2000 slots in windows of about 300, out of order
    "i16-ids-7-windows": (dict(aiv_num=1), 300, 2000, 40, "random", None),
    # sorted input, few distinct ids
    "sorted-few-rows": (dict(aiv_num=1), 24, 600, 32, "sorted", None),
    "four-rows": (dict(aiv_num=1), 64, 700, 32, "few", None),
}


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("case", list(ONE_CORE), ids=list(ONE_CORE))
def test_one_core_is_bit_exact(case, dtype):
    profile, n, m, h, ids, want_sorted = ONE_CORE[case]
    var, idx, upd = _inputs(n, m, _h(dtype, h), DTYPES[dtype], ids, seed=1)
    want, sorted_windows = golden(var, idx, upd, _launch_fields(var, idx, upd, profile))
    assert sorted_windows >= 1
    if want_sorted is not None:
        assert sorted_windows == want_sorted
    ex = _launch(var, idx, upd, get_soc(CHIP, **profile))
    assert ex.tiling.tiling_key == KEY_SIMD_SORT
    assert_bits_equal(var, want)


def _launch_fields(var, idx, upd, profile):
    _, ex = l0.get_workspace_size(var, idx, upd, soc=get_soc(CHIP, **profile))
    return ex.tiling.fields


@pytest.mark.slow     # bf16: the 16-bit carrier's compilation
def test_the_sort_path_rounds_differently_from_slot_order():
    """The run sums are not the slot-order adds: the kernel matches the former, bit for bit."""
    var, idx, upd = _inputs(16, 400, 64, BF16, "random", seed=2)
    want, sorted_windows = golden(var, idx, upd, _launch_fields(var, idx, upd, dict(aiv_num=1)))
    assert sorted_windows >= 1 and not np.array_equal(want.view(np.uint16), _slot_order(var, idx, upd).view(np.uint16))
    _launch(var, idx, upd, get_soc(CHIP, aiv_num=1))
    assert_bits_equal(var, want)


@pytest.mark.parametrize("ids,sorts", [("passes", False), ("random", True)], ids=["score-0.0039", "score-high"])
def test_the_score_threshold(ids, sorts):
    """Windows of 256 ids (5 cores x 256, a large custom UB): ids 0..255 once each hash to 256 different low bytes
    (score 1/256, no sort); random ids fill some bin past 0.01 (sort)."""
    profile = dict(ub_size=640 * 1024, aiv_num=5)
    var, idx, upd = _inputs(256, 1280, 128, F32, ids, seed=3)
    f = _launch_fields(var, idx, upd, profile)
    assert f["ub_index_factor"] == 256
    want, sorted_windows = golden(var, idx, upd, f)
    assert sorted_windows == (5 if sorts else 0)
    before = var.copy()
    _launch(var, idx, upd, get_soc(CHIP, **profile))
    check_within_bound(var, before, idx, upd)       # every row gets an add from each of the 5 cores


@pytest.mark.parametrize("n_ids", [128, 129], ids=["128-ids-slot-order", "129-ids-sorted"])
def test_the_window_length_threshold(n_ids):
    var, idx, upd = _inputs(8, n_ids, 64, F32, "random", seed=4)
    f = _launch_fields(var, idx, upd, dict(aiv_num=1))
    want, sorted_windows = golden(var, idx, upd, f)
    assert f["ub_index_factor"] == n_ids and sorted_windows == (n_ids > 128)
    if n_ids == 128:
        assert_bits_equal(want, _slot_order(var, idx, upd))
    _launch(var, idx, upd, get_soc(CHIP, aiv_num=1))
    assert_bits_equal(var, want)


MULTI_CORE = {
    # stock 64 cores, 2048 slots: 32 ids per core, windows <= 128 (slot order), rows shared between cores
    "stock-64cores": (dict(), 256, 2048, 32),
    # 4 cores of 500 ids: sorted windows, rows shared between cores
    "4cores-sorted": (dict(aiv_num=4), 64, 2000, 32),
    # a 64 KiB UB: windows of a few dozen ids on 3 cores
    "ub64k-3cores": (dict(ub_size=65536, aiv_num=3), 40, 900, 64),
}


@pytest.mark.parametrize("dtype", [d for d in DTYPE_PARAMS if d.values[0] in ("fp32", "bf16")])
@pytest.mark.parametrize("case", list(MULTI_CORE), ids=list(MULTI_CORE))
def test_multi_core_within_the_order_bound(case, dtype):
    profile, n, m, h = MULTI_CORE[case]
    var, idx, upd = _inputs(n, m, _h(dtype, h), DTYPES[dtype], "random", seed=5)
    before = var.copy()
    ex = _launch(var, idx, upd, get_soc(CHIP, **profile))
    assert ex.tiling.tiling_key == KEY_SIMD_SORT and ex.tiling.fields["used_core_num_before"] > 1
    check_within_bound(var, before, idx, upd)


def test_checked_mode_is_clean_but_for_the_waived_pad_race():
    """The one race checked mode lets pass is the real kernel's (kernel.SORTED_PAD_RACE), once per sorted window."""
    var, idx, upd = _inputs(16, 400, 40, F32, "random", seed=6)
    want, sorted_windows = golden(var, idx, upd, _launch_fields(var, idx, upd, dict(aiv_num=1)))
    ex = _launch(var, idx, upd, get_soc(CHIP, aiv_num=1), check="race")
    assert sorted_windows == 1 and ex.report.extra.get("waived_races") == sorted_windows
    assert_bits_equal(var, want)


@pytest.mark.parametrize("bad,slot", [(-1, 7), (16, 300), (2 ** 31 - 1, 399)],
                         ids=["negative-sorted-window", "rows-sorted-window", "int32-max-short-window"])
def test_an_index_outside_var_faults(bad, slot):
    var, idx, upd = _inputs(16, 400, 40, F32, "random", seed=7)
    idx[slot] = bad
    with pytest.raises(OutOfBoundsError):
        _launch(var, idx, upd, get_soc(CHIP, aiv_num=1))


def test_the_pre_split_branch_is_not_modelled():
    """Axis 1 of (8, 1, 64) with 5 ids: fewer ids than pre rows, rows under 1 KiB per core -> ProcessPre."""
    rng = np.random.default_rng(8)
    var = rng.uniform(-2, 2, (8, 1, 64)).astype(F32)
    idx, upd = np.zeros(5, np.int32), rng.uniform(-2, 2, (8, 5, 64)).astype(F32)
    with pytest.raises(NotImplementedError, match="ProcessPre"):
        l0.get_workspace_size(var, idx, upd, None, 1)
