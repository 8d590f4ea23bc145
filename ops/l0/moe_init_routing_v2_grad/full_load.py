"""MoeInitRoutingV2GradFullLoadCompute<T, Mode>: keys 30000x. The cores split the N output rows (n_block_factor each,
the last the rest); a core takes n_ub_factor rows at a time with all topK slots, and H in pieces of h_ub_factor (one
piece when H fits the UB).

    inputQueue  (2 buffers)  n_ub_factor * k rows of h_ub_factor T: the slots' row pieces, UB row stride HAlign
    outputQueue (1 buffer)   n_ub_factor rows of h_ub_factor T: the sums, cast to T by the VF's stores

source: moe/moe_init_routing_v2_grad/op_kernel/arch35/moe_init_routing_v2_grad_full_load.h @ 25fb6b92890d.
"""
from __future__ import annotations

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore

from .base import copy_in, copy_out, sequence_reduce_sum

BUFFERS = ("inputQueue", "outputQueue")
INPUT_QUEUE, OUTPUT_QUEUE = asc.buffer_ids(BUFFERS, "inputQueue", "outputQueue")


@aicore
def _compute(c, tmpl, T, cur_n, k, cur_h, cur_h_align):
    """Compute: SequenceReduceSum<T, T, true> from the DeQue'd input into a fresh output buffer."""
    input_ub = asc.de_que(c, INPUT_QUEUE, T)
    output_ub = asc.alloc_tensor(c, OUTPUT_QUEUE, T)
    sequence_reduce_sum(c, tmpl, input_ub, output_ub, True, cur_n, k, cur_h, cur_h_align, k)
    asc.free_tensor(c, INPUT_QUEUE, input_ub)
    asc.en_que(c, OUTPUT_QUEUE, output_ub)


@global_aicore
def full_load_process(c, td, gm, tmpl):
    """Init + Process of one core."""
    T = asc.ub_like(c, gm.grad_expanded_x)
    block_idx = c.block_idx
    single_n = td.n - td.n_block_factor * (td.num_blocks - 1) if block_idx == td.num_blocks - 1 else td.n_block_factor
    index_gm = asc.gm_at(gm.expanded_row_idx, td.n_block_factor * block_idx * td.k)
    output_gm = asc.gm_at(gm.grad_x, td.n_block_factor * block_idx * td.h)
    n_quot = (single_n + td.n_ub_factor - 1) // td.n_ub_factor
    h_quot = (td.h + td.h_ub_factor - 1) // td.h_ub_factor
    for n_loop in range(n_quot):
        cur_n = single_n - (n_quot - 1) * td.n_ub_factor if n_loop == n_quot - 1 else td.n_ub_factor
        n_index_offset = n_loop * td.n_ub_factor * td.k
        n_output_offset = n_loop * td.n_ub_factor * td.h
        for h_loop in range(h_quot):
            cur_h = td.h - (h_quot - 1) * td.h_ub_factor if h_loop == h_quot - 1 else td.h_ub_factor
            cur_h_align = (cur_h * T.itemsize + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // T.itemsize
            input_offset = h_loop * td.h_ub_factor
            # ProcessUB: CopyIn, Compute, CopyOut
            copy_in(c, td, tmpl, gm.grad_expanded_x, index_gm, INPUT_QUEUE, n_index_offset, cur_n, td.k,
                    td.k * cur_h_align, input_offset, cur_h, cur_h_align)
            _compute(c, tmpl, T, cur_n, td.k, cur_h, cur_h_align)
            copy_out(c, td, output_gm, OUTPUT_QUEUE, n_output_offset + input_offset, cur_n, cur_h)
