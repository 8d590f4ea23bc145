"""MoeInplaceIndexAddDeterminsticNotQuant (op_kernel/arch35/moe_inplace_index_add_determinstic_notquant.h with the
base class of moe_inplace_index_add_common.h): keys 300000 / 300001 / 300002 with isSplitPreAxis or
isSplitAfterAxis (the deterministic switch on, float32 / float16 / bfloat16 var), int32 ids, no alpha.

source: moe/3rd/moe_inplace_index_add/op_kernel/arch35/moe_inplace_index_add_determinstic_notquant.h,
op_kernel/arch35/moe_inplace_index_add_common.h @ 25fb6b92890d.

The cores own disjoint parts of var: the column split gives core k the columns [k * eachCoreAfterAxisCount, ...)
of every row, the pre split the pre rows [k * eachCorePreAxisCount, ...). A core walks windows of ubIndexFactor
ids (the pre split with all ids in one window: batches of ubIndexFactor div updatesInAxis pre rows,
ProcessPreSmallIndices) and pieces of afterAxisFactor columns; per window and piece it copies the update rows in
(one strided DataCopyPad, each UB row padded to 32 bytes), copies them to the output queue (CopyXToOut, a byte
copy), and adds every row to var[pre, ids[i], piece] with an atomic DataCopyPad in T, slots ascending, a
PipeBarrier<PIPE_MTE3> between the copies. So every element gets its adds from one core in slot order, each rounded
to T: the same bits on every run (bit-exact against a slot-order golden).

The column split first counts the window's distinct ids (ComputeIdxCount: the base class's radix sort and run
cut); the count only decides whether the copies get their MTE3 barriers, which changes their timing, not their
order. The id split is MoeInplaceIndexAddDeterminstic, the quantising kernel (deterministic_quant.py).
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore
from ascend_sim.radix_sort import radix_sort_ascending

from .simd_sort import compute_unique_id_num

# Init's maxScoreBuf_, InitBaseBuffer's six, then the split's three queues
BUFFERS = ("maxScoreBuf_", "baseMaxScoreBuf_", "sortIndicesBuf_", "updatesOriginIdexQue_", "uniqueIdCountQue_",
           "updateSumIdxQue_", "indicesCastQue_", "indicesQue_", "updatesQue_", "updatesCastQue_")
(MAX_SCORE_BUF, BASE_MAX_SCORE_BUF, SORT_INDICES_BUF, ORIGIN_QUE, UNIQUE_COUNT_QUE, SUM_IDX_QUE, INDICES_CAST_QUE,
 INDICES_QUE, UPDATES_QUE, UPDATES_CAST_QUE) = range(10)


@aicore
def _col_align(col_len, size):
    return (np.int64(col_len) * size + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // size


@aicore
def copy_x_to_out(c, src, dst, count):
    """CopyXToOut (a VF): count elements of src to dst, byte for byte."""
    if not asc.vf_call(c, count) or not asc.vf_operand(c, src, count, False) or not asc.vf_operand(c, dst, count, True):
        return
    for i in range(count):
        dst[i] = src[i]


@aicore
def compute_idx_count(c, indices_local, row_len):
    """ComputeIdxCount: the window's ids sorted behind a block of -1 pads, an end pad, the runs counted; returns
    the run count (uniqueIdNumDuplicateIdx_)."""
    sort_local = asc.tbuf_get(c, SORT_INDICES_BUF, asc.ub_i32(c))
    count_local = asc.alloc_tensor(c, UNIQUE_COUNT_QUE, asc.ub_i32(c))
    origin_local = asc.alloc_tensor(c, ORIGIN_QUE, asc.ub_u32(c))
    shift = BLOCK_BYTES // 4
    radix_sort_ascending(c, sort_local[shift:], origin_local, indices_local, row_len)   # AscendC::Sort<IDX_T, false>
    asc.duplicate(c, sort_local, np.int32(-1), shift)
    asc.set_value(c, sort_local, shift + row_len, np.int32(-1))
    asc.pipe_barrier(c, asc.PIPE_V)
    unique = compute_unique_id_num(c, sort_local, shift, count_local, row_len)
    asc.free_tensor(c, UNIQUE_COUNT_QUE, count_local)
    asc.free_tensor(c, ORIGIN_QUE, origin_local)
    return unique


@aicore
def _updates_params(td, rows, col_len, size):
    return asc.DataCopyExtParams(rows, np.int64(col_len) * size, (td.after_axis - np.int64(col_len)) * size, 0)


@aicore
def _rows_to_output(c, T, updates_local, count):
    """updatesQue_ -> CopyXToOut -> updatesCastQue_ (enqueued); frees nothing."""
    out_local = asc.alloc_tensor(c, UPDATES_CAST_QUE, T)
    copy_x_to_out(c, updates_local, out_local, count)
    asc.en_que(c, UPDATES_CAST_QUE, out_local)


@aicore
def _copy_in_updates(c, td, gm, T, updates_offset, row_len, col_len, col_align):
    """CopyIn of a window's update rows (DataCopyPad to updatesQue_), CopyXToOut into updatesCastQue_; returns
    that buffer dequeued (the caller frees it)."""
    updates_local = asc.alloc_tensor(c, UPDATES_QUE, T)
    asc.data_copy_pad(c, updates_local, asc.gm_at(gm.updates, updates_offset),
                      _updates_params(td, row_len, col_len, T.itemsize), asc.NO_PAD)
    asc.en_que(c, UPDATES_QUE, updates_local)
    updates_local = asc.de_que(c, UPDATES_QUE, T)
    _rows_to_output(c, T, updates_local, row_len * col_align)
    asc.free_tensor(c, UPDATES_QUE, updates_local)
    return asc.de_que(c, UPDATES_CAST_QUE, T)


@aicore
def after_single_loop(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len):
    """ProcessAfterSingleLoop: one window x one column piece of this core's columns, every pre row."""
    T = asc.ub_like(c, gm.var)
    size = T.itemsize
    col_align = _col_align(col_len, size)
    indices_local = asc.alloc_tensor(c, INDICES_QUE, asc.ub_i32(c))
    indices_offset = np.int64(row_idx) * td.ub_index_factor
    asc.data_copy_pad(c, indices_local, asc.gm_at(gm.indices, indices_offset),
                      asc.DataCopyExtParams(1, row_len * 4, 0, 0), asc.NO_PAD)
    asc.en_que(c, INDICES_QUE, indices_local)
    indices_local = asc.de_que(c, INDICES_QUE, asc.ub_i32(c))
    unique = compute_idx_count(c, indices_local, row_len)
    asc.sync_pipes(c, asc.MTE2_S)
    columns = np.int64(c.block_idx) * td.each_core_after_axis_count + np.int64(col_idx) * td.after_axis_factor
    for pre in range(td.pre_axis):
        updates_offset = (np.int64(pre) * td.updates_in_axis + indices_offset) * td.after_axis + columns
        out_local = _copy_in_updates(c, td, gm, T, updates_offset, row_len, col_len, col_align)
        asc.set_atomic_add(c, tmpl.var_t)
        for i in range(row_len):
            out_offset = (np.int64(pre) * td.var_in_axis + asc.get_value(c, indices_local, i)) * td.after_axis \
                + columns
            if unique != row_len:
                asc.pipe_barrier(c, asc.PIPE_MTE3)
            asc.data_copy_pad(c, asc.gm_at(gm.var, out_offset), out_local[i * col_align:],
                              asc.DataCopyExtParams(1, col_len * size, 0, 0))
        asc.set_atomic_none(c)
        asc.free_tensor(c, UPDATES_CAST_QUE, out_local)
    asc.free_tensor(c, INDICES_QUE, indices_local)


@aicore
def _add_rows(c, td, gm, tmpl, indices_local, out_local, first_pre, pres, ids, col_idx, col_len, col_align):
    """The atomic copy-outs of `pres` pre rows x `ids` slots of out_local, slots ascending."""
    size = out_local.itemsize
    asc.set_atomic_add(c, tmpl.var_t)
    for p in range(pres):
        for i in range(ids):
            out_offset = ((np.int64(first_pre) + p) * td.var_in_axis + asc.get_value(c, indices_local, i)) \
                * td.after_axis + np.int64(col_idx) * td.after_axis_factor
            asc.data_copy_pad(c, asc.gm_at(gm.var, out_offset), out_local[(np.int64(p) * ids + i) * col_align:],
                              asc.DataCopyExtParams(1, col_len * size, 0, 0))
            asc.pipe_barrier(c, asc.PIPE_MTE3)
    asc.set_atomic_none(c)


@aicore
def pre_small_indices(c, td, gm, tmpl, pre_offset, col_idx, pre_len, col_len):
    """ProcessPreSmallIndices: every id in one window, pre_len pre rows of updates in one copy."""
    T = asc.ub_like(c, gm.var)
    size = T.itemsize
    col_align = _col_align(col_len, size)
    indices_local = asc.alloc_tensor(c, INDICES_QUE, asc.ub_i32(c))
    updates_local = asc.alloc_tensor(c, UPDATES_QUE, T)
    row_len = np.int64(pre_len) * td.updates_in_axis
    asc.data_copy_pad(c, indices_local, asc.gm_at(gm.indices, 0),
                      asc.DataCopyExtParams(1, td.updates_in_axis * 4, 0, 0), asc.NO_PAD)
    start_pre = np.int64(c.block_idx) * td.each_core_pre_axis_count + pre_offset
    updates_offset = start_pre * td.updates_in_axis * td.after_axis + np.int64(col_idx) * td.after_axis_factor
    asc.data_copy_pad(c, updates_local, asc.gm_at(gm.updates, updates_offset),
                      _updates_params(td, row_len, col_len, size), asc.NO_PAD)
    asc.en_que(c, UPDATES_QUE, updates_local)
    updates_local = asc.de_que(c, UPDATES_QUE, T)
    _rows_to_output(c, T, updates_local, row_len * col_align)
    out_local = asc.de_que(c, UPDATES_CAST_QUE, T)
    asc.sync_pipes(c, asc.MTE2_S)
    _add_rows(c, td, gm, tmpl, indices_local, out_local, start_pre, pre_len, td.updates_in_axis, col_idx, col_len,
              col_align)
    asc.free_tensor(c, UPDATES_QUE, updates_local)
    asc.free_tensor(c, UPDATES_CAST_QUE, out_local)
    asc.free_tensor(c, INDICES_QUE, indices_local)


@aicore
def pre_single_loop(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len, pre_count):
    """ProcessPreSingleLoop: one window x one column piece, this core's pre rows one by one."""
    T = asc.ub_like(c, gm.var)
    size = T.itemsize
    col_align = _col_align(col_len, size)
    indices_local = asc.alloc_tensor(c, INDICES_QUE, asc.ub_i32(c))
    indices_offset = np.int64(row_idx) * td.ub_index_factor
    asc.data_copy_pad(c, indices_local, asc.gm_at(gm.indices, indices_offset),
                      asc.DataCopyExtParams(1, row_len * 4, 0, 0), asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_S)
    start_pre = np.int64(c.block_idx) * td.each_core_pre_axis_count
    for pre in range(start_pre, start_pre + pre_count):
        updates_offset = (pre * td.updates_in_axis + indices_offset) * td.after_axis \
            + np.int64(col_idx) * td.after_axis_factor
        out_local = _copy_in_updates(c, td, gm, T, updates_offset, row_len, col_len, col_align)
        _add_rows(c, td, gm, tmpl, indices_local, out_local, pre, 1, row_len, col_idx, col_len, col_align)
        asc.free_tensor(c, UPDATES_CAST_QUE, out_local)
    asc.free_tensor(c, INDICES_QUE, indices_local)


@aicore
def process_pre(c, td, gm, tmpl):
    """ProcessDeterminsticPre."""
    last = c.block_idx == td.used_core_num_before - 1
    pre_count = td.tail_core_pre_axis_count if last else td.each_core_pre_axis_count
    col_loops = td.update_loop_size
    if td.indices_loop_size == 1:
        pre_factor = td.ub_index_factor // td.updates_in_axis
        pre_loops = (pre_count + pre_factor - 1) // pre_factor
        for pre_idx in range(pre_loops):
            pre_len = pre_count - pre_factor * (pre_loops - 1) if pre_idx == pre_loops - 1 else pre_factor
            for col_idx in range(col_loops):
                col_len = td.update_tail_num if col_idx == col_loops - 1 else td.after_axis_factor
                pre_small_indices(c, td, gm, tmpl, np.int64(pre_idx) * pre_factor, col_idx, pre_len, col_len)
        return
    for row_idx in range(td.indices_loop_size):
        row_len = td.indice_axis_tail_num if row_idx == td.indices_loop_size - 1 else td.ub_index_factor
        for col_idx in range(col_loops):
            col_len = td.update_tail_num if col_idx == col_loops - 1 else td.after_axis_factor
            pre_single_loop(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len, pre_count)


@aicore
def process_after(c, td, gm, tmpl):
    """ProcessDeterminsticAfter: the last core has its own column tail."""
    last = c.block_idx == td.used_core_num_before - 1
    col_loops = td.tail_update_loop_size if last else td.update_loop_size
    col_tail = td.tail_update_axis_num if last else td.update_tail_num
    for row_idx in range(td.indices_loop_size):
        row_len = td.indice_axis_tail_num if row_idx == td.indices_loop_size - 1 else td.ub_index_factor
        for col_idx in range(col_loops):
            col_len = col_tail if col_idx == col_loops - 1 else td.after_axis_factor
            after_single_loop(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len)


@global_aicore
def deterministic_process(c, td, gm, tmpl):
    """Process."""
    if c.block_idx >= td.used_core_num_before:
        return
    if td.is_split_pre_axis == 1:
        process_pre(c, td, gm, tmpl)
    elif td.is_split_after_axis == 1:
        process_after(c, td, gm, tmpl)
