"""The token copy of MoeInitRoutingV2 on arch35: MoeV2GatherOutSimt<T> and MoeV2ScatterOutBatchRow<T>.

source: moe/moe_init_routing_v2/op_kernel/arch35/moe_v2_gather_out_for_simt.h and moe_v2_scatter_out_batch_row.h
@ 25fb6b92890d.

Both write expanded_x[dst] = x[slot // k] for the output rows dst < activateRows (slot = the flat slot sorted to
row dst); they only move bits, so each compiles once per element width (x and expanded_x as uint16 for fp16 /
bf16, float32 for fp32).

* MoeV2GatherOutSimt (scatterMode 0; despite its name it makes no SIMT call): cores take gatherOut's share of
  slots; per loop of rows they copy expandedRowIdx (slot -> row) into UB, load each source token row (or a window
  of perLoopCols columns) once and write it to every row its k slots go to, skipping rows at or past
  activateRows. (sic) The last core takes perCoreLoops loops and the others lastCoreLoops.
* MoeV2ScatterOutBatchRow (scatterMode 1: row bytes a multiple of 32, k <= 6, dropless): cores take the output
  rows in order; per loop they copy expandDstToSrcRow (row -> slot) from the workspace, gather ubRowsPerLoop
  (the tiling's perLoopCols) token rows into UB and write them as one multi-row DataCopyPad. (sic) The first
  loop copies perLoopRows indices even when the core's only loop has fewer rows; (sic) the row copy-in follows
  AllocTensor with no MTE3 -> MTE2 event (a real race, waived in kernel.py).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common.moe_sort import _align

GatherGm = namedtuple("GatherGm", ["x", "expanded_row_idx", "expanded_x", "ws_i32"])
"""x (n * cols, carrier of T), expandedRowIdx (int32, n * k), expandedX (activeRows * cols), the workspace as
int32."""

# MoeV2GatherOutSimt buffers
GATHER_BUFFERS = ("inputActivationsCopyInQueue",        # TQueBind<VECIN, VECOUT>
                  "expandedRowIdxIndexCopyInQueue")    # TQue<VECIN>
GATHER_IN_QUEUE, GATHER_IDX_QUEUE = asc.buffer_ids(GATHER_BUFFERS, *GATHER_BUFFERS)
# MoeV2ScatterOutBatchRow buffers
SCATTER_BUFFERS = ("outputRowsQueue",                   # TQue<VECOUT>
                   "dstToSrcIndexQueue")                # TQue<VECIN>
SCATTER_OUT_QUEUE, SCATTER_IDX_QUEUE = asc.buffer_ids(SCATTER_BUFFERS, *SCATTER_BUFFERS)
DROPLESS_MODE = 0


# --- MoeV2GatherOutSimt -----------------------------------------------------------------------------------------
@aicore
def _gather_core(td, block_idx):
    """(coreRows, perLoopRows, lastLoopRows, rowLoops) of MoeV2GatherOutSimt::Init, loop counts swapped (sic)."""
    if block_idx == td.gather_out_need_core_num - 1:
        return (td.gather_out_last_core_rows, td.gather_out_last_core_per_loop_rows,
                td.gather_out_last_core_last_loop_rows, td.gather_out_per_core_loops)
    return (td.gather_out_per_core_rows, td.gather_out_per_core_per_loop_rows, td.gather_out_per_core_last_loop_rows,
            td.gather_out_last_core_loops)


@aicore
def _gather_copy_out(c, td, gm, indices_local, progress, per_loop_rows, current_loop_rows, per_loop_cols,
                     last_loop_cols, activate_rows):
    """CopyOut(progress): each source row of the loop's slots is loaded once per column window and written to the
    rows its slots go to."""
    X = asc.ub_like(c, gm.x)
    cols = td.cols
    k = td.k
    col_loops = td.gather_out_col_loops
    asc.sync_pipes(c, asc.MTE2_S)
    cols_tile = per_loop_cols
    for cols_loop in range(col_loops):
        initial_row = td.gather_out_per_core_rows * c.block_idx + per_loop_rows * progress
        cur_loop_row = 0
        if cols_loop == col_loops - 1:
            cols_tile = last_loop_cols
        start_row = initial_row // k
        last_row = (initial_row + current_loop_rows - 1) // k
        params = asc.DataCopyExtParams(1, cols_tile * gm.x.data.itemsize, 0, 0)
        for row in range(start_row, last_row + 1):
            in_local = asc.alloc_tensor(c, GATHER_IN_QUEUE, X)
            asc.data_copy_pad(c, in_local, asc.gm_at(gm.x, row * cols + cols_loop * per_loop_cols), params,
                              asc.NO_PAD)
            asc.en_que(c, GATHER_IN_QUEUE, in_local)
            in_local = asc.de_que(c, GATHER_IN_QUEUE, X)
            while cur_loop_row < current_loop_rows and initial_row // k == row:
                out_index = asc.get_value(c, indices_local, cur_loop_row)
                cur_loop_row += 1
                initial_row += 1
                if out_index == -1 or (td.drop_pad_mode == DROPLESS_MODE and out_index >= activate_rows):
                    continue
                asc.data_copy_pad(c, asc.gm_at(gm.expanded_x, np.int64(out_index) * cols + cols_loop * per_loop_cols),
                                  in_local, params)
            asc.free_tensor(c, GATHER_IN_QUEUE, in_local)


@aicore
def gather_out_process(c, td, gm):
    """MoeV2GatherOutSimt<T>::Init + Process (dropless: no zero fill)."""
    need = td.gather_out_need_core_num
    if c.block_idx >= need:
        return
    core_rows, per_loop_rows, last_loop_rows, row_loops = _gather_core(td, c.block_idx)
    activate_rows = td.gather_out_activate_rows
    if td.drop_pad_mode == 1:
        activate_rows = td.expert_capacity * td.expert_num
    if td.gather_out_per_loop_cols > td.cols:
        # whole rows in four buffers (the tiling doubled perLoopCols to say they fit)
        per_loop_cols = td.cols
        last_loop_cols = td.cols
    else:
        per_loop_cols = td.gather_out_per_loop_cols
        last_loop_cols = td.gather_out_last_loop_cols
    row_idx_gm = asc.gm_at(gm.expanded_row_idx, c.block_idx * td.gather_out_per_core_rows)
    current_loop_rows = per_loop_rows
    for loop in range(row_loops):
        if loop == row_loops - 1:
            current_loop_rows = last_loop_rows
        # CopyInIndices
        indices_local = asc.alloc_tensor(c, GATHER_IDX_QUEUE, asc.ub_i32(c))
        asc.data_copy_pad(c, indices_local, asc.gm_at(row_idx_gm, loop * per_loop_rows),
                          asc.DataCopyExtParams(1, current_loop_rows * 4, 0, 0), asc.NO_PAD)
        asc.en_que(c, GATHER_IDX_QUEUE, indices_local)
        # CopyOut
        indices_local = asc.de_que(c, GATHER_IDX_QUEUE, asc.ub_i32(c))
        _gather_copy_out(c, td, gm, indices_local, loop, per_loop_rows, current_loop_rows, per_loop_cols,
                         last_loop_cols, activate_rows)
        asc.free_tensor(c, GATHER_IDX_QUEUE, indices_local)


# --- MoeV2ScatterOutBatchRow ------------------------------------------------------------------------------------
@aicore
def _scatter_core(td, block_idx):
    """(perLoopRows, lastLoopRows, rowLoops) of MoeV2ScatterOutBatchRow::Init."""
    if block_idx == td.gather_out_need_core_num - 1:
        return (td.gather_out_per_core_per_loop_rows, td.gather_out_last_core_last_loop_rows,
                td.gather_out_last_core_loops)
    return td.gather_out_per_core_per_loop_rows, td.gather_out_per_core_last_loop_rows, td.gather_out_per_core_loops


@aicore
def _copy_in_dst_to_src(c, dst_to_src_gm, progress, per_loop_rows, loop_rows):
    """CopyInDstToSrcIndices(progress, loopRows)."""
    indices_local = asc.alloc_tensor(c, SCATTER_IDX_QUEUE, asc.ub_i32(c))
    asc.data_copy_pad(c, indices_local, asc.gm_at(dst_to_src_gm, progress * per_loop_rows),
                      asc.DataCopyExtParams(1, loop_rows * 4, 0, 0), asc.NO_PAD)
    asc.en_que(c, SCATTER_IDX_QUEUE, indices_local)


@aicore
def _scatter_out_one_block(c, td, gm, out_start, out_rows, index_offset, dst_to_src_local):
    """ScatterOutOneBlock: gather up to out_rows token rows into UB, write the valid ones as one DataCopyPad."""
    X = asc.ub_like(c, gm.x)
    cols = td.cols
    total = td.n * td.k
    activate_rows = td.gather_out_activate_rows
    out_rows_local = asc.alloc_tensor(c, SCATTER_OUT_QUEUE, X)
    valid_rows = min(out_rows, activate_rows - out_start)
    row_bytes = cols * gm.x.data.itemsize
    copy_in = asc.DataCopyExtParams(1, row_bytes, 0, 0)
    for i in range(out_rows):
        if i >= valid_rows:
            break
        slot = asc.get_value(c, dst_to_src_local, index_offset + i)
        if slot < 0 or slot >= total:
            continue
        src_row = np.int64(slot) // td.k
        if src_row < 0 or src_row >= td.n:
            continue
        asc.data_copy_pad(c, out_rows_local[i * cols:], asc.gm_at(gm.x, src_row * cols), copy_in, asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    if valid_rows > 0 and out_start < activate_rows:
        asc.data_copy_pad(c, asc.gm_at(gm.expanded_x, out_start * cols), out_rows_local,
                          asc.DataCopyExtParams(valid_rows, row_bytes, 0, 0))
    asc.free_tensor(c, SCATTER_OUT_QUEUE, out_rows_local)


@aicore
def _scatter_out_compute(c, td, gm, progress, per_loop_rows, loop_rows):
    """ScatterOutCompute(progress, loopRows): the loop's rows in blocks of ubRowsPerLoop."""
    dst_to_src_local = asc.de_que(c, SCATTER_IDX_QUEUE, asc.ub_i32(c))
    out_start = td.gather_out_per_core_rows * c.block_idx + per_loop_rows * progress
    if out_start >= td.gather_out_activate_rows:
        asc.free_tensor(c, SCATTER_IDX_QUEUE, dst_to_src_local)
        return
    ub_rows = td.gather_out_per_loop_cols      # ubRowsPerLoop
    blocks = (loop_rows + ub_rows - 1) // ub_rows
    for b in range(blocks):
        current = ub_rows
        remaining = loop_rows - b * ub_rows
        if remaining < ub_rows:
            current = remaining
        _scatter_out_one_block(c, td, gm, out_start + b * ub_rows, current, b * ub_rows, dst_to_src_local)
    asc.free_tensor(c, SCATTER_IDX_QUEUE, dst_to_src_local)


@aicore
def scatter_out_process(c, td, gm):
    """MoeV2ScatterOutBatchRow<T>::Init + Process: the next loop's indices are copied in after this loop's rows."""
    if c.block_idx >= td.gather_out_need_core_num:
        return
    per_loop_rows, last_loop_rows, row_loops = _scatter_core(td, c.block_idx)
    if row_loops == 0:
        return
    dst_to_src_gm = asc.gm_at(gm.ws_i32, _align(td.n * td.k, 4) + c.block_idx * td.gather_out_per_core_rows)
    _copy_in_dst_to_src(c, dst_to_src_gm, 0, per_loop_rows, per_loop_rows)
    for loop in range(row_loops):
        current = last_loop_rows if loop == row_loops - 1 else per_loop_rows
        _scatter_out_compute(c, td, gm, loop, per_loop_rows, current)
        if loop < row_loops - 1:
            following = last_loop_rows if loop + 1 == row_loops - 1 else per_loop_rows
            _copy_in_dst_to_src(c, dst_to_src_gm, loop + 1, per_loop_rows, following)


@global_aicore
def gather_out_stage(c, td, gm):
    gather_out_process(c, td, gm)


@global_aicore
def scatter_out_stage(c, td, gm):
    scatter_out_process(c, td, gm)
