"""MoeInplaceIndexAddSimtSort (op_kernel/arch35/moe_inplace_index_add_simt_sort.h with the base class of
moe_inplace_index_add_common.h and the id statistic of indices_sort_utils.h): key 500000 (32-bit offsets, no
alpha), int32 ids, float32 / float16 / bfloat16 var: the template the tiling takes where ids repeat five times or
more and rows are short (afterAxis * sizeof(var) < 128 bytes, afterAxis <= 1024).

source: moe/3rd/moe_inplace_index_add/op_kernel/arch35/moe_inplace_index_add_simt_sort.h,
moe_inplace_index_add_common.h, indices_sort_utils.h @ 25fb6b92890d.

Each of usedCoreNum cores owns indicesLoopSize windows of indicesUbFactor consecutive ids (the last core
tailBlockIndicesLoopSize windows, its last one of indiceAxisTailNum ids). Per window:

* CopyInIndices copies the ids in; IndexStatisticInt32 scores them (simd_sort.index_statistic: the fullest bin of
  the FNV-1a hash histogram / window length, float32).
* score > 0.01 (no minimum window length here): the ids are narrowed to the sort type (indicesCastMode: uint8
  below 255 rows, negatives first replaced by 255 with CompareScalar + Select; int16 below 32767 rows), radix-sorted
  ascending with their slots (stable), framed by -1 pads (255 for uint8) and cut into runs (ComputeUniqueIdNum:
  the run starts and, last, the position where the end pad differs). Then per batch of normalUpdatesPreNum pre
  rows the window's update rows are copied in (one strided DataCopyPad, each pre row's block padded to 32 bytes)
  and one SIMT call of dim3(afterAxis, threadBlock) sums them: thread (x, y) takes the (run, pre row) pairs
  y, y + threadBlock, ..., sums column x of the run's rows in slot order from 0 (fp32; a float accumulator for
  fp16 / bf16, converted to T half to even), and adds the sum to var[pre, id, x] with one asc_atomic_add in T.
* otherwise (ComputeNoSort): one SIMT call reads the updates from GM and adds each element to var with its own
  asc_atomic_add (after a `0 + x` in the accumulator type).

Either path skips an id outside [0, varInAxis) (the SIMT bodies' own test), so such ids add nothing.

Order: in the sort path every var element gets at most one add per window, and a core's windows run one after
another, so one core's result is a fixed sequence of roundings (bit-exact against a golden doing the same); the
no-sort path adds a window's slots of one id from different threads, and cores meet on shared rows: those sums
are order-dependent (bounded, not bit-exact).

Quirks modelled: the uint8 end pad is 255, so a run of 255s (negative ids) never closes and is dropped; a window
whose ids all equal the pad has no run at all (uniqueIdNum = 0 - 1 wraps to 2**32 - 1 on the chip, which then
reads past its run table): the simulator faults there. Simulator refusal: an id the narrowing Cast cannot hold
(above 255 in uint8 mode, outside int16 in int16 mode) faults before the Cast (its narrowed value is not modelled).
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.faults import fault
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore
from ascend_sim.layout import CALL_VF, F_SCALAR_OOB
from ascend_sim.radix_sort import radix_sort_ascending

from .simd_sort import _from_f32, _to_f32, compute_unique_id_num, index_statistic

# Init's InitBuffer order; castIndicesQue_ only with a cast mode (CAST_MODE != CAST_0)
BUFFERS = ("indicesInQueue_", "updatesInQueue_", "updatesOriginIdexQue_", "uniqueIdCountQue_", "sharedTmpBuf_",
           "hashBuffer_", "sortIndicesQue_")
CAST_BUFFERS = BUFFERS + ("castIndicesQue_",)
(INDICES_IN_QUE, UPDATES_IN_QUE, ORIGIN_BUF, UNIQUE_COUNT_BUF, SHARED_TMP_BUF, HASH_BUF, SORT_INDICES_BUF,
 CAST_INDICES_BUF) = range(8)

USED_THREAD_SORT = 2048
SIMT_SORT_HIST_THRESHOLD = np.float32(0.01)
MASK_UINT8 = 255
CAST_I32_I16, CAST_I32_U8 = 1, 4     # the int32-id cast modes (tiling.moe_inplace_index_add.cast_mode)
INT16_MIN, INT16_MAX = -32768, 32767
ID_ARRAY, RUN_ARRAY = 1, 2           # array ids of the faults: a bad id, an empty run table


@aicore
def copy_in_indices(c, td, gm, loop_idx, count):
    """CopyInIndices: the window's ids in, enqueued."""
    indices_local = asc.alloc_tensor(c, INDICES_IN_QUE, asc.ub_i32(c))
    offset = np.int64(c.block_idx) * td.each_core_index_count + np.int64(loop_idx) * td.indices_ub_factor
    asc.data_copy_pad(c, indices_local, asc.gm_at(gm.indices, offset), asc.DataCopyExtParams(1, count * 4, 0, 0),
                      asc.NO_PAD)
    asc.en_que(c, INDICES_IN_QUE, indices_local)


@aicore
def copy_in_updates(c, td, gm, loop_idx, pre_idx, count, pre_num):
    """CopyInUpdates: pre_num pre rows of the window's update rows, each pre row's block padded to 32 bytes."""
    T = asc.ub_like(c, gm.var)
    size = T.itemsize
    updates_local = asc.alloc_tensor(c, UPDATES_IN_QUE, T)
    after = np.int64(td.after_axis)
    offset = np.int64(pre_idx) * td.updates_in_axis * after + np.int64(c.block_idx) * td.each_core_index_count * after \
        + np.int64(loop_idx) * td.indices_ub_factor * after
    copy_len = np.int64(count) * after
    src_stride = np.int64(td.updates_in_axis) * after - copy_len
    asc.data_copy_pad(c, updates_local, asc.gm_at(gm.updates, offset),
                      asc.DataCopyExtParams(pre_num, copy_len * size, src_stride * size, 0), asc.NO_PAD)
    asc.en_que(c, UPDATES_IN_QUE, updates_local)


@aicore
def indices_sort_cast(c, indices_local, cast_local, count, mode, first_slot):
    """IndicesSortCastSimt for int32 ids: uint8 mode CompareScalar(GE 0) + Select(255) in place, then Cast; int16
    mode one Cast. Faults (False) on an id the Cast cannot hold (see the module docstring)."""
    if not asc.vf_call(c, count) or not asc.vf_operand(c, indices_local, count, True) \
            or not asc.vf_operand(c, cast_local, count, True):
        return False
    for i in range(count):
        v = indices_local[i]
        if mode == CAST_I32_U8:
            if v < 0:
                v = np.int32(MASK_UINT8)
                indices_local[i] = v
            if v > MASK_UINT8:
                fault(c, F_SCALAR_OOB, CALL_VF, ID_ARRAY, first_slot + i, MASK_UINT8 + 1)
                return False
        elif v < INT16_MIN or v > INT16_MAX:
            fault(c, F_SCALAR_OOB, CALL_VF, ID_ARRAY, first_slot + i, INT16_MAX + 1)
            return False
        cast_local[i] = v
    return True


@aicore
def sort_and_compute_unique_idx(c, count, src_local, sort_local, count_local, origin_local, pad):
    """SortAndComputeUniqueIdx: src ids sorted into sort_local behind a block of pads, their slots into
    origin_local, an end pad after them; the run starts (and the end) into count_local. Returns uniqueIdNum
    (the number of those positions minus one)."""
    shift = BLOCK_BYTES // sort_local.itemsize
    radix_sort_ascending(c, sort_local[shift:], origin_local, src_local, count)  # AscendC::Sort<CAST_T, false>
    asc.duplicate(c, sort_local, pad, shift)
    asc.sync_pipes(c, asc.V_S)
    asc.set_value(c, sort_local, shift + count, pad)
    asc.sync_pipes(c, asc.S_V)
    return compute_unique_id_num(c, sort_local, shift, count_local, count)


@aicore
def simt_compute(c, th, var_in_axis, after, unique, pre_num, updates_stride, pre_idx, sorted_local, origin_local,
                 count_local, updates_local, var, var_t):
    """SimtCompute (one thread): its (run, pre row) pairs, each run's column summed from 0 in slot order and added
    to var with one atomic add."""
    x = asc.thread_idx(th, 0)
    var_stride = np.int64(var_in_axis) * after
    i = asc.thread_idx(th, 1)
    while i < unique * pre_num:
        pre_internal = i // unique           # Simt::UintDiv
        idx = i - unique * pre_internal
        start = np.int64(asc.simt_load(c, th, count_local, idx))
        index = np.int64(asc.simt_load(c, th, sorted_local, start))
        if 0 <= index < var_in_axis:
            s = np.float32(0.0)
            for k in range(np.int64(asc.simt_load(c, th, count_local, idx + 1)) - start):
                src = np.int64(asc.simt_load(c, th, origin_local, start + k)) * after + x \
                    + np.int64(updates_stride) * pre_internal
                s = np.float32(s + _to_f32(asc.simt_load(c, th, updates_local, src), var_t))
            dst = var_stride * (pre_idx + pre_internal) + index * after + x
            asc.simt_atomic_add(c, th, var, dst, _from_f32(s, var_t, var.data), var_t)
        i += asc.thread_num(th, 1)


@aicore
def compute(c, td, gm, tmpl, unique, pre_idx, count, pre_num, sort_t):
    """Compute: the batch's update rows in UB summed per run by one SIMT call (sort_t: the sort type's UB view)."""
    T = asc.ub_like(c, gm.var)
    after = td.after_axis
    align = BLOCK_BYTES // T.itemsize
    updates_stride = (np.int64(count) * after + align - 1) // align * align
    updates_local = asc.de_que(c, UPDATES_IN_QUE, T)
    sort_local = asc.tbuf_get(c, SORT_INDICES_BUF, sort_t)
    sorted_local = sort_local[BLOCK_BYTES // sort_local.itemsize:]
    origin_local = asc.tbuf_get(c, ORIGIN_BUF, asc.ub_u32(c))
    count_local = asc.tbuf_get(c, UNIQUE_COUNT_BUF, asc.ub_i32(c))
    pairs = np.int64(unique) * pre_num
    thread_block = min(min(np.int64(after) * pairs, USED_THREAD_SORT) // after, pairs)
    sc = asc.simt_vf_call(c, after, thread_block, 1)
    for t in range(sc.threads):
        simt_compute(c, asc.simt_thread(c, sc, t), td.var_in_axis, after, unique, pre_num, updates_stride, pre_idx,
                     sorted_local, origin_local, count_local, updates_local, gm.var, tmpl.var_t)
    asc.simt_end(c, sc)
    asc.free_tensor(c, UPDATES_IN_QUE, updates_local)


@aicore
def simt_compute_no_sort(c, th, var_in_axis, after, pre_axis, updates_in_axis, indices_offset, count, indices_local,
                         var, updates, var_t):
    """SimtComputeNoSort (one thread): its (slot, pre row) pairs, each element added to var on its own."""
    x = asc.thread_idx(th, 0)
    var_stride = np.int64(var_in_axis) * after
    updates_stride = np.int64(updates_in_axis) * after
    i = asc.thread_idx(th, 1)
    while i < np.int64(count) * pre_axis:
        pre = i // count                     # Simt::UintDiv
        j = i - np.int64(count) * pre
        index = np.int64(asc.simt_load(c, th, indices_local, j))
        if 0 <= index < var_in_axis:
            src = (j + indices_offset) * after + x + updates_stride * pre
            s = np.float32(np.float32(0.0) + _to_f32(asc.simt_load(c, th, updates, src), var_t))
            asc.simt_atomic_add(c, th, var, var_stride * pre + index * after + x, _from_f32(s, var_t, var.data),
                                var_t)
        i += asc.thread_num(th, 1)


@aicore
def compute_no_sort(c, td, gm, tmpl, loop_idx, count, indices_local):
    """ComputeNoSort: one SIMT call over every pre row of the window's slots, updates read from GM."""
    after = td.after_axis
    indices_offset = np.int64(loop_idx) * td.indices_ub_factor + np.int64(c.block_idx) * td.each_core_index_count
    pairs = np.int64(count) * td.pre_axis
    thread_block = min(min(np.int64(after) * pairs, USED_THREAD_SORT) // after, pairs)
    sc = asc.simt_vf_call(c, after, thread_block, 1)
    for t in range(sc.threads):
        simt_compute_no_sort(c, asc.simt_thread(c, sc, t), td.var_in_axis, after, td.pre_axis, td.updates_in_axis,
                             indices_offset, count, indices_local, gm.var, gm.updates, tmpl.var_t)
    asc.simt_end(c, sc)


@aicore
def _sorted_window(c, td, gm, tmpl, loop_idx, count, indices_local, sort_t, pad):
    """The sort branch of one window with ids of the sort type `sort_t` (the UB seen as that type: the sorted ids'
    and, with a cast, the cast ids' view)."""
    origin_local = asc.tbuf_get(c, ORIGIN_BUF, asc.ub_u32(c))
    count_local = asc.tbuf_get(c, UNIQUE_COUNT_BUF, asc.ub_i32(c))
    sort_local = asc.tbuf_get(c, SORT_INDICES_BUF, sort_t)
    mode = td.indices_cast_mode
    if mode == 0:
        unique = sort_and_compute_unique_idx(c, count, indices_local, sort_local, count_local, origin_local, pad)
    else:
        cast_local = asc.tbuf_get(c, CAST_INDICES_BUF, sort_t)
        first_slot = np.int64(c.block_idx) * td.each_core_index_count + np.int64(loop_idx) * td.indices_ub_factor
        if not indices_sort_cast(c, indices_local, cast_local, count, mode, first_slot):
            return
        unique = sort_and_compute_unique_idx(c, count, cast_local, sort_local, count_local, origin_local, pad)
    if unique < 0:
        fault(c, F_SCALAR_OOB, CALL_VF, RUN_ARRAY, 0, 0)     # no run: the chip's uniqueIdNum wraps
        return
    for pre_loop in range(td.updates_pre_loop):
        pre_num = td.tail_updates_pre_num if pre_loop == td.updates_pre_loop - 1 else td.normal_updates_pre_num
        pre_idx = np.int64(pre_loop) * td.normal_updates_pre_num
        copy_in_updates(c, td, gm, loop_idx, pre_idx, count, pre_num)
        compute(c, td, gm, tmpl, unique, pre_idx, count, pre_num, sort_t)


@global_aicore
def simt_sort_process(c, td, gm, tmpl):
    """Process: this core's id windows."""
    last = c.block_idx == td.used_core_num - 1
    loops = td.tail_block_indices_loop_size if last else td.indices_loop_size
    tail = td.indice_axis_tail_num if last else td.indices_ub_factor
    for loop_idx in range(loops):
        count = tail if loop_idx == loops - 1 else td.indices_ub_factor
        copy_in_indices(c, td, gm, loop_idx, count)
        indices_local = asc.de_que(c, INDICES_IN_QUE, asc.ub_i32(c))
        hash_local = asc.tbuf_get(c, HASH_BUF, asc.ub_f32(c))
        index_statistic(c, indices_local, hash_local, count, td.after_axis)     # IndexStatisticInt32
        asc.sync_pipes(c, asc.V_S)
        score = np.float32(asc.get_value(c, hash_local, 0) / np.float32(count))
        if score > SIMT_SORT_HIST_THRESHOLD:
            mode = td.indices_cast_mode
            if mode == CAST_I32_U8:
                _sorted_window(c, td, gm, tmpl, loop_idx, count, indices_local, asc.ub_u8(c), np.uint8(MASK_UINT8))
            elif mode == CAST_I32_I16:
                _sorted_window(c, td, gm, tmpl, loop_idx, count, indices_local, asc.ub_i16(c), np.int16(-1))
            else:
                _sorted_window(c, td, gm, tmpl, loop_idx, count, indices_local, asc.ub_i32(c), np.int32(-1))
        else:
            compute_no_sort(c, td, gm, tmpl, loop_idx, count, indices_local)
        asc.free_tensor(c, INDICES_IN_QUE, indices_local)
