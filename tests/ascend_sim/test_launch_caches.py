"""What launches keep for the process (laid-out plans, compiled entry points, pooled core sets, state templates,
passed profiles, the inline-round hint) and the reports they build on first read: every cache must give what
a fresh computation gives, for any shape, dtype or custom profile, from any thread."""
from __future__ import annotations

import pickle
import sys
import threading

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel, UbBuffer, UBOverflowError, launch, timeline
from ascend_sim._jit import global_aicore
from ascend_sim.core import make_core, start_pipe
from ascend_sim.layout import CNT_UB_HWM, POISON, QUE_BASE, UB_DIRTY, UB_POISONED
from ascend_sim.pipe import plan_pipe
from ascend_sim.report import CoreReport, RunReport, deferred
from tiling import get_soc
from tiling.platform import ProfileError, SocProfile, check_profile

launch_module = sys.modules["ascend_sim.launch"]
core_module = sys.modules["ascend_sim.core"]

ROW = 32


@global_aicore
def copy_rows(c, src, dst):
    """Row r of src (ROW elements of src's dtype) to row r of dst; cores take rows round-robin."""
    buf = asc.tbuf_get(c, 0, asc.ub_like(c, src))
    for row in range(c.block_idx, src.data.size // ROW, c.block_num):
        asc.data_copy(c, buf, asc.gm_at(src, row * ROW), ROW)
        asc.data_copy(c, asc.gm_at(dst, row * ROW), buf, ROW)


KERNEL = Kernel.single_pipe("CacheOp", "CopyRows", (copy_rows,), ("buf",))


def _copy(dtype, rows: int, block_dim: int, chip, buf_bytes: int = 256, threads=1, seed: int = 0):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 100, rows * ROW).astype(dtype)
    dst = np.zeros_like(src)
    report = launch(KERNEL, block_dim=block_dim, plan=(UbBuffer("buf", buf_bytes),),
                    args=(asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0)), chip=chip, tiling_key=0,
                    threads=threads)
    return src, dst, report


def _summary(report: RunReport) -> tuple:
    """Everything a report says that does not depend on host timing."""
    est = report.estimate
    return (report.block_dim, report.soc, report.ub_capacity_bytes, report.ub_plan, report.ub_plan_bytes,
            report.cores, report.total, est.cycles, est.bound, est.cores, est.gm_bytes, report.threads)


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.float32, np.int8], ids=lambda d: np.dtype(d).name)
def test_one_stage_with_arguments_of_each_dtype_gets_its_own_compiled_entry(dtype):
    for rows, block_dim in ((8, 4), (5, 2)):
        src, dst, _ = _copy(dtype, rows, block_dim, get_soc("910b"))
        assert np.array_equal(dst, src)


def test_alternating_dtypes_never_reuse_another_dtypes_entry():
    for dtype in (np.uint16, np.float32, np.uint16, np.int8, np.float32):
        src, dst, _ = _copy(dtype, 6, 3, get_soc("910b"))
        assert np.array_equal(dst, src)


def test_a_plan_laid_out_once_is_laid_out_again_for_a_different_plan_block_dim_or_profile():
    big = get_soc("910b")
    small = get_soc("910b", ub_size=1024)                 # a custom profile: the same plan does not fit
    _, _, a = _copy(np.uint16, 8, 4, big, buf_bytes=2048)
    assert a.ub_plan_bytes == 2048 and a.ub_capacity_bytes == big.ub_size
    _, _, b = _copy(np.uint16, 8, 4, big, buf_bytes=512)
    assert b.ub_plan_bytes == 512
    _, _, c = _copy(np.uint16, 8, 2, big, buf_bytes=512)
    assert c.ub_plan_bytes == 512 and c.block_dim == 2
    with pytest.raises(UBOverflowError):
        _copy(np.uint16, 8, 4, small, buf_bytes=2048)
    _, _, d = _copy(np.uint16, 8, 4, small, buf_bytes=512)
    assert d.ub_capacity_bytes == 1024 and d.soc == small.name


def test_a_custom_cost_profile_gets_its_own_estimate_and_the_stock_one_stays_its_own():
    stock = get_soc("910b")
    slow = get_soc("910b", cost={"mte2_bytes_per_cycle": 1, "mte3_bytes_per_cycle": 1})
    runs = [_summary(_copy(np.float32, 16, 4, chip)[2]) for chip in (stock, slow, stock, slow)]
    assert runs[0] == runs[2] and runs[1] == runs[3]
    assert runs[1][7] > runs[0][7]                       # the slow DMA's estimate is longer
    assert runs[0][:7] == runs[1][:7]                    # the counters are the same


def test_core_sets_are_reset_to_what_make_core_load_costs_and_start_pipe_give():
    chip = get_soc("910b")
    rows = (UbBuffer("a", 100, 2, "TQue", "VECIN", 1), UbBuffer("b", 64))
    table = plan_pipe(rows, chip.ub_size, op="CacheOp").queue_table()
    width = QUE_BASE + table.size
    for used in (False, True):                               # a fresh set, then one a launch has written to
        crew = core_module.CORE_SETS.take(3, chip.ub_size, width)
        crew.reset(launch_module._state_template(width, chip.max_block_count, chip.npu_arch, chip.cost, 3))
        crew.start_pipes([table])
        for core in crew.cores:
            want = make_core(core.block_idx, 3, chip.ub_size, table.size, chip.max_block_count, chip.npu_arch)
            timeline.load_costs(want.state, chip.cost, 3)
            start_pipe(want, table)
            keep = np.ones(width, dtype=bool)
            keep[[UB_DIRTY]] = False                           # make_core's pooled UB may have another extent
            assert np.array_equal(core.state[keep], want.state[keep])
            assert core.state[UB_POISONED] == 1 and core.state[UB_DIRTY] == 0
            assert np.array_equal(core.ub, np.resize(POISON, chip.ub_size))
        if not used:
            for core in crew.cores:                            # as a kernel would: bytes written, high-water mark
                core.ub[: 1000 + core.block_idx] = 0x11
                core.state[CNT_UB_HWM] = 1000 + core.block_idx
        core_module.CORE_SETS.give(crew)


def test_a_pooled_core_set_knows_how_far_its_last_launch_wrote():
    chip = get_soc("910b")
    for _ in range(3):
        _copy(np.uint16, 4, 4, chip, buf_bytes=ROW * 2)
        crew = core_module.CORE_SETS.take(4, chip.ub_size, QUE_BASE + 1)
        assert crew.dirty.tolist() == [ROW * 2] * 4 and crew.poisoned.all()
        core_module.CORE_SETS.give(crew)


@pytest.mark.parametrize("threads", [1, 2, 4], ids=lambda t: f"threads={t}")
@pytest.mark.parametrize("inline_s", [0.0, 1e9], ids=["helpers-always", "inline-always"])
def test_inline_and_helper_rounds_give_the_same_results(monkeypatch, threads, inline_s):
    monkeypatch.setattr(launch_module, "INLINE_ROUND_S", inline_s)
    monkeypatch.setattr(launch_module, "_ROUND_SECONDS", {})
    want = None
    for _ in range(3):
        src, dst, report = _copy(np.int32, 40, 8, get_soc("910b"), threads=threads, seed=5)
        assert np.array_equal(dst, src) and report.threads == threads
        got = _summary(report)[:-1]
        assert want is None or got == want
        want = got


def test_concurrent_launches_with_custom_profiles_and_dtypes_match_serial_ones():
    settings = [(np.uint16, 4, get_soc("910b")), (np.float32, 3, get_soc("910b", ub_size=4096)),
                (np.int8, 8, get_soc("950")), (np.int32, 5, get_soc("910b", cost={"hbm_bytes_per_cycle": 50})),
                (np.uint16, 2, get_soc("910_93", aiv_num=4)), (np.float32, 7, get_soc("950", ub_size=8192))]
    serial = {k: _summary(_copy(d, 12 + k, b, chip, seed=k)[2]) for k, (d, b, chip) in enumerate(settings)}
    failures, seen = [], {}

    def one(k, dtype, block_dim, chip):
        try:
            for _ in range(4):
                src, dst, report = _copy(dtype, 12 + k, block_dim, chip, seed=k, threads=2)
                seen.setdefault(k, []).append((np.array_equal(src, dst), _summary(report)[:-1]))
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            failures.append((k, repr(e)))

    workers = [threading.Thread(target=one, args=(k, *s)) for k, s in enumerate(settings)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []
    for k, runs in seen.items():
        assert len(runs) == 4
        for exact, summary in runs:
            assert exact and summary == serial[k][:-1], k


def test_report_objects_made_on_first_read_equal_the_counters_and_survive_pickling():
    _, _, report = _copy(np.float32, 8, 4, get_soc("910b"))
    cores = report.cores
    assert cores is report.cores and len(cores) == 4 and all(isinstance(c, CoreReport) for c in cores)
    assert [c.block_idx for c in cores] == [0, 1, 2, 3]
    assert report.total == CoreReport.combined(cores)
    assert report.estimate is report.estimate and report.estimate.gm_bytes == report.gm_bytes
    assert [t.block_idx for t in report.estimate.cores] == [0, 1, 2, 3]
    again = pickle.loads(pickle.dumps(report))
    assert again.cores == cores and again.estimate == report.estimate and str(again) == str(report)
    with pytest.raises(AttributeError):
        report.cores = ()                           # still a frozen dataclass
    assert RunReport.cores == () and RunReport("op", "k", 0, 1, "soc", 1).cores == ()


def test_a_deferred_value_is_made_once_whichever_thread_reads_first():
    calls = []
    value = deferred(lambda: calls.append(1) or object())
    got = []
    workers = [threading.Thread(target=lambda: got.append(value.value())) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(calls) == 1 and all(g is got[0] for g in got)


def test_a_passed_profile_is_not_confused_with_an_equal_one_of_other_types():
    stock = get_soc("910b")
    assert check_profile(stock) is stock and check_profile(stock) is stock
    float_ub = SocProfile(stock.name, stock.aiv_num, float(stock.ub_size), stock.npu_arch, stock.max_block_count,
                          stock.lib_api_workspace, stock.cost)
    assert float_ub == stock                          # equal by value, but not a whole number: still refused
    for _ in range(2):
        with pytest.raises(ProfileError, match="ub_size"):
            check_profile(float_ub)


@pytest.mark.parametrize("cores", [1, 3, 48], ids=lambda n: f"{n}-cores")
def test_the_launchers_barrier_equals_the_timelines(cores):
    rng = np.random.default_rng(cores)
    states = rng.integers(0, 1 << 40, (cores, QUE_BASE + 8)).astype(np.int64)
    want = [row.copy() for row in states]
    resume = timeline.barrier(want, 1200)
    assert launch_module._barrier(states, 1200) == resume
    assert np.array_equal(states, np.array(want))
