"""MoeTokenPermute at a DeepSeek-V3-like shape: tokens 4096, hidden 7168, experts 256, topK 8, bf16;
unquantised on ascend910b and ascend950, and MXFP8 E4M3FN (quant_mode 3) on ascend950. Run with
`pytest tests/benchmarks --benchmark-only`.

For each case: the simulator's aclnn phase two (outputs preallocated), the NumPy golden, and np.copyto
moving the same number of GM bytes (half read, half written) as the kernel does.
"""
from __future__ import annotations

import numpy as np
import pytest

import ops
from ops.permute import allocate_outputs
from ops.permute.examples import make_inputs
from ops.permute.golden import golden_v2
from tests.bits import assert_bits_equal

TOKENS, HIDDEN, EXPERTS, TOPK = 4096, 7168, 256, 8
CASES = {"no-quant-910b": ("ascend910b", -1), "no-quant-950": ("ascend950", -1), "mxfp8-e4m3fn-950": ("ascend950", 3)}


@pytest.fixture(scope="module", params=list(CASES))
def prepared(request):
    soc, quant = CASES[request.param]
    tokens, indices = make_inputs(TOKENS, HIDDEN, EXPERTS, topk=TOPK, dtype="bf16", seed=0)
    outs = allocate_outputs(tokens, indices, 0, quant, soc=soc)
    for o in outs:
        o.fill(1)                                                    # pages touched up front
    size, executor = ops.aclnn.moe_token_permute_v2_get_workspace_size(tokens, indices, 0, False, quant, *outs,
                                                                       soc=soc)
    workspace = np.empty(size, dtype=np.uint8)
    ops.aclnn.moe_token_permute_v2(workspace, size, executor)      # compile / warm up
    total = executor.report.total
    want = golden_v2(tokens, indices, 0, quant)
    for got, w in zip(outs, want):
        assert_bits_equal(got, w, "simulator vs golden")
    case = f"permute {request.param} ({TOKENS}x{HIDDEN}, E{EXPERTS}, K{TOPK}, bf16)"
    return dict(case=case, args=(tokens, indices, 0, quant), executor=executor, workspace=workspace, size=size,
                gm_bytes=total.mte2_bytes + total.mte3_bytes)


def test_simulator(benchmark, prepared, bench_record):
    p = prepared
    benchmark.pedantic(ops.aclnn.moe_token_permute_v2, args=(p["workspace"], p["size"], p["executor"]), rounds=5,
                       iterations=1, warmup_rounds=1)
    bench_record(p["case"], "sim", benchmark, p["gm_bytes"])


def test_golden(benchmark, prepared, bench_record):
    p = prepared
    benchmark.pedantic(golden_v2, args=p["args"], rounds=2, iterations=1)
    bench_record(p["case"], "golden", benchmark, p["gm_bytes"])


def test_copyto_same_bytes(benchmark, prepared, copyto_baseline):
    copyto_baseline(benchmark, prepared["case"], prepared["gm_bytes"])
