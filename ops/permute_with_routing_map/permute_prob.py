"""MoePermuteProb (moe_token_permute_with_routing_map/op_kernel/moe_permute_prob.h @ 25fb6b92890d): the probs of the
drop-and-pad key 9, run after the pad sort and a SyncAll when the op has probs.

For each output slot p of this core's experts (the same front/tail task split as the sort; slot p of
local expert row r = p div capacity):

    permuteProbs[p] = probsT[r, sortedIndices[p]]

all on the scalar unit: the sorted indices arrive 1024 at a time (indiceQue); probs come from a window of
up to 1024 elements of the expert's row (inQue), reloaded from the needed token whenever the index falls
outside [window start, window start + 1023] and forgotten at each new expert (start set to -2048); the
gathered values collect in outQue and leave in chunks of 1024 (the last chunk shorter). No SetFlag /
WaitFlag appears between the copies and the scalar accesses (the original has none; the simulator runs
each call to completion).

Probs only move, so they travel as unsigned bit patterns of their width (uint16 for bf16 / fp16, uint32 for
fp32): the stage compiles once per width. Stages take (c, td, gm): td a LastDimSortTilingData (see
ops.common.moe_sort_last_dim.last_dim_tiling_data), gm a PermuteProbGm.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, PipePhase
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common.moe_sort_last_dim import _core_tasks, last_dim_tiling_data
from tiling.moe_sort_last_dim import (
    PERMUTE_PROB_BUFFERS,
    PROB_BUFFER_LEN_DB_ELEMS,
    PROB_BUFFER_LEN_ELEMS,
    permute_prob_ub_plan,  # noqa: F401  (ub rows re-exported for the op)
)

PermuteProbGm = namedtuple("PermuteProbGm", ["permute_probs", "probs", "sorted_indices"])
"""permute_probs: (E * capacity) output (dstGm); probs: probsT (E, N) read-only (srcGm); sorted_indices:
(E * capacity) int32 from the pad sort (indicesGm). Prob tensors as unsigned bits of their width."""

# TBufs: inQue a window of one expert's probs, indiceQue 1024 sorted indices, outQue 1024 gathered probs
IN_QUE, INDICE_QUE, OUT_QUE = asc.buffer_ids(PERMUTE_PROB_BUFFERS, "inQue", "indiceQue", "outQue")
DEFAULT_PIPE = "sortPipe"   # the TPipe GENERAL_PAD_OP_IMPL builds for this class

_CARRIERS = {2: np.uint16, 4: np.uint32}


def permute_prob_gm(permute_probs, probs_t, sorted_indices) -> PermuteProbGm:
    """PermuteProbGm from GlobalTensors, the probs re-viewed as unsigned bits (2- or 4-byte dtypes) and the
    inputs read-only (one compiled stage per width, whoever launches it)."""
    carrier = _CARRIERS.get(probs_t.data.itemsize)
    if carrier is None or permute_probs.data.itemsize != probs_t.data.itemsize:
        raise ValueError(f"MoePermuteProb moves 2- or 4-byte probs of one width; got {probs_t.data.dtype} in, "
                         f"{permute_probs.data.dtype} out")

    def ro(data):
        if data.flags.writeable:
            data = data.view()
            data.flags.writeable = False
        return data
    return PermuteProbGm(permute_probs._replace(data=permute_probs.data.view(carrier)),
                         probs_t._replace(data=ro(probs_t.data.view(carrier))),
                         sorted_indices._replace(data=ro(sorted_indices.data)))


@aicore
def permute_prob_process(c, td, dst_gm, src_gm, indices_gm):
    """MoePermuteProb::Init + Process on this core."""
    first_task, task_num = _core_tasks(c, td)
    token_num = td.n
    capacity = td.capacity
    core_prob_len = task_num * capacity
    src = asc.gm_at(src_gm, first_task * token_num)
    dst = asc.gm_at(dst_gm, first_task * capacity)
    indices = asc.gm_at(indices_gm, first_task * capacity)
    if c.block_idx >= td.vbs_need_core_num:
        return
    T = asc.ub_like(c, src_gm)
    elem_bytes = src_gm.data.itemsize
    indices_local = asc.tbuf_get(c, INDICE_QUE, asc.ub_i32(c))
    x_local = asc.tbuf_get(c, IN_QUE, T)
    y_local = asc.tbuf_get(c, OUT_QUE, T)
    last_in_token = -PROB_BUFFER_LEN_DB_ELEMS
    for now in range(core_prob_len):
        local_id = now % PROB_BUFFER_LEN_ELEMS
        if local_id == 0:
            # copyIndice
            count = min(core_prob_len - now, PROB_BUFFER_LEN_ELEMS)
            asc.data_copy_pad(c, indices_local, asc.gm_at(indices, now), asc.DataCopyExtParams(1, count * 4, 0, 0),
                              asc.NO_PAD)
        in_token = np.int64(asc.get_value(c, indices_local, local_id))
        if last_in_token + PROB_BUFFER_LEN_ELEMS - 1 < in_token or last_in_token > in_token:
            # CopyIn: the window starts at the token needed now
            count = min(token_num - in_token, PROB_BUFFER_LEN_ELEMS)
            asc.data_copy_pad(c, x_local, asc.gm_at(src, now // capacity * token_num + in_token),
                              asc.DataCopyExtParams(1, count * elem_bytes, 0, 0), asc.NO_PAD)
            last_in_token = in_token
            p = asc.get_value(c, x_local, 0)
        else:
            p = asc.get_value(c, x_local, in_token - last_in_token)
        asc.set_value(c, y_local, local_id, p)
        if local_id == PROB_BUFFER_LEN_ELEMS - 1 or now == core_prob_len - 1:
            # CopyOut
            asc.data_copy_pad(c, asc.gm_at(dst, now - local_id), y_local,
                              asc.DataCopyExtParams(1, (local_id + 1) * elem_bytes, 0, 0))
        if now % capacity == capacity - 1:
            last_in_token = -PROB_BUFFER_LEN_DB_ELEMS


@global_aicore
def permute_prob_stage(c, td, gm):
    permute_prob_process(c, td, gm.permute_probs, gm.probs, gm.sorted_indices)


def permute_prob_phase(select, pipe: str = DEFAULT_PIPE) -> PipePhase:
    """MoePermuteProb as one TPipe phase, with the SyncAll the op calls right after building that TPipe
    (the sort's indices of every core must be in GM). `select(*launch_args)` returns (td, PermuteProbGm)
    with td any struct carrying LAST_DIM_TD_FIELDS. UB rows: permute_prob_ub_plan(pipe, prob bytes)."""
    def stage_args(*launch_args):
        td, gm = select(*launch_args)
        return last_dim_tiling_data(td), gm
    return PipePhase(pipe, PERMUTE_PROB_BUFFERS, (SYNC_ALL, permute_prob_stage), stage_args)
