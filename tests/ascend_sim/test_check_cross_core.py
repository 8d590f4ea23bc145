"""Checked mode across cores: GM races between cores (no SyncAll between a write and another core's access) and
overlapping writes of one launch (mode "all"), with the waivers that let a declared pair pass.

Small kernels on 4 cores of a 910B, rows of 8 fp32 (32 bytes): each core writes its own row of a workspace and
reads its neighbour's, or writes into one shared row.
"""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import Kernel, OverlapError, PipeRaceError, launch
from ascend_sim._jit import global_aicore
from ascend_sim.check import OverlapWaiver, RaceWaiver
from ascend_sim.datacopy import GlobalTensor

from .harness import CHIP, tbuf

CORES = 4
COLS = 8                        # fp32 per row: one 32-byte block
ROW = COLS * 4
PLAN = (tbuf("x", 1024), tbuf("y", 1024))
GM_NAMES = ("src", "ws", "out")


@global_aicore
def put_own_row(c, src, ws, out):
    """Core b copies src row b into ws row b (MTE2 then MTE3)."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    params = asc.DataCopyExtParams(1, ROW, 0, 0)
    asc.data_copy_pad(c, x, asc.gm_at(src, c.block_idx * COLS), params, asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.data_copy_pad(c, asc.gm_at(ws, c.block_idx * COLS), x, params)
    asc.sync_pipes(c, asc.MTE3_MTE2)


@global_aicore
def take_next_row(c, src, ws, out):
    """Core b copies ws row (b + 1) % cores (another core's) into out row b."""
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    params = asc.DataCopyExtParams(1, ROW, 0, 0)
    asc.data_copy_pad(c, y, asc.gm_at(ws, ((c.block_idx + 1) % CORES) * COLS), params, asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.data_copy_pad(c, asc.gm_at(out, c.block_idx * COLS), y, params)
    asc.pipe_barrier(c, asc.PIPE_ALL)


@global_aicore
def put_then_take(c, src, ws, out):
    """Both in one stage: the SyncAll between them removed."""
    put_own_row(c, src, ws, out)
    take_next_row(c, src, ws, out)


@global_aicore
def zero_out_on_core0(c, src, ws, out):
    """Core 0 zero-fills the whole output (InitOutput); the other cores do nothing."""
    if c.block_idx == 0:
        asc.init_output(c, asc.gm_at(out, 0), CORES * COLS, 0.0)


@global_aicore
def write_own_out_row(c, src, ws, out):
    """Core b copies src row b into out row b."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    params = asc.DataCopyExtParams(1, ROW, 0, 0)
    asc.data_copy_pad(c, x, asc.gm_at(src, c.block_idx * COLS), params, asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.data_copy_pad(c, asc.gm_at(out, c.block_idx * COLS), x, params)
    asc.pipe_barrier(c, asc.PIPE_ALL)


@global_aicore
def write_out_row0(c, src, ws, out):
    """Every core copies src row b into out row 0 (plain writes: the same 32 bytes from every core)."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    params = asc.DataCopyExtParams(1, ROW, 0, 0)
    asc.data_copy_pad(c, x, asc.gm_at(src, c.block_idx * COLS), params, asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.data_copy_pad(c, asc.gm_at(out, 0), x, params)
    asc.pipe_barrier(c, asc.PIPE_ALL)


@global_aicore
def add_into_out_row0(c, src, ws, out):
    """Every core adds src row b into out row 0 (SetAtomicAdd) and counts itself in ws[0] (scalar AtomicAdd)."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    params = asc.DataCopyExtParams(1, ROW, 0, 0)
    asc.data_copy_pad(c, x, asc.gm_at(src, c.block_idx * COLS), params, asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.set_atomic_add(c, asc.DT_FLOAT)
    asc.data_copy_pad(c, asc.gm_at(out, 0), x, params)
    asc.set_atomic_none(c)
    asc.atomic_add(c, asc.gm_at(ws, 0), np.float32(1.0))
    asc.pipe_barrier(c, asc.PIPE_ALL)


@global_aicore
def write_own_column(c, src, ws, out):
    """Core b writes column block b (8 fp32) of every one of the 4 rows of a 4 x 32 output in one strided
    DataCopyPad: the cores' spans interleave, their bytes do not."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    asc.data_copy_pad(c, x, asc.gm_at(src, 0), asc.DataCopyExtParams(CORES, ROW, 0, 0), asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.data_copy_pad(c, asc.gm_at(out, c.block_idx * COLS), x, asc.DataCopyExtParams(CORES, ROW, 0,
                                                                                      (CORES - 1) * ROW))
    asc.pipe_barrier(c, asc.PIPE_ALL)


def _run(stages, *, check, waivers=(), out_rows=CORES):
    src = np.arange(CORES * COLS, dtype=np.float32) + 1
    ws = np.zeros(CORES * COLS, dtype=np.float32)
    out = np.zeros(out_rows * COLS, dtype=np.float32)
    kernel = Kernel.single_pipe("TestOp", "CrossCoreKernel", tuple(stages), tuple(b.name for b in PLAN),
                                waivers=tuple(waivers))
    report = launch(kernel, block_dim=CORES, plan=PLAN, args=(GlobalTensor(src, 0, 0), GlobalTensor(ws, 1, 0),
                                                             GlobalTensor(out, 2, 0)),
                    chip=CHIP, gm_names=GM_NAMES, tiling_key=7, threads=1, check=check)
    return report, src, ws, out


HANDOVER_RACE = RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "MTE2", "DataCopyPad(GM->UB)",
                           "test: the cores hand rows over without SyncAll", cross_core=True)


@pytest.mark.parametrize("mode", ["race", "strict", "all"])
def test_a_handover_through_gm_without_syncall_is_a_cross_core_race(mode):
    with pytest.raises(PipeRaceError) as err:
        _run([put_then_take], check=mode)
    e = err.value
    assert e.memory == "GM" and e.kind == "RAW"
    assert e.first["core"] != e.second["core"]
    assert e.first["call"] == "DataCopyPad(UB->GM)" and e.second["call"] == "DataCopyPad(GM->UB)"
    assert e.first["pipe"] == "PIPE_MTE3" and e.second["pipe"] == "PIPE_MTE2"
    # core a wrote its row, core a - 1 read it: the bytes are that row of ws
    assert e.tensor == "ws" and e.tensor_bytes == (e.first["core"] * ROW, (e.first["core"] + 1) * ROW)
    assert (e.first["core"] - e.second["core"]) % CORES == 1
    assert "cross-core RAW race on bytes" in str(e) and "'ws'" in str(e) and "SyncAll" in str(e)


@pytest.mark.parametrize("mode", ["race", "all"])
def test_reads_after_a_syncall_are_not_a_race(mode):
    report, src, ws, out = _run([put_own_row, take_next_row], check=mode)
    assert np.array_equal(out, np.roll(src.reshape(CORES, COLS), -1, axis=0).ravel())
    assert report.extra["overlapping_writes"] == [] and report.extra["waived_cross_core"] == 0


def test_the_cross_core_waiver_lets_exactly_its_pair_pass():
    report, *_ = _run([put_then_take], check="race", waivers=(HANDOVER_RACE,))
    # (what out holds depends on which core ran first: that is the race)
    assert report.extra["waived_cross_core"] > 0 and report.extra["waived_races"] == 0
    other = RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "S", "GlobalTensor::GetValue", "test: another pair",
                       cross_core=True)
    same_core = RaceWaiver("MTE3", "DataCopyPad(UB->GM)", "MTE2", "DataCopyPad(GM->UB)", "test: one core only")
    for waiver in (other, same_core):
        with pytest.raises(PipeRaceError, match="cross-core RAW race"):
            _run([put_then_take], check="race", waivers=(waiver,))


def test_plain_writes_of_one_row_from_several_cores_in_one_phase_are_a_waw_race():
    with pytest.raises(PipeRaceError) as err:
        _run([write_out_row0], check="race")
    e = err.value
    assert e.kind == "WAW" and e.memory == "GM" and e.tensor == "out" and e.tensor_bytes == (0, ROW)
    assert e.first["call"] == e.second["call"] == "DataCopyPad(UB->GM)" and e.first["core"] < e.second["core"]


@pytest.mark.parametrize("mode", ["race", "all"])
def test_atomic_adds_from_many_cores_are_not_a_race_nor_an_overlap(mode):
    report, src, ws, out = _run([add_into_out_row0], check=mode, out_rows=1)
    assert np.array_equal(out, src.reshape(CORES, COLS).sum(axis=0)) and ws[0] == CORES
    assert report.extra["overlapping_writes"] == []


def test_interleaved_column_slices_written_by_strided_copies_do_not_meet():
    report, src, _, out = _run([write_own_column], check="all", out_rows=CORES * CORES)
    assert report.extra["overlapping_writes"] == []
    # every core wrote src's 4 rows as its column block of the 4 x 32 output
    assert np.array_equal(out.reshape(CORES, CORES, COLS), np.repeat(src.reshape(CORES, 1, COLS), CORES, axis=1))


def test_a_row_written_by_two_cores_across_a_syncall_is_an_overlap_listed_in_race_and_an_error_in_all():
    report, *_ = _run([zero_out_on_core0, write_own_out_row], check="race")
    listed = report.extra["overlapping_writes"]
    # core 0's zero fill covers every row; cores 1..3 rewrite theirs (core 0 rewriting its own is no overlap)
    assert [(o["cores"], o["calls"], o["tensor"], o["bytes"], o["waived"]) for o in listed] == [
        ((0, b), ("InitOutput", "DataCopyPad(UB->GM)"), "out", (b * ROW, (b + 1) * ROW), False)
        for b in range(1, CORES)]
    assert report.extra["overlapping_write_bytes"] == (CORES - 1) * ROW
    with pytest.raises(OverlapError) as err:
        _run([zero_out_on_core0, write_own_out_row], check="all")
    e = err.value
    assert e.tensor == "out" and e.byte_range == (ROW, 2 * ROW)
    assert (e.first["core"], e.first["call"]) == (0, "InitOutput")
    assert (e.second["core"], e.second["call"]) == (1, "DataCopyPad(UB->GM)")
    assert "overlapping writes to bytes [32, 64) of 'out'" in str(e)


def test_the_overlap_waiver_lets_exactly_its_pair_pass():
    waiver = OverlapWaiver("InitOutput", "DataCopyPad(UB->GM)", "test: core 0 zero-fills, the others fill rows")
    report, src, _, out = _run([zero_out_on_core0, write_own_out_row], check="all", waivers=(waiver,))
    assert np.array_equal(out, src) and all(o["waived"] for o in report.extra["overlapping_writes"])
    with pytest.raises(OverlapError):
        _run([zero_out_on_core0, write_own_out_row], check="all",
             waivers=(OverlapWaiver("InitOutput", "DataCopy(UB->GM)", "test: another pair"),))
