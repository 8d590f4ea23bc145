"""MoeFinalizeRoutingV2HFullLoad, keys 10020 / 10021 / 10022.

source: moe/moe_finalize_routing_v2/op_kernel/arch35/moe_finalize_routing_v2_h_full_load.h @ 25fb6b92890d

Per loop a core makes rowFactor tokens of y in one fp32 buffer; per token it takes its k slots kFactor at a time:
the valid slots' expanded rows are copied side by side (hAligned apart) with their scales packed to the front,
then one VF adds them in slot order (the skip rule: base.skipped).
"""
from __future__ import annotations

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import aicore, global_aicore

from .base import (
    cast_y,
    copy_in,
    get_scale,
    process_expand_x_scale_optimized,
    scales_copy_in,
    set_scale,
    skipped,
    store_y,
    zero_y,
)

BUFFERS = ("expandedXQue", "yQue")
BUFFERS_SCALES = BUFFERS + ("scalesQue",)
X_QUE, Y_QUE, SCALES_QUE = asc.buffer_ids(BUFFERS_SCALES, "expandedXQue", "yQue", "scalesQue")


@aicore
def _copy_expanded_x_and_scales(c, td, gm, tmpl, x_local, scales_local, row_base, cur_k):
    """CopyExpanedXAndBiasScales: the valid slots of one k piece into x_local; returns validK."""
    valid_k = 0
    for k_inner in range(cur_k):
        idx = asc.get_value(c, gm.expanded_row_idx, row_base + k_inner)    # dropless / drop-pad row offsets
        if skipped(idx, td.active_num, tmpl.drop_pad_mode):
            continue
        copy_in(c, x_local[valid_k * td.h_aligned:], asc.gm_at(gm.expanded_x, idx * td.h), td.h)
        if tmpl.has_scales:
            set_scale(c, tmpl.s_t, scales_local, valid_k, get_scale(c, tmpl.s_t, scales_local, k_inner))
        valid_k += 1
    return valid_k


@aicore
def _process_y_with_input(c, td, gm, tmpl, y_local, row_outer, row_inner_loop):
    """ProcessYWithInput: every token of the loop, kLoop pieces of kFactor slots each, then the cast to T."""
    core_rows = c.block_idx * td.row_of_former_block + row_outer * td.row_factor
    for row_inner in range(row_inner_loop):
        for k_outer in range(td.k_loop):
            cur_k = td.tail_k_factor if k_outer == td.k_loop - 1 else td.k_factor
            row_base = (core_rows + row_inner) * td.k + k_outer * td.k_factor
            scales_local = asc.ub_u16(c)
            if tmpl.has_scales:
                scales_local = asc.alloc_tensor(c, SCALES_QUE, asc.ub_u16(c))
                scales_copy_in(c, gm, tmpl.s_t, scales_local, row_base, cur_k)
                asc.en_que(c, SCALES_QUE, scales_local)
                scales_local = asc.de_que(c, SCALES_QUE, asc.ub_u16(c))
            x_local = asc.alloc_tensor(c, X_QUE, asc.ub_like(c, gm.expanded_x))
            valid_k = _copy_expanded_x_and_scales(c, td, gm, tmpl, x_local, scales_local, row_base, cur_k)
            asc.en_que(c, X_QUE, x_local)
            x_local = asc.de_que(c, X_QUE, asc.ub_like(c, gm.expanded_x))
            if tmpl.has_scales:
                asc.sync_pipes(c, asc.S_V)      # the packed scales were written by the scalar unit
            process_expand_x_scale_optimized(c, y_local, row_inner * td.h, x_local, 0, scales_local, 0, valid_k,
                                             tmpl.has_scales, tmpl.x_t, tmpl.s_t, td.h)
            asc.free_tensor(c, X_QUE, x_local)
            if tmpl.has_scales:
                asc.free_tensor(c, SCALES_QUE, scales_local)
    cast_y(c, y_local, tmpl.x_t, row_inner_loop * td.h)


@global_aicore
def h_full_load_stage(c, td, gm, tmpl):
    """Process(): the core's row loops (the last core takes the tail block's counts)."""
    last = c.block_idx == c.block_num - 1
    row_outer_loop = td.row_loop_of_tail_block if last else td.row_loop_of_former_block
    tail_row_factor = td.tail_row_factor_of_tail_block if last else td.tail_row_factor_of_former_block
    for row_outer in range(row_outer_loop):
        row_inner_loop = tail_row_factor if row_outer == row_outer_loop - 1 else td.row_factor
        y_local = asc.alloc_tensor(c, Y_QUE, asc.ub_f32(c))
        zero_y(c, y_local, row_inner_loop * td.h)
        _process_y_with_input(c, td, gm, tmpl, y_local, row_outer, row_inner_loop)
        asc.en_que(c, Y_QUE, y_local)
        y_local = asc.de_que(c, Y_QUE, asc.ub_f32(c))
        store_y(c, gm.y, y_local, (c.block_idx * td.row_of_former_block + row_outer * td.row_factor) * td.h,
                row_inner_loop * td.h)
        asc.free_tensor(c, Y_QUE, y_local)
