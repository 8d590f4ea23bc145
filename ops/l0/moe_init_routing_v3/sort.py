"""The arch35 sort of MoeInitRoutingV3: MoeSortOneCore, MoeSortMultiCore, MoeMrgsort, MoeMrgsortOut.

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_sort_one_core.h, moe_v3_sort_multi_core.h,
moe_v3_mrgsort.h, moe_v3_mrgsort_out.h and moe_v3_sort_base.h @ 25fb6b92890d

Sorts the n * k int32 expert ids ascending and stable, and writes two int32 streams to the workspace (kernel.py,
WORKSPACE LAYOUT): the sorted ids (sortedExpertIdx) and the flat slots they came from (the sorted row ids).

Differences from the 910B sort (ops/common/moe_sort.py), whose merge bookkeeping this module reuses:
* The key preparation is a `__VEC_SCOPE__` function: after the int32 -> fp32 Cast, each register of 64 keys is
  loaded (UpdateMask tail), compared with expertStart (CompareScalar LT), negated (Muls -1) and a lane below
  expertStart is replaced by MIN_FP32 (Select); the masked store writes the register back. Ids below
  expertStart therefore sort after every other id (as the group padding does, but before it: equal scores keep
  input order); ids at or above expertEnd keep their key and sort after the active ones.
* Both streams leave the sort: the one-core sort and MoeMrgsortOut Extract the scores too, negate them again
  (Muls -1) and Cast them back to int32 (CAST_ROUND; MIN_FP32 saturates to INT32_MAX).
* The row ids of a loop sit behind its keys in the same in-queue buffer (inLocal[sortNum]); the multi-core
  sort builds them with the plain ArithProgression every loop.
* Multi-core: VBSCopyOut always writes workspaceGms[0]; OneCoreVMSProcess runs only for more than one loop;
  MoeMrgsort reads its four windows from the in-queue buffer (sortedBuffer is the SortOut's temp buffer).
* Core 0 zeroes the expert count area (InitGlobalMemory) in Init, before it sorts.
* MoeMrgsort::CopyIn copies list i into window i and hands MrgSort the windows of the lists that still hold
  pairs, padded with the first (MrgSortSrcList(t0, t1, t0, t0) for two); the shared 910B round packs the lists
  into the first windows instead, so the arch35 round is written here (the merged result is the same).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, PipePhase
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common import int_math

# the 910B sort's helpers where the arch35 code is the same: the merge bookkeeping (Init's offsets and remaining
# counts, the four windows), the last-group padding, the member slots kept across SyncAll and the VMS level count
from ops.common.moe_sort import (
    M_LAST_LIST_ELEMENTS,
    M_LIST_NUM,
    M_PER_LIST_ELEMENTS,
    M_SRC_WS_INDEX,
    MAX_MRGSORT_LIST,
    MIN_FP32,
    ONE_REPEAT_SORT_NUM,
    WORK_GM_NUM,
    _align,
    _list_windows,
    _mrgsort_init,
    _pad_last_group,
    _sort_len,
    vms_levels,
)

V3SortGm = namedtuple("V3SortGm", ["expert_idx", "workspace", "workspace_f32"])
"""The GM the sort touches: the (n * k) int32 expert ids (read-only), the user workspace as int32 and the same
bytes as float32 (the multi-core ping-pong lists)."""

# buffers of MoeSortOneCore / MoeSortMultiCore, in InitBuffer order (they differ in the order of the two TBufs)
ONE_CORE_BUFFERS = ("sortDataCopyInQueue", "sortDataCopyOutQueue", "tempBuffer", "sortedBuffer")
MULTI_CORE_BUFFERS = ("sortDataCopyInQueue", "sortDataCopyOutQueue", "sortedBuffer", "tempBuffer")
IN_QUEUE, OUT_QUEUE = asc.buffer_ids(ONE_CORE_BUFFERS, "sortDataCopyInQueue", "sortDataCopyOutQueue",
                                     also=(MULTI_CORE_BUFFERS,))
ONE_CORE_TEMP, ONE_CORE_SORTED = asc.buffer_ids(ONE_CORE_BUFFERS, "tempBuffer", "sortedBuffer")
MULTI_SORTED, MULTI_TEMP = asc.buffer_ids(MULTI_CORE_BUFFERS, "sortedBuffer", "tempBuffer")
# InitMoeMrgSort / InitMoeMrgSortOut hand the sorter both queue buffers and FreeTensor them before the merge uses
# them (SetInput / SetOutput, then FreeTensor): checked mode lets that use after FreeTensor pass
SORT_WAIVED_QUEUES = ("sortDataCopyInQueue", "sortDataCopyOutQueue")

FLOAT_REG_TENSOR_LENGTH = 64     # fp32 lanes of one 256-byte vector register
KV_FACTOR = 2                    # a sorted list holds (score, index) pairs


@aicore
def sorted_idx_offset(td):
    """Int32 offset of the sorted row ids (expandDstToSrcRow) in the workspace: Align(n * k, 4 B)."""
    return _align(td.n * td.k, 4)


@aicore
def count_temp_offset(td):
    """Int32 offset of the per-expert count area (expertCountTempGm): 2 * Align(n * k, 4 B)."""
    return _align(td.n * td.k, 4) * 2


@aicore
def _init_count_temp(c, td, ws_gm):
    """Init on core 0: InitGlobalMemory(expertCountTempGm, actualExpertNum, 0), then SetWaitFlag<MTE3_MTE2>."""
    if c.block_idx == 0:
        # InitGlobalMemory
        asc.init_output(c, asc.gm_at(ws_gm, count_temp_offset(td)), td.actual_expert_num, np.int32(0))
        asc.sync_pipes(c, asc.MTE3_MTE2)       # SetWaitFlag<MTE3_MTE2>


@aicore
def prepare_keys(c, keys_fp32, count, expert_start):
    """The __VEC_SCOPE__ of SortCompute / UBSortCompute over the first `count` fp32 keys (in place): -key, or
    MIN_FP32 where key < expertStart. Registers: 0 the keys, 1 MIN_FP32, 2 the result; masks: 0 the loop's
    lanes, 1 the compare result, 2 all lanes."""
    repeat_times = int_math.ceil_div(count, FLOAT_REG_TENSOR_LENGTH)
    sreg = count
    cmp_scalar = np.float32(expert_start)
    if asc.vec_scope_begin(c):
        in_reg = asc.vreg_f32(c, 0)
        inf_reg = asc.vreg_f32(c, 1)
        dst_reg = asc.vreg_f32(c, 2)
        loop_mask = asc.mreg(c, 0)
        cmp_mask = asc.mreg(c, 1)
        main_mask = asc.mreg(c, 2)
        asc.create_mask(c, main_mask, 4, asc.PAT_ALL)
        asc.vduplicate(c, inf_reg, np.float32(MIN_FP32), main_mask)
        for i in range(repeat_times):
            sreg = asc.update_mask(c, loop_mask, 4, sreg)
            asc.reg_load(c, in_reg, keys_fp32, i * FLOAT_REG_TENSOR_LENGTH, asc.LOAD_NORM)
            asc.vcompare_scalar(c, cmp_mask, in_reg, cmp_scalar, asc.R_CMP_LT, loop_mask)
            asc.vmuls(c, in_reg, in_reg, np.float32(-1.0), loop_mask)
            asc.vselect(c, dst_reg, inf_reg, in_reg, cmp_mask)
            asc.reg_store(c, keys_fp32, dst_reg, i * FLOAT_REG_TENSOR_LENGTH, loop_mask)
        asc.vec_scope_end(c)


@aicore
def _scores_to_ids(c, scores, count):
    """Muls -1 and Cast<int32> (CAST_ROUND) in place: the sorted scores back to expert ids."""
    asc.muls(c, scores, scores, -1.0, count)
    asc.cast_f32_to_i32(c, asc.view_as(c, scores, asc.ub_i32(c)), scores, asc.CAST_ROUND, count)


# --- MoeSortOneCore ---------------------------------------------------------------------------------------
@aicore
def sort_one_core(c, td, gm):
    """MoeSortOneCore::Init + Process on every core (the SyncAll after it is the schedule's)."""
    _init_count_temp(c, td, gm.workspace)
    if c.block_idx >= 1:
        return
    total = td.n * td.k
    tile_length = _align(td.vbs_last_core_per_loop_elements, 4)
    sort_num = int_math.ceil_div(tile_length, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
    repeat = sort_num // ONE_REPEAT_SORT_NUM
    I32 = asc.ub_i32(c)
    F32 = asc.ub_f32(c)
    # CopyIn: the keys, and behind them the row ids 0 .. sortNum - 1
    in_local = asc.alloc_tensor(c, IN_QUEUE, I32)
    asc.data_copy_pad(c, in_local, gm.expert_idx, asc.DataCopyExtParams(1, total * 4, 0, 0), asc.NO_PAD)
    asc.arith_progression(c, in_local[sort_num:], np.int32(0), np.int32(1), sort_num)
    asc.en_que(c, IN_QUEUE, in_local)
    # SortCompute
    in_local = asc.de_que(c, IN_QUEUE, I32)
    keys_fp32 = asc.view_as(c, in_local, F32)           # ReinterpretCast<float>
    asc.cast(c, keys_fp32, asc.DT_FLOAT, in_local, asc.DT_INT32, asc.CAST_ROUND, tile_length)
    prepare_keys(c, keys_fp32, tile_length, td.expert_start)
    _pad_last_group(c, keys_fp32, total)
    temp = asc.tbuf_get(c, ONE_CORE_TEMP, F32)[:_sort_len(sort_num)]
    concat_local = asc.concat(c, keys_fp32, temp, repeat)
    sorted_local = asc.tbuf_get(c, ONE_CORE_SORTED, F32)[:_sort_len(sort_num)]
    source_row = asc.view_as(c, in_local[sort_num:], asc.ub_u32(c))
    asc.sort(c, sorted_local, concat_local, source_row, temp, repeat)
    out_local = asc.alloc_tensor(c, OUT_QUEUE, F32)
    asc.extract(c, out_local, asc.view_as(c, out_local[sort_num:], asc.ub_u32(c)), sorted_local, repeat)
    _scores_to_ids(c, out_local, tile_length)
    asc.en_que(c, OUT_QUEUE, out_local)
    asc.free_tensor(c, IN_QUEUE, in_local)
    # CopyOut: sortedExpertIdx and the sorted row ids
    out_i32 = asc.de_que(c, OUT_QUEUE, I32)
    params = asc.DataCopyExtParams(1, total * 4, 0, 0)
    asc.data_copy_pad(c, gm.workspace, out_i32, params)
    asc.data_copy_pad(c, asc.gm_at(gm.workspace, sorted_idx_offset(td)), out_i32[sort_num:], params)
    asc.free_tensor(c, OUT_QUEUE, out_i32)


# --- MoeMrgsort / MoeMrgsortOut (arch35) ------------------------------------------------------------------
@aicore
def _window(w0, w1, w2, w3, i):
    return w0 if i == 0 else w1 if i == 1 else w2 if i == 2 else w3


@aicore
def _mrgsort_round(c, src_gm, w0, w1, w2, w3, ub_out, offsets, remain, one_loop_max, list_num):
    """One round of MoeMrgsort / MoeMrgsortOut: CopyIn (list i into window i, up to one_loop_max pairs),
    UpdateMrgParam + MrgsortCompute (the lists that still hold pairs; MrgSort stops when one of them runs out, a
    single list is copied), UpdateSortInfo. Returns the pairs merged; offsets / remain are updated in place."""
    asc.sync_pipes(c, asc.MTE3_MTE2)
    lengths = np.zeros(4, dtype=np.int64)
    counts = np.zeros(4, dtype=np.int64)     # elementCountListTail
    lists = np.zeros(4, dtype=np.int64)      # which window tmpUbInputs[j] is
    active = 0
    for i in range(list_num):
        lengths[i] = min(one_loop_max, remain[i])
        if lengths[i] > 0:
            asc.data_copy(c, _window(w0, w1, w2, w3, i), asc.gm_at(src_gm, offsets[i]),
                          _align(_sort_len(lengths[i]), 4))
            lists[active] = i
            counts[active] = lengths[i]
            active += 1
    asc.sync_pipes(c, asc.MTE2_V)
    t0 = _window(w0, w1, w2, w3, lists[0])
    t1 = _window(w0, w1, w2, w3, lists[1]) if active > 1 else t0
    t2 = _window(w0, w1, w2, w3, lists[2]) if active > 2 else t0
    t3 = _window(w0, w1, w2, w3, lists[3]) if active > 3 else t0
    if active >= 2:
        valid_bit = 0b0011 if active == 2 else 0b0111 if active == 3 else 0b1111
        sorted_nums = asc.mrg_sort(c, ub_out, t0, t1, t2, t3, (counts[0], counts[1], counts[2], counts[3]),
                                   valid_bit, 1, True)
    else:
        asc.data_copy(c, ub_out, t0, _align(_sort_len(counts[0]), 4))
        sorted_nums = (counts[0], 0, 0, 0)
    merged = 0
    j = 0
    for i in range(list_num):
        if lengths[i] > 0:
            offsets[i] += _sort_len(sorted_nums[j])
            remain[i] -= sorted_nums[j]
            merged += sorted_nums[j]
            j += 1
    return merged


@aicore
def _mrgsort(c, src_gm, dst_gm, ub_inputs, ub_out, list_num, per_list, last_list, one_loop_max):
    """MoeMrgsort::Init + Process: merge list_num sorted lists of pairs from src_gm into dst_gm (CopyOut:
    DataCopyPad of each round's pairs after a V -> MTE3 event)."""
    offsets, remain = _mrgsort_init(list_num, per_list, last_list)
    w0, w1, w2, w3 = _list_windows(ub_inputs, one_loop_max)
    out_offset = 0
    while remain.sum() > 0:
        merged = _mrgsort_round(c, src_gm, w0, w1, w2, w3, ub_out, offsets, remain, one_loop_max, list_num)
        if merged == 0:
            break          # only after a fault (calls no longer run): the device would hang, the simulator stops
        asc.sync_pipes(c, asc.V_MTE3)
        asc.data_copy_pad(c, asc.gm_at(dst_gm, out_offset), ub_out,
                          asc.DataCopyExtParams(1, _sort_len(merged) * 4, 0, 0))
        out_offset += _sort_len(merged)


@aicore
def _workspace_list(td, ws_f32, index):
    """workspaceGms[index]: 2 * Align(n * k, 4 B) floats from float offset (2 + 2 * index) * Align(n * k, 4 B) +
    actualExpertNum (the areas start right after the count area, unaligned)."""
    a = _align(td.n * td.k, 4)
    return asc.gm_at(ws_f32, a * (KV_FACTOR + KV_FACTOR * index) + td.actual_expert_num)


@aicore
def _merge(c, td, ws_f32, list_num, per_list, last_list, core_offset, loop_offset):
    """InitMoeMrgSort + MoeMrgsort::Init / Process: this core's list_num lists of workspaceGms[srcWsIndex] into the
    other area, through the in-queue windows and the out-queue buffer."""
    src_ws = asc.members(c)[M_SRC_WS_INDEX]
    F32 = asc.ub_f32(c)
    in_local = asc.alloc_tensor(c, IN_QUEUE, F32)
    out_local = asc.alloc_tensor(c, OUT_QUEUE, F32)
    asc.free_tensor(c, IN_QUEUE, in_local)       # (sic) the sorter keeps using both freed buffers
    asc.free_tensor(c, OUT_QUEUE, out_local)
    offset = c.block_idx * core_offset + loop_offset
    _mrgsort(c, asc.gm_at(_workspace_list(td, ws_f32, src_ws), offset),
             asc.gm_at(_workspace_list(td, ws_f32, 1 - src_ws), offset), in_local, out_local, list_num, per_list,
             last_list, td.sort_out_one_loop_max_elements)


@aicore
def mrgsort_out(c, src_gm, ids_gm, rows_gm, ub_inputs, ub_out_value, ub_out_index, temp_buffer, list_num, per_list,
                last_list, one_loop_max):
    """MoeMrgsortOut::Init + Process: merge the last lists; each round Extracts both streams, turns the scores
    back into ids (Muls -1, Cast CAST_ROUND over Align(merged, 4 B)) and writes ids and row ids."""
    offsets, remain = _mrgsort_init(list_num, per_list, last_list)
    in0, in1, in2, in3 = _list_windows(ub_inputs, one_loop_max)
    index_u32 = asc.view_as(c, ub_out_index, asc.ub_u32(c))
    value_i32 = asc.view_as(c, ub_out_value, asc.ub_i32(c))
    index_i32 = asc.view_as(c, ub_out_index, asc.ub_i32(c))
    out_offset = 0
    while remain.sum() > 0:
        merged = _mrgsort_round(c, src_gm, in0, in1, in2, in3, temp_buffer, offsets, remain, one_loop_max, list_num)
        if merged == 0:
            break          # only after a fault (calls no longer run): the device would hang, the simulator stops
        asc.extract(c, ub_out_value, index_u32, temp_buffer, int_math.ceil_div(merged, ONE_REPEAT_SORT_NUM))
        _scores_to_ids(c, ub_out_value, _align(merged, 4))
        params = asc.DataCopyExtParams(1, merged * 4, 0, 0)
        asc.sync_pipes(c, asc.V_MTE3)
        asc.data_copy_pad(c, asc.gm_at(ids_gm, out_offset), value_i32, params)
        asc.data_copy_pad(c, asc.gm_at(rows_gm, out_offset), index_i32, params)
        out_offset += merged


# --- MoeSortMultiCore -------------------------------------------------------------------------------------
@aicore
def _core_loops(td, block_idx):
    """InitBasicParams: (sortCoreLoops, sortCoreLoopElements, sortCoreLastLoopElements) of a core."""
    if block_idx == td.vbs_need_core_num - 1:
        return td.vbs_last_core_loops, td.vbs_last_core_per_loop_elements, td.vbs_last_core_last_loop_elements
    return td.vbs_per_core_loops, td.vbs_per_core_per_loop_elements, td.vbs_per_core_last_loop_elements


@aicore
def _ub_sort(c, td, gm, progress, size, sort_num, loop_elements):
    """UBSortProcess: VBSCopyIn, UBSortCompute, VBSCopyOut of one loop."""
    I32 = asc.ub_i32(c)
    F32 = asc.ub_f32(c)
    # VBSCopyIn
    in_offset = progress * loop_elements
    core_keys = asc.gm_at(gm.expert_idx, c.block_idx * td.vbs_per_core_elements + in_offset)
    in_local = asc.alloc_tensor(c, IN_QUEUE, I32)
    asc.data_copy_pad(c, in_local, core_keys, asc.DataCopyExtParams(1, size * 4, 0, 0), asc.NO_PAD)
    start_value = c.block_idx * td.vbs_per_core_elements + in_offset
    asc.sync_pipes(c, asc.MTE2_S)
    asc.arith_progression(c, in_local[sort_num:], np.int32(start_value), np.int32(1), size)
    asc.en_que(c, IN_QUEUE, in_local)
    # UBSortCompute: the Cast and the VF cover all sortNum lanes (the group padding overwrites the tail)
    in_local = asc.de_que(c, IN_QUEUE, I32)
    keys_fp32 = asc.view_as(c, in_local, F32)
    asc.cast(c, keys_fp32, asc.DT_FLOAT, in_local, asc.DT_INT32, asc.CAST_ROUND, sort_num)
    prepare_keys(c, keys_fp32, sort_num, td.expert_start)
    _pad_last_group(c, keys_fp32, size)
    sorted_local = asc.tbuf_get(c, MULTI_SORTED, F32)[:_sort_len(sort_num)]
    out_local = asc.alloc_tensor(c, OUT_QUEUE, F32)
    source_row = asc.view_as(c, in_local[sort_num:], asc.ub_u32(c))
    asc.sort(c, out_local, keys_fp32, source_row, sorted_local, sort_num // ONE_REPEAT_SORT_NUM)
    asc.en_que(c, OUT_QUEUE, out_local)
    asc.free_tensor(c, IN_QUEUE, in_local)
    # VBSCopyOut
    out_local = asc.de_que(c, OUT_QUEUE, F32)
    dst = asc.gm_at(_workspace_list(td, gm.workspace_f32, 0),
                    c.block_idx * _sort_len(td.vbs_per_core_elements) + _sort_len(progress * loop_elements))
    asc.data_copy(c, dst, out_local, _align(_sort_len(size), 4))
    asc.free_tensor(c, OUT_QUEUE, out_local)


@aicore
def sort_vbs(c, td, gm):
    """MoeSortMultiCore::Init + VBSProcess (its loops' merge, OneCoreVMSProcess, included); then the start of
    VMSProcess, which every core runs."""
    _init_count_temp(c, td, gm.workspace)
    m = asc.members(c)
    m[M_SRC_WS_INDEX] = 0
    loops, loop_elements, last_loop_elements = _core_loops(td, c.block_idx)
    if c.block_idx < td.vbs_need_core_num:
        sort_num = int_math.ceil_div(loop_elements, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
        for loop in range(loops - 1):
            _ub_sort(c, td, gm, loop, loop_elements, sort_num, loop_elements)
        sort_num = int_math.ceil_div(last_loop_elements, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
        _ub_sort(c, td, gm, loops - 1, last_loop_elements, sort_num, loop_elements)
        if loops > 1:
            # OneCoreVMSProcess: this core's loop lists, four at a time, until one is left
            core_offset = _sort_len(td.vbs_per_core_elements)
            list_num, per_list, last_list = loops, loop_elements, last_loop_elements
            while list_num >= 1:
                merges = (list_num + MAX_MRGSORT_LIST - 1) // MAX_MRGSORT_LIST
                remain_lists = list_num - (merges - 1) * MAX_MRGSORT_LIST
                loop_offset = _sort_len(per_list * MAX_MRGSORT_LIST)
                for k in range(merges - 1):
                    _merge(c, td, gm.workspace_f32, MAX_MRGSORT_LIST, per_list, per_list, core_offset, k * loop_offset)
                _merge(c, td, gm.workspace_f32, remain_lists, per_list, last_list, core_offset,
                       (merges - 1) * loop_offset)
                last_list = per_list * (remain_lists - 1) + last_list
                per_list = per_list * MAX_MRGSORT_LIST
                list_num = merges
                m[M_SRC_WS_INDEX] = (m[M_SRC_WS_INDEX] + 1) % WORK_GM_NUM
                if merges == 1:
                    break
    m[M_LIST_NUM] = td.vbs_need_core_num
    m[M_PER_LIST_ELEMENTS] = td.vbs_per_core_elements
    m[M_LAST_LIST_ELEMENTS] = td.vbs_last_core_elements


@aicore
def sort_vms_level(c, td, gm):
    """One iteration of VMSProcess's loop (more than four lists left): cores 0 .. ceil(lists / 4) - 1 merge four
    adjacent lists each."""
    m = asc.members(c)
    list_num, per_list, last_list = m[M_LIST_NUM], m[M_PER_LIST_ELEMENTS], m[M_LAST_LIST_ELEMENTS]
    need = int_math.ceil_div(list_num, MAX_MRGSORT_LIST)
    core_offset = _sort_len(per_list * MAX_MRGSORT_LIST)
    remain_lists = list_num - (need - 1) * MAX_MRGSORT_LIST
    if c.block_idx < need - 1:
        _merge(c, td, gm.workspace_f32, MAX_MRGSORT_LIST, per_list, per_list, core_offset, 0)
    elif c.block_idx == need - 1:
        _merge(c, td, gm.workspace_f32, remain_lists, per_list, last_list, core_offset, 0)
    m[M_LIST_NUM] = need
    m[M_SRC_WS_INDEX] = (m[M_SRC_WS_INDEX] + 1) % WORK_GM_NUM
    m[M_LAST_LIST_ELEMENTS] = per_list * (remain_lists - 1) + last_list
    m[M_PER_LIST_ELEMENTS] = per_list * MAX_MRGSORT_LIST


@aicore
def sort_out(c, td, gm):
    """SortOutProcess: core 0 merges the last <= 4 lists (InitMoeMrgSortOut + MoeMrgsortOut) into both streams."""
    if c.block_idx >= 1:
        return
    m = asc.members(c)
    F32 = asc.ub_f32(c)
    loop_max = td.sort_out_one_loop_max_elements
    in_local = asc.alloc_tensor(c, IN_QUEUE, F32)
    out_local = asc.alloc_tensor(c, OUT_QUEUE, F32)
    out_local_v = out_local[loop_max * MAX_MRGSORT_LIST:]
    temp_buffer = asc.tbuf_get(c, MULTI_SORTED, F32)[:_sort_len(loop_max) * MAX_MRGSORT_LIST]
    asc.free_tensor(c, IN_QUEUE, in_local)       # (sic) as InitMoeMrgSortOut does
    asc.free_tensor(c, OUT_QUEUE, out_local)
    mrgsort_out(c, _workspace_list(td, gm.workspace_f32, m[M_SRC_WS_INDEX]), gm.workspace,
                asc.gm_at(gm.workspace, sorted_idx_offset(td)), in_local, out_local, out_local_v, temp_buffer,
                m[M_LIST_NUM], m[M_PER_LIST_ELEMENTS], m[M_LAST_LIST_ELEMENTS], loop_max)


# --- stage entries and the sortPipe phase ------------------------------------------------------------------
@global_aicore
def one_core_stage(c, td, gm):
    sort_one_core(c, td, gm)


@global_aicore
def vbs_stage(c, td, gm):
    sort_vbs(c, td, gm)


@global_aicore
def vms_stage(c, td, gm):
    sort_vms_level(c, td, gm)


@global_aicore
def sort_out_stage(c, td, gm):
    sort_out(c, td, gm)


def sort_schedule(multi_core: bool, vbs_need_core_num: int) -> list:
    """The stages of the sort with the SyncAll() calls of its Process()."""
    if not multi_core:
        return [one_core_stage, SYNC_ALL]
    schedule = [vbs_stage, SYNC_ALL]
    for _ in range(vms_levels(vbs_need_core_num)):
        schedule += [vms_stage, SYNC_ALL]
    return schedule + [sort_out_stage, SYNC_ALL]


def _multi_core_plan(select):
    """MoeSortMultiCore::Init sizes its four buffers from the core's own sortCoreLoopElements (the last VBS core
    has its own): Ceil(max(4 * oneLoopMaxElements, loop), 32) * 32 keys of two int32."""
    def core_plan(block_idx, rows, *launch_args):
        td, _ = select(*launch_args)
        last = block_idx == td.vbs_need_core_num - 1
        loop = td.vbs_last_core_per_loop_elements if last else td.vbs_per_core_per_loop_elements
        keys = int_math.ceil_div(max(td.sort_out_one_loop_max_elements * MAX_MRGSORT_LIST, loop),
                                 ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
        return tuple(row._replace(bytes=keys * 4 * KV_FACTOR) for row in rows)
    return core_plan


def sort_phase(multi_core: bool, select) -> PipePhase:
    """The sortPipe phase; `select(*launch_args)` returns (td, V3SortGm)."""
    def schedule(*launch_args):
        td, _ = select(*launch_args)
        return sort_schedule(multi_core, td.vbs_need_core_num)
    if not multi_core:
        return PipePhase("sortPipe", ONE_CORE_BUFFERS, schedule, select, waived_queues=SORT_WAIVED_QUEUES)
    return PipePhase("sortPipe", MULTI_CORE_BUFFERS, schedule, select, core_plan=_multi_core_plan(select),
                     waived_queues=SORT_WAIVED_QUEUES)
