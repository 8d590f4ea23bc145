"""What the timeline costs: the same aclnn call with the cost model on (the default), off, and on with a trace of
up to 1,000,000 calls, alternated within one benchmark so that the machine's drift hits all three alike.

Cases: UnpermuteWithRoutingMapGrad keys 0 and 1 and the unquantised MoeTokenPermute, at tokens 4096, hidden
7168, experts 256, topK 8, bf16, ascend910b. Run with `pytest tests/benchmarks --benchmark-only`; the terminal
summary prints on/off and traced/off ratios (medians).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace

import numpy as np
import pytest

import ops
from ascend_sim.trace import tracing
from ops.permute import allocate_outputs
from ops.permute.examples import make_inputs as permute_inputs
from ops.unpermute_with_routing_map_grad.examples import make_inputs as uwrmg_inputs
from tiling import get_soc

from .conftest import OVERHEAD

TOKENS, HIDDEN, EXPERTS, TOPK = 4096, 7168, 256, 8
ON = get_soc("ascend910b")
OFF = replace(ON, cost=replace(ON.cost, enabled=False))


def _uwrmg(with_probs: bool):
    args = uwrmg_inputs(TOKENS, HIDDEN, EXPERTS, topk=TOPK, dtype="bf16", with_probs=with_probs, seed=0)
    g = args["unpermuted_tokens_grad"]
    out = np.ones((args["out_index"].size, HIDDEN), dtype=g.dtype)
    probs_grad = np.ones(args["probs"].shape, args["probs"].dtype) if with_probs else None

    def prepare(soc):
        size, ex = ops.aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(
            *args.values(), None, out, probs_grad, soc=soc)
        return size, ex
    return prepare, ops.aclnn.moe_token_unpermute_with_routing_map_grad


def _permute():
    tokens, indices = permute_inputs(TOKENS, HIDDEN, EXPERTS, topk=TOPK, dtype="bf16", seed=0)
    outs = allocate_outputs(tokens, indices, 0, -1, soc="ascend910b")
    for o in outs:
        o.fill(1)

    def prepare(soc):
        return ops.aclnn.moe_token_permute_v2_get_workspace_size(tokens, indices, 0, False, -1, *outs, soc=soc)
    return prepare, ops.aclnn.moe_token_permute_v2


CASES = {"uwrmg-key0": lambda: _uwrmg(False), "uwrmg-key1": lambda: _uwrmg(True), "permute-no-quant": _permute}


@pytest.mark.parametrize("name", list(CASES))
def test_timeline_overhead(benchmark, name):
    prepare, call = CASES[name]()
    runs = {}
    for role, soc in (("on", ON), ("off", OFF)):
        size, ex = prepare(soc)
        workspace = np.empty(size, dtype=np.uint8)
        call(workspace, size, ex)                                  # compile / warm up
        runs[role] = (workspace, size, ex)
    times: dict[str, list[float]] = {"on": [], "off": [], "traced": []}
    events = []

    def one_round():
        for role in ("off", "on", "traced"):
            workspace, size, ex = runs["on" if role == "traced" else role]
            start = time.perf_counter()
            if role == "traced":
                with tracing(max_events=1_000_000) as request:
                    call(workspace, size, ex)
                events.append(sum(r.trace.events for r in request.runs))
            else:
                call(workspace, size, ex)
            times[role].append(time.perf_counter() - start)

    benchmark.pedantic(one_round, rounds=5, iterations=1, warmup_rounds=1)
    assert runs["off"][2].report.estimate.cycles == 0 < runs["on"][2].report.estimate.cycles
    OVERHEAD[f"{name} ({TOKENS}x{HIDDEN}, K{TOPK}, bf16)"] = dict(
        {role: statistics.median(t[1:]) for role, t in times.items()}, events=events[-1])
