"""MoeInitRoutingV3's MXFP4 quantising gather on Ascend 950: MoeV3GatherMxfp4Quant<T, fp4x2_e2m1_t>, the last
phase (gatherPipe) of the sort templates 10100000 / 11100000 (quant_mode 9; rowIdxType 0).

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_gather_mxfp4_quant.h (constants from
arch35/moe_v3_common.h; the launch in op_kernel/moe_init_routing_v3_apt.cpp) @ 25fb6b92890d

Unlike the MXFP8 class it has one copy path, CopyExpandedXandMXQuant (one quantisation per output row, its
source token read through expandedDstToSrcRow in the workspace, for GATHER row ids), one buffer per queue, and
reads the expert total count without a DataCacheCleanAndInvalid. Its Process does not FreeTensor the row indices it
dequeues: with a one-buffer queue a core's second row loop then finds no free buffer (the model raises the queue error
the chip would hang on).

VFs (register model): vf_compute_amax with the exponent mask (vfMxfp4ComputeMaxExp), vf_compute_scale with the
E2M1 lower bound 0x0100 (vfMxfp4ComputeScale) -- both shared with the MXFP8 floor rule in gather_mxfp8_quant --
and vf_mxfp4_compute_data (vfMxfp4ComputeData): bf16 tokens are multiplied by the inverse scale in bf16 and cast to
E2M1 directly; fp16 tokens are multiplied in fp32, rounded onto the E2M1 grid in fp32 (ComputeFP4FromHalf: scale
by 2^-e, Truncate RINT, scale back, negative results that became 0 are -0), cast to bf16, packed and re-interleaved,
then cast to E2M1. Output: cols / 2 bytes a row, element 2i in the low nibble.

The scale rule is master's for MXFP4: the floor rule on the block's largest bf16 exponent field (E2M1 bound 0x0100;
the round-scale rule of the MXFP8 class is not used here). Stages take (c, td, gm, tmpl) as the MXFP8 gather's
(GatherMxGm, MxTemplate with quant_mode 9; round_scale is ignored).
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import PipePhase
from ascend_sim import regbase as rb
from ascend_sim.kernel_api import aicore, global_aicore, outline

from .gather_mxfp8_quant import (
    B16,
    B32,
    BF16_EMASK_AND_INF_VAL,
    BUFFERS,
    INV_SCALE_BUFFER,
    LOWER_BOUND_OF_MAX_EXP_FOR_E2M1,
    MAX_EXP_BUFFER,
    MX_SCALE_OUT_QUEUE,
    NUM_UB_BLOCKS_PER_VREG,
    ROW_IDX_SCATTER,
    SORTED_ROW_IDX_IN_QUEUE,
    VL_B16,
    X_IN_QUEUE,
    X_QUANT_OUT_QUEUE,
    MxCoreSplit,
    align_elems,
    ceil_div,
    copy_in,
    copy_in_indices,
    vf_compute_amax,
    vf_compute_scale,
)

NEG_ZERO = -2147483648             # int32 0x80000000: fp32 -0
FP32_EMASK_AND_INF_VAL = 0x7F800000
FP32_EXP_SHR_BITS = 23
FP32_BIAS = 127
FP32_BIAS_NEG = -127
NEG_ONE = -1


@aicore
def _fp4_from_half(c, v_idx, mask_all_32):
    """ComputeFP4FromHalf on fp32 register v_idx, in place: each lane rounded half to even onto the E2M1 grid of
    its binade (spacing 2^(max(e, 0) - 1) for a value of exponent e), a negative lane that rounds to 0, and -0,
    end as -0. Uses registers 14..17 and masks 5..7."""
    v = rb.vreg_f32(c, v_idx)
    v_i = rb.vreg_i32(c, v_idx)
    neg_zero = rb.vreg_i32(c, 14)
    max_exp = rb.vreg_i32(c, 15)
    exp0 = rb.vreg_i32(c, 16)
    exp1 = rb.vreg_i32(c, 17)
    zero_mask = rb.mreg(c, 5)
    special_mask = rb.mreg(c, 6)
    neg_inf_mask = rb.mreg(c, 7)
    rb.create_mask(c, mask_all_32, B32, rb.PAT_ALL)
    rb.vduplicate_all(c, neg_zero, np.int32(NEG_ZERO))
    rb.vcompare(c, neg_inf_mask, v_i, neg_zero, rb.CMP_EQ, mask_all_32)
    rb.vduplicate_all(c, max_exp, np.int32(FP32_EMASK_AND_INF_VAL))
    rb.vand(c, exp0, v_i, max_exp, mask_all_32)
    rb.vshift_rights(c, exp0, exp0, FP32_EXP_SHR_BITS, mask_all_32)
    rb.vadds(c, exp0, exp0, np.int32(FP32_BIAS_NEG), mask_all_32)
    rb.vmaxs(c, exp0, exp0, np.int32(0), mask_all_32)
    rb.vadds(c, exp0, exp0, np.int32(NEG_ONE), mask_all_32)
    rb.vmuls(c, exp1, exp0, np.int32(NEG_ONE), mask_all_32)
    rb.vadds(c, exp1, exp1, np.int32(FP32_BIAS), mask_all_32)
    rb.vshift_lefts(c, exp1, exp1, FP32_EXP_SHR_BITS, mask_all_32)
    rb.vmul(c, v, v, rb.vreg_f32(c, 17), mask_all_32)           # v * 2^-e'
    rb.vadds(c, exp0, exp0, np.int32(FP32_BIAS), mask_all_32)
    rb.vshift_lefts(c, exp0, exp0, FP32_EXP_SHR_BITS, mask_all_32)
    rb.vcompare_scalar(c, special_mask, v, np.float32(0.0), rb.CMP_LT, mask_all_32)
    rb.vtruncate(c, v, v, asc.CAST_RINT, mask_all_32)
    rb.vmul(c, v, v, rb.vreg_f32(c, 16), mask_all_32)           # back by 2^e'
    rb.vcompare_scalar(c, zero_mask, v, np.float32(0.0), rb.CMP_EQ, mask_all_32)
    rb.vmask_and(c, zero_mask, special_mask, zero_mask, mask_all_32)
    rb.vmask_or(c, zero_mask, neg_inf_mask, zero_mask, mask_all_32)
    rb.vselect(c, v_i, neg_zero, v_i, zero_mask)


@outline
def vf_mxfp4_compute_data(c, x_local, inv_scale_local, x_quant_local, x_elem_num, vf_loop_num, vl_for_t,
                          num_vreg_blocks, is_fp16):
    """vfMxfp4ComputeData<T, fp4x2_e2m1_t>: x_local[:x_elem_num] (uint16) times the inverse scale of its block, to
    E2M1 codes two a byte into x_quant_local (uint8). One UpdateMask<float> a loop of 256 tokens guards both
    64-byte stores (the kernel's: a last loop writes min(rest, 64) bytes of each)."""
    if not rb.vec_scope_begin(c):
        return
    inv_scale = rb.vreg_u16(c, 0)
    half_scale_f32 = rb.vreg_f32(c, 1)
    x0 = rb.vreg_u16(c, 6)
    x1 = rb.vreg_u16(c, 7)
    e0_bf16 = rb.vreg_u16(c, 8)       # vdExp0ZeroBF16
    e0o_bf16 = rb.vreg_u16(c, 9)      # vdExp0OneBF16
    e1_bf16 = rb.vreg_u16(c, 10)      # vdExp1ZeroBF16
    e1o_bf16 = rb.vreg_u16(c, 11)     # vdExp1OneBF16
    q0 = rb.vreg_u8(c, 12)
    q1 = rb.vreg_u8(c, 13)
    mask_quant = rb.mreg(c, 0)
    mask_all_b16 = rb.mreg(c, 1)
    mask_all_b32 = rb.mreg(c, 2)
    mask_all_32 = rb.mreg(c, 3)       # pregAll32 of each ComputeFP4FromHalf
    rb.create_mask(c, mask_all_b16, B16, rb.PAT_ALL)
    rb.create_mask(c, mask_all_b32, B32, rb.PAT_ALL)
    remaining = x_elem_num
    x_off = 0
    inv_off = 0
    out_off = 0
    for _ in range(vf_loop_num):
        remaining = rb.update_mask(c, mask_quant, B32, remaining)
        x_off = rb.reg_load_dintlv(c, x0, x1, x_local, x_off)
        inv_off = rb.reg_load_e2b(c, inv_scale, inv_scale_local, inv_off)
        if is_fp16:
            rb.vcast_b16_to_f32(c, half_scale_f32, inv_scale, True, rb.LAYOUT_ZERO, mask_all_b16)
            # x0: even / odd halves to fp32, scaled, rounded onto the E2M1 grid, to bf16, packed, re-interleaved
            rb.vcast_b16_to_f32(c, rb.vreg_f32(c, 2), x0, False, rb.LAYOUT_ZERO, mask_all_b16)
            rb.vcast_b16_to_f32(c, rb.vreg_f32(c, 3), x0, False, rb.LAYOUT_ONE, mask_all_b16)
            rb.vmul(c, rb.vreg_f32(c, 2), rb.vreg_f32(c, 2), half_scale_f32, mask_all_b32)
            rb.vmul(c, rb.vreg_f32(c, 3), rb.vreg_f32(c, 3), half_scale_f32, mask_all_b32)
            _fp4_from_half(c, 2, mask_all_32)
            _fp4_from_half(c, 3, mask_all_32)
            rb.vcast_f32_to_bf16(c, e0_bf16, rb.vreg_f32(c, 2), asc.CAST_RINT, rb.LAYOUT_ZERO, mask_all_b32)
            rb.vcast_f32_to_bf16(c, e0o_bf16, rb.vreg_f32(c, 3), asc.CAST_RINT, rb.LAYOUT_ZERO, mask_all_b32)
            rb.vpack_lowest(c, e0_bf16, rb.vreg_u32(c, 8))
            rb.vpack_lowest(c, e0o_bf16, rb.vreg_u32(c, 9))
            rb.vinterleave_inplace(c, e0_bf16, e0o_bf16)
            # x1 the same way
            rb.vcast_b16_to_f32(c, rb.vreg_f32(c, 4), x1, False, rb.LAYOUT_ZERO, mask_all_b16)
            rb.vcast_b16_to_f32(c, rb.vreg_f32(c, 5), x1, False, rb.LAYOUT_ONE, mask_all_b16)
            rb.vmul(c, rb.vreg_f32(c, 4), rb.vreg_f32(c, 4), half_scale_f32, mask_all_b32)
            rb.vmul(c, rb.vreg_f32(c, 5), rb.vreg_f32(c, 5), half_scale_f32, mask_all_b32)
            _fp4_from_half(c, 4, mask_all_32)
            _fp4_from_half(c, 5, mask_all_32)
            rb.vcast_f32_to_bf16(c, e1_bf16, rb.vreg_f32(c, 4), asc.CAST_RINT, rb.LAYOUT_ZERO, mask_all_b32)
            rb.vcast_f32_to_bf16(c, e1o_bf16, rb.vreg_f32(c, 5), asc.CAST_RINT, rb.LAYOUT_ZERO, mask_all_b32)
            rb.vpack_lowest(c, e1_bf16, rb.vreg_u32(c, 10))
            rb.vpack_lowest(c, e1o_bf16, rb.vreg_u32(c, 11))
            rb.vinterleave_inplace(c, e1_bf16, e1o_bf16)
            # tokens in order: 0-127 in vdExp0ZeroBF16, 128-255 in vdExp1ZeroBF16
            rb.vinterleave_inplace(c, e0_bf16, e1_bf16)
            rb.vcast_bf16_to_fp4(c, q0, e0_bf16, asc.CAST_RINT, mask_all_b16)
            rb.vcast_bf16_to_fp4(c, q1, e1_bf16, asc.CAST_RINT, mask_all_b16)
        else:
            rb.vmul_bf16(c, x0, x0, inv_scale, mask_all_b16)
            rb.vmul_bf16(c, x1, x1, inv_scale, mask_all_b16)
            rb.vinterleave_inplace(c, x0, x1)
            rb.vcast_bf16_to_fp4(c, q0, x0, asc.CAST_RINT, mask_all_b16)
            rb.vcast_bf16_to_fp4(c, q1, x1, asc.CAST_RINT, mask_all_b16)
        out_off = rb.reg_store_pack4_span(c, x_quant_local, rb.vreg_u32(c, 12), out_off, mask_quant)
        out_off = rb.reg_store_pack4_span(c, x_quant_local, rb.vreg_u32(c, 13), out_off, mask_quant)
    rb.vec_scope_end(c)


@aicore
def compute(c, tmpl, x_elem_num, scale_elem_num, valid_scale_elem_num):
    """Compute: max exponents, scales, data (the three VFs), into xQuantOutQueue / mxScaleOutQueue."""
    U16 = asc.ub_u16(c)
    x_local = asc.de_que(c, X_IN_QUEUE, U16)
    x_quant_local = asc.alloc_tensor(c, X_QUANT_OUT_QUEUE, asc.ub_u8(c))
    mx_scale_local = asc.alloc_tensor(c, MX_SCALE_OUT_QUEUE, U16)
    max_exp_local = asc.tbuf_get(c, MAX_EXP_BUFFER, U16)
    inv_scale_local = asc.tbuf_get(c, INV_SCALE_BUFFER, U16)
    vf_loop_num_x = (x_elem_num + VL_B16 * 2 - 1) // (VL_B16 * 2)
    vf_loop_num_scale = (scale_elem_num + VL_B16 - 1) // VL_B16
    is_fp16 = tmpl.x_t == asc.DT_FLOAT16
    vf_compute_amax(c, x_local, max_exp_local, x_elem_num, vf_loop_num_x, VL_B16, NUM_UB_BLOCKS_PER_VREG, is_fp16,
                    BF16_EMASK_AND_INF_VAL)
    vf_compute_scale(c, max_exp_local, mx_scale_local, inv_scale_local, scale_elem_num, valid_scale_elem_num,
                     vf_loop_num_scale, VL_B16, LOWER_BOUND_OF_MAX_EXP_FOR_E2M1)
    vf_mxfp4_compute_data(c, x_local, inv_scale_local, x_quant_local, x_elem_num, vf_loop_num_x, VL_B16,
                          NUM_UB_BLOCKS_PER_VREG, is_fp16)
    asc.free_tensor(c, X_IN_QUEUE, x_local)
    asc.en_que(c, X_QUANT_OUT_QUEUE, x_quant_local)
    asc.en_que(c, MX_SCALE_OUT_QUEUE, mx_scale_local)


@aicore
def copy_out(c, td, gm, dst_row, col_idx, loop_cols, loop_scale_cols, per_loop_cols, per_loop_scale_cols,
             scale_cols):
    """CopyOut: loop_cols / 2 code bytes and the piece's scales to output row dst_row."""
    U8 = asc.ub_u8(c)
    mx_scale_local = asc.de_que(c, MX_SCALE_OUT_QUEUE, U8)
    out_local = asc.de_que(c, X_QUANT_OUT_QUEUE, U8)
    asc.data_copy_pad(c, asc.gm_at(gm.expanded_x, (dst_row * td.cols + col_idx * per_loop_cols) // 2), out_local,
                      asc.DataCopyExtParams(1, loop_cols // 2, 0, 0))
    asc.data_copy_pad(c, asc.gm_at(gm.expanded_scale, dst_row * scale_cols + col_idx * per_loop_scale_cols),
                      mx_scale_local, asc.DataCopyExtParams(1, loop_scale_cols, 0, 0))
    asc.free_tensor(c, X_QUANT_OUT_QUEUE, out_local)
    asc.free_tensor(c, MX_SCALE_OUT_QUEUE, mx_scale_local)


@aicore
def init_kernel_tiling(c, td, gm):
    """InitKernelTiling: the core split of the expert total count (a plain scalar GM read: no cache invalidation
    here) and the column pieces; the same MxCoreSplit as gather_mxfp8_quant.init_kernel_tiling."""
    valid_scale_cols = (td.cols + 31) // 32
    scale_cols = (valid_scale_cols + 1) // 2 * 2
    a = align_elems(td.n * td.k, 4)
    total = np.int64(asc.get_value(c, asc.gm_at(gm.workspace, 2 * a + align_elems(td.actual_expert_num, 4)), 0))
    per_core_row = ceil_div(total, td.core_num)
    need_core_num = ceil_div(total, per_core_row)
    last_core_indices = total - (need_core_num - 1) * per_core_row
    if c.block_idx == need_core_num - 1:
        core_rows = last_core_indices
        origin_per_loop = td.gather_out_last_core_per_loop_indices_elements
    else:
        core_rows = per_core_row
        origin_per_loop = td.gather_out_per_core_per_loop_indices_elements
    per_loop_rows = min(core_rows, origin_per_loop)
    row_loops = ceil_div(core_rows, per_loop_rows)
    last_loop_rows = core_rows - (row_loops - 1) * per_loop_rows
    per_loop_cols = td.gather_out_per_loop_cols
    col_loops = td.gather_out_cols_loops
    per_loop_scale_cols = per_loop_cols // 32
    return MxCoreSplit(need_core_num, per_core_row, per_loop_rows, last_loop_rows, row_loops, per_loop_cols,
                       td.gather_out_last_loop_cols, col_loops, per_loop_scale_cols,
                       valid_scale_cols - (col_loops - 1) * per_loop_scale_cols,
                       scale_cols - (col_loops - 1) * per_loop_scale_cols, scale_cols)


@aicore
def copy_expanded_x_and_mx_quant(c, td, gm, tmpl, m, progress, current_loop_rows):
    """CopyExpandedXandMXQuant: each output row of the loop, piece by piece (the row indices are not freed)."""
    indices_local = asc.de_que(c, SORTED_ROW_IDX_IN_QUEUE, asc.ub_i32(c))
    asc.sync_pipes(c, asc.MTE2_S)
    for index in range(current_loop_rows):
        src_idx = np.int64(asc.get_value(c, indices_local, index))
        dst_idx = m.per_core_row * c.block_idx + m.per_loop_rows * progress + index
        for j in range(m.col_loops):
            last = j == m.col_loops - 1
            loop_cols = m.last_loop_cols if last else m.per_loop_cols
            loop_scale_cols = m.last_loop_scale_cols if last else m.per_loop_scale_cols
            loop_valid = m.last_loop_valid_scale_cols if last else m.per_loop_scale_cols
            copy_in(c, td, gm, src_idx // td.k, j, loop_cols, m.per_loop_cols)
            compute(c, tmpl, loop_cols, loop_scale_cols, loop_valid)
            copy_out(c, td, gm, dst_idx, j, loop_cols, loop_scale_cols, m.per_loop_cols, m.per_loop_scale_cols,
                     m.scale_cols)


@global_aicore
def gather_mxfp4_quant(c, td, gm, tmpl):
    """MoeV3GatherMxfp4Quant<T, fp4x2_e2m1_t>::Init + Process on one core."""
    m = init_kernel_tiling(c, td, gm)
    if td.row_idx_type == ROW_IDX_SCATTER:
        rows_gm = asc.gm_at(gm.expanded_row_idx, m.per_core_row * c.block_idx)
    else:
        rows_gm = asc.gm_at(gm.workspace, align_elems(td.n * td.k, 4) + m.per_core_row * c.block_idx)
    if c.block_idx >= m.need_core_num:
        return
    for loop in range(m.row_loops):
        rows = m.last_loop_rows if loop == m.row_loops - 1 else m.per_loop_rows
        copy_in_indices(c, rows_gm, loop, m.per_loop_rows, rows)
        copy_expanded_x_and_mx_quant(c, td, gm, tmpl, m, loop, rows)


def mxfp4_gather_phase(select=None) -> PipePhase:
    """The gatherPipe phase of keys 10100000 / 11100000; `select(*launch_args)` returns (td, GatherMxGm,
    MxTemplate) (default: the launch args are those three)."""
    return PipePhase("gatherPipe", BUFFERS, (gather_mxfp4_quant,), select)
