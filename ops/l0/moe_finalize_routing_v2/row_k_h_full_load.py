"""MoeFinalizeRoutingV2RowKHFullLoad, keys 30020 / 30021 / 30022.

source: moe/moe_finalize_routing_v2/op_kernel/arch35/moe_finalize_routing_v2_row_k_h_full_load.h @ 25fb6b92890d

The whole expanded_x is copied into UB once: the kernel copies row * k * h elements (dropless modes) whatever
expanded_x's own length. Deviation: where expanded_x has fewer rows (activeNum < row * k) the hardware reads unrelated
GM past its end into rows no valid index reaches (they are >= activeNum); the model copies only activeNum rows. Where
it has more, a valid index >= row * k points past the UB copy (an OutOfBoundsError here, unrelated UB on the chip).
Then per loop rowFactor tokens of y are made, each valid slot
added by one VF straight from that copy (unaligned row starts), its scale read from UB by the scalar unit.
"""
from __future__ import annotations

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import global_aicore

from .base import cast_y, copy_in, get_scale, process_expand_x_scale, scales_copy_in, skipped, store_y, zero_y

BUFFERS = ("expandedXQue", "yQue")
BUFFERS_SCALES = BUFFERS + ("scalesQue",)
X_QUE, Y_QUE, SCALES_QUE = asc.buffer_ids(BUFFERS_SCALES, "expandedXQue", "yQue", "scalesQue")


@global_aicore
def row_k_h_full_load_stage(c, td, gm, tmpl):
    """Process()."""
    x_local = asc.alloc_tensor(c, X_QUE, asc.ub_like(c, gm.expanded_x))
    copy_in(c, x_local, asc.gm_at(gm.expanded_x, 0), min(td.row * td.k, td.active_num) * td.h)
    asc.en_que(c, X_QUE, x_local)
    x_local = asc.de_que(c, X_QUE, asc.ub_like(c, gm.expanded_x))
    last = c.block_idx == c.block_num - 1
    row_outer_loop = td.row_loop_of_tail_block if last else td.row_loop_of_former_block
    tail_row_factor = td.tail_row_factor_of_tail_block if last else td.tail_row_factor_of_former_block
    for row_outer in range(row_outer_loop):
        row_inner_loop = tail_row_factor if row_outer == row_outer_loop - 1 else td.row_factor
        first_row = c.block_idx * td.row_of_former_block + row_outer * td.row_factor
        scales_local = asc.ub_u16(c)
        if tmpl.has_scales:
            scales_local = asc.alloc_tensor(c, SCALES_QUE, asc.ub_u16(c))
            scales_copy_in(c, gm, tmpl.s_t, scales_local, first_row * td.k, row_inner_loop * td.k)
            asc.en_que(c, SCALES_QUE, scales_local)
            scales_local = asc.de_que(c, SCALES_QUE, asc.ub_u16(c))
        y_local = asc.alloc_tensor(c, Y_QUE, asc.ub_f32(c))
        zero_y(c, y_local, row_inner_loop * td.h)
        # ProcessYWithInput
        for row_inner in range(row_inner_loop):
            for k_idx in range(td.k):
                idx = asc.get_value(c, gm.expanded_row_idx, (first_row + row_inner) * td.k + k_idx)
                if skipped(idx, td.active_num, tmpl.drop_pad_mode):
                    continue
                scale = 0.0
                if tmpl.has_scales:
                    scale = get_scale(c, tmpl.s_t, scales_local, row_inner * td.k + k_idx)
                process_expand_x_scale(c, y_local, row_inner * td.h, x_local, idx * td.h, scale, tmpl.has_scales,
                                       tmpl.x_t, tmpl.s_t, td.h)
        cast_y(c, y_local, tmpl.x_t, row_inner_loop * td.h)
        asc.en_que(c, Y_QUE, y_local)
        if tmpl.has_scales:
            asc.free_tensor(c, SCALES_QUE, scales_local)
        y_local = asc.de_que(c, Y_QUE, asc.ub_f32(c))
        store_y(c, gm.y, y_local, first_row * td.h, row_inner_loop * td.h)
        asc.free_tensor(c, Y_QUE, y_local)
    asc.free_tensor(c, X_QUE, x_local)
