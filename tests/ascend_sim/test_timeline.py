"""The timeline and cost model: overlap, flags, SyncAll, roofline, traces and the PipeUtilization CSV.

Expected cycle counts are worked out by hand from the cost table (ascend_sim/cost.py), not by calling the
model's own formulas.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import replace

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim._jit import global_aicore
from ascend_sim.cost import CostModel
from ascend_sim.estimate import PIPE_UTILIZATION_COLUMNS
from ascend_sim.layout import CALL_DATA_COPY_IN, CALL_DATA_COPY_OUT, CALL_DUPLICATE, CALL_WAIT_FLAG
from ascend_sim.trace import tracing, write_json
from tiling import get_soc

from .harness import que, run, tbuf

CHIP = get_soc("ascend910b")
COST = CHIP.cost
MTE2, MTE3, V, S = 2, 3, 1, 0
TILE_ELEMS = 16384           # 64 KiB of fp32 per tile: long enough to hide the DMA latencies behind


@global_aicore
def copy_kernel(c, tiles, src, dst):
    """CopyIn / CopyOut through one TQueBind<VECIN, VECOUT>: double-buffered when the queue has two buffers."""
    T = asc.ub_f32(c)
    base = c.block_idx * tiles * TILE_ELEMS
    for i in range(tiles):
        x = asc.alloc_tensor(c, 0, T)
        asc.data_copy(c, x, asc.gm_at(src, base + i * TILE_ELEMS), TILE_ELEMS)
        asc.en_que(c, 0, x)
        y = asc.de_que(c, 0, T)
        asc.data_copy(c, asc.gm_at(dst, base + i * TILE_ELEMS), y, TILE_ELEMS)
        asc.free_tensor(c, 0, y)


def copy_launch(tiles, buffers, block_dim=1, chip=CHIP, threads=1):
    src = np.arange(block_dim * tiles * TILE_ELEMS, dtype=np.float32)
    dst = np.zeros_like(src)
    plan = [que("bind", TILE_ELEMS * 4, num=buffers, position="VECIN->VECOUT", kind="TQueBind")]
    report = run([copy_kernel], plan, tiles, asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0),
                 block_dim=block_dim, chip=chip, threads=threads)
    assert np.array_equal(dst, src)
    return report


def dma_busy(rows, nbytes, rate):
    """The cost table's DMA rule, by hand: the pipe is busy issue + rows x burst + bytes / rate (each rounded up)."""
    return COST.dma_issue_cycles + math.ceil(rows * COST.burst_cycles) + -(-nbytes // rate)


def test_one_dma_costs_what_the_table_says():
    est = copy_launch(tiles=1, buffers=1).estimate
    core = est.cores[0]
    # 910B: issue 12, one row at 0.375 cycles (rounded up to 1), 64 KiB at 32 B/cycle
    assert core.busy_of("MTE2") == dma_busy(1, 65536, 32) == 12 + 1 + 2048
    assert core.busy_of("MTE3") == dma_busy(1, 65536, 32)
    # AllocTensor, copy-in (lands 241 cycles later), EnQue's event, DeQue, copy-out (lands 96 cycles later)
    assert core.cycles == 2 * COST.scalar_call_cycles + 2061 + 241 + COST.event_cycles + 2061 + 96
    # the launch adds its fixed cost once: 1.3 us at 1.8 GHz
    assert est.cycles == core.cycles + 2340 and COST.launch_cycles == 2340


def test_double_buffering_overlaps_copy_in_with_copy_out():
    tiles = 16
    double = copy_launch(tiles, buffers=2).estimate
    single = copy_launch(tiles, buffers=1).estimate
    d, s = double.cores[0], single.cores[0]
    slower = max(d.busy_of("MTE2"), d.busy_of("MTE3"))
    both = s.busy_of("MTE2") + s.busy_of("MTE3")
    # double buffered: close to the slower pipe (plus the last tile's copy-out and latencies); one buffer: the
    # sum and more (each tile also waits for its data to land before the other pipe may touch it)
    assert d.cycles <= 1.15 * slower, (d, slower)
    assert s.cycles >= both + tiles * (241 + 96), (s, both)
    assert d.cycles < 0.62 * s.cycles
    assert double.bound == "MTE2" and single.bound == "MTE2"


@global_aicore
def flag_kernel(c, wait, src):
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), 1024)
    if wait:
        asc.set_flag(c, asc.MTE2_V, 0)
        asc.wait_flag(c, asc.MTE2_V, 0)
    asc.duplicate(c, y, 1.0, 1024)


def traced_rows(stages, plan, *args, block_dim=1, chip=CHIP):
    with tracing() as request:
        report = run(stages, plan, *args, block_dim=block_dim, chip=chip)
    assert request.runs == [report]
    return report, {ct.block_idx: ct.rows for ct in report.trace.cores}


def first(rows, call):
    return rows[rows[:, 1] == call][0]


@pytest.mark.parametrize("wait", [True, False], ids=["with-WaitFlag", "no-WaitFlag"])
def test_wait_flag_delays_exactly_to_the_flagged_pipe(wait):
    src = np.ones(1024, dtype=np.float32)
    _, rows = traced_rows([flag_kernel], [tbuf("x", 4096), tbuf("y", 4096)], wait, asc.GlobalTensor(src, 0, 0))
    copy, dup = first(rows[0], CALL_DATA_COPY_IN), first(rows[0], CALL_DUPLICATE)
    assert copy[4] - copy[3] == dma_busy(1, 4096, 32)
    vec_cycles = COST.vec_issue_cycles + 4096 // 256 * COST.vec_cycles_per_repeat
    assert dup[4] - dup[3] == vec_cycles
    if wait:
        waited = first(rows[0], CALL_WAIT_FLAG)
        assert waited[7] >= 0                       # it names the SetFlag it waited for
        assert dup[3] == copy[4] + COST.mte2_latency_cycles + COST.event_cycles
    else:
        assert dup[3] < copy[4]                     # nothing holds V: the vector work runs during the copy


@global_aicore
def uneven_stage(c, src, dst):
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    for _ in range(c.block_idx + 1):
        asc.data_copy(c, x, asc.gm_at(src, 0), 1024)


@global_aicore
def after_barrier(c, src, dst):
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    asc.duplicate(c, x, 2.0, 1024)
    asc.pipe_barrier(c, asc.PIPE_ALL)
    asc.data_copy(c, asc.gm_at(dst, c.block_idx * 1024), x, 1024)


def test_sync_all_aligns_every_core_to_the_slowest():
    src = np.ones(1024, dtype=np.float32)
    dst = np.zeros(4 * 1024, dtype=np.float32)
    report, rows = traced_rows([uneven_stage, after_barrier], [tbuf("x", 4096)], asc.GlobalTensor(src, 0, 0),
                               asc.GlobalTensor(dst, 1, 0), block_dim=4)
    one_copy = dma_busy(1, 4096, 32)         # 4 cores: the HBM share (768 / 4) is above a core's own 32 B/cycle
    # the same 4 KiB again comes from the core's L2 at its own L2 rate (110 B/cycle; the share 2889 / 4 is above)
    again = COST.dma_issue_cycles + 1 + math.ceil(4096 / 110)
    # core 3: TBuf::Get and the first copy are issued (two calls), then four copies run back to back on MTE2
    stage1_ends = [int(rows[b][rows[b][:, 1] == CALL_DATA_COPY_IN][-1, 4]) for b in range(4)]
    assert max(stage1_ends) == stage1_ends[3] == 2 * COST.scalar_call_cycles + one_copy + 3 * again
    resume = max(stage1_ends) + COST.mte2_latency_cycles + COST.sync_all_cycles     # its last copy has landed
    assert report.trace.sync_marks == (resume,)
    dup_starts = {int(first(rows[b], CALL_DUPLICATE)[3]) for b in range(4)}
    assert dup_starts == {resume + 2 * COST.scalar_call_cycles}     # TBuf::Get, then the Duplicate is issued
    assert report.estimate.sync_alls == 1
    assert len({t.cycles for t in report.estimate.cores}) == 1   # the same stage-2 work after a common start


def test_a_large_copy_bound_launch_is_within_its_roofline_factor():
    """48 cores stream 24 MiB through double-buffered tiles: HBM-bound, within 1.25x of the roofline."""
    est = copy_launch(tiles=8, buffers=2, block_dim=48, threads=2).estimate
    assert est.bound == "HBM"
    assert est.roofline_cycles <= est.cycles <= 1.25 * est.roofline_cycles
    # the same launch on a chip with ten times the HBM bandwidth is bound by its cores' DMA pipes instead
    fast = replace(CHIP, cost=replace(COST, hbm_bytes_per_cycle=7680.0))
    est_fast = copy_launch(tiles=8, buffers=2, block_dim=48, chip=fast, threads=2).estimate
    assert est_fast.bound == "MTE2" and est_fast.cycles < est.cycles


def test_estimates_do_not_depend_on_the_thread_count():
    one = copy_launch(tiles=6, buffers=2, block_dim=8, threads=1).estimate
    four = copy_launch(tiles=6, buffers=2, block_dim=8, threads=4).estimate
    assert one == four


def test_rounds_of_blocks_add_up_on_each_physical_core():
    small = replace(CHIP, aiv_num=2)
    est = copy_launch(tiles=2, buffers=2, block_dim=5, chip=small).estimate
    per_block = est.cores[0].cycles
    assert all(t.cycles == per_block for t in est.cores)
    assert est.core_bound_cycles == 3 * per_block          # physical core 0 runs blocks 0, 2 and 4


def test_cost_model_off_keeps_results_and_counters():
    off = replace(CHIP, cost=replace(COST, enabled=False))
    on_report = copy_launch(tiles=3, buffers=2, block_dim=2)
    off_report = copy_launch(tiles=3, buffers=2, block_dim=2, chip=off)
    assert off_report.cores == on_report.cores
    assert off_report.estimate.cycles == 0 and "off" in str(off_report)
    assert on_report.estimate.cycles > 0 and "estimate" in str(on_report)


def test_trace_json_loads_and_its_slices_respect_the_dependencies(tmp_path):
    with tracing() as request:
        report = copy_launch(tiles=5, buffers=2, block_dim=2)
    path = tmp_path / "trace.json"
    summary = write_json(request.runs, path)
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == summary["events"] == sum(len(ct.rows) for ct in report.trace.cores)
    assert {e["pid"] for e in slices} == {0, 1}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"S", "V", "MTE2", "MTE3"}
    # each pipe runs in order: the slices that occupy it never overlap (a flag-setting call is a zero-length mark
    # at the cycle its pipe's work has landed, which may lie inside a later DMA: the DMA engine is pipelined)
    for pid in (0, 1):
        for tid in range(4):
            lane = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices
                          if e["pid"] == pid and e["tid"] == tid and e["dur"] > 0)
            assert all(b[0] >= a[1] - 1e-5 for a, b in zip(lane, lane[1:]))
    # every flow ends at or after it starts; DeQue waits for its EnQue, AllocTensor for its FreeTensor
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = [e for e in events if e["ph"] == "f"]
    assert ends and len(ends) == len(starts) == summary["flows"]
    assert all(e["ts"] >= starts[e["id"]]["ts"] for e in ends)
    for ct in report.trace.cores:
        rows = ct.rows
        for row in rows[rows[:, 7] >= 0]:
            setter = rows[rows[:, 0] == row[7]][0]
            assert row[4] >= setter[3] + COST.event_cycles
        # a copy-out never starts before the copy-in of the same tile has ended
        ins, outs = rows[rows[:, 1] == CALL_DATA_COPY_IN], rows[rows[:, 1] == CALL_DATA_COPY_OUT]
        assert (outs[:, 3] >= ins[:, 4] + COST.event_cycles).all()


def test_trace_budget_and_core_selection_are_kept(tmp_path):
    with tracing(cores=(1,), max_events=10) as request:
        report = copy_launch(tiles=5, buffers=2, block_dim=2)
    (core,) = report.trace.cores
    assert core.block_idx == 1 and len(core.rows) == 10 and core.dropped == core.offered - 10 > 0
    summary = write_json(request.runs, tmp_path / "t.json")
    assert summary["dropped_calls"] == core.dropped and "left out" in summary["note"]


def test_pipe_utilization_csv_has_the_msprof_columns(tmp_path):
    report = copy_launch(tiles=4, buffers=2, block_dim=3)
    text = report.to_csv(tmp_path / "PipeUtilization.csv")
    assert (tmp_path / "PipeUtilization.csv").read_text() == text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == PIPE_UTILIZATION_COLUMNS
    assert [int(r["block_id"]) for r in rows] == [0, 1, 2]
    for r, t in zip(rows, report.estimate.cores):
        assert int(r["aiv_total_cycles"]) == t.cycles
        assert float(r["aiv_time(us)"]) == pytest.approx(t.cycles / COST.clock_mhz, abs=1e-3)
        for pipe in ("vec", "scalar", "mte2", "mte3"):
            assert 0.0 <= float(r[f"aiv_{pipe}_ratio"]) <= 1.0
        assert float(r["aiv_mte2_ratio"]) > 0.5


@pytest.mark.parametrize("bad", [{"clock_mhz": 0}, {"event_cycles": -1}, {"dcache_lines": 3}, {"nope": 1},
                                 {"vec_call_cycles_per_repeat": (("Cast", 1.5),)}],
                         ids=["zero-clock", "negative-cycles", "dcache-not-pow2", "unknown", "fractional-cycles"])
def test_bad_cost_figures_are_refused_with_the_field_named(bad):
    from tiling.platform import ProfileError
    with pytest.raises(ProfileError, match=next(iter(bad))):
        get_soc("ascend910b", cost=bad)


def test_cost_overrides_make_a_custom_profile():
    soc = get_soc("ascend910b", cost={"hbm_bytes_per_cycle": 900.0, "sync_all_cycles": 10})
    assert soc.cost.hbm_bytes_per_cycle == 900.0 and soc.cost.sync_all_cycles == 10
    assert get_soc("ascend910b").cost == CostModel()


def test_plot_needs_matplotlib_and_says_how_to_get_it(tmp_path, monkeypatch):
    import sys

    from ascend_sim.errors import ConfigError
    from ascend_sim.trace import plot_occupancy
    with tracing() as request:
        copy_launch(tiles=2, buffers=2)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError, match=r"ascend-sim\[plot\]"):
        plot_occupancy(request.runs, tmp_path / "p.png")


def test_plot_draws_pipe_occupancy(tmp_path):
    pytest.importorskip("matplotlib")
    from ascend_sim.trace import plot_occupancy
    with tracing() as request:
        copy_launch(tiles=3, buffers=2, block_dim=2)
    plot_occupancy(request.runs, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
