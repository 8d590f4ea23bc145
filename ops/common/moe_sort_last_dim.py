"""The pad-mode (tilingKey 9) sort of MoeTokenPermuteWithRoutingMap: MoeSortMultiLastDimCore<uint8_t>
(moe_token_permute_with_routing_map/op_kernel/moe_sort_multi_core_last_dim.h, @ 25fb6b92890d).

Each row of the transposed routing map (E rows of N bytes, expert-major) is one task; a core sorts its
tasks one after another (tasks dealt front/tail by tiling.moe_sort_last_dim). Per task:

* VBS, per loop of perCorePerLoopElements bytes: DataCopyPad the mask bytes, widen them uint8 -> half ->
  fp32 (both CAST_NONE, exact), fill lanes past the end of the last group of 32 with MIN_FP32, Sort
  descending with the indices 0..N-1 (one progression per task, advanced by Adds per loop), and write the
  (score, index) pairs to this core's slice of the ping-pong workspace;
* while more than 4 loop lists remain, merge them 4 at a time (MoeMrgsort), flipping workspaces;
* MoeMrgsortOut merges the last <= 4 lists and writes only the first `capacity` indices of the row to
  sortedIndices[e * capacity ...] (its CopyOutCapacity cuts the round that crosses capacity and stops).

Equal keys keep ascending index (Sort and MrgSort are stable), so a row comes out as its routed tokens
(byte 1) in ascending token order, then the others in ascending order (bytes are compared as uint8: an
int8 map's negative bytes would sort first). The whole Process() is one stage: the class has no SyncAll
(the operator's SyncAll before MoePermuteProb belongs to the next TPipe). srcWsIndex is a member of the
class that is not reset between tasks; within one stage it is a local that carries over the same way.

Stages take (c, td, gm): td a LastDimSortTilingData (last_dim_tiling_data converts any struct carrying
the fields), gm a LastDimSortGm. The map is handed over as read-only uint8 (bool and int8 maps share one
compiled stage).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import PipePhase
from ascend_sim.check import InitWaiver
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common import int_math
from ops.common.moe_sort import (
    MAX_MRGSORT_LIST,
    MULTI_IN_QUEUE,
    MULTI_INDEX_CONCAT,
    MULTI_OUT_QUEUE,
    MULTI_SORTED_BUFFER,
    ONE_REPEAT_SORT_NUM,
    SORT_WAIVED_QUEUES,
    WORK_GM_NUM,
    _align,
    _index_num,
    _pad_last_group,
    _sort_len,
    arith_progression_support_int32,
    merge_lists,
    mrgsort_out,
    sort_loop_keys,
)
from tiling.moe_sort import MULTI_CORE_BUFFERS

LAST_DIM_TD_FIELDS = (
    "n", "capacity", "vbs_need_core_num", "vbs_per_core_elements", "vbs_per_core_loops",
    "vbs_per_core_per_loop_elements", "vbs_per_core_last_loop_elements", "vbs_frontcore_task", "vbs_tailcore_task",
    "vbs_front_core_num", "sort_out_one_loop_max_elements",
)
"""The MoeTokenPermuteWithRoutingMapTilingData fields the pad pieces read (PWRM struct names, snake_case,
the VBS sub-struct prefixed `vbs_`)."""

LastDimSortTilingData = namedtuple("LastDimSortTilingData", LAST_DIM_TD_FIELDS)

LastDimSortGm = namedtuple("LastDimSortGm", ["routing_map", "sorted_indices", "workspace"])
"""routing_map: (E, N) transposed routing map as uint8, read-only; sorted_indices: (E * capacity) int32
output; workspace: the user workspace as float32 (two ping-pong areas of AlignUp(N * needCoreNum, 8) * 2
floats)."""

# VBSProcess fills the index progression for sortCoreLoopElements lanes only, and Sort reads sortNum (the count
# rounded up to 32) of them: the lanes past the count carry never-written indices, beside the MIN_FP32 keys that
# sort them behind every real key and out of the copied indices; checked mode "init" lets that read pass
INDEX_TAIL_READ = InitWaiver(
    "indexConcatBuffer", "moe/moe_token_permute_with_routing_map/op_kernel/moe_sort_multi_core_last_dim.h:270 "
    "(ArithProgressionSupportInt32 of sortCoreLoopElements indices) and :153 (Sort of sortNum) @ 25fb6b92890d")
SORT_BUFFERS = MULTI_CORE_BUFFERS   # sortDataCopyInQueue, sortDataCopyOutQueue, indexConcatBuffer, sortedBuffer
DEFAULT_PIPE = "sortPipe2"          # the TPipe GENERAL_PAD_OP_IMPL builds for this class


def last_dim_tiling_data(td) -> LastDimSortTilingData:
    """The fields of any tiling struct (namedtuple / object with LAST_DIM_TD_FIELDS attributes) as the one
    type the stages compile for."""
    return LastDimSortTilingData(*(int(getattr(td, name)) for name in LAST_DIM_TD_FIELDS))


def last_dim_sort_gm(routing_map_t, sorted_indices, workspace) -> LastDimSortGm:
    """LastDimSortGm from GlobalTensors; the map's bytes are re-viewed as read-only uint8 (T = uint8_t)."""
    data = routing_map_t.data.view(np.uint8)
    if data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return LastDimSortGm(routing_map_t._replace(data=data), sorted_indices, workspace)


@aicore
def _core_tasks(c, td):
    """InitTilingConfig + Process offsets: (first expert row of this core, rows it sorts). Front cores take
    frontcoreTask rows, the others tailcoreTask rows after the front cores' extra ones."""
    if c.block_idx > td.vbs_front_core_num - 1:
        task_num_front = td.vbs_front_core_num
        task_num = td.vbs_tailcore_task
    else:
        task_num_front = c.block_idx * (td.vbs_frontcore_task - td.vbs_tailcore_task)
        task_num = td.vbs_frontcore_task
    return c.block_idx * td.vbs_tailcore_task + task_num_front, task_num


@aicore
def _workspace(td, ws_gm, index):
    """workspaceGms[index]: Align(N * needCoreNum, sizeof(int32)) * 2 floats each."""
    area = _align(td.n * td.vbs_need_core_num, 4) * 2
    return asc.gm_at(ws_gm, index * area)


@aicore
def _ub_sort(c, td, row_gm, ws_gm, index_local, keys_fp32, progress, size, sort_num, src_ws):
    """UBSortProcess: VBSCopyIn, UBSortCompute, VBSCopyOut of one loop of one row."""
    U8 = asc.ub_u8(c)
    loop_elements = td.vbs_per_core_per_loop_elements
    # VBSCopyIn
    in_local = asc.alloc_tensor(c, MULTI_IN_QUEUE, U8)
    asc.data_copy_pad(c, in_local, asc.gm_at(row_gm, progress * loop_elements),
                      asc.DataCopyExtParams(1, size, 0, 0), asc.NO_PAD)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.en_que(c, MULTI_IN_QUEUE, in_local)
    # UBSortCompute: bytes -> half in the upper half of the key buffer, then half -> fp32 from its start
    sort_data_local = asc.de_que(c, MULTI_IN_QUEUE, U8)
    keys_half = asc.view_as(c, keys_fp32, asc.ub_u16(c))        # ReinterpretCast<half>
    cast_offset = _align(size, 2)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.cast_u8_to_half(c, keys_half[cast_offset:], sort_data_local, asc.CAST_NONE, size)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.cast(c, keys_fp32, asc.DT_FLOAT, keys_half[cast_offset:], asc.DT_FLOAT16, asc.CAST_NONE, size)
    asc.free_tensor(c, MULTI_IN_QUEUE, sort_data_local)
    asc.pipe_barrier(c, asc.PIPE_V)
    _pad_last_group(c, keys_fp32, size)
    asc.pipe_barrier(c, asc.PIPE_V)
    out_local = sort_loop_keys(c, keys_fp32, index_local, sort_num)
    # VBSCopyOut: this loop's pairs into this core's slice of workspaceGms[srcWsIndex]
    dst = asc.gm_at(_workspace(td, ws_gm, src_ws),
                    c.block_idx * _sort_len(td.vbs_per_core_elements) + _sort_len(progress * loop_elements))
    asc.data_copy_pad(c, dst, out_local, asc.DataCopyExtParams(1, _sort_len(size) * 4, 0, 0))
    asc.free_tensor(c, MULTI_OUT_QUEUE, out_local)


@aicore
def _merge_lists(c, td, ws_gm, src_ws, list_num, per_list, last_list, core_offset, loop_offset):
    """Merge list_num lists of this core's slice of workspaceGms[src_ws] into the other area."""
    offset = c.block_idx * core_offset + loop_offset
    merge_lists(c, asc.gm_at(_workspace(td, ws_gm, src_ws), offset),
                asc.gm_at(_workspace(td, ws_gm, 1 - src_ws), offset), list_num, per_list, last_list,
                td.sort_out_one_loop_max_elements)


@aicore
def _sort_row(c, td, row_gm, out_gm, ws_gm, src_ws):
    """VBSProcess of one task (loops, then OneCoreVMSProcess); returns srcWsIndex after its merges."""
    loops = td.vbs_per_core_loops
    loop_elements = td.vbs_per_core_per_loop_elements
    last_loop_elements = td.vbs_per_core_last_loop_elements
    index_num = _index_num(td, loop_elements)
    index_concat = asc.tbuf_get(c, MULTI_INDEX_CONCAT, asc.ub_i32(c))
    index_local = index_concat
    keys_fp32 = asc.view_as(c, index_concat, asc.ub_f32(c))[index_num:]
    sort_num = int_math.ceil_div(loop_elements, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
    arith_progression_support_int32(c, index_local, np.int32(0), np.int32(1), loop_elements)
    for loop in range(loops - 1):
        _ub_sort(c, td, row_gm, ws_gm, index_local, keys_fp32, loop, loop_elements, sort_num, src_ws)
        asc.pipe_barrier(c, asc.PIPE_V)
        asc.adds(c, index_local, index_local, np.int32(loop_elements), loop_elements)
    sort_num = int_math.ceil_div(last_loop_elements, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
    _ub_sort(c, td, row_gm, ws_gm, index_local, keys_fp32, loops - 1, last_loop_elements, sort_num, src_ws)
    # OneCoreVMSProcess: merge the loop lists 4 at a time while more than 4 remain
    core_offset = _sort_len(td.vbs_per_core_elements)
    list_num, per_list, last_list = loops, loop_elements, last_loop_elements
    while list_num > MAX_MRGSORT_LIST:
        merges = int_math.ceil_div(list_num, MAX_MRGSORT_LIST)
        remain_lists = list_num - (merges - 1) * MAX_MRGSORT_LIST
        loop_offset = _sort_len(per_list * MAX_MRGSORT_LIST)
        for k in range(merges - 1):
            _merge_lists(c, td, ws_gm, src_ws, MAX_MRGSORT_LIST, per_list, per_list, core_offset, k * loop_offset)
        _merge_lists(c, td, ws_gm, src_ws, remain_lists, per_list, last_list, core_offset,
                     (merges - 1) * loop_offset)
        list_num = merges
        last_list = per_list * (remain_lists - 1) + last_list
        per_list = per_list * MAX_MRGSORT_LIST
        src_ws = (src_ws + 1) % WORK_GM_NUM
    # InitMoeMrgSortOut + MoeMrgsortOut::Process(capacity)
    F32 = asc.ub_f32(c)
    one_loop_max = td.sort_out_one_loop_max_elements
    in_local = asc.tbuf_get(c, MULTI_INDEX_CONCAT, F32)
    out_local = asc.alloc_tensor(c, MULTI_OUT_QUEUE, F32)
    out_local_v = out_local[one_loop_max * MAX_MRGSORT_LIST:]
    temp_buffer = asc.tbuf_get(c, MULTI_SORTED_BUFFER, F32)[:_sort_len(one_loop_max) * MAX_MRGSORT_LIST]
    asc.free_tensor(c, MULTI_OUT_QUEUE, out_local)   # (sic) as InitMoeMrgSortOut does
    src = asc.gm_at(_workspace(td, ws_gm, src_ws), c.block_idx * core_offset)
    mrgsort_out(c, src, out_gm, in_local, out_local, out_local_v, temp_buffer, list_num, per_list, last_list,
                one_loop_max, td.capacity)
    return src_ws


@aicore
def last_dim_sort_process(c, td, map_gm, out_gm, ws_gm):
    """MoeSortMultiLastDimCore::Process: each of this core's expert rows in turn (cores at or beyond
    needCoreNum hold no task and do nothing)."""
    first_task, task_num = _core_tasks(c, td)
    process_offset = first_task * td.vbs_per_core_elements      # blockFactor = perCoreElements = N
    process_out_offset = first_task * td.capacity
    src_ws = 0
    for task_id in range(task_num):
        if c.block_idx < td.vbs_need_core_num:        # VBSProcess's own gate
            row_gm = asc.gm_at(map_gm, process_offset + task_id * td.vbs_per_core_elements)
            src_ws = _sort_row(c, td, row_gm, asc.gm_at(out_gm, process_out_offset + task_id * td.capacity),
                               ws_gm, src_ws)


@global_aicore
def last_dim_sort_stage(c, td, gm):
    last_dim_sort_process(c, td, gm.routing_map, gm.sorted_indices, gm.workspace)


def last_dim_sort_phase(select, pipe: str = DEFAULT_PIPE) -> PipePhase:
    """The pad-mode sort as one TPipe phase (no SyncAll inside). `select(*launch_args)` returns
    (td, LastDimSortGm) with td any struct carrying LAST_DIM_TD_FIELDS; the stage gets a
    LastDimSortTilingData and compiles once. UB rows: tiling.moe_sort_last_dim.last_dim_sort_ub_plan(pipe,
    td.vbs_per_core_per_loop_elements) (the same on every core)."""
    def stage_args(*launch_args):
        td, gm = select(*launch_args)
        return last_dim_tiling_data(td), gm
    return PipePhase(pipe, SORT_BUFFERS, (last_dim_sort_stage,), stage_args, waived_queues=SORT_WAIVED_QUEUES)
