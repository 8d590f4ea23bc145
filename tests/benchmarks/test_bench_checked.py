"""What checked mode costs: the same aclnn call unchecked and with check="race", alternated within one benchmark.

Cases (tokens 4096, hidden 7168, experts 256, topK 8, bf16, ascend910b): UnpermuteWithRoutingMapGrad key 0
(DMA only), MoeTokenUnpermute key 1 and MoeTokenPermuteGrad key 0 (kernel G: DMA, vector and scalar work).
The terminal summary prints checked / unchecked (medians); the target is at most 3x.
"""
from __future__ import annotations

import statistics
import time

import ml_dtypes
import numpy as np
import pytest

import ops
from ops.permute_grad.examples import make_inputs as permute_grad_inputs
from ops.unpermute.examples import make_inputs as unpermute_inputs
from ops.unpermute_with_routing_map_grad.examples import make_inputs as uwrmg_inputs

from .conftest import CHECKED

T, H, E, K = 4096, 7168, 256, 8
BF16 = np.dtype(ml_dtypes.bfloat16)


def _uwrmg():
    a = uwrmg_inputs(T, H, E, topk=K, dtype="bf16", with_probs=False, seed=0)
    out = np.ones((a["out_index"].size, H), dtype=a["unpermuted_tokens_grad"].dtype)
    return (ops.aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(*a.values(), None, out, None),
            ops.aclnn.moe_token_unpermute_with_routing_map_grad)


def _unpermute():
    a = unpermute_inputs(T, H, E, K, dtype="bf16", seed=0)
    out = np.ones((T, H), dtype=BF16)
    return (ops.aclnn.moe_token_unpermute_get_workspace_size(a["permuted_tokens"], a["sorted_indices"], a["probs"],
                                                             False, None, out), ops.aclnn.moe_token_unpermute)


def _permute_grad():
    a = permute_grad_inputs(T, H, K, experts=E, dtype="bf16", seed=0)
    out = np.ones((T, H), dtype=BF16)
    return (ops.aclnn.moe_token_permute_grad_get_workspace_size(a["permuted_output_grad"], a["sorted_indices"], K,
                                                                False, out), ops.aclnn.moe_token_permute_grad)


CASES = {"uwrmg-key0": _uwrmg, "unpermute-key1": _unpermute, "permute_grad-key0": _permute_grad}


@pytest.mark.parametrize("name", list(CASES))
def test_checked_mode_overhead(benchmark, name):
    (size, executor), call = CASES[name]()
    workspace = np.empty(size, dtype=np.uint8)
    call(workspace, size, executor)                               # compile / warm up
    times: dict[str, list[float]] = {"off": [], "race": []}

    def one_round():
        for mode in ("off", "race"):
            start = time.perf_counter()
            call(workspace, size, executor, check=None if mode == "off" else mode)
            times[mode].append(time.perf_counter() - start)

    benchmark.pedantic(one_round, rounds=5, iterations=1, warmup_rounds=1)
    assert executor.report.extra.get("checked") == 1
    CHECKED[f"{name} ({T}x{H}, K{K}, bf16)"] = {mode: statistics.median(t[1:]) for mode, t in times.items()}
