"""What the three MoeInitRoutingV2Grad arch35 templates share.

source: moe/moe_init_routing_v2_grad/op_kernel/arch35/moe_init_routing_v2_grad_base.h @ 25fb6b92890d (IsInvalidRowIdx,
the Load/StoreOneTensorForDtypeT casts, SequenceReduceSum with its four-slot groups).

* `copy_in`: the CopyIn loop every template has: one GlobalTensor::GetValue per slot, then the slot's row piece
  into its UB row by DataCopyPad (MTE2), or a zero row by Duplicate when IsInvalidRowIdx<Mode> says so.
* `sequence_reduce_sum`: the SequenceReduceSum<T, U, withInit> VF. For each output row the fp32 sums start at +0.0
  (withInit) or at what U-typed `out` holds; the slots go four at a time as s = s + ((x0 + x1) + (x2 + x3)) and the
  last one to three as s = s + x; H runs in blocks of 4 x 64 lanes (the unrolled main loop, every lane active),
  then in 64-lane tail pieces under UpdateMask. fp16 / bf16 rows load with UNPACK_B16 and widen exactly; a 16-bit U
  is stored with a CAST_RINT narrowing and a PACK_B32 store.

A VF load reads a whole register (VL bytes; 128 bytes for UNPACK_B16) whatever lanes the mask keeps, so the tail
loads run past their row, and for a buffer's last row past the buffer: the loads are given their buffer's view
stretched to the end of the UB (`to_ub_end`), as the hardware reads whatever UB bytes lie there; the lanes
they bring in are never added under the mask.
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.dtypes import CAST_RINT, DT_BF16
from ascend_sim.kernel_api import aicore, ub_view
from ascend_sim.layout import CALL_R_LOAD
from ascend_sim.local import ub_offset

VL_F32 = 64              # fp32 lanes of a vector register
UNROLL_COEF = 4          # 64-lane blocks the main H loop takes at once
F32_BYTES = 4

DROPLESS_MODE = 0        # Mode template argument of the kernel classes
DROP_PAD_MODE = 1
ACTIVE_MODE = 2

# registers: x{u}_{j} = 4u + j (u: H block, j: slot of the group of four), sums 16..19, 16-bit scratch 20
_SUM = 16
_HALF = 20


@aicore
def to_ub_end(c, t):
    """LocalTensor t stretched to the end of the UB (the span a VF load may read, see the module docstring)."""
    off = ub_offset(c, t, CALL_R_LOAD)
    if off < 0:
        return t
    return ub_view(c.ub, t, off, (c.ub.size - off) // t.itemsize)


@aicore
def is_invalid_row(mode, row, row_upper, active_num):
    """IsInvalidRowIdx<Mode>: a slot whose row is read as a zero row."""
    if mode == ACTIVE_MODE:
        return row < 0 or row >= active_num
    if mode == DROP_PAD_MODE:
        return row < 0
    return row < 0 or row >= row_upper


@aicore
def copy_in(c, td, tmpl, x_gm, index_gm, queue, idx_base, n_rows, k_rows, ub_n_stride, src_col, h_len, h_align):
    """CopyIn: AllocTensor, the rows of n_rows x k_rows slots (slot (n, j) reads index idx_base + n * k + j into UB
    row n * ub_n_stride + j * h_align: elements src_col .. src_col + h_len of its GM row), EnQue."""
    T = asc.ub_like(c, x_gm)
    input_ub = asc.alloc_tensor(c, queue, T)
    row_upper = td.n * td.k
    for n in range(n_rows):
        for j in range(k_rows):
            row = asc.get_value(c, index_gm, idx_base + n * td.k + j)
            dst = n * ub_n_stride + j * h_align
            if is_invalid_row(tmpl.mode, row, row_upper, td.active_num):
                asc.duplicate(c, input_ub[dst:], 0, h_align)
                continue
            src = asc.gm_at(x_gm, np.int64(row) * td.h + src_col)
            asc.data_copy_pad(c, input_ub[dst:], src, asc.DataCopyExtParams(1, h_len * T.itemsize, 0, 0),
                              asc.NO_PAD)
    asc.en_que(c, queue, input_ub)


@aicore
def load_t(c, tmpl, src, dst, preg, offset):
    """LoadOneTensorForDtypeT: an fp32 register from fp32 (DataCopy) or 16-bit elements (UNPACK_B16 + Cast)."""
    if src.itemsize == F32_BYTES:
        asc.reg_load(c, dst, src, offset, asc.LOAD_NORM)
    else:
        h = asc.vreg_u16(c, _HALF)
        asc.reg_load_unpack_b16(c, h, src, offset)
        asc.vcast_half_to_f32(c, dst, h, tmpl.t, asc.LAYOUT_ZERO, preg)


@aicore
def store_t(c, tmpl, dst, src, preg, offset):
    """StoreOneTensorForDtypeT: fp32 lanes stored as they are, or cast (CAST_RINT) and packed to 16 bits."""
    if dst.itemsize == F32_BYTES:
        asc.reg_store(c, dst, src, offset, preg)
    else:
        h = asc.vreg_u16(c, _HALF)
        if tmpl.t == DT_BF16:
            asc.vcast_f32_to_bf16(c, h, src, CAST_RINT, asc.LAYOUT_ZERO, preg)
        else:
            asc.vcast_f32_to_f16(c, h, src, CAST_RINT, asc.LAYOUT_ZERO, preg)
        asc.reg_store_pack_b32(c, dst, h, offset, preg)


@aicore
def sequence_reduce_sum(c, tmpl, inp, out, with_init, cur_n, cur_k, cur_h, cur_h_align, cur_k_stride):
    """SequenceReduceSum<T, U, withInit>(inp, out, ...): out row n (stride cur_h_align) = the sum of the cur_k
    slot rows of input row group n (stride cur_k_stride * cur_h_align), see the module docstring."""
    h_quot = cur_h // VL_F32 // UNROLL_COEF
    h_rem = cur_h - h_quot * VL_F32 * UNROLL_COEF
    h_quot_loops = h_quot & 0xFFFF                       # the source's uint16_t loop counts
    h_rem_loops = ((h_rem + VL_F32 - 1) // VL_F32) & 0xFFFF
    n_loops = cur_n & 0xFFFF
    k_loops = cur_k & 0xFFFF
    n_in_stride = cur_k_stride * cur_h_align
    n_out_stride = cur_h_align
    h_rem_off = h_quot * VL_F32 * UNROLL_COEF
    src = to_ub_end(c, inp)
    acc = to_ub_end(c, out)
    if not asc.vec_scope_begin(c):
        return
    main = asc.mreg(c, 0)
    loop = asc.mreg(c, 1)
    asc.create_mask(c, main, F32_BYTES, asc.PAT_ALL)
    for h_idx in range(h_quot_loops):
        h_off = h_idx * VL_F32 * UNROLL_COEF
        for n in range(n_loops):
            n_in = n * n_in_stride
            for u in range(UNROLL_COEF):
                s = asc.vreg_f32(c, _SUM + u)
                if with_init:
                    asc.vduplicate(c, s, np.float32(0.0), main)
                else:
                    load_t(c, tmpl, acc, s, main, n * n_out_stride + h_off + u * VL_F32)
            kb = 0
            while kb + 3 < k_loops:
                for u in range(UNROLL_COEF):
                    for j in range(4):
                        load_t(c, tmpl, src, asc.vreg_f32(c, 4 * u + j), main,
                               n_in + h_off + u * VL_F32 + (kb + j) * n_out_stride)
                for u in range(UNROLL_COEF):
                    asc.vadd(c, asc.vreg_f32(c, 4 * u), asc.vreg_f32(c, 4 * u), asc.vreg_f32(c, 4 * u + 1), main)
                    asc.vadd(c, asc.vreg_f32(c, 4 * u + 2), asc.vreg_f32(c, 4 * u + 2), asc.vreg_f32(c, 4 * u + 3),
                             main)
                for u in range(UNROLL_COEF):
                    asc.vadd(c, asc.vreg_f32(c, 4 * u), asc.vreg_f32(c, 4 * u), asc.vreg_f32(c, 4 * u + 2), main)
                for u in range(UNROLL_COEF):
                    s = asc.vreg_f32(c, _SUM + u)
                    asc.vadd(c, s, s, asc.vreg_f32(c, 4 * u), main)
                kb += 4
            while kb < k_loops:
                for u in range(UNROLL_COEF):
                    load_t(c, tmpl, src, asc.vreg_f32(c, u), main, n_in + h_off + kb * n_out_stride + u * VL_F32)
                for u in range(UNROLL_COEF):
                    s = asc.vreg_f32(c, _SUM + u)
                    asc.vadd(c, s, s, asc.vreg_f32(c, u), main)
                kb += 1
            for u in range(UNROLL_COEF):
                store_t(c, tmpl, acc, asc.vreg_f32(c, _SUM + u), main, n * n_out_stride + h_off + u * VL_F32)
    remaining = h_rem
    s = asc.vreg_f32(c, _SUM)
    x0 = asc.vreg_f32(c, 0)
    x1 = asc.vreg_f32(c, 1)
    x2 = asc.vreg_f32(c, 2)
    x3 = asc.vreg_f32(c, 3)
    for t in range(h_rem_loops):
        asc.update_mask(c, loop, F32_BYTES, min(remaining, VL_F32))
        h_off = t * VL_F32 + h_rem_off
        for n in range(n_loops):
            n_in = n * n_in_stride
            if with_init:
                asc.vduplicate(c, s, np.float32(0.0), main)
            else:
                load_t(c, tmpl, acc, s, loop, n * n_out_stride + h_off)
            kb = 0
            while kb + 3 < k_loops:
                load_t(c, tmpl, src, x0, loop, n_in + h_off + kb * n_out_stride)
                load_t(c, tmpl, src, x1, loop, n_in + h_off + (kb + 1) * n_out_stride)
                load_t(c, tmpl, src, x2, loop, n_in + h_off + (kb + 2) * n_out_stride)
                load_t(c, tmpl, src, x3, loop, n_in + h_off + (kb + 3) * n_out_stride)
                asc.vadd(c, x0, x0, x1, loop)
                asc.vadd(c, x2, x2, x3, loop)
                asc.vadd(c, x0, x0, x2, loop)
                asc.vadd(c, s, s, x0, loop)
                kb += 4
            while kb < k_loops:
                load_t(c, tmpl, src, x0, loop, n_in + h_off + kb * n_out_stride)
                asc.vadd(c, s, s, x0, loop)
                kb += 1
            store_t(c, tmpl, acc, s, loop, n * n_out_stride + h_off)
        remaining = remaining - VL_F32 if remaining > VL_F32 else 0
    asc.vec_scope_end(c)


@aicore
def copy_out(c, td, out_gm, queue, out_offset, cur_n, cur_h):
    """CopyOut: cur_n rows of cur_h elements (UB rows 32-byte aligned) to GM rows of td.h, DataCopyPad (MTE3)."""
    T = asc.ub_like(c, out_gm)
    output_ub = asc.de_que(c, queue, T)
    asc.data_copy_pad(c, asc.gm_at(out_gm, out_offset), output_ub,
                      asc.DataCopyExtParams(cur_n, cur_h * T.itemsize, 0, (td.h - cur_h) * T.itemsize))
    asc.free_tensor(c, queue, output_ub)
