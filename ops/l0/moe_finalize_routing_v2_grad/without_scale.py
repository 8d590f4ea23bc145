"""MoeFinalizeRoutingV2GradWithoutScaleNotCutH / ...CutH (arch35/moe_finalize_routing_v2_grad_without_scale_not_cut_h.h
and ..._cut_h.h), keys 10001 / 10002: no scales, so grad_expanded_x[expanded_row_idx[j]] = grad_y[j], a byte copy.

source: moe/moe_finalize_routing_v2_grad/op_kernel/arch35/moe_finalize_routing_v2_grad_without_scale_not_cut_h.h,
moe_finalize_routing_v2_grad_without_scale_cut_h.h and moe_finalize_routing_v2_grad_base.h @ 25fb6b92890d.

Per slot j of the core's share: CopyIn puts row j of grad_y (10002: one hiddenPrePart-element piece of it at a
time, then the hiddenLastPart piece) and the slot's index in UB; CopyOut reads the index with GetValue and, for a
valid row (base.valid_row), DataCopyPads the piece to that row of grad_expanded_x, then MTE3 -> MTE2. A slot
whose index is outside [0, expandedXDim0) writes nothing. dropPadMode 1 zeroes grad_expanded_x first (InitOutput
per row, per piece for 10002) and meets the other cores at SyncAll (the kernel's schedule).
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import aicore, global_aicore

from .base import compute_rows, copy_in, copy_out, init_out_rows, valid_row

BUFFERS = ("gradYInQueue", "expandedRowIdxInQueue")
GRAD_Y_QUE, IDX_QUE = asc.buffer_ids(BUFFERS, "gradYInQueue", "expandedRowIdxInQueue")


@aicore
def _copy_in(c, td, gm, batch, col, n):
    """CopyIn(batchIdx[, innerLoopIdx]): grad_y[batch, col:col + n] and expanded_row_idx[batch] into UB."""
    grad_y_ub = asc.alloc_tensor(c, GRAD_Y_QUE, asc.ub_like(c, gm.grad_y))
    idx_ub = asc.alloc_tensor(c, IDX_QUE, asc.ub_i32(c))
    copy_in(c, grad_y_ub, asc.gm_at(gm.grad_y, np.int64(batch) * td.hidden + col), n)
    copy_in(c, idx_ub, asc.gm_at(gm.expanded_row_idx, batch), 1)
    asc.en_que(c, GRAD_Y_QUE, grad_y_ub)
    asc.en_que(c, IDX_QUE, idx_ub)


@aicore
def _copy_out(c, td, gm, col, n):
    """CopyOut([innerLoopIdx]): the piece to its row of grad_expanded_x when the index names a row."""
    grad_y_ub = asc.de_que(c, GRAD_Y_QUE, asc.ub_like(c, gm.grad_y))
    idx_ub = asc.de_que(c, IDX_QUE, asc.ub_i32(c))
    row = asc.get_value(c, idx_ub, 0)
    if valid_row(row, td):
        copy_out(c, asc.gm_at(gm.grad_expanded_x, np.int64(row) * td.hidden + col), grad_y_ub, n)
        asc.sync_pipes(c, asc.MTE3_MTE2)        # Mte3ToMte2
    asc.free_tensor(c, GRAD_Y_QUE, grad_y_ub)
    asc.free_tensor(c, IDX_QUE, idx_ub)


@global_aicore
def init_out_cut_h_stage(c, td, gm, tmpl):
    """Init with dropPadMode 1 (10002): InitOutCutH, the same rows zeroed piece by piece."""
    first, end = init_out_rows(c, td)
    for row in range(first, end):
        base = np.int64(row) * td.hidden
        for inner in range(td.hidden_inner_loops):
            asc.init_output(c, asc.gm_at(gm.grad_expanded_x, base + inner * td.hidden_pre_part), td.hidden_pre_part,
                            0)
        if td.hidden_last_part != 0:
            asc.init_output(c, asc.gm_at(gm.grad_expanded_x, base + td.hidden_inner_loops * td.hidden_pre_part),
                            td.hidden_last_part, 0)


@global_aicore
def not_cut_h_process(c, td, gm, tmpl):
    """Process() of 10001: one whole row per slot."""
    first, end = compute_rows(c, td)
    for batch in range(first, end):
        _copy_in(c, td, gm, batch, 0, td.hidden)
        _copy_out(c, td, gm, 0, td.hidden)


@global_aicore
def cut_h_process(c, td, gm, tmpl):
    """Process() of 10002: hiddenInnerLoops pieces of hiddenPrePart elements, then the hiddenLastPart piece."""
    first, end = compute_rows(c, td)
    for batch in range(first, end):
        for inner in range(td.hidden_inner_loops):
            _copy_in(c, td, gm, batch, inner * td.hidden_pre_part, td.hidden_pre_part)
            _copy_out(c, td, gm, inner * td.hidden_pre_part, td.hidden_pre_part)
        if td.hidden_last_part != 0:
            col = td.hidden_inner_loops * td.hidden_pre_part
            _copy_in(c, td, gm, batch, col, td.hidden_last_part)
            _copy_out(c, td, gm, col, td.hidden_last_part)
