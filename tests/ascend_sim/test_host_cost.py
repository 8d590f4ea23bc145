"""The modelled chip time of host l0 steps (ascend_sim.host_cost): the formulas at hand-worked points, growth with
bytes, the sort's passes, and the cost model's launch cost."""
from __future__ import annotations

import pytest

from ascend_sim import host_cost
from ascend_sim.cost import CostModel
from tiling import get_soc

STOCK = CostModel()     # 910B figures: MTE2 / MTE3 32 B/cycle per core, HBM 768 B/cycle, latencies 241 / 96


def test_a_small_copy_is_its_pipeline_fill_plus_its_bytes_at_the_core_rate():
    # 32 KiB over ceil(32768 / 8192) = 4 cores at min(32, 768 / 4) B/cycle: 256 cycles each way (overlapped),
    # above the HBM's 65536 / 768 = 85.3; plus the 241 + 96 cycle fill and the 2340-cycle (1.3 us) launch,
    # which is the largest part of so small a kernel
    est = host_cost.modelled_estimate(host_cost.move(32768), 48, STOCK)
    assert est.cores == 4
    assert est.cycles == 256 + 241 + 96 + 2340
    assert est.bound == "launch"
    assert est.time_us == pytest.approx((593 + 2340) / 1800)
    no_launch = host_cost.modelled_estimate(host_cost.move(32768), 48, STOCK.with_overrides({"launch_cycles": 0}))
    assert no_launch.cycles == 256 + 241 + 96 and no_launch.bound == "MTE2"


def test_a_large_copy_is_bound_by_the_hbm():
    # 64 MiB in and out over all 48 cores: the HBM's 2 * 64 MiB / 768 B/cycle, since each core's share 16 B/cycle
    # of the HBM is below its 32 B/cycle MTE rate and both directions share it
    nbytes = 64 << 20
    est = host_cost.modelled_estimate(host_cost.move(nbytes), 48, STOCK)
    assert est.cores == 48
    assert est.bound == "HBM"
    assert est.cycles == -(-(2 * nbytes) // 768) + 241 + 96 + 2340


@pytest.mark.parametrize("kind", ["move", "fill", "cast", "transpose", "gather", "sort", "index_add"])
def test_estimates_grow_with_bytes(kind):
    def work(n):
        return {"move": lambda: host_cost.move(4 * n), "fill": lambda: host_cost.fill(4 * n, n, 4),
                "cast": lambda: host_cost.elementwise(2 * n, 4 * n, n, 4, call="Cast"),
                "transpose": lambda: host_cost.elementwise(2 * n, 2 * n, n, 2),
                "gather": lambda: host_cost.gather(n // 256, 1024, 4 * (n // 256)),
                "sort": lambda: host_cost.sort(n), "index_add":
                    lambda: host_cost.index_add(n // 256, 256, 2, 4 * (n // 256)),
                }[kind]()
    times = [host_cost.modelled_estimate(work(n), 48, STOCK).cycles for n in (1 << 12, 1 << 16, 1 << 20, 1 << 24)]
    assert times == sorted(times) and times[-1] > 4 * times[0], times


def test_the_sort_makes_its_merge_passes_through_gm():
    # 4096 keys: 4096 / 32 = 128 sorted groups, ceil(log4 128) = 4 merge passes of 8 B a key each way
    keys = 4096
    est = host_cost.modelled_estimate(host_cost.sort(keys), 48, STOCK)
    work = est.work
    assert est.gm_bytes == work.read_bytes + work.write_bytes
    merges = 4
    expected_bytes = keys * 4 + keys * 8 + 2 * merges * keys * 8
    assert est.hbm_cycles == pytest.approx(expected_bytes / 768)


def test_the_vector_work_counts_repeats_of_the_widest_operand():
    # a Cast bf16 -> fp32 of 2^20 elements on 48 cores: ceil(2^20 * 4 / 256 / 48) = 342 repeats at the Cast's
    # 2 cycles, plus the 8-cycle issue
    n = 1 << 20
    est = host_cost.modelled_estimate(host_cost.elementwise(2 * n, 4 * n, n, 4, call="Cast"), 48, STOCK)
    assert est.vec_cycles == 342 * 2 + 8
    slow = STOCK.with_overrides({"vec_call_cycles_per_repeat": (("Cast", 64),)})
    slow_est = host_cost.modelled_estimate(host_cost.elementwise(2 * n, 4 * n, n, 4, call="Cast"), 48, slow)
    assert slow_est.bound == "V" and slow_est.vec_cycles == 342 * 64 + 8


def test_the_launch_cost_is_the_cost_models():
    plain = host_cost.modelled_estimate(host_cost.move(256), 48, STOCK)
    slower = host_cost.modelled_estimate(host_cost.move(256), 48, STOCK.with_overrides({"launch_cycles": 5000}))
    assert plain.launch_cycles == STOCK.launch_cycles == 2340
    assert slower.cycles == plain.cycles - 2340 + 5000 and slower.bound == "launch"


def test_disabled_cost_model_estimates_nothing():
    est = host_cost.modelled_estimate(host_cost.move(1 << 20), 48, STOCK.with_overrides({"enabled": False}))
    assert est.cycles == 0 and est.lines() == ["estimate: off (cost model disabled)"]


@pytest.mark.parametrize("name", ["ascend910b", "ascend950"])
def test_modelled_lines_say_modelled(name):
    soc = get_soc(name)
    est = host_cost.modelled_estimate(host_cost.move(1 << 20), soc.aiv_num, soc.cost)
    assert est.csv_rows() == []
    assert "modelled (not simulated)" in est.lines()[0]


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="kind"):
        host_cost.HostWork("shuffle", 1, 1)
