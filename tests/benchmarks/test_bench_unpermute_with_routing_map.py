"""MoeTokenUnpermuteWithRoutingMap at a DeepSeek-V3-like shape: tokens 4096, hidden 7168, experts 256, topK 8, bf16,
with probs (tilingKey 1), on ascend910b. Run with `pytest tests/benchmarks --benchmark-only`.

In the same run: the simulator's aclnn phase two (outputs preallocated), the NumPy golden, the vectorised NumPy fp32
implementation a user would write, and np.copyto moving the same number of GM bytes as the kernels. The summary line
of test_ratio_vs_numpy prints simulator / NumPy (target: the simulator at least 1.5x faster).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops.unpermute_with_routing_map as uwrm
from ops.unpermute_with_routing_map.examples import make_inputs
from ops.unpermute_with_routing_map.golden import golden
from tests.bits import assert_bits_equal

from .conftest import RESULTS, record

TOKENS, HIDDEN, EXPERTS, TOPK = 4096, 7168, 256, 8
CASE = f"unpermute_with_routing_map key1 ({TOKENS}x{HIDDEN}, E{EXPERTS}, K{TOPK}, bf16, 910b)"


def numpy_fp32(permuted_tokens, sorted_indices, routing_map, probs, padded_mode, restore_shape):
    """What a user would write: gather the K rows of every token, weight them by the masked probs, sum in fp32."""
    weights = probs[routing_map].astype(np.float32).reshape(-1, TOPK)
    rows = permuted_tokens[sorted_indices].astype(np.float32).reshape(-1, TOPK, permuted_tokens.shape[1])
    return np.einsum("tkh,tk->th", rows, weights).astype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def prepared():
    args = make_inputs(TOKENS, HIDDEN, EXPERTS, topk=TOPK, dtype="bf16", seed=0)
    outs = uwrm.allocate_outputs(*args.values())
    outs[0].fill(1)                                                      # pages touched up front
    size, executor = uwrm.get_workspace_size(*args.values(), *outs, soc="ascend910b")
    workspace = np.empty(size, dtype=np.uint8)
    uwrm.run(workspace, size, executor)                                 # compile / warm up
    total = executor.report.total
    want = golden(*args.values())
    assert_bits_equal(outs[0], want[0], "simulator vs golden")
    return dict(args=args, executor=executor, workspace=workspace, size=size,
                gm_bytes=total.mte2_bytes + total.mte3_bytes)


def test_simulator(benchmark, prepared, bench_record):
    p = prepared
    benchmark.pedantic(uwrm.run, args=(p["workspace"], p["size"], p["executor"]), rounds=5, iterations=1,
                       warmup_rounds=1)
    bench_record(CASE, "sim", benchmark, p["gm_bytes"])


def test_golden(benchmark, prepared, bench_record):
    benchmark.pedantic(golden, args=tuple(prepared["args"].values()), rounds=2, iterations=1)
    bench_record(CASE, "golden", benchmark, prepared["gm_bytes"])


def test_numpy_fp32(benchmark, prepared):
    benchmark.pedantic(numpy_fp32, args=tuple(prepared["args"].values()), rounds=3, iterations=1)
    record(CASE, "numpy", benchmark, prepared["gm_bytes"])


def test_copyto_same_bytes(benchmark, prepared, copyto_baseline):
    copyto_baseline(benchmark, CASE, prepared["gm_bytes"])


def test_ratio_vs_numpy():
    roles = RESULTS.get(CASE, {})
    if "sim" not in roles or "numpy" not in roles:
        pytest.skip("run with the benchmarks enabled")
    ratio = roles["numpy"]["median"] / roles["sim"]["median"]
    print(f"\n{CASE}: simulator {roles['sim']['median'] * 1e3:.1f} ms, NumPy fp32 "
          f"{roles['numpy']['median'] * 1e3:.1f} ms -> {ratio:.2f}x")
