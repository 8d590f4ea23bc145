"""The occupancy plot draws each pipe's busy fraction per time bin: a pipe busy half the time in many short calls
is a half-dark strip, not a solid bar. Synthetic traces with known busy patterns, and a real traced launch whose
binned busy time must add up to the timeline's own busy counters."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ascend_sim.layout import PIPE_MTE2, PIPE_MTE3, PIPE_S, PIPE_V, TRACE_COLS
from ascend_sim.occupancy import occupancy, plot_occupancy
from ascend_sim.trace import CoreTrace, KernelTrace, tracing

from .test_timeline import copy_launch

CLOCK_MHZ = 1000.0          # one cycle = 1 ns


def rows_of(calls):
    """Trace rows of (pipe, start cycle, end cycle) calls."""
    rows = np.zeros((len(calls), TRACE_COLS), dtype=np.int64)
    for k, (pipe, start, end) in enumerate(calls):
        rows[k, :5] = (k + 1, 1, pipe, start, end)
    rows[:, 7] = -1
    return rows


def fake_run(per_core: dict, cycles: int):
    """A RunReport stand-in: the traced cores' rows and an estimate of `cycles` at CLOCK_MHZ."""
    cores = tuple(CoreTrace(b, rows_of(calls), len(calls)) for b, calls in per_core.items())
    return SimpleNamespace(trace=KernelTrace(cores), estimate=SimpleNamespace(
        time_us=cycles / CLOCK_MHZ, cost=SimpleNamespace(clock_mhz=CLOCK_MHZ)))


def periodic(pipe, busy, period, span):
    return [(pipe, t, t + busy) for t in range(0, span, period)]


SPAN = 20_000


@pytest.mark.parametrize("busy, period", [(10, 20), (12, 100), (1, 8), (199, 200)],
                         ids=["half-idle", "12-percent", "one-in-eight", "nearly-busy"])
def test_a_pipe_busy_in_short_calls_shows_its_fraction_in_every_bin(busy, period):
    run = fake_run({0: periodic(PIPE_MTE3, busy, period, SPAN) + [(PIPE_V, 0, SPAN)]}, SPAN)
    occ = occupancy([run], bins=50)           # bins of 400 cycles: whole periods each
    assert occ.busy.shape == (1, 4, 50)
    assert np.allclose(occ.busy[0, PIPE_MTE3], busy / period)
    assert np.allclose(occ.busy[0, PIPE_V], 1.0) and np.allclose(occ.busy[0, PIPE_S], 0.0)
    assert occ.utilisation[0, PIPE_MTE3] == pytest.approx(busy / period)


def test_a_half_idle_pipe_does_not_look_busy():
    run = fake_run({0: periodic(PIPE_MTE3, 10, 20, SPAN)}, SPAN)
    occ = occupancy([run], bins=50)
    assert occ.busy[0, PIPE_MTE3].max() <= 0.5 + 1e-9


def test_busy_then_idle_is_dark_then_light_and_bins_split_a_call():
    run = fake_run({3: [(PIPE_MTE2, 0, 10_500)]}, SPAN)
    occ = occupancy([run], bins=20)           # 1000-cycle bins: bin 10 holds the call's last 500 cycles
    expected = np.zeros(20)
    expected[:10], expected[10] = 1.0, 0.5
    assert occ.cores == (3,) and np.allclose(occ.busy[0, PIPE_MTE2], expected)


def test_waiting_spans_count_as_idle():
    from ascend_sim.layout import CALL_DEQUE, CALL_WAIT_FLAG
    run = fake_run({0: [(PIPE_V, 0, 500)]}, 1000)
    waits = np.vstack([run.trace.cores[0].rows, rows_of([(PIPE_V, 500, 1000), (PIPE_MTE3, 0, 1000)])])
    waits[1:, 1] = (CALL_WAIT_FLAG, CALL_DEQUE)
    run.trace = KernelTrace((CoreTrace(0, waits, 3),))
    occ = occupancy([run], bins=2)
    assert occ.busy[0, PIPE_V].tolist() == [1.0, 0.0] and occ.busy[0, PIPE_MTE3].tolist() == [0.0, 0.0]


def test_launches_follow_each_other_and_cores_without_a_trace_stay_empty():
    first = fake_run({0: [(PIPE_V, 0, 1000)]}, 1000)
    second = fake_run({1: [(PIPE_V, 0, 1000)]}, 1000)
    occ = occupancy([first, second], bins=2)
    assert occ.cores == (0, 1)
    assert occ.busy[:, PIPE_V].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert occ.edges_us.tolist() == [0.0, 1.0, 2.0]


def test_the_binned_busy_time_of_a_real_launch_is_the_timelines_busy_count():
    with tracing() as request:
        report = copy_launch(tiles=6, buffers=2, block_dim=2)
    occ = occupancy(request.runs, bins=37)
    # S is left out: the timeline charges the scalar unit for issuing every call, the trace rows only for the
    # scalar calls themselves (GetValue / SetValue), which this kernel has none of
    for i, core in enumerate(report.estimate.cores):
        for p, pipe in ((PIPE_V, "V"), (PIPE_MTE2, "MTE2"), (PIPE_MTE3, "MTE3")):
            assert occ.utilisation[i, p] == pytest.approx(core.busy_of(pipe) / report.estimate.cycles, abs=1e-9)
    mte2 = occ.busy[0, PIPE_MTE2]
    assert 0.0 < mte2.mean() < 1.0 and mte2.min() < 1.0       # the copy pipe idles while the queue waits


@pytest.mark.parametrize("bins", [0, -3, 2.5, True], ids=["zero", "negative", "float", "bool"])
def test_a_bad_bin_count_is_a_config_error(bins):
    from ascend_sim import ConfigError
    with pytest.raises(ConfigError, match="bins") as err:
        occupancy([], bins=bins)
    assert err.value.setting == "bins"


def test_the_plot_renders_what_it_computed(tmp_path):
    pytest.importorskip("matplotlib")
    run = fake_run({0: periodic(PIPE_MTE3, 12, 100, SPAN), 1: [(PIPE_V, 0, SPAN)]}, SPAN)
    drawn = plot_occupancy([run], tmp_path / "p.png", bins=50)
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.array_equal(drawn.busy, occupancy([run], bins=50).busy)
    assert drawn.utilisation[0, PIPE_MTE3] == pytest.approx(0.12)
