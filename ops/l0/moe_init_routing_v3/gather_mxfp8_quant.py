"""MoeInitRoutingV3's MXFP8 quantising gather on Ascend 950: MoeGatherOutMxfp8Quant<T, U, CLAMP_AMAX>, the last
phase (gatherPipe) of the sort templates 10030000 / 11030000 (quant_mode 2 = E5M2, 3 = E4M3FN, CLAMP_AMAX false)
and 10170000 / 11170000 (quant_mode 16 / 17, CLAMP_AMAX true).

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_gather_mxfp8_quant.h (constants and helpers from
arch35/moe_v3_common.h; the launch in op_kernel/moe_init_routing_v3_apt.cpp) @ 25fb6b92890d

With GATHER row indices (rowIdxType 0, the only type the simulated keys take) the cores split all n * k source
slots (no expert total count is read) and walk expanded_row_idx, which RowIdxGather finished before its SyncAll:
each loop's slots are grouped by token (slot / k); every token the loop touches is read and quantised once per
column piece, then copied to the output row of each of its slots whose index is not -1 (a token whose slots
were all dropped is still read and quantised, and nothing is written). A row moves in column pieces of
perLoopCols (a multiple of 32); each piece is quantised by three VFs on the register model (regbase):

* vf_compute_amax (vfComputeAmax): per 32-element block the largest bf16 magnitude (fp16 truncated to bf16
  first, its Inf / NaN as bf16 Inf), written through an unaligned store stream into maxExpBuffer;
* vf_compute_round_scale (vfComputeRoundScale): the E8M0 code from the bf16 bits of amax -- exponent field minus
  the FP8 emax, plus one when the 7-bit mantissa is above 0x60 (1.75), 1 when the exponent field is at most emax,
  0xFF for Inf / NaN, 0 for a zero block -- and the inverse scale 2^(127 - code) as bf16 bits;
* vf_compute_data (vfComputeData): x * inverse scale (bf16 multiply for bf16 tokens, fp32 for fp16), cast to
  FP8 with CAST_RINT and SAT into the low byte of each fp32 lane, stored one byte a token (DIST_PACK4_B32).

The class's ScatterCopyExpandedXandMXQuant runs only for rowIdxType SCATTER (keys 10031000 / 11031000), which
the simulator does not launch; it is not modelled.

Scale rule (MxTemplate.round_scale): 1 (the default) is the kernel's round-scale rule above, the only rule the
master kernel has. 0 is a simulator option master does not do: the OCP MX v1.0 "floor" rule (floor(log2 amax) -
emax), run with the two VFs of the MXFP4 gather (vf_compute_amax keeping only the exponent field,
vf_compute_scale) with the FP8 lower bound.

Stages take (c, td, gm, tmpl): td a TilingData (the namedtuple of tiling.moe_init_routing_v3.FIELDS), gm a
GatherMxGm, tmpl a MxTemplate. Every field of the three is an int or an array of one carrier type, so one
compiled stage serves fp16 / bf16 tokens, E5M2 / E4M3FN and both rules.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim import PipePhase
from ascend_sim import regbase as rb
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore, outline

from .tiling_data import MoeInitRoutingV3Arch35TilingData as TilingData  # noqa: F401  (the stages' td class)

GatherMxGm = namedtuple("GatherMxGm", [
    "x",                  # (n, cols) tokens as uint16 bit patterns of fp16 / bf16
    "expanded_row_idx",   # (n * k) int32: output row of each source slot (-1: dropped), GATHER rowIdxType
    "expanded_x",         # uint8 element codes: cols bytes a row (FP8), cols / 2 (FP4, element 2i in the low nibble)
    "expanded_scale",     # uint8 E8M0 codes: scaleCols = CeilAlign(ceil(cols / 32), 2) bytes a row
    "workspace",          # int32: sortedExpertIdx [0, A), expandedDstToSrcRow [A, 2A), expert counts, total count
])
"""A = n * k rounded up to 8 (Align(n * k, sizeof(int32_t)))."""

MxTemplate = namedtuple("MxTemplate", ["x_t", "quant_mode", "round_scale"])
"""x_t: DTYPE_X (asc.DT_FLOAT16 or asc.DT_BF16); quant_mode: 2 (U = fp8_e5m2), 3 (fp8_e4m3fn) or 9 (fp4x2_e2m1);
16 / 17 are E5M2 / E4M3FN with CLAMP_AMAX = true (amax raised to 0x38D2 first; keys 10170000 / 11170000);
round_scale: MXFP8 scale rule, 1 the kernel's round-scale rule (the default, master's only rule), 0 the OCP
floor rule (a simulator option master does not do); the MXFP4 gather ignores it (its floor rule is master's)."""

ROUND_SCALE = 1
FLOOR = 0

# buffers in Init's InitBuffer order:
#   TQue<VECIN, 2> sortedRowIdxInQueue_: AlignBytes(perLoopRows, 4)
#   TQue<VECIN, 2> xInQueue_: AlignBytes(perLoopCols, sizeof(T))
#   TQue<VECOUT, 2> xQuantOutQueue_: AlignBytes(perLoopCols / 4, 1) * 4
#   TQue<VECOUT, 2> mxScaleOutQueue_: AlignBytes(perLoopScaleCols, 1)
#   TBuf maxExpBuffer_, TBuf invScaleBuffer_: AlignBytes(perLoopScaleCols, sizeof(T)) each
BUFFERS = ("sortedRowIdxInQueue", "xInQueue", "xQuantOutQueue", "mxScaleOutQueue", "maxExpBuffer", "invScaleBuffer")
SORTED_ROW_IDX_IN_QUEUE, X_IN_QUEUE, X_QUANT_OUT_QUEUE, MX_SCALE_OUT_QUEUE, MAX_EXP_BUFFER, INV_SCALE_BUFFER = \
    asc.buffer_ids(BUFFERS, *BUFFERS)
GATHER_OUT_BUFFER_NUM = 2

MX_BLOCK_SIZE = 32
VREG_BYTES = 256              # Ops::Base::GetVRegSize()
VL_B16 = VREG_BYTES // 2      # vlForB16_: 16-bit lanes of a register
NUM_UB_BLOCKS_PER_VREG = VREG_BYTES // BLOCK_BYTES   # 8: results of ReduceMaxWithDataBlock
NUM_ELEM_PER_UB_BLOCK = BLOCK_BYTES // 2             # 16 tokens in a 32-byte block
OUT_ELE_NUM_ONE_BLK = 64      # FP8 / FP4 bytes one PACK4_B32 store writes

# bit patterns (uint16 unless noted)
FP16_EMASK_AND_INF_VAL = 0x7C00
BF16_EMASK_AND_INF_VAL = 0x7F80
BF16_NAN_VAL = 0x7F81
MXFP8_BF16_ABS_MASK = 0x7FFF
MXFP8_BF16_AMAX_CLAMP = 0x38D2     # bf16 ~1.0e-4: the smallest amax of the CLAMP_AMAX variant
MXFP8_BF16_MANT_MASK = 0x007F
MXFP8_FP8_MAX_MANT = 0x0060        # 7-bit mantissa of 1.75, the FP8 max normal's
MXFP8_E8M0_INV_EXP_SUB = 0x00FE
MXFP8_E5M2_EMAX = 15
MXFP8_E4M3_EMAX = 8
FP8_E8M0_NAN_VAL = 0x00FF
FP8_E8M0_SPECIAL_MIN = 0x0040      # bf16 2^-127: the inverse scale whose exponent field would be 0
BF16_EXP_SHR_BITS = 7
BF16_EXP_INVSUB = 0x7F00           # bf16 exponent field of 2^127: inverse = 0x7F00 - (code << 7)
LOWER_BOUND_OF_MAX_EXP_FOR_E5M2 = 0x0780
LOWER_BOUND_OF_MAX_EXP_FOR_E4M3 = 0x0400
LOWER_BOUND_OF_MAX_EXP_FOR_E2M1 = 0x0100

ROW_IDX_SCATTER = 1                # rowIdxType SCATTER (the MXFP4 gather reads expanded_row_idx then)
MXFP8_ROUNDSCALE_AMAX_E5M2 = 16    # quant modes 16 / 17: the CLAMP_AMAX = true class (keys 10170000 / 11170000)

B16 = 2
B32 = 4


@aicore
def ceil_div(a, b):
    """Ceil(a, b) of the kernels; 0 for b == 0 (no rows: perCoreRow_ is 0, no core takes any)."""
    if b == 0:
        return 0
    return (a + b - 1) // b


@aicore
def align_elems(n, elem_bytes):
    """Align(n, bytes): n elements rounded up to a whole 32-byte block."""
    per = BLOCK_BYTES // elem_bytes
    return (n + per - 1) // per * per


@aicore
def fp8_dt(quant_mode):
    return asc.DT_FLOAT8_E5M2 if quant_mode == 2 or quant_mode == 16 else asc.DT_FLOAT8_E4M3FN


# --- VFs (__simd_vf__) ------------------------------------------------------------------------------------
# Outlined (compiled once, called by address): both classes and every call site share one compiled copy.
@outline
def vf_compute_amax(c, x_local, amax_local, x_elem_num, vf_loop_num, vl_for_t, num_vreg_blocks, is_fp16, keep):
    """vfComputeAmax<T, U, false> (keep = MXFP8_BF16_ABS_MASK) / vfMxfp4ComputeMaxExp (keep =
    BF16_EMASK_AND_INF_VAL, the exponent field only): per 32 tokens of x_local[:x_elem_num] (uint16) the largest
    bf16 pattern & keep, num_vreg_blocks results per 2 * vl_for_t tokens, to amax_local (uint16) through an
    unaligned store stream. Masked lanes count as 0."""
    if not rb.vec_scope_begin(c):
        return
    x0 = rb.vreg_u16(c, 0)            # even tokens of the double load
    x1 = rb.vreg_u16(c, 1)            # odd tokens
    x0_bf16 = rb.vreg_u16(c, 2)
    x1_bf16 = rb.vreg_u16(c, 3)
    abs0 = rb.vreg_u16(c, 4)
    abs1 = rb.vreg_u16(c, 5)
    exp0_fp16 = rb.vreg_u16(c, 6)
    exp1_fp16 = rb.vreg_u16(c, 7)
    amax = rb.vreg_u16(c, 8)
    emask_fp16 = rb.vreg_u16(c, 9)
    emask_bf16 = rb.vreg_u16(c, 10)
    keep_mask = rb.vreg_u16(c, 11)
    rb.vduplicate_all(c, emask_fp16, FP16_EMASK_AND_INF_VAL)
    rb.vduplicate_all(c, emask_bf16, BF16_EMASK_AND_INF_VAL)
    rb.vduplicate_all(c, keep_mask, keep)
    mask_all_b16 = rb.mreg(c, 0)
    rb.create_mask(c, mask_all_b16, B16, rb.PAT_ALL)
    mask0 = rb.mreg(c, 1)
    mask1 = rb.mreg(c, 2)
    mask0_nan_inf = rb.mreg(c, 3)
    mask1_nan_inf = rb.mreg(c, 4)
    u = rb.unalign_reg(c, 0)
    remaining = x_elem_num
    x_off = 0
    out_off = 0
    for _ in range(vf_loop_num):
        remaining = rb.update_mask(c, mask0, B16, remaining)
        remaining = rb.update_mask(c, mask1, B16, remaining)
        rb.vmask_deinterleave(c, mask0, mask1, mask0, mask1, B16)     # MaskDeInterleave<T>
        x_off = rb.reg_load_dintlv(c, x0, x1, x_local, x_off)        # DataCopy<T, POST_MODE_UPDATE, DIST_DINTLV_B16>
        if is_fp16:
            # Inf / NaN are found on the fp16 exponent: truncation to bf16 keeps neither reliably
            rb.vand(c, exp0_fp16, x0, emask_fp16, mask0)
            rb.vand(c, exp1_fp16, x1, emask_fp16, mask1)
            rb.vcompare(c, mask0_nan_inf, exp0_fp16, emask_fp16, rb.CMP_EQ, mask0)
            rb.vcompare(c, mask1_nan_inf, exp1_fp16, emask_fp16, rb.CMP_EQ, mask1)
            rb.vcast_f16_to_bf16(c, x0_bf16, x0, asc.CAST_TRUNC, mask0)
            rb.vcast_f16_to_bf16(c, x1_bf16, x1, asc.CAST_TRUNC, mask1)
            rb.vand(c, abs0, x0_bf16, keep_mask, mask0)
            rb.vand(c, abs1, x1_bf16, keep_mask, mask1)
            rb.vselect(c, abs0, emask_bf16, abs0, mask0_nan_inf)
            rb.vselect(c, abs1, emask_bf16, abs1, mask1_nan_inf)
        else:
            rb.vand(c, abs0, x0, keep_mask, mask0)
            rb.vand(c, abs1, x1, keep_mask, mask1)
        # mask0 has the odd token of an odd count: the pairwise max must take it
        rb.vmax(c, amax, abs0, abs1, mask0)
        rb.vreduce_max_with_datablock(c, amax, amax, mask_all_b16)
        out_off = rb.reg_store_unalign_stream(c, amax_local, amax, u, out_off, num_vreg_blocks)
    rb.reg_store_unalign_post(c, amax_local, u, out_off, 0)
    rb.vec_scope_end(c)


@outline
def vf_compute_round_scale(c, amax_local, scale_local, inv_scale_local, scale_elem_num, valid_scale_elem_num,
                           vf_loop_num, vl_for_t, fp8_emax, clamp_amax):
    """vfComputeRoundScale<T, U, CLAMP_AMAX>: from the block maxima (uint16 bf16 magnitudes) the E8M0 codes (one byte
    per lane into scale_local, a uint16 tensor: DIST_PACK_B16) and the inverse scales (bf16 bits into
    inv_scale_local) of scale_elem_num slots, the first valid_scale_elem_num of them real blocks (the padding
    slot of an odd block count gets code 0 and inverse 0)."""
    if not rb.vec_scope_begin(c):
        return
    amax = rb.vreg_u16(c, 0)
    exp_bits = rb.vreg_u16(c, 1)
    mant_bits = rb.vreg_u16(c, 2)
    mant_add = rb.vreg_u16(c, 3)
    rounded_scale = rb.vreg_u16(c, 4)
    mx_scale = rb.vreg_u16(c, 5)
    inv_exp = rb.vreg_u16(c, 6)
    inv_scale = rb.vreg_u16(c, 7)
    inf_bf16 = rb.vreg_u16(c, 8)
    zero_b16 = rb.vreg_u16(c, 9)
    one_b16 = rb.vreg_u16(c, 10)
    fp8_emax_r = rb.vreg_u16(c, 11)
    mant_mask = rb.vreg_u16(c, 12)
    fp8_max_mant = rb.vreg_u16(c, 13)
    amax_clamp = rb.vreg_u16(c, 14)
    nan_e8m0 = rb.vreg_u16(c, 15)
    inv_exp_sub = rb.vreg_u16(c, 16)
    nan_bf16 = rb.vreg_u16(c, 17)
    special_min = rb.vreg_u16(c, 18)
    rb.vduplicate_all(c, inf_bf16, BF16_EMASK_AND_INF_VAL)
    rb.vduplicate_all(c, zero_b16, 0)
    rb.vduplicate_all(c, one_b16, 1)
    rb.vduplicate_all(c, fp8_emax_r, fp8_emax)
    rb.vduplicate_all(c, mant_mask, MXFP8_BF16_MANT_MASK)
    rb.vduplicate_all(c, fp8_max_mant, MXFP8_FP8_MAX_MANT)
    rb.vduplicate_all(c, amax_clamp, MXFP8_BF16_AMAX_CLAMP)
    rb.vduplicate_all(c, nan_e8m0, FP8_E8M0_NAN_VAL)
    rb.vduplicate_all(c, inv_exp_sub, MXFP8_E8M0_INV_EXP_SUB)
    rb.vduplicate_all(c, nan_bf16, BF16_NAN_VAL)
    rb.vduplicate_all(c, special_min, FP8_E8M0_SPECIAL_MIN)
    mask_loop = rb.mreg(c, 0)
    mask_valid = rb.mreg(c, 1)
    mask_inf = rb.mreg(c, 2)
    mask_zero = rb.mreg(c, 3)
    mask_low_exp = rb.mreg(c, 4)
    mask_special_min = rb.mreg(c, 5)
    mask_mant_high = rb.mreg(c, 6)
    mask_clamp = rb.mreg(c, 7)
    slots = scale_elem_num
    valid = valid_scale_elem_num
    in_off = 0
    scale_off = 0
    inv_off = 0
    for _ in range(vf_loop_num):
        slots = rb.update_mask(c, mask_loop, B16, slots)
        valid = rb.update_mask(c, mask_valid, B16, valid)
        in_off = rb.reg_load_span(c, amax, amax_local, in_off)
        rb.vduplicate(c, mx_scale, 0, mask_loop)
        rb.vduplicate(c, inv_scale, 0, mask_loop)
        if clamp_amax:
            rb.vcompare(c, mask_clamp, amax, amax_clamp, rb.CMP_LT, mask_valid)
            rb.vselect(c, amax, amax_clamp, amax, mask_clamp)
        # code = exponent - emax, plus one when the mantissa is above 1.75 (amax / fp8 max would pass 2^e)
        rb.vshift_rights(c, exp_bits, amax, BF16_EXP_SHR_BITS, mask_valid)
        rb.vand(c, mant_bits, amax, mant_mask, mask_valid)
        rb.vcompare(c, mask_mant_high, mant_bits, fp8_max_mant, rb.CMP_GT, mask_valid)
        rb.vselect(c, mant_add, one_b16, zero_b16, mask_mant_high)
        rb.vcompare(c, mask_low_exp, exp_bits, fp8_emax_r, rb.CMP_LE, mask_valid)
        rb.vsub(c, rounded_scale, exp_bits, fp8_emax_r, mask_valid)
        rb.vadd(c, rounded_scale, rounded_scale, mant_add, mask_valid)
        rb.vselect(c, rounded_scale, one_b16, rounded_scale, mask_low_exp)
        rb.vselect(c, mx_scale, rounded_scale, mx_scale, mask_valid)
        rb.vcompare(c, mask_inf, amax, inf_bf16, rb.CMP_GE, mask_valid)
        rb.vselect(c, mx_scale, nan_e8m0, mx_scale, mask_inf)
        rb.vcompare(c, mask_zero, amax, zero_b16, rb.CMP_EQ, mask_valid)
        rb.vselect(c, mx_scale, zero_b16, mx_scale, mask_zero)
        scale_off = rb.reg_store_pack_b16(c, scale_local, mx_scale, scale_off, mask_loop)
        # inverse 2^(127 - code) as a bf16 exponent field
        rb.vsub(c, inv_exp, inv_exp_sub, rounded_scale, mask_valid)
        rb.vshift_lefts(c, inv_scale, inv_exp, BF16_EXP_SHR_BITS, mask_valid)
        rb.vselect(c, inv_scale, nan_bf16, inv_scale, mask_inf)
        rb.vselect(c, inv_scale, zero_b16, inv_scale, mask_zero)
        rb.vcompare(c, mask_special_min, rounded_scale, inv_exp_sub, rb.CMP_EQ, mask_valid)
        rb.vselect(c, inv_scale, special_min, inv_scale, mask_special_min)
        inv_off = rb.reg_store_span(c, inv_scale_local, inv_scale, inv_off, mask_loop)
    rb.vec_scope_end(c)


@outline
def vf_compute_scale(c, max_exp_local, scale_local, inv_scale_local, scale_elem_num, valid_scale_elem_num,
                     vf_loop_num, vl_for_t, exp_lower_bound):
    """vfMxfp4ComputeScale (and the floor rule of MXFP8): from the block maxima of the exponent field the codes
    max(maxExp, bound) - bound >> 7 (0xFF for Inf / NaN) and the inverse scales 0x7F00 - sharedExp (bf16 NaN for
    Inf / NaN blocks); bound = emax << 7 of the element type."""
    if not rb.vec_scope_begin(c):
        return
    max_exp = rb.vreg_u16(c, 0)
    shared_exp = rb.vreg_u16(c, 1)
    mx_scale = rb.vreg_u16(c, 2)
    inv_scale = rb.vreg_u16(c, 3)
    inf_bf16 = rb.vreg_u16(c, 4)
    zero_b16 = rb.vreg_u16(c, 5)
    lower_bound = rb.vreg_u16(c, 6)
    nan_e8m0 = rb.vreg_u16(c, 7)
    inv_sub = rb.vreg_u16(c, 8)
    nan_bf16 = rb.vreg_u16(c, 9)
    special_min = rb.vreg_u16(c, 10)
    rb.vduplicate_all(c, inf_bf16, BF16_EMASK_AND_INF_VAL)
    rb.vduplicate_all(c, zero_b16, 0)
    rb.vduplicate_all(c, lower_bound, exp_lower_bound)
    rb.vduplicate_all(c, nan_e8m0, FP8_E8M0_NAN_VAL)
    rb.vduplicate_all(c, inv_sub, BF16_EXP_INVSUB)
    rb.vduplicate_all(c, nan_bf16, BF16_NAN_VAL)
    rb.vduplicate_all(c, special_min, FP8_E8M0_SPECIAL_MIN)
    mask_loop = rb.mreg(c, 0)
    mask_valid = rb.mreg(c, 1)
    mask_inf = rb.mreg(c, 2)
    mask_zero = rb.mreg(c, 3)
    mask_low_exp = rb.mreg(c, 4)
    mask_special_min = rb.mreg(c, 5)
    slots = scale_elem_num
    valid = valid_scale_elem_num
    in_off = 0
    scale_off = 0
    inv_off = 0
    for _ in range(vf_loop_num):
        slots = rb.update_mask(c, mask_loop, B16, slots)
        valid = rb.update_mask(c, mask_valid, B16, valid)
        in_off = rb.reg_load_span(c, max_exp, max_exp_local, in_off)
        rb.vcompare(c, mask_low_exp, max_exp, lower_bound, rb.CMP_LT, mask_valid)
        rb.vselect(c, max_exp, lower_bound, max_exp, mask_low_exp)
        rb.vsub(c, shared_exp, max_exp, lower_bound, mask_valid)
        rb.vshift_rights(c, mx_scale, shared_exp, BF16_EXP_SHR_BITS, mask_valid)
        rb.vcompare(c, mask_inf, max_exp, inf_bf16, rb.CMP_EQ, mask_valid)
        rb.vselect(c, mx_scale, nan_e8m0, mx_scale, mask_inf)
        rb.vcompare(c, mask_zero, max_exp, zero_b16, rb.CMP_EQ, mask_valid)
        rb.vselect(c, mx_scale, zero_b16, mx_scale, mask_zero)
        scale_off = rb.reg_store_pack_b16(c, scale_local, mx_scale, scale_off, mask_loop)
        rb.vsub(c, inv_scale, inv_sub, shared_exp, mask_valid)
        rb.vselect(c, inv_scale, nan_bf16, inv_scale, mask_inf)
        rb.vselect(c, inv_scale, zero_b16, inv_scale, mask_zero)
        rb.vcompare(c, mask_special_min, inv_sub, shared_exp, rb.CMP_EQ, mask_valid)
        rb.vselect(c, inv_scale, special_min, inv_scale, mask_special_min)
        inv_off = rb.reg_store_span(c, inv_scale_local, inv_scale, inv_off, mask_loop)
    rb.vec_scope_end(c)


@outline
def vf_compute_data(c, x_local, inv_scale_local, x_quant_local, x_elem_num, vf_loop_num, vl_for_t,
                    num_vreg_blocks, is_fp16, dt):
    """vfComputeData<T, U>: x_local[:x_elem_num] (uint16) times the inverse scale of its block, cast to FP8 `dt`
    (CAST_RINT, SAT), one byte a token into x_quant_local (uint8). bf16 tokens multiply in bf16 (exact: a power
    of two), fp16 tokens in fp32."""
    if not rb.vec_scope_begin(c):
        return
    inv_scale = rb.vreg_u16(c, 0)
    inv_scale_f32 = rb.vreg_f32(c, 1)
    x0 = rb.vreg_u16(c, 2)
    x1 = rb.vreg_u16(c, 3)
    x0_l0 = rb.vreg_f32(c, 4)
    x0_l1 = rb.vreg_f32(c, 5)
    x1_l0 = rb.vreg_f32(c, 6)
    x1_l1 = rb.vreg_f32(c, 7)
    q0 = rb.vreg_u8(c, 8)
    q1 = rb.vreg_u8(c, 9)
    q2 = rb.vreg_u8(c, 10)
    q3 = rb.vreg_u8(c, 11)
    m_q0 = rb.mreg(c, 0)
    m_q1 = rb.mreg(c, 1)
    m_q2 = rb.mreg(c, 2)
    m_q3 = rb.mreg(c, 3)
    mask_all_b16 = rb.mreg(c, 4)
    mask_all_b32 = rb.mreg(c, 5)
    rb.create_mask(c, mask_all_b16, B16, rb.PAT_ALL)
    rb.create_mask(c, mask_all_b32, B32, rb.PAT_ALL)
    remaining = x_elem_num
    x_off = 0
    inv_off = 0
    out_off = 0
    for _ in range(vf_loop_num):
        remaining = rb.update_mask(c, m_q0, B32, remaining)
        remaining = rb.update_mask(c, m_q1, B32, remaining)
        remaining = rb.update_mask(c, m_q2, B32, remaining)
        remaining = rb.update_mask(c, m_q3, B32, remaining)
        x_off = rb.reg_load_dintlv(c, x0, x1, x_local, x_off)
        # one inverse scale per 32-byte block: 16 lanes of x0 / x1 = 32 tokens
        inv_off = rb.reg_load_e2b(c, inv_scale, inv_scale_local, inv_off)
        if is_fp16:
            rb.vcast_b16_to_f32(c, inv_scale_f32, inv_scale, True, rb.LAYOUT_ZERO, mask_all_b16)
            rb.vcast_b16_to_f32(c, x0_l0, x0, False, rb.LAYOUT_ZERO, mask_all_b16)
            rb.vcast_b16_to_f32(c, x0_l1, x0, False, rb.LAYOUT_ONE, mask_all_b16)
            rb.vmul(c, x0_l0, x0_l0, inv_scale_f32, mask_all_b32)
            rb.vmul(c, x0_l1, x0_l1, inv_scale_f32, mask_all_b32)
            rb.vinterleave_inplace(c, x0_l0, x0_l1)
            rb.vcast_b16_to_f32(c, x1_l0, x1, False, rb.LAYOUT_ZERO, mask_all_b16)
            rb.vcast_b16_to_f32(c, x1_l1, x1, False, rb.LAYOUT_ONE, mask_all_b16)
            rb.vmul(c, x1_l0, x1_l0, inv_scale_f32, mask_all_b32)
            rb.vmul(c, x1_l1, x1_l1, inv_scale_f32, mask_all_b32)
            rb.vinterleave_inplace(c, x1_l0, x1_l1)
            # tokens 0-63, 64-127 | 128-191, 192-255
            rb.vinterleave_inplace(c, x0_l0, x1_l0)
            rb.vinterleave_inplace(c, x0_l1, x1_l1)
            rb.vcast_f32_to_fp8(c, q0, x0_l0, dt, asc.CAST_RINT, rb.SAT, m_q0)
            rb.vcast_f32_to_fp8(c, q1, x1_l0, dt, asc.CAST_RINT, rb.SAT, m_q1)
            rb.vcast_f32_to_fp8(c, q2, x0_l1, dt, asc.CAST_RINT, rb.SAT, m_q2)
            rb.vcast_f32_to_fp8(c, q3, x1_l1, dt, asc.CAST_RINT, rb.SAT, m_q3)
        else:
            rb.vmul_bf16(c, x0, x0, inv_scale, mask_all_b16)
            rb.vmul_bf16(c, x1, x1, inv_scale, mask_all_b16)
            rb.vinterleave_inplace(c, x0, x1)
            rb.vcast_b16_to_f32(c, x0_l0, x0, True, rb.LAYOUT_ZERO, mask_all_b16)
            rb.vcast_b16_to_f32(c, x0_l1, x0, True, rb.LAYOUT_ONE, mask_all_b16)
            rb.vinterleave_inplace(c, x0_l0, x0_l1)
            rb.vcast_f32_to_fp8(c, q0, x0_l0, dt, asc.CAST_RINT, rb.SAT, m_q0)
            rb.vcast_f32_to_fp8(c, q1, x0_l1, dt, asc.CAST_RINT, rb.SAT, m_q1)
            rb.vcast_b16_to_f32(c, x1_l0, x1, True, rb.LAYOUT_ZERO, mask_all_b16)
            rb.vcast_b16_to_f32(c, x1_l1, x1, True, rb.LAYOUT_ONE, mask_all_b16)
            rb.vinterleave_inplace(c, x1_l0, x1_l1)
            rb.vcast_f32_to_fp8(c, q2, x1_l0, dt, asc.CAST_RINT, rb.SAT, m_q2)
            rb.vcast_f32_to_fp8(c, q3, x1_l1, dt, asc.CAST_RINT, rb.SAT, m_q3)
        out_off = rb.reg_store_pack4_span(c, x_quant_local, rb.vreg_u32(c, 8), out_off, m_q0)
        out_off = rb.reg_store_pack4_span(c, x_quant_local, rb.vreg_u32(c, 9), out_off, m_q1)
        out_off = rb.reg_store_pack4_span(c, x_quant_local, rb.vreg_u32(c, 10), out_off, m_q2)
        out_off = rb.reg_store_pack4_span(c, x_quant_local, rb.vreg_u32(c, 11), out_off, m_q3)
    rb.vec_scope_end(c)


# --- the class: Init / Process and its copy loops ---------------------------------------------------------
# What InitKernelTiling leaves in the kernel's members (needCoreNum, perCoreRow, ...), computed on each core by
# init_kernel_tiling (here and in gather_mxfp4_quant): rows are source slots, cols elements of x, scale cols bytes
# of the MX scale output.
MxCoreSplit = namedtuple("MxCoreSplit", [
    "need_core_num", "per_core_row", "per_loop_rows", "last_loop_rows", "row_loops", "per_loop_cols",
    "last_loop_cols", "col_loops", "per_loop_scale_cols", "last_loop_valid_scale_cols", "last_loop_scale_cols",
    "scale_cols"])


@aicore
def init_kernel_tiling(c, td, gm):
    """InitKernelTiling for GATHER row indices: the core split of all n * k source slots and the column pieces.
    (With SCATTER the kernel would split the expert total count instead, read after a DataCacheCleanAndInvalid.)"""
    valid_scale_cols = (td.cols + MX_BLOCK_SIZE - 1) // MX_BLOCK_SIZE
    scale_cols = (valid_scale_cols + 1) // 2 * 2
    scan_row_count = np.int64(td.n * td.k)
    per_core_row = ceil_div(scan_row_count, td.core_num)
    need_core_num = ceil_div(scan_row_count, per_core_row)
    last_core_indices = scan_row_count - (need_core_num - 1) * per_core_row
    core_rows = per_core_row
    origin_per_loop = td.gather_out_per_core_per_loop_indices_elements
    if c.block_idx == need_core_num - 1:
        core_rows = last_core_indices
        origin_per_loop = td.gather_out_last_core_per_loop_indices_elements
    per_loop_rows = min(core_rows, origin_per_loop)
    row_loops = ceil_div(core_rows, per_loop_rows)
    last_loop_rows = core_rows - (row_loops - 1) * per_loop_rows
    per_loop_cols = td.gather_out_per_loop_cols
    col_loops = td.gather_out_cols_loops
    per_loop_scale_cols = per_loop_cols // MX_BLOCK_SIZE      # per_loop_cols is a multiple of 32
    return MxCoreSplit(need_core_num, per_core_row, per_loop_rows, last_loop_rows, row_loops, per_loop_cols,
                       td.gather_out_last_loop_cols, col_loops, per_loop_scale_cols,
                       valid_scale_cols - (col_loops - 1) * per_loop_scale_cols,
                       scale_cols - (col_loops - 1) * per_loop_scale_cols, scale_cols)


@aicore
def copy_in_indices(c, rows_gm, progress, per_loop_rows, current_loop_rows):
    """CopyInExpandedExpertIdx: this loop's row indices into sortedRowIdxInQueue."""
    indices_local = asc.alloc_tensor(c, SORTED_ROW_IDX_IN_QUEUE, asc.ub_i32(c))
    asc.data_copy_pad(c, indices_local, asc.gm_at(rows_gm, progress * per_loop_rows),
                      asc.DataCopyExtParams(1, current_loop_rows * 4, 0, 0), asc.NO_PAD)
    asc.en_que(c, SORTED_ROW_IDX_IN_QUEUE, indices_local)


@aicore
def copy_in(c, td, gm, src_row, col_idx, loop_cols, per_loop_cols):
    """CopyIn: one column piece of token row src_row into xInQueue; a piece whose length is not a multiple of 32
    is right-padded with zeros to the end of its 32-byte block, or over one more block when its tail fills at
    most half of a 32-token block."""
    in_local = asc.alloc_tensor(c, X_IN_QUEUE, asc.ub_u16(c))
    tail = loop_cols % MX_BLOCK_SIZE
    pad = asc.NO_PAD
    if tail != 0:
        right = NUM_ELEM_PER_UB_BLOCK - (tail - NUM_ELEM_PER_UB_BLOCK) if tail > NUM_ELEM_PER_UB_BLOCK \
            else NUM_ELEM_PER_UB_BLOCK
        pad = asc.DataCopyPadExtParams(True, 0, right, 0)
    asc.data_copy_pad(c, in_local, asc.gm_at(gm.x, src_row * td.cols + col_idx * per_loop_cols),
                      asc.DataCopyExtParams(1, loop_cols * 2, 0, 0), pad)
    asc.en_que(c, X_IN_QUEUE, in_local)


@aicore
def compute(c, tmpl, x_elem_num, scale_elem_num, valid_scale_elem_num, fp8_emax):
    """Compute: the three VFs over the piece in xInQueue; the codes go to xQuantOutQueue, the scales to
    mxScaleOutQueue."""
    U16 = asc.ub_u16(c)
    x_local = asc.de_que(c, X_IN_QUEUE, U16)
    x_quant_local = asc.alloc_tensor(c, X_QUANT_OUT_QUEUE, asc.ub_u8(c))
    mx_scale_local = asc.alloc_tensor(c, MX_SCALE_OUT_QUEUE, U16)
    max_exp_local = asc.tbuf_get(c, MAX_EXP_BUFFER, U16)
    inv_scale_local = asc.tbuf_get(c, INV_SCALE_BUFFER, U16)
    vf_loop_num_x = (x_elem_num + VL_B16 * 2 - 1) // (VL_B16 * 2)
    vf_loop_num_scale = (scale_elem_num + VL_B16 - 1) // VL_B16
    is_fp16 = tmpl.x_t == asc.DT_FLOAT16
    if tmpl.round_scale != 0:
        vf_compute_amax(c, x_local, max_exp_local, x_elem_num, vf_loop_num_x, VL_B16, NUM_UB_BLOCKS_PER_VREG,
                        is_fp16, MXFP8_BF16_ABS_MASK)
        vf_compute_round_scale(c, max_exp_local, mx_scale_local, inv_scale_local, scale_elem_num,
                               valid_scale_elem_num, vf_loop_num_scale, VL_B16, fp8_emax,
                               tmpl.quant_mode >= MXFP8_ROUNDSCALE_AMAX_E5M2)
    else:
        vf_compute_amax(c, x_local, max_exp_local, x_elem_num, vf_loop_num_x, VL_B16, NUM_UB_BLOCKS_PER_VREG,
                        is_fp16, BF16_EMASK_AND_INF_VAL)
        vf_compute_scale(c, max_exp_local, mx_scale_local, inv_scale_local, scale_elem_num, valid_scale_elem_num,
                         vf_loop_num_scale, VL_B16, fp8_emax << BF16_EXP_SHR_BITS)
    vf_compute_data(c, x_local, inv_scale_local, x_quant_local, x_elem_num, vf_loop_num_x, VL_B16,
                    NUM_UB_BLOCKS_PER_VREG, is_fp16, fp8_dt(tmpl.quant_mode))
    asc.free_tensor(c, X_IN_QUEUE, x_local)
    asc.en_que(c, X_QUANT_OUT_QUEUE, x_quant_local)
    asc.en_que(c, MX_SCALE_OUT_QUEUE, mx_scale_local)


@aicore
def copy_out(c, td, gm, dst_row, col_idx, loop_cols, loop_scale_cols, per_loop_cols, per_loop_scale_cols,
             scale_cols):
    """CopyOut: the piece's codes and scales to output row dst_row."""
    U8 = asc.ub_u8(c)
    mx_scale_local = asc.de_que(c, MX_SCALE_OUT_QUEUE, U8)
    out_local = asc.de_que(c, X_QUANT_OUT_QUEUE, U8)
    asc.data_copy_pad(c, asc.gm_at(gm.expanded_x, dst_row * td.cols + col_idx * per_loop_cols), out_local,
                      asc.DataCopyExtParams(1, loop_cols, 0, 0))
    asc.data_copy_pad(c, asc.gm_at(gm.expanded_scale, dst_row * scale_cols + col_idx * per_loop_scale_cols),
                      mx_scale_local, asc.DataCopyExtParams(1, loop_scale_cols, 0, 0))
    asc.free_tensor(c, X_QUANT_OUT_QUEUE, out_local)
    asc.free_tensor(c, MX_SCALE_OUT_QUEUE, mx_scale_local)


@aicore
def _piece(m, j):
    """(loopCols, loopScaleCols, loopValidScaleCols) of column piece j."""
    if j == m.col_loops - 1:
        return m.last_loop_cols, m.last_loop_scale_cols, m.last_loop_valid_scale_cols
    return m.per_loop_cols, m.per_loop_scale_cols, m.per_loop_scale_cols


@aicore
def gather_copy(c, td, gm, tmpl, m, progress, current_loop_rows, fp8_emax):
    """GatherCopyExpandedXandMXQuant: every token this loop's source slots belong to (slot / k) is read and
    quantised once per piece, then copied to the output row of each of its slots with an index >= 0."""
    indices_local = asc.de_que(c, SORTED_ROW_IDX_IN_QUEUE, asc.ub_i32(c))
    asc.sync_pipes(c, asc.MTE2_S)
    U8 = asc.ub_u8(c)
    for j in range(m.col_loops):
        loop_cols, loop_scale_cols, loop_valid = _piece(m, j)
        global_sort_idx = m.per_core_row * c.block_idx + m.per_loop_rows * progress
        cur = 0
        first_row = global_sort_idx // td.k
        last_row = (global_sort_idx + current_loop_rows - 1) // td.k
        for row in range(first_row, last_row + 1):
            asc.sync_pipes(c, asc.S_MTE2)
            copy_in(c, td, gm, row, j, loop_cols, m.per_loop_cols)
            compute(c, tmpl, loop_cols, loop_scale_cols, loop_valid, fp8_emax)
            out_local = asc.de_que(c, X_QUANT_OUT_QUEUE, U8)
            mx_scale_local = asc.de_que(c, MX_SCALE_OUT_QUEUE, U8)
            x_params = asc.DataCopyExtParams(1, loop_cols, 0, 0)
            scale_params = asc.DataCopyExtParams(1, loop_scale_cols, 0, 0)
            while cur < current_loop_rows and global_sort_idx // td.k == row:
                out_index = np.int64(asc.get_value(c, indices_local, cur))
                cur += 1
                global_sort_idx += 1
                if out_index < 0:
                    continue
                asc.data_copy_pad(c, asc.gm_at(gm.expanded_x, out_index * td.cols + j * m.per_loop_cols), out_local,
                                  x_params)
                asc.data_copy_pad(c, asc.gm_at(gm.expanded_scale, out_index * m.scale_cols + j * m.per_loop_scale_cols),
                                  mx_scale_local, scale_params)
            asc.free_tensor(c, X_QUANT_OUT_QUEUE, out_local)
            asc.free_tensor(c, MX_SCALE_OUT_QUEUE, mx_scale_local)
    asc.free_tensor(c, SORTED_ROW_IDX_IN_QUEUE, indices_local)


@global_aicore
def gather_mxfp8_quant(c, td, gm, tmpl):
    """MoeGatherOutMxfp8Quant<T, U, CLAMP_AMAX>::Init + Process on one core (GATHER row indices)."""
    m = init_kernel_tiling(c, td, gm)
    fp8_emax = MXFP8_E5M2_EMAX if tmpl.quant_mode == 2 or tmpl.quant_mode == 16 else MXFP8_E4M3_EMAX
    rows_gm = asc.gm_at(gm.expanded_row_idx, m.per_core_row * c.block_idx)       # sortedRowIdxGm_
    if c.block_idx >= m.need_core_num:
        return
    for loop in range(m.row_loops):
        rows = m.last_loop_rows if loop == m.row_loops - 1 else m.per_loop_rows
        copy_in_indices(c, rows_gm, loop, m.per_loop_rows, rows)
        gather_copy(c, td, gm, tmpl, m, loop, rows, fp8_emax)


def mxfp8_gather_phase(select=None) -> PipePhase:
    """The gatherPipe phase of keys 10030000 / 11030000; `select(*launch_args)` returns (td, GatherMxGm,
    MxTemplate) (default: the launch args are those three)."""
    return PipePhase("gatherPipe", BUFFERS, (gather_mxfp8_quant,), select)
