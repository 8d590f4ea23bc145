"""A composite aclnn: simulated kernels and host l0 steps run in the aclnn's order, and the report lists them."""
from __future__ import annotations

import numpy as np
import pytest

from ops import ParamInvalidError
from ops._framework import Composite, HostStep, KernelStep, run_executor
from ops.permute import get_workspace_size as permute_workspace


def _permute_step(rng):
    tokens = rng.standard_normal((40, 16)).astype(np.float32)
    indices = rng.integers(0, 8, (40, 2)).astype(np.int32)
    out = np.zeros((80, 16), np.float32), np.zeros(80, np.int32)
    size, executor = permute_workspace(tokens, indices, 0, False, *out)
    return size, executor, out


def test_steps_run_in_order_and_are_reported(rng):
    size, permute, (permuted, _) = _permute_step(rng)
    doubled = np.zeros_like(permuted)
    order = []

    def double():
        order.append("mul")
        np.multiply(permuted, 2, out=doubled)   # reads what the kernel step wrote

    composite = Composite("TestOp", permute.tiling, [KernelStep("l0op::MoeTokenPermute", permute),
                                                     HostStep("l0op::Mul", double)],
                          api="aclnnTestOp", workspace_size=size)
    run_executor("aclnnTestOp", np.empty(size, np.uint8), size, composite)
    report = composite.report
    assert [(s.name, s.kind) for s in report.steps] == [("l0op::MoeTokenPermute", "kernel"), ("l0op::Mul", "host")]
    assert report.main is report.steps[0].run
    assert report.block_dim == report.main.block_dim
    assert report.total.mte3_bytes == report.main.total.mte3_bytes
    assert np.array_equal(doubled, permuted * 2) and np.any(permuted)
    assert "host (NumPy)" in str(report) and "simulated kernel" in str(report)


def test_a_composite_runs_only_through_its_own_aclnn(rng):
    composite = Composite("TestOp", None, [], api="aclnnTestOp")
    with pytest.raises(ParamInvalidError, match="run it with aclnnTestOp"):
        run_executor("aclnnOther", None, 0, composite)
