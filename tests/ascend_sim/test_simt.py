"""SIMT calls (asc_vf_call / Simt::VF_CALL) on the 950 profile.

Expected outputs are written out by hand (or from the scatter / gather formula in NumPy indexing), never by
running the simulator's accessors.
"""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import OutOfBoundsError, ParamRangeError, SimulatorError, UbBuffer, UBOverflowError
from ascend_sim._jit import global_aicore
from ascend_sim.cost import CostModel
from ascend_sim.dtypes import DT_FLOAT, DT_INT32
from ascend_sim.simt import SIMT_MAX_THREADS, plan_simt_pipe, simt_ub_capacity
from tiling import get_soc
from tiling.platform import SIMT_RESERVED_UB_BYTES

from .harness import run, tbuf

CHIP = get_soc("ascend950")


@global_aicore
def src_to_dst_stage(c, src, dst, p):
    """MoeV2SrcToDstOpSimt::ComputeSimt: dst[src[i]] = i for the core's rows; p = (threads, rows per core)."""
    rows = p[1]
    start = c.block_idx * rows
    sc = asc.simt_vf_call(c, p[0], 1, 1)
    for t in range(sc.threads):
        th = asc.simt_thread(c, sc, t)
        i = asc.thread_idx(th, 0)
        while i < rows:
            d = asc.simt_load(c, th, src, start + i)
            asc.simt_store(c, th, dst, d, start + i)
            i += asc.thread_num(th, 0)
    asc.simt_end(c, sc)


@global_aicore
def gather_stage(c, src, idx, dst, p):
    """dst[i] = src[idx[i]] through UB: the indices are copied into UB and read by the threads as __ubuf__ int32."""
    n = p[1]
    ub = asc.tbuf_get(c, 0, asc.ub_i32(c))
    asc.data_copy_pad(c, ub, idx, asc.DataCopyExtParams(1, n * 4, 0, 0), asc.NO_PAD)
    if p[2] == 0:
        asc.set_flag(c, asc.MTE2_V, 0)
        asc.wait_flag(c, asc.MTE2_V, 0)
    sc = asc.simt_vf_call(c, p[0], 1, 1)
    for t in range(sc.threads):
        th = asc.simt_thread(c, sc, t)
        for i in range(asc.thread_idx(th, 0), n, asc.thread_num(th, 0)):
            asc.simt_store(c, th, dst, i, asc.simt_load(c, th, src, asc.simt_load(c, th, ub, i)))
    asc.simt_end(c, sc)


@global_aicore
def histogram_stage(c, keys, counts, sums, p):
    """counts[keys[i]] += 1 (int32) and sums[keys[i]] += 0.5 (float32) with atomics, 2-D thread block."""
    n = p[2]
    sc = asc.simt_vf_call(c, p[0], p[1], 1)
    for t in range(sc.threads):
        th = asc.simt_thread(c, sc, t)
        lin = asc.thread_idx(th, 0) + asc.thread_idx(th, 1) * asc.thread_num(th, 0)
        for i in range(lin, n, asc.thread_num(th, 0) * asc.thread_num(th, 1)):
            k = asc.simt_load(c, th, keys, i)
            asc.simt_atomic_add(c, th, counts, k, np.int32(1), DT_INT32)
            asc.simt_atomic_add(c, th, sums, k, np.float32(0.5), DT_FLOAT)
    asc.simt_end(c, sc)


def gm(arr, i):
    return asc.GlobalTensor(arr, i, 0)


def p_of(*values):
    return np.array(values, dtype=np.int64)


@pytest.mark.parametrize("threads,rows,cores", [(4, 10, 1), (3, 7, 2), (16, 16, 1), (2048, 37, 1)],
                         ids=["4threads_10rows_tail", "3threads_7rows_2cores", "exact", "more_threads_than_rows"])
def test_scatter_by_index(threads, rows, cores):
    n = rows * cores
    src = np.array([(3 * i + 1) % n for i in range(n)], dtype=np.int32)    # a permutation (3 coprime to n)
    assert sorted(src) == list(range(n))
    dst = np.full(n, -1, dtype=np.int32)
    run([src_to_dst_stage], [], gm(src, 0), gm(dst, 1), p_of(threads, rows), block_dim=cores, chip=CHIP,
        gm_names=("src", "dst"))
    want = np.empty(n, dtype=np.int32)
    want[src] = np.arange(n, dtype=np.int32)
    np.testing.assert_array_equal(dst, want)


def test_scatter_hand_worked():
    src = np.array([2, 0, 3, 1], dtype=np.int32)
    dst = np.full(4, -1, dtype=np.int32)
    report = run([src_to_dst_stage], [], gm(src, 0), gm(dst, 1), p_of(3, 4), chip=CHIP)
    assert dst.tolist() == [1, 3, 0, 2]
    core = report.cores[0]
    assert (core.scalar_gm_reads, core.scalar_gm_writes) == (4, 4)


@pytest.mark.parametrize("threads", [1, 5, 64], ids=["1thread", "5threads", "64threads"])
def test_gather_through_ub(threads):
    src = np.array([10.0, 11.0, 12.0, 13.0, 14.0], dtype=np.float32)
    idx = np.array([4, 4, 0, 2, 1, 3, 0], dtype=np.int32)
    dst = np.zeros(7, dtype=np.float32)
    run([gather_stage], [tbuf("idx", 64)], gm(src, 0), gm(idx, 1), gm(dst, 2), p_of(threads, 7, 0), chip=CHIP)
    assert dst.tolist() == [14.0, 14.0, 10.0, 12.0, 11.0, 13.0, 10.0]


@pytest.mark.parametrize("dims,cores", [((4, 2), 1), ((32, 8), 3), ((1, 1), 2)],
                         ids=["4x2", "32x8_3cores", "1thread_2cores"])
def test_atomic_accumulation(dims, cores):
    keys = np.array([0, 2, 2, 1, 2, 0, 3, 2, 2, 1, 0], dtype=np.int32)
    counts = np.zeros(4, dtype=np.int32)
    sums = np.zeros(4, dtype=np.float32)
    run([histogram_stage], [], gm(keys, 0), gm(counts, 1), gm(sums, 2), p_of(dims[0], dims[1], keys.size),
        block_dim=cores, chip=CHIP, threads=2)
    # every core adds the whole histogram: key 0 x3, 1 x2, 2 x5, 3 x1
    assert counts.tolist() == [3 * cores, 2 * cores, 5 * cores, 1 * cores]
    assert sums.tolist() == [1.5 * cores, 1.0 * cores, 2.5 * cores, 0.5 * cores]


def test_gm_out_of_tensor_names_thread():
    src = np.array([0, 1, 9, 2], dtype=np.int32)          # 9 is outside dst's 4 elements
    dst = np.zeros(4, dtype=np.int32)
    with pytest.raises(OutOfBoundsError, match=r"SIMT thread 2 accesses bytes \[36, 40\) of 'dst'") as e:
        run([src_to_dst_stage], [], gm(src, 0), gm(dst, 1), p_of(4, 4), chip=CHIP, gm_names=("src", "dst"))
    assert e.value.tensor == "dst" and e.value.call.startswith("asc_vf_call")
    assert dst.tolist() == [0, 1, 0, 0]                   # threads 0, 1 wrote; nothing after the fault


@pytest.mark.parametrize("dims", [(SIMT_MAX_THREADS + 1, 1), (1024, 3), (0, 1)], ids=["2049x1", "1024x3", "0x1"])
def test_thread_limit(dims):
    keys = np.zeros(1, dtype=np.int32)
    with pytest.raises(ParamRangeError, match=r"dimx \* dimy \* dimz at most 2048"):
        run([histogram_stage], [], gm(keys, 0), gm(np.zeros(1, np.int32), 1), gm(np.zeros(1, np.float32), 2),
            p_of(dims[0], dims[1], 1), chip=CHIP)


def test_2048_threads_allowed():
    keys = np.zeros(1, dtype=np.int32)
    counts = np.zeros(1, dtype=np.int32)
    run([histogram_stage], [], gm(keys, 0), gm(counts, 1), gm(np.zeros(1, np.float32), 2), p_of(1024, 2, 1),
        chip=CHIP)
    assert counts.tolist() == [1]


@pytest.mark.parametrize("chip", ["ascend910b", "ascend910_93"])
def test_wrong_chip_refused(chip):
    src = np.zeros(2, dtype=np.int32)
    dst = np.zeros(2, dtype=np.int32)
    with pytest.raises(SimulatorError, match=r"only on Ascend 950 \(NPU arch 3510\); this chip is Ascend 910B / "
                                             r"910_93 \(NPU arch 2201\)") as e:
        run([src_to_dst_stage], [], gm(src, 0), gm(dst, 1), p_of(2, 2), chip=get_soc(chip))
    assert "asc_vf_call" in e.value.call


def test_timing_per_warp():
    """64 threads, one row each: every thread starts, loads, stores = 3 instructions, 1 GM load. Two warps on
    schedulers 0 and 1 issue 3 each; a warp's chain is 1 * latency + 3 * cpi. With launch 64, cpi 1, latency 241:
    64 + max(3, 244) = 308 cycles on PIPE_V."""
    cost = CostModel(simt_launch_cycles=64, simt_cycles_per_warp_instr=1, simt_gm_latency_cycles=241)
    chip = get_soc("ascend950", cost=cost)
    src = np.arange(64, dtype=np.int32)
    dst = np.zeros(64, dtype=np.int32)
    report = run([src_to_dst_stage], [], gm(src, 0), gm(dst, 1), p_of(64, 64), chip=chip)
    assert report.estimate.cores[0].busy_of("V") == 308
    """Same with latency 0 and cpi 5: issue bound 3 * 5 = 15 per scheduler; 64 + 15 = 79."""
    chip = get_soc("ascend950", cost=CostModel(simt_launch_cycles=64, simt_cycles_per_warp_instr=5,
                                               simt_gm_latency_cycles=0))
    report = run([src_to_dst_stage], [], gm(src, 0), gm(dst, 1), p_of(64, 64), chip=chip)
    assert report.estimate.cores[0].busy_of("V") == 79


def test_simt_reservation_in_profile():
    assert CHIP.simt_reserved_ub_bytes == SIMT_RESERVED_UB_BYTES == 40960
    assert CHIP.ub_size_for_simt_tiling == 253952 - 256 - 40960
    assert get_soc("ascend910b").simt_reserved_ub_bytes == 0
    assert simt_ub_capacity(CHIP) == 253952 - 40960


def test_plan_that_fits_only_without_reservation_refused():
    rows = [UbBuffer("x", 220 * 1024, 1)]                  # 225280 bytes: < 253952 but > 212992
    plan_simt_pipe([UbBuffer("x", 253952 - 40960, 1)], CHIP)  # exactly fits
    with pytest.raises(UBOverflowError, match=r"needs 225280 bytes of UB .* the core has 212992") as e:
        plan_simt_pipe(rows, CHIP, op="MoeInitRoutingV2", pipe="pipe")
    assert "SIMT data cache" in e.value.detail


def test_sync_all_on_950_with_64_cores():
    src = np.arange(64 * 2, dtype=np.int32)[::-1].copy()
    dst = np.zeros(128, dtype=np.int32)
    report = run([src_to_dst_stage, src_to_dst_stage], [], gm(src, 0), gm(dst, 1), p_of(2, 2), block_dim=64,
                 chip=CHIP, threads=2)
    assert dst.tolist() == list(range(128))[::-1]
    est = report.estimate
    assert est.sync_alls == 1 and report.cores[0].sync_all == 1
    assert est.cycles >= CHIP.cost.sync_all_cycles


@pytest.mark.parametrize("mode", ["race", "strict"])
def test_checked_mode_simt_ub_reads_are_vector_pipe(mode):
    """The SIMT threads read indices MTE2 copied in: with the MTE2_V flag it is clean, without it a RAW race."""
    src = np.array([10.0, 11.0], dtype=np.float32)
    idx = np.array([1, 0], dtype=np.int32)
    dst = np.zeros(2, dtype=np.float32)
    args = (asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(idx, 1, 0), asc.GlobalTensor(dst, 2, 0))
    from ascend_sim import Kernel, PipeRaceError, launch
    kernel = Kernel.single_pipe("TestOp", "TestKernel", (gather_stage,), ("idx",))
    launch(kernel, block_dim=1, plan=(tbuf("idx", 64),), args=args + (p_of(2, 2, 0),), chip=CHIP, check=mode)
    assert dst.tolist() == [11.0, 10.0]
    with pytest.raises(PipeRaceError, match="RAW race on UB"):
        launch(kernel, block_dim=1, plan=(tbuf("idx", 64),), args=args + (p_of(2, 2, 1),), chip=CHIP, check=mode)


def test_checked_mode_two_threads_store_same_gm_bytes():
    """src = [1, 3, 1, 0]: threads 0 and 2 both store into dst[1] -> WAW race naming threads 0 and 2."""
    from ascend_sim import Kernel, PipeRaceError, launch
    kernel = Kernel.single_pipe("TestOp", "TestKernel", (src_to_dst_stage,), ())
    src = np.array([1, 3, 1, 0], dtype=np.int32)
    dst = np.zeros(4, dtype=np.int32)
    args = (asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0), p_of(4, 4))
    with pytest.raises(PipeRaceError, match=r"SIMT threads 0 and 2 of one asc_vf_call") as e:
        launch(kernel, block_dim=1, plan=(), args=args, chip=CHIP, check="race")
    assert (e.value.first["thread"], e.value.second["thread"], e.value.kind) == (0, 2, "WAW")
    launch(kernel, block_dim=1, plan=(), args=args, chip=CHIP)      # unchecked: runs, last thread wins
    assert dst.tolist() == [3, 2, 0, 1]
    perm = np.array([1, 3, 2, 0], dtype=np.int32)                   # every thread its own element: clean
    launch(kernel, block_dim=1, plan=(), args=(asc.GlobalTensor(perm, 0, 0),) + args[1:], chip=CHIP, check="race")
