"""MoeTokenPermuteWithRoutingMap (non-pad) at a DeepSeek-V3-like shape: tokens 4096, hidden 7168, experts 256,
topK 8, bf16, ascend910b. Run with `pytest tests/benchmarks --benchmark-only`.

Cases: the preallocated aclnn phase two, the golden, a vectorised NumPy implementation, and np.copyto of the
output bytes. Target: the aclnn call at most 2x the time of np.copyto of its output bytes."""
from __future__ import annotations

import numpy as np
import pytest

from ops.permute_with_routing_map import allocate_outputs, get_workspace_size, run
from ops.permute_with_routing_map.examples import make_inputs
from ops.permute_with_routing_map.golden import permute_with_routing_map_golden
from tests.bits import assert_bits_equal

TOKENS, HIDDEN, EXPERTS, TOPK = 4096, 7168, 256, 8
CASE = f"permute_with_routing_map ({TOKENS}x{HIDDEN}, E{EXPERTS}, K{TOPK}, bf16, 910b)"


def numpy_permute(tokens, routing_map, probs):
    """Vectorised reference: expert-major token list, its stable argsort, a row gather."""
    experts, token_ids = np.nonzero(routing_map.T)
    sorted_indices = np.argsort(token_ids, kind="stable").astype(np.int32)
    return tokens[token_ids], probs[token_ids, experts], np.argsort(sorted_indices, kind="stable").astype(np.int32)


@pytest.fixture(scope="module")
def prepared():
    a = make_inputs(TOKENS, HIDDEN, EXPERTS, topk=TOPK, dtype="bf16", seed=0)
    outs = allocate_outputs(a["tokens"], a["routing_map"], a["probs"], a["num_out_tokens"])
    for o in outs:
        o.fill(1)
    size, ex = get_workspace_size(a["tokens"], a["routing_map"], a["probs"], a["num_out_tokens"], False, *outs)
    ws = np.empty(size, np.uint8)
    run(ws, size, ex)
    gt, gp, gs, _ = permute_with_routing_map_golden(a["tokens"], a["routing_map"], a["probs"], a["num_out_tokens"])
    assert np.array_equal(outs[2], gs)
    assert_bits_equal(outs[0], gt)
    out_bytes = sum(o.nbytes for o in outs)
    return dict(a=a, ex=ex, ws=ws, size=size, gm_bytes=2 * out_bytes)


def test_simulator(benchmark, prepared, bench_record):
    p = prepared
    benchmark.pedantic(run, args=(p["ws"], p["size"], p["ex"]), rounds=5, iterations=1, warmup_rounds=1)
    bench_record(CASE, "sim", benchmark, p["gm_bytes"])


def test_golden(benchmark, prepared, bench_record):
    a = prepared["a"]
    benchmark.pedantic(permute_with_routing_map_golden, args=(a["tokens"], a["routing_map"], a["probs"],
                                                              a["num_out_tokens"]), rounds=2, iterations=1)
    bench_record(CASE, "golden", benchmark, prepared["gm_bytes"])


def test_numpy(benchmark, prepared, bench_record):
    a = prepared["a"]
    benchmark.pedantic(numpy_permute, args=(a["tokens"], a["routing_map"], a["probs"]), rounds=2, iterations=1)
    bench_record(CASE, "numpy", benchmark, prepared["gm_bytes"])


def test_copyto_same_bytes(benchmark, prepared, copyto_baseline):
    copyto_baseline(benchmark, CASE, prepared["gm_bytes"])
