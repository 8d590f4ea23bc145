"""MoeInplaceIndexAddSimdSort (op_kernel/arch35/moe_inplace_index_add_simd_sort.h with the base class of
moe_inplace_index_add_common.h and the id statistic of indices_sort_utils.h): key 200000, the ProcessAfter branch
(isSplitAfterAxis: rows of at least 1 KiB per core) and the ProcessIndices branch (isSplitIndicesAxis: more ids
than pre rows and rows under 1 KiB per core), int32 ids, no alpha, float32 / float16 / bfloat16 var (the chains'
case: ids repeat topK times). One stage (Process) runs both branches.

source: moe/3rd/moe_inplace_index_add/op_kernel/arch35/moe_inplace_index_add_simd_sort.h,
moe_inplace_index_add_common.h, indices_sort_utils.h @ 25fb6b92890d.

ProcessAfter: each of usedCoreNumBefore cores owns eachCoreAfterAxisCount consecutive columns (the last core
tailCoreAfterAxisCount), walks all the ids in windows of ubIndexFactor and scores, sorts and sums each window
itself, exactly as below, with two differences: a window sorts on maxScore > 0.01 alone (no 128-id floor), and
the update reads and atomic var writes are shifted to the core's columns (CopyOutSplitAfter). No two cores touch
one element, and one core's windows follow each other: the result is a fixed sequence of roundings on any
number of cores.

ProcessIndices: each of usedCoreNumBefore cores owns eachCoreIndexCount consecutive ids and walks them in windows
of ubIndexFactor (the last core its own count and tail). Per window:

* CopyIndiceIn copies the ids in and scores them (IndexStatisticInt32): every id, shifted right by
  lastDimShift, is FNV-1a hashed (xor 0x811C9DC5, times 0x01000193, uint32 wrap) and the hash's low byte goes
  into a 256-bin histogram; maxScore = the fullest bin / window length (float32). In the window's last
  rowLen % 256 ids all four bytes of each hash are counted: the tail loop's mask is UpdateMask<uint32_t>, one
  bit per byte of the histogram's uint8 lanes.
* maxScore > 0.01 and more than 128 ids: the ids are narrowed (int16 below 32767 rows, uint8 below 255 rows:
  indicesCastMode), radix-sorted ascending with their positions (ascend_sim.radix_sort), framed by -1 pads,
  and cut into runs of equal ids (ComputeUniqueIdNum: the positions where an id differs from the one before,
  the pad after the last id ending the last run). Then per pre row and column piece the window's update rows
  are copied in, every run is summed in fp32 from 0 in slot order (ComputeSumWithCast / WithOutCast: Add of the
  rows the sort put in the run, Cast CAST_RINT to T), and each run sum is added to var[pre, id] with one atomic
  DataCopyPad in T (runs ascending).
* otherwise: per pre row and column piece every update row is added to var[pre, indices[i]] with its own
  atomic DataCopyPad, slots ascending (CopyInAndCopyOutSlitIndices).

In ProcessIndices on one core the result is therefore a fixed sequence of roundings (bit-exact against a golden
doing the same); cores adding to one var row race (atomic adds in T, timing-dependent order).

Quirks modelled: the run count and the run lengths are uint16 in the VF loops; the first window's statistic of
the uint8 tail bytes; -1 pads that a sorted -1 would join. Simulator refusal: an id outside [0, varInAxis) on
the sort path faults before the narrowing Cast (the chip's narrowed value of such an id is not modelled; the
other paths fault at the atomic copy outside var).
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.dtypes import (
    CAST_RINT,
    DT_BF16,
    DT_FLOAT16,
    bf16_bits_to_f32_bits,
    f16_bits_to_f32_bits,
    f32_bits_to_bf16_bits_rint,
    f32_bits_to_f16_bits,
    f32_from_bits,
    leading_zeros64,
    view_f32_as_u32,
)
from ascend_sim.faults import fault
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore
from ascend_sim.layout import CALL_VF, F_SCALAR_OOB
from ascend_sim.radix_sort import radix_sort_ascending

# InitBuffer order: Init's maxScoreBuf_, InitBaseBuffer's (the base class declares its own maxScoreBuf_), then
# ProcessIndices' three queues
BUFFERS = ("maxScoreBuf_", "baseMaxScoreBuf_", "sortIndicesBuf_", "updatesOriginIdexQue_", "uniqueIdCountQue_",
           "updateSumIdxQue_", "indicesCastQue_", "indicesQue_", "updatesQue_", "updatesCastQue_")
(MAX_SCORE_BUF, BASE_MAX_SCORE_BUF, SORT_INDICES_BUF, ORIGIN_QUE, UNIQUE_COUNT_QUE, SUM_IDX_QUE, INDICES_CAST_QUE,
 INDICES_QUE, UPDATES_QUE, UPDATES_CAST_QUE) = range(10)

SORT_HIST_THRESHOLD = np.float32(0.01)
INDICES_SORT_THRESHOLD = 128
INDICES_BUCKETS = 256                # ids per main-loop pass of the statistic (four registers of 64)
LAST_DIM_SIZE_LIMIT = 512
FNV_OFFSET_B32 = np.uint32(0x811C9DC5)
FNV_PRIME_B32 = np.uint32(0x01000193)
U16_MASK = 0xFFFF
CAST_I32_I16, CAST_I32_U8 = 1, 4     # the int32-id cast modes (tiling.moe_inplace_index_add.cast_mode)
ID_ARRAY = 1                         # array id in the fault of a bad id on the sort path


@aicore
def last_dim_shift(after_axis):
    """lastDimShift: ids of rows under 512 bytes (counted as afterAxis * sizeof(int32)) are hashed shifted right
    by ceil(log2(512 / rowBytes)) (bit length of the quotient, one less for a power of two)."""
    row_bytes = np.uint64(after_axis) * np.uint64(4)
    if row_bytes >= np.uint64(LAST_DIM_SIZE_LIMIT):
        return 0
    divisor = np.uint64(LAST_DIM_SIZE_LIMIT) // row_bytes
    bits = 64 - leading_zeros64(divisor)
    return bits - 1 if (divisor & (divisor - np.uint64(1))) == 0 else bits


@aicore
def _fnv_hash(index, shift):
    return ((np.uint32(index) >> np.uint32(shift)) ^ FNV_OFFSET_B32) * FNV_PRIME_B32


@aicore
def index_statistic(c, indices_local, score_local, row_len, after_axis):
    """IndexStatisticInt32 (a VF): the fullest hash bin of the window, written to score_local[0] as float32
    (the uint16 bin count read as int16, Cast to fp32)."""
    if not asc.vf_call(c, row_len) or not asc.vf_operand(c, indices_local, row_len, False) \
            or not asc.vf_operand(c, score_local, 1, True):
        return
    shift = last_dim_shift(after_axis)
    hist = np.zeros(256, np.int64)
    main = row_len // INDICES_BUCKETS * INDICES_BUCKETS
    for i in range(main):            # DeInterleave keeps byte 0 of each hash
        hist[_fnv_hash(indices_local[i], shift) & np.uint32(0xFF)] += 1
    for i in range(main, row_len):   # the uint32 mask enables all four bytes of each hash
        h = _fnv_hash(indices_local[i], shift)
        for b in range(4):
            hist[(h >> np.uint32(8 * b)) & np.uint32(0xFF)] += 1
    top = 0
    for b in range(256):
        top = max(top, hist[b] & U16_MASK)
    score_local[0] = np.float32(np.int16(np.uint16(top)))


@aicore
def _check_ids(c, indices_local, row_len, var_in_axis, first_slot):
    """The simulator's guard before a narrowing Cast: fault on the first id outside [0, varInAxis)."""
    for i in range(row_len):
        v = indices_local[i]
        if v < 0 or v >= var_in_axis:
            fault(c, F_SCALAR_OOB, CALL_VF, ID_ARRAY, first_slot + i, var_in_axis)
            return False
    return True


@aicore
def indices_sort_cast(c, indices_local, cast_local, row_len):
    """IndicesSortCast (CompareScalar GE 0 + Select + Cast, or one Cast): the ids narrowed to the sort type
    (ids already checked to lie in [0, varInAxis), where the Select keeps every id). The int32 scratch it takes
    from uniqueIdCountQue_ serves only the int64 modes."""
    tmp = asc.alloc_tensor(c, UNIQUE_COUNT_QUE, asc.ub_i32(c))
    _cast_ids(c, indices_local, cast_local, row_len)
    asc.free_tensor(c, UNIQUE_COUNT_QUE, tmp)


@aicore
def _cast_ids(c, indices_local, cast_local, row_len):
    if not asc.vf_call(c, row_len) or not asc.vf_operand(c, indices_local, row_len, False) \
            or not asc.vf_operand(c, cast_local, row_len, True):
        return
    for i in range(row_len):
        cast_local[i] = indices_local[i]


@aicore
def compute_unique_id_num(c, sort_local, shift, count_local, row_len):
    """ComputeUniqueIdNum (a VF): the positions j in [0, row_len] whose sorted id differs from the one before
    (sort_local[shift - 1] and sort_local[shift + row_len] are the -1 pads), compacted into count_local; returns
    their number minus one (the AR register's byte count / 4 - 1)."""
    if not asc.vf_call(c, row_len + 1) or not asc.vf_operand(c, sort_local, shift + row_len + 1, False) \
            or not asc.vf_operand(c, count_local, row_len + 1, True):
        return 0
    n = 0
    for j in range(row_len + 1):
        if sort_local[shift + j] != sort_local[shift + j - 1]:
            count_local[n] = j
            n += 1
    return n - 1


@aicore
def compute_unique_id_times(c, count_local, unique):
    """ComputeUinqueIdTimes (a VF): run starts -> run lengths (count[i] = count[i + 1] - count[i])."""
    if not asc.vf_call(c, unique) or not asc.vf_operand(c, count_local, unique + 1, True):
        return
    for i in range(unique):
        count_local[i] = count_local[i + 1] - count_local[i]


@aicore
def _sort_indices(c, ids_local, sort_t, row_len, pad):
    """SortIndices on ids of the sort type (sort_t: the UB seen as that type): the runs' lengths, ids and
    slot lists into uniqueIdCountQue_ / updateSumIdxQue_ / updatesOriginIdexQue_ (all enqueued); returns the
    run count."""
    sort_local = asc.tbuf_get(c, SORT_INDICES_BUF, sort_t)
    count_local = asc.alloc_tensor(c, UNIQUE_COUNT_QUE, asc.ub_i32(c))
    origin_local = asc.alloc_tensor(c, ORIGIN_QUE, asc.ub_u32(c))
    sum_idx_local = asc.alloc_tensor(c, SUM_IDX_QUE, asc.ub_i32(c))
    shift = BLOCK_BYTES // sort_local.itemsize
    radix_sort_ascending(c, sort_local[shift:], origin_local, ids_local, row_len)  # AscendC::Sort<CAST_T, false>
    asc.duplicate(c, sort_local, pad, shift)
    asc.sync_pipes(c, asc.V_S)
    asc.set_value(c, sort_local, shift + row_len, pad)
    asc.pipe_barrier(c, asc.PIPE_V)
    unique = compute_unique_id_num(c, sort_local, shift, count_local, row_len)
    asc.sync_pipes(c, asc.V_S)
    for i in range(unique):
        asc.set_value(c, sum_idx_local, i, asc.get_value(c, sort_local, shift + asc.get_value(c, count_local, i)))
    asc.sync_pipes(c, asc.S_V)
    compute_unique_id_times(c, count_local, unique)
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.en_que(c, ORIGIN_QUE, origin_local)
    asc.en_que(c, UNIQUE_COUNT_QUE, count_local)
    asc.en_que(c, SUM_IDX_QUE, sum_idx_local)
    return unique


@aicore
def _to_f32(x, var_t):
    """LoadOneTensorForDtypeT: one element of the var carrier as float32."""
    if var_t == DT_BF16:
        return f32_from_bits(bf16_bits_to_f32_bits(np.uint16(x)))
    if var_t == DT_FLOAT16:
        return f32_from_bits(f16_bits_to_f32_bits(np.uint16(x)))
    return np.float32(x)


@aicore
def _from_f32(x, var_t, like):
    """StoreOneTensorForDtypeT: float32 to the var carrier (Cast CAST_RINT for fp16 / bf16)."""
    if var_t == DT_BF16:
        return like.dtype.type(f32_bits_to_bf16_bits_rint(view_f32_as_u32(x)))
    if var_t == DT_FLOAT16:
        return like.dtype.type(f32_bits_to_f16_bits(view_f32_as_u32(x), CAST_RINT))
    return like.dtype.type(x)


@aicore
def compute_sum(c, updates_local, sum_local, count_local, origin_local, unique, col_len, src_stride, dst_stride,
                var_t):
    """ComputeSumWithCast / ComputeSumWithOutCast (a VF; also the quantising kernel's ComputeSum with var_t
    DT_FLOAT): per run i, the fp32 sum from 0 of its rows (slot order; rows src_stride elements apart), stored to
    sum_local row i (dst_stride apart) in T. Loop counters are uint16 as in the VF."""
    runs = unique & U16_MASK
    rows = 0
    for i in range(runs):
        rows += count_local[i] & U16_MASK
    if not asc.vf_call(c, rows * col_len) or not asc.vf_operand(c, sum_local, runs * dst_stride, True) \
            or not asc.vf_operand(c, count_local, runs, False) or not asc.vf_operand(c, origin_local, rows, False):
        return
    first = 0
    for i in range(runs):
        repeat = count_local[i] & U16_MASK
        for col in range(col_len):
            s = np.float32(0.0)
            for k in range(repeat):
                src = np.int64(origin_local[first + k]) * src_stride + col
                s = np.float32(s + _to_f32(updates_local[src], var_t))
            sum_local[i * dst_stride + col] = _from_f32(s, var_t, sum_local)
        first += repeat


@aicore
def copy_out_split_indices(c, td, gm, tmpl, ids_local, out_local, pre, rows, col_len, col_idx):
    """CopyOutSplitIndices: row i of out_local added to var[pre, ids[i], piece] with an atomic DataCopyPad in T."""
    _atomic_rows_out(c, td, gm, tmpl, ids_local, out_local, pre, rows, col_len,
                     np.int64(col_idx) * td.after_axis_factor)


@aicore
def copy_out_split_after(c, td, gm, tmpl, ids_local, out_local, pre, rows, col_len, col_idx):
    """CopyOutSplitAfter: CopyOutSplitIndices with the var column offset of this core's column range."""
    _atomic_rows_out(c, td, gm, tmpl, ids_local, out_local, pre, rows, col_len,
                     np.int64(c.block_idx) * td.each_core_after_axis_count + np.int64(col_idx) * td.after_axis_factor)


@aicore
def _atomic_rows_out(c, td, gm, tmpl, ids_local, out_local, pre, rows, col_len, col_offset):
    size = out_local.itemsize
    col_align = (col_len * size + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // size
    asc.set_atomic_add(c, tmpl.var_t)
    for i in range(rows):
        row = np.int64(pre) * td.var_in_axis + asc.get_value(c, ids_local, i)
        asc.data_copy_pad(c, asc.gm_at(gm.var, row * td.after_axis + col_offset), out_local[i * col_align:],
                          asc.DataCopyExtParams(1, col_len * size, 0, 0))
    asc.set_atomic_none(c)


@aicore
def _updates_params(td, row_len, col_len, size):
    return asc.DataCopyExtParams(row_len, col_len * size, (td.after_axis - col_len) * size, 0)


@aicore
def compute_sum_and_copy_out(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len, unique, split_after):
    """ComputeSumAndCopyOutSlitIndices (split_after False) / ComputeSumAndCopyOutSlitAfter (True): per pre row, the
    window's update rows in, the run sums out. The two differ only in the var offset of the copy-out (the update
    offsets agree: eachCoreIndexCount is 0 in the column split, eachCoreAfterAxisCount 0 in the id split)."""
    T = asc.ub_like(c, gm.var)
    size = T.itemsize
    updates_local = asc.alloc_tensor(c, UPDATES_QUE, T)
    sum_local = asc.alloc_tensor(c, UPDATES_CAST_QUE, T)
    sum_idx_local = asc.de_que(c, SUM_IDX_QUE, asc.ub_i32(c))
    col_align = (col_len * size + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // size
    indices_offset = np.int64(td.each_core_index_count) * c.block_idx + np.int64(row_idx) * td.ub_index_factor
    asc.sync_pipes(c, asc.MTE2_S)
    for pre in range(td.pre_axis):
        updates_offset = (np.int64(td.updates_in_axis) * pre + indices_offset) * td.after_axis \
            + np.int64(c.block_idx) * td.each_core_after_axis_count + np.int64(td.after_axis_factor) * col_idx
        asc.sync_pipes(c, asc.MTE3_MTE2)
        asc.data_copy_pad(c, updates_local, asc.gm_at(gm.updates, updates_offset),
                          _updates_params(td, row_len, col_len, size), asc.NO_PAD)
        asc.sync_pipes(c, asc.MTE2_V)
        count_local = asc.de_que(c, UNIQUE_COUNT_QUE, asc.ub_i32(c))
        origin_local = asc.de_que(c, ORIGIN_QUE, asc.ub_u32(c))
        compute_sum(c, updates_local, sum_local, count_local, origin_local, unique, col_len, col_align, col_align,
                    tmpl.var_t)
        asc.en_que(c, UNIQUE_COUNT_QUE, count_local)
        asc.en_que(c, ORIGIN_QUE, origin_local)
        asc.sync_pipes(c, asc.V_MTE3)
        if split_after:
            copy_out_split_after(c, td, gm, tmpl, sum_idx_local, sum_local, pre, unique, col_len, col_idx)
        else:
            copy_out_split_indices(c, td, gm, tmpl, sum_idx_local, sum_local, pre, unique, col_len, col_idx)
    asc.free_tensor(c, UPDATES_QUE, updates_local)
    asc.free_tensor(c, UPDATES_CAST_QUE, sum_local)
    asc.en_que(c, SUM_IDX_QUE, sum_idx_local)


@aicore
def copy_in_and_copy_out(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len, split_after):
    """CopyInAndCopyOutSlitIndices (split_after False) / CopyInAndCopyOutSlitAfter (True): per pre row, the
    window's update rows in and each added to its own var row; the column split reads and writes this core's
    column range."""
    T = asc.ub_like(c, gm.var)
    size = T.itemsize
    indices_local = asc.de_que(c, INDICES_QUE, asc.ub_i32(c))
    updates_local = asc.alloc_tensor(c, UPDATES_QUE, T)
    indices_offset = np.int64(td.each_core_index_count) * c.block_idx + np.int64(row_idx) * td.ub_index_factor
    for pre in range(td.pre_axis):
        updates_offset = np.int64(td.after_axis) * (np.int64(pre) * td.updates_in_axis + indices_offset) \
            + np.int64(col_idx) * td.after_axis_factor
        if split_after:
            updates_offset += np.int64(c.block_idx) * td.each_core_after_axis_count
        asc.sync_pipes(c, asc.MTE3_MTE2)
        asc.data_copy_pad(c, updates_local, asc.gm_at(gm.updates, updates_offset),
                          _updates_params(td, row_len, col_len, size), asc.NO_PAD)
        asc.sync_pipes(c, asc.MTE2_V)
        asc.sync_pipes(c, asc.V_MTE3)
        if split_after:
            copy_out_split_after(c, td, gm, tmpl, indices_local, updates_local, pre, row_len, col_len, col_idx)
        else:
            copy_out_split_indices(c, td, gm, tmpl, indices_local, updates_local, pre, row_len, col_len, col_idx)
    asc.free_tensor(c, UPDATES_QUE, updates_local)
    asc.en_que(c, INDICES_QUE, indices_local)


@aicore
def copy_indices_in(c, td, gm, row_idx, row_len):
    """CopyIndiceIn: the window's ids in (enqueued) and their maxScore."""
    indices_local = asc.alloc_tensor(c, INDICES_QUE, asc.ub_i32(c))
    score_local = asc.tbuf_get(c, MAX_SCORE_BUF, asc.ub_f32(c))
    offset = np.int64(c.block_idx) * td.each_core_index_count + np.int64(row_idx) * td.ub_index_factor
    asc.data_copy_pad(c, indices_local, asc.gm_at(gm.indices, offset), asc.DataCopyExtParams(1, row_len * 4, 0, 0),
                      asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_V)
    index_statistic(c, indices_local, score_local, row_len, td.after_axis)
    asc.sync_pipes(c, asc.V_S)
    score = np.float32(asc.get_value(c, score_local, 0) / np.float32(row_len))
    asc.en_que(c, INDICES_QUE, indices_local)
    return score


@aicore
def _sort_window(c, td, row_len, first_slot):
    """The sort branch's front half: ids narrowed (cast modes 1 / 4) and sorted; returns the run count."""
    indices_local = asc.de_que(c, INDICES_QUE, asc.ub_i32(c))
    mode = td.indices_cast_mode
    unique = 0
    if mode == 0:
        unique = _sort_indices(c, indices_local, asc.ub_i32(c), row_len, np.int32(-1))
    elif _check_ids(c, indices_local, row_len, td.var_in_axis, first_slot):
        if mode == CAST_I32_U8:
            cast_local = asc.alloc_tensor(c, INDICES_CAST_QUE, asc.ub_u8(c))
            indices_sort_cast(c, indices_local, cast_local, row_len)
            unique = _sort_indices(c, cast_local, asc.ub_u8(c), row_len, np.uint8(255))
            asc.free_tensor(c, INDICES_CAST_QUE, cast_local)
        else:
            cast_local16 = asc.alloc_tensor(c, INDICES_CAST_QUE, asc.ub_i16(c))
            indices_sort_cast(c, indices_local, cast_local16, row_len)
            unique = _sort_indices(c, cast_local16, asc.ub_i16(c), row_len, np.int16(-1))
            asc.free_tensor(c, INDICES_CAST_QUE, cast_local16)
    asc.free_tensor(c, INDICES_QUE, indices_local)
    return unique


@aicore
def _free_runs(c):
    """The sort branch's end: the run ids, run lengths and origin positions dequeued and freed."""
    asc.free_tensor(c, SUM_IDX_QUE, asc.de_que(c, SUM_IDX_QUE, asc.ub_i32(c)))
    asc.free_tensor(c, UNIQUE_COUNT_QUE, asc.de_que(c, UNIQUE_COUNT_QUE, asc.ub_i32(c)))
    asc.free_tensor(c, ORIGIN_QUE, asc.de_que(c, ORIGIN_QUE, asc.ub_u32(c)))


@aicore
def _window(c, td, gm, tmpl, row_idx, row_len, col_loops, col_tail, first_slot, sorts, split_after):
    """One id window over this core's column pieces (the body both Process branches share): sorted, the runs
    summed then added (ComputeSumAndCopyOut), or slot by slot (CopyInAndCopyOut). first_slot: the window's first
    id's slot in indices."""
    if sorts:
        unique = _sort_window(c, td, row_len, first_slot)
        for col_idx in range(col_loops):
            col_len = col_tail if col_idx == col_loops - 1 else td.after_axis_factor
            compute_sum_and_copy_out(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len, unique, split_after)
        _free_runs(c)
    else:
        for col_idx in range(col_loops):
            col_len = col_tail if col_idx == col_loops - 1 else td.after_axis_factor
            copy_in_and_copy_out(c, td, gm, tmpl, row_idx, col_idx, row_len, col_len, split_after)
        asc.free_tensor(c, INDICES_QUE, asc.de_que(c, INDICES_QUE, asc.ub_i32(c)))


@aicore
def process_indices(c, td, gm, tmpl):
    """ProcessIndices: this core's id windows x column pieces."""
    last = c.block_idx == td.used_core_num_before - 1
    row_loops = td.tail_core_indices_loop if last else td.main_core_indices_loop
    row_tail = td.tail_core_tail_indices if last else td.main_core_tail_indices
    col_loops, col_tail = td.update_loop_size, td.update_tail_num
    for row_idx in range(row_loops):
        row_len = row_tail if row_idx == row_loops - 1 else td.ub_index_factor
        score = copy_indices_in(c, td, gm, row_idx, row_len)
        first_slot = np.int64(c.block_idx) * td.each_core_index_count + np.int64(row_idx) * td.ub_index_factor
        _window(c, td, gm, tmpl, row_idx, row_len, col_loops, col_tail, first_slot,
                score > SORT_HIST_THRESHOLD and row_len > INDICES_SORT_THRESHOLD, False)


@aicore
def process_after(c, td, gm, tmpl):
    """ProcessAfter: every core walks all the ids in windows of ubIndexFactor (each core sorts each window
    itself) over its own eachCoreAfterAxisCount columns (the last core tailCoreAfterAxisCount) in pieces of
    afterAxisFactor. Unlike ProcessIndices, a window sorts on its score alone, whatever its length."""
    last = c.block_idx == td.used_core_num_before - 1
    row_loops, row_tail = td.indices_loop_size, td.indice_axis_tail_num
    col_loops = td.tail_update_loop_size if last else td.update_loop_size
    col_tail = td.tail_update_axis_num if last else td.update_tail_num
    for row_idx in range(row_loops):
        row_len = row_tail if row_idx == row_loops - 1 else td.ub_index_factor
        # eachCoreIndexCount is 0 here: CopyIndiceIn's core offset vanishes and every core reads the same ids
        score = copy_indices_in(c, td, gm, row_idx, row_len)
        _window(c, td, gm, tmpl, row_idx, row_len, col_loops, col_tail, np.int64(row_idx) * td.ub_index_factor,
                score > SORT_HIST_THRESHOLD, True)


@global_aicore
def simd_sort_process(c, td, gm, tmpl):
    """Process: the column split (isSplitAfterAxis) or the id split (isSplitIndicesAxis); the pre split is refused
    by the l0 before launch."""
    if c.block_idx >= td.used_core_num_before:
        return
    if td.is_split_after_axis == 1:
        process_after(c, td, gm, tmpl)
    elif td.is_split_indices_axis == 1:
        process_indices(c, td, gm, tmpl)
