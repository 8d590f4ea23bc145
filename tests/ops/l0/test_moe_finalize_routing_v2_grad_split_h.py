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
kernel is launched through a test-local launcher built as ops/l0/moe_finalize_routing_v2 builds its Executor
(the l0's own __init__ is another branch's).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ascend_sim.dtypes import dt_of
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import gm_view
from ops._framework import Executor, gm_tensor, run_executor
from ops.l0.moe_finalize_routing_v2_grad.kernel import GmTensors, Template
from ops.l0.moe_finalize_routing_v2_grad.split_h import KERNEL, MoeFinalizeRoutingV2GradSplitHTilingData
from tiling import get_soc
from tiling.moe_finalize_routing_v2_grad import KEY_CUT_H, moe_finalize_routing_v2_grad as tiling

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
f32 = np.float32
DT = {"fp32": F32, "fp16": F16, "bf16": BF16}
SMALL = get_soc("ascend950", ub_size=8000, aiv_num=3)
STOCK = get_soc("ascend950")
API = "l0op::MoeFinalizeRoutingV2Grad"
GM_NAMES = ("grad_y", "expanded_row_idx", "expanded_x", "scales", "grad_expanded_x", "grad_scales")
SENTINEL = 0x7A                                  # every byte of grad_expanded_x before the launch


# ---------------------------------------------------------------------------------------------------- launcher

def _scales_views(a, write):
    raw = gm_view(a).reshape(-1).view(np.uint8)
    u16, f32 = raw[: raw.size - raw.size % 2].view(np.uint16), raw[: raw.size - raw.size % 4].view(np.float32)
    if not write:
        for v in (u16, f32):
            v.setflags(write=False)
    return GlobalTensor(u16, 3 if not write else 5, 0), GlobalTensor(f32, 3 if not write else 5, 0)


def launch(gy, idx, ex, sc, gex, gsc, *, soc, mode=0, active_num=0, expert_num=0, expert_capacity=0, check=None):
    """Tiling (must pick 20012), then the kernel on gex / gsc in place. Returns the TilingResult."""
    result = tiling(gy, idx, ex, sc, None, None, mode, active_num, expert_num, expert_capacity,
                    grad_expanded_x_out=gex, grad_scales_out=gsc, soc=soc)
    assert result.tiling_key == KEY_CUT_H, result.tiling_key
    td = MoeFinalizeRoutingV2GradSplitHTilingData(*result.fields.values())
    gm = GmTensors(gm_tensor(gy, 0), gm_tensor(idx, 1, np.int32), gm_tensor(ex, 2), *_scales_views(sc, False),
                   gm_tensor(gex, 4), *_scales_views(gsc, True))
    tmpl = Template(dt_of(gy.dtype), dt_of(sc.dtype), 1, mode)
    tensors = dict(grad_y=gy, expanded_row_idx=idx, expanded_x=ex, scales=sc, grad_expanded_x=gex, grad_scales=gsc)
    executor = Executor("MoeFinalizeRoutingV2Grad", result, KERNEL, (td, gm, tmpl), GM_NAMES, api=API,
                        tensors=tensors, writes=(gex, gsc))
    run_executor(API, np.zeros(result.workspace_size, np.uint8), result.workspace_size, executor, None, check)
    return result


# ------------------------------------------------------------------------------------------------------ golden

def _tree64(values) -> np.float32:
    """One register ReduceSum: 64 lanes (missing ones +0), pairwise ((l0 + l1) + (l2 + l3)) + ..."""
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
    sums = [_tree64(head[c * 64:(c + 1) * 64]) for c in range(quotient // 64)]
    while len(sums) > 64:
        half = len(sums) // 2
        sums = [f32(sums[i] + sums[half + i]) for i in range(half)]
    return _tree64(sums)


def _level_sum(v) -> np.float32:
    """CacheReduceSum over 256 block sums: ((v0 + v2) + (v1 + v3)) of the four 64-float quarters, then one tree."""
    q = [np.asarray(v[i * 64:(i + 1) * 64], F32) for i in range(4)]
    return _tree64((q[0] + q[2]) + (q[1] + q[3]))


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
    """(grad_expanded_x, grad_scales) expected, from gex0 (the output buffer before the launch)."""
    top_k = sc.shape[1]
    g32, x32 = gy.astype(F32), ex.reshape(-1, gy.shape[1]).astype(F32)
    s32 = sc.reshape(-1).astype(F32)
    gex = gex0.reshape(-1, gy.shape[1]).copy()
    gsc = np.zeros(idx.size, F32)
    for j, row in enumerate(idx):
        if 0 <= row < dim0:
            gex[row] = (g32[j // top_k] * s32[j]).astype(F32).astype(gy.dtype)
            gsc[j] = row_sum(x32[row], g32[j // top_k], f)
    return gex.reshape(gex0.shape), gsc.astype(sc.dtype).reshape(sc.shape)


# ------------------------------------------------------------------------------------------------------- cases

def _data(n, hidden, top_k, t, s, *, seed=0, rows=None, bad=(), zero_probs=0, nan_rows=0):
    """grad_y (n, H), expanded_row_idx: a permutation of the slots over `rows` rows (default n * topK), the slots
    in `bad` set to the given values; expanded_x (rows, H); scales (n, topK)."""
    rng = np.random.default_rng(seed)
    rows = n * top_k if rows is None else rows
    gy = rng.standard_normal((n, hidden)).astype(DT[t])
    ex = (rng.standard_normal((rows, hidden)) * np.exp2(rng.integers(-6, 6, (rows, hidden)))).astype(DT[t])
    idx = rng.permutation(max(rows, n * top_k))[: n * top_k].astype(np.int32)
    for slot, value in bad:
        idx[slot] = value
    sc = rng.uniform(-2, 2, (n, top_k)).astype(DT[s])
    sc.reshape(-1)[:zero_probs] = 0
    for r in range(nan_rows):
        ex[idx[r] % rows, r % hidden] = np.nan
    return gy, idx, ex, sc


def _check(gy, idx, ex, sc, soc, *, mode=0, dim0=None, check=None, **attrs):
    gex = np.full(ex.shape, SENTINEL, np.uint8).view(gy.dtype) if gy.dtype.itemsize == 1 else \
        np.frombuffer(np.full(ex.nbytes, SENTINEL, np.uint8).tobytes(), gy.dtype).reshape(ex.shape).copy()
    gsc = np.full(sc.shape, 7, sc.dtype)
    gex0 = gex.copy()
    result = launch(gy, idx, ex, sc, gex, gsc, soc=soc, mode=mode, check=check, **attrs)
    f = result.fields
    want_x, want_s = golden(gy, idx, ex, sc, gex0 if mode == 0 else np.zeros_like(gex0), f,
                            f["expanded_x_dim0"] if dim0 is None else dim0)
    bad_s = np.flatnonzero(gsc.reshape(-1).view(np.uint8 if sc.dtype.itemsize == 1 else f"u{sc.dtype.itemsize}")
                           != want_s.reshape(-1).view(f"u{sc.dtype.itemsize}"))
    assert not bad_s.size, (f"grad_scales slot {bad_s[0]}: {gsc.reshape(-1)[bad_s[0]]!r} != "
                            f"{want_s.reshape(-1)[bad_s[0]]!r} ({bad_s.size} differ)")
    bad_x = np.flatnonzero(gex.reshape(-1).view(f"u{gy.dtype.itemsize}")
                           != want_x.reshape(-1).view(f"u{gy.dtype.itemsize}"))
    assert not bad_x.size, f"grad_expanded_x element {bad_x[0]} of {gex.size} ({bad_x.size} differ)"
    return result


def test_tail_two_blocks_fp32_small_ub():
    """H 700 on the 8000-byte UB: 4 main blocks of 144, a fold of 124 (two tail blocks), topK 2."""
    gy, idx, ex, sc = _data(3, 700, 2, "fp32", "fp32")
    result = _check(gy, idx, ex, sc, SMALL)
    assert result.fields["fold_tail_block_num"] == 2
