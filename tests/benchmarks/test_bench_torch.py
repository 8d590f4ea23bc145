"""What the torch ops add over the NumPy friendly calls (issue 22: at most 10 % or 50 us, whichever is larger).

Each case times the torch op (`ops.torch.npu_*`, CPU tensors, bf16 through a view) and the friendly call on the
same arrays alternately in one run, median of ROUNDS[shape] each, warm (kernels compiled by a first call), ascend910b:

* permute on 8 tokens x 64 hidden, topK 2, and on 512 x 4096, topK 8 (bf16, int32 indices);
* unpermute with probs on the matching shapes.

Skipped where torch is not installed (`pip install -e '.[torch]'`). Run with
`pytest tests/benchmarks/test_bench_torch.py -o addopts= --benchmark-only -n0`.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from tests.bits import assert_bits_equal

torch = pytest.importorskip("torch", reason="needs the [torch] extra")

import ops  # noqa: E402
import ops.torch as optorch  # noqa: E402
from ops.permute.examples import make_inputs  # noqa: E402

from .conftest import TORCH_OVERHEAD  # noqa: E402

# (tokens, hidden, experts, topK) and the timed rounds: a small call is ~0.3 ms, so it takes many rounds for a
# median that a busy machine does not move by more than a few us
SHAPES = {"8x64-K2": (8, 64, 8, 2), "512x4096-K8": (512, 4096, 64, 8)}
ROUNDS = {"8x64-K2": 600, "512x4096-K8": 30}


def _torch_view(a: np.ndarray) -> "torch.Tensor":
    """A torch tensor sharing a's memory (bf16 through its 16-bit pattern)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _alternate(torch_call, numpy_call, rounds: int) -> tuple[float, float]:
    """(median s of torch_call, median s of numpy_call), timed alternately after one warm-up call each."""
    torch_call(), numpy_call()
    t_torch, t_numpy = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        torch_call()
        t_torch.append(time.perf_counter() - start)
        start = time.perf_counter()
        numpy_call()
        t_numpy.append(time.perf_counter() - start)
    return float(np.median(t_torch)), float(np.median(t_numpy))


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_permute_and_unpermute_overhead(benchmark, shape):
    n, h, e, k = SHAPES[shape]
    tokens, indices = make_inputs(n, h, e, topk=k, dtype="bf16", seed=0)
    t_tokens, t_indices = _torch_view(tokens), _torch_view(indices)
    permuted, sorted_indices, _ = ops.moe_token_permute(tokens, indices)
    got, got_sorted = optorch.npu_moe_token_permute(t_tokens, t_indices)
    assert_bits_equal(got.view(torch.int16).numpy(), permuted.view(np.int16))    # same op on both sides
    assert np.array_equal(got_sorted.numpy(), sorted_indices)
    probs = np.random.default_rng(1).random((n, k), dtype=np.float32).astype(tokens.dtype)
    t_perm, t_sorted, t_probs = _torch_view(permuted), _torch_view(sorted_indices), _torch_view(probs)

    cases = {
        "permute": (lambda: optorch.npu_moe_token_permute(t_tokens, t_indices),
                    lambda: ops.moe_token_permute(tokens, indices)),
        "unpermute": (lambda: optorch.npu_moe_token_unpermute(t_perm, t_sorted, t_probs),
                      lambda: ops.moe_token_unpermute(permuted, sorted_indices, probs)),
    }
    for name, (torch_call, numpy_call) in cases.items():
        t_torch, t_numpy = _alternate(torch_call, numpy_call, ROUNDS[shape])
        TORCH_OVERHEAD[f"{name} {shape} bf16"] = dict(torch=t_torch, numpy=t_numpy)
    benchmark.pedantic(cases["permute"][0], rounds=5, iterations=1, warmup_rounds=1)
