"""MoeTokenUnpermuteWithRoutingMapGrad at a DeepSeek-V3-like shape: tokens 4096, hidden 7168, experts 256,
topK 8, bf16, on ascend910b. Run with `pytest tests/benchmarks --benchmark-only`.

For each tilingKey: the simulator's aclnn phase two (outputs preallocated), the NumPy golden, and
np.copyto moving the same number of GM bytes (half read, half written) as the kernel does.
"""
from __future__ import annotations

import numpy as np
import pytest

import ops
from ops.unpermute_with_routing_map_grad.examples import make_inputs
from ops.unpermute_with_routing_map_grad.golden import golden
from tests.bits import assert_bits_equal

TOKENS, HIDDEN, EXPERTS, TOPK = 4096, 7168, 256, 8
CASES = {"key0-no-probs": False, "key1-probs": True}


@pytest.fixture(scope="module", params=list(CASES))
def prepared(request):
    with_probs = CASES[request.param]
    args = make_inputs(TOKENS, HIDDEN, EXPERTS, topk=TOPK, dtype="bf16", with_probs=with_probs, seed=0)
    g = args["unpermuted_tokens_grad"]
    out = np.ones((args["out_index"].size, HIDDEN), dtype=g.dtype)          # pages touched up front
    probs_grad = np.ones(args["probs"].shape, args["probs"].dtype) if with_probs else None
    size, executor = ops.aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(
        *args.values(), None, out, probs_grad, soc="ascend910b")
    workspace = np.empty(size, dtype=np.uint8)
    ops.aclnn.moe_token_unpermute_with_routing_map_grad(workspace, size, executor)   # compile / warm up
    total = executor.report.total
    gm_bytes = total.mte2_bytes + total.mte3_bytes
    case = f"unpermute_with_routing_map_grad {request.param} ({TOKENS}x{HIDDEN}, E{EXPERTS}, K{TOPK}, bf16)"
    want = golden(*args.values(), hidden_piece=executor.tiling.fields["hidden_size_align"])
    assert_bits_equal(out, want[0], "simulator vs golden")
    return dict(case=case, args=args, executor=executor, workspace=workspace, size=size, gm_bytes=gm_bytes)


def test_simulator(benchmark, prepared, bench_record):
    p = prepared
    benchmark.pedantic(ops.aclnn.moe_token_unpermute_with_routing_map_grad,
                       args=(p["workspace"], p["size"], p["executor"]), rounds=5, iterations=1, warmup_rounds=1)
    bench_record(p["case"], "sim", benchmark, p["gm_bytes"])


def test_golden(benchmark, prepared, bench_record):
    p = prepared
    piece = p["executor"].tiling.fields["hidden_size_align"]
    benchmark.pedantic(golden, args=tuple(p["args"].values()), kwargs=dict(hidden_piece=piece), rounds=2,
                       iterations=1)
    bench_record(p["case"], "golden", benchmark, p["gm_bytes"])


def test_copyto_same_bytes(benchmark, prepared, copyto_baseline):
    copyto_baseline(benchmark, prepared["case"], prepared["gm_bytes"])
