"""The fixed cost of small calls: what a caller pays when the work itself is almost nothing.

Cases (warm: compiled kernels, caches filled by the first call):

* the friendly MoeTokenPermute on 8 tokens x 64 hidden, topK 2 (bf16, int32 indices, ascend910b), beside the
  vectorised NumPy a user would write instead (a stable argsort of the expert ids and a row gather);
* the friendly MoeTokenUnpermute on the matching shape (16 permuted rows, probs), beside its NumPy (a row
  gather, the probs-weighted sum in float32, a cast back to bf16);
* a 48-block launch whose cores do almost nothing (block 0 writes 64 bytes; every other block only starts),
  beside np.copyto of the launch's GM bytes.

Run with `pytest tests/benchmarks/test_bench_calls.py -o addopts= --benchmark-only -n0`; the summary prints each
case's ratio to its baseline.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ascend_sim.kernel_api as asc
import ops
from ascend_sim import Kernel, UbBuffer, launch
from ascend_sim._jit import global_aicore
from ops.permute.examples import make_inputs as permute_inputs
from ops.unpermute.examples import make_inputs as unpermute_inputs
from tests.bits import assert_bits_equal
from tiling import get_soc

TOKENS, HIDDEN, EXPERTS, TOPK = 8, 64, 8, 2
BF16 = np.dtype(ml_dtypes.bfloat16)
ROUNDS = 200
LAUNCH_BLOCKS = 48


def numpy_permute(tokens: np.ndarray, indices: np.ndarray):
    """(permuted tokens (N*K, H), sorted_indices int32 (N*K,)): slots ordered by expert id, stably."""
    flat = indices.reshape(-1)
    order = np.argsort(flat, kind="stable")
    sorted_indices = np.empty(flat.size, dtype=np.int32)
    sorted_indices[order] = np.arange(flat.size, dtype=np.int32)
    return tokens[order // indices.shape[1]], sorted_indices


def numpy_unpermute(permuted: np.ndarray, sorted_indices: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """(N, H) in permuted's dtype: each token's K rows weighted by its probs, summed in float32."""
    n, k = probs.shape
    rows = permuted[sorted_indices].astype(np.float32).reshape(n, k, -1)
    return (rows * probs.astype(np.float32)[:, :, None]).sum(axis=1).astype(permuted.dtype)


def _bench(benchmark, fn, *args):
    benchmark.pedantic(fn, args=args, rounds=ROUNDS, iterations=1, warmup_rounds=10)


@pytest.fixture(scope="module")
def permute_case():
    tokens, indices = permute_inputs(TOKENS, HIDDEN, EXPERTS, topk=TOPK, dtype="bf16", seed=0)
    got = ops.moe_token_permute(tokens, indices)                   # compile / warm up
    want = numpy_permute(tokens, indices)
    assert_bits_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])
    return f"friendly permute ({TOKENS}x{HIDDEN}, K{TOPK}, bf16)", tokens, indices


@pytest.fixture(scope="module")
def unpermute_case():
    a = unpermute_inputs(TOKENS, HIDDEN, EXPERTS, TOPK, dtype="bf16", seed=0)
    args = (a["permuted_tokens"], a["sorted_indices"], a["probs"])
    got = ops.moe_token_unpermute(*args)                              # compile / warm up
    want = numpy_unpermute(*args)
    assert_bits_equal(got, want)
    return f"friendly unpermute ({TOKENS * TOPK}x{HIDDEN}, K{TOPK}, bf16)", args


def _gm_bytes(*arrays) -> int:
    return sum(a.nbytes for a in arrays)


def test_permute_friendly_call(benchmark, permute_case, bench_record):
    case, tokens, indices = permute_case
    _bench(benchmark, ops.moe_token_permute, tokens, indices)
    bench_record(case, "sim", benchmark, 2 * _gm_bytes(tokens, indices))


def test_permute_numpy(benchmark, permute_case, bench_record):
    case, tokens, indices = permute_case
    _bench(benchmark, numpy_permute, tokens, indices)
    bench_record(case, "numpy", benchmark, 2 * _gm_bytes(tokens, indices))


def test_unpermute_friendly_call(benchmark, unpermute_case, bench_record):
    case, args = unpermute_case
    _bench(benchmark, ops.moe_token_unpermute, *args)
    bench_record(case, "sim", benchmark, 2 * _gm_bytes(*args))


def test_unpermute_numpy(benchmark, unpermute_case, bench_record):
    case, args = unpermute_case
    _bench(benchmark, numpy_unpermute, *args)
    bench_record(case, "numpy", benchmark, 2 * _gm_bytes(*args))


@global_aicore
def next_to_nothing(c, out):
    """Block 0 writes 64 bytes of its UB to GM; the other blocks return at once."""
    if c.block_idx == 0:
        buf = asc.tbuf_get(c, 0, asc.ub_u8(c))
        asc.data_copy_pad(c, asc.gm_at(out, 0), buf, asc.DataCopyExtParams(1, 64, 0, 0))


@pytest.fixture(scope="module")
def launch_case():
    kernel = Kernel.single_pipe("LaunchCost", "NextToNothing", (next_to_nothing,), ("buf",))
    out = np.zeros(64, dtype=np.uint8)
    kwargs = dict(block_dim=LAUNCH_BLOCKS, plan=(UbBuffer("buf", 64),), args=(asc.GlobalTensor(out, 0, 0),),
                  chip=get_soc("ascend910b"), tiling_key=0)
    report = launch(kernel, **kwargs)                                   # compile / warm up
    assert report.block_dim == LAUNCH_BLOCKS and report.total.mte3_bytes == 64
    return f"{LAUNCH_BLOCKS}-block launch, cores idle", kernel, kwargs, report.gm_bytes


def test_launch_fixed_cost(benchmark, launch_case, bench_record):
    case, kernel, kwargs, gm_bytes = launch_case
    benchmark.pedantic(lambda: launch(kernel, **kwargs), rounds=ROUNDS, iterations=1, warmup_rounds=10)
    bench_record(case, "sim", benchmark, gm_bytes)


def test_launch_copyto_baseline(benchmark, launch_case, bench_record):
    case, _, _, gm_bytes = launch_case
    src, dst = np.ones(gm_bytes // 2, dtype=np.uint8), np.zeros(gm_bytes // 2, dtype=np.uint8)
    _bench(benchmark, np.copyto, dst, src)
    bench_record(case, "copyto", benchmark, gm_bytes)
