"""MoeInitRoutingV2GradSplitHCompute<T, Mode>: keys 20000x, for few output rows and a long H. The cores split H
(h_block_factor columns each, the last core the rest); a core walks its columns in pieces of h_ub_factor and, for each
piece, the N rows k_ub_factor at a time with all topK slots.

    inputQueue  (2 buffers)  k_ub_factor * k rows of AlignUp(h_ub_factor * sizeof(T), 32) bytes
    outputQueue (1 buffer)   k_ub_factor rows of the same size

source: moe/moe_init_routing_v2_grad/op_kernel/arch35/moe_init_routing_v2_grad_split_h.h @ 25fb6b92890d.
"""
from __future__ import annotations

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore

from .base import copy_in, copy_out, sequence_reduce_sum

BUFFERS = ("inputQueue", "outputQueue")
INPUT_QUEUE, OUTPUT_QUEUE = asc.buffer_ids(BUFFERS, "inputQueue", "outputQueue")


@aicore
def _compute(c, tmpl, T, cur_rows, k, cur_h, cur_h_align):
    """Compute: SequenceReduceSum<T, T, true> from the DeQue'd input into a fresh output buffer."""
    input_ub = asc.de_que(c, INPUT_QUEUE, T)
    output_ub = asc.alloc_tensor(c, OUTPUT_QUEUE, T)
    sequence_reduce_sum(c, tmpl, input_ub, output_ub, True, cur_rows, k, cur_h, cur_h_align, k)
    asc.free_tensor(c, INPUT_QUEUE, input_ub)
    asc.en_que(c, OUTPUT_QUEUE, output_ub)


@global_aicore
def split_h_process(c, td, gm, tmpl):
    """Init + Process of one core."""
    T = asc.ub_like(c, gm.grad_expanded_x)
    block_idx = c.block_idx
    output_gm = asc.gm_at(gm.grad_x, td.h_block_factor * block_idx)
    cur_block_h = td.h_block_factor
    if block_idx == td.num_blocks - 1:
        cur_block_h = td.h_block_factor if td.h % td.h_block_factor == 0 else td.h % td.h_block_factor
    split_h_loops = (cur_block_h + td.h_ub_factor - 1) // td.h_ub_factor
    cur_sub_h = td.h_ub_factor
    for split_h in range(split_h_loops):
        if split_h == split_h_loops - 1:
            cur_sub_h = td.h_ub_factor if cur_block_h % td.h_ub_factor == 0 else cur_block_h % td.h_ub_factor
        cur_sub_h_align = (cur_sub_h * T.itemsize + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // T.itemsize
        loops = ((td.n + td.k_ub_factor - 1) // td.k_ub_factor) & 0xFFFFFFFF      # uint32_t loopCnt
        cur_rows = td.k_ub_factor
        for loop_idx in range(loops):
            if loop_idx == loops - 1:
                cur_rows = td.k_ub_factor if td.n % td.k_ub_factor == 0 else td.n % td.k_ub_factor
            output_offset = split_h * td.h_ub_factor + loop_idx * td.h * td.k_ub_factor
            input_offset = block_idx * td.h_block_factor + split_h * td.h_ub_factor
            # ProcessUB: CopyIn, Compute, CopyOut
            copy_in(c, td, tmpl, gm.grad_expanded_x, gm.expanded_row_idx, INPUT_QUEUE,
                    loop_idx * td.k_ub_factor * td.k, cur_rows, td.k, td.k * cur_sub_h_align, input_offset,
                    cur_sub_h, cur_sub_h_align)
            _compute(c, tmpl, T, cur_rows, td.k, cur_sub_h, cur_sub_h_align)
            copy_out(c, td, output_gm, OUTPUT_QUEUE, output_offset, cur_rows, cur_sub_h)
