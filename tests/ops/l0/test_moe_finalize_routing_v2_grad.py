"""l0op::MoeFinalizeRoutingV2Grad on Ascend 950 (ops.l0.moe_finalize_routing_v2_grad): templates 10001 / 10002
(without scales) and 20011 (with scales, not cut H), bit for bit against goldens written here from the formulas:

    grad_expanded_x[idx[j]] = grad_y[j // k] * scales[j]   fp32 product, rounded to T      (grad_y[j] without scales)
    grad_scales[j]          = the fp32 sum over h of grad_y[j // k, h] * expanded_x[idx[j], h], rounded to S

for slots with 0 <= idx[j] < expandedXDim0; other slots write no row and get +0. The sum is formed in the order the
arch35 CalcGradScaleVF reads (see `row_sum`): a scalar loop here, one fp32 addition at a time, sharing nothing with
the kernel. The one assumption, the lane order of a 64-lane in-register ReduceSum, is LANE_TREE (pairwise, adjacent
lanes; inactive lanes +0): change it there and every golden follows. Beside the bits, `formula_check` holds every
grad_scales to the float64 dot product within the error bound of its fp32 roundings (tests/sum_bound.py), which no
order assumption enters.

Shapes are small; the kernels compile once per token carrier (uint16, float32) and template.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ops.l0 import moe_finalize_routing_v2_grad as l0
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling import moe_finalize_routing_v2_grad as tile
from tiling.status import TilingError

from .finalize_grad_formula import formula_check

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
DT = {"bf16": BF16, "fp16": F16, "fp32": F32}
STOCK = get_soc("ascend950")
SMALL = get_soc("ascend950", ub_size=16384, aiv_num=3)      # 20011 keeps rows up to ~600 elements whole
TINY = get_soc("ascend950", ub_size=2048, aiv_num=3)        # without scales: short hiddenPrePart pieces
LANES = 64


# --- the golden ----------------------------------------------------------------------------------------------------
def LANE_TREE(lanes: list) -> np.float32:
    """The assumed in-register ReduceSum of up to 64 fp32 values: missing lanes +0, then adjacent pairs summed,
    level by level ((l0 + l1) + (l2 + l3)) + ..."""
    v = [np.float32(x) for x in lanes] + [np.float32(0.0)] * (LANES - len(lanes))
    while len(v) > 1:
        v = [np.float32(v[2 * i] + v[2 * i + 1]) for i in range(len(v) // 2)]
    return v[0]


def row_sum(prod: np.ndarray) -> np.float32:
    """The arch35 sum of one row of fp32 products (H,):

    * H <= 64: one ReduceSum of the H lanes;
    * else Q = the largest power of two <= H, B = Q / 64 chunks of 64 in the head, L = ceil(H / 64):
      for i < L - B every lane of head chunk i takes one Add of tail chunk B + i (a tail lane past H counts +0),
      and is ReduceSum'd; head chunks L - B .. B - 1 are ReduceSum'd as they are;
    * while more than 64 chunk sums remain, the upper half is added onto the lower, element by element;
    * one last ReduceSum of the (at most 64) chunk sums."""
    x = [np.float32(v) for v in prod]
    h = len(x)
    if h <= LANES:
        return LANE_TREE(x)
    q = 1 << (h.bit_length() - 1)
    b, chunks = q // LANES, -(-h // LANES)
    sums = []
    for i in range(b):
        head = x[i * LANES:(i + 1) * LANES]
        if i < chunks - b:
            tail = x[(b + i) * LANES:(b + i + 1) * LANES]
            tail += [np.float32(0.0)] * (LANES - len(tail))
            head = [np.float32(p + t) for p, t in zip(head, tail)]
        sums.append(LANE_TREE(head))
    while len(sums) > LANES:
        half = len(sums) // 2
        sums = [np.float32(sums[i] + sums[half + i]) for i in range(half)]
    return LANE_TREE(sums)


def golden(grad_y, idx, expanded_x, scales, dim0, out_rows):
    """(grad_expanded_x (out_rows, H) with unnamed rows 0, grad_scales in the scales' shape and dtype or None)."""
    n, hidden = grad_y.shape
    g32 = grad_y.astype(F32)
    gex = np.zeros((out_rows, hidden), grad_y.dtype)
    if scales is None:
        for j, row in enumerate(idx):
            if 0 <= row < dim0:
                gex[row] = grad_y[j]
        return gex, None
    k = scales.shape[1]
    w = scales.astype(F32).reshape(-1)
    x32 = expanded_x.reshape(-1, hidden).astype(F32)
    gsc = np.zeros(n * k, F32)
    for j, row in enumerate(idx):
        if 0 <= row < dim0:
            gex[row] = (g32[j // k] * w[j]).astype(grad_y.dtype)
            gsc[j] = row_sum(g32[j // k] * x32[row])
    return gex, gsc.reshape(n, k).astype(scales.dtype)


# --- running -------------------------------------------------------------------------------------------------------
def _inputs(tokens, hidden, top_k, tok, prob, *, seed=0, minus_one=0, past=0, rows=None):
    """grad_y (tokens, H) (tokens * k rows without scales), a permutation of the slots over the rows (`minus_one`
    slots set to -1, `past` sent past the rows), expanded_x (rows, H), scales (tokens, k) or None."""
    rng = np.random.default_rng(seed)
    slots = tokens * top_k
    rows = slots if rows is None else rows
    grad_y = rng.standard_normal((tokens if prob else slots, hidden)).astype(DT[tok])
    idx = (rng.permutation(slots) % rows).astype(np.int32)
    picks = rng.permutation(slots)
    idx[picks[:past]] = rows + picks[:past]
    idx[picks[past: past + minus_one]] = -1
    expanded_x = rng.standard_normal((rows, hidden)).astype(DT[tok]) if prob else None
    scales = rng.random((tokens, top_k)).astype(DT[prob]) if prob else None
    return grad_y, idx, expanded_x, scales


def _run(grad_y, idx, expanded_x, scales, soc, *, mode=0, active_num=None, expert_num=0, expert_capacity=0,
         out_shape=None, fill=0, check=None):
    rows = len(idx) if out_shape is None else int(np.prod(out_shape[:-1]))
    gex = np.full(out_shape or (rows, grad_y.shape[1]), fill, grad_y.dtype)
    gsc = np.full(scales.shape, fill, scales.dtype) if scales is not None else np.zeros(0, F32)
    size, executor = l0.get_workspace_size(
        grad_y, idx, expanded_x, scales, drop_pad_mode=mode, active_num=len(idx) if active_num is None else active_num,
        expert_num=expert_num, expert_capacity=expert_capacity, grad_expanded_x_out=gex, grad_scales_out=gsc, soc=soc)
    l0.run(np.zeros(size, np.uint8), size, executor, check=check)
    return gex, (gsc if scales is not None else None), executor


def _check(grad_y, idx, expanded_x, scales, soc, *, key=None, check=None, **kw):
    gex, gsc, executor = _run(grad_y, idx, expanded_x, scales, soc, check=check, **kw)
    dim0 = executor.tiling.fields["expanded_x_dim0"]
    want_x, want_s = golden(grad_y, idx, expanded_x, scales, dim0, gex.reshape(-1, grad_y.shape[1]).shape[0])
    if executor.tiling.fields["drop_pad_mode"] == 0:
        # rows no slot names are not written (the caller's 0 here); dropPadMode 1 zeroes them
        want_x[np.setdiff1d(np.arange(want_x.shape[0]), idx[(idx >= 0) & (idx < dim0)])] = 0
    assert_bits_equal(gex.reshape(want_x.shape), want_x, f"key {executor.tiling.tiling_key} grad_expanded_x",
                      nan_equal=True)
    if scales is not None:
        assert_bits_equal(gsc, want_s, f"key {executor.tiling.tiling_key} grad_scales", nan_equal=True)
        formula_check(gsc, grad_y, idx, expanded_x, scales, dim0)
    if key is not None:
        assert executor.tiling.tiling_key == key
    return executor


# --- without scales: 10001 / 10002 ---------------------------------------------------------------------------------
def _pre_part(tok, soc):
    """The without-scale template's hiddenPrePart on `soc` (from the tiling, itself tested against the real UT)."""
    x = np.zeros((2, 8), DT[tok])
    return tile(x, np.zeros(2, np.int32), soc=soc).fields["hidden_pre_part"]


@pytest.mark.parametrize("tok,delta", [("fp32", 0), ("fp32", 1), ("bf16", 0), ("bf16", 1), ("fp16", 1003)],
                         ids=lambda v: str(v))
def test_without_scales_both_sides_of_the_piece_cut(tok, delta):
    """Hidden = hiddenPrePart (10001, one piece) and above it (10002: pieces, then a last part) on a 2 KiB UB."""
    hidden = _pre_part(tok, TINY) + delta
    grad_y, idx, _, _ = _inputs(4, hidden, 2, tok, None, seed=hidden, minus_one=1, past=1)
    executor = _check(grad_y, idx, None, None, TINY, key=10001 if delta == 0 else 10002)
    assert executor.tiling.fields["hidden_last_part"] == delta % _pre_part(tok, TINY)


def test_without_scales_stock_profile_active_num_and_checked_mode():
    """activeNum < len(idx) shortens expandedXDim0: slots naming rows at or past it are skipped."""
    grad_y, idx, _, _ = _inputs(9, 40, 1, "bf16", None, seed=1, minus_one=1)
    gex, _, executor = _run(grad_y, idx, None, None, STOCK, active_num=6, out_shape=(6, 40))
    want, _ = golden(grad_y, idx, None, None, 6, 6)
    assert_bits_equal(gex, want, "activeNum 6", nan_equal=True)
    assert executor.tiling.fields["expanded_x_dim0"] == 6
    _check(grad_y, idx, None, None, STOCK, key=10001, check="race")


# --- with scales: 20011 --------------------------------------------------------------------------------------------
# row lengths around the head / tail split and the single-register limit; 8193 bf16 folds 128 chunk sums once
HIDDEN_FAST = (1, 64, 65, 129, 200)
HIDDEN_SLOW = (2, 63, 127, 128, 255, 256, 257, 511, 512, 513, 4095, 4096, 4097)


def _sum_case(hidden, tok, prob, soc, seed):
    grad_y, idx, ex, sc = _inputs(3, hidden, 2, tok, prob, seed=seed, minus_one=1)
    return _check(grad_y, idx, ex, sc, soc, key=20011)


@pytest.mark.parametrize("hidden", HIDDEN_FAST, ids=lambda h: f"h{h}-fp32-fp32-stock")
def test_with_scales_sum_order(hidden):
    _sum_case(hidden, "fp32", "fp32", STOCK, hidden)


@pytest.mark.slow
@pytest.mark.parametrize("hidden", HIDDEN_SLOW, ids=lambda h: f"h{h}-fp32-bf16-stock")
def test_with_scales_sum_order_sweep(hidden):
    _sum_case(hidden, "fp32", "bf16", STOCK, hidden)


@pytest.mark.parametrize("hidden", (8191, 8193), ids=lambda h: f"h{h}-bf16-fp16-binary-addk1")
def test_with_scales_chunk_sums_folded(hidden):
    executor = _sum_case(hidden, "bf16", "fp16", STOCK, 7)
    assert executor.tiling.fields["binary_addk"] == (1 if hidden == 8193 else 0)


PAIRS = [(t, p) for t in DT for p in DT]


@pytest.mark.parametrize("tok,prob", PAIRS, ids=[f"{t}-{p}-small-ub" for t, p in PAIRS])
def test_every_dtype_pair(tok, prob):
    """T x S, mixed included, on the 16 KiB profile (3 cores; some with two slots)."""
    grad_y, idx, ex, sc = _inputs(4, 100, 2, tok, prob, seed=len(tok) + 3 * len(prob), minus_one=1, past=1)
    _check(grad_y, idx, ex, sc, SMALL, key=20011)


@pytest.mark.parametrize("top_k", (1, 2, 8, 512, 513, 1024), ids=lambda k: f"k{k}-bf16-fp32-stock")
def test_top_k(top_k):
    grad_y, idx, ex, sc = _inputs(2, 24, top_k, "bf16", "fp32", seed=top_k, minus_one=min(3, top_k - 1),
                                  past=1 if top_k > 1 else 0)
    _check(grad_y, idx, ex, sc, STOCK, key=20011)


def test_zero_scales_multiply_nan_rows():
    """A zero scale is multiplied: its row of grad_expanded_x is +-0, its gradient still sums the NaN row."""
    grad_y, idx, ex, sc = _inputs(4, 70, 2, "fp16", "bf16", seed=4)
    sc[0, 0] = 0
    sc[1, 1] = -0.0
    ex[idx[0]] = np.nan
    gex, gsc, _ = _run(grad_y, idx, ex, sc, SMALL)
    assert np.isnan(gsc[0, 0].astype(F32)) and not np.isnan(gex[idx[0]].astype(F32)).any()
    _check(grad_y, idx, ex, sc, SMALL)


@pytest.mark.parametrize("hidden", (32, 64, 128, 200, 4096), ids=lambda h: f"h{h}-all-minus-zero")
def test_signed_zero_sums(hidden):
    """Products all -0: a +0 lane (a short mask, a tail Add, a last ReduceSum of fewer than 64 chunk sums) makes
    the sum +0; only full registers all the way (H = 64, or a power of two >= 4096) keep -0."""
    grad_y, idx, ex, sc = _inputs(2, hidden, 1, "fp32", "fp32", seed=5)
    grad_y[:] = np.abs(grad_y) + 1
    ex[:] = -0.0
    gex, gsc, _ = _run(grad_y, idx, ex, sc, STOCK)
    assert (gsc == 0).all() and np.signbit(gsc).all() == (hidden in (64, 4096))
    _check(grad_y, idx, ex, sc, STOCK)


def test_with_scales_active_num_and_checked_mode():
    grad_y, idx, ex, sc = _inputs(6, 150, 2, "bf16", "bf16", seed=6, minus_one=2)
    ex = ex[:9]
    gex, gsc, executor = _run(grad_y, idx, ex, sc, SMALL, active_num=9, out_shape=(9, 150), check="race")
    want_x, want_s = golden(grad_y, idx, ex, sc, 9, 9)
    assert_bits_equal(gex, want_x, "activeNum 9 grad_expanded_x", nan_equal=True)
    assert_bits_equal(gsc, want_s, "activeNum 9 grad_scales", nan_equal=True)


# --- dropPadMode 1 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prob", ("fp32", None), ids=lambda p: f"drop-pad-{p or 'noscales'}")
def test_drop_pad_mode_zeroes_the_output_first(prob):
    """expert_num x expert_capacity rows, zeroed on every core before SyncAll; the slots then write theirs."""
    e, cap, hidden, k = 3, 4, 40, 2
    grad_y, idx, ex, sc = _inputs(4, hidden, k, "fp16", prob, seed=8, minus_one=2, rows=e * cap)
    ex3 = ex.reshape(e, cap, hidden) if ex is not None else None
    gex, gsc, executor = _run(grad_y, idx, ex3, sc, SMALL, mode=1, expert_num=e, expert_capacity=cap,
                              out_shape=(e, cap, hidden), fill=7, check="race")
    want_x, want_s = golden(grad_y, idx, ex, sc, e * cap, e * cap)
    assert_bits_equal(gex.reshape(e * cap, hidden), want_x, "dropPadMode 1 grad_expanded_x", nan_equal=True)
    if prob:
        assert_bits_equal(gsc, want_s, "dropPadMode 1 grad_scales", nan_equal=True)
    assert executor.tiling.fields["drop_pad_mode"] == 1


def test_drop_pad_mode_cut_h_pieces():
    """10002 with dropPadMode 1: the zeroing pass goes piece by piece too."""
    e, cap, k = 2, 3, 1
    hidden = _pre_part("bf16", TINY) * 2 + 5
    grad_y, idx, _, _ = _inputs(6, hidden, k, "bf16", None, seed=12, minus_one=2, rows=e * cap)
    gex, _, executor = _run(grad_y, idx, None, None, TINY, mode=1, expert_num=e, expert_capacity=cap,
                            out_shape=(e, cap, hidden), fill=3, check="race")
    want, _ = golden(grad_y, idx, None, None, e * cap, e * cap)
    assert_bits_equal(gex.reshape(e * cap, hidden), want, "dropPadMode 1 10002", nan_equal=True)
    assert executor.tiling.tiling_key == 10002 and executor.tiling.fields["hidden_inner_loops"] == 2


# --- refusals ------------------------------------------------------------------------------------------------------
def test_tiling_runs_first_then_unmodelled_inputs_are_refused():
    grad_y, idx, ex, sc = _inputs(4, 32, 2, "fp32", "fp32", seed=9)
    gex, gsc = np.zeros((8, 32), F32), np.zeros((4, 2), F32)
    common = dict(drop_pad_mode=0, active_num=8, expert_num=0, expert_capacity=0, grad_expanded_x_out=gex,
                  grad_scales_out=gsc, soc=STOCK)
    with pytest.raises(TilingError):
        l0.get_workspace_size(grad_y, idx, None, sc, **common)
    with pytest.raises(NotImplementedError):
        l0.get_workspace_size(grad_y, idx, ex, sc, np.zeros((4, 2), np.int32), np.zeros((3, 32), F32), **common)
    big = np.zeros((8, 20000), F32)           # a cut-H row launches split_h's kernel (tests in *_split_h.py)
    _, executor = l0.get_workspace_size(big[:4], idx, big, sc,
                                        **dict(common, grad_expanded_x_out=np.zeros((8, 20000), F32)))
    assert executor.tiling.tiling_key == 20012
