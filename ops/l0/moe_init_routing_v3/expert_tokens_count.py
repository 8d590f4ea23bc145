"""ExpertTokensCount of MoeInitRoutingV3 on arch35: tokens per expert from the sorted expert ids, in count mode
(expertTokensNumType 1) without drop-pad, as the sort chain uses it.

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_expert_tokens_count.h @ 25fb6b92890d

Each of expertTokensCount.needCoreNum cores takes its slice of the sorted ids in the workspace (read from GM by
two SIMT functions of SIMT_THREAD_NUM threads): the first records, per expert, the slice index where its run
starts (a run starting at slice index 0 counts from 0), the second turns that into the run length at the run's
last element; a thread stops at the first id >= expertEnd, so dropped slots (ids < expertStart sort to the end
as INT32_MAX, ids >= expertEnd after the active ones) are never counted. The slice counts are added into the
int32 count area with an atomic DataCopyPad; after SyncAll core 0 widens them to int64 (Cast CAST_NONE) for
expert_tokens_count, sums them (GetValue loop) into the expert total count the gathers read, and SyncAll.

In Init every counting core sets its slice of expanded_row_idx to -1 (GATHER row-index type): the slots the
row-index gather never reaches (the dropped ones) keep -1.

Buffers (histogramPipe, InitBuffer order): sortedExpertIdxInQueue (never used by the arch35 kernel, only
allocated), expertCountOutToTempQueue, expertCountTempInQueue, expertIdxCountOutQueue, expertTotalCountQueue.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, PipePhase
from ascend_sim.dtypes import DT_INT32, DT_INT64
from ascend_sim.kernel_api import aicore, global_aicore

from .sort import count_temp_offset

CountGm = namedtuple("CountGm", ["workspace", "expanded_row_idx", "expert_tokens_count"])
"""The int32 workspace, expanded_row_idx (int32, n * k) and expert_tokens_count (int64, actualExpertNum)."""

BUFFERS = ("sortedExpertIdxInQueue", "expertCountOutToTempQueue", "expertCountTempInQueue", "expertIdxCountOutQueue",
           "expertTotalCountQueue")
SORTED_IN_QUEUE, COUNT_OUT_QUEUE, COUNT_TEMP_IN_QUEUE, COUNT_OUT64_QUEUE, TOTAL_QUEUE = range(5)

SIMT_THREAD_NUM = 2048


@aicore
def total_count_offset(td):
    """Int32 offset of the expert total count in the workspace: 2 * Align(n * k, 4 B) + Align(actualExpertNum,
    4 B)."""
    return count_temp_offset(td) + (td.actual_expert_num * 4 + 31) // 32 * 32 // 4


@aicore
def _core_elements(td, block_idx):
    if block_idx == td.expert_tokens_count_need_core_num - 1:
        return td.expert_tokens_count_last_core_elements
    return td.expert_tokens_count_per_core_elements


@aicore
def _first_index_simt(c, elements, expert_start, expert_end, sorted_gm, first_local):
    """ComputeExpertFirstIndexSimt: first_local[id - expertStart] = i where a run of id starts in the slice."""
    sc = asc.simt_vf_call(c, SIMT_THREAD_NUM, 1, 1)
    for t in range(sc.threads):
        th = asc.simt_thread(c, sc, t)
        i = asc.thread_idx(th, 0)
        while i < elements:
            cur = asc.simt_load(c, th, sorted_gm, i)
            if cur >= expert_end:
                break
            prev = -1 if i == 0 else asc.simt_load(c, th, sorted_gm, i - 1)
            if cur != prev:
                asc.simt_store(c, th, first_local, cur - expert_start, np.int32(i))
            i += asc.thread_num(th, 0)
    asc.simt_end(c, sc)


@aicore
def _count_out_simt(c, elements, expert_start, expert_end, sorted_gm, first_local, count_local):
    """ComputeExpertCountOutSimt: at the last element of a run, count_local[id - expertStart] = i + 1 - first
    (both pointers name the same buffer in the kernel)."""
    sc = asc.simt_vf_call(c, SIMT_THREAD_NUM, 1, 1)
    for t in range(sc.threads):
        th = asc.simt_thread(c, sc, t)
        i = asc.thread_idx(th, 0)
        while i < elements:
            cur = asc.simt_load(c, th, sorted_gm, i)
            if cur >= expert_end:
                break
            if i == elements - 1 or cur != asc.simt_load(c, th, sorted_gm, i + 1):
                first = asc.simt_load(c, th, first_local, cur - expert_start)
                asc.simt_store(c, th, count_local, cur - expert_start, np.int32(i + 1 - first))
            i += asc.thread_num(th, 0)
    asc.simt_end(c, sc)


@aicore
def count_slices(c, td, gm):
    """Init and the first part of Process: each counting core counts its slice and adds it to the count area."""
    need = td.expert_tokens_count_need_core_num
    per_core = td.expert_tokens_count_per_core_elements
    cur = _core_elements(td, c.block_idx)
    experts = td.actual_expert_num
    if td.row_idx_type == 0 and c.block_idx < need:
        # InitGlobalMemory, then SetWaitFlag<MTE3_MTE2> and <MTE3_S> (sync_pipes: FetchEventID, SetFlag, WaitFlag)
        asc.init_output(c, asc.gm_at(gm.expanded_row_idx, c.block_idx * per_core), cur, np.int32(-1))
        asc.sync_pipes(c, asc.MTE3_MTE2)
        asc.sync_pipes(c, asc.MTE3_S)
    if c.block_idx >= need:
        return
    I32 = asc.ub_i32(c)
    count_local = asc.alloc_tensor(c, COUNT_OUT_QUEUE, I32)
    asc.duplicate(c, count_local, np.int32(0), experts)
    sorted_gm = asc.gm_at(gm.workspace, c.block_idx * per_core)
    _first_index_simt(c, cur, td.expert_start, td.expert_end, sorted_gm, count_local)
    _count_out_simt(c, cur, td.expert_start, td.expert_end, sorted_gm, count_local, count_local)
    asc.en_que(c, COUNT_OUT_QUEUE, count_local)
    # CopyOut: atomic add into expertCountTempGm
    count_local = asc.de_que(c, COUNT_OUT_QUEUE, I32)
    asc.sync_pipes(c, asc.S_MTE3)
    asc.set_atomic_add(c, DT_INT32)
    asc.data_copy_pad(c, asc.gm_at(gm.workspace, count_temp_offset(td)), count_local,
                      asc.DataCopyExtParams(1, experts * 4, 0, 0))
    asc.set_atomic_none(c)
    asc.sync_pipes(c, asc.MTE3_S)
    asc.free_tensor(c, COUNT_OUT_QUEUE, count_local)


@aicore
def count_total(c, td, gm):
    """After SyncAll, core 0: expertCountCopyIn, expertCountCompute (count mode), expertCountCopyOut."""
    if c.block_idx != 0:
        return
    experts = td.actual_expert_num
    I32 = asc.ub_i32(c)
    I64 = asc.ub_i64(c)
    temp_in = asc.alloc_tensor(c, COUNT_TEMP_IN_QUEUE, I32)
    asc.data_copy_pad(c, temp_in, asc.gm_at(gm.workspace, count_temp_offset(td)),
                      asc.DataCopyExtParams(1, experts * 4, 0, 0), asc.NO_PAD)
    asc.en_que(c, COUNT_TEMP_IN_QUEUE, temp_in)
    temp_in = asc.de_que(c, COUNT_TEMP_IN_QUEUE, I32)
    out64 = asc.alloc_tensor(c, COUNT_OUT64_QUEUE, I64)
    asc.sync_pipes(c, asc.MTE2_S)
    asc.cast(c, out64, DT_INT64, temp_in, DT_INT32, asc.CAST_NONE, experts)
    asc.pipe_barrier(c, asc.PIPE_V)
    total = 0
    for i in range(experts):
        total += np.int64(asc.get_value(c, temp_in, i))
    asc.sync_pipes(c, asc.S_MTE3)
    asc.en_que(c, COUNT_OUT64_QUEUE, out64)
    total_local = asc.alloc_tensor(c, TOTAL_QUEUE, I32)
    asc.set_value(c, total_local, 0, np.int32(total))
    asc.en_que(c, TOTAL_QUEUE, total_local)
    asc.free_tensor(c, COUNT_TEMP_IN_QUEUE, temp_in)
    # expertCountCopyOut
    out64 = asc.de_que(c, COUNT_OUT64_QUEUE, I64)
    asc.data_copy_pad(c, gm.expert_tokens_count, out64, asc.DataCopyExtParams(1, experts * 8, 0, 0))
    total_local = asc.de_que(c, TOTAL_QUEUE, I32)
    asc.data_copy_pad(c, asc.gm_at(gm.workspace, total_count_offset(td)), total_local,
                      asc.DataCopyExtParams(1, 4, 0, 0))
    asc.free_tensor(c, TOTAL_QUEUE, total_local)
    asc.free_tensor(c, COUNT_OUT64_QUEUE, out64)


@global_aicore
def count_slices_stage(c, td, gm):
    count_slices(c, td, gm)


@global_aicore
def count_total_stage(c, td, gm):
    count_total(c, td, gm)


def count_phase(select) -> PipePhase:
    """The histogramPipe phase (dropless: both SyncAll() of Process)."""
    return PipePhase("histogramPipe", BUFFERS, (count_slices_stage, SYNC_ALL, count_total_stage, SYNC_ALL), select)
