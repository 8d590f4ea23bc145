"""The multi-stage sort of MoeTokenPermute / MoeTokenPermuteWithRoutingMap (moe_sort_one_core.h,
moe_sort_multi_core.h, moe_mrgsort.h, moe_mrgsort_out.h, moe_sort_base.h).

Sorts `total` integer keys ascending (as -fp32(key), descending) and writes the positions in
sorted order (int32) to `out_gm`; equal keys keep ascending position.

* One-core mode: core 0 loads all keys, widens them to fp32 (CAST_ROUND), negates them,
  pads the last group of 32 with MIN_FP32, Sorts with the index 0..n-1 and Extracts the indices.
* Multi-core mode, three SyncAll-separated steps:
  VBS: each of vbs_need_core_num cores sorts its slice loop by loop into the ping-pong workspace
       and merges its loop lists 4 at a time (MoeMrgsort), flipping workspaces;
  VMS: while more than 4 lists remain, cores merge 4 adjacent lists each (one SyncAll per level);
  SortOut: core 0 merges the last <= 4 lists and writes only the index stream.

The tiling struct passed as `td` must carry n, top_k, core_num, vbs_* fields,
vms_middle_need_core_num and sort_out_one_loop_max_elements (both operators' structs do).
`keys_gm` is the GlobalTensor of keys (int32 or int64), `out_gm` the int32 result, `ws_gm` a
float32 GlobalTensor over the user workspace (two ping-pong areas of AlignUp(total, 8) * 2 floats).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import SYNC_ALL, PipePhase
from ascend_sim.check import InitWaiver
from ascend_sim.kernel_api import aicore, global_aicore
from ops.common import int_math
from tiling.moe_sort import MULTI_CORE_BUFFERS, core_loop_elements, multi_core_index_num

SortGm = namedtuple("SortGm", ["keys", "out", "workspace"])
"""The GM a sort touches: keys (int32 / int64), the int32 result, the float32 ping-pong workspace."""


def sort_gm(keys, out, workspace) -> SortGm:
    """The SortGm of one sort. The keys are only read, so they are always handed over read-only: a sort of
    an operator input (read-only) and a sort of a buffer the kernel wrote earlier (in place: keys is out)
    then share one compiled stage."""
    data = keys.data
    if data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return SortGm(keys._replace(data=data), out, workspace)


MIN_FP32 = -3.4e38
ONE_REPEAT_SORT_NUM = 32
MAX_MRGSORT_LIST = 4
WORK_GM_NUM = 2

# buffers of MoeSortOneCore (in InitBuffer order)
ONE_CORE_BUFFERS = ("sortDataCopyInQueue", "indexBuffer", "sortDataCopyOutQueue", "sortedBuffer")
ONE_CORE_IN_QUEUE, ONE_CORE_INDEX_BUFFER, ONE_CORE_OUT_QUEUE, ONE_CORE_SORTED_BUFFER = \
    asc.buffer_ids(ONE_CORE_BUFFERS, *ONE_CORE_BUFFERS)
# the real InitMoeMrgSort / InitMoeMrgSortOut hand the sorter an out buffer and FreeTensor it before the merge
# writes it (SetOutput then FreeTensor): checked mode lets that use after FreeTensor pass (docs/guides/checked-mode.md)
SORT_WAIVED_QUEUES = ("sortDataCopyOutQueue",)
# MoeMrgsort::CopyIn / MoeMrgsortOut::CopyIn copy each list window with DataCopy of Align(GetSortLen(length),
# sizeof(float)) floats: up to 24 bytes past a list's end, past the last list into workspace no core wrote (the
# merge uses only `length` pairs); checked mode "init" lets such reads pass (docs/guides/checked-mode.md)
MRGSORT_ALIGNED_READ = InitWaiver(
    "workspace", "moe/moe_token_permute/op_kernel/moe_mrgsort.h:117 and moe_mrgsort_out.h:145 (the routing-map "
    "copies: moe_token_permute_with_routing_map/op_kernel/moe_mrgsort.h:116, moe_mrgsort_out.h:146) @ 25fb6b92890d: "
    "CopyIn's DataCopy rounds a list window up to 32 bytes, past the last list's end", tail=32)
# MoeMrgsortOut::Extract extracts Ceil(curLoopSortedNum, 32) repeats of the merged pairs in tempBuffer: the pairs
# past the round's count were never written (their indices are past the copy-out's count)
MRGSORT_OUT_EXTRACT_TAIL = InitWaiver(
    "sortedBuffer", "moe/moe_token_permute/op_kernel/moe_mrgsort_out.h:199 (routing-map copy: moe_mrgsort_out.h:200) "
    "@ 25fb6b92890d: Extract of Ceil(curLoopSortedNum, ONE_REPEAT_SORT_NUM) repeats")
# MoeSortOneCore fills the index progression for totalLength lanes and Sorts / Extracts sortNum (rounded up to 32):
# the lanes past totalLength carry never-written indices beside the MIN_FP32 pad keys, which sort them last, past
# the copied-out count
ONE_CORE_INDEX_TAIL_READ = InitWaiver(
    "indexBuffer", "moe/moe_token_permute/op_kernel/moe_sort_one_core.h:60 (ArithProgression of totalLength) and "
    ":100 (Sort of sortNum); the same lines in moe_token_permute_with_routing_map/op_kernel/moe_sort_one_core.h "
    "@ 25fb6b92890d")


def sort_waivers(multi_core: bool) -> tuple:
    """The InitWaivers of a kernel with this sort (see above)."""
    return (MRGSORT_ALIGNED_READ, MRGSORT_OUT_EXTRACT_TAIL) if multi_core else (ONE_CORE_INDEX_TAIL_READ,)

# buffers of MoeSortMultiCore
# (tiling.moe_sort.MULTI_CORE_BUFFERS; indexConcatBuffer holds the indices, then the fp32 keys)
MULTI_IN_QUEUE, MULTI_OUT_QUEUE, MULTI_INDEX_CONCAT, MULTI_SORTED_BUFFER = asc.buffer_ids(
    MULTI_CORE_BUFFERS, "sortDataCopyInQueue", "sortDataCopyOutQueue", "indexConcatBuffer", "sortedBuffer")

# member variables kept across SyncAll (asc.members slots)
M_SRC_WS_INDEX = 0
M_LIST_NUM = 1
M_PER_LIST_ELEMENTS = 2
M_LAST_LIST_ELEMENTS = 3


@aicore
def _align(elements, nbytes):
    """moe_common.h Align: elements rounded up so that elements * nbytes is a multiple of 32."""
    return 0 if nbytes == 0 else (elements * nbytes + 31) // 32 * 32 // nbytes


@aicore
def _sort_len(n):
    """GetSortLen<float>(n) = GetSortOffset<float>(n): floats of n (score, index) pairs."""
    return 2 * n


@aicore
def _copy_keys_in(c, in_local, keys_gm, count):
    """DataCopyPad of `count` keys; int64 keys move as pairs of int32 (DataCopyB64)."""
    params = asc.DataCopyExtParams(1, count * keys_gm.data.itemsize, 0, 0)
    if keys_gm.data.itemsize == 8:
        asc.data_copy_pad(c, asc.view_as(c, in_local, asc.ub_i32(c)), asc.gm_as_i32(keys_gm), params, asc.NO_PAD)
    else:
        asc.data_copy_pad(c, in_local, keys_gm, params, asc.NO_PAD)


@aicore
def _pad_last_group(c, keys_fp32, size):
    """Lanes size % 32 .. 31 of the last group of 32 become MIN_FP32 so they sort last."""
    duplicate_num = size % ONE_REPEAT_SORT_NUM
    if duplicate_num > 0:
        mask0 = (np.uint64(0xFFFFFFFFFFFFFFFF) << np.uint64(duplicate_num)) & np.uint64(0xFFFFFFFF)
        asc.duplicate_mask(c, keys_fp32[size - duplicate_num:], np.float32(MIN_FP32), mask0, 0, 1, 1, 8)


# --- ArithProgressionSupportInt32 (moe_sort_base.h) -----------------------------------------------------
BLOCK_NUM_I32 = 8       # int32 lanes of one 32-byte block (ONE_BLK_SIZE / sizeof(int32))
REPEAT_NUM_I32 = 64     # int32 lanes of one 256-byte repeat (ONE_REPEAT_BYTE_SIZE / sizeof(int32))
DEFAULT_BLK_NUM = 8     # blocks per repeat


@aicore
def _base_progression(c, dst, first_value, diff_value, count):
    """GetBaseArithProgressionSupportInt32: dst[i] = first + diff * i for i < count, one scalar SetValue
    each, computed in int32 (wraps)."""
    for i in range(count):
        asc.set_value(c, dst, i, np.int32(first_value + diff_value * i))


@aicore
def arith_progression_support_int32(c, dst, first_value, diff_value, count):
    """ArithProgressionSupportInt32<int32_t>(dst, first, diff, count): the op's own int32 progression.

    Up to 8 elements it is scalar only. Beyond, the scalar unit writes the first block, an S->V flag hands it
    to the vector unit, and masked Adds copy it forward with a PipeBarrier<PIPE_V> after each: block by block
    up to one repeat (64 elements), then repeat by repeat, and a last partial repeat of AlignUp(tail, 8)
    lanes; so it writes AlignUp(count, 8) elements, not count. The Adds step is static_cast<int32>(float(diff)
    * lanes). Each masked Adds<int32, false>(dst, src, step, MASK_PLACEHOLDER, 1 repeat, ...) runs one repeat
    under the mask SetVectorMask set (8, 64 or AlignUp(tail, 8) leading lanes): the same instruction as
    asc.adds over that many elements. dst is int32 and 32-byte aligned (every Adds operand then is too).
    """
    if count <= BLOCK_NUM_I32:
        _base_progression(c, dst, first_value, diff_value, count)
        return
    _base_progression(c, dst, first_value, diff_value, BLOCK_NUM_I32)
    asc.sync_pipes(c, asc.S_V)
    block_step = np.int32(np.float32(diff_value) * np.float32(BLOCK_NUM_I32))
    if count > REPEAT_NUM_I32:
        # SetVectorMask: one block of lanes; fill the first repeat block by block
        asc.pipe_barrier(c, asc.PIPE_V)
        for i in range(DEFAULT_BLK_NUM - 1):
            asc.adds(c, dst[(i + 1) * BLOCK_NUM_I32:], dst[i * BLOCK_NUM_I32:], block_step, BLOCK_NUM_I32)
            asc.pipe_barrier(c, asc.PIPE_V)
        repeat = count // REPEAT_NUM_I32
        tail = count % REPEAT_NUM_I32
        repeat_step = np.int32(np.float32(diff_value) * np.float32(REPEAT_NUM_I32))
        # ResetMask: all 64 lanes; then each repeat from the one before it
        asc.pipe_barrier(c, asc.PIPE_V)
        for i in range(repeat - 1):
            asc.adds(c, dst[(i + 1) * REPEAT_NUM_I32:], dst[i * REPEAT_NUM_I32:], repeat_step, REPEAT_NUM_I32)
            asc.pipe_barrier(c, asc.PIPE_V)
        if tail > 0:
            tail_aligned = int_math.align_up(tail, BLOCK_NUM_I32)
            # SetVectorMask(tail_aligned)
            asc.pipe_barrier(c, asc.PIPE_V)
            asc.adds(c, dst[repeat * REPEAT_NUM_I32:], dst[(repeat - 1) * REPEAT_NUM_I32:], repeat_step,
                     tail_aligned)
            asc.pipe_barrier(c, asc.PIPE_V)
    else:
        # SetVectorMask: one block of lanes; the remaining blocks of the (single, partial) repeat
        blocks = int_math.ceil_div(count, BLOCK_NUM_I32)
        asc.pipe_barrier(c, asc.PIPE_V)
        for i in range(blocks - 1):
            asc.adds(c, dst[(i + 1) * BLOCK_NUM_I32:], dst[i * BLOCK_NUM_I32:], block_step, BLOCK_NUM_I32)
            asc.pipe_barrier(c, asc.PIPE_V)


# --- one-core mode (MoeSortOneCore) ---------------------------------------------------------------
@aicore
def sort_one_core_process(c, td, keys_gm, out_gm):
    """MoeSortOneCore::Process on core 0 (the caller's schedule adds the SyncAll that follows)."""
    if c.block_idx >= 1:
        return
    total = td.n * td.top_k
    tile_length = _align(td.vbs_last_core_per_loop_elements, 4)
    sort_num = int_math.ceil_div(tile_length, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
    K = asc.ub_like(c, keys_gm)
    F32 = asc.ub_f32(c)
    index_local = asc.tbuf_get(c, ONE_CORE_INDEX_BUFFER, asc.ub_i32(c))
    # CopyIn
    in_local = asc.alloc_tensor(c, ONE_CORE_IN_QUEUE, K)
    _copy_keys_in(c, in_local, keys_gm, total)
    asc.en_que(c, ONE_CORE_IN_QUEUE, in_local)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.arith_progression(c, index_local, np.int32(0), np.int32(1), total)
    asc.pipe_barrier(c, asc.PIPE_V)
    # SortCompute
    in_local = asc.de_que(c, ONE_CORE_IN_QUEUE, K)
    keys_fp32 = asc.view_as(c, in_local, F32)                 # ReinterpretCast<float>
    asc.cast(c, keys_fp32, asc.DT_FLOAT, in_local, asc.DT_INT32, asc.CAST_ROUND, tile_length)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.muls(c, keys_fp32, keys_fp32, -1.0, tile_length)
    asc.pipe_barrier(c, asc.PIPE_V)
    _pad_last_group(c, keys_fp32, total)
    out_local = asc.alloc_tensor(c, ONE_CORE_OUT_QUEUE, F32)
    concat_local = asc.concat(c, keys_fp32, out_local, sort_num // ONE_REPEAT_SORT_NUM)
    sorted_local = asc.tbuf_get(c, ONE_CORE_SORTED_BUFFER, F32)[:_sort_len(sort_num)]
    source_row_local = asc.view_as(c, index_local, asc.ub_u32(c))
    asc.sort(c, sorted_local, concat_local, source_row_local, out_local, sort_num // ONE_REPEAT_SORT_NUM)
    asc.extract(c, out_local, asc.view_as(c, out_local[sort_num:], asc.ub_u32(c)), sorted_local,
                sort_num // ONE_REPEAT_SORT_NUM)
    asc.en_que(c, ONE_CORE_OUT_QUEUE, out_local)
    asc.free_tensor(c, ONE_CORE_IN_QUEUE, in_local)
    # CopyOut: only the index half leaves
    out_local = asc.de_que(c, ONE_CORE_OUT_QUEUE, F32)
    asc.data_copy_pad(c, out_gm, asc.view_as(c, out_local[sort_num:], asc.ub_i32(c)),
                      asc.DataCopyExtParams(1, total * 4, 0, 0))
    asc.free_tensor(c, ONE_CORE_OUT_QUEUE, out_local)


# --- MoeMrgsort / MoeMrgsortOut ------------------------------------------------------------------------
@aicore
def _mrgsort_round(c, src_gm, ub_in0, ub_in1, ub_in2, ub_in3, ub_out, offsets, remain, one_loop_max, list_num):
    """One round of MoeMrgsort: CopyIn up to one_loop_max pairs of each list, merge (stop when a window
    runs out), advance. Returns the pairs merged; offsets / remain are updated in place."""
    asc.sync_pipes(c, asc.MTE3_MTE2)
    lengths = np.zeros(4, dtype=np.int64)
    active = 0
    for i in range(list_num):
        lengths[i] = min(one_loop_max, remain[i])
        if lengths[i] > 0:
            ub_in = ub_in0 if active == 0 else ub_in1 if active == 1 else ub_in2 if active == 2 else ub_in3
            asc.data_copy(c, ub_in, asc.gm_at(src_gm, offsets[i]), _align(_sort_len(lengths[i]), 4))
            active += 1
    counts = np.zeros(4, dtype=np.int64)
    j = 0
    for i in range(list_num):
        if lengths[i] > 0:
            counts[j] = lengths[i]
            j += 1
    asc.sync_pipes(c, asc.MTE2_V)
    if active >= 2:
        valid_bit = 0b0011 if active == 2 else 0b0111 if active == 3 else 0b1111
        sorted_nums = asc.mrg_sort(c, ub_out, ub_in0, ub_in1, ub_in2, ub_in3,
                                   (counts[0], counts[1], counts[2], counts[3]), valid_bit, 1, True)
    else:
        asc.data_copy(c, ub_out, ub_in0, _align(_sort_len(counts[0]), 4))
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
def _mrgsort_init(list_num, per_list, last_list):
    offsets = np.zeros(4, dtype=np.int64)
    remain = np.zeros(4, dtype=np.int64)
    for i in range(list_num):
        offsets[i] = _sort_len(per_list * i)
        remain[i] = last_list if i == list_num - 1 else per_list
    return offsets, remain


@aicore
def _list_windows(ub_inputs, one_loop_max):
    """The four MrgSort input windows of one_loop_max (score, index) pairs each, back to back in ub_inputs."""
    w = _sort_len(one_loop_max)
    return ub_inputs[0: w], ub_inputs[w: 2 * w], ub_inputs[2 * w: 3 * w], ub_inputs[3 * w: 4 * w]


@aicore
def _mrgsort(c, src_gm, dst_gm, ub_inputs, ub_out, list_num, per_list, last_list, one_loop_max):
    """MoeMrgsort::Init + Process: merge list_num sorted lists of pairs from src_gm into dst_gm."""
    offsets, remain = _mrgsort_init(list_num, per_list, last_list)
    in0, in1, in2, in3 = _list_windows(ub_inputs, one_loop_max)
    out_offset = 0
    while remain.sum() > 0:
        merged = _mrgsort_round(c, src_gm, in0, in1, in2, in3, ub_out, offsets, remain, one_loop_max, list_num)
        if merged == 0:
            break          # only after a fault (calls no longer run): the device would hang, the simulator stops
        asc.sync_pipes(c, asc.V_MTE3)
        asc.data_copy_pad(c, asc.gm_at(dst_gm, out_offset), ub_out, asc.DataCopyExtParams(1, _sort_len(merged) * 4,
                                                                                           0, 0))
        out_offset += _sort_len(merged)


@aicore
def mrgsort_out(c, src_gm, out_gm, ub_inputs, ub_out_value, ub_out_index, temp_buffer, list_num, per_list,
                last_list, one_loop_max, capacity):
    """MoeMrgsortOut::Init + Process: merge the last lists and write only the index stream (int32).

    capacity < 0: every index. Otherwise Process(capacity) of the drop-and-pad sort: CopyOutCapacity writes
    only up to `capacity` indices; the round that reaches past it is cut to capacity - outOffset indices (0
    when a round ended exactly on capacity) and ends the loop."""
    offsets, remain = _mrgsort_init(list_num, per_list, last_list)
    in0, in1, in2, in3 = _list_windows(ub_inputs, one_loop_max)
    index_u32 = asc.view_as(c, ub_out_index, asc.ub_u32(c))
    index_i32 = asc.view_as(c, ub_out_index, asc.ub_i32(c))
    out_offset = 0
    while remain.sum() > 0:
        merged = _mrgsort_round(c, src_gm, in0, in1, in2, in3, temp_buffer, offsets, remain, one_loop_max, list_num)
        if merged == 0:
            break          # only after a fault, as in _mrgsort
        asc.extract(c, ub_out_value, index_u32, temp_buffer, int_math.ceil_div(merged, ONE_REPEAT_SORT_NUM))
        last_round = capacity >= 0 and out_offset + merged > capacity
        copy_count = capacity - out_offset if last_round else merged
        asc.sync_pipes(c, asc.V_MTE3)
        asc.data_copy_pad(c, asc.gm_at(out_gm, out_offset), index_i32, asc.DataCopyExtParams(1, copy_count * 4, 0, 0))
        out_offset += merged
        if last_round:
            break


# --- multi-core mode (MoeSortMultiCore) -----------------------------------------------------------------
@aicore
def _workspace(td, ws_gm, index):
    """workspaceGms[index]: ping-pong area `index` of AlignUp(total, 8) * 2 floats."""
    area = _align(td.n * td.top_k, 4) * 2
    return asc.gm_at(ws_gm, index * area)


@aicore
def _core_loops(td, block_idx):
    """(loops, per-loop elements, last-loop elements, initial srcWsIndex) of a VBS core."""
    if block_idx == td.vbs_need_core_num - 1:
        return (td.vbs_last_core_loops, td.vbs_last_core_per_loop_elements, td.vbs_last_core_last_loop_elements,
                td.vbs_last_core_ws_index)
    return td.vbs_per_core_loops, td.vbs_per_core_per_loop_elements, td.vbs_per_core_last_loop_elements, 0


@aicore
def _index_num(td, loop_elements):
    return int_math.ceil_div(max(td.sort_out_one_loop_max_elements * MAX_MRGSORT_LIST, loop_elements),
                 ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM


@aicore
def sort_loop_keys(c, keys_fp32, index_local, sort_num):
    """The Sort of one VBS loop (UBSortCompute's end): sort_num fp32 keys with their uint32 indices into
    (score, index) pairs in the out-queue, which is enqueued and handed back dequeued for VBSCopyOut."""
    F32 = asc.ub_f32(c)
    sorted_local = asc.tbuf_get(c, MULTI_SORTED_BUFFER, F32)[:_sort_len(sort_num)]
    out_local = asc.alloc_tensor(c, MULTI_OUT_QUEUE, F32)
    source_row_local = asc.view_as(c, index_local, asc.ub_u32(c))
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.sort(c, out_local, keys_fp32, source_row_local, sorted_local, sort_num // ONE_REPEAT_SORT_NUM)
    asc.en_que(c, MULTI_OUT_QUEUE, out_local)
    return asc.de_que(c, MULTI_OUT_QUEUE, F32)


@aicore
def _ub_sort(c, td, keys_gm, ws_gm, index_local, keys_fp32, progress, size, sort_num, loop_elements, src_ws):
    """UBSortProcess: VBSCopyIn, UBSortCompute, VBSCopyOut of one loop of a VBS core."""
    K = asc.ub_like(c, keys_gm)
    in_local = asc.alloc_tensor(c, MULTI_IN_QUEUE, K)
    _copy_keys_in(c, in_local, asc.gm_at(keys_gm, progress * loop_elements), size)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.en_que(c, MULTI_IN_QUEUE, in_local)
    sort_data_local = asc.de_que(c, MULTI_IN_QUEUE, K)
    asc.cast(c, keys_fp32, asc.DT_FLOAT, sort_data_local, asc.DT_INT32, asc.CAST_ROUND, size)
    asc.free_tensor(c, MULTI_IN_QUEUE, sort_data_local)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.muls(c, keys_fp32, keys_fp32, -1.0, sort_num)
    asc.pipe_barrier(c, asc.PIPE_V)
    _pad_last_group(c, keys_fp32, size)
    asc.pipe_barrier(c, asc.PIPE_V)
    out_local = sort_loop_keys(c, keys_fp32, index_local, sort_num)
    dst = asc.gm_at(_workspace(td, ws_gm, src_ws),
                    c.block_idx * _sort_len(td.vbs_per_core_elements) + _sort_len(progress * loop_elements))
    asc.data_copy(c, dst, out_local, _align(_sort_len(size), 4))
    asc.free_tensor(c, MULTI_OUT_QUEUE, out_local)


@aicore
def merge_lists(c, src_gm, dst_gm, list_num, per_list, last_list, one_loop_max):
    """InitMoeMrgSort + MoeMrgsort: merge list_num sorted lists of pairs from src_gm into dst_gm through the
    sortedBuffer windows and the out-queue buffer."""
    F32 = asc.ub_f32(c)
    in_local = asc.tbuf_get(c, MULTI_SORTED_BUFFER, F32)
    out_local = asc.alloc_tensor(c, MULTI_OUT_QUEUE, F32)
    asc.free_tensor(c, MULTI_OUT_QUEUE, out_local)   # (sic) the sorter keeps using the freed buffer
    _mrgsort(c, src_gm, dst_gm, in_local, out_local, list_num, per_list, last_list, one_loop_max)


@aicore
def _merge_lists(c, td, ws_gm, list_num, per_list, last_list, core_offset, loop_offset):
    """Merge list_num lists of this core's slice of workspaceGms[srcWsIndex] into the other area."""
    src_ws = asc.members(c)[M_SRC_WS_INDEX]
    offset = c.block_idx * core_offset + loop_offset
    merge_lists(c, asc.gm_at(_workspace(td, ws_gm, src_ws), offset),
                asc.gm_at(_workspace(td, ws_gm, 1 - src_ws), offset), list_num, per_list, last_list,
                td.sort_out_one_loop_max_elements)


@aicore
def sort_vbs_process(c, td, keys_gm, ws_gm):
    """VBSProcess (+ the per-core VMS of its loop lists, OneCoreVMSProcess); then the VMS bookkeeping."""
    m = asc.members(c)
    loops, loop_elements, last_loop_elements, src_ws = _core_loops(td, c.block_idx)
    m[M_SRC_WS_INDEX] = src_ws
    if c.block_idx < td.vbs_need_core_num:
        index_num = _index_num(td, loop_elements)
        index_concat = asc.tbuf_get(c, MULTI_INDEX_CONCAT, asc.ub_i32(c))
        index_local = index_concat
        keys_fp32 = asc.view_as(c, index_concat, asc.ub_f32(c))[index_num:]
        core_keys = asc.gm_at(keys_gm, c.block_idx * td.vbs_per_core_elements)
        sort_num = int_math.ceil_div(loop_elements, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
        arith_progression_support_int32(c, index_local, np.int32(c.block_idx * td.vbs_per_core_elements),
                                        np.int32(1), loop_elements)
        for loop in range(loops - 1):
            _ub_sort(c, td, core_keys, ws_gm, index_local, keys_fp32, loop, loop_elements, sort_num, loop_elements,
                     src_ws)
            asc.pipe_barrier(c, asc.PIPE_V)
            asc.adds(c, index_local, index_local, np.int32(loop_elements), loop_elements)
        sort_num = int_math.ceil_div(last_loop_elements, ONE_REPEAT_SORT_NUM) * ONE_REPEAT_SORT_NUM
        _ub_sort(c, td, core_keys, ws_gm, index_local, keys_fp32, loops - 1, last_loop_elements, sort_num,
                 loop_elements, src_ws)
        # OneCoreVMSProcess: merge this core's loop lists, 4 at a time, until one list is left
        core_offset = _sort_len(td.vbs_per_core_elements)
        list_num, per_list, last_list = loops, loop_elements, last_loop_elements
        while list_num >= 1:
            merges = (list_num + MAX_MRGSORT_LIST - 1) // MAX_MRGSORT_LIST
            remain_lists = list_num - (merges - 1) * MAX_MRGSORT_LIST
            loop_offset = _sort_len(per_list * MAX_MRGSORT_LIST)
            for k in range(merges - 1):
                _merge_lists(c, td, ws_gm, MAX_MRGSORT_LIST, per_list, per_list, core_offset, k * loop_offset)
            _merge_lists(c, td, ws_gm, remain_lists, per_list, last_list, core_offset, (merges - 1) * loop_offset)
            list_num = merges
            last_list = per_list * (remain_lists - 1) + last_list
            per_list = per_list * MAX_MRGSORT_LIST
            m[M_SRC_WS_INDEX] = (m[M_SRC_WS_INDEX] + 1) % WORK_GM_NUM
            if merges == 1:
                break
    # start of VMSProcess (every core): the VBS outputs are the lists to merge
    m[M_LIST_NUM] = td.vbs_need_core_num
    m[M_PER_LIST_ELEMENTS] = td.vbs_per_core_elements
    m[M_LAST_LIST_ELEMENTS] = td.vbs_last_core_elements


@aicore
def sort_vms_level(c, td, ws_gm):
    """One iteration of VMSProcess's loop: cores 0 .. ceil(lists / 4) - 1 merge four adjacent lists each."""
    m = asc.members(c)
    list_num, per_list, last_list = m[M_LIST_NUM], m[M_PER_LIST_ELEMENTS], m[M_LAST_LIST_ELEMENTS]
    need = int_math.ceil_div(list_num, MAX_MRGSORT_LIST)
    core_offset = _sort_len(per_list * MAX_MRGSORT_LIST)
    remain_lists = list_num - (need - 1) * MAX_MRGSORT_LIST
    if c.block_idx < need - 1:
        _merge_lists(c, td, ws_gm, MAX_MRGSORT_LIST, per_list, per_list, core_offset, 0)
    elif c.block_idx == need - 1:
        _merge_lists(c, td, ws_gm, remain_lists, per_list, last_list, core_offset, 0)
    m[M_LIST_NUM] = need
    m[M_SRC_WS_INDEX] = (m[M_SRC_WS_INDEX] + 1) % WORK_GM_NUM
    m[M_LAST_LIST_ELEMENTS] = per_list * (remain_lists - 1) + last_list
    m[M_PER_LIST_ELEMENTS] = per_list * MAX_MRGSORT_LIST


@aicore
def sort_out_process(c, td, ws_gm, out_gm):
    """SortOutProcess: core 0 merges the last lists (MoeMrgsortOut) and writes the sorted positions."""
    if c.block_idx >= 1:
        return
    m = asc.members(c)
    F32 = asc.ub_f32(c)
    loop_max = td.sort_out_one_loop_max_elements
    in_local = asc.tbuf_get(c, MULTI_INDEX_CONCAT, F32)
    out_local = asc.alloc_tensor(c, MULTI_OUT_QUEUE, F32)
    out_local_v = out_local[loop_max * MAX_MRGSORT_LIST:]
    temp_buffer = asc.tbuf_get(c, MULTI_SORTED_BUFFER, F32)[:_sort_len(loop_max) * MAX_MRGSORT_LIST]
    asc.free_tensor(c, MULTI_OUT_QUEUE, out_local)   # (sic) as InitMoeMrgSortOut does
    src = _workspace(td, ws_gm, m[M_SRC_WS_INDEX])
    mrgsort_out(c, src, out_gm, in_local, out_local, out_local_v, temp_buffer, m[M_LIST_NUM],
                m[M_PER_LIST_ELEMENTS], m[M_LAST_LIST_ELEMENTS], loop_max, -1)


# --- stage entries and the TPipe phase of one sort -----------------------------------------------------
@global_aicore
def one_core_stage(c, td, gm):
    sort_one_core_process(c, td, gm.keys, gm.out)


@global_aicore
def vbs_stage(c, td, gm):
    sort_vbs_process(c, td, gm.keys, gm.workspace)


@global_aicore
def vms_stage(c, td, gm):
    sort_vms_level(c, td, gm.workspace)


@global_aicore
def sort_out_stage(c, td, gm):
    sort_out_process(c, td, gm.workspace, gm.out)


def vms_levels(vbs_need_core_num: int) -> int:
    """SyncAll-separated VMS levels: how often `lists = ceil(lists / 4)` runs while more than 4 lists remain."""
    levels, lists = 0, vbs_need_core_num
    while lists > MAX_MRGSORT_LIST:
        lists = (lists + MAX_MRGSORT_LIST - 1) // MAX_MRGSORT_LIST
        levels += 1
    return levels


def sort_schedule(multi_core: bool, vbs_need_core_num: int) -> list:
    """The stages of one sort with the SyncAll() calls of its Process(), for a PipePhase schedule."""
    if not multi_core:
        return [one_core_stage, SYNC_ALL]
    schedule = [vbs_stage, SYNC_ALL]
    for _ in range(vms_levels(vbs_need_core_num)):
        schedule += [vms_stage, SYNC_ALL]
    return schedule + [sort_out_stage, SYNC_ALL]


def _multi_core_plan(select):
    """PipePhase.core_plan of a multi-core sort: MoeSortMultiCore::Init sizes all four buffers from its own
    sortCoreLoopElements, so the last VBS core builds its rows from its own loop of keys."""
    def core_plan(block_idx, rows, *launch_args):
        td, _ = select(*launch_args)
        loop_elements = core_loop_elements(block_idx, td.vbs_need_core_num, td.vbs_per_core_per_loop_elements,
                                           td.vbs_last_core_per_loop_elements)
        nbytes = multi_core_index_num(loop_elements, td.sort_out_one_loop_max_elements) * 8
        return tuple(row._replace(bytes=nbytes) for row in rows)
    return core_plan


def sort_phase(pipe: str, multi_core: bool, select) -> PipePhase:
    """One sort as a TPipe phase; `select(*launch_args)` returns (td, SortGm) for its stages. The stages see
    only the sort's tensors, so they compile once per key dtype, whatever else the launch carries. A
    multi-core sort sizes each core's buffers as its Init does (core_plan); the one-core sort's Init sizes
    them from the whole key count, the same on every core."""
    def schedule(*launch_args):
        td, _ = select(*launch_args)
        return sort_schedule(multi_core, td.vbs_need_core_num)
    if not multi_core:
        return PipePhase(pipe, ONE_CORE_BUFFERS, schedule, select, waived_queues=SORT_WAIVED_QUEUES)
    return PipePhase(pipe, MULTI_CORE_BUFFERS, schedule, select, core_plan=_multi_core_plan(select),
                     waived_queues=SORT_WAIVED_QUEUES)
