"""MoeFinalizeRoutingV2Grad on Ascend 950, the cut-H kernel (key 20012, ops.l0.moe_finalize_routing_v2_grad.split_h),
bit for bit against goldens written here from the formulas:

    grad_expanded_x[row_j] = grad_y[j // topK] * scales[j]  (fp32, CAST_RINT), for 0 <= row_j < expandedXDim0
    grad_scales[j]         = sum_h expanded_x[row_j, h] * grad_y[j // topK, h]  (fp32, 0 for an invalid row)

grad_scales in the order the arch35 VFs form it, written out element by element here: the row cut into the tiling's
blocks (main / fold pairs / tail / whole main blocks), each block's products summed head + tail onto its
largest-power-of-two head in 64-lane chunks, chunk sums halved down to one register, block sums cached 256 to a
level, levels combined. The register ReduceSum is taken as the pairwise tree ((l0 + l1) + (l2 + l3)) + ... over 64
lanes, masked lanes +0 (the simulator's ReduceSum; the lane order of the chip's is not published).

Most cases use a custom UB (8000 bytes: mainFactor 144 fp32 / 288 for 16-bit, not powers of two, so every block
has a head and a tail) so that cut-H shapes stay small; the stock profile is run on both sides of its cut. The
kernel is launched through the l0's get_workspace_size / run.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ops.l0.moe_finalize_routing_v2_grad as l0
from tests.bits import assert_bits_equal
from tiling import get_soc
from tiling.moe_finalize_routing_v2_grad import KEY_CUT_H
from tiling.moe_finalize_routing_v2_grad import moe_finalize_routing_v2_grad as tiling

from .finalize_grad_formula import formula_check

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
f32 = np.float32
DT = {"fp32": F32, "fp16": F16, "bf16": BF16}
SMALL = get_soc("ascend950", ub_size=8000, aiv_num=3)
STOCK = get_soc("ascend950")
SENTINEL = 0x7A                                  # every byte of grad_expanded_x before the launch


# ---------------------------------------------------------------------------------------------------- launcher

def launch(gy, idx, ex, sc, gex, gsc, *, soc, mode=0, active_num=0, expert_num=0, expert_capacity=0, check=None):
    """The l0 (tiling, which must pick 20012, then the kernel on gex / gsc in place). Returns the TilingResult."""
    _, executor = l0.get_workspace_size(gy, idx, ex, sc, drop_pad_mode=mode, active_num=active_num,
                                        expert_num=expert_num, expert_capacity=expert_capacity,
                                        grad_expanded_x_out=gex, grad_scales_out=gsc, soc=soc)
    result = executor.tiling
    assert result.tiling_key == KEY_CUT_H, result.tiling_key
    l0.run(np.zeros(result.workspace_size, np.uint8), result.workspace_size, executor, check=check)
    return result


# ------------------------------------------------------------------------------------------------------ golden

def LANE_TREE(values) -> np.float32:
    """The one assumption (as in the other arch35 kernels' goldens): a register ReduceSum of up to 64 fp32 values,
    missing lanes +0, adjacent pairs level by level ((l0 + l1) + (l2 + l3)) + ... Change it here and every golden
    of this file follows."""
    lanes = [f32(v) for v in values] + [f32(0.0)] * (64 - len(values))
    while len(lanes) > 1:
        lanes = [f32(lanes[2 * i] + lanes[2 * i + 1]) for i in range(len(lanes) // 2)]
    return lanes[0]


def _block_sum(p: np.ndarray, quotient: int) -> np.float32:
    """The fp32 products p of one block (quotient <= len < 2 * quotient): tail element q + i onto head element i,
    64-lane chunk sums of the head, halved while more than 64, one last ReduceSum."""
    head = p[:quotient].copy()
    tail = p[quotient:]
    head[: tail.size] = head[: tail.size] + tail
    sums = [LANE_TREE(head[c * 64:(c + 1) * 64]) for c in range(quotient // 64)]
    while len(sums) > 64:
        half = len(sums) // 2
        sums = [f32(sums[i] + sums[half + i]) for i in range(half)]
    return LANE_TREE(sums)


def _level_sum(v) -> np.float32:
    """CacheReduceSum over 256 block sums: ((v0 + v2) + (v1 + v3)) of the four 64-float quarters, then one tree."""
    q = [np.asarray(v[i * 64:(i + 1) * 64], F32) for i in range(4)]
    return LANE_TREE((q[0] + q[2]) + (q[1] + q[3]))


def blocks(f: dict):
    """The row's blocks in kernel order: (spans [(start, length), ...], triple 'main' / 'fold')."""
    m, half, base = f["main_factor"], f["fold_factor"], f["main_factor"] * f["main_block_num"]
    out = []
    for i in range(f["fold_block_num"]):
        out.append(([(i * half, half), (base + i * half, half)], "main"))
    fb = f["fold_block_num"]
    tails = {2: [half, f["fold_tail_len"] - half], 1: [f["fold_tail_len"]], 0: []}[f["fold_tail_block_num"]]
    for i, t in enumerate(tails):
        triple = "fold" if half + t < f["main_binary_add_quotient"] else "main"
        out.append(([((fb + i) * half, half), (base + (fb + i) * half, t)], triple))
    if f["fold_tail_block_num"] == 1:
        out.append(([((fb + 1) * half, half)], "fold"))
    first = fb // 2 + (1 if f["fold_tail_block_num"] else 0)
    out += [([(m * i, m)], "main") for i in range(first, f["main_block_num"])]
    return out


def row_sum(x_row: np.ndarray, g_row: np.ndarray, f: dict) -> np.float32:
    """grad_scales of one valid slot in the kernel's order (fp32 rows of T's values)."""
    level0, level1 = [f32(0.0)] * 256, [f32(0.0)] * 256
    n = 0
    for spans, triple in blocks(f):
        idx = np.concatenate([np.arange(s, s + ln) for s, ln in spans])
        level0[n % 256] = _block_sum((x_row[idx] * g_row[idx]).astype(F32), f[f"{triple}_binary_add_quotient"])
        n += 1
        if n % 256 == 0:
            level1[n // 256 - 1] = _level_sum(level0)
            level0 = [f32(0.0)] * 256
    assert n < 65536
    if n < 256:
        return _level_sum(level0)
    return f32(_level_sum(level0) + _level_sum(level1))


def golden(gy, idx, ex, sc, gex0, f, dim0):
    """(grad_expanded_x, grad_scales) expected, from gex0 (the output buffer before the launch). Each block's
    pieces are written with a 16-bit byte count: len * sizeof(T) mod 65536 bytes of each."""
    top_k, isz = sc.shape[1], gy.dtype.itemsize
    g32, x32 = gy.astype(F32), ex.reshape(-1, gy.shape[1]).astype(F32)
    s32 = sc.reshape(-1).astype(F32)
    gex = gex0.reshape(-1, gy.shape[1]).copy()
    gsc = np.zeros(idx.size, F32)
    for j, row in enumerate(idx):
        if 0 <= row < dim0:
            prod = (g32[j // top_k] * s32[j]).astype(F32).astype(gy.dtype)
            for spans, _ in blocks(f):
                for start, length in spans:
                    n = (length * isz) % 65536 // isz
                    gex[row, start:start + n] = prod[start:start + n]
            gsc[j] = row_sum(x32[row], g32[j // top_k], f)
    return gex.reshape(gex0.shape), gsc.astype(sc.dtype).reshape(sc.shape)


# ------------------------------------------------------------------------------------------------------- cases

def _data(n, hidden, top_k, t, s, *, seed=0, rows=None, bad=(), zero_probs=0, nan_rows=0):
    """grad_y (n, H), expanded_row_idx: a permutation of the slots over `rows` rows (default n * topK), the slots
    in `bad` set to the given values; expanded_x (rows, H); scales (n, topK)."""
    rng = np.random.default_rng(seed)
    rows = n * top_k if rows is None else rows
    gy = rng.standard_normal((n, hidden)).astype(DT[t])
    ex = (rng.standard_normal((rows, hidden)) * np.exp2(rng.integers(-12, 12, (rows, hidden)))).astype(DT[t])
    idx = rng.permutation(max(rows, n * top_k))[: n * top_k].astype(np.int32)
    for slot, value in bad:
        idx[slot] = value
    sc = rng.uniform(-2, 2, (n, top_k)).astype(DT[s])
    sc.reshape(-1)[:zero_probs] = 0
    for r in range(nan_rows):
        ex[idx[r] % rows, r % hidden] = np.nan
    return gy, idx, ex, sc


def _check(gy, idx, ex, sc, soc, *, mode=0, dim0=None, check=None, **attrs):
    gex = np.full(ex.nbytes, SENTINEL, np.uint8).view(gy.dtype).reshape(ex.shape)
    gsc = np.full(sc.shape, 7, sc.dtype)
    gex0 = gex.copy()
    result = launch(gy, idx, ex, sc, gex, gsc, soc=soc, mode=mode, check=check, **attrs)
    f = result.fields
    want_x, want_s = golden(gy, idx, ex, sc, gex0 if mode == 0 else np.zeros_like(gex0), f,
                            f["expanded_x_dim0"] if dim0 is None else dim0)
    assert_bits_equal(gsc, want_s.reshape(gsc.shape), "grad_scales")
    formula_check(gsc, gy, idx, ex, sc, f["expanded_x_dim0"] if dim0 is None else dim0)
    assert_bits_equal(gex, want_x.reshape(gex.shape), "grad_expanded_x")
    return result


# (id, tokens, hidden, topK, T, S, profile, what the blocks must look like)
SHAPES = [
    ("H313-first-cut", 2, 313, 2, "fp32", "fp32", SMALL, dict(main_block_num=2, fold_tail_block_num=1)),
    ("H576-main-only", 2, 576, 2, "fp32", "fp32", SMALL, dict(main_block_num=4, fold_tail_len=0, fold_block_num=0)),
    ("H600-tail1", 2, 600, 2, "fp32", "fp32", SMALL, dict(fold_block_num=0, fold_tail_block_num=1)),
    ("H700-tail2", 3, 700, 2, "fp32", "fp32", SMALL, dict(fold_block_num=0, fold_tail_block_num=2)),
    ("H720-fold-no-tail", 2, 720, 2, "fp32", "fp32", SMALL, dict(fold_block_num=2, fold_tail_len=0)),
    ("H1000-fold-tail2", 3, 1000, 2, "fp32", "fp32", SMALL, dict(fold_block_num=4, fold_tail_block_num=2)),
    ("H1400-fp16-tail2", 2, 1400, 2, "fp16", "fp16", SMALL, dict(fold_tail_block_num=2)),
    ("H1200-bf16-tail1", 2, 1200, 2, "bf16", "bf16", SMALL, dict(fold_tail_block_num=1)),
    ("H10545-fp32-stock", 2, 10545, 2, "fp32", "fp32", STOCK, dict(main_factor=10384, fold_tail_block_num=1)),
    ("H21041-bf16-stock", 2, 21041, 1, "bf16", "fp32", STOCK, dict(main_block_num=1, fold_tail_block_num=1)),
    ("H21041-fp16-stock", 1, 21041, 2, "fp16", "bf16", STOCK, dict(main_block_num=1)),
]


@pytest.mark.parametrize("n, hidden, top_k, t, s, soc, expect", [c[1:] for c in SHAPES], ids=[c[0] for c in SHAPES])
def test_blocks(n, hidden, top_k, t, s, soc, expect):
    """Main-only, fold pairs, one / two tail blocks, first cut-H size on the small UB, the stock cut."""
    gy, idx, ex, sc = _data(n, hidden, top_k, t, s, seed=hidden)
    f = _check(gy, idx, ex, sc, soc).fields
    assert {k: f[k] for k in expect} == expect


@pytest.mark.parametrize("t, hidden", [("fp32", 10544), ("bf16", 21040), ("fp16", 21040)])
def test_stock_cut_below_is_not_cut_h(t, hidden):
    """One element less and the stock tiling keeps the row whole (20011): the cut-H kernel starts exactly above."""
    gy, idx, ex, sc = _data(1, hidden, 1, t, "fp32")
    assert tiling(gy, idx, ex, sc, soc=STOCK).tiling_key == 20011


PAIRS = [(t, s) for t in DT for s in DT]


@pytest.mark.parametrize("t, s", PAIRS, ids=[f"T-{t}-S-{s}" for t, s in PAIRS])
def test_dtype_pairs(t, s):
    """Every T x S (mixed included) on the small UB: fold pairs and two tail blocks."""
    hidden = 1000 if t == "fp32" else 1400
    gy, idx, ex, sc = _data(2, hidden, 3, t, s, seed=len(t + s))
    _check(gy, idx, ex, sc, SMALL)


@pytest.mark.parametrize("top_k", [1, 2, 8, 513, 1024])
def test_top_k(top_k):
    """topK up to 1024 with a small hidden (4 tokens for topK <= 8, one token above): the core split over slots."""
    n = 4 if top_k <= 8 else 1
    gy, idx, ex, sc = _data(n, 420 if top_k <= 8 else 320, top_k, "fp32", "fp32" if top_k <= 8 else "bf16",
                            seed=top_k)
    _check(gy, idx, ex, sc, SMALL)


def test_tail_read_past_the_tensor_end():
    """H 701 fp32: the last fold piece is copied as CeilAlign(5, 8) = 8 elements, 12 bytes past the row; for the
    last row of grad_y and of expanded_x that is past the tensor (the allocation's undefined bytes on the chip): no
    error, and the lanes are never used."""
    n, k = 2, 2
    gy, idx, ex, sc = _data(n, 701, k, "fp32", "fp32", seed=4)
    idx[-1] = n * k - 1                       # the last slot reads the last expanded_x row
    idx[np.flatnonzero(idx == n * k - 1)[:-1]] = 0 if idx[-1] != 0 else 1
    f = tiling(gy, idx, ex, sc, soc=SMALL).fields
    last_piece = f["fold_tail_len"] - f["fold_factor"] if f["fold_tail_block_num"] == 2 else f["fold_tail_len"]
    assert last_piece % 8 != 0 and f["fold_tail_block_num"] > 0
    _check(gy, idx, ex, sc, SMALL)


def test_invalid_indices():
    """-1, another negative, expandedXDim0 and past it: no row written, grad_scales exactly +0."""
    n, k = 3, 2
    gy, idx, ex, sc = _data(n, 700, k, "fp32", "fp32", bad=((0, -1), (2, -7), (3, n * k), (5, n * k + 40)))
    _check(gy, idx, ex, sc, SMALL)


def test_active_num_limits_rows():
    """0 < activeNum < len(expanded_row_idx): expandedXDim0 = activeNum rows, larger indices skipped."""
    n, k, active = 3, 2, 4
    gy, idx, ex, sc = _data(n, 1200, k, "bf16", "fp32", rows=n * k, seed=5)
    ex, idx = ex[:active], np.arange(n * k, dtype=np.int32)[::-1].copy()
    _check(gy, idx, ex, sc, SMALL, active_num=active)


@pytest.mark.parametrize("t, s", [("fp32", "fp32"), ("bf16", "fp16"), ("fp16", "bf16")])
def test_zero_probs_and_nan_rows(t, s):
    """A zero prob multiplies (0 * x, NaN * 0 = NaN in grad_expanded_x); a NaN in expanded_x makes the slot's
    grad_scales NaN, whatever its prob."""
    gy, idx, ex, sc = _data(3, 1000 if t == "fp32" else 1400, 2, t, s, zero_probs=3, nan_rows=2)
    gy[0, 5] = np.nan
    _check(gy, idx, ex, sc, SMALL)


@pytest.mark.parametrize("hidden, blocks_at_least", [(36864, 256), (40000, 278)], ids=["256-blocks", "278-blocks"])
def test_more_than_256_blocks(hidden, blocks_at_least):
    """The block-sum cache's second level: exactly 256 blocks (level 0 zeroed at the end) and 278."""
    gy, idx, ex, sc = _data(2, hidden, 1, "fp32", "fp32", seed=hidden)
    f = _check(gy, idx, ex, sc, SMALL).fields
    assert len(blocks(f)) == blocks_at_least


def test_drop_pad_mode_zeroes_output():
    """dropPadMode 1: expanded_x (E, C, H), grad_expanded_x zeroed by InitOutputGm first, rows no slot names
    stay 0."""
    n, k, e, cap = 2, 2, 3, 2
    rng = np.random.default_rng(3)
    gy = rng.standard_normal((n, 700)).astype(F32)
    ex = rng.standard_normal((e, cap, 700)).astype(F32)
    idx = np.array([5, -1, 0, 3], np.int32)
    sc = rng.uniform(-1, 1, (n, k)).astype(F32)
    _check(gy, idx, ex, sc, SMALL, mode=1, expert_num=e, expert_capacity=cap)


def test_copy_out_block_len_is_16_bits():
    """A 397600-byte UB gives mainFactor 16384 fp32: a whole main block is 65536 bytes, which the uint16 blockLen
    turns into 0, so that block of grad_expanded_x is never written (the golden keeps the sentinel there)."""
    soc = get_soc("ascend950", ub_size=397600, aiv_num=2)
    gy, idx, ex, sc = _data(1, 40000, 2, "fp32", "fp32", seed=9)
    f = _check(gy, idx, ex, sc, soc).fields
    assert f["main_factor"] * 4 == 65536 and f["main_block_num"] == 2


CHECKED = [("fp32-S-fp16", "fp32", "fp16", 1000), ("bf16-S-fp16", "bf16", "fp16", 1400),
           ("fp16-S-fp32", "fp16", "fp32", 1400), ("fp32-S-bf16-278-blocks", "fp32", "bf16", 40000)]


@pytest.mark.parametrize("t, s, hidden", [c[1:] for c in CHECKED], ids=[c[0] for c in CHECKED])
def test_checked_mode_clean(t, s, hidden):
    """check="race": no race or queue misuse beyond the two waived ones of the real kernel (split_h.KERNEL)."""
    gy, idx, ex, sc = _data(3 if hidden < 40000 else 1, hidden, 2, t, s, bad=((1, -1),))
    _check(gy, idx, ex, sc, SMALL, check="race")


def test_checked_mode_clean_drop_pad_mode():
    """dropPadMode 1 in checked mode: InitOutputGm, SyncAll, then the pass."""
    rng = np.random.default_rng(8)
    gy = rng.standard_normal((2, 700)).astype(F32)
    ex = rng.standard_normal((3, 2, 700)).astype(F32)
    sc = rng.uniform(-1, 1, (2, 2)).astype(F32)
    _check(gy, np.array([4, 1, -1, 2], np.int32), ex, sc, SMALL, mode=1, expert_num=3, expert_capacity=2,
           check="race")


def test_order_is_not_a_plain_sum():
    """The data tell the modelled order apart from a left-to-right fp32 sum (so the bit checks can fail)."""
    gy, idx, ex, sc = _data(1, 1000, 1, "fp32", "fp32")
    f = tiling(gy, idx, ex, sc, soc=SMALL).fields
    x, g = ex[idx[0]].astype(F32), gy[0].astype(F32)
    plain = f32(0)
    for v in (x * g).astype(F32):
        plain = f32(plain + v)
    assert row_sum(x, g, f) != plain


SWEEP = [(h, t, s) for t, hs in (("fp32", range(313, 2400, 97)), ("bf16", range(625, 4800, 193)),
                                 ("fp16", range(625, 4800, 211))) for h in hs for s in DT]


@pytest.mark.slow
@pytest.mark.parametrize("hidden, t, s", SWEEP, ids=[f"H{h}-T-{t}-S-{s}" for h, t, s in SWEEP])
def test_sweep_small_ub(hidden, t, s):
    """Every block layout the small UB gives over a range of hidden sizes, every T x S."""
    gy, idx, ex, sc = _data(2, hidden, 3, t, s, seed=hidden, bad=((1, -1),))
    _check(gy, idx, ex, sc, SMALL)
