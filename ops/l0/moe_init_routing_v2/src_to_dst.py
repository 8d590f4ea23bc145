"""MoeV2SrcToDstOpSimt: the inverse of the sort's permutation.

source: moe/moe_init_routing_v2/op_kernel/arch35/moe_v2_src_to_dst_op_simt.h @ 25fb6b92890d.

The sort left expandDstToSrcRow in the workspace (int32 from element Align(total, 4)): for each output row, in sorted
order, the flat slot it comes from. Every core takes srcToDst's share of output rows and starts one SIMT call of
min(2048, rows) threads; thread t handles rows t, t + threads, ... and writes expandedRowIdx[slot] = row. A
permutation gives every thread its own output elements, so the thread order does not matter.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common.moe_sort import _align

SrcToDstGm = namedtuple("SrcToDstGm", ["ws_i32", "expanded_row_idx"])
"""The user workspace as int32 and the expandedRowIdx output (int32, n * k)."""

THREAD_NUM = 2048       # THREAD_NUM of the arch35 kernels on NPU arch 3510 (LAUNCH_BOUND)


@aicore
def compute_simt(c, th, core_rows, start_index, dst_to_src_gm, expanded_row_idx_gm):
    """The __simt_vf__ ComputeSimt body of one thread."""
    index = np.int32(asc.thread_idx(th, 0))
    step = np.int32(asc.thread_num(th, 0))
    while index < np.int32(core_rows):
        src_index = np.int64(index) + start_index
        dst_index = asc.simt_load(c, th, dst_to_src_gm, src_index)
        asc.simt_store(c, th, expanded_row_idx_gm, dst_index, np.int32(src_index))
        index += step


@aicore
def src_to_dst_process(c, td, ws_i32, expanded_row_idx_gm):
    """MoeV2SrcToDstOpSimt::Init + ProcessWithoutSync (the schedule adds Process's SyncAll)."""
    need = td.src_to_dst_need_core_num
    if c.block_idx >= need:
        return
    core_rows = td.src_to_dst_last_core_rows if c.block_idx == need - 1 else td.src_to_dst_per_core_rows
    start_index = c.block_idx * td.src_to_dst_per_core_rows
    threads = THREAD_NUM if THREAD_NUM < core_rows else core_rows
    dst_to_src_gm = asc.gm_at(ws_i32, _align(td.n * td.k, 4))
    sc = asc.simt_vf_call(c, threads, 1, 1)       # asc_vf_call<ComputeSimt>(dim3{threadNum, 1, 1}, ...)
    for t in range(sc.threads):
        compute_simt(c, asc.simt_thread(c, sc, t), core_rows, start_index, dst_to_src_gm, expanded_row_idx_gm)
    asc.simt_end(c, sc)


@global_aicore
def src_to_dst_stage(c, td, gm):
    src_to_dst_process(c, td, gm.ws_i32, gm.expanded_row_idx)
