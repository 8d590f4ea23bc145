"""Whole-aclnn estimates: a composite's host l0 steps are estimated as the chip kernels they are (modelled, not
simulated), the call's estimate is the sum of its steps, and `ascend-sim profile` tabulates the steps."""
from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from ascend_sim import host_cost
from ascend_sim.cost import CostModel
from ops._framework import Composite, HostStep, KernelStep, recorded_runs, run_executor
from ops.cli import main
from ops.permute import get_workspace_size as permute_workspace
from ops.unpermute_with_routing_map import moe_token_unpermute_with_routing_map
from tiling import get_soc

BF16 = ml_dtypes.bfloat16


def _unpermute_rm(rng, tokens, hidden, experts, topk, soc="ascend910b"):
    """An unpermute_with_routing_map run (its kernel + two ViewCopy steps on 910B); its CompositeReport."""
    routing = np.zeros((tokens, experts), dtype=bool)
    for t in range(tokens):
        routing[t, rng.choice(experts, topk, replace=False)] = True
    rows = int(routing.sum())
    permuted = rng.standard_normal((rows, hidden)).astype(np.float32).astype(BF16)
    sorted_indices = rng.permutation(rows).astype(np.int32)
    with recorded_runs() as runs:
        moe_token_unpermute_with_routing_map(permuted, sorted_indices, routing, None, False, (tokens, hidden), soc=soc)
    return runs[-1].executor.report


def test_host_steps_appear_in_the_report_as_modelled(rng):
    report = _unpermute_rm(rng, 64, 256, 8, 2)
    rows = report.breakdown()
    assert [how for _, how, _, _ in rows].count("simulated") == 1
    modelled = [r for r in rows if r[1] == "modelled"]
    assert modelled and all(name == "l0op::ViewCopy" and us > 0 for name, _, us, _ in modelled)
    assert "modelled (not simulated)" in "\n".join(report.estimate.lines())
    assert "whole call: estimate" in str(report) and "1 modelled, not simulated" in str(report)


def test_the_whole_call_is_the_sum_of_its_steps(rng):
    report = _unpermute_rm(rng, 64, 256, 8, 2)
    kernel = report.main.estimate
    assert [name for name, *_ in report.breakdown()] == ["l0op::MoeTokenUnpermuteWithRoutingMap", "l0op::ViewCopy"]
    # the ViewCopy of the (64, 256) bf16 result, 32 KiB: 4 cores at 32 B/cycle each way, 256 cycles, the
    # 241 + 96 cycle pipeline fill and the 2340-cycle launch (host_cost's formula, worked by hand)
    expected_cycles = kernel.cycles + (256 + 337 + 2340)
    assert report.estimate.cycles == expected_cycles
    assert report.estimate.time_us == pytest.approx(sum(us for _, _, us, _ in report.breakdown()))


def test_host_step_estimates_grow_with_bytes(rng):
    small = _unpermute_rm(rng, 64, 256, 8, 2)
    large = _unpermute_rm(rng, 64, 8192, 8, 2)      # 1 MiB: past what 48 cores copy in the small one's time
    launch_us = CostModel().us(CostModel().launch_cycles)      # the fixed 1.3 us every step pays

    def copies(report):
        return [us - launch_us for name, how, us, _ in report.breakdown() if how == "modelled"]
    assert copies(large)[0] > 2 * copies(small)[0]
    assert large.estimate.time_us > small.estimate.time_us


def test_a_step_without_chip_work_is_not_estimated(rng):
    tokens = rng.standard_normal((40, 16)).astype(np.float32)
    indices = rng.integers(0, 8, (40, 2)).astype(np.int32)
    out = np.zeros((80, 16), np.float32), np.zeros(80, np.int32)
    size, permute = permute_workspace(tokens, indices, 0, False, *out)
    composite = Composite("TestOp", permute.tiling, [
        KernelStep("l0op::MoeTokenPermute", permute), HostStep("bookkeeping", lambda: None),
        HostStep("l0op::ZerosLike", lambda: None, host_cost.fill(out[0].nbytes, out[0].size, 4))],
        api="aclnnTestOp", workspace_size=size)
    run_executor("aclnnTestOp", np.empty(size, np.uint8), size, composite)
    names = [name for name, *_ in composite.report.breakdown()]
    assert names == ["l0op::MoeTokenPermute", "l0op::ZerosLike"]
    soc = permute.tiling.soc
    zeros = host_cost.modelled_estimate(host_cost.fill(out[0].nbytes, out[0].size, 4), soc.aiv_num, soc.cost)
    assert composite.report.estimate.cycles == composite.report.main.estimate.cycles + zeros.cycles


def test_profile_prints_the_per_step_breakdown(capsys):
    args = ["profile", "moe_token_unpermute_with_routing_map", "--tokens", "64", "--hidden", "256", "--experts", "8",
            "--topk", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "per-step breakdown" in out and "simulated" in out and "modelled" in out and "whole call" in out
    table = out[out.index("per-step breakdown"):].splitlines()
    assert any(line.split()[:2] == ["l0op::ViewCopy", "modelled"] for line in table)
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kernels = doc["estimate"]["kernels"]
    assert [k["modelled"] for k in kernels] == [False, True, True]
    assert doc["estimate"]["time_us"] == pytest.approx(sum(k["time_us"] for k in kernels))


def test_profile_what_if_with_a_cost_file(tmp_path, capsys):
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"cost": {"mte2_latency_cycles": 2410}}), encoding="utf-8")
    args = ["profile", "moe_token_unpermute_with_routing_map", "--tokens", "64", "--hidden", "256", "--experts", "8",
            "--topk", "2", "--json"]
    assert main(args + ["--cost-file", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["estimate"]["time_us"] > doc["stock"]["us"]
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    assert main(args + ["--cost-file", str(bad)]) == 2
    assert "line 1: not JSON" in capsys.readouterr().err


@pytest.mark.parametrize("soc_name", ["ascend910b", "ascend910_93"])
def test_every_host_step_of_the_routing_map_grad_chain_is_estimated(rng, soc_name):
    from ops.permute_with_routing_map_grad import moe_token_permute_with_routing_map_grad
    tokens, hidden, experts, topk = 32, 64, 8, 2
    routing = np.zeros((tokens, experts), dtype=bool)
    for t in range(tokens):
        routing[t, rng.choice(experts, topk, replace=False)] = True
    rows = int(routing.sum())
    grad = rng.standard_normal((rows, hidden)).astype(np.float32).astype(BF16)
    probs_grad = rng.standard_normal(rows).astype(np.float32).astype(BF16)
    sorted_indices = rng.permutation(rows).astype(np.int32)
    with recorded_runs() as runs:
        moe_token_permute_with_routing_map_grad(grad, probs_grad, sorted_indices, routing, experts, tokens,
                                                soc=get_soc(soc_name))
    report = runs[-1].executor.report
    host_steps = [s.name for s in report.steps if s.kind == "host"]
    estimated = [name for name, how, _, _ in report.breakdown() if how == "modelled"]
    assert host_steps and estimated == host_steps
