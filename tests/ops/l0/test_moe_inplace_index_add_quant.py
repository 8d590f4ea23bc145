"""MoeInplaceIndexAdd's deterministic id split: MoeInplaceIndexAddDeterminstic (op_kernel/arch35/
moe_inplace_index_add_determinstic.h), the quantising kernel, against a golden written from its formulas:

    S[c, r]   fp32 sum from 0, in slot order, of chunk c's update rows with id r (a chunk: one core's window of
              ubIndexFactor ids; its runs come out in ascending id order)
    R[r]      max over chunks of |S[c, r]| (0 if no chunk has r; NaN if any |S| is)     -> the scales region
    n[r]      chunks that have r                                                        -> the counts region
    Q[r]      sum over chunks (int32) of rint_sat(S[c, r] / (R[r] * n[r] or 1) * 2^30)  -> the quantised region
    var[r]   += T(Q[r] * (R[r] * n[r]) / 2^30) * alphaValue_                             (alphaValue_ = 0: no alpha)

The workspace regions are compared bit for bit after the run (the aclnn caller owns the workspace), and var too:
without alpha the kernel adds value x 0, so var keeps its bits except that a -0 meeting a +0 product becomes +0
and an inf / NaN value makes NaN. isOpti (ids / varInAxis < 0.1) visits only rows some chunk has, once each
(AtomicExch takes the count to 0): untouched rows keep even their -0.
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
# the chains reach the id split with fp32 only; a 16-bit var is a second compilation of every stage
DTYPE_PARAMS = [pytest.param(d, marks=[] if d == "fp32" else [pytest.mark.slow]) for d in DTYPES]
CHIP = "ascend950"
SCALING = np.float32(2.0 ** 30)


def _rint_sat_i32(x: np.ndarray) -> np.ndarray:
    r = np.rint(x.astype(np.float64))
    r = np.where(np.isnan(r), 0.0, np.clip(r, -2.0 ** 31, 2.0 ** 31 - 1))
    return r.astype(np.int64).astype(np.int32)


def _core_slots(f: dict):
    """(core, first slot, slot count) of every core the id split uses."""
    each, used = f["each_core_index_count"], f["used_core_num_before"]
    for k in range(used):
        yield k, k * each, f["tail_core_index_count"] if k == used - 1 else each


@np.errstate(invalid="ignore")          # inf / inf and NaN x 0 are what the kernel computes too
def golden(var, idx, upd, f: dict):
    """(var after the run, counts, scales, quantised sums) for var (P, N, H) / upd (P, K, H) views."""
    pres, rows, cols = var.shape
    counts = np.zeros(pres * rows, np.uint32)
    scale = np.zeros((pres * rows, cols), np.float32)
    quant = np.zeros((pres * rows, cols), np.int32)
    window = f["ub_index_factor"]
    for p in range(pres):
        chunks = []                                          # (row, S) of every run of every chunk
        for _, first, n in _core_slots(f):
            for w0 in range(first, first + n, window):
                ids = idx[w0: min(w0 + window, first + n)]
                terms = upd[p, w0: w0 + len(ids)].astype(np.float32)
                for r in np.unique(ids):
                    s = np.zeros(cols, np.float32)
                    for j in np.flatnonzero(ids == r):       # slot order
                        s = (s + terms[j]).astype(np.float32)
                    chunks.append((p * rows + r, s))
        for row, s in chunks:
            scale[row] = np.maximum(scale[row], np.abs(s))     # np.maximum: a NaN wins
            counts[row] += 1
        for row, s in chunks:
            r_n = (scale[row] * np.float32(counts[row])).astype(np.float32)
            q = _rint_sat_i32(((s / np.where(r_n == 0, np.float32(1), r_n)).astype(np.float32) * SCALING))
            quant[row] = (quant[row].astype(np.int64) + q).astype(np.int32)
    value = ((quant.astype(np.float32) * (scale * counts[:, None].astype(np.float32))) / SCALING).astype(np.float32)
    if var.dtype != F32:
        limit = np.float32(ml_dtypes.finfo(var.dtype).max)    # NumPy's finfo knows bf16 only from ml_dtypes 0.7
        value = np.where(np.isfinite(value), np.clip(value, -limit, limit), value)
    added = (value.astype(var.dtype).astype(np.float32) * np.float32(0)).astype(var.dtype)   # x alphaValue_ (0)
    visited = counts > 0 if f["is_opti"] else np.ones(pres * rows, bool)
    out = var.reshape(pres * rows, cols).copy()
    out[visited] = (out[visited].astype(np.float32) + added[visited].astype(np.float32)).astype(var.dtype)
    if f["is_opti"]:
        counts[:] = 0                                        # AtomicExch(0) of every visited row
    return out.reshape(var.shape), counts, scale, quant


def _inputs(shape, m, axis, dtype, seed=0, specials=False):
    rng = np.random.default_rng(seed)
    var = rng.uniform(-2, 2, shape).astype(dtype)
    var.reshape(-1)[::7] = -0.0                              # the -0 -> +0 of a +0 product shows
    upd_shape = list(shape)
    upd_shape[axis] = m
    upd = rng.uniform(-3, 3, upd_shape).astype(dtype)
    if specials:
        flat = upd.reshape(-1)
        flat[5], flat[40], flat[77] = np.nan, np.inf, -np.inf
    return var, rng.integers(0, shape[axis], m).astype(np.int32), upd


def _run(var, idx, upd, axis, profile, check=None):
    """Launch; returns (executor, the user workspace's counts, scales and quantised sums)."""
    soc = get_soc(CHIP, **profile)
    size, ex = l0.get_workspace_size(var, idx, upd, axis=axis, soc=soc, deterministic=True)
    workspace = np.empty(size, np.uint8)
    l0.run(workspace, size, ex, check=check)
    rows, numel = var.size // var.shape[-1], var.size
    user = workspace[soc.lib_api_workspace:].view(np.uint32)
    return (ex, user[:rows], user[rows: rows + numel].view(np.float32),
            user[rows + numel: rows + 2 * numel].view(np.int32))


# (var shape, ids, axis, profile, the fields the case is about)
CASES = {
    # 40 rows x 16 columns, 200 ids over 50 cores (4 each): every step in one window per core
    "one-window": ((40, 16), 200, 0, {}, dict(is_opti=0, used_core_num_before=50)),
    # 4000 rows, 200 ids (0.05 of the rows): isOpti, the slots' rows dequantised once each
    "opti": ((4000, 8), 200, 0, {}, dict(is_opti=1)),
    # a 40 KiB UB on 8 cores (rows of at most 8 / 2 columns): 600 ids, 75 a core, in windows of 15 (step 1),
    # 38 (step 2) and 7 var rows (step 3)
    "small-ub-windows": ((50, 4), 600, 0, dict(ub_size=40960, aiv_num=8),
                         dict(is_opti=0, ub_index_factor=15, ub_quanta_indx_factor=38, ub_var_factor=7)),
    # axis 1: two pre rows, each its own first and second step
    "two-pre-rows": ((2, 30, 8), 160, 1, {}, dict(pre_axis=2, is_opti=0)),
}


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_workspace_and_var_bit_exact(case, dtype):
    shape, m, axis, profile, fields = CASES[case]
    var, idx, upd = _inputs(shape, m, axis, DTYPES[dtype], seed=1, specials=case == "one-window")
    view = (lambda a: a[None]) if axis == 0 else (lambda a: a)
    want_var, want_counts, want_scale, want_quant = golden(view(var), idx, view(upd), _fields(var, idx, upd, axis,
                                                                                              profile))
    ex, counts, scale, quant = _run(var, idx, upd, axis, profile)
    f = ex.tiling.fields
    assert ex.report.kernel == "MoeInplaceIndexAddDeterminstic"
    assert {k: f[k] for k in fields} == fields
    if case == "small-ub-windows":
        assert f["ub_index_factor"] < f["each_core_index_count"] and f["ub_quanta_indx_factor"] < \
            f["each_core_index_count"]
    assert np.array_equal(counts, want_counts), "counts"
    assert_bits_equal(scale, want_scale.reshape(-1), "scales")
    assert np.array_equal(quant, want_quant.reshape(-1)), "quantised sums"
    assert_bits_equal(var, want_var.reshape(var.shape), "var")


def _fields(var, idx, upd, axis, profile):
    from tiling.moe_inplace_index_add import moe_inplace_index_add as tiling
    return tiling(var, idx, upd, None, axis, soc=get_soc(CHIP, **profile), deterministic=True).fields


def test_the_quantisation_is_real_and_var_is_left_alone():
    """The scales and quantised sums carry the sums (Q x scale / 2^30 is the sum within the quantisation step),
    while var only trades -0 for +0: the kernel's Muls by alphaValue_ = 0 (no alpha input)."""
    var, idx, upd = _inputs((40, 16), 200, 0, F32, seed=5)
    before = var.copy()
    _, counts, scale, quant = _run(var, idx, upd, 0, {})
    exact = np.zeros((40, 16))
    np.add.at(exact, idx, upd.astype(np.float64))
    r_n = scale.reshape(40, 16).astype(np.float64) * counts[:, None]
    back = quant.reshape(40, 16).astype(np.float64) * r_n / 2.0 ** 30
    magnitude = np.zeros((40, 16))
    np.add.at(magnitude, idx, np.abs(upd.astype(np.float64)))
    # half a step of 2^-30 per chunk (chunks <= n), and the fp32 chunk sums' rounding
    assert np.all(np.abs(back - exact) <= r_n * 2.0 ** -30 + magnitude * 2.0 ** -21)
    assert np.count_nonzero(exact) > 500
    assert np.array_equal(var, before) and not np.array_equal(var.view(np.uint32), before.view(np.uint32))


def test_checked_mode_is_clean():
    """The end pad after the sorted ids is the real kernel's race (kernel.QUANT_SORT_PAD_RACE / QUANT_PAD_RACE):
    waived once each per window and core."""
    var, idx, upd = _inputs((40, 16), 200, 0, F32, seed=3)
    ex, *_ = _run(var, idx, upd, 0, {}, check="race")
    assert ex.report.extra.get("waived_races", 0) == 2 * ex.tiling.fields["used_core_num_before"]


def test_an_index_past_the_workspace_faults():
    """An id past the var's rows lands in the kernel's own workspace regions (rows of the counts, scales and
    quantised sums past their ends are the next region's), as on the chip: no fault there. One past the whole
    workspace faults."""
    var, idx, upd = _inputs((40, 16), 200, 0, F32, seed=4)
    idx[7] = 40
    _run(var, idx, upd, 0, {})
    idx[7] = 2 ** 31 - 1
    with pytest.raises(OutOfBoundsError):
        _run(var, idx, upd, 0, {})
