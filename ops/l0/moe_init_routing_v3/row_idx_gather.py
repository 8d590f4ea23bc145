"""RowIdxGather of MoeInitRoutingV3 (arch35/moe_v3_row_idx_gather_arch35.h): expanded_row_idx for GATHER.

Only the expert total count's first sorted slots (the active ones) are mapped: the count is read from the workspace
(GetValue, no cache flush before it in this version), split over expertTokensCount.needCoreNum cores again
(Ceil with Ceil(x, 0) = 0, so a count of 0 runs no core), and a SIMT function of SIMT_THREAD_NUM threads writes
expanded_row_idx[sortedRowIdx[i]] = i. The dropped slots keep the -1 ExpertTokensCount wrote. No TPipe, no
buffers. With useGatherCopy (the MXFP8 gather then walks expanded_row_idx by source slot, slots other cores
mapped) Process ends in SyncAll; without it the next gather reads only the workspace, and there is none.
(The version's SCATTER branch, useGatherCopy with rowIdxType 1, is not reached: the family passes GATHER.)
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, PipePhase
from ascend_sim._jit import aicore, global_aicore
from ops.common import int_math

from .expert_tokens_count import SIMT_THREAD_NUM, total_count_offset
from .sort import sorted_idx_offset

RowIdxGm = namedtuple("RowIdxGm", ["workspace", "expanded_row_idx"])
"""The int32 workspace and expanded_row_idx (int32, n * k)."""


@aicore
def _ceil(a, b):
    """moe_v3_common.h Ceil: 0 when b is 0."""
    return 0 if b == 0 else int_math.ceil_div(a, b)


@aicore
def row_idx_gather(c, td, gm):
    """RowIdxGather::Init + Process (GATHER, no useGatherCopy)."""
    total = np.int64(asc.get_value(c, gm.workspace, total_count_offset(td)))
    per_core = _ceil(total, td.expert_tokens_count_need_core_num)
    need = _ceil(total, per_core)
    last = total - (need - 1) * per_core
    cur = last if c.block_idx == need - 1 else per_core
    if c.block_idx >= need:
        return
    sorted_rows = asc.gm_at(gm.workspace, sorted_idx_offset(td) + c.block_idx * per_core)
    index_base = c.block_idx * per_core
    sc = asc.simt_vf_call(c, SIMT_THREAD_NUM, 1, 1)
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


def row_idx_gather_phase(select) -> PipePhase:
    """RowIdxGather between histogramPipe and gatherPipe: a phase without a TPipe of its own (no buffers), with
    Process's closing SyncAll when the tiling sets useGatherCopy."""
    def schedule(*launch_args):
        td = select(*launch_args)[0]
        return [row_idx_gather_stage, SYNC_ALL] if td.use_gather_copy else [row_idx_gather_stage]
    return PipePhase("rowIdxGather", (), schedule, select)
