"""RowIdxGather of MoeInitRoutingV3 on arch35: expanded_row_idx for GATHER row indices.

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_row_idx_gather.h and the rowIdxPipe block of
moe/moe_init_routing_v3/op_kernel/moe_init_routing_v3_apt.cpp @ 25fb6b92890d

The entry builds a TPipe of its own (rowIdxPipe) for this stage. Init reads the expert total count from the
workspace (a plain GetValue, no cache invalidation before it), splits it over expertTokensCount.needCoreNum cores
again (Ceil with Ceil(x, 0) = 0, so a count of 0 runs no core) and sizes two queues from that split: the VECIN
sortedExpertIndicesInQueue (AlignBytes of the core's per-loop count, int32) and the VECOUT copyOutQueue (one
int32, 32 bytes). Process never allocates from either. A SIMT function of SIMT_THREAD_NUM threads writes
expanded_row_idx[sortedRowIdx[i]] = i over the core's share of the active sorted slots; the dropped slots keep the
-1 ExpertTokensCount wrote. Process ends in SyncAll on every core (the MX gathers then read expanded_row_idx by
source slot, slots other cores mapped).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, PipePhase, UbBuffer
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common import int_math

from .expert_tokens_count import SIMT_THREAD_NUM, total_count_offset
from .sort import sorted_idx_offset

RowIdxGm = namedtuple("RowIdxGm", ["workspace", "expanded_row_idx"])
"""The int32 workspace and expanded_row_idx (int32, n * k)."""

PIPE = "rowIdxPipe"
BUFFERS = ("sortedExpertIndicesInQueue", "copyOutQueue")
"""Init's InitBuffer calls in order (TQue<VECIN, 1>, TQue<VECOUT, 1>); the stage addresses neither."""


@aicore
def _ceil(a, b):
    """moe_v3_common.h Ceil: 0 when b is 0."""
    return 0 if b == 0 else int_math.ceil_div(a, b)


def _split_ceil(a: int, b: int) -> int:
    return 0 if b == 0 else -(-a // b)


def init_buffer_rows(td, block_idx: int, total: int) -> tuple[UbBuffer, ...]:
    """RowIdxGather::Init's two InitBuffer rows on core `block_idx` for an expert total count `total`: the core's
    per-loop element count is Ceil(coreElements, Ceil(coreElements, tiling perCorePerLoopElements)), with the
    last-core figures on core needCoreNum - 1 (needCoreNum recomputed from the count) and the per-core ones on
    every other core."""
    per_core = _split_ceil(total, td.expert_tokens_count_need_core_num)
    need = _split_ceil(total, per_core)
    last = total - (need - 1) * per_core
    elements = last if block_idx == need - 1 else per_core
    loops = _split_ceil(elements, td.expert_tokens_count_per_core_per_loop_elements)
    per_loop = _split_ceil(elements, loops)
    return (UbBuffer(BUFFERS[0], (per_loop * 4 + 31) // 32 * 32, 1, "TQue", "VECIN", 1, PIPE),
            UbBuffer(BUFFERS[1], 32, 1, "TQue", "VECOUT", 1, PIPE))


@aicore
def row_idx_gather(c, td, gm):
    """RowIdxGather::Init (the count and its split) + Process (the SIMT mapping; SyncAll is the schedule's)."""
    total = np.int64(asc.get_value(c, gm.workspace, total_count_offset(td)))
    per_core = _ceil(total, td.expert_tokens_count_need_core_num)
    need = _ceil(total, per_core)
    last = total - (need - 1) * per_core
    if c.block_idx >= need:
        return
    cur = last if c.block_idx == need - 1 else per_core
    sorted_rows = asc.gm_at(gm.workspace, sorted_idx_offset(td) + c.block_idx * per_core)
    index_base = c.block_idx * per_core
    sc = asc.simt_vf_call(c, SIMT_THREAD_NUM, 1, 1)       # asc_vf_call<ComputeSimt>
    for t in range(sc.threads):
        th = asc.simt_thread(c, sc, t)
        index = asc.thread_idx(th, 0)
        while index < cur:
            out = asc.simt_load(c, th, sorted_rows, index)
            asc.simt_store(c, th, gm.expanded_row_idx, out, np.int32(index_base + index))
            index += asc.thread_num(th, 0)
    asc.simt_end(c, sc)


@global_aicore
def row_idx_gather_stage(c, td, gm):
    row_idx_gather(c, td, gm)


def row_idx_gather_phase(select, active_count) -> PipePhase:
    """The rowIdxPipe phase: RowIdxGather then its SyncAll. `select(*launch_args)` returns (td, RowIdxGm);
    `active_count(*launch_args)` the expert total count the run will find (the InitBuffer sizes follow it on each
    core, as the kernel's Init does)."""
    def core_plan(block_idx, rows, *launch_args):
        return init_buffer_rows(select(*launch_args)[0], block_idx, active_count(*launch_args))
    return PipePhase(PIPE, BUFFERS, (row_idx_gather_stage, SYNC_ALL), select, core_plan=core_plan)
