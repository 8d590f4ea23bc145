"""The VFs and copies the four MoeFinalizeRoutingV2 arch35 templates share.

source: moe/moe_finalize_routing_v2/op_kernel/arch35/moe_finalize_routing_v2_base.h @ 25fb6b92890d

Only the parts MoeTokenUnpermute reaches are modelled: no x1 / x2 (y starts from Duplicate(0)), no bias. Every VF
works on fp32 y in UB and adds one expanded row (widened to fp32, times its scale when there are scales) per call
or per valid k, one 64-lane register at a time:

    y[i] = y[i] + x[i] * s        (Mul then Add, two roundings; y starts at +0.0)

Tokens arrive as carriers (uint16 bits for fp16 / bf16, float32); scales as two views of the same GM bytes
(GmTensors.scales_u16 / scales_f32) so that a stage compiles once per token carrier whatever S is; `x_t` / `s_t`
are the ge dtype codes. Registers: expandedX 0, y 2, src 3, scaleReg 4, tmp (b16) 5, tmpUnPack 6; masks
pregLoop 0, pregMain 1.
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import aicore

VL_FP32 = 64
DROPLESS_COLUMN, DROP_PAD_COLUMN, DROPLESS_ROW, DROP_PAD_ROW = 0, 1, 2, 3
INVALID_IDX = -1


@aicore
def round_up(elems, nbytes):
    """RoundUp<T>: elements rounded up to whole 32-byte blocks of T."""
    per = 32 // nbytes
    return (elems + per - 1) // per * per


@aicore
def skipped(idx, active_num, drop_pad_mode):
    """The templates' validity test of an expanded_row_idx value: -1 always, and in the dropless modes every
    row at or past activeNum."""
    if idx == INVALID_IDX:
        return True
    return (drop_pad_mode == DROPLESS_COLUMN or drop_pad_mode == DROPLESS_ROW) and idx >= active_num


@aicore
def _load_input(c, dst, src, offset, x_t, mask):
    """LoadInputData<T>: an aligned load, b16 through DIST_UNPACK_B16 and a widening cast."""
    if x_t == asc.DT_FLOAT:
        asc.reg_load_align(c, dst, src, offset, False)
    else:
        tmp = asc.vreg_u16(c, 5)
        asc.reg_load_align(c, tmp, src, offset, True)
        asc.vcast_half_to_f32(c, dst, tmp, x_t, asc.LAYOUT_ZERO, mask)


@aicore
def _load_input_unalign(c, dst, src, offset, x_t, mask, stride):
    """LoadInputDataUnalign<T>: an unaligned load of `stride` elements; b16 is unpacked to 32-bit lanes and
    widened. Returns the post-updated offset."""
    if x_t == asc.DT_FLOAT:
        return asc.reg_load_unalign(c, dst, src, offset, stride)
    tmp = asc.vreg_u16(c, 5)
    unpacked = asc.vreg_u32(c, 6)
    nxt = asc.reg_load_unalign(c, tmp, src, offset, stride)
    asc.vunpack_u16_to_u32(c, unpacked, tmp)
    asc.vcast_half_to_f32(c, dst, asc.vreg_u16(c, 6), x_t, asc.LAYOUT_ZERO, mask)
    return nxt


@aicore
def _load_with_brc(c, dst, scales_local, offset, s_t, mask):
    """LoadInputDataWithBrc<S>: one scale broadcast to every lane, b16 widened (scales_local: the uint16 view)."""
    if s_t == asc.DT_FLOAT:
        asc.reg_load(c, dst, asc.view_as(c, scales_local, asc.ub_f32(c)), offset, asc.LOAD_BRC)
    else:
        tmp = asc.vreg_u16(c, 5)
        asc.reg_load(c, tmp, scales_local, offset, asc.LOAD_BRC)
        asc.vcast_half_to_f32(c, dst, tmp, s_t, asc.LAYOUT_ZERO, mask)


@aicore
def scales_copy_in(c, gm, s_t, scales_local, first, n):
    """CopyIn of n scales from scale `first` (scales_local: the uint16 view of the buffer)."""
    if s_t == asc.DT_FLOAT:
        copy_in(c, asc.view_as(c, scales_local, asc.ub_f32(c)), asc.gm_at(gm.scales_f32, first), n)
    else:
        copy_in(c, scales_local, asc.gm_at(gm.scales_u16, first), n)


@aicore
def get_scale(c, s_t, scales_local, i):
    """scalesLocal.GetValue(i) as its carrier holds it (fp32 value or b16 bits), widened to a float64 scalar."""
    if s_t == asc.DT_FLOAT:
        return np.float64(asc.get_value(c, asc.view_as(c, scales_local, asc.ub_f32(c)), i))
    return np.float64(asc.get_value(c, scales_local, i))


@aicore
def set_scale(c, s_t, scales_local, i, v):
    """scalesLocal.SetValue(i, v) for a value from get_scale."""
    if s_t == asc.DT_FLOAT:
        asc.set_value(c, asc.view_as(c, scales_local, asc.ub_f32(c)), i, np.float32(v))
    else:
        asc.set_value(c, scales_local, i, np.uint16(v))


@aicore
def get_scale_gm(c, gm, s_t, i):
    """scalesGm.GetValue(i), as get_scale."""
    if s_t == asc.DT_FLOAT:
        return np.float64(asc.get_value(c, gm.scales_f32, i))
    return np.float64(asc.get_value(c, gm.scales_u16, i))


@aicore
def process_expand_x_scale(c, y_local, y_off, x_local, x_off, scale, has_scale, x_t, s_t, n):
    """VFProcessExpandXBiasScale<T, S, false, hasScale>: y[y_off:+n] += x[x_off:+n] * scale, every access
    unaligned. `scale` is the scalar scale as its carrier holds it (an fp32 value, or the 16 bits of a b16
    scale)."""
    loop_count = n // VL_FP32
    tail_num = n - loop_count * VL_FP32
    tail_loop = (tail_num + VL_FP32 - 1) // VL_FP32
    if not asc.vec_scope_begin(c):
        return
    expanded_x = asc.vreg_f32(c, 0)
    y = asc.vreg_f32(c, 2)
    src = asc.vreg_f32(c, 3)
    scale_reg = asc.vreg_f32(c, 4)
    preg_loop = asc.mreg(c, 0)
    preg_main = asc.mreg(c, 1)
    asc.create_mask(c, preg_main, 4 if s_t == asc.DT_FLOAT else 2, asc.PAT_ALL)    # CreateMask<S, ALL>
    if has_scale:
        if s_t == asc.DT_FLOAT:
            asc.vduplicate(c, scale_reg, np.float32(scale), preg_main)
        else:
            tmp = asc.vreg_u16(c, 5)
            asc.vduplicate(c, tmp, np.uint16(scale), preg_main)
            asc.vcast_half_to_f32(c, scale_reg, tmp, s_t, asc.LAYOUT_ZERO, preg_main)
    src_off = y_off
    dst_off = y_off
    x_pos = x_off
    for _ in range(loop_count):
        x_pos = _load_input_unalign(c, expanded_x, x_local, x_pos, x_t, preg_main, VL_FP32)
        src_off = asc.reg_load_unalign(c, src, y_local, src_off, VL_FP32)
        if has_scale:
            asc.vmul(c, expanded_x, expanded_x, scale_reg, preg_main)
        asc.vadd(c, y, src, expanded_x, preg_main)
        dst_off = asc.reg_store_unalign(c, y_local, y, dst_off, VL_FP32)
    sreg = tail_num
    for _ in range(tail_loop):
        sreg = asc.update_mask(c, preg_loop, 4, sreg)
        x_pos = _load_input_unalign(c, expanded_x, x_local, x_pos, x_t, preg_loop, tail_num)
        src_off = asc.reg_load_unalign(c, src, y_local, src_off, tail_num)
        if has_scale:
            asc.vmul(c, expanded_x, expanded_x, scale_reg, preg_loop)
        asc.vadd(c, y, src, expanded_x, preg_loop)
        dst_off = asc.reg_store_unalign(c, y_local, y, dst_off, tail_num)
    # StoreUnAlignPost: the model's unaligned stores land at once
    asc.vec_scope_end(c)


@aicore
def process_expand_x_scale_optimized(c, y_local, y_off, x_local, x_off, scales_local, s_off, valid_k, has_scale,
                                     x_t, s_t, n):
    """VFProcessExpandXBiasScaleOptimized<T, S, false, hasScale>: for k < valid_k in order,
    y[y_off:+n] += x[x_off + k * RoundUp<T>(n):+n] * scales[s_off + k]; expanded rows are loaded aligned, y
    unaligned."""
    loop_count = n // VL_FP32
    tail_num = n - loop_count * VL_FP32
    tail_loop = (tail_num + VL_FP32 - 1) // VL_FP32
    x_bytes = 4 if x_t == asc.DT_FLOAT else 2
    n_align = round_up(n, x_bytes)
    if not asc.vec_scope_begin(c):
        return
    expanded_x = asc.vreg_f32(c, 0)
    y = asc.vreg_f32(c, 2)
    src = asc.vreg_f32(c, 3)
    scale_reg = asc.vreg_f32(c, 4)
    preg_loop = asc.mreg(c, 0)
    preg_main = asc.mreg(c, 1)
    asc.create_mask(c, preg_main, x_bytes, asc.PAT_ALL)       # CreateMask<T, ALL>
    for k in range(valid_k):
        src_off = y_off
        dst_off = y_off
        if has_scale:
            _load_with_brc(c, scale_reg, scales_local, s_off + k, s_t, preg_main)
        for i in range(loop_count):
            src_off = asc.reg_load_unalign(c, src, y_local, src_off, VL_FP32)
            _load_input(c, expanded_x, x_local, x_off + k * n_align + i * VL_FP32, x_t, preg_main)
            if has_scale:
                asc.vmul(c, expanded_x, expanded_x, scale_reg, preg_main)
            asc.vadd(c, y, src, expanded_x, preg_main)
            dst_off = asc.reg_store_unalign(c, y_local, y, dst_off, VL_FP32)
        sreg = tail_num
        for _ in range(tail_loop):
            sreg = asc.update_mask(c, preg_loop, 4, sreg)
            src_off = asc.reg_load_unalign(c, src, y_local, src_off, tail_num)
            _load_input(c, expanded_x, x_local, x_off + k * n_align + loop_count * VL_FP32, x_t, preg_loop)
            if has_scale:
                asc.vmul(c, expanded_x, expanded_x, scale_reg, preg_loop)
            asc.vadd(c, y, src, expanded_x, preg_loop)
            dst_off = asc.reg_store_unalign(c, y_local, y, dst_off, tail_num)
        # StoreUnAlignPost + LocalMemBar<VEC_STORE, VEC_LOAD>: the next k reads what this one stored
    asc.vec_scope_end(c)


@aicore
def copy_in(c, dst_local, src_gm, elems):
    """CopyIn: one DataCopyPad burst of `elems` elements, no padding."""
    asc.data_copy_pad(c, dst_local, src_gm, asc.DataCopyExtParams(1, elems * dst_local.itemsize, 0, 0), asc.NO_PAD)


@aicore
def copy_out(c, dst_gm, src_local, elems):
    """CopyOut: one DataCopyPad burst of `elems` elements."""
    asc.data_copy_pad(c, dst_gm, src_local, asc.DataCopyExtParams(1, elems * src_local.itemsize, 0, 0))


@aicore
def zero_y(c, y_local, n):
    """ProcessX1AndX2 without x1 / x2: AscendC::Duplicate(yLocal, 0.0f, processLen)."""
    asc.duplicate(c, y_local, 0.0, n)


@aicore
def cast_y(c, y_local, x_t, n):
    """Cast(yLocal.ReinterpretCast<T>(), yLocal, CAST_RINT, n) in place for fp16 / bf16 (fp32 stays)."""
    if x_t != asc.DT_FLOAT:
        asc.cast(c, asc.view_as(c, y_local, asc.ub_u16(c)), x_t, y_local, asc.DT_FLOAT, asc.CAST_RINT, n)


@aicore
def store_y(c, gm_y, y_local, off, n):
    """CopyOut(yLocal.ReinterpretCast<T>(), yGm[off], 1, n)."""
    copy_out(c, asc.gm_at(gm_y, off), asc.view_as(c, y_local, asc.ub_like(c, gm_y)), n)
