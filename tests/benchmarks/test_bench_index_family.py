"""The index family at a DeepSeek-V3-like shape: tokens 4096, hidden 7168, experts 256, topK 8, bf16, ascend910b.
Run with `pytest tests/benchmarks -o addopts= --benchmark-only`.

Per operator, in the same run: the simulator's aclnn phase two (outputs preallocated), the NumPy golden, the
vectorised NumPy fp32 code a user would write instead, and np.copyto of the operator's output bytes (for
MoeTokenPermuteGrad: of the gradient bytes it reads; copyto moves them once, read and written). Targets
(issue 8): MoeTokenUnpermute and MoeTokenUnpermuteGrad with probs at least 1.5x faster than the NumPy fp32
code; MoeTokenPermuteGrad's aclnn call at least 0.5x the time of np.copyto of the gradient bytes it reads.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops
from ops.permute_grad.examples import make_inputs as permute_grad_inputs
from ops.permute_grad.golden import golden as permute_grad_golden
from ops.unpermute.examples import make_inputs as unpermute_inputs
from ops.unpermute.golden import golden as unpermute_golden
from ops.unpermute_grad.examples import make_inputs as unpermute_grad_inputs
from ops.unpermute_grad.golden import golden as unpermute_grad_golden
from tests.bits import assert_bits_equal

from .conftest import RESULTS, copyto_same_bytes, record

TOKENS, HIDDEN, EXPERTS, TOPK = 4096, 7168, 256, 8
SHAPE = f"{TOKENS}x{HIDDEN}, K{TOPK}, bf16, 910b"
BF16 = np.dtype(ml_dtypes.bfloat16)


def numpy_unpermute(permuted_tokens, sorted_indices, probs):
    """Gather every token's K rows, weight them by its probs, sum in fp32."""
    rows = permuted_tokens[sorted_indices].astype(np.float32).reshape(-1, TOPK, permuted_tokens.shape[1])
    return np.einsum("tkh,tk->th", rows, probs.astype(np.float32)).astype(permuted_tokens.dtype)


def numpy_permute_grad(permuted_output_grad, sorted_indices):
    """Gather every token's K gradient rows and sum them in fp32."""
    rows = permuted_output_grad[sorted_indices].astype(np.float32)
    return rows.reshape(-1, TOPK, rows.shape[1]).sum(axis=1).astype(permuted_output_grad.dtype)


def numpy_unpermute_grad(permuted_tokens, unpermuted_tokens_grad, sorted_indices, probs):
    """d permuted rows = the token's gradient times its prob, scattered to the slots' rows; d probs = the dot of
    each slot's permuted row with the token's gradient, in fp32."""
    g = unpermuted_tokens_grad.astype(np.float32)
    p32 = probs.astype(np.float32)
    d_rows = np.empty((sorted_indices.size, g.shape[1]), dtype=unpermuted_tokens_grad.dtype)
    d_rows[sorted_indices] = (g[:, None, :] * p32[:, :, None]).reshape(-1, g.shape[1])
    rows = permuted_tokens[sorted_indices].astype(np.float32).reshape(-1, TOPK, g.shape[1])
    d_probs = np.einsum("tkh,th->tk", rows, g).astype(probs.dtype)
    return d_rows, d_probs


class Case:
    """One operator's prepared aclnn call and its bookkeeping."""

    def __init__(self, name, get_workspace_size, run, args, outs):
        self.name, self.run_fn, self.args, self.outs = name, run, args, outs
        self.size, self.executor = get_workspace_size(*args, *outs, soc="ascend910b")
        self.workspace = np.empty(self.size, dtype=np.uint8)
        self.run()                                                        # compile / warm up
        t = self.executor.report.total
        self.gm_bytes = t.mte2_bytes + t.mte3_bytes

    def run(self):
        self.run_fn(self.workspace, self.size, self.executor)


@pytest.fixture(scope="module")
def unpermute():
    a = unpermute_inputs(TOKENS, HIDDEN, EXPERTS, TOPK, dtype="bf16", seed=0)
    inputs = (a["permuted_tokens"], a["sorted_indices"], a["probs"])
    out = np.ones((TOKENS, HIDDEN), dtype=BF16)                                # pages touched up front
    case = Case(f"unpermute key1 probs ({SHAPE})", ops.aclnn.moe_token_unpermute_get_workspace_size,
                ops.aclnn.moe_token_unpermute, (*inputs, False, None), (out,))
    assert_bits_equal(out, unpermute_golden(*inputs), case.name)
    case.inputs = inputs
    return case


@pytest.fixture(scope="module")
def permute_grad():
    a = permute_grad_inputs(TOKENS, HIDDEN, TOPK, experts=EXPERTS, dtype="bf16", seed=0)
    inputs = (a["permuted_output_grad"], a["sorted_indices"])
    out = np.ones((TOKENS, HIDDEN), dtype=BF16)
    case = Case(f"permute_grad key0 ({SHAPE})", ops.aclnn.moe_token_permute_grad_get_workspace_size,
                ops.aclnn.moe_token_permute_grad, (*inputs, TOPK, False), (out,))
    assert_bits_equal(out, permute_grad_golden(*inputs, TOPK), case.name)
    case.inputs = inputs
    return case


@pytest.fixture(scope="module")
def unpermute_grad():
    a = unpermute_grad_inputs(TOKENS, HIDDEN, topk=TOPK, dtype="bf16", seed=0)
    inputs = (a["permuted_tokens"], a["unpermuted_tokens_grad"], a["sorted_indices"], a["probs"])
    outs = (np.ones((TOKENS * TOPK, HIDDEN), dtype=BF16), np.ones((TOKENS, TOPK), dtype=a["probs"].dtype))
    case = Case(f"unpermute_grad key1 probs ({SHAPE})", ops.aclnn.moe_token_unpermute_grad_get_workspace_size,
                ops.aclnn.moe_token_unpermute_grad, (*inputs, False, None), outs)
    piece = case.executor.tiling.fields["hidden_size_align"]
    want = unpermute_grad_golden(*inputs, hidden_piece=piece)
    for i in range(2):
        assert_bits_equal(outs[i], want[i], f"{case.name} output {i}")
    case.inputs, case.piece = inputs, piece
    return case


def test_unpermute_simulator(benchmark, unpermute):
    benchmark.pedantic(unpermute.run, rounds=5, iterations=1, warmup_rounds=1)
    record(unpermute.name, "sim", benchmark, unpermute.gm_bytes)


def test_unpermute_golden(benchmark, unpermute):
    benchmark.pedantic(unpermute_golden, args=unpermute.inputs, rounds=2, iterations=1)
    record(unpermute.name, "golden", benchmark, unpermute.gm_bytes)


def test_unpermute_numpy_fp32(benchmark, unpermute):
    benchmark.pedantic(numpy_unpermute, args=unpermute.inputs, rounds=3, iterations=1)
    record(unpermute.name, "numpy", benchmark, unpermute.gm_bytes)


def test_unpermute_copyto_of_its_output(benchmark, unpermute):
    copyto_same_bytes(benchmark, unpermute.name, 2 * sum(o.nbytes for o in unpermute.outs))


def test_permute_grad_simulator(benchmark, permute_grad):
    benchmark.pedantic(permute_grad.run, rounds=5, iterations=1, warmup_rounds=1)
    record(permute_grad.name, "sim", benchmark, permute_grad.gm_bytes)


def test_permute_grad_golden(benchmark, permute_grad):
    benchmark.pedantic(permute_grad_golden, args=(*permute_grad.inputs, TOPK), rounds=2, iterations=1)
    record(permute_grad.name, "golden", benchmark, permute_grad.gm_bytes)


def test_permute_grad_numpy_fp32(benchmark, permute_grad):
    benchmark.pedantic(numpy_permute_grad, args=permute_grad.inputs, rounds=3, iterations=1)
    record(permute_grad.name, "numpy", benchmark, permute_grad.gm_bytes)


def test_permute_grad_copyto_of_the_gradient_it_reads(benchmark, permute_grad):
    # the yardstick: np.copyto of the permuted-gradient bytes (read once, written once by copyto)
    copyto_same_bytes(benchmark, permute_grad.name, 2 * permute_grad.inputs[0].nbytes)


def test_unpermute_grad_simulator(benchmark, unpermute_grad):
    benchmark.pedantic(unpermute_grad.run, rounds=5, iterations=1, warmup_rounds=1)
    record(unpermute_grad.name, "sim", benchmark, unpermute_grad.gm_bytes)


def test_unpermute_grad_golden(benchmark, unpermute_grad):
    benchmark.pedantic(unpermute_grad_golden, args=unpermute_grad.inputs,
                       kwargs=dict(hidden_piece=unpermute_grad.piece),
                       rounds=1, iterations=1)
    record(unpermute_grad.name, "golden", benchmark, unpermute_grad.gm_bytes)


def test_unpermute_grad_numpy_fp32(benchmark, unpermute_grad):
    benchmark.pedantic(numpy_unpermute_grad, args=unpermute_grad.inputs, rounds=3, iterations=1)
    record(unpermute_grad.name, "numpy", benchmark, unpermute_grad.gm_bytes)


def test_unpermute_grad_copyto_of_its_outputs(benchmark, unpermute_grad):
    copyto_same_bytes(benchmark, unpermute_grad.name, 2 * sum(o.nbytes for o in unpermute_grad.outs))


def test_ratios():
    lines = []
    for case, roles in RESULTS.items():
        if "sim" not in roles:
            continue
        sim = roles["sim"]["median"]
        parts = [f"{case}: simulator {sim * 1e3:.1f} ms"]
        for role in ("numpy", "copyto"):
            if role in roles:
                parts.append(f"{role} / simulator {roles[role]['median'] / sim:.2f}x")
        lines.append(", ".join(parts))
    if not lines:
        pytest.skip("run with the benchmarks enabled")
    print("\n" + "\n".join(lines))
