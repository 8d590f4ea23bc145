"""MoeTokenPermuteWithRoutingMap drop-and-pad on ascend950: the real keys 9 / 19 kernel (pad sort, SyncAll,
SIMT prob gather, SyncAll, SIMD or SIMT token gather), bit-exact against the golden written from the formulas.

Sweeps: key 19 (SIMT token gather, cols < 620) and key 9 (SIMD, cols >= 620) on both sides of the threshold;
probs absent / fp16 / bf16 / fp32 and fp32 probs with bf16 tokens; capacity 1 (a token heading several experts
in a row: the SIMD gather's UB-to-UB Copy), capacity N, capacities past an expert's routed tokens, empty
experts, numOutTokens not a multiple of E; the stock profile and a small UB / two-core profile on which the
SIMD gather loops, refills its 2048-index window and splits a row wider than its buffer. Also the step list,
the kernel name, the UB plan, checked mode, and the count form of Copy the SIMD gather uses. The SIMD gather
also runs alone on hand-chosen indices, its GM / UB traffic counted: rows repeated within the last three
copied come from UB, loops of whole rows, rows split into pieces.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError
from ascend_sim._jit import global_aicore
from ops.permute_with_routing_map import allocate_outputs, get_workspace_size, run
from ops.permute_with_routing_map.golden import permute_with_routing_map_golden
from tests.bits import assert_bits_equal
from tiling import get_soc

from ..ascend_sim.harness import run as run_stages
from ..ascend_sim.harness import tbuf

# 128 KiB for the pad sort's four 32 KiB buffers + the 40 KiB SIMT data cache + 256 bytes GetCoreMemSize keeps:
# the SIMD gather's two buffers get 65408 bytes each, so a 16384-float row (65536 bytes) is split
SMALL_950 = get_soc("ascend950", ub_size=180224, aiv_num=2)
DTYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp32": np.float32}


def _kernel_run(ex):
    """The RunReport of the op's own l0 kernel step (None when it had nothing to launch)."""
    return next(s for s in ex.report.steps if s.kind == "kernel").run


def _inputs(n, h, e, cap, dtype, probs_dtype, seed, empty_experts=(), head_token=None, shared=0):
    """Tokens with distinct bit patterns, a random routing map (about half the entries set) with the given
    experts empty, probs of `probs_dtype`. head_token: a token routed to every expert (capacity 1 then
    gathers it E times in a row). shared: only tokens 0 .. shared-1 are routed, each to every expert (capacity
    `shared` then gathers 0, 1, .., shared-1 per expert: a token repeats `shared` rows later)."""
    rng = np.random.default_rng(seed)
    tokens = rng.standard_normal((n, h)).astype(DTYPES[dtype])
    rm = rng.random((n, e)) < 0.5
    rm[:, list(empty_experts)] = False
    if head_token is not None:
        rm[: head_token + 1, :] = False
        rm[head_token, :] = True
    if shared:
        rm[:] = False
        rm[:shared, :] = True
    probs = None if probs_dtype is None else rng.random((n, e)).astype(DTYPES[probs_dtype])
    return tokens, rm, probs


CASES = {
    # id: (n, hidden, experts, capacity, extra num_out, tokens dtype, probs dtype, soc, key, extra input kwargs)
    "k19-fp32-noprobs-cap7": (20, 8, 6, 7, 0, "fp32", None, "ascend950", 19, {}),
    "k19-fp16-fp16probs-cap1-head": (9, 24, 5, 1, 3, "fp16", "fp16", "ascend950", 19, dict(head_token=0)),
    "k19-bf16-fp32probs-capN": (12, 16, 4, 12, 0, "bf16", "fp32", "ascend950", 19, {}),
    "k19-bf16-bf16probs-empty-expert": (10, 6, 5, 8, 4, "bf16", "bf16", "ascend950", 19,
                                        dict(empty_experts=(1, 3))),
    "k19-fp32-fp32probs-multicore": (60, 60, 9, 5, 0, "fp32", "fp32", "ascend950", 19, {}),
    "k19-fp16-probs-multicore-prob-gather": (512, 3, 8, 512, 0, "fp16", "fp16", "ascend950", 19, {}),
    "k19-fp16-619cols": (7, 619, 3, 4, 0, "fp16", "fp16", "ascend950", 19, {}),
    "k9-fp16-620cols": (7, 620, 3, 4, 0, "fp16", "fp16", "ascend950", 9, {}),
    "k9-fp16-noprobs-cap5": (10, 640, 3, 5, 2, "fp16", None, "ascend950", 9, {}),
    "k9-bf16-fp32probs-cap1-head": (8, 700, 6, 1, 0, "bf16", "fp32", "ascend950", 9, dict(head_token=2)),
    "k9-fp32-fp32probs-empty-expert": (16, 1000, 4, 16, 0, "fp32", "fp32", "ascend950", 9,
                                       dict(empty_experts=(0,))),
    "k9-bf16-bf16probs-odd-row-bytes": (6, 621, 3, 3, 0, "bf16", "bf16", "ascend950", 9, {}),
    # two cores: each core's rows repeat a token 1, 2, 3 rows back (the UB Copy from the last three copied
    # rows) or 4 back (copied in again)
    "k9-small-ub-repeat1": (8, 700, 6, 1, 0, "bf16", "fp32", SMALL_950, 9, dict(head_token=2)),
    "k9-small-ub-repeat2": (8, 640, 6, 2, 0, "fp16", None, SMALL_950, 9, dict(shared=2)),
    "k9-small-ub-repeat3": (8, 620, 6, 3, 0, "fp32", "fp32", SMALL_950, 9, dict(shared=3)),
    "k9-small-ub-repeat4": (8, 648, 6, 4, 0, "bf16", "bf16", SMALL_950, 9, dict(shared=4)),
    "k9-small-ub-loops": (40, 640, 8, 20, 0, "fp16", "fp16", SMALL_950, 9, {}),
    "k9-small-ub-index-window": (700, 640, 6, 700, 0, "fp16", None, SMALL_950, 9, {}),
    "k9-small-ub-split-row": (6, 16384, 3, 2, 0, "fp32", "fp32", SMALL_950, 9, {}),
    "k19-small-ub-bf16": (30, 100, 4, 9, 1, "bf16", "fp32", SMALL_950, 19, {}),
}


def _run(case, check=None):
    n, h, e, cap, extra, dt, pdt, soc, key, kw = CASES[case]
    tokens, rm, probs = _inputs(n, h, e, cap, dt, pdt, seed=n * 7 + e, **kw)
    num_out = e * cap + extra
    outs = allocate_outputs(tokens, rm, probs, num_out, True)
    size, ex = get_workspace_size(tokens, rm, probs, num_out, True, *outs, soc=soc)
    run(np.empty(size, np.uint8), size, ex, check=check)
    return (tokens, rm, probs, num_out), outs, ex


@pytest.mark.parametrize("case", list(CASES))
def test_pad_950_matches_golden(case):
    (tokens, rm, probs, num_out), (pt, pp, si), ex = _run(case)
    key = CASES[case][8]
    assert ex.tiling.tiling_key == key
    gt, gp, gs, rows = permute_with_routing_map_golden(tokens, rm, probs, num_out, True)
    assert rows == pt.shape[0] and np.array_equal(si, gs)
    assert_bits_equal(pt, gt)
    if probs is None:
        assert pp is None
    else:
        assert pp.dtype == probs.dtype
        assert_bits_equal(pp, gp)
    steps = [s.name for s in ex.report.steps]
    assert steps == (["l0op::Transpose"] * (1 + (probs is not None)) + ["l0op::MoeTokenPermuteWithRoutingMap"]
                     + ["l0op::ViewCopy"] * (2 + (probs is not None)))
    kernel = _kernel_run(ex).kernel
    assert "MoePermuteProb" not in kernel
    assert ("Gatherv2SimtTwoDim::ProbProcess" in kernel) == (probs is not None)
    assert kernel.endswith("Gatherv2SimdTwoDim" if key == 9 else "Gatherv2SimtTwoDim::Process")


def test_the_cases_reach_every_gather_path():
    """The sweep's shapes take the paths it claims: SIMT prob gather on several cores, SIMT token gather with a
    longer last core, SIMD loops of fewer rows than a core has, index windows refilled, rows split."""
    from tiling.moe_token_permute_with_routing_map import moe_token_permute_with_routing_map as tile

    def fields(case):
        n, h, e, cap, extra, dt, pdt, soc, key, kw = CASES[case]
        tokens, rm, probs = _inputs(n, h, e, cap, dt, pdt, seed=0, **kw)
        return {k[11:]: v for k, v in tile(tokens, rm, probs, e * cap + extra, True, soc=soc).fields.items()
                if k.startswith("index_copy_")}
    f = fields("k19-fp16-probs-multicore-prob-gather")
    assert f["front_core_num"] > 1
    f = fields("k19-fp32-fp32probs-multicore")
    assert f["need_core_num"] > 1 and f["tail_core_num"] > f["core_calc_num"]
    f = fields("k9-small-ub-loops")
    row_bytes = f["once_ub_token_nums"] * f["one_token_btype_size"]
    assert f["core_calc_num"] > f["token_ub"] * f["one_token_btype_size"] // row_bytes
    f = fields("k9-small-ub-index-window")
    assert f["core_calc_num"] > f["once_indices"] == 2048
    f = fields("k9-small-ub-split-row")
    assert f["once_ub_token_nums"] * f["one_token_btype_size"] > f["token_ub"] * f["one_token_btype_size"]


@pytest.mark.parametrize("case", ["k19-bf16-bf16probs-empty-expert", "k9-bf16-fp32probs-cap1-head",
                                  "k9-small-ub-split-row"])
def test_pad_950_checked_mode_is_clean(case):
    (tokens, rm, probs, num_out), (pt, pp, si), ex = _run(case, check="race")
    report = _kernel_run(ex)
    # the one waiver: the pad sort's index row of N <= 8 tokens (ArithProgressionSupportInt32, moe_sort_base.h)
    assert report.extra["checked"] and (report.extra["waived_races"] > 0) == (tokens.shape[0] <= 8)
    gt, gp, gs, _ = permute_with_routing_map_golden(tokens, rm, probs, num_out, True)
    assert_bits_equal(pt, gt)
    assert np.array_equal(si, gs)


def _plan(soc, cols, probs):
    n, e = 10, 3
    tokens = np.zeros((n, cols), np.float16)
    rm = np.ones((n, e), bool)
    p = np.zeros((n, e), np.float16) if probs else None
    outs = allocate_outputs(tokens, rm, p, 15, True)
    _, ex = get_workspace_size(tokens, rm, p, 15, True, *outs, soc=soc)
    return ex.tiling.tiling_key, [(b.name, b.bytes, b.count, b.pipe) for b in ex.tiling.ub_plan]


SORT_ROWS = [(name, 32768, 1, "sortPipe2") for name in
             ("sortDataCopyInQueue", "sortDataCopyOutQueue", "indexConcatBuffer", "sortedBuffer")]


def test_ub_plans():
    """950 key 9: the sort, then Gatherv2SimdTwoDim's inQueue (2 x tokenUB * 8 bytes: fp16 rows of 1280 bytes
    move as 8-byte units; tokenUB = (253696 - 40960 - 8192) div 32 * 32 div 8 div 2 = 12784) and indexBuf (2048
    int32); key 19: the sort alone; both keep the SIMT data cache. 910B keeps MoePermuteProb's three TBufs."""
    simt = [("simtDataCache", 40960, 1, "SIMT")]
    assert _plan("ascend950", 640, True) == (9, SORT_ROWS + [("inQueue", 102272, 2, "MoeindexCopyPipe"),
                                                             ("indexBuf", 8192, 1, "MoeindexCopyPipe")] + simt)
    assert _plan("ascend950", 64, True) == (19, SORT_ROWS + simt)
    assert _plan("ascend950", 64, False) == (19, SORT_ROWS + simt)
    assert _plan("ascend910b", 640, True) == (9, SORT_ROWS + [("inQue", 2048, 1, "sortPipe"),
                                                              ("indiceQue", 4096, 1, "sortPipe"),
                                                              ("outQue", 2048, 1, "sortPipe")])


def test_910b_pad_keeps_the_host_gather_and_moe_permute_prob():
    tokens, rm, probs = _inputs(10, 640, 3, 5, "fp16", "fp16", seed=1)
    outs = allocate_outputs(tokens, rm, probs, 15, True)
    size, ex = get_workspace_size(tokens, rm, probs, 15, True, *outs, soc="ascend910b")
    run(np.empty(size, np.uint8), size, ex)
    assert [s.name for s in ex.report.steps] == ["l0op::Transpose", "l0op::Transpose",
                                                 "l0op::MoeTokenPermuteWithRoutingMap", "l0op::ViewCopy",
                                                 "l0op::ViewCopy", "l0op::GatherV2", "l0op::ViewCopy"]
    assert ex.report.steps[2].run.kernel == "MoeSortMultiLastDimCore<uint8_t> + SyncAll + MoePermuteProb"
    gt, gp, gs, _ = permute_with_routing_map_golden(tokens, rm, probs, 15, True)
    assert_bits_equal(outs[0], gt)
    assert_bits_equal(outs[1], gp)


# --- Copy(dst, src, count) ----------------------------------------------------------------------------------------
@global_aicore
def _copy_count_kernel(c, p, src, dst):
    """src (64 bytes) into UB at 0; Copy p[2] bytes from UB byte p[1] to UB byte p[0]; the 96 UB bytes out."""
    ub = asc.tbuf_get(c, 0, asc.ub_u8(c))
    asc.duplicate(c, asc.tbuf_get(c, 0, asc.ub_u16(c)), np.uint16(0xEEEE), 48)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.data_copy(c, ub, src, 64)
    asc.sync_pipes(c, asc.MTE2_V)
    asc.copy_count(c, ub[p[0]:], ub[p[1]:], p[2])
    asc.sync_pipes(c, asc.V_MTE3)
    asc.data_copy(c, dst, ub, 96)


def test_copy_count_by_hand():
    """Bytes 0..63 = 0..63 in UB, the rest 0xEE: Copy(ub[64], ub[0], 5) makes UB bytes 64..68 = 0, 1, 2, 3, 4
    and leaves 69..95 alone; Copy(ub[32], ub[0], 0) changes nothing."""
    src = np.arange(64, dtype=np.uint8)
    for p, want_tail in (((64, 0, 5), [0, 1, 2, 3, 4] + [0xEE] * 27), ((32, 0, 0), [0xEE] * 32)):
        dst = np.zeros(96, np.uint8)
        run_stages([_copy_count_kernel], [tbuf("ub", 96)], np.array(p, np.int64), asc.GlobalTensor(src, 0, 0),
                   asc.GlobalTensor(dst, 1, 0), chip=get_soc("ascend950"))
        assert dst[:64].tolist() == list(range(64)) and dst[64:].tolist() == want_tail


def test_copy_count_needs_aligned_operands():
    with pytest.raises(AlignmentError):
        run_stages([_copy_count_kernel], [tbuf("ub", 96)], np.array((65, 0, 5), np.int64),
                   asc.GlobalTensor(np.arange(64, dtype=np.uint8), 0, 0),
                   asc.GlobalTensor(np.zeros(96, np.uint8), 1, 0), chip=get_soc("ascend950"))


@pytest.mark.parametrize("hidden,num_out", [(8, 3), (0, 12)], ids=["capacity0-extra3", "hidden0-cap3"])
def test_pad_950_degenerate(hidden, num_out):
    """Capacity 0 (numOutTokens 3 < E = 4): no slot, nothing launched. Hidden size 0: the kernel still runs
    (key 19: no SIMD row to move) and writes sortedIndices and permuteProbs."""
    tokens, rm, probs = _inputs(6, hidden, 4, 0, "fp16", "fp16", seed=5)
    outs = allocate_outputs(tokens, rm, probs, num_out, True)
    size, ex = get_workspace_size(tokens, rm, probs, num_out, True, *outs, soc="ascend950")
    run(np.empty(size, np.uint8), size, ex)
    _, gp, gs, rows = permute_with_routing_map_golden(tokens, rm, probs, num_out, True)
    assert outs[0].shape == (rows, hidden) and np.array_equal(outs[2], gs)
    assert_bits_equal(outs[1], gp)
    launched = _kernel_run(ex) is not None
    assert launched == (rows > 0) and (not launched or ex.tiling.tiling_key == 19)


# --- Gatherv2SimdTwoDim alone, on hand-chosen indices -------------------------------------------------------------
def _simd_gather(indices, tokens, *, cores, token_ub_units, soc="ascend950"):
    """Launch only the SIMD token gather on `cores` cores with the tiling's split rule (coreCalcNum rows each,
    the first tailCoreNum one more) and a buffer of token_ub_units units; returns (out, RunReport)."""
    from ascend_sim import Kernel, PipePhase, UbBuffer, launch
    from ops.permute_with_routing_map.gather_arch35 import (
        SIMD_BUFFERS,
        GatherTilingData,
        gather_simd_stage,
        simd_gather_gm,
    )
    rows = indices.size
    unit = 8 if tokens.shape[1] * tokens.itemsize % 8 == 0 else tokens.itemsize
    td = GatherTilingData(n=tokens.shape[0], capacity=0, need_core_num=cores, front_core_num=0,
                          tail_core_num=rows % cores, core_calc_num=rows // cores, one_token_btype_size=unit,
                          once_ub_token_nums=tokens.shape[1] * tokens.itemsize // unit, once_indices_token_nums=0,
                          once_indices=2048, front_core_loop=0, tail_core_loop=0, token_ub=token_ub_units)
    out = np.zeros((rows, tokens.shape[1]), tokens.dtype)
    gm = simd_gather_gm(asc.GlobalTensor(tokens.reshape(-1), 0, 0), asc.GlobalTensor(indices, 1, 0),
                        asc.GlobalTensor(out.reshape(-1), 2, 0))
    plan = (UbBuffer("inQueue", token_ub_units * unit, 2, "TQueBind", "VECIN->VECOUT", 2, "MoeindexCopyPipe"),
            UbBuffer("indexBuf", 2048 * 4, pipe="MoeindexCopyPipe"))
    kernel = Kernel("MoeTokenPermuteWithRoutingMap", "Gatherv2SimdTwoDim",
                    (PipePhase("MoeindexCopyPipe", SIMD_BUFFERS, (gather_simd_stage,)),))
    report = launch(kernel, block_dim=cores, plan=plan, args=(td, gm), chip=get_soc(soc), tiling_key=9,
                    check="race")
    return out, report


def test_simd_gather_copies_a_token_seen_in_the_last_three_rows_from_ub():
    """One core, rows 5 5 7 5 9 8 7 5 of 64-byte fp32 rows: 5 (in), 5 (Copy from row 0), 7 (in), 5 (Copy: 5 is
    the last-but-one copied), 9 (in), 8 (in), 7 (Copy: the last three copied are 8 9 7), 5 (in: 5 dropped out
    of them). So 5 rows of 64 bytes and 32 index bytes come from GM, 3 x 64 bytes move by Copy, and one
    8-row DataCopyPad leaves."""
    tokens = np.arange(10 * 16, dtype=np.float32).reshape(10, 16)
    idx = np.array([5, 5, 7, 5, 9, 8, 7, 5], np.int32)
    out, report = _simd_gather(idx, tokens, cores=1, token_ub_units=64)
    assert np.array_equal(out, tokens[idx])
    core = report.cores[0]
    assert (core.mte2_bytes, core.vec_elem_ops, core.mte3_bytes, core.mte3_instr) == (5 * 64 + 32, 3 * 64, 8 * 64, 1)


def test_simd_gather_loops_and_splits_rows():
    """Two cores, 7 rows (4 + 3) of 80-byte fp16 rows (10 8-byte units, aligned to 96 bytes in UB): a 24-unit
    buffer (192 bytes) holds 2 rows, so core 0 loops twice, core 1 twice (2 + 1); a 4-unit buffer (32 bytes)
    is narrower than a row: each row goes in pieces of 4, 4, 2 units."""
    tokens = np.arange(6 * 40, dtype=np.float16).reshape(6, 40)
    idx = np.array([3, 0, 5, 1, 2, 4, 0], np.int32)
    out, report = _simd_gather(idx, tokens, cores=2, token_ub_units=24)
    assert np.array_equal(out, tokens[idx]) and [c.mte3_instr for c in report.cores] == [2, 2]
    out, report = _simd_gather(idx, tokens, cores=2, token_ub_units=4)
    assert np.array_equal(out, tokens[idx]) and [c.mte3_instr for c in report.cores] == [4 * 3, 3 * 3]
