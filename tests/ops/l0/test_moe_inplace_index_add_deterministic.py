"""MoeInplaceIndexAdd's deterministic template (keys 300000 / 300001 / 300002, the deterministic switch on) with
its pre or column split: MoeInplaceIndexAddDeterminsticNotQuant (op_kernel/arch35/
moe_inplace_index_add_determinstic_notquant.h), against a golden written from the formula in the documented order:

    for j ascending: var[pre, indices[j], :] = T(var[pre, indices[j], :] + updates[pre, j, :])

(every element's adds come from one core, slot by slot, each an atomic add rounded to T): bit-exact.
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
# The family's chains reach this template only with an fp32 accumulator; the 16-bit element carrier is a
# second compilation of the kernel (~15-25 s cold), so its cases are slow
DTYPE_PARAMS = [pytest.param(d, marks=[] if d == "fp32" else [pytest.mark.slow]) for d in DTYPES]
CHIP = "ascend950"


def golden(var, idx, upd, axis):
    """Slot order, rounded to T after every add (var (N, H) with axis 0 or (P, N, H) with axis 1)."""
    out = (var[None] if axis == 0 else var).astype(np.float32)
    terms = (upd[None] if axis == 0 else upd).astype(np.float32)
    for j, row in enumerate(idx):
        out[:, row] = (out[:, row] + terms[:, j]).astype(var.dtype).astype(np.float32)
    return out.reshape(var.shape).astype(var.dtype)


def _inputs(shape, m, axis, dtype, ids="random", seed=0):
    rng = np.random.default_rng(seed)
    var = rng.uniform(-2, 2, shape).astype(dtype)
    n = shape[axis]
    idx = rng.permutation(n)[:m] if ids == "distinct" else rng.integers(0, n, m)
    upd_shape = list(shape)
    upd_shape[axis] = m
    return var, idx.astype(np.int32), rng.uniform(-2, 2, upd_shape).astype(dtype)


def _launch(var, idx, upd, axis, profile, check=None):
    size, ex = l0.get_workspace_size(var, idx, upd, axis=axis, soc=get_soc(CHIP, **profile), deterministic=True)
    l0.run(np.empty(size, np.uint8), size, ex, check=check)
    return ex


# (var shape for fp32, ids, axis, profile, ids kind, the fields the case is about)
CASES = {
    # 100 columns over 50 cores, one window of 20 ids (repeats: the copies get their MTE3 barriers)
    "column-split": ((16, 100), 20, 0, {}, "random", dict(is_split_after_axis=1, indices_loop_size=1)),
    # 20 distinct ids: ComputeIdxCount finds as many runs as ids, no barriers
    "column-split-distinct-ids": ((64, 100), 20, 0, {}, "distinct", dict(is_split_after_axis=1)),
    # 2000 ids: two windows of 1623
    "column-split-2-windows": ((16, 100), 2000, 0, {}, "random", dict(is_split_after_axis=1, indices_loop_size=2)),
    # a 64 KiB UB on 2 cores: 4000 columns per core, more than half the UB (16160 bytes): a window of
    # CeilAlign(20 * 4, 32) / 4 = 24 ids, pieces of FloorAlign((16160 - 96) div (24 * 8), 8) = 80 fp32 columns
    # (160 of 2 bytes): 50 pieces per core
    "column-split-wide-rows": ((4, 8000), 20, 0, dict(ub_size=65536, aiv_num=2), "random",
                               dict(is_split_after_axis=1, ub_index_factor=24, update_loop_size=50)),
    # 100 pre rows on one core, the 40 ids in one window: batches of ubIndexFactor div 40 pre rows
    "pre-split-batches": ((100, 4, 16), 40, 1, dict(aiv_num=1), "random", dict(is_split_pre_axis=1,
                                                                              indices_loop_size=1)),
    # 70 pre rows over 35 cores, a 64 KiB UB: 3000 ids in windows
    "pre-split-windows": ((70, 4, 16), 3000, 1, dict(ub_size=65536), "random", dict(is_split_pre_axis=1)),
}


def _shape(shape, dtype):
    """The fp32 case's shape with twice the columns for 2-byte types (rows of the same bytes: the same tiling)."""
    return shape if dtype == "fp32" else shape[:-1] + (2 * shape[-1],)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bit_exact_against_slot_order(case, dtype):
    shape, m, axis, profile, ids, fields = CASES[case]
    var, idx, upd = _inputs(_shape(shape, dtype), m, axis, DTYPES[dtype], ids, seed=1)
    want = golden(var, idx, upd, axis)
    ex = _launch(var, idx, upd, axis, profile)
    f = ex.tiling.fields
    assert ex.tiling.tiling_key == 300000 + {"fp32": 0, "fp16": 1, "bf16": 2}[dtype]
    assert ex.report.kernel == "MoeInplaceIndexAddDeterminsticNotQuant"
    assert {k: f[k] for k in fields} == fields
    if case == "pre-split-batches":
        assert f["ub_index_factor"] // m < f["each_core_pre_axis_count"]     # more than one batch
    if case == "pre-split-windows":
        assert f["indices_loop_size"] > 1
    assert_bits_equal(var, want)


@pytest.mark.slow     # bf16: the 16-bit carrier's compilation
def test_the_order_is_visible():
    """bf16 adds in slot order round differently from one sum rounded once: the golden is not order-free."""
    var, idx, upd = _inputs((16, 200), 400, 0, BF16, seed=2)
    want = golden(var, idx, upd, 0)
    once = var.astype(np.float64)
    np.add.at(once, idx, upd.astype(np.float64))
    assert not np.array_equal(want.view(np.uint16), once.astype(BF16).view(np.uint16))
    _launch(var, idx, upd, 0, {})
    assert_bits_equal(var, want)


@pytest.mark.parametrize("case", ["column-split", "pre-split-windows"])
def test_checked_mode_is_clean(case):
    shape, m, axis, profile, ids, _ = CASES[case]
    var, idx, upd = _inputs(shape, m, axis, F32, ids, seed=3)
    want = golden(var, idx, upd, axis)
    ex = _launch(var, idx, upd, axis, profile, check="race")
    assert_bits_equal(var, want)
    # the column split's ComputeIdxCount pad races (kernel.IDX_COUNT_SORT_PAD_RACE, the WAW beside the sorted ids,
    # and IDX_COUNT_PAD_RACE, the VF's read), once each per window per core; the pre split sorts nothing
    waived = ex.report.extra.get("waived_races", 0)
    assert waived == (2 * ex.tiling.fields["used_core_num_before"] if case == "column-split" else 0)


@pytest.mark.parametrize("bad", [-1, 16, 2 ** 31 - 1], ids=["negative", "rows", "int32-max"])
def test_an_index_outside_var_faults(bad):
    var, idx, upd = _inputs((16, 100), 20, 0, F32, seed=4)
    idx[7] = bad
    with pytest.raises(OutOfBoundsError):
        _launch(var, idx, upd, 0, {})


def test_the_id_split_runs_the_quantising_kernel():
    """16 columns, 200 ids: the id split, MoeInplaceIndexAddDeterminstic (test_moe_inplace_index_add_quant.py)."""
    var, idx, upd = _inputs((40, 16), 200, 0, F32)
    assert l0.modelled(var, idx, upd, deterministic=True)
    _, ex = l0.get_workspace_size(var, idx, upd, deterministic=True)
    assert ex.kernel.name == "MoeInplaceIndexAddDeterminstic"


def test_the_switch_off_takes_another_template():
    var, idx, upd = _inputs((16, 100), 20, 0, F32)
    _, ex = l0.get_workspace_size(var, idx, upd)
    assert ex.tiling.tiling_key == 100000
