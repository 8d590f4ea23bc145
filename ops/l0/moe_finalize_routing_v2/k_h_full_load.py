"""MoeFinalizeRoutingV2KHFullLoad, keys 40020 / 40021 / 40022.

source: moe/moe_finalize_routing_v2/op_kernel/arch35/moe_finalize_routing_v2_k_h_full_load.h @ 25fb6b92890d

Per loop rowFactor tokens: their scales (and, for k == 1, their indices) are copied in at once. Three paths:
* k == 1 (ProcessYWithInputK1): the rows of all the loop's tokens go side by side (hAligned apart) into one buffer
  and one VF per token adds its row with validK 1 whatever the index said: a skipped slot (-1, or past activeNum)
  adds whatever that part of the buffer holds from before (the real kernel's behaviour; results for such slots are
  not defined).
* 2 <= k <= 4 with rowFactor >= 16 (ProcessYWithInputK4): 16 tokens per batch; a batch's valid slots are copied
  side by side (k * hAligned per token, validK per token kept), then one VF per token adds them in slot order, and
  the next batch is copied after that batch's VFs were issued (double-buffered expandedXQue).
* otherwise (ProcessYWithInput): per token the valid slots' rows are copied side by side and one VF adds them.
"""
from __future__ import annotations

import numpy as np

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

BATCH_COPY_SIZE = 16            # tokens per copy batch of ProcessYWithInputK4
BATCH_COPY_EXPERT_NUM = 4       # the largest k of that path

# queue indices per InitBuffer order: k == 1 has the index queue second
BUFFERS = ("expandedXQue", "yQue")
BUFFERS_SCALES = BUFFERS + ("scalesQue",)
(X_QUE,) = asc.buffer_ids(BUFFERS, "expandedXQue")
BUFFERS_K1 = ("expandedXQue", "expandedRowIdxQue", "yQue")
BUFFERS_K1_SCALES = BUFFERS_K1 + ("scalesQue",)


@aicore
def _process_expanded_x_and_scale(c, td, gm, tmpl, x_local, x_off, scales_local, first_row, row_inner):
    """ProcessExpandedXBiasAndScale: the valid slots of token row_inner copied to x_local[x_off + validK * hAligned]
    with their scales packed to the front of the token's k scales; returns validK."""
    valid_k = 0
    for k_idx in range(td.k):
        idx = asc.get_value(c, gm.expanded_row_idx, (first_row + row_inner) * td.k + k_idx)
        if skipped(idx, td.active_num, tmpl.drop_pad_mode):
            continue
        copy_in(c, x_local[x_off + valid_k * td.h_aligned:], asc.gm_at(gm.expanded_x, idx * td.h), td.h)
        if tmpl.has_scales:
            set_scale(c, tmpl.s_t, scales_local, row_inner * td.k + valid_k,
                      get_scale(c, tmpl.s_t, scales_local, row_inner * td.k + k_idx))
        valid_k += 1
    return valid_k


@aicore
def _process_y_with_input(c, td, gm, tmpl, y_local, scales_local, first_row, row_inner_loop):
    """ProcessYWithInput: one token's k rows per expandedXQue buffer."""
    for row_inner in range(row_inner_loop):
        x_local = asc.alloc_tensor(c, X_QUE, asc.ub_like(c, gm.expanded_x))
        valid_k = _process_expanded_x_and_scale(c, td, gm, tmpl, x_local, 0, scales_local, first_row, row_inner)
        asc.en_que(c, X_QUE, x_local)
        x_local = asc.de_que(c, X_QUE, asc.ub_like(c, gm.expanded_x))
        if tmpl.has_scales:
            asc.sync_pipes(c, asc.S_V)
        process_expand_x_scale_optimized(c, y_local, row_inner * td.h, x_local, 0, scales_local, row_inner * td.k,
                                         valid_k, tmpl.has_scales, tmpl.x_t, tmpl.s_t, td.h)
        asc.free_tensor(c, X_QUE, x_local)
    cast_y(c, y_local, tmpl.x_t, row_inner_loop * td.h)


@aicore
def _load_batch(c, td, gm, tmpl, scales_local, first_row, batch_start, batch_size, valid_k_arr):
    """LoadBatchAsync: the valid slots of batch_size tokens, k * hAligned apart per token, into one buffer."""
    x_local = asc.alloc_tensor(c, X_QUE, asc.ub_like(c, gm.expanded_x))
    offset = 0
    for i in range(batch_size):
        valid_k_arr[i] = _process_expanded_x_and_scale(c, td, gm, tmpl, x_local, offset, scales_local, first_row,
                                                       batch_start + i)
        offset += td.k * td.h_aligned
    asc.en_que(c, X_QUE, x_local)


@aicore
def _compute_batch(c, td, gm, tmpl, y_local, scales_local, batch_start, batch_size, valid_k_arr):
    """ComputeBatch: one VF per token of the batch (no S_V event after the scales were packed: see kernel.py)."""
    x_local = asc.de_que(c, X_QUE, asc.ub_like(c, gm.expanded_x))
    offset = 0
    for i in range(batch_size):
        row_inner = batch_start + i
        process_expand_x_scale_optimized(c, y_local, row_inner * td.h, x_local, offset, scales_local,
                                         row_inner * td.k, valid_k_arr[i], tmpl.has_scales, tmpl.x_t, tmpl.s_t, td.h)
        offset += td.k * td.h_aligned
    asc.free_tensor(c, X_QUE, x_local)


@aicore
def _process_y_with_input_k4(c, td, gm, tmpl, y_local, scales_local, first_row, row_inner_loop):
    """ProcessYWithInputK4: batches of 16 tokens; batch b + 1 is copied after batch b's VFs were issued."""
    num_batches = (row_inner_loop + BATCH_COPY_SIZE - 1) // BATCH_COPY_SIZE
    valid_k_arr = np.zeros(BATCH_COPY_SIZE, np.int64)       # validKArr[BATCH_COPY_SIZE]
    if num_batches > 0:
        _load_batch(c, td, gm, tmpl, scales_local, first_row, 0, min(BATCH_COPY_SIZE, row_inner_loop),
                    valid_k_arr)
    for batch_idx in range(num_batches):
        batch_start = batch_idx * BATCH_COPY_SIZE
        _compute_batch(c, td, gm, tmpl, y_local, scales_local, batch_start,
                       min(BATCH_COPY_SIZE, row_inner_loop - batch_start), valid_k_arr)
        if batch_idx + 1 < num_batches:
            next_start = batch_start + BATCH_COPY_SIZE
            _load_batch(c, td, gm, tmpl, scales_local, first_row, next_start,
                        min(BATCH_COPY_SIZE, row_inner_loop - next_start), valid_k_arr)
    cast_y(c, y_local, tmpl.x_t, row_inner_loop * td.h)


@aicore
def _process_y_with_input_k1(c, td, gm, tmpl, y_local, scales_local, idx_local, row_inner_loop):
    """ProcessYWithInputK1: one buffer for the loop's rows, EnQue / DeQue and one VF per token."""
    x_local = asc.alloc_tensor(c, X_QUE, asc.ub_like(c, gm.expanded_x))
    asc.sync_pipes(c, asc.MTE2_S)       # the indices are read by the scalar unit
    h_offset = 0
    kh_offset = 0
    for row_inner in range(row_inner_loop):
        # ProcessExpandedXBiasAndScaleK1
        idx = asc.get_value(c, idx_local, row_inner)
        if not skipped(idx, td.active_num, tmpl.drop_pad_mode):
            copy_in(c, x_local[kh_offset:], asc.gm_at(gm.expanded_x, idx * td.h), td.h)
            if tmpl.has_scales:
                # the kernel writes the token's scale back onto itself (SetValue(0, GetValue(0)))
                set_scale(c, tmpl.s_t, scales_local, row_inner, get_scale(c, tmpl.s_t, scales_local, row_inner))
        asc.en_que(c, X_QUE, x_local)
        x_local = asc.de_que(c, X_QUE, asc.ub_like(c, gm.expanded_x))
        process_expand_x_scale_optimized(c, y_local, h_offset, x_local, kh_offset, scales_local, row_inner, 1,
                                         tmpl.has_scales, tmpl.x_t, tmpl.s_t, td.h)
        h_offset += td.h
        kh_offset += td.h_aligned           # khAligned = k * hAligned with k == 1
    asc.free_tensor(c, X_QUE, x_local)
    cast_y(c, y_local, tmpl.x_t, row_inner_loop * td.h)


@global_aicore
def k_h_full_load_stage(c, td, gm, tmpl):
    """Process()."""
    k1 = td.k == 1
    idx_que = 1
    y_que = 2 if k1 else 1
    scales_que = y_que + 1
    last = c.block_idx == c.block_num - 1
    row_outer_loop = td.row_loop_of_tail_block if last else td.row_loop_of_former_block
    tail_row_factor = td.tail_row_factor_of_tail_block if last else td.tail_row_factor_of_former_block
    for row_outer in range(row_outer_loop):
        row_inner_loop = tail_row_factor if row_outer == row_outer_loop - 1 else td.row_factor
        first_row = c.block_idx * td.row_of_former_block + row_outer * td.row_factor
        scales_local = asc.ub_u16(c)
        if tmpl.has_scales:
            scales_local = asc.alloc_tensor(c, scales_que, asc.ub_u16(c))
            scales_copy_in(c, gm, tmpl.s_t, scales_local, first_row * td.k, row_inner_loop * td.k)
            asc.en_que(c, scales_que, scales_local)
            scales_local = asc.de_que(c, scales_que, asc.ub_u16(c))
        idx_local = asc.ub_i32(c)
        if k1:
            idx_local = asc.alloc_tensor(c, idx_que, asc.ub_i32(c))
            copy_in(c, idx_local, asc.gm_at(gm.expanded_row_idx, first_row), row_inner_loop)
            asc.en_que(c, idx_que, idx_local)
            idx_local = asc.de_que(c, idx_que, asc.ub_i32(c))
        y_local = asc.alloc_tensor(c, y_que, asc.ub_f32(c))
        zero_y(c, y_local, row_inner_loop * td.h)
        if k1:
            _process_y_with_input_k1(c, td, gm, tmpl, y_local, scales_local, idx_local, row_inner_loop)
        elif td.k <= BATCH_COPY_EXPERT_NUM and td.row_factor >= BATCH_COPY_SIZE:
            _process_y_with_input_k4(c, td, gm, tmpl, y_local, scales_local, first_row, row_inner_loop)
        else:
            _process_y_with_input(c, td, gm, tmpl, y_local, scales_local, first_row, row_inner_loop)
        asc.en_que(c, y_que, y_local)
        if tmpl.has_scales:
            asc.free_tensor(c, scales_que, scales_local)
        if k1:
            asc.free_tensor(c, idx_que, idx_local)
        y_local = asc.de_que(c, y_que, asc.ub_f32(c))
        store_y(c, gm.y, y_local, first_row * td.h, row_inner_loop * td.h)
        asc.free_tensor(c, y_que, y_local)
