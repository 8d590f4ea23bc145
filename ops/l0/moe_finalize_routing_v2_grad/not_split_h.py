"""MoeFinalizeRoutingV2GradRegbaseNotCutH<T, int32, S, false> (arch35/moe_finalize_routing_v2_grad_regbase_not_cut_h.h),
key 20011: with scales, no bias, every row whole in UB (hAlign elements).

source: moe/moe_finalize_routing_v2_grad/op_kernel/arch35/moe_finalize_routing_v2_grad_regbase_not_cut_h.h and
moe_finalize_routing_v2_grad_regbase.h @ 25fb6b92890d.

Per slot j of the core's share, with row = expanded_row_idx[j] (a scalar GM read):
* a valid row (base.valid_row): CopyIn grad_y[j // topK] and expanded_x[row]; ComputeOneRow:
  CalcGradExpandedXVF (grad_y * scales[j] in fp32, CAST_RINT to T) and CalcGradScaleVF (the fp32 sum of
  grad_y * expanded_x, below); CopyOutGradExpandedX to grad_expanded_x[row]; CopyOutGradScales to grad_scales[j];
* otherwise grad_scales[j] = +0 (Duplicate of one S) and no row is read or written.

CalcGradScaleVF, all in fp32 registers of 64 lanes, with Q = binaryAddQuotient (the largest power of two <= H) and
B = Q / 64 (binaryAddSumBuf's floats):
* H <= 64: one ReduceSum of the H products (the other lanes count as +0);
* else, for the first ceil(H / 64) - B chunks i: chunk i of the head plus chunk B + i of the tail, the tail's
  missing lanes +0 (Mul under the tail mask zeroes them), so every lane takes one Add; a full-register ReduceSum;
* the other chunks i < B: a full-register ReduceSum of the head chunk; the loop runs on to ceil(H / 64) with an
  empty mask and stores those +0 sums past the B floats of binaryAddSumBuf (never read; the model lets them land
  in the UB past the buffer, which is the last of the plan);
* BinaryAddVF: binaryAddk times the upper half of the chunk sums (in 64-lane vectors) is added onto the lower, then
  one ReduceSum of binaryAddLastNum lanes; StoreOneTensorForDtypeT<S> narrows it CAST_RINT.

ReduceSum is base.reduce_sum (ascend_sim.regbase.vreduce_sum): the active lanes as a pairwise tree of adjacent
lanes, inactive lanes +0. The in-register order of the 950's ReduceSum is not published; that tree is the one
assumption made, bound in one place (base.reduce_sum), and the goldens take it from one function (LANE_TREE in
tests/ops/l0/test_moe_finalize_routing_v2_grad.py, tree_lanes in ops.unpermute_grad.golden).
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.dtypes import DT_FLOAT
from ascend_sim.kernel_api import aicore, global_aicore

from .base import F32_BYTES, VL_F32, compute_rows, copy_in, copy_out, load_t, reduce_sum, store_t, to_ub_end, valid_row

BUFFERS = ("gradYInQueue", "expandedXInQueue", "gradExpandedXOutQueue", "gradScalesOutQueue")
BUFFERS_SUM = BUFFERS + ("binaryAddSumBuf",)
"""binaryAddSumBuf is created only when binaryAddQuotient / 64 > 0 (H >= 64)."""
GRAD_Y_QUE, EXPANDED_X_QUE, GRAD_EXPANDED_X_QUE, GRAD_SCALES_QUE, BINARY_ADD_SUM_BUF = \
    asc.buffer_ids(BUFFERS_SUM, *BUFFERS_SUM)

# registers and masks of the VFs
_GRAD_Y, _EXPANDED_X, _GRAD_Y_TAIL, _EXPANDED_X_TAIL, _SUM = 0, 1, 2, 3, 4
_PREG_LOOP, _PREG_TAIL, _PREG_ALL, _PREG_ONE = 0, 1, 2, 3


@aicore
def _scale_f32(c, gm, s_t, j):
    """scalesGm.GetValue(j) as the float the VF multiplies by ((float)scale, ToFloat for bf16: exact)."""
    if s_t == DT_FLOAT:
        return np.float32(asc.get_value(c, gm.scales_f32, j))
    return asc.to_float(asc.get_value(c, gm.scales_u16, j), s_t)


@aicore
def _calc_grad_expanded_x(c, x_t, grad_expanded_x_ub, grad_y_ub, scale, count):
    """CalcGradExpandedXVF: grad_expanded_x = grad_y * scale, 64 lanes per step under UpdateMask(count)."""
    src = to_ub_end(c, grad_y_ub)
    loops = (count + VL_F32 - 1) // VL_F32
    if not asc.vec_scope_begin(c):
        return
    grad_y = asc.vreg_f32(c, _GRAD_Y)
    preg = asc.mreg(c, _PREG_LOOP)
    sreg = count
    for i in range(loops):
        sreg = asc.update_mask(c, preg, F32_BYTES, sreg)
        load_t(c, x_t, src, grad_y, preg, i * VL_F32)
        asc.vmuls(c, grad_y, grad_y, scale, preg)
        store_t(c, x_t, grad_expanded_x_ub, grad_y, preg, i * VL_F32)
    asc.vec_scope_end(c)


@aicore
def _store_grad_scale(c, s_t, grad_scales_ub, reg, preg_one):
    """StoreOneTensorForDtypeT<S>(gradScaleUb, reg, pregOne, 0) on the uint16 view of the queue buffer."""
    if s_t == DT_FLOAT:
        store_t(c, s_t, asc.view_as(c, grad_scales_ub, asc.ub_f32(c)), reg, preg_one, 0)
    else:
        store_t(c, s_t, grad_scales_ub, reg, preg_one, 0)


@aicore
def _calc_grad_scale_small_h(c, x_t, s_t, grad_scales_ub, grad_y_ub, expanded_x_ub, count):
    """CalcGradScaleForSmallHVF: H <= 64, one masked Mul and ReduceSum."""
    gy_src = to_ub_end(c, grad_y_ub)
    ex_src = to_ub_end(c, expanded_x_ub)
    if not asc.vec_scope_begin(c):
        return
    grad_y = asc.vreg_f32(c, _GRAD_Y)
    expanded_x = asc.vreg_f32(c, _EXPANDED_X)
    sum_reg = asc.vreg_f32(c, _SUM)
    preg = asc.mreg(c, _PREG_LOOP)
    preg_one = asc.mreg(c, _PREG_ONE)
    asc.create_mask(c, preg_one, F32_BYTES, 1)          # CreateMask<float, VL1>
    asc.update_mask(c, preg, F32_BYTES, count)
    load_t(c, x_t, gy_src, grad_y, preg, 0)
    load_t(c, x_t, ex_src, expanded_x, preg, 0)
    asc.vmul(c, grad_y, expanded_x, grad_y, preg)
    reduce_sum(c, sum_reg, grad_y, preg)
    _store_grad_scale(c, s_t, grad_scales_ub, sum_reg, preg_one)
    asc.vec_scope_end(c)


@aicore
def _calc_grad_scale(c, td, x_t, s_t, grad_scales_ub, grad_y_ub, expanded_x_ub, sum_ub, count):
    """CalcGradScaleVF + BinaryAddVF (module docstring)."""
    loops = (count + VL_F32 - 1) // VL_F32
    if loops == 1:
        _calc_grad_scale_small_h(c, x_t, s_t, grad_scales_ub, grad_y_ub, expanded_x_ub, count)
        return
    buf_floats = td.binary_add_quotient // VL_F32          # binaryAddBufSize_
    gy_src = to_ub_end(c, grad_y_ub)
    ex_src = to_ub_end(c, expanded_x_ub)
    sums = to_ub_end(c, sum_ub)
    if not asc.vec_scope_begin(c):
        return
    grad_y = asc.vreg_f32(c, _GRAD_Y)
    expanded_x = asc.vreg_f32(c, _EXPANDED_X)
    grad_y_tail = asc.vreg_f32(c, _GRAD_Y_TAIL)
    expanded_x_tail = asc.vreg_f32(c, _EXPANDED_X_TAIL)
    sum_reg = asc.vreg_f32(c, _SUM)
    preg_loop = asc.mreg(c, _PREG_LOOP)
    preg_tail = asc.mreg(c, _PREG_TAIL)
    preg_all = asc.mreg(c, _PREG_ALL)
    preg_one = asc.mreg(c, _PREG_ONE)
    asc.create_mask(c, preg_one, F32_BYTES, 1)          # CreateMask<float, VL1>
    asc.create_mask(c, preg_all, F32_BYTES, asc.PAT_ALL)
    main_count = td.binary_add_quotient
    tail_count = count - td.binary_add_quotient
    tail_loops = loops - buf_floats
    for i in range(tail_loops):
        main_count = asc.update_mask(c, preg_loop, F32_BYTES, main_count)
        tail_count = asc.update_mask(c, preg_tail, F32_BYTES, tail_count)
        load_t(c, x_t, gy_src, grad_y, preg_loop, i * VL_F32)
        load_t(c, x_t, ex_src, expanded_x, preg_loop, i * VL_F32)
        load_t(c, x_t, gy_src, grad_y_tail, preg_tail, (i + buf_floats) * VL_F32)
        load_t(c, x_t, ex_src, expanded_x_tail, preg_tail, (i + buf_floats) * VL_F32)
        asc.vmul(c, grad_y, expanded_x, grad_y, preg_loop)
        asc.vmul(c, grad_y_tail, expanded_x_tail, grad_y_tail, preg_tail)
        asc.vadd(c, grad_y, grad_y, grad_y_tail, preg_all)
        reduce_sum(c, sum_reg, grad_y, preg_all)
        asc.reg_store_unalign(c, sums, sum_reg, i, 1)    # DataCopy<DIST_FIRST_ELEMENT_B32>(binaryAddUb + i)
    for i in range(tail_loops, loops):
        main_count = asc.update_mask(c, preg_loop, F32_BYTES, main_count)
        load_t(c, x_t, gy_src, grad_y, preg_loop, i * VL_F32)
        load_t(c, x_t, ex_src, expanded_x, preg_loop, i * VL_F32)
        asc.vmul(c, grad_y, expanded_x, grad_y, preg_loop)
        reduce_sum(c, sum_reg, grad_y, preg_loop)
        asc.reg_store_unalign(c, sums, sum_reg, i, 1)
    # LocalMemBar<VEC_STORE, VEC_LOAD>: the model's stores land at once
    asc.update_mask(c, preg_loop, F32_BYTES, td.binary_add_last_num)
    # BinaryAddVF(gradScaleUb, binaryAddUb, x1 = sumReg, x2 = gradYReg, ...)
    cur = buf_floats // VL_F32
    for _ in range(td.binary_addk):
        cur //= 2
        for j in range(cur):
            asc.reg_load(c, sum_reg, sums, j * VL_F32, asc.LOAD_NORM)
            asc.reg_load(c, grad_y, sums, (j + cur) * VL_F32, asc.LOAD_NORM)
            asc.vadd(c, sum_reg, sum_reg, grad_y, preg_all)
            asc.reg_store(c, sums, sum_reg, j * VL_F32, preg_all)
    asc.reg_load(c, sum_reg, sums, 0, asc.LOAD_NORM)
    reduce_sum(c, grad_y, sum_reg, preg_loop)
    _store_grad_scale(c, s_t, grad_scales_ub, grad_y, preg_one)
    asc.vec_scope_end(c)


@aicore
def _process_valid_row(c, td, gm, tmpl, batch, row):
    """CopyIn, ComputeOneRow, CopyOutGradExpandedX of a slot whose index names a row."""
    T = asc.ub_like(c, gm.grad_y)
    h = td.hidden
    # CopyIn
    grad_y_ub = asc.alloc_tensor(c, GRAD_Y_QUE, T)
    copy_in(c, grad_y_ub, asc.gm_at(gm.grad_y, np.int64(batch // td.top_k) * h), h)
    asc.en_que(c, GRAD_Y_QUE, grad_y_ub)
    expanded_x_ub = asc.alloc_tensor(c, EXPANDED_X_QUE, T)
    copy_in(c, expanded_x_ub, asc.gm_at(gm.expanded_x, np.int64(row) * h), h)
    asc.en_que(c, EXPANDED_X_QUE, expanded_x_ub)
    # ComputeOneRow
    grad_y_ub = asc.de_que(c, GRAD_Y_QUE, T)
    expanded_x_ub = asc.de_que(c, EXPANDED_X_QUE, T)
    scale = _scale_f32(c, gm, tmpl.s_t, batch)
    grad_expanded_x_ub = asc.alloc_tensor(c, GRAD_EXPANDED_X_QUE, T)
    _calc_grad_expanded_x(c, tmpl.x_t, grad_expanded_x_ub, grad_y_ub, scale, h)
    asc.en_que(c, GRAD_EXPANDED_X_QUE, grad_expanded_x_ub)
    grad_scales_ub = asc.alloc_tensor(c, GRAD_SCALES_QUE, asc.ub_u16(c))
    sum_ub = asc.ub_f32(c)
    if td.binary_add_quotient >= VL_F32:
        sum_ub = asc.tbuf_get(c, BINARY_ADD_SUM_BUF, asc.ub_f32(c))
    _calc_grad_scale(c, td, tmpl.x_t, tmpl.s_t, grad_scales_ub, grad_y_ub, expanded_x_ub, sum_ub, h)
    asc.en_que(c, GRAD_SCALES_QUE, grad_scales_ub)
    asc.free_tensor(c, EXPANDED_X_QUE, expanded_x_ub)
    asc.free_tensor(c, GRAD_Y_QUE, grad_y_ub)
    # CopyOutGradExpandedX
    grad_expanded_x_ub = asc.de_que(c, GRAD_EXPANDED_X_QUE, T)
    copy_out(c, asc.gm_at(gm.grad_expanded_x, np.int64(row) * h), grad_expanded_x_ub, h)
    asc.free_tensor(c, GRAD_EXPANDED_X_QUE, grad_expanded_x_ub)


@aicore
def _copy_out_grad_scales(c, gm, s_t, batch):
    """CopyOutGradScales(batchIdx): one S to grad_scales[batch]."""
    grad_scales_ub = asc.de_que(c, GRAD_SCALES_QUE, asc.ub_u16(c))
    if s_t == DT_FLOAT:
        copy_out(c, asc.gm_at(gm.grad_scales_f32, batch), asc.view_as(c, grad_scales_ub, asc.ub_f32(c)), 1)
    else:
        copy_out(c, asc.gm_at(gm.grad_scales_u16, batch), grad_scales_ub, 1)
    asc.free_tensor(c, GRAD_SCALES_QUE, grad_scales_ub)


@global_aicore
def not_cut_h_process(c, td, gm, tmpl):
    """Process()."""
    first, end = compute_rows(c, td)
    if end == 0 or first >= end:
        return
    for batch in range(first, end):
        row = asc.get_value(c, gm.expanded_row_idx, batch)
        if valid_row(row, td):
            _process_valid_row(c, td, gm, tmpl, batch, row)
        else:
            # ComputeOneRowWithInvalidRowIdx without bias: Duplicate(gradScalesUb, (S)0, 1)
            grad_scales_ub = asc.alloc_tensor(c, GRAD_SCALES_QUE, asc.ub_u16(c))
            if tmpl.s_t == DT_FLOAT:
                asc.duplicate(c, asc.view_as(c, grad_scales_ub, asc.ub_f32(c)), 0.0, 1)
            else:
                asc.duplicate(c, grad_scales_ub, 0, 1)
            asc.en_que(c, GRAD_SCALES_QUE, grad_scales_ub)
        _copy_out_grad_scales(c, gm, tmpl.s_t, batch)
