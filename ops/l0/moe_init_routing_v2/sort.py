"""The arch35 sort of MoeInitRoutingV2 (MoeV2SortOneCore / MoeV2SortMultiCore and their merge sorts).

source: moe/moe_init_routing_v2/op_kernel/arch35/moe_v2_sort_one_core.h, moe_v2_sort_multi_core.h, moe_v2_mrgsort.h,
moe_v2_mrgsort_out.h, moe_v2_sort_base.h and ArithProgressionPerf of moe_v2_common.h @ 25fb6b92890d.

Sorts the n * k flat expert ids (int32 or int64) ascending as -fp32(id), descending, and writes two int32 lists to the
user workspace: the sorted expert ids at [0, total) and the source slots in sorted order (expandDstToSrcRow) at
[Align(total, 4), Align(total, 4) + total) (int32 elements). Equal ids keep ascending slot order.

* One core (keys 10001 / 11001): core 0 loads every id, widens it to fp32 in place, negates it, pads the last group
  of 32 with MIN_FP32, Concats (the tempBuffer), Sorts with the slot index 0 .. sortNum-1 and Extracts; the scores
  come back as int32 ids (Muls -1, Cast CAST_ROUND) and both lists leave.
* Several cores (keys 10002 / 11002): VBS cores sort their share loop by loop into the ping-pong float workspace
  (no Concat on arch 3510) and merge their loop lists four at a time; VMS levels merge four core lists each; core 0
  (SortOut) merges the last lists, extracts scores and indices and writes both lists.

Differences from the 910B sort (ops/common/moe_sort.py): the index sits behind the keys in the in-queue buffer
(no indexBuffer), ArithProgressionPerf makes it, the merge windows are the in-queue buffer (the 910B sort uses its
sortedBuffer), every core starts with srcWsIndex 0, MrgSort list i always uses window i, SortOut also writes the
sorted ids, and SyncAll is skipped on a one-core chip (coreNum == 1).

Two things of the real code show here: a SortOut round of four full 2048-pair windows can merge up to 8189 pairs,
whose Extract needs 256 repeats (Extract's repeatTime range is [0, 255]; the simulator stops with ParamRangeError),
and ArithProgressionPerf's repeat-wide Adds read the block-wide Adds' results with no PipeBarrier<PIPE_V> (clean
in checked mode "race", reported in "strict").

`td` is the MoeInitRoutingV2 tiling struct (core_num, n, k, vbs_*, sort_out_one_loop_max_elements). The GM a sort
stage sees is SortGm: the keys, the workspace as int32 and as float32 (the same bytes).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, PipePhase
from ascend_sim.dtypes import DT_INT64
from ascend_sim.kernel_api import aicore, global_aicore, outline
from ops.common import int_math
from ops.common.moe_sort import _align, _copy_keys_in, _list_windows, _mrgsort_init, _pad_last_group, _sort_len

SortGm = namedtuple("SortGm", ["keys", "ws_i32", "ws_f32"])
"""expertIdx (int32 / int64, read-only), the user workspace as int32 and as float32 GlobalTensors."""

ONE_REPEAT_SORT_NUM = 32
MAX_MRGSORT_LIST = 4
WORK_GM_NUM = 2
BLOCK_B32 = 8           # BLOCK_B32_SIZE: int32 lanes of one 32-byte block
REPEAT_B32 = 64         # REPEAT_B32_SIZE: int32 lanes of one 256-byte repeat

# buffers (InitBuffer order); the multi-core sort has no tempBuffer on arch 3510
# sortDataCopyInQueue holds the keys, then the int32 slot index at element sortNum
ONE_CORE_BUFFERS = ("sortDataCopyInQueue", "sortDataCopyOutQueue", "tempBuffer", "sortedBuffer")
MULTI_CORE_BUFFERS = ("sortDataCopyInQueue", "sortDataCopyOutQueue", "sortedBuffer")
IN_QUEUE, OUT_QUEUE = asc.buffer_ids(ONE_CORE_BUFFERS, "sortDataCopyInQueue", "sortDataCopyOutQueue",
                                     also=(MULTI_CORE_BUFFERS,))
ONE_CORE_TEMP, ONE_CORE_SORTED = asc.buffer_ids(ONE_CORE_BUFFERS, "tempBuffer", "sortedBuffer")
(MULTI_SORTED,) = asc.buffer_ids(MULTI_CORE_BUFFERS, "sortedBuffer")
# InitMoeMrgSort / InitMoeMrgSortOut AllocTensor both queue buffers, hand them to the sorter and FreeTensor them at
# once; the sorter then uses them (checked mode lets that use after FreeTensor pass)
SORT_WAIVED_QUEUES = ("sortDataCopyInQueue", "sortDataCopyOutQueue")

# member variables kept across SyncAll (asc.members slots)
M_SRC_WS_INDEX = 0
M_LIST_NUM = 1
M_PER_LIST_ELEMENTS = 2
M_LAST_LIST_ELEMENTS = 3


@aicore
def _key_dt(keys_gm):
    return asc.DT_INT32 if keys_gm.data.itemsize == 4 else DT_INT64


@aicore
def _sorted_ids_gm(ws_i32):
    """sortedexpertIdxGm: int32 elements [0, total) of the workspace."""
    return ws_i32


@aicore
def _dst_to_src_gm(td, ws_i32):
    """expandDstToSrcRowGm: int32 elements from Align(total, 4) of the workspace."""
    return asc.gm_at(ws_i32, _align(td.n * td.k, 4))


# --- ArithProgressionPerf ---------------------------------------------------------------------------------------
@aicore
def arith_progression_perf(c, dst, first_value, diff_value, count):
    """ArithProgressionPerf(dst, first, diff, count): dst[i] = first + diff * i (int32) for AlignUp(count, 8)
    elements. The scalar unit writes the first block; after an S -> V flag the vector unit copies it forward with
    Adds by blocks (offset 8 .. 56, all from block 0), then by repeats (each from the first repeat), the last one
    over the lanes that remain. Each masked single-repeat Adds is asc.adds over that many lanes."""
    count_align = (count + 7) // BLOCK_B32 * BLOCK_B32
    first = np.int32(first_value)
    diff = np.int32(diff_value)
    for i in range(BLOCK_B32):
        asc.set_value(c, dst, i, np.int32(first + diff * np.int32(i)))
    asc.sync_pipes(c, asc.S_V)
    if count_align <= BLOCK_B32:
        return
    if count_align > REPEAT_B32:
        for i in range(1, BLOCK_B32):
            offset = i * BLOCK_B32
            asc.adds(c, dst[offset:], dst, np.int32(diff * np.int32(offset)), BLOCK_B32)
        loop_times = (count_align + REPEAT_B32 - 1) // REPEAT_B32
        for i in range(1, loop_times - 1):
            offset = i * REPEAT_B32
            asc.adds(c, dst[offset:], dst, np.int32(diff * np.int32(offset)), REPEAT_B32)
        offset = (loop_times - 1) * REPEAT_B32
        asc.adds(c, dst[offset:], dst, np.int32(diff * np.int32(offset)), count_align - offset)
    else:
        for i in range(1, count_align // BLOCK_B32):
            offset = i * BLOCK_B32
            asc.adds(c, dst[offset:], dst, np.int32(diff * np.int32(offset)), BLOCK_B32)


# --- MoeV2SortOneCore -------------------------------------------------------------------------------------------
@aicore
def sort_one_core_process(c, td, keys_gm, ws_i32):
    """MoeV2SortOneCore::Process on core 0 (CopyIn, SortCompute, CopyOut); the caller's schedule adds SyncAll."""
    if c.block_idx >= 1:
        return
    total = td.n * td.k
    tile_length = _align(td.vbs_last_core_per_loop_elements, 4)
    sort_num = int_math.ceil_div(tile_length, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
    K = asc.ub_like(c, keys_gm)
    # CopyIn
    in_local = asc.alloc_tensor(c, IN_QUEUE, K)
    _copy_keys_in(c, in_local, keys_gm, total)
    row_idx_local = asc.view_as(c, in_local[sort_num:], asc.ub_i32(c))     # inLocal[sortNum] as int32
    arith_progression_perf(c, row_idx_local, 0, 1, sort_num)
    asc.en_que(c, IN_QUEUE, in_local)
    # SortCompute: the ids widen to fp32 where they lie, in the first 4 * tileLength bytes
    in_local = asc.de_que(c, IN_QUEUE, K)
    keys_fp32 = asc.view_as(c, in_local, asc.ub_f32(c))
    asc.cast(c, keys_fp32, asc.DT_FLOAT, in_local, _key_dt(keys_gm), asc.CAST_ROUND, tile_length)
    index_u32 = asc.view_as(c, in_local[sort_num:], asc.ub_u32(c))
    _one_core_sort_fp32(c, td, keys_fp32, index_u32, ws_i32, total, tile_length, sort_num)


@outline
def _one_core_sort_fp32(c, td, keys_fp32, source_row_local, ws_i32, total, tile_length, sort_num):
    """The rest of SortCompute and CopyOut, on the widened keys (one compiled copy serves both id types)."""
    repeat = sort_num // ONE_REPEAT_SORT_NUM
    F32 = asc.ub_f32(c)
    asc.muls(c, keys_fp32, keys_fp32, -1.0, tile_length)
    _pad_last_group(c, keys_fp32, total)
    temp_tensor = asc.tbuf_get(c, ONE_CORE_TEMP, F32)[:_sort_len(sort_num)]
    concat_local = asc.concat(c, keys_fp32, temp_tensor, repeat)
    sorted_local = asc.tbuf_get(c, ONE_CORE_SORTED, F32)[:_sort_len(sort_num)]
    asc.sort(c, sorted_local, concat_local, source_row_local, temp_tensor, repeat)
    out_local = asc.alloc_tensor(c, OUT_QUEUE, F32)
    asc.extract(c, out_local, asc.view_as(c, out_local[sort_num:], asc.ub_u32(c)), sorted_local, repeat)
    asc.muls(c, out_local, out_local, -1.0, tile_length)
    asc.cast_f32_to_i32(c, asc.view_as(c, out_local, asc.ub_i32(c)), out_local, asc.CAST_ROUND, tile_length)
    asc.en_que(c, OUT_QUEUE, out_local)
    asc.free_tensor(c, IN_QUEUE, keys_fp32)
    # CopyOut: the sorted ids and the slots in sorted order
    out_i32 = asc.de_que(c, OUT_QUEUE, asc.ub_i32(c))
    params = asc.DataCopyExtParams(1, total * 4, 0, 0)
    asc.data_copy_pad(c, _sorted_ids_gm(ws_i32), out_i32, params)
    # expandDstToSrcRowGm is set to workspace + tileLength: Align(total, 4) as the later stages read it
    asc.data_copy_pad(c, asc.gm_at(ws_i32, tile_length), out_i32[sort_num:], params)
    asc.free_tensor(c, OUT_QUEUE, out_i32)


# --- MoeV2Mrgsort / MoeV2MrgsortOut -----------------------------------------------------------------------------
@aicore
def _mrgsort_round(c, src_gm, ub_in0, ub_in1, ub_in2, ub_in3, ub_out, offsets, remain, one_loop_max, list_num):
    """CopyIn, UpdateMrgParam, MrgsortCompute and UpdateSortInfo of one round: list i is copied into window i (at
    most one_loop_max pairs), the non-empty windows are merged into ub_out (a lone list is copied). Returns the
    pairs merged; offsets / remain are updated in place."""
    asc.sync_pipes(c, asc.MTE3_MTE2)
    lengths = np.zeros(4, dtype=np.int64)
    counts = np.zeros(4, dtype=np.int64)
    order = np.zeros(4, dtype=np.int64)     # tmpUbInputs[j] = ubInputs[order[j]]
    active = 0
    for i in range(list_num):
        lengths[i] = min(one_loop_max, remain[i])
        if lengths[i] > 0:
            ub_in = ub_in0 if i == 0 else ub_in1 if i == 1 else ub_in2 if i == 2 else ub_in3
            asc.data_copy(c, ub_in, asc.gm_at(src_gm, offsets[i]), _align(_sort_len(lengths[i]), 4))
            order[active] = i
            counts[active] = lengths[i]
            active += 1
    asc.sync_pipes(c, asc.MTE2_V)
    w0 = _window(ub_in0, ub_in1, ub_in2, ub_in3, order[0])
    w1 = _window(ub_in0, ub_in1, ub_in2, ub_in3, order[1])
    w2 = _window(ub_in0, ub_in1, ub_in2, ub_in3, order[2])
    w3 = _window(ub_in0, ub_in1, ub_in2, ub_in3, order[3])
    if active == 2:
        sorted_nums = asc.mrg_sort(c, ub_out, w0, w1, w0, w0, (counts[0], counts[1], 0, 0), 0b0011, 1, True)
    elif active == 3:
        sorted_nums = asc.mrg_sort(c, ub_out, w0, w1, w2, w0, (counts[0], counts[1], counts[2], 0), 0b0111, 1,
                                   True)
    elif active == 4:
        sorted_nums = asc.mrg_sort(c, ub_out, w0, w1, w2, w3, (counts[0], counts[1], counts[2], counts[3]), 0b1111,
                                   1, True)
    else:
        asc.data_copy(c, ub_out, w0, _align(_sort_len(counts[0]), 4))
        sorted_nums = (counts[0], 0, 0, 0)
    merged = 0
    j = 0
    for i in range(list_num):   # UpdateSortInfo
        if lengths[i] > 0:
            remain[i] -= sorted_nums[j]
            offsets[i] += _sort_len(sorted_nums[j])
            merged += sorted_nums[j]
            j += 1
    return merged


@aicore
def _window(ub_in0, ub_in1, ub_in2, ub_in3, i):
    return ub_in0 if i == 0 else ub_in1 if i == 1 else ub_in2 if i == 2 else ub_in3


@aicore
def mrgsort(c, src_gm, dst_gm, ub_inputs, ub_out, list_num, per_list, last_list, one_loop_max):
    """MoeV2Mrgsort::Init + Process: merge list_num sorted pair lists of src_gm into dst_gm."""
    offsets, remain = _mrgsort_init(list_num, per_list, last_list)
    in0, in1, in2, in3 = _list_windows(ub_inputs, one_loop_max)
    out_offset = 0
    while remain.sum() > 0:
        merged = _mrgsort_round(c, src_gm, in0, in1, in2, in3, ub_out, offsets, remain, one_loop_max, list_num)
        if merged == 0:
            break          # only after a fault (calls no longer run): the device would hang, the simulator stops
        asc.sync_pipes(c, asc.V_MTE3)
        asc.data_copy_pad(c, asc.gm_at(dst_gm, out_offset), ub_out,
                          asc.DataCopyExtParams(1, _sort_len(merged) * 4, 0, 0))
        out_offset += _sort_len(merged)


@aicore
def mrgsort_out(c, src_gm, ids_gm, rows_gm, ub_inputs, ub_out1, ub_out2, temp_buffer, list_num, per_list, last_list,
                one_loop_max):
    """MoeV2MrgsortOut::Init + Process: merge the last lists; each round's scores become int32 ids (Extract, Muls
    -1, Cast CAST_ROUND over AlignUp(merged, 8) lanes) written to ids_gm, its indices to rows_gm."""
    offsets, remain = _mrgsort_init(list_num, per_list, last_list)
    in0, in1, in2, in3 = _list_windows(ub_inputs, one_loop_max)
    out1_i32 = asc.view_as(c, ub_out1, asc.ub_i32(c))
    out2_u32 = asc.view_as(c, ub_out2, asc.ub_u32(c))
    out2_i32 = asc.view_as(c, ub_out2, asc.ub_i32(c))
    out_offset = 0
    while remain.sum() > 0:
        merged = _mrgsort_round(c, src_gm, in0, in1, in2, in3, temp_buffer, offsets, remain, one_loop_max, list_num)
        if merged == 0:
            break          # only after a fault, as in mrgsort
        asc.extract(c, ub_out1, out2_u32, temp_buffer, int_math.ceil_div(merged, ONE_REPEAT_SORT_NUM))
        lanes = _align(merged, 4)
        asc.muls(c, ub_out1, ub_out1, -1.0, lanes)
        asc.cast_f32_to_i32(c, out1_i32, ub_out1, asc.CAST_ROUND, lanes)
        params = asc.DataCopyExtParams(1, merged * 4, 0, 0)
        asc.sync_pipes(c, asc.V_MTE3)
        asc.data_copy_pad(c, asc.gm_at(ids_gm, out_offset), out1_i32, params)
        asc.data_copy_pad(c, asc.gm_at(rows_gm, out_offset), out2_i32, params)
        out_offset += merged


# --- MoeV2SortMultiCore -----------------------------------------------------------------------------------------
@aicore
def _workspace(td, ws_f32, index):
    """workspaceGms[index]: Align(total, 4) * 2 floats from float Align(total, 4) * (2 + 2 * index)."""
    aligned = _align(td.n * td.k, 4)
    return asc.gm_at(ws_f32, aligned * (2 + 2 * index))


@aicore
def core_loops(td, block_idx):
    """(sortCoreLoops, sortCoreLoopElements, sortCoreLastLoopElements) of a core (the last VBS core has its own)."""
    if block_idx == td.vbs_need_core_num - 1:
        return td.vbs_last_core_loops, td.vbs_last_core_per_loop_elements, td.vbs_last_core_last_loop_elements
    return td.vbs_per_core_loops, td.vbs_per_core_per_loop_elements, td.vbs_per_core_last_loop_elements


@aicore
def _ub_sort_process(c, td, keys_gm, ws_f32, progress, size, sort_num, loop_elements):
    """UBSortProcess: VBSCopyIn, UBSortCompute, VBSCopyOut of one loop of a VBS core."""
    K = asc.ub_like(c, keys_gm)
    F32 = asc.ub_f32(c)
    # VBSCopyIn
    in_local = asc.alloc_tensor(c, IN_QUEUE, K)
    in_offset = progress * loop_elements
    _copy_keys_in(c, in_local, asc.gm_at(keys_gm, c.block_idx * td.vbs_per_core_elements + in_offset), size)
    row_idx_local = asc.view_as(c, in_local[sort_num:], asc.ub_i32(c))
    asc.sync_pipes(c, asc.MTE2_S)
    arith_progression_perf(c, row_idx_local, c.block_idx * td.vbs_per_core_elements + in_offset, 1, size)
    asc.en_que(c, IN_QUEUE, in_local)
    # UBSortCompute (no Concat on arch 3510: the scores are sorted as they lie)
    in_local = asc.de_que(c, IN_QUEUE, K)
    keys_fp32 = asc.view_as(c, in_local, F32)
    asc.cast(c, keys_fp32, asc.DT_FLOAT, in_local, _key_dt(keys_gm), asc.CAST_ROUND, sort_num)
    _ub_sort_fp32(c, td, ws_f32, keys_fp32, asc.view_as(c, in_local[sort_num:], asc.ub_u32(c)), progress, size,
                  sort_num, loop_elements)


@outline
def _ub_sort_fp32(c, td, ws_f32, keys_fp32, source_row_local, progress, size, sort_num, loop_elements):
    """The rest of UBSortCompute and VBSCopyOut, on the widened keys (one compiled copy serves both id types)."""
    F32 = asc.ub_f32(c)
    asc.muls(c, keys_fp32, keys_fp32, -1.0, sort_num)
    _pad_last_group(c, keys_fp32, size)
    sorted_local = asc.tbuf_get(c, MULTI_SORTED, F32)[:_sort_len(sort_num)]
    out_local = asc.alloc_tensor(c, OUT_QUEUE, F32)
    asc.sort(c, out_local, keys_fp32, source_row_local, sorted_local, sort_num // ONE_REPEAT_SORT_NUM)
    asc.en_que(c, OUT_QUEUE, out_local)
    asc.free_tensor(c, IN_QUEUE, keys_fp32)
    # VBSCopyOut
    out_local = asc.de_que(c, OUT_QUEUE, F32)
    dst = asc.gm_at(_workspace(td, ws_f32, 0),
                    c.block_idx * _sort_len(td.vbs_per_core_elements) + _sort_len(progress * loop_elements))
    asc.data_copy(c, dst, out_local, _align(_sort_len(size), 4))
    asc.free_tensor(c, OUT_QUEUE, out_local)


@outline
def _merge(c, td, ws_f32, list_num, per_list, last_list, core_offset, loop_offset):
    """InitMoeMrgSort + MoeV2Mrgsort: list_num lists of this core's slice of workspaceGms[srcWsIndex], merged into
    the other area through the in-queue windows and the out-queue buffer."""
    F32 = asc.ub_f32(c)
    src_ws = asc.members(c)[M_SRC_WS_INDEX]
    offset = c.block_idx * core_offset + loop_offset
    in_local = asc.alloc_tensor(c, IN_QUEUE, F32)
    out_local = asc.alloc_tensor(c, OUT_QUEUE, F32)
    asc.free_tensor(c, IN_QUEUE, in_local)       # (sic) the sorter keeps using both freed buffers
    asc.free_tensor(c, OUT_QUEUE, out_local)
    mrgsort(c, asc.gm_at(_workspace(td, ws_f32, src_ws), offset), asc.gm_at(_workspace(td, ws_f32, 1 - src_ws), offset),
            in_local, out_local, list_num, per_list, last_list, td.sort_out_one_loop_max_elements)


@aicore
def sort_vbs_process(c, td, keys_gm, ws_f32):
    """VBSProcess (with OneCoreVMSProcess when a core sorted several loops), then the start of VMSProcess."""
    m = asc.members(c)
    m[M_SRC_WS_INDEX] = 0
    loops, loop_elements, last_loop_elements = core_loops(td, c.block_idx)
    if c.block_idx < td.vbs_need_core_num:
        sort_num = int_math.ceil_div(loop_elements, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
        for loop in range(loops - 1):
            _ub_sort_process(c, td, keys_gm, ws_f32, loop, loop_elements, sort_num, loop_elements)
        sort_num = int_math.ceil_div(last_loop_elements, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
        _ub_sort_process(c, td, keys_gm, ws_f32, loops - 1, last_loop_elements, sort_num, loop_elements)
        if loops > 1:
            # OneCoreVMSProcess
            core_offset = _sort_len(td.vbs_per_core_elements)
            list_num, per_list, last_list = loops, loop_elements, last_loop_elements
            while list_num >= 1:
                merges = (list_num + MAX_MRGSORT_LIST - 1) // MAX_MRGSORT_LIST
                remain_lists = list_num - (merges - 1) * MAX_MRGSORT_LIST
                loop_offset = _sort_len(per_list * MAX_MRGSORT_LIST)
                for k in range(merges - 1):
                    _merge(c, td, ws_f32, MAX_MRGSORT_LIST, per_list, per_list, core_offset, k * loop_offset)
                _merge(c, td, ws_f32, remain_lists, per_list, last_list, core_offset, (merges - 1) * loop_offset)
                list_num = merges
                last_list = per_list * (remain_lists - 1) + last_list
                per_list = per_list * MAX_MRGSORT_LIST
                m[M_SRC_WS_INDEX] = (m[M_SRC_WS_INDEX] + 1) % WORK_GM_NUM
                if merges == 1:
                    break
    # VMSProcess starts from the VBS cores' lists (every core)
    m[M_LIST_NUM] = td.vbs_need_core_num
    m[M_PER_LIST_ELEMENTS] = td.vbs_per_core_elements
    m[M_LAST_LIST_ELEMENTS] = td.vbs_last_core_elements


@outline
def sort_vms_level(c, td, ws_f32):
    """One pass of VMSProcess's loop (more than four lists left): cores 0 .. ceil(lists / 4) - 1 merge four
    adjacent lists each, the last of them the remaining ones."""
    m = asc.members(c)
    list_num, per_list, last_list = m[M_LIST_NUM], m[M_PER_LIST_ELEMENTS], m[M_LAST_LIST_ELEMENTS]
    need = int_math.ceil_div(list_num, MAX_MRGSORT_LIST)
    core_offset = _sort_len(per_list * MAX_MRGSORT_LIST)
    remain_lists = list_num - (need - 1) * MAX_MRGSORT_LIST
    if c.block_idx < need - 1:
        _merge(c, td, ws_f32, MAX_MRGSORT_LIST, per_list, per_list, core_offset, 0)
    elif c.block_idx == need - 1:
        _merge(c, td, ws_f32, remain_lists, per_list, last_list, core_offset, 0)
    m[M_LIST_NUM] = need
    m[M_SRC_WS_INDEX] = (m[M_SRC_WS_INDEX] + 1) % WORK_GM_NUM
    m[M_LAST_LIST_ELEMENTS] = per_list * (remain_lists - 1) + last_list
    m[M_PER_LIST_ELEMENTS] = per_list * MAX_MRGSORT_LIST


@outline
def sort_out_process(c, td, ws_i32, ws_f32):
    """SortOutProcess: core 0 merges the last lists (InitMoeMrgSortOut + MoeV2MrgsortOut)."""
    if c.block_idx >= 1:
        return
    m = asc.members(c)
    F32 = asc.ub_f32(c)
    loop_max = td.sort_out_one_loop_max_elements
    in_local = asc.alloc_tensor(c, IN_QUEUE, F32)
    out_local = asc.alloc_tensor(c, OUT_QUEUE, F32)
    out_local_v = out_local[loop_max * MAX_MRGSORT_LIST:]
    temp_buffer = asc.tbuf_get(c, MULTI_SORTED, F32)[:_sort_len(loop_max) * MAX_MRGSORT_LIST]
    asc.free_tensor(c, IN_QUEUE, in_local)        # (sic) as InitMoeMrgSortOut does
    asc.free_tensor(c, OUT_QUEUE, out_local)
    mrgsort_out(c, _workspace(td, ws_f32, m[M_SRC_WS_INDEX]), _sorted_ids_gm(ws_i32), _dst_to_src_gm(td, ws_i32),
                in_local, out_local, out_local_v, temp_buffer, m[M_LIST_NUM], m[M_PER_LIST_ELEMENTS],
                m[M_LAST_LIST_ELEMENTS], loop_max)


# --- stage entries and the sort's TPipe phase -------------------------------------------------------------------
@global_aicore
def one_core_stage(c, td, gm):
    sort_one_core_process(c, td, gm.keys, gm.ws_i32)


@global_aicore
def vbs_stage(c, td, gm):
    sort_vbs_process(c, td, gm.keys, gm.ws_f32)


@global_aicore
def vms_stage(c, td, gm):
    sort_vms_level(c, td, gm.ws_f32)


@global_aicore
def sort_out_stage(c, td, gm):
    sort_out_process(c, td, gm.ws_i32, gm.ws_f32)


def vms_levels(vbs_need_core_num: int) -> int:
    """Passes of VMSProcess's loop: how often `lists = ceil(lists / 4)` runs while more than four lists remain."""
    levels, lists = 0, vbs_need_core_num
    while lists > MAX_MRGSORT_LIST:
        lists = (lists + MAX_MRGSORT_LIST - 1) // MAX_MRGSORT_LIST
        levels += 1
    return levels


def sort_schedule(multi_core: bool, td) -> list:
    """The stages of one sort with the SyncAll() calls of its Process() (none on a one-core chip)."""
    sync = [SYNC_ALL] if td.core_num != 1 else []
    if not multi_core:
        return [one_core_stage] + sync
    schedule = [vbs_stage] + sync
    for _ in range(vms_levels(td.vbs_need_core_num)):
        schedule += [vms_stage] + sync
    return schedule + [sort_out_stage] + sync


def _multi_core_plan(select):
    """PipePhase.core_plan of the multi-core sort: InitBuffers sizes its buffers from the core's own
    sortCoreLoopElements (the last VBS core has its own), the in-queue 1.5 times as large for int64 keys."""
    def core_plan(block_idx, rows, *launch_args):
        td, gm = select(*launch_args)
        loop = td.vbs_last_core_per_loop_elements if block_idx == td.vbs_need_core_num - 1 \
            else td.vbs_per_core_per_loop_elements
        nbytes = -(-max(td.sort_out_one_loop_max_elements * MAX_MRGSORT_LIST, loop) // ONE_REPEAT_SORT_NUM) \
            * ONE_REPEAT_SORT_NUM * 4 * 2
        in_bytes = nbytes // 2 * 3 if gm.keys.data.itemsize == 8 else nbytes
        return tuple(row._replace(bytes=in_bytes if row.name == "sortDataCopyInQueue" else nbytes) for row in rows)
    return core_plan


def sort_phase(multi_core: bool, select) -> PipePhase:
    """The sort as TPipe "sortPipe"; `select(*launch_args)` returns (td, SortGm)."""
    def schedule(*launch_args):
        td, _ = select(*launch_args)
        return sort_schedule(multi_core, td)
    if not multi_core:
        return PipePhase("sortPipe", ONE_CORE_BUFFERS, schedule, select, waived_queues=SORT_WAIVED_QUEUES)
    return PipePhase("sortPipe", MULTI_CORE_BUFFERS, schedule, select, core_plan=_multi_core_plan(select),
                     waived_queues=SORT_WAIVED_QUEUES)
