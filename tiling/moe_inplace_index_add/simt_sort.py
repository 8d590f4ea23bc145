"""The SIMT-sort template of MoeInplaceIndexAdd (keys 5000ab;
op_host/arch35/moe_inplace_index_add_simt_sort_tiling.cpp): windows of ids spread over the cores, each window's
ids sorted (AscendC radix sort in a shared scratch) and cut into runs, the runs' update rows summed by SIMT
threads; as many pre rows of updates per window as fit.

source: moe/3rd/moe_inplace_index_add/op_host/arch35/moe_inplace_index_add_simt_sort_tiling.cpp @ 25fb6b92890d.
"""
from __future__ import annotations

from ascend_sim.pipe import UbBuffer

from ..common import BLOCK_BYTES, TilingResult, align_up, ceil_div, struct_fields, tdiv
from .base import (
    CAST_SIZE,
    HASH_BUCKET_BYTES,
    KEY_SIMT_SORT,
    LIB_WORKSPACE,
    SORT_PAD_BLOCKS,
    Shapes,
    cast_mode,
    radix_sort_tmp_bytes,
    sort_value_size,
    wide_offsets,
)

SIMT_SORT_FIELDS = (
    "pre_axis", "var_in_axis", "updates_in_axis", "after_axis", "indices_ub_factor", "indices_loop_size",
    "indice_axis_tail_num", "tail_block_indices_loop_size", "each_core_index_count", "sort_share_buf_size",
    "normal_updates_pre_num", "tail_updates_pre_num", "updates_pre_loop", "used_core_num", "indices_stride",
    "indices_cast_mode",
)

SIMT_SORT_SIMD_RESERVED = 8 * 1024   # SIMD_RESERVED_SIZE of the SIMT-sort tiling

def _index_bytes(s: Shapes, mode: int, n: int) -> int:
    """UB of the id buffers for a window of n ids: ids in (x2 in the tiling's count), cast ids (x2), origin
    positions, and the run counts, each block-aligned, plus the sort pads."""
    blk = BLOCK_BYTES
    total = align_up(n * s.index_size, blk) * 2
    if mode:
        total += align_up(n * CAST_SIZE[mode], blk) * 2
    return total + align_up(n * 4, blk) + blk * 2 + align_up(n * 4, blk) + blk * 2


def _window(s: Shapes, mode: int, ub_size: int) -> int:
    """computeIndicesUbFactor: the largest id window whose buffers, sort scratch and one pre row of updates fit
    (bisection over [1, indices + 1))."""
    start, end = 1, s.indices_axis + 1
    while end - start > 1:
        mid = (end + start) // 2
        total = (_index_bytes(s, mode, mid) + align_up(radix_sort_tmp_bytes(mid, sort_value_size(s, mode)),
                                                                  BLOCK_BYTES)
                 + align_up(mid * s.after_axis * s.var_size, BLOCK_BYTES) + HASH_BUCKET_BYTES)
        if total <= ub_size:
            start = mid
        else:
            end = mid
    return start


def _split(s: Shapes, cores: int, window: int) -> tuple[int, int, int, int, int]:
    """(loops per core, used cores, tail core's loops, ids of the tail core's last loop, windows)."""
    total = ceil_div(s.indices_axis, window)
    loops = ceil_div(total, cores)
    used = ceil_div(total, loops)
    tail_loops = total - loops * (used - 1)
    tail_num = s.indices_axis - window * loops * (used - 1) - window * (tail_loops - 1)
    return loops, used, tail_loops, tail_num, total


def simt_sort(s: Shapes, soc, ub_size: int) -> TilingResult:
    """The SIMT-sort tiling; ub_size: the UB left after the SIMT data cache, bytes."""
    cores = soc.aiv_num
    mode = cast_mode(s)
    ub = ub_size - SIMT_SORT_SIMD_RESERVED
    window = _window(s, mode, ub)
    loops, used, tail_loops, tail_num, _ = _split(s, cores, window)
    while used < tdiv(cores, 2) and window > 1:       # halve the window until half the cores have work
        window = tdiv(window, 2)
        loops, used, tail_loops, tail_num, _ = _split(s, cores, window)
    share = radix_sort_tmp_bytes(window, sort_value_size(s, mode))
    index_bytes = _index_bytes(s, mode, window)
    pre_num = s.pre_axis
    for n in range(2, s.pre_axis + 1):                # more pre rows of updates per id window while they fit
        if index_bytes + share + align_up(window * s.after_axis * s.var_size, BLOCK_BYTES) * n + HASH_BUCKET_BYTES \
                > ub:
            pre_num = n - 1
            break
    pre_loop = ceil_div(s.pre_axis, pre_num)
    f = struct_fields(SIMT_SORT_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, indices_ub_factor=window, indices_loop_size=loops, indice_axis_tail_num=tail_num,
             tail_block_indices_loop_size=tail_loops, each_core_index_count=window * loops, sort_share_buf_size=share,
             normal_updates_pre_num=pre_num, tail_updates_pre_num=s.pre_axis - pre_num * (pre_loop - 1),
             updates_pre_loop=pre_loop, used_core_num=used, indices_stride=1, indices_cast_mode=mode)
    blk = BLOCK_BYTES
    sort_size = sort_value_size(s, mode)
    plan: tuple[UbBuffer, ...]
    plan = (UbBuffer("indicesInQueue_", align_up(window * s.index_size, blk), 1, "TQue", "VECIN", 1),
            UbBuffer("updatesInQueue_", align_up(window * s.after_axis * s.var_size, blk) * pre_num, 1, "TQue",
                     "VECIN", 1),
            UbBuffer("updatesOriginIdexQue_", align_up(window * 4, blk)),
            UbBuffer("uniqueIdCountQue_", align_up(window * 4, blk) + SORT_PAD_BLOCKS * blk),
            UbBuffer("sharedTmpBuf_", align_up(share, blk)),
            UbBuffer("hashBuffer_", HASH_BUCKET_BYTES),
            UbBuffer("sortIndicesQue_", align_up(window * sort_size, blk) + SORT_PAD_BLOCKS * blk))
    if mode:
        plan += (UbBuffer("castIndicesQue_", align_up(window * sort_size, blk)),)
    return TilingResult(tiling_key=KEY_SIMT_SORT + 10 * wide_offsets(s) + s.with_alpha, block_dim=used,
                        workspace_size=LIB_WORKSPACE, fields=f, ub_plan=plan, schedule_mode=1, soc=soc)
