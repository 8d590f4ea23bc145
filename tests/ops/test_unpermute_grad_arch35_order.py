"""MoeTokenUnpermuteGrad on Ascend 950: the probs gradient's summation order (arch35 CalcGradScaleVF) at row
lengths on and around the powers of two, where the head / tail split of the row changes.

The 950 path runs l0op::MoeFinalizeRoutingV2Grad's arch35 kernel (ops.l0.moe_finalize_routing_v2_grad, 20011).
The reference here is a scalar loop written from that kernel's CalcGradScaleVF, one fp32 addition at a time; it
shares no code with the kernel nor with ops.unpermute_grad.golden, and both are checked against it. A row of
length L > 64, C = ceil(L / 64) chunks, is summed as:

* Q = the largest power of two <= L (so L = Q exactly when L is a power of two: the whole row is the head
  and there is no tail);
* every element of the first C - Q / 64 head chunks takes one addition: of tail element Q + i where the tail
  has one, else of +0.0 (the tail register's masked lanes are zeroed); the other head chunks stay as they are;
* each 64-element chunk of the head is summed by a 64-lane pairwise tree ((x0 + x1) + (x2 + x3)) + ...;
* while more than 64 chunk sums remain, the second half of them is added element-wise onto the first half;
* the (at most 64) remaining sums, padded with +0.0 (ReduceSum's inactive lanes), go through one more tree.

L <= 64 is a single tree over the row padded with +0.0. The pairwise tree is the assumed lane order of the
in-register ReduceSum (not published); tests/ops/l0/test_moe_finalize_routing_v2_grad.py holds the same
assumption in LANE_TREE.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ops.unpermute_grad import moe_token_unpermute_grad
from ops.unpermute_grad.golden import reduce_sum_rows_arch35
from tests.bits import assert_bits_equal

F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)
LANES = 64
PAD = F32(0.0)           # an inactive lane of ReduceSum


def _tree64(values: list) -> np.float32:
    """64-lane pairwise tree over `values` (at most 64 fp32 scalars), missing lanes +0.0."""
    lanes = list(values) + [PAD] * (LANES - len(values))
    while len(lanes) > 1:
        lanes = [F32(lanes[2 * i] + lanes[2 * i + 1]) for i in range(len(lanes) // 2)]
    return lanes[0]


def arch35_row_sum(row: np.ndarray, head: int | None = None) -> np.float32:
    """Sum of one fp32 row (L,) in the arch35 order. `head` overrides Q (only to show that the test data tell
    a wrong head length apart: a head of Q / 2 is what a `<` in place of `<=` in the power-of-two search
    would give for L = Q)."""
    x = [F32(v) for v in row]
    length = len(x)
    if length <= LANES:
        return _tree64(x)
    q = head if head is not None else 2 ** (length.bit_length() - 1)
    h = x[:q]
    paired = (-(-length // LANES) - q // LANES) * LANES
    for i in range(paired):
        h[i] = F32(h[i] + (x[q + i] if q + i < length else PAD))
    sums = [_tree64(h[c * LANES:(c + 1) * LANES]) for c in range(q // LANES)]
    while len(sums) > LANES:
        half = len(sums) // 2
        sums = [F32(sums[i] + sums[half + i]) for i in range(half)]
    return _tree64(sums)


def _wide_range_row(rng, length: int) -> np.ndarray:
    """Values over many binades with mixed signs: almost any change of the addition order moves the fp32 sum."""
    mags = np.exp2(rng.integers(-12, 12, length)).astype(F32)
    return (rng.uniform(0.5, 1.0, length).astype(F32) * mags * rng.choice(F32([-1, 1]), length)).astype(F32)


def _case(length: int, dtype, seed: int):
    """3 tokens, topK 2 (6 probs gradients), unit gradient rows: each probs gradient is the arch35 sum of one
    permuted row (products x * 1.0 are exact). Indices reverse the slots so that slot j reads row 5 - j."""
    rng = np.random.default_rng(seed)
    rows = np.stack([_wide_range_row(rng, length) for _ in range(6)]).astype(dtype)
    return dict(permuted_tokens=rows, unpermuted_tokens_grad=np.ones((3, length), dtype),
                sorted_indices=np.arange(5, -1, -1, dtype=np.int32), probs=np.full((3, 2), 0.5, F32))


# exact powers of two from 64 (the single-register limit) to 512, with both neighbours; 8192 is the first head
# with more than 64 chunk sums (the halving fold runs), 4096 / 8191 the lengths just below it
HIDDEN = (63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 4096, 8191, 8192, 8193)


def _dtype_for(length: int):
    return F32 if length <= 10544 else BF16      # fp32 rows above 10544 take the cut-H kernel (not simulated)


@pytest.mark.parametrize("hidden", HIDDEN, ids=[f"h{h}" for h in HIDDEN])
def test_950_probs_grad_follows_the_arch35_order(hidden):
    dtype = _dtype_for(hidden)
    args = _case(hidden, dtype, seed=hidden)
    rows = args["permuted_tokens"].astype(F32)
    want = np.array([arch35_row_sum(rows[5 - j]) for j in range(6)], F32).reshape(3, 2)
    if hidden > LANES and hidden & (hidden - 1) == 0:
        # the data must tell the right head from the half-length one, or the test could not catch that slip
        wrong = np.array([arch35_row_sum(rows[5 - j], head=hidden // 2) for j in range(6)], F32)
        assert np.count_nonzero(wrong.view(np.uint32) != want.reshape(-1).view(np.uint32)) >= 2
    _, probs_grad = moe_token_unpermute_grad(args["permuted_tokens"], args["unpermuted_tokens_grad"],
                                             args["sorted_indices"], args["probs"], soc="ascend950")
    assert probs_grad.dtype == F32
    assert_bits_equal(probs_grad, want, f"hidden {hidden}")


@pytest.mark.parametrize("hidden", HIDDEN, ids=[f"h{h}" for h in HIDDEN])
def test_the_golden_module_agrees_with_the_scalar_reference(hidden):
    """ops.unpermute_grad.golden (vectorised) against the scalar loop, so that the operator tests that use it
    check the same order."""
    rows = _case(hidden, F32, seed=hidden + 1)["permuted_tokens"]
    want = np.array([arch35_row_sum(r) for r in rows], F32)
    assert_bits_equal(reduce_sum_rows_arch35(rows), want)
