"""Every shipped kernel runs under the timeline: an estimate, a bounding pipe, a trace that keeps the hardware's
ordering rules, and the same figures whatever the thread count."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from ascend_sim.estimate import PIPE_UTILIZATION_COLUMNS
from ascend_sim.layout import PIPE_NAMES
from ascend_sim.trace import tracing
from ops import _framework
from ops.cli import OPS, demo_cases, run_op
from tests.ops.demo_labels import demo_params
from tiling import get_soc

SOCS = ("ascend910b", "ascend950")
CASES, CASE_IDS = demo_params(SOCS)


@functools.lru_cache(maxsize=None)
def _cases(soc: str):
    return demo_cases(get_soc(soc))


def _case(soc: str, k: int):
    return _cases(soc)[k]


def _check_trace(run) -> None:
    """Per core: the slices that occupy a pipe never overlap, and a call that waited for an event ends after the
    event rose (its setter's signal plus the event latency)."""
    event = run.estimate.cost.event_cycles
    for ct in run.trace.cores:
        rows = ct.rows
        for pipe in range(len(PIPE_NAMES)):
            lane = rows[(rows[:, 2] == pipe) & (rows[:, 4] > rows[:, 3])]
            assert (lane[1:, 3] >= lane[:-1, 4]).all(), f"{run.kernel} core {ct.block_idx}: {PIPE_NAMES[pipe]}"
        waiters = rows[rows[:, 7] >= 0]
        if len(waiters):
            at = np.searchsorted(rows[:, 0], waiters[:, 7])
            found = at < len(rows)
            setters = rows[at[found]]
            assert (setters[:, 0] == waiters[found, 7]).all()
            assert (waiters[found, 4] >= setters[:, 3] + event).all(), f"{run.kernel} core {ct.block_idx}"


@pytest.mark.parametrize("soc,k", CASES, ids=CASE_IDS)
def test_every_shipped_kernel_reports_an_estimate_and_a_consistent_trace(soc, k):
    case = _case(soc, k)
    with tracing(max_events=60_000) as request:
        facts = run_op(OPS[case.op], case.args, case.soc, check=False)
    report = facts["report"]
    assert request.runs, "no kernel was traced"
    for run in request.runs:
        est = run.estimate
        assert est.cycles > 0 and est.time_us > 0
        assert est.bound in ("HBM", *PIPE_NAMES)
        assert all(0.0 <= v <= 1.0 for v in est.utilisation().values())
        assert est.cycles >= est.roofline_cycles * 0.999
        rows = est.csv_rows()
        assert len(rows) == run.block_dim and len(rows[0]) == len(PIPE_UTILIZATION_COLUMNS)
        _check_trace(run)
    # the operator's own report carries the estimate of all its kernels, and of a composite's host steps modelled
    modelled = [e for _, e in (report.step_estimates() if hasattr(report, "step_estimates") else [])
                if getattr(e, "modelled", False)]
    assert report.estimate.time_us == pytest.approx(sum(r.estimate.time_us for r in request.runs)
                                                    + sum(e.time_us for e in modelled))
    assert "estimate" in str(report)


@pytest.mark.parametrize("op_label", ["multi-core sort (VBS, VMS, SortOut)"])
def test_estimates_are_identical_for_any_thread_count(op_label, monkeypatch):
    case = next(c for c in _cases("ascend910b") if c.label == op_label)
    estimates = []
    for threads in ("1", "3"):
        monkeypatch.setenv("ASCEND_SIM_THREADS", threads)
        with _framework.recorded_runs():
            facts = run_op(OPS[case.op], case.args, case.soc, check=False)
        report = facts["report"]
        estimates.append([r.estimate for r in getattr(report, "kernel_runs", [report])])
    assert estimates[0] == estimates[1]
    assert any(e.sync_alls > 0 for e in estimates[0])      # the multi-core sort crosses SyncAll()
