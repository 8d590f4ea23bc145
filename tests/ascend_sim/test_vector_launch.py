"""Vector instructions (arithmetic, casts, tree reductions) and the launcher (threads, SyncAll, reports)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, OutOfBoundsError, ParamRangeError, SyncError
from ascend_sim._jit import global_aicore
from tests.bits import assert_bits_equal
from tiling import get_soc

from .harness import run, tbuf


def tree(x: np.ndarray) -> np.float32:
    """Pairwise tree sum of a power-of-two-long float32 vector."""
    x = x.astype(np.float32)
    while x.size > 1:
        x = x[0::2] + x[1::2]
    return x[0]


@global_aicore
def reduce_kernel(c, p, src, dst):
    """Load src into UB, run BlockReduceSum (p[0] repeats, mask p[1]) or WholeReduceSum (p[2] == 1), dump."""
    buf = asc.tbuf_get(c, 0, asc.ub_f32(c))
    out = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, buf, asc.gm_at(src, 0), buf.size)
    asc.duplicate(c, out, 0.0, out.size)
    if p[2] == 0:
        asc.block_reduce_sum(c, out, buf, p[0], p[1], 1, 1, 8)
    else:
        asc.whole_reduce_sum(c, out, buf, p[1], p[0], 1, 1, 8)
    asc.data_copy(c, asc.gm_at(dst, 0), out, out.size)


@pytest.mark.parametrize("repeat,mask", [(1, 64), (3, 64), (2, 37), (1, 1), (4, 8)])
@pytest.mark.parametrize("kind", ["block", "whole"])
def test_reductions_follow_the_pairwise_tree(kind, repeat, mask, rng):
    src = (rng.standard_normal(1024) * rng.choice([1e-3, 1.0, 1e4], 1024)).astype(np.float32)
    dst = np.zeros(256, dtype=np.float32)
    run([reduce_kernel], [tbuf("buf", 4096), tbuf("out", 1024)], np.array([repeat, mask, kind == "whole"]),
        asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0))
    lanes = np.zeros((repeat, 64), dtype=np.float32)
    lanes[:, :mask] = src[: repeat * 64].reshape(repeat, 64)[:, :mask]
    if kind == "block":
        want = np.array([tree(lanes[r, 8 * b: 8 * b + 8]) for r in range(repeat) for b in range((mask + 7) // 8)])
        got = np.concatenate([dst[8 * r: 8 * r + (mask + 7) // 8] for r in range(repeat)])
    else:
        want = np.array([tree(lanes[r]) for r in range(repeat)])
        got = dst[:repeat]
    assert_bits_equal(got, want.astype(np.float32))


@global_aicore
def arith_kernel(c, n, a, b, out):
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    h = asc.tbuf_get(c, 2, asc.ub_u16(c))
    asc.data_copy(c, x, asc.gm_at(a, 0), x.size)
    asc.data_copy(c, y, asc.gm_at(b, 0), y.size)
    asc.mul(c, x, x, y, n)              # x = a * b
    asc.muls(c, y, x, 0.1, n)           # y = x * 0.1f
    asc.add(c, x, x, y, n)              # x = x + y
    asc.adds(c, x, x, -1.5, n)
    asc.cast(c, h, asc.DT_BF16, x, asc.DT_FLOAT, asc.CAST_RINT, n)
    asc.cast(c, y, asc.DT_FLOAT, h, asc.DT_BF16, asc.CAST_NONE, n)
    asc.data_copy(c, asc.gm_at(out, 0), y, y.size)


def test_arithmetic_and_casts_are_fp32_exact(rng):
    a = rng.standard_normal(256).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    out = np.zeros(256, dtype=np.float32)
    n = 200
    report = run([arith_kernel], [tbuf("x", 1024), tbuf("y", 1024), tbuf("h", 512)], n, asc.GlobalTensor(a, 0, 0),
                 asc.GlobalTensor(b, 1, 0), asc.GlobalTensor(out, 2, 0))
    x = a[:n] * b[:n]
    x = x + x * np.float32(0.1)
    x = x + np.float32(-1.5)
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    assert_bits_equal(out[:n], want)
    assert report.total.vec_instr == 6 and report.total.vec_elem_ops == 6 * n


@global_aicore
def bad_vector_kernel(c, which):
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    h = asc.tbuf_get(c, 1, asc.ub_u16(c))
    if which == 0:
        asc.add(c, x, x, x, x.size + 1)                                   # count beyond the tensor
    elif which == 1:
        asc.muls(c, x[1:], x[1:], 2.0, 8)                                 # operand not 32-byte aligned
    elif which == 2:
        asc.cast(c, h, asc.DT_BF16, x, asc.DT_FLOAT, asc.CAST_ODD, 8)     # CAST_ODD only exists for fp16
    elif which == 3:
        asc.block_reduce_sum(c, x, x, 256, 64, 1, 1, 8)                   # repeatTime beyond 255
    elif which == 4:
        asc.cast(c, x, asc.DT_FLOAT, h, asc.DT_BF16, asc.CAST_RINT, 8)    # widening takes only CAST_NONE


@pytest.mark.parametrize("which,err", [(0, OutOfBoundsError), (1, AlignmentError), (2, ParamRangeError),
                                       (3, ParamRangeError), (4, ParamRangeError)],
                         ids=["count-beyond-tensor", "unaligned-operand", "illegal-round-mode", "repeat-over-255",
                              "widen-with-rint"])
def test_vector_rule_violations(which, err):
    with pytest.raises(err):
        run([bad_vector_kernel], [tbuf("x", 256), tbuf("y", 256)], which)


@global_aicore
def stage_write(c, buf, marks):
    buf[c.block_idx] = c.block_idx + 1


@global_aicore
def stage_read(c, buf, marks):
    # after SyncAll every core sees every other core's first-stage write
    total = 0
    for i in range(c.block_num):
        total += buf[i]
    marks[c.block_idx] = total


def test_sync_all_separates_stages():
    n = 8
    buf = np.zeros(n, dtype=np.int64)
    marks = np.zeros(n, dtype=np.int64)
    report = run([stage_write, stage_read], [], buf, marks, block_dim=n, threads=2)
    assert list(marks) == [n * (n + 1) // 2] * n
    assert all(core.sync_all == 1 for core in report.cores)


def test_sync_all_with_more_blocks_than_cores_would_deadlock():
    chip = get_soc("ascend910b", aiv_num=4)
    with pytest.raises(SyncError, match="deadlock"):
        run([stage_write, stage_read], [], np.zeros(8, np.int64), np.zeros(8, np.int64), block_dim=8, chip=chip)


@global_aicore
def scatter_kernel(c, src, dst, order):
    T = asc.ub_like(c, src)
    buf = asc.tbuf_get(c, 0, T)
    for row in range(c.block_idx, order.size, c.block_num):
        asc.data_copy_pad(c, buf, asc.gm_at(src, row * 24), asc.DataCopyExtParams(1, 48, 0, 0), asc.NO_PAD)
        asc.data_copy_pad(c, asc.gm_at(dst, order[row] * 24), buf, asc.DataCopyExtParams(1, 48, 0, 0))


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_results_do_not_depend_on_thread_count(threads, rng):
    src = rng.integers(0, 60000, 24 * 500).astype(np.uint16)
    order = rng.permutation(500).astype(np.int32)
    dst = np.zeros_like(src)
    report = run([scatter_kernel], [tbuf("buf", 64)], asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0),
                 order, block_dim=7, threads=threads)
    assert np.array_equal(dst.reshape(500, 24)[order], src.reshape(500, 24))
    assert report.total.mte2_bytes == report.total.mte3_bytes == 500 * 48
    assert sum(core.mte2_instr for core in report.cores) == 500


@global_aicore
def widen_int_kernel(c, n, src, dst):
    a = asc.tbuf_get(c, 0, asc.ub_i32(c))
    w = asc.tbuf_get(c, 1, asc.ub_i64(c))
    asc.data_copy(c, a, asc.gm_at(src, 0), a.size)
    asc.duplicate(c, w, np.int64(-7), w.size)
    asc.cast(c, w, 9, a, asc.DT_INT32, asc.CAST_NONE, n)    # 9: DT_INT64
    asc.data_copy(c, asc.gm_at(dst, 0), w, w.size)


def test_cast_int32_to_int64_sign_extends():
    """Cast<int64_t, int32_t>(CAST_NONE), as MoeInitRoutingV3's expert counts use it: the first 5 of 8 lanes
    widened (negative values keep their sign), the other 3 keep the -7 written before."""
    src = np.array([0, 1, -1, 2147483647, -2147483648, 5, 6, 7], dtype=np.int32)
    dst = np.zeros(8, dtype=np.int64)
    run([widen_int_kernel], [tbuf("a", 32), tbuf("w", 64)], 5, asc.GlobalTensor(src, 0, 0),
        asc.GlobalTensor(dst, 1, 0))
    assert dst.tolist() == [0, 1, -1, 2147483647, -2147483648, -7, -7, -7]
