"""The stock cost models against the public figures they come from (docs/machine-model/cost-model.md).

Expectations are computed from the sources' own numbers, not copied from cost.py:
* clocks: the spec table of ops-transformer's cross-platform migration guide (Atlas A2 1.8 GHz, Ascend 950
  1.65 GHz); A3 (910_93) is an A2-generation part and takes the A2 clock.
* achieved HBM rate: the asc-devkit DataCopyPad benchmark reads a 12288 x 12288 fp16 matrix GM -> UB in 64 x 1024
  tiles over every AIV in 215.82 us on A2 / A3 and 188.52 us on 950.
"""
from __future__ import annotations

import pytest

from ascend_sim import CoreTime, Estimate
from tiling import get_soc

MATRIX_BYTES = 12288 * 12288 * 2
COPY_BENCH_US = {"a2a3": 215.82, "950": 188.52}
SPEC_CLOCK_GHZ = {"a2a3": 1.8, "950": 1.65}
GENERATION = {"ascend910b": "a2a3", "ascend910_93": "a2a3", "ascend950": "950"}


def achieved_bytes_per_s(generation: str) -> float:
    return MATRIX_BYTES / (COPY_BENCH_US[generation] * 1e-6)


@pytest.mark.parametrize("soc", list(GENERATION))
def test_the_clock_is_the_spec_tables(soc):
    assert get_soc(soc).cost.clock_mhz == pytest.approx(SPEC_CLOCK_GHZ[GENERATION[soc]] * 1000)


def test_the_950_hbm_rate_is_what_the_copy_benchmark_achieves():
    cost = get_soc("ascend950").cost
    assert cost.hbm_bytes_per_cycle * cost.clock_mhz * 1e6 == pytest.approx(achieved_bytes_per_s("950"), rel=0.005)


@pytest.mark.parametrize("soc", ["ascend910b", "ascend910_93"])
def test_the_a2_a3_hbm_rate_is_within_two_percent_of_the_copy_benchmark(soc):
    cost = get_soc(soc).cost
    assert cost.hbm_bytes_per_cycle * cost.clock_mhz * 1e6 == pytest.approx(achieved_bytes_per_s("a2a3"), rel=0.02)


@pytest.mark.parametrize("soc", list(GENERATION))
def test_an_hbm_bound_read_of_the_benchmark_matrix_takes_the_benchmarks_time(soc):
    """A launch whose cores finish at once and that moves the benchmark's bytes is HBM bound: its HBM time is the
    benchmark's measured time (within the 950's exact fit and the A2 / A3 2 % above); the estimate adds the
    launch's 1.3 us floor (msModeling's smallest measured A3 vector kernels, measured_references.md)."""
    chip = get_soc(soc)
    cores = tuple(CoreTime(b, 1000, (0, 0, 1000, 0)) for b in range(chip.aiv_num))
    est = Estimate(chip.cost, chip.aiv_num, cores, MATRIX_BYTES)
    assert est.bound == "HBM"
    rel = 0.005 if GENERATION[soc] == "950" else 0.02
    assert chip.cost.us(est.hbm_bound_cycles) == pytest.approx(COPY_BENCH_US[GENERATION[soc]], rel=rel)
    assert est.time_us == pytest.approx(chip.cost.us(est.hbm_bound_cycles) + 1.3, abs=0.001)
