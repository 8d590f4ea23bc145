"""MoeInitRoutingV3 arch35 tiling: the UB plan, one row per InitBuffer call of the kernels a key runs.

source: moe/moe_init_routing_v3/op_kernel/moe_init_routing_v3_apt.cpp (the pipes each key builds: the
EMPTY_TENSOR branch's TPipe, sortPipe, histogramPipe, rowIdxPipe / rowIdxGatherDropPadPipe, gatherPipe) and the
Init of op_kernel/arch35/moe_v3_sort_one_core.h, moe_v3_sort_multi_core.h, moe_v3_expert_tokens_count.h,
moe_v3_row_idx_gather.h, moe_v3_row_idx_gather_droppad.h, moe_v3_gather_out.h, moe_v3_gather_out_droppad.h,
moe_v3_gather_mxfp8_quant.h, moe_v3_gather_mxfp4_quant.h @ 25fb6b92890d
"""
from __future__ import annotations

from ascend_sim.pipe import UbBuffer

from ..common import align_bytes, ceil_div
from .base import (
    DROPPAD,
    KEY_VALUE,
    MX_QUANT_BLOCK_SIZE,
    MXFP4_E2M1,
    MXFP8_E5M2,
    MXFP8_ROUNDSCALE_AMAX_E5M2,
    SORT32_ALIGN_ELEMENT,
    TILINGKEY_BASE,
    align,
)

GATHER_OUT_BUFFER_NUM = 2            # moe_v3_common.h
INT32_ONE_BLOCK_NUM = 8


def empty_tensor_plan(f: dict) -> tuple[UbBuffer, ...]:
    """The EMPTY_TENSOR branch: one TBuf of int64 zeros for expert_tokens_count_or_cumsum (expertNum * 2 for the
    key-value type, else the active experts)."""
    count = f["expert_num"] * 2 if f["expert_tokens_num_type"] == KEY_VALUE else f["actual_expert_num"]
    return (UbBuffer("zeroBuf", align_bytes(count, 8), pipe="pipe"),)


def _sort_plan(f: dict, key: int, block_idx: int) -> tuple[UbBuffer, ...]:
    if (key // 1000000) % 10 == 0:
        # MoeSortOneCore::Init: keys and row ids side by side (two int32 per key) in each buffer
        tile = align(f["vbs_last_core_per_loop_elements"], 4)
        nbytes = ceil_div(tile, SORT32_ALIGN_ELEMENT) * SORT32_ALIGN_ELEMENT * 4 * 2
        return (UbBuffer("sortDataCopyInQueue", nbytes, 1, "TQue", "VECIN", 1, "sortPipe"),
                UbBuffer("sortDataCopyOutQueue", nbytes, 1, "TQue", "VECOUT", 1, "sortPipe"),
                UbBuffer("tempBuffer", nbytes, pipe="sortPipe"), UbBuffer("sortedBuffer", nbytes, pipe="sortPipe"))
    # MoeSortMultiCore::Init: room for this core's loop of keys or the four SortOut windows, 2 int32 a key
    last = block_idx == f["vbs_need_core_num"] - 1
    loop = f["vbs_last_core_per_loop_elements"] if last else f["vbs_per_core_per_loop_elements"]
    nbytes = ceil_div(max(f["sort_out_one_loop_max_elements"] * 4, loop), SORT32_ALIGN_ELEMENT) \
        * SORT32_ALIGN_ELEMENT * 4 * 2
    return (UbBuffer("sortDataCopyInQueue", nbytes, 1, "TQue", "VECIN", 1, "sortPipe"),
            UbBuffer("sortDataCopyOutQueue", nbytes, 1, "TQue", "VECOUT", 1, "sortPipe"),
            UbBuffer("sortedBuffer", nbytes, pipe="sortPipe"), UbBuffer("tempBuffer", nbytes, pipe="sortPipe"))


def _count_plan(f: dict, block_idx: int) -> tuple[UbBuffer, ...]:
    """ExpertTokensCount::Init (histogramPipe)."""
    p = "expert_tokens_count_"
    who = "last_core" if block_idx == f[p + "need_core_num"] - 1 else "per_core"
    in_len = max(f[f"{p}{who}_per_loop_elements"], f[f"{p}{who}_last_loop_elements"])
    actual = f["actual_expert_num"]
    if f["expert_tokens_num_type"] == KEY_VALUE:
        counts = (actual + 1) * 2 if actual + 1 < f["expert_num"] else f["expert_num"] * 2
    else:
        counts = actual
    pipe = "histogramPipe"
    plan: tuple[UbBuffer, ...]
    plan = (UbBuffer("sortedExpertIdxInQueue", align_bytes(in_len, 4), 1, "TQue", "VECIN", 1, pipe),
            UbBuffer("expertCountOutToTempQueue", align_bytes(actual, 4), 1, "TQue", "VECOUT", 1, pipe),
            UbBuffer("expertCountTempInQueue", align_bytes(actual, 4), 1, "TQue", "VECIN", 1, pipe),
            UbBuffer("expertIdxCountOutQueue", align_bytes(counts, 8), 1, "TQue", "VECOUT", 1, pipe))
    if f["drop_pad_mode"] != DROPPAD:
        # only dropless runs hand the total count to the gather kernels
        plan += (UbBuffer("expertTotalCountQueue", align_bytes(1, 4), 1, "TQue", "VECOUT", 1, pipe),)
    return plan


def _row_idx_gather_plan(f: dict, block_idx: int) -> tuple[UbBuffer, ...]:
    """RowIdxGather::Init (rowIdxPipe): the count kernel's cores re-split the expert total count (taken as n * k
    here) with its per-loop figure; one loop of sorted row ids and one 32-byte block out."""
    total = f["n"] * f["k"]
    per_core = ceil_div(total, f["expert_tokens_count_need_core_num"])
    need = ceil_div(total, per_core)
    elems = total - (need - 1) * per_core if block_idx == need - 1 else per_core
    loops = ceil_div(elems, f["expert_tokens_count_per_core_per_loop_elements"])
    per_loop = ceil_div(elems, loops)
    pipe = "rowIdxPipe"
    return (UbBuffer("sortedExpertIndicesInQueue", align_bytes(per_loop, 4), 1, "TQue", "VECIN", 1, pipe),
            UbBuffer("copyOutQueue", align_bytes(1, 4), 1, "TQue", "VECOUT", 1, pipe))


def _row_idx_gather_drop_pad_plan(f: dict, block_idx: int) -> tuple[UbBuffer, ...]:
    """MoeV3RowIdxGatherDropPad::Init (rowIdxGatherDropPadPipe): a loop of (expert id, source row) int32 pairs and
    one block of int32 out."""
    p = "src_to_dst_drop_pad_"
    who = "last_core" if block_idx == f[p + "need_core_num"] - 1 else "per_core"
    pipe = "rowIdxGatherDropPadPipe"
    return (UbBuffer("copyInQueue", align_bytes(f[f"{p}{who}_per_loop_rows"], 4) * 2, 1, "TQue", "VECIN", 1, pipe),
            UbBuffer("copyOutQueue", align_bytes(INT32_ONE_BLOCK_NUM, 4), 1, "TQue", "VECOUT", 1, pipe))


def _gather_drop_pad_plan(f: dict, block_idx: int, x_bytes: int) -> tuple[UbBuffer, ...]:
    """MoeV3GatherOutDropPad::Init (gatherPipe): indices (or, compact, output-row sources), one scale per row with
    a scale input, x rows; double-buffered at least."""
    g = "gather_out_"
    who = "last_core" if block_idx == f[g + "need_core_num"] - 1 else "per_core"
    pipe = "gatherPipe"
    plan: tuple[UbBuffer, ...]
    plan = (UbBuffer("expandedRowIdxCopyInQueue", align_bytes(f[f"{g}{who}_per_loop_indices_elements"], 4),
                     GATHER_OUT_BUFFER_NUM, "TQue", "VECIN", GATHER_OUT_BUFFER_NUM, pipe),)
    if f["is_input_scale"] == 1:
        plan += (UbBuffer("scaleCopyInQueue", align_bytes(1, 4), GATHER_OUT_BUFFER_NUM, "TQue", "VECIN",
                          GATHER_OUT_BUFFER_NUM, pipe),)
    bufs = max(f[g + "x_copy_in_queue_buffer_num"], GATHER_OUT_BUFFER_NUM)
    return plan + (UbBuffer("xCopyInQueue", align_bytes(f[g + "per_loop_cols"], x_bytes), bufs, "TQue", "VECIN",
                            bufs, pipe),)


def _gather_plan(f: dict, block_idx: int, x_bytes: int) -> tuple[UbBuffer, ...]:
    """MoeGatherOut::Init (gatherPipe): the loop's sorted row ids, its x rows (TQueBind) and one float scale per
    row; a core's rows come from the expert total count: n * k here (all active)."""
    g = "gather_out_"
    total = f["n"] * f["k"]
    per_core = ceil_div(total, f["core_num"])
    need = ceil_div(total, per_core) if per_core else 0
    if block_idx == need - 1:
        per_loop = min(f[g + "last_core_per_loop_indices_elements"], total - (need - 1) * per_core)
    else:
        per_loop = min(f[g + "per_core_per_loop_indices_elements"], per_core)
    bufs = max(f[g + "x_copy_in_queue_buffer_num"], GATHER_OUT_BUFFER_NUM)
    pipe = "gatherPipe"
    return (UbBuffer("expandedRowIdxCopyInQueue", align_bytes(per_loop, 4), GATHER_OUT_BUFFER_NUM, "TQue", "VECIN",
                     GATHER_OUT_BUFFER_NUM, pipe),
            UbBuffer("xCopyInQueue", per_loop * align_bytes(f[g + "per_loop_cols"], x_bytes), bufs, "TQueBind",
                     "VECIN->VECOUT", GATHER_OUT_BUFFER_NUM, pipe),
            UbBuffer("scaleCopyInQueue", per_loop * align_bytes(1, 4), GATHER_OUT_BUFFER_NUM, "TQueBind",
                     "VECIN->VECOUT", GATHER_OUT_BUFFER_NUM, pipe))


def _mx_gather_plan(f: dict, fp4: bool, x_bytes: int) -> tuple[UbBuffer, ...]:
    """MoeGatherOutMxfp8Quant::Init / MoeV3GatherMxfp4Quant::Init (gatherPipe): row indices, a token piece, its
    codes and scales (two buffers each for MXFP8, one for MXFP4), the block maxima and inverse scales. The row
    buffer is sized for perLoopRows, which the kernel takes as min(its rows, the tiling's per-loop count): the
    larger per-loop count bounds it on every core."""
    g = "gather_out_"
    rows = max(f[g + "per_core_per_loop_indices_elements"], f[g + "last_core_per_loop_indices_elements"], 1)
    cols = f[g + "per_loop_cols"]
    scale_cols = cols // MX_QUANT_BLOCK_SIZE
    num = 1 if fp4 else GATHER_OUT_BUFFER_NUM
    pipe = "gatherPipe"
    return (UbBuffer("sortedRowIdxInQueue", align_bytes(rows, 4), num, "TQue", "VECIN", num, pipe),
            UbBuffer("xInQueue", align_bytes(cols, x_bytes), num, "TQue", "VECIN", num, pipe),
            UbBuffer("xQuantOutQueue", align_bytes(cols // 4, 1) * 4, num, "TQue", "VECOUT", num, pipe),
            UbBuffer("mxScaleOutQueue", align_bytes(scale_cols, 1), num, "TQue", "VECOUT", num, pipe),
            UbBuffer("maxExpBuffer", align_bytes(scale_cols, x_bytes), pipe=pipe),
            UbBuffer("invScaleBuffer", align_bytes(scale_cols, x_bytes), pipe=pipe))


def ub_plan(f: dict, key: int, block_idx: int = 0, x_bytes: int = 0, mx_no_quant: bool = False
            ) -> tuple[UbBuffer, ...]:
    """InitBuffer calls of core `block_idx` for the sort templates (key >= 10000000): the one-core or multi-core
    sort (sortPipe; the VMS and SortOut merges reuse its buffers), the expert-token count (histogramPipe), the
    row-index gather (rowIdxPipe, GATHER row indices; rowIdxGatherDropPadPipe for drop-pad), and the gathers
    modelled so far (gatherPipe): the drop-pad gather, the unquantised dropless MoeGatherOut and the MXFP8 /
    MXFP4 quantising gathers (`x_bytes`: x's element size; `mx_no_quant`: x holds MX elements, whose gathers are
    other kernels). The other quantising gathers and the full-load templates are not listed yet (their pipes are
    absent, not empty); the empty-tensor branch is empty_tensor_plan.

    Kernels that size buffers from the expert total count the sort finds at run time take it as n * k here (every
    slot active), the largest the buffers get."""
    if key < TILINGKEY_BASE:
        return ()
    drop_pad = f["drop_pad_mode"] == DROPPAD
    plan = _sort_plan(f, key, block_idx) + _count_plan(f, block_idx)
    if f["row_idx_type"] == 0:
        plan += _row_idx_gather_drop_pad_plan(f, block_idx) if drop_pad else _row_idx_gather_plan(f, block_idx)
    factor = (key // 10000) % 100
    if drop_pad:
        plan += _gather_drop_pad_plan(f, block_idx, x_bytes)
    elif factor in (MXFP8_E5M2 + 1, MXFP8_ROUNDSCALE_AMAX_E5M2 + 1, MXFP4_E2M1 + 1):
        plan += _mx_gather_plan(f, factor == MXFP4_E2M1 + 1, x_bytes)
    elif factor == 0 and not mx_no_quant:
        plan += _gather_plan(f, block_idx, x_bytes)
    return plan
