"""A trace of 1,000,000 calls, written as Perfetto JSON, stays well within 1 GiB of memory (slow: about 10 s).

The memory figure is an upper bound of what tracing adds: the process's peak resident set after the run
minus its resident set before it (if an earlier peak was higher, the difference only grows)."""
from __future__ import annotations

import json
import resource

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim._jit import global_aicore
from ascend_sim.trace import tracing, write_json

from .harness import run, tbuf

CALLS = 1_000_000


@global_aicore
def many_calls(c, n):
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    for _ in range(n):
        asc.duplicate(c, x, 1.0, 64)
        asc.set_flag(c, asc.V_S, 0)
        asc.wait_flag(c, asc.V_S, 0)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


@pytest.mark.slow
def test_a_million_traced_calls_stay_within_a_gib(tmp_path):
    n = CALLS // 3
    run([many_calls], [tbuf("x", 256)], 1)               # compiled before the measurement
    before = _rss_bytes()
    with tracing(max_events=CALLS) as request:
        report = run([many_calls], [tbuf("x", 256)], n)
    summary = write_json(request.runs, tmp_path / "big.json")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert report.trace.events == 3 * n + 1 and summary["dropped_calls"] == 0
    assert summary["events"] == 3 * n + 1 and summary["flows"] == n
    assert peak < 1 << 30, f"peak {peak / 2 ** 20:.0f} MiB"
    print(f"\n1,000,000 traced calls: at most {peak / 2 ** 20:.0f} MiB more resident memory, JSON "
          f"{(tmp_path / 'big.json').stat().st_size / 2 ** 20:.0f} MiB")
    text = (tmp_path / "big.json").read_text()
    assert text.startswith('{"displayTimeUnit"')
    tail = text[text.rindex('],"otherData":') + len('],"otherData":'):-2]
    assert json.loads(tail) == summary            # the small traces of test_timeline.py are loaded whole
    assert np.all(np.diff(report.trace.cores[0].rows[:, 0]) == 1)       # every call kept, in order
