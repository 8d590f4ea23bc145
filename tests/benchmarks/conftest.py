"""Benchmark bookkeeping: each benchmark records its median time and bytes; the terminal summary prints
GB/s and the ratios to the golden and to np.copyto of the same bytes, all measured in the same run."""
from __future__ import annotations

import numpy as np
import pytest

RESULTS: dict[str, dict[str, dict]] = {}
OVERHEAD: dict[str, dict] = {}
TORCH_OVERHEAD: dict[str, dict] = {}
"""torch-op overhead cases: median seconds of the torch op and of the NumPy friendly call, timed alternately."""
COLD: dict[str, dict] = {}
"""Cold-start cases: seconds of a fresh process with an empty cache, with a warm cache, and of `import numpy`."""
CHECKED: dict[str, dict] = {}
"""Checked-mode cases: median seconds unchecked ("off") and with check="race"; or, for a sweep, the median and
worst ratio and the worst case."""
"""Timeline overhead cases: median seconds with the cost model on / off / on with a trace, and events traced."""


def record(case: str, role: str, benchmark, gm_bytes: int) -> None:
    """Store one measurement: role is "sim", "golden" or "copyto"."""
    median = benchmark.stats.stats.median
    RESULTS.setdefault(case, {})[role] = dict(median=median, gm_bytes=gm_bytes)
    benchmark.extra_info["GB/s"] = round(gm_bytes / median / 1e9, 2)


def pytest_terminal_summary(terminalreporter):
    if COLD:
        tr = terminalreporter
        tr.section("ascend-sim first run (fresh processes, same run)")
        width = max(len(case) for case in COLD)
        tr.write_line(f"{'case':<{width}} {'cold s':>7} {'warm s':>7} {'numpy s':>8} {'cold/warm':>10}")
        for case, m in COLD.items():
            tr.write_line(f"{case:<{width}} {m['cold']:>7.1f} {m['warm']:>7.2f} {m['floor']:>8.2f} "
                          f"{m['cold'] / m['warm']:>9.1f}x")
    if OVERHEAD:
        _overhead_summary(terminalreporter)
    if TORCH_OVERHEAD:
        tr = terminalreporter
        tr.section("ascend-sim torch ops over the NumPy friendly calls (same run, alternated; budget 10 % or 50 us)")
        width = max(len(case) for case in TORCH_OVERHEAD)
        tr.write_line(f"{'case':<{width}} {'numpy ms':>9} {'torch ms':>9} {'added us':>9} {'torch/numpy':>12}")
        for case, m in TORCH_OVERHEAD.items():
            tr.write_line(f"{case:<{width}} {m['numpy'] * 1e3:>9.3f} {m['torch'] * 1e3:>9.3f} "
                          f"{(m['torch'] - m['numpy']) * 1e6:>9.1f} {m['torch'] / m['numpy']:>11.3f}x")
    if CHECKED:
        tr = terminalreporter
        tr.section("ascend-sim checked-mode overhead (same run, alternated)")
        width = max(len(case) for case in CHECKED)
        tr.write_line(f"{'case':<{width}} {'off ms':>8} {'race ms':>8} {'race/off':>9}")
        for case, m in CHECKED.items():
            if "worst" in m:
                tr.write_line(f"{case}: median {m['median']:.2f}x, worst {m['worst']:.2f}x "
                              f"({m['worst_case']})")
                continue
            tr.write_line(f"{case:<{width}} {m['off'] * 1e3:>8.1f} {m['race'] * 1e3:>8.1f} "
                          f"{m['race'] / m['off']:>8.2f}x")
    if not RESULTS:
        return
    tr = terminalreporter
    tr.section("ascend-sim benchmark ratios (same run)")
    width = max(len(case) for case in RESULTS)
    tr.write_line(f"{'case':<{width}} {'sim ms':>8} {'GB/s':>7} {'vs golden':>10} {'vs copyto':>10} {'vs numpy':>9}")
    for case, roles in RESULTS.items():
        sim = roles.get("sim")
        if not sim:
            continue
        gbs = sim["gm_bytes"] / sim["median"] / 1e9
        vs_golden = roles["golden"]["median"] / sim["median"] if "golden" in roles else float("nan")
        vs_copy = roles["copyto"]["median"] / sim["median"] if "copyto" in roles else float("nan")
        vs_numpy = roles["numpy"]["median"] / sim["median"] if "numpy" in roles else float("nan")
        tr.write_line(f"{case:<{width}} {sim['median'] * 1e3:>8.3g} {gbs:>7.2f} {_ratio(vs_golden):>10} "
                      f"{_ratio(vs_copy):>10} {_ratio(vs_numpy):>9}")
    tr.write_line("ratios: the other's median time / the simulator's (above 1: the simulator is faster); vs numpy: "
                  "a vectorised NumPy implementation a user would write instead")


def _ratio(value: float) -> str:
    """A ratio with two decimals, or two significant digits below 0.1 (a small call's ratio to a microsecond
    baseline would show as 0.00x)."""
    return f"{value:.2f}x" if not value < 0.1 else f"{value:.2g}x"


def _overhead_summary(tr) -> None:
    tr.section("ascend-sim timeline overhead (same run, alternated)")
    width = max(len(case) for case in OVERHEAD)
    tr.write_line(f"{'case':<{width}} {'off ms':>8} {'on ms':>8} {'on/off':>7} {'traced ms':>10} {'traced/off':>10} "
                  f"{'calls traced':>13}")
    for case, m in OVERHEAD.items():
        tr.write_line(f"{case:<{width}} {m['off'] * 1e3:>8.1f} {m['on'] * 1e3:>8.1f} {m['on'] / m['off']:>6.2f}x "
                      f"{m['traced'] * 1e3:>10.1f} {m['traced'] / m['off']:>9.2f}x {m['events']:>13,d}")


def copyto_same_bytes(benchmark, case: str, gm_bytes: int) -> None:
    """The baseline: np.copyto moving gm_bytes of GM traffic (half read, half written), recorded for `case`."""
    half = gm_bytes // 2
    src = np.ones(half, dtype=np.uint8)
    dst = np.zeros(half, dtype=np.uint8)
    benchmark.pedantic(np.copyto, args=(dst, src), rounds=5, iterations=1, warmup_rounds=1)
    record(case, "copyto", benchmark, gm_bytes)


@pytest.fixture
def bench_record():
    return record


@pytest.fixture
def copyto_baseline():
    return copyto_same_bytes
