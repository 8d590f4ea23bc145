"""MoeInplaceIndexAddDeterminstic (op_kernel/arch35/moe_inplace_index_add_determinstic.h): keys 300000 / 300001 /
300002 with neither isSplitPreAxis nor isSplitAfterAxis (the deterministic switch on, few pre rows and short rows,
ids split over the cores), int32 ids, no alpha.

source: moe/3rd/moe_inplace_index_add/op_kernel/arch35/moe_inplace_index_add_determinstic.h @ 25fb6b92890d.

The adds of different cores to one var row are made order-free by fixed-point: every core's partial sums of a
row are scaled by the row's largest partial sum and rounded to int32, and int32 adds commute. Per pre row:

* Init (once): every core zeroes its share of the per-row counts, the row scales and the quantised sums, and its own
  run sums (0) and run ids (-1) in the workspace; SyncAll.
* ProcessFirstStep: core k walks its ids in windows of ubIndexFactor. A window's update rows come in (cast to
  fp32 for fp16 / bf16), its ids are radix-sorted with their slots (stable) and cut into runs; each run's rows
  are summed in fp32 from 0 in slot order (ComputeSum). The run sums and ids go to the core's workspace rows
  (compacted at the window's first slot); then per run an atomic-max copy puts |sum| into the row's scale
  (SetAtomicMax<float>) and a scalar AtomicAdd counts the run in the row's counter. SyncAll.
* ProcessSecondStep: core k walks its workspace slots in windows of ubQuantaIndxFactor: scale = the row's max
  |sum| x its count, q = rint_sat(sum / scale * 2^30) (a zero scale divides by 1), added to the row's quantised
  sum with an int32 atomic copy. Slots no run filled keep id -1 and sum 0: the kernel still reads the count and
  scale at row -1 (the word before the counters; the last scale row for pre row 0 is a neighbouring workspace
  region) and adds its q = 0 there, which changes no bit. SyncAll.
* ProcessThirdStep (after every pre row): core k takes var rows in windows of ubVarFactor: value = float(Q) x
  (scale x count) / 2^30, cast to T (RINT), then Muls by alphaValue_ and an atomic add to var.
  ProcessThirdStepOpti (isOpti: ids / varInAxis < 0.1) walks the core's own slots instead, takes each row's count
  with AtomicExch(0) so only its first visitor dequantises it, and skips ids outside the var.

Quirk kept, with its effect: alphaValue_ is 0 unless an alpha tensor is passed, and the final Muls is not guarded
by isWithAlpha as in the kernel's siblings, so without alpha every var element gets value x 0 added: var is
unchanged (a -0 becomes +0 where the product is +0), NaN where the dequantised value is inf or NaN. The chains
(axis 0, no alpha) therefore leave their zero-filled output at zero on this template; the workspace holds the
quantisation (tests/ops/l0/test_moe_inplace_index_add.py reads it back against a golden).
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

import ascend_sim.kernel_api as asc
from ascend_sim.dtypes import DT_BF16, DT_FLOAT, DT_FLOAT16, DT_INT32
from ascend_sim.kernel_api import BLOCK_BYTES, DEVICE_JIT_OPTIONS, aicore, global_aicore
from ascend_sim.radix_sort import radix_sort_ascending

from .simd_sort import _from_f32, compute_sum, compute_unique_id_num, compute_unique_id_times

STEP1_BUFFERS = ("indicesQue_", "sortIndicesQue_", "updatesOriginIdexQue_", "uniqueIdCountQue_", "updateSumIdxQue_",
                 "updatesQue_", "updatesCastQue_", "updateSumQue_")
(INDICES_QUE, SORT_INDICES_BUF, ORIGIN_QUE, UNIQUE_COUNT_QUE, UPDATE_SUM_IDX_QUE, UPDATES_QUE, UPDATES_CAST_QUE,
 UPDATE_SUM_QUE) = range(8)
STEP2_BUFFERS = ("sumIdxQue_", "sumQue_", "quantaSumQue_", "rValueQue_")
SUM_IDX_QUE, SUM_QUE, QUANTA_SUM_QUE, R_VALUE_QUE = range(4)
STEP3_BUFFERS = ("sumQuanToIntQue_", "rValueQue_", "invQuanDataQue_")
STEP3_OPTI_BUFFERS = STEP3_BUFFERS + ("sumIdxQue_",)
SUM_QUAN_TO_INT_QUE, R_VALUE_QUE3, INV_QUAN_DATA_QUE, SUM_IDX_QUE3 = range(4)

SCALING = np.float32(1 << 30)
U16_MASK = 0xFFFF


@aicore
def _align(count, size):
    """CeilAlign(count * size, 32) / size: a row of count elements of `size` bytes padded to 32 bytes."""
    return (np.int64(count) * size + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // size


@aicore
def _ws(td, c):
    """Element (4-byte) offsets of the workspace regions in the whole-workspace views (Init's SetGlobalBuffer
    calls): counts, scales, quantised sums, this core's run sums, this core's run ids."""
    var_rows = np.int64(td.pre_axis) * td.var_in_axis
    var_numel = var_rows * td.after_axis
    sum_ws = np.int64(td.each_core_index_count) * td.after_axis
    counts = np.int64(0)          # the views' own offset is the user workspace's first element
    r_value = counts + var_rows
    quant = r_value + var_numel
    sums = quant + var_numel + np.int64(c.block_idx) * sum_ws
    ids = quant + var_numel + np.int64(c.block_num) * sum_ws + np.int64(c.block_idx) * td.each_core_index_count
    return counts, r_value, quant, sums, ids


@aicore
def _core_index_count(c, td):
    return td.tail_core_index_count if c.block_idx == td.used_core_num_before - 1 else td.each_core_index_count


@aicore
def _one_row(nbytes):
    return asc.DataCopyExtParams(1, nbytes, 0, 0)


@global_aicore
def init(c, td, gm, tmpl):
    """Init: the shared regions split over every core (the last takes the rest), then this core's run sums (0)
    and run ids (-1); the SyncAll follows in the schedule."""
    counts, _, _, sums, ids = _ws(td, c)
    var_rows = np.int64(td.pre_axis) * td.var_in_axis
    ws_init_len = 2 * var_rows * td.after_axis + var_rows
    main_len = ws_init_len // c.block_num
    cur_len = ws_init_len - (c.block_num - 1) * main_len if c.block_idx == c.block_num - 1 else main_len
    asc.init_output(c, asc.gm_at(gm.ws_f32, counts + np.int64(c.block_idx) * main_len), cur_len, np.float32(0.0))
    asc.sync_pipes(c, asc.MTE3_S)
    asc.init_output(c, asc.gm_at(gm.ws_f32, sums), np.int64(td.each_core_index_count) * td.after_axis,
                    np.float32(0.0))
    asc.sync_pipes(c, asc.MTE3_V)
    asc.init_output(c, asc.gm_at(gm.ws_i32, ids), td.each_core_index_count, np.int32(-1))


# --- step 1: sort, run sums, scales and counts ---------------------------------------------------------------
@aicore
def copy_indices_and_updates_in(c, td, gm, tmpl, pre, row_idx, row_len, col_len):
    """CopyIndicesAndUpdatesIn: the window's update rows (cast to fp32 for fp16 / bf16) and its ids."""
    f32 = asc.ub_f32(c)
    cast_local = asc.alloc_tensor(c, UPDATES_CAST_QUE, f32)
    first_slot = np.int64(c.block_idx) * td.each_core_index_count + np.int64(row_idx) * td.ub_index_factor
    offset = (np.int64(pre) * td.updates_in_axis + first_slot) * td.after_axis
    params = asc.DataCopyExtParams(row_len, np.int64(col_len) * gm.updates.data.itemsize, 0, 0)
    if tmpl.var_t != DT_FLOAT:
        T = asc.ub_like(c, gm.updates)
        updates_local = asc.alloc_tensor(c, UPDATES_QUE, T)
        asc.data_copy_pad(c, updates_local, asc.gm_at(gm.updates, offset), params, asc.NO_PAD)
        asc.sync_pipes(c, asc.MTE2_V)
        asc.cast(c, cast_local, DT_FLOAT, updates_local, tmpl.var_t, asc.CAST_NONE,
                 np.int64(row_len) * _align(td.after_axis, T.itemsize))
        asc.free_tensor(c, UPDATES_QUE, updates_local)
    else:
        asc.data_copy_pad(c, cast_local, asc.gm_at(gm.updates, offset), params, asc.NO_PAD)
    asc.en_que(c, UPDATES_CAST_QUE, cast_local)
    indices_local = asc.alloc_tensor(c, INDICES_QUE, asc.ub_i32(c))
    asc.data_copy_pad(c, indices_local, asc.gm_at(gm.indices, first_slot), _one_row(row_len * 4), asc.NO_PAD)
    asc.en_que(c, INDICES_QUE, indices_local)


@aicore
def compute_sum_for_same_index(c, td, tmpl, row_len, col_len):
    """ComputeSumForSameIndex: sort the window's ids behind a block of -1 pads and an end pad, cut the runs
    (ComputeUniqueIdNum, the run ids by SetValue, ComputeUinqueIdTimes), sum each run (ComputeSum). Returns
    uniqueIdNum_."""
    i32 = asc.ub_i32(c)
    indices_local = asc.de_que(c, INDICES_QUE, i32)
    sort_local = asc.tbuf_get(c, SORT_INDICES_BUF, i32)
    origin_local = asc.alloc_tensor(c, ORIGIN_QUE, asc.ub_u32(c))
    shift = BLOCK_BYTES // 4
    radix_sort_ascending(c, sort_local[shift:], origin_local, indices_local, row_len)   # Sort<IDX_T, true, cfg>
    asc.duplicate(c, sort_local, np.int32(-1), shift)
    asc.set_value(c, sort_local, shift + row_len, np.int32(-1))
    asc.pipe_barrier(c, asc.PIPE_V)
    asc.free_tensor(c, INDICES_QUE, indices_local)
    asc.en_que(c, ORIGIN_QUE, origin_local)
    # ComputeUniqueIdNum
    count_local = asc.alloc_tensor(c, UNIQUE_COUNT_QUE, i32)
    unique = compute_unique_id_num(c, sort_local, shift, count_local, row_len)
    sum_idx_local = asc.alloc_tensor(c, UPDATE_SUM_IDX_QUE, i32)
    asc.sync_pipes(c, asc.V_S)
    for i in range(unique):
        asc.set_value(c, sum_idx_local, i, asc.get_value(c, sort_local, shift + asc.get_value(c, count_local, i)))
    asc.sync_pipes(c, asc.S_V)
    asc.en_que(c, UPDATE_SUM_IDX_QUE, sum_idx_local)
    asc.en_que(c, UNIQUE_COUNT_QUE, count_local)
    # ComputeUinqueIdTimes
    count_local = asc.de_que(c, UNIQUE_COUNT_QUE, i32)
    compute_unique_id_times(c, count_local, unique)
    asc.en_que(c, UNIQUE_COUNT_QUE, count_local)
    # ComputeSum
    f32 = asc.ub_f32(c)
    count_local = asc.de_que(c, UNIQUE_COUNT_QUE, i32)
    origin_local = asc.de_que(c, ORIGIN_QUE, asc.ub_u32(c))
    cast_local = asc.de_que(c, UPDATES_CAST_QUE, f32)
    sum_local = asc.alloc_tensor(c, UPDATE_SUM_QUE, f32)
    # the fp32 copy's rows keep T's 32-byte stride (Cast works on rowLen x afterAxisAlignSize_ elements)
    compute_sum(c, cast_local, sum_local, count_local, origin_local, unique, col_len,
                _align(td.after_axis, 2 if tmpl.var_t != DT_FLOAT else 4), _align(td.after_axis, 4), DT_FLOAT)
    asc.en_que(c, UPDATE_SUM_QUE, sum_local)
    asc.free_tensor(c, UPDATES_CAST_QUE, cast_local)
    asc.free_tensor(c, UNIQUE_COUNT_QUE, count_local)
    asc.free_tensor(c, ORIGIN_QUE, origin_local)
    return unique


@aicore
def abs_f32(c, t, count):
    """Abs(t, t, count) on fp32 in place."""
    if not asc.vf_call(c, count) or not asc.vf_operand(c, t, count, True):
        return
    for i in range(count):
        t[i] = np.float32(abs(t[i]))


@aicore
def copy_sum_out_to_ws(c, td, gm, pre, row_idx, unique, col_len):
    """CopySumOutToWs: the run ids and sums to the core's workspace rows; per run |sum| into the row's scale with
    an atomic-max copy and a scalar AtomicAdd of 1 to its count."""
    counts, r_value, _, sums, ids = _ws(td, c)
    i32, f32 = asc.ub_i32(c), asc.ub_f32(c)
    row_offset = np.int64(row_idx) * td.ub_index_factor
    sum_idx_local = asc.de_que(c, UPDATE_SUM_IDX_QUE, i32)
    asc.data_copy_pad(c, asc.gm_at(gm.ws_i32, ids + row_offset), sum_idx_local, _one_row(unique * 4))
    sum_stride = _align(td.after_axis, 4)
    sum_local = asc.de_que(c, UPDATE_SUM_QUE, f32)
    asc.data_copy_pad(c, asc.gm_at(gm.ws_f32, sums + row_offset * td.after_axis), sum_local,
                      asc.DataCopyExtParams(unique, np.int64(col_len) * 4, 0, 0))
    asc.sync_pipes(c, asc.MTE3_V)
    abs_f32(c, sum_local, unique * sum_stride)
    for i in range(unique):
        row = np.int64(asc.get_value(c, sum_idx_local, i)) + np.int64(pre) * td.var_in_axis
        asc.sync_pipes(c, asc.S_MTE3)
        asc.sync_pipes(c, asc.V_MTE3)
        asc.set_atomic_max(c, DT_FLOAT)
        asc.data_copy_pad(c, asc.gm_at(gm.ws_f32, r_value + row * td.after_axis), sum_local[i * sum_stride:],
                          _one_row(np.int64(col_len) * 4))
        asc.set_atomic_none(c)
        asc.atomic_add(c, asc.gm_at(gm.ws_u32, counts + row), np.uint32(1))
    asc.free_tensor(c, UPDATE_SUM_QUE, sum_local)
    asc.free_tensor(c, UPDATE_SUM_IDX_QUE, sum_idx_local)


@global_aicore
def process_first_step(c, td, gm, tmpl, pre):
    """ProcessFirstStep(preAxisIdx)."""
    if c.block_idx >= td.used_core_num_before:
        return
    count = _core_index_count(c, td)
    loops = (count + td.ub_index_factor - 1) // td.ub_index_factor
    for row_idx in range(loops):
        row_len = count - td.ub_index_factor * (loops - 1) if row_idx == loops - 1 else td.ub_index_factor
        copy_indices_and_updates_in(c, td, gm, tmpl, pre, row_idx, row_len, td.after_axis)
        unique = compute_sum_for_same_index(c, td, tmpl, row_len, td.after_axis)
        copy_sum_out_to_ws(c, td, gm, pre, row_idx, unique, td.after_axis)


# --- step 2: quantise ----------------------------------------------------------------------------------------
@aicore
def _count_of(c, gm, counts, row):
    """DataCacheCleanAndInvalid of the row's counter, then its GetValue."""
    word = asc.gm_at(gm.ws_u32, counts + row)
    asc.data_cache_clean_and_invalid(c, word, asc.SINGLE_CACHE_LINE, asc.CACHELINE_OUT)
    return asc.get_value(c, word, 0)


@aicore
def copy_sum_and_r_value_in(c, td, gm, pre, row_idx, row_len, col_len):
    """CopySumAndRValueIn: the slots' ids and sums; per slot the row's scale x its count."""
    counts, r_value, _, sums, ids = _ws(td, c)
    i32, f32 = asc.ub_i32(c), asc.ub_f32(c)
    sum_local = asc.alloc_tensor(c, SUM_QUE, f32)
    sum_idx_local = asc.alloc_tensor(c, SUM_IDX_QUE, i32)
    r_local = asc.alloc_tensor(c, R_VALUE_QUE, f32)
    row_offset = np.int64(row_idx) * td.ub_quanta_indx_factor
    asc.data_copy_pad(c, sum_idx_local, asc.gm_at(gm.ws_i32, ids + row_offset), _one_row(row_len * 4), asc.NO_PAD)
    asc.data_copy_pad(c, sum_local, asc.gm_at(gm.ws_f32, sums + row_offset * td.after_axis),
                      asc.DataCopyExtParams(row_len, np.int64(col_len) * 4, 0, 0), asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_S)
    stride = _align(td.after_axis, 4)
    for i in range(row_len):
        row = np.int64(pre) * td.var_in_axis + asc.get_value(c, sum_idx_local, i)
        count = _count_of(c, gm, counts, row)
        asc.sync_pipes(c, asc.S_MTE2)
        asc.data_copy_pad(c, r_local[i * stride:], asc.gm_at(gm.ws_f32, r_value + row * td.after_axis),
                          _one_row(np.int64(col_len) * 4), asc.NO_PAD)
        asc.sync_pipes(c, asc.MTE2_V)
        asc.muls(c, r_local[i * stride:], r_local[i * stride:], np.float32(count), col_len)
    asc.en_que(c, SUM_QUE, sum_local)
    asc.en_que(c, SUM_IDX_QUE, sum_idx_local)
    asc.en_que(c, R_VALUE_QUE, r_local)


@aicore
def quantize_for_sum(c, td, row_len):
    """QuantizeForSum (a VF): q = Cast<int32, SAT, RINT>((sum / scale) * 2^30), a zero scale replaced by 1."""
    f32 = asc.ub_f32(c)
    sum_local = asc.de_que(c, SUM_QUE, f32)
    r_local = asc.de_que(c, R_VALUE_QUE, f32)
    q_local = asc.alloc_tensor(c, QUANTA_SUM_QUE, asc.ub_i32(c))
    stride = _align(td.after_axis, 4)
    rows = row_len & U16_MASK
    if asc.vf_call(c, rows * td.after_axis) and asc.vf_operand(c, sum_local, rows * stride, False) \
            and asc.vf_operand(c, r_local, rows * stride, False) and asc.vf_operand(c, q_local, rows * stride, True):
        for r in range(rows):
            for k in range(td.after_axis):
                scale = r_local[r * stride + k]
                if scale == np.float32(0.0):
                    scale = np.float32(1.0)
                q_local[r * stride + k] = _f32_to_i32_sat_rint(np.float32(np.float32(sum_local[r * stride + k] / scale)
                                                                          * SCALING))
    asc.free_tensor(c, SUM_QUE, sum_local)
    asc.free_tensor(c, R_VALUE_QUE, r_local)
    asc.en_que(c, QUANTA_SUM_QUE, q_local)


@aicore
def _f32_to_i32_sat_rint(x):
    """Cast<int32_t, float, {SAT, CAST_RINT}> of one lane: half to even, saturated, NaN to 0."""
    if x != x:
        return np.int32(0)
    r = np.rint(np.float64(x))
    if r >= 2147483647.0:
        return np.int32(2147483647)
    if r <= -2147483648.0:
        return np.int32(-2147483648)
    return np.int32(r)


@aicore
def copy_quantized_sum_out_to_int_ws(c, td, gm, pre, row_len, col_len):
    """CopyQuantizedSumOutToIntWs: each slot's q added to its row's quantised sum (SetAtomicAdd<int32_t>)."""
    _, _, quant, _, _ = _ws(td, c)
    i32 = asc.ub_i32(c)
    q_local = asc.de_que(c, QUANTA_SUM_QUE, i32)
    sum_idx_local = asc.de_que(c, SUM_IDX_QUE, i32)
    stride = _align(td.after_axis, 4)
    asc.set_atomic_add(c, DT_INT32)
    for i in range(row_len):
        row = np.int64(pre) * td.var_in_axis + asc.get_value(c, sum_idx_local, i)
        asc.sync_pipes(c, asc.S_MTE3)
        asc.data_copy_pad(c, asc.gm_at(gm.ws_i32, quant + row * td.after_axis), q_local[i * stride:],
                          _one_row(np.int64(col_len) * 4))
    asc.set_atomic_none(c)
    asc.free_tensor(c, QUANTA_SUM_QUE, q_local)
    asc.free_tensor(c, SUM_IDX_QUE, sum_idx_local)


@global_aicore
def process_second_step(c, td, gm, tmpl, pre):
    """ProcessSecondStep(preAxisIdx)."""
    if c.block_idx >= td.used_core_num_before:
        return
    count = _core_index_count(c, td)
    factor = td.ub_quanta_indx_factor
    loops = (count + factor - 1) // factor
    for row_idx in range(loops):
        row_len = count - factor * (loops - 1) if row_idx == loops - 1 else factor
        copy_sum_and_r_value_in(c, td, gm, pre, row_idx, row_len, td.after_axis)
        quantize_for_sum(c, td, row_len)
        copy_quantized_sum_out_to_int_ws(c, td, gm, pre, row_len, td.after_axis)


# --- step 3: back to T, into var -----------------------------------------------------------------------------
@aicore
def inverse_quantize(c, td, tmpl, T, row_len, col_len):
    """InverseQuantize (a VF): float(Q) x scale / 2^30, cast to T (CAST_RINT, saturating), rows of T's stride."""
    q_local = asc.de_que(c, SUM_QUAN_TO_INT_QUE, asc.ub_i32(c))
    r_local = asc.de_que(c, R_VALUE_QUE3, asc.ub_f32(c))
    out_local = asc.alloc_tensor(c, INV_QUAN_DATA_QUE, T)
    stride, out_stride = _align(td.after_axis, 4), _align(td.after_axis, T.itemsize)
    rows = row_len & U16_MASK
    if asc.vf_call(c, rows * col_len) and asc.vf_operand(c, q_local, rows * stride, False) \
            and asc.vf_operand(c, r_local, rows * stride, False) \
            and asc.vf_operand(c, out_local, rows * out_stride, True):
        for r in range(rows):
            for k in range(col_len):
                v = np.float32(np.float32(np.float32(q_local[r * stride + k]) * r_local[r * stride + k]) / SCALING)
                out_local[r * out_stride + k] = _from_f32(_saturate(v, tmpl.var_t), tmpl.var_t, out_local)
    asc.en_que(c, INV_QUAN_DATA_QUE, out_local)
    asc.free_tensor(c, SUM_QUAN_TO_INT_QUE, q_local)
    asc.free_tensor(c, R_VALUE_QUE3, r_local)


@aicore
def _saturate(v, var_t):
    """SatMode::SAT of the fp32 -> T cast: a finite value beyond T's largest finite one becomes it (signed); inf and
    NaN pass (the model's assumption: the documentation does not say)."""
    if var_t == DT_FLOAT16:
        limit = np.float32(65504.0)
    elif var_t == DT_BF16:
        limit = np.float32(3.3895313892515355e38)
    else:
        return v
    if v > limit and v != np.inf:
        return limit
    if v < -limit and v != -np.inf:
        return -limit
    return v


def _muls_alpha(c, tmpl, t, alpha, count):
    """Muls(t, t, alphaValue_, count) in T (float32, or fp16 / bf16 bits in uint16)."""
    raise NotImplementedError("_muls_alpha is only callable from numba code")


@overload(_muls_alpha, jit_options=DEVICE_JIT_OPTIONS)
def _muls_alpha_impl(c, tmpl, t, alpha, count):
    if t.dtype == types.float32:
        def muls_f32(c, tmpl, t, alpha, count):
            asc.muls(c, t, t, np.float32(alpha), count)
        return muls_f32

    def muls_b16(c, tmpl, t, alpha, count):
        asc.muls_half(c, t, t, np.float32(alpha), tmpl.var_t, count)
    return muls_b16


@aicore
def copy_r_value_and_int_ws_in(c, td, gm, row_idx, row_len, col_len):
    """CopyRValueAndIntWsIn: a window of this core's var rows: their quantised sums and scales; each scale x the
    row's count."""
    counts, r_value, quant, _, _ = _ws(td, c)
    i32, f32 = asc.ub_i32(c), asc.ub_f32(c)
    q_local = asc.alloc_tensor(c, SUM_QUAN_TO_INT_QUE, i32)
    r_local = asc.alloc_tensor(c, R_VALUE_QUE3, f32)
    first_row = np.int64(c.block_idx) * td.each_core_var_count + np.int64(row_idx) * td.ub_var_factor
    params = asc.DataCopyExtParams(row_len, np.int64(col_len) * 4, 0, 0)
    asc.data_copy_pad(c, q_local, asc.gm_at(gm.ws_i32, quant + first_row * td.after_axis), params, asc.NO_PAD)
    asc.data_copy_pad(c, r_local, asc.gm_at(gm.ws_f32, r_value + first_row * td.after_axis), params, asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_V)
    stride = _align(td.after_axis, 4)
    for i in range(row_len):
        count = _count_of(c, gm, counts, first_row + i)
        asc.muls(c, r_local[i * stride:], r_local[i * stride:], np.float32(count), col_len)
    asc.en_que(c, SUM_QUAN_TO_INT_QUE, q_local)
    asc.en_que(c, R_VALUE_QUE3, r_local)


@aicore
def copy_inverse_quantized_value_out(c, td, gm, tmpl, row_idx, row_len, col_len, alpha):
    """CopyInverseQuantizedValueOut: Muls by alphaValue_, then the window's rows added to var atomically."""
    T = asc.ub_like(c, gm.var)
    out_local = asc.de_que(c, INV_QUAN_DATA_QUE, T)
    first_row = np.int64(c.block_idx) * td.each_core_var_count + np.int64(row_idx) * td.ub_var_factor
    _muls_alpha(c, tmpl, out_local, alpha, np.int64(row_len) * _align(td.after_axis, T.itemsize))
    asc.sync_pipes(c, asc.V_MTE3)
    asc.set_atomic_add(c, tmpl.var_t)
    asc.data_copy_pad(c, asc.gm_at(gm.var, first_row * td.after_axis), out_local,
                      asc.DataCopyExtParams(row_len, np.int64(col_len) * T.itemsize, 0, 0))
    asc.set_atomic_none(c)
    asc.free_tensor(c, INV_QUAN_DATA_QUE, out_local)


@global_aicore
def process_third_step(c, td, gm, tmpl):
    """ProcessThirdStep: this core's var rows in windows of ubVarFactor."""
    if c.block_idx >= td.used_core_num_after:
        return
    alpha = np.float32(0.0)                # alphaValue_{0}: no alpha input (isWithAlpha 0)
    count = td.tail_core_var_count if c.block_idx == td.used_core_num_after - 1 else td.each_core_var_count
    loops = (count + td.ub_var_factor - 1) // td.ub_var_factor
    for row_idx in range(loops):
        row_len = count - td.ub_var_factor * (loops - 1) if row_idx == loops - 1 else td.ub_var_factor
        copy_r_value_and_int_ws_in(c, td, gm, row_idx, row_len, td.after_axis)
        inverse_quantize(c, td, tmpl, asc.ub_like(c, gm.var), row_len, td.after_axis)
        copy_inverse_quantized_value_out(c, td, gm, tmpl, row_idx, row_len, td.after_axis, alpha)


@aicore
def copy_r_value_and_int_ws_and_index_in_opti(c, td, gm, pre, row_idx, row_len, col_len):
    """CopyRValueAndIntWsAndIndexInOpti: this core's slots; a row in the var whose count AtomicExch takes from
    non-zero is kept (its quantised sum, its scale x the count); returns how many were kept."""
    counts, r_value, quant, _, ids = _ws(td, c)
    i32, f32 = asc.ub_i32(c), asc.ub_f32(c)
    sum_idx_local = asc.alloc_tensor(c, SUM_IDX_QUE3, i32)
    r_local = asc.alloc_tensor(c, R_VALUE_QUE3, f32)
    q_local = asc.alloc_tensor(c, SUM_QUAN_TO_INT_QUE, i32)
    asc.data_copy_pad(c, sum_idx_local, asc.gm_at(gm.ws_i32, ids + np.int64(row_idx) * td.ub_var_opti_factor),
                      _one_row(row_len * 4), asc.NO_PAD)
    asc.sync_pipes(c, asc.MTE2_S)
    stride = _align(td.after_axis, 4)
    var_rows = np.int64(td.pre_axis) * td.var_in_axis
    kept = 0
    for i in range(row_len):
        row = np.int64(pre) * td.var_in_axis + asc.get_value(c, sum_idx_local, i)
        if row < 0 or row >= var_rows:
            continue
        count = asc.atomic_exch(c, asc.gm_at(gm.ws_u32, counts + row), np.uint32(0))
        if count == 0:
            continue
        asc.set_value(c, sum_idx_local, kept, np.int32(row))
        local = kept * stride
        kept += 1
        asc.data_copy_pad(c, r_local[local:], asc.gm_at(gm.ws_f32, r_value + row * td.after_axis),
                          _one_row(np.int64(col_len) * 4), asc.NO_PAD)
        asc.data_copy_pad(c, q_local[local:], asc.gm_at(gm.ws_i32, quant + row * td.after_axis),
                          _one_row(np.int64(col_len) * 4), asc.NO_PAD)
        asc.sync_pipes(c, asc.MTE2_V)
        asc.muls(c, r_local[local:], r_local[local:], np.float32(count), col_len)
    asc.en_que(c, SUM_IDX_QUE3, sum_idx_local)
    asc.en_que(c, R_VALUE_QUE3, r_local)
    asc.en_que(c, SUM_QUAN_TO_INT_QUE, q_local)
    return kept


@aicore
def copy_inverse_quantized_value_out_opti(c, td, gm, tmpl, kept, col_len, alpha):
    """CopyInverseQuantizedValueOutOpti: per kept row, Muls by alphaValue_ and an atomic add to var."""
    T = asc.ub_like(c, gm.var)
    out_local = asc.de_que(c, INV_QUAN_DATA_QUE, T)
    sum_idx_local = asc.de_que(c, SUM_IDX_QUE3, asc.ub_i32(c))
    stride = _align(td.after_axis, T.itemsize)
    asc.set_atomic_add(c, tmpl.var_t)
    for i in range(kept):
        row = np.int64(asc.get_value(c, sum_idx_local, i))
        _muls_alpha(c, tmpl, out_local[i * stride:], alpha, col_len)
        asc.sync_pipes(c, asc.S_MTE3)
        asc.sync_pipes(c, asc.V_MTE3)
        asc.data_copy_pad(c, asc.gm_at(gm.var, row * td.after_axis), out_local[i * stride:],
                          _one_row(np.int64(col_len) * T.itemsize))
    asc.set_atomic_none(c)
    asc.free_tensor(c, INV_QUAN_DATA_QUE, out_local)
    asc.free_tensor(c, SUM_IDX_QUE3, sum_idx_local)


@global_aicore
def process_third_step_opti(c, td, gm, tmpl, pre):
    """ProcessThirdStepOpti(preAxisIdx): this core's slots in windows of ubVarOptiFactor."""
    if c.block_idx >= td.used_core_num_before:
        return
    alpha = np.float32(0.0)                # alphaValue_{0}: no alpha input (isWithAlpha 0)
    factor = td.ub_var_opti_factor
    count = _core_index_count(c, td)
    loops = (count + factor - 1) // factor
    for row_idx in range(loops):
        row_len = count - factor * (loops - 1) if row_idx == loops - 1 else factor
        kept = copy_r_value_and_int_ws_and_index_in_opti(c, td, gm, pre, row_idx, row_len, td.after_axis)
        inverse_quantize(c, td, tmpl, asc.ub_like(c, gm.var), kept, td.after_axis)
        copy_inverse_quantized_value_out_opti(c, td, gm, tmpl, kept, td.after_axis, alpha)
