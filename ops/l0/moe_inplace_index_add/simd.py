"""MoeInplaceIndexAddSimd (op_kernel/arch35/moe_inplace_index_add_simd.h): key 400000, the ProcessAfter branch
(isSplitAfterAxis: afterAxis * sizeof(var) >= 128 bytes per core), no alpha, int32 indices. It is the only branch
the selection lets this template reach: SIMD without sort needs afterAxis >= cores * 128 elements, hence at least
128 * cores bytes, so the tiling's ProcessPre / ProcessIndices branches are dead code.

source: moe/3rd/moe_inplace_index_add/op_kernel/arch35/moe_inplace_index_add_simd.h @ 25fb6b92890d.

Every core owns a slice of eachCoreAfterAxisCount columns. For each window of ubIndexFactor indices and each
piece of afterAxisFactor columns of its slice it copies the indices in, then per pre row the window's update rows
(one strided DataCopyPad, each UB row padded to 32 bytes), and adds every row to var[pre, indices[i]] with an
atomic DataCopyPad (SetAtomicAdd<T>), i ascending. No two cores touch one column, and a core's adds to one element
come in index order: the result is the slot-order sum, rounded to T after every add (fp32 RNE; fp16 / bf16
rounded once per add), the same bits on every run.

Alpha (never passed by the chains) is not modelled.
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore

BUFFERS = ("updatesQue_", "indicesQue_")     # ProcessAfter's InitBuffer order
UPDATES_QUE, INDICES_QUE = asc.buffer_ids(BUFFERS, "updatesQue_", "indicesQue_")


@aicore
def _after_single_loop(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len):
    """ProcessAfterSingleLoop."""
    T = asc.ub_like(c, gm.var)
    size = T.itemsize
    indices_local = asc.alloc_tensor(c, INDICES_QUE, asc.ub_i32(c))
    updates_local = asc.alloc_tensor(c, UPDATES_QUE, T)
    col_align = (col_len * size + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // size
    indices_offset = np.int64(row_idx) * td.ub_index_factor
    asc.data_copy_pad(c, indices_local, asc.gm_at(gm.indices, indices_offset),
                      asc.DataCopyExtParams(1, row_len * 4, 0, 0), asc.NO_PAD)     # CopyIn
    asc.sync_pipes(c, asc.MTE2_S)
    col_offset = np.int64(td.after_axis_factor) * col_idx
    block_count = np.int64(c.block_idx) * td.each_core_after_axis_count
    params = asc.DataCopyExtParams(row_len, col_len * size, (td.after_axis - col_len) * size, 0)
    for pre in range(td.pre_axis):
        updates_offset = (pre * td.updates_in_axis + indices_offset) * td.after_axis + block_count + col_offset
        asc.sync_pipes(c, asc.MTE3_MTE2)
        asc.data_copy_pad(c, updates_local, asc.gm_at(gm.updates, updates_offset), params, asc.NO_PAD)
        asc.sync_pipes(c, asc.MTE2_V)
        asc.sync_pipes(c, asc.V_MTE3)
        axis_offset = np.int64(pre) * td.var_in_axis * td.after_axis
        for i in range(row_len):
            out_offset = axis_offset + np.int64(asc.get_value(c, indices_local, i)) * td.after_axis \
                + block_count + col_offset
            asc.set_atomic_add(c, tmpl.var_t)
            asc.data_copy_pad(c, asc.gm_at(gm.var, out_offset), updates_local[i * col_align:],
                              asc.DataCopyExtParams(1, col_len * size, 0, 0))      # CopyOut
            asc.set_atomic_none(c)
    asc.free_tensor(c, UPDATES_QUE, updates_local)
    asc.free_tensor(c, INDICES_QUE, indices_local)


@global_aicore
def simd_process_after(c, td, gm, tmpl):
    """ProcessAfter: this core's index windows x column pieces (the last core has its own column tail)."""
    if c.block_idx >= td.used_core_num_before:
        return
    last = c.block_idx == td.used_core_num_before - 1
    col_loops = td.tail_update_loop_size if last else td.update_loop_size
    col_tail = td.tail_update_axis_num if last else td.update_tail_num
    for row_idx in range(td.indices_loop_size):
        row_len = td.indice_axis_tail_num if row_idx == td.indices_loop_size - 1 else td.ub_index_factor
        for col_idx in range(col_loops):
            col_len = col_tail if col_idx == col_loops - 1 else td.after_axis_factor
            _after_single_loop(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len)
