"""MoeTokenUnpermuteWithRoutingMapGrad at the thresholds of ReduceSumFunc, the fp32 row sum behind every
probs gradient.

ReduceSumFunc (@ 25fb6b92890d UWRM-grad base) picks its pairwise tree by the row length L with strict tests:
L > 4096: fold halves (32-byte aligned) down to 8192, fold onto 4096, BlockReduceSum 4096 -> 512 -> 64 -> 8,
WholeReduceSum 8 -> 1; L > 512: fold to 1024, onto 512, BlockReduceSum -> 64 -> 8, WholeReduceSum;
L > 64: fold to 128, onto 64, BlockReduceSum -> 8, WholeReduceSum; else WholeReduceSum of L lanes.

Both reducing kernels run it once per slot over the slot's hidden piece: keys 1 / 101 (no dropAndPad) and
11 / 111 (dropAndPad), which then also run it over the per-piece partial sums (length = piece count). With
one hidden piece (the tiling's hiddenSizeAlign >= H, checked in every case) the reduced length is H.
Lengths: 63 64 65, 511 512 513, 4095 4096 4097 as H; 63 64 65, 511 512 513 as piece counts.

Three kinds of check:
* random inputs, bit-exact against the independent NumPy golden (which models the same tree and
  thresholds); fp32 probs gradients see any change of summation order, bf16 ones rarely do;
* order-revealing inputs whose probs gradient is worked out by hand: +B and -B = +-2^26 at the first
  element of two blocks half a row apart, each followed by 5. Folding halves first cancels +-B exactly and
  gives 5 + 5 = 10; summing 8-element blocks first rounds B + 5 to B + 8 and -B + 5 to -(B - 4) (fp32 has
  8 / 4 between neighbours there), giving 12. So a row reduced in the fold-first tier reads 10, and one
  reduced block-first reads 12 -- in bf16 too;
* at L = 64 both tiers add the same pairs in the same order (a 64-lane tree is the tree of its eight block
  trees), so only the instruction stream shows the threshold: the vector instruction count of a launch,
  compared across lengths, against the per-call counts worked out by hand.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops
from ops.unpermute_with_routing_map_grad.examples import make_inputs
from ops.unpermute_with_routing_map_grad.golden import golden
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling import moe_token_unpermute_with_routing_map_grad as tiling_uwrm_grad

aclnn = ops.aclnn
BF16, F32 = ml_dtypes.bfloat16, np.float32

LENGTHS = (63, 64, 65, 511, 512, 513, 4095, 4096, 4097)
MODES = {  # id: drop_and_pad (keys 1 / 101 without, 11 / 111 with)
    "nopad-key1": False,
    "pad-key11": True,
}
DTYPES = {"bf16": (BF16, BF16), "bf16-fp32probs": (BF16, F32), "fp32": (F32, F32)}
PROFILES = ("ascend910b", "ascend950")
TOKENS, EXPERTS, TOPK, CAPACITY = 16, 4, 2, 4   # 32 slots without dropAndPad, 16 with


def _inputs(length, mode, dt, seed):
    g_dt, p_dt = DTYPES[dt]
    return make_inputs(TOKENS, length, EXPERTS, topk=TOPK, capacity=CAPACITY, dtype=g_dt, probs_dtype=p_dt,
                       drop_and_pad=MODES[mode], with_probs=True, seed=seed)


def _one_piece(args, soc, length):
    """The tiling's hidden split must leave one piece of exactly `length` elements (what is reduced)."""
    f = tiling_uwrm_grad(*args.values(), soc=soc).fields
    assert (f["hidden_size_loop_times"], f["hidden_size_tail"]) == (1, length), f
    assert f["hidden_size_align"] >= length
    return f["hidden_size_align"]


def _run_and_compare(args, soc, piece, where):
    grad, probs_grad = ops.moe_token_unpermute_with_routing_map_grad(*args.values(), soc=soc)
    want_grad, want_probs_grad = golden(*args.values(), hidden_piece=piece)
    assert_bits_equal(grad, want_grad, f"{where}: permuted_tokens_grad")
    assert_bits_equal(probs_grad, want_probs_grad, f"{where}: probs_grad")
    return grad, probs_grad


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("length", LENGTHS, ids=lambda n: f"H{n}")
def test_reduce_sum_thresholds_random_rows_match_golden(length, mode, dt, profile):
    args = _inputs(length, mode, dt, seed=length)
    soc = get_soc(profile)
    piece = _one_piece(args, soc, length)
    _run_and_compare(args, soc, piece, f"H {length} {mode} {dt} {profile}")


B = 2.0 ** 26
SMALL = 5.0
FOLD_FIRST, BLOCKS_FIRST = 10.0, 12.0   # 5 + 5 after +-B cancel; (B + 8) - (B - 4)
# the reduced length -> (where -B sits = half the tier threshold, expected probs gradient):
#   <= 64 (63, 64): one 64-lane tree, lanes (0, 1) and (32, 33) pair first -> blocks first
#   65: fold lane 64 (zero) onto lane 0, then the 64-lane tree -> blocks first
#   511, 512: fold halves at 256 first (AlignUp(ceil(511 / 2), 8) = 256): +-B cancel -> 10
#   513: > 512 tier: fold lane 512 (zero) onto lane 0, then 8-element blocks -> 12
#   4095, 4096: fold halves at 2048 first (AlignUp(2048, 8)) -> 10
#   4097: > 4096 tier: fold lane 4096 onto lane 0, then blocks -> 12
ORDER_CASES = {
    63: (32, BLOCKS_FIRST), 64: (32, BLOCKS_FIRST), 65: (32, BLOCKS_FIRST),
    511: (256, FOLD_FIRST), 512: (256, FOLD_FIRST), 513: (256, BLOCKS_FIRST),
    4095: (2048, FOLD_FIRST), 4096: (2048, FOLD_FIRST), 4097: (2048, BLOCKS_FIRST),
}


def _order_revealing_row(length, minus_at, dtype):
    row = np.zeros(length, dtype=np.float32)
    row[[0, 1, minus_at, minus_at + 1]] = (B, SMALL, -B, SMALL)
    return row.astype(dtype)


def _expected_probs_grad(args, value):
    """Every routed (token, expert) pair is one slot whose gradient is `value`; the rest stay 0."""
    rm = np.asarray(args["routing_map"]) != 0
    return np.where(rm, np.float32(value), np.float32(0)).astype(args["probs"].dtype)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("length", LENGTHS, ids=lambda n: f"H{n}")
def test_reduce_sum_thresholds_pick_the_tree_order(length, mode, dt, profile):
    """G = 1 and every permuted row is the order-revealing row: each probs gradient is that row's sum."""
    args = _inputs(length, mode, dt, seed=7)
    g_dt = DTYPES[dt][0]
    minus_at, value = ORDER_CASES[length]
    args["unpermuted_tokens_grad"] = np.ones_like(args["unpermuted_tokens_grad"])
    rows = args["permuted_tokens"].shape[0]
    args["permuted_tokens"] = np.tile(_order_revealing_row(length, minus_at, g_dt), (rows, 1))
    soc = get_soc(profile)
    piece = _one_piece(args, soc, length)
    _, probs_grad = _run_and_compare(args, soc, piece, f"H {length} {mode} {dt} {profile}")
    want = _expected_probs_grad(args, value)
    assert_bits_equal(probs_grad, want, f"H {length}: probs gradient, want {value} on routed pairs")


# --- the piece-count reduction of keys 11 / 111: ReduceSumFunc over hiddenSizeLoopTimes partial sums ------------
# ub_size 4096 (tiling UB 3840): oneLoopMax = (3840 - 32 - 2048) / (2 * (8 + tokDt)) = 1760 / 20 = 88 (bf16)
# -> pieces of AlignDown(88, 16) = 80; fp32: 1760 / 24 = 73 -> AlignDown(73, 8) = 72. H = pieces * piece length.
# The plan fits: bf16 2 * 320 + 2 * 320 + AlignUp(513, 8) * 4 + 2 * 160 + 32 = 3712 <= 4096.
PIECE_LEN = {"bf16": 80, "bf16-fp32probs": 80, "fp32": 72}
PIECE_COUNTS = (63, 64, 65, 511, 512, 513)
PIECE_SOC = dict(ub_size=4096, aiv_num=2)


def _pad_inputs_in_pieces(pieces, dt, seed):
    g_dt, p_dt = DTYPES[dt]
    hidden = pieces * PIECE_LEN[dt]
    args = make_inputs(4, hidden, 2, capacity=2, dtype=g_dt, probs_dtype=p_dt, drop_and_pad=True, seed=seed)
    return args, hidden


def _check_pieces(args, soc, pieces, piece_len):
    f = tiling_uwrm_grad(*args.values(), soc=soc).fields
    assert (f["hidden_size_align"], f["hidden_size_loop_times"], f["hidden_size_tail"]) == \
        (piece_len, pieces, piece_len), f


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("pieces", PIECE_COUNTS, ids=lambda n: f"{n}pieces")
def test_piece_count_thresholds_random_rows_match_golden(pieces, dt, profile):
    args, _ = _pad_inputs_in_pieces(pieces, dt, seed=pieces)
    soc = get_soc(profile, **PIECE_SOC)
    _check_pieces(args, soc, pieces, PIECE_LEN[dt])
    _run_and_compare(args, soc, PIECE_LEN[dt], f"{pieces} pieces {dt} {profile}")


# partial sums get the order-revealing pattern: piece 0 -> B, 1 -> 5, h -> -B, h + 1 -> 5 (each piece is one
# non-zero element and zeros, so its own sum is exact); the tiers and expected values are those of rows above
PIECE_ORDER_CASES = {63: (32, BLOCKS_FIRST), 64: (32, BLOCKS_FIRST), 65: (32, BLOCKS_FIRST),
                     511: (256, FOLD_FIRST), 512: (256, FOLD_FIRST), 513: (256, BLOCKS_FIRST)}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("pieces", PIECE_COUNTS, ids=lambda n: f"{n}pieces")
def test_piece_count_thresholds_pick_the_tree_order(pieces, dt, profile):
    args, hidden = _pad_inputs_in_pieces(pieces, dt, seed=8)
    g_dt = DTYPES[dt][0]
    piece_len = PIECE_LEN[dt]
    minus_at, value = PIECE_ORDER_CASES[pieces]
    row = np.zeros(hidden, dtype=np.float32)
    row[[0, piece_len, minus_at * piece_len, (minus_at + 1) * piece_len]] = (B, SMALL, -B, SMALL)
    args["unpermuted_tokens_grad"] = np.ones_like(args["unpermuted_tokens_grad"])
    args["permuted_tokens"] = np.tile(row.astype(g_dt), (args["permuted_tokens"].shape[0], 1))
    soc = get_soc(profile, **PIECE_SOC)
    _check_pieces(args, soc, pieces, piece_len)
    _, probs_grad = _run_and_compare(args, soc, piece_len, f"{pieces} pieces {dt} {profile}")
    assert_bits_equal(probs_grad, _expected_probs_grad(args, value), f"{pieces} pieces: probs gradient, want {value}")


# --- the instruction stream: vector instructions one ReduceSumFunc call issues, by length -------------------------
# fold steps while total > 2T (T = tier target), one final fold onto T (an Add, issued even with 0 elements),
# then BlockReduceSums and one WholeReduceSum:
REDUCE_INSTR = {
    63: 1,       # WholeReduceSum of 63 lanes
    64: 1,       # WholeReduceSum of 64 lanes (not > 64)
    65: 3,       # final Add (1 element: lane 64 onto lane 0) + BlockReduceSum 64 -> 8 + WholeReduceSum
    511: 5,      # folds 511 -> 256 -> 128, final Add, BlockReduceSum, WholeReduceSum
    512: 5,      # folds 512 -> 256 -> 128 (not > 512)
    513: 4,      # final Add (lane 512), BlockReduceSum 512 -> 64 -> 8, WholeReduceSum
    4095: 6,     # folds 4095 -> 2048 -> 1024, final Add, two BlockReduceSums, WholeReduceSum
    4096: 6,     # folds 4096 -> 2048 -> 1024 (not > 4096)
    4097: 5,     # final Add (lane 4096), BlockReduceSum 4096 -> 512 -> 64 -> 8, WholeReduceSum
}


def _vector_instructions(args, soc):
    g = args["unpermuted_tokens_grad"]
    out = np.zeros((args["out_index"].size, g.shape[1]), dtype=g.dtype)
    pg = np.zeros(args["probs"].shape, dtype=args["probs"].dtype)
    size, executor = aclnn.moe_token_unpermute_with_routing_map_grad_get_workspace_size(*args.values(), None, out,
                                                                                        pg, soc=soc)
    aclnn.moe_token_unpermute_with_routing_map_grad(np.empty(size, np.uint8), size, executor)
    return executor.report.total.vec_instr


@pytest.mark.parametrize("mode", MODES)
def test_reduce_sum_instruction_count_per_tier(mode):
    """bf16 grads and probs: every other vector instruction of keys 1 / 11 is one count-form call whatever
    the length, so the launch's count moves only with ReduceSumFunc -- once per slot (32 slots for key 1,
    16 for key 11; key 11's second call over its single partial sum is one WholeReduceSum at every length)."""
    soc = get_soc("ascend910b")
    slots = TOKENS * TOPK if not MODES[mode] else EXPERTS * CAPACITY
    counts = {}
    for length in LENGTHS:
        args = _inputs(length, mode, "bf16", seed=3)
        _one_piece(args, soc, length)
        counts[length] = _vector_instructions(args, soc)
    got = {length: counts[length] - counts[63] for length in LENGTHS}
    want = {length: slots * (REDUCE_INSTR[length] - REDUCE_INSTR[63]) for length in LENGTHS}
    assert got == want
