"""MoeFinalizeRoutingV2HPartialLoad, keys 20020 / 20021 / 20022.

source: moe/moe_finalize_routing_v2/op_kernel/arch35/moe_finalize_routing_v2_h_partial_load.h @ 25fb6b92890d

One token at a time in hFactor-element pieces: per piece y starts at 0 and each valid slot's piece of its expanded
row is copied in and added (times its scale, read from GM by the scalar unit) by one VF, in slot order.
"""
from __future__ import annotations

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import global_aicore

from .base import cast_y, copy_in, get_scale_gm, process_expand_x_scale, skipped, store_y, zero_y

BUFFERS = ("expandedXQue", "yQue")
X_QUE, Y_QUE = asc.buffer_ids(BUFFERS, "expandedXQue", "yQue")


@global_aicore
def h_partial_load_stage(c, td, gm, tmpl):
    """Process(): rows of the core, each in hLoop pieces."""
    last = c.block_idx == c.block_num - 1
    row_outer_loop = td.row_loop_of_tail_block if last else td.row_loop_of_former_block
    for row_outer in range(row_outer_loop):
        row = c.block_idx * td.row_of_former_block + row_outer
        for h_idx in range(td.h_loop):
            h_factor = td.tail_h_factor if h_idx == td.h_loop - 1 else td.h_factor
            y_local = asc.alloc_tensor(c, Y_QUE, asc.ub_f32(c))
            zero_y(c, y_local, h_factor)
            # ProcessYWithInput
            for k_idx in range(td.k):
                offset = row * td.k + k_idx         # SetExpandedRowIdxOffset, row modes
                idx = asc.get_value(c, gm.expanded_row_idx, offset)
                if skipped(idx, td.active_num, tmpl.drop_pad_mode):
                    continue
                x_local = asc.alloc_tensor(c, X_QUE, asc.ub_like(c, gm.expanded_x))
                copy_in(c, x_local, asc.gm_at(gm.expanded_x, idx * td.h + h_idx * td.h_factor), h_factor)
                asc.en_que(c, X_QUE, x_local)
                x_local = asc.de_que(c, X_QUE, asc.ub_like(c, gm.expanded_x))
                scale = 0.0
                if tmpl.has_scales:
                    scale = get_scale_gm(c, gm, tmpl.s_t, offset)   # SetScaleOffset: the index offset (row modes)
                process_expand_x_scale(c, y_local, 0, x_local, 0, scale, tmpl.has_scales, tmpl.x_t, tmpl.s_t,
                                       h_factor)
                asc.free_tensor(c, X_QUE, x_local)
            cast_y(c, y_local, tmpl.x_t, h_factor)
            asc.en_que(c, Y_QUE, y_local)
            y_local = asc.de_que(c, Y_QUE, asc.ub_f32(c))
            store_y(c, gm.y, y_local, row * td.h + h_idx * td.h_factor, h_factor)
            asc.free_tensor(c, Y_QUE, y_local)
