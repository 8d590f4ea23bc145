"""Run-time branches between TPipes, per-core buffer plans, and SyncAll() as a barrier every core must reach
equally often."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, Branch, Kernel, PipePhase, SyncError, UbBuffer, UBOverflowError, launch
from ascend_sim._jit import global_aicore
from ascend_sim.launch import member
from tiling import get_soc

CHIP = get_soc("ascend910b")
CHOICE = 20        # member slot the decide stage fills


@global_aicore
def decide(c, flags_gm, log_gm):
    """Each core reads its flag from GM (as a kernel reads a count it computed) and keeps it."""
    asc.members(c)[CHOICE] = asc.get_value(c, flags_gm, c.block_idx)


@global_aicore
def mark(c, flags_gm, log_gm, value):
    """log[core] = log[core] * 10 + value: the order of the stages a core ran."""
    asc.set_value(c, log_gm, c.block_idx, asc.get_value(c, log_gm, c.block_idx) * 10 + value)


@global_aicore
def mark_buffer(c, flags_gm, log_gm, value):
    """log[core] = the byte length of this core's buffer 0 (its per-core plan)."""
    buf = asc.tbuf_get(c, 0, asc.ub_u8(c))
    asc.set_value(c, log_gm, c.block_idx, buf.size + value)


def choose(core, flags_gm, log_gm):
    return member(core, CHOICE)


def _kernel(arm0, arm1, tail=()):
    rows = (UbBuffer("buf", 64, pipe="p"),)
    first = PipePhase("p", ("buf",), (decide,))
    arms = (tuple(PipePhase("p", ("buf",), tuple(s)) for s in arm0),
            tuple(PipePhase("p", ("buf",), tuple(s)) for s in arm1))
    phases = (first, Branch("flag != 0", choose, arms)) + tuple(PipePhase("p", ("buf",), tuple(s)) for s in tail)
    return Kernel("TestOp", "BranchKernel", phases), rows


def _run(kernel, rows, flags, threads=4):
    log = np.zeros(flags.size, dtype=np.int32)
    report = launch(kernel, block_dim=flags.size, plan=rows, args=(asc.GlobalTensor(flags, 0, 0),
                                                                      asc.GlobalTensor(log, 1, 0)),
                    chip=CHIP, tiling_key=1, threads=threads)
    return log, report


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("flags", [[0, 0, 0, 0], [1, 1, 1], [0, 1, 0, 1, 1]], ids=lambda f: "".join(map(str, f)))
def test_each_core_runs_the_arm_it_chose(flags, threads):
    kernel, rows = _kernel(arm0=[[(mark, 1), SYNC_ALL, (mark, 2)]], arm1=[[(mark, 3)], [SYNC_ALL, (mark, 4)]],
                           tail=[[SYNC_ALL, (mark, 5)]])
    log, report = _run(kernel, rows, np.array(flags, dtype=np.int32), threads)
    want = [125 if f == 0 else 345 for f in flags]
    assert log.tolist() == want
    assert all(core.sync_all == 2 for core in report.cores)


def test_cores_that_reach_different_barrier_counts_deadlock():
    kernel, rows = _kernel(arm0=[[(mark, 1), SYNC_ALL, (mark, 2)]], arm1=[[(mark, 3)]], tail=[[SYNC_ALL, (mark, 5)]])
    with pytest.raises(SyncError, match=r"core\(s\) 0, 2 reached SyncAll\(\) #2 but core\(s\) 1, 3 ended") as e:
        _run(kernel, rows, np.array([0, 1, 0, 1], dtype=np.int32))
    assert e.value.core == 0 and e.value.op == "TestOp"


def test_a_choice_outside_the_arms_is_an_error():
    kernel, rows = _kernel(arm0=[[(mark, 1)]], arm1=[[(mark, 2)]])
    with pytest.raises(Exception, match=r"chose arm 2; it has 2"):
        _run(kernel, rows, np.array([2, 0], dtype=np.int32))


def test_every_arm_compiles_before_the_run():
    from ascend_sim import stage_calls
    kernel, rows = _kernel(arm0=[[(mark, 1)]], arm1=[[(mark_buffer, 2)]])
    flags = np.zeros(2, dtype=np.int32)
    calls = stage_calls(kernel, (asc.GlobalTensor(flags, 0, 0), asc.GlobalTensor(flags, 1, 0)))
    assert {fn.__name__ for fn, _ in calls} >= {"decide", "mark", "mark_buffer"}


def _last_core_bigger(block_idx, rows, flags_gm, log_gm):
    """The last core's Init sizes its buffer from its own (larger) share."""
    if block_idx == flags_gm.data.size - 1:
        return tuple(r._replace(bytes=r.bytes * 4) for r in rows)
    return rows


def test_per_core_plans():
    rows = (UbBuffer("buf", 64, pipe="p"),)
    kernel = Kernel("TestOp", "PerCore", (PipePhase("p", ("buf",), ((mark_buffer, 0),),
                                                     core_plan=_last_core_bigger),))
    log, report = _run(kernel, rows, np.zeros(3, dtype=np.int32))
    assert log.tolist() == [64, 64, 256]
    assert report.ub_plan_bytes == 256


def test_a_per_core_plan_that_does_not_fit_names_its_pipe():
    rows = (UbBuffer("buf", CHIP.ub_size // 2, pipe="p"),)
    kernel = Kernel("TestOp", "PerCore", (PipePhase("p", ("buf",), ((mark_buffer, 0),),
                                                     core_plan=_last_core_bigger),))
    with pytest.raises(UBOverflowError):
        _run(kernel, rows, np.zeros(2, dtype=np.int32))
