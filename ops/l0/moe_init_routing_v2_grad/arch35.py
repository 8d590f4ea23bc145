"""MoeInitRoutingV2GradCompute<T, Mode>: keys 40000x, the catch-all for a large topK with a long H. The cores split
the N output rows; a core takes one row (n_ub_factor is always 1) and H in pieces of h_ub_factor, and the topK slots
k_ub_factor at a time: the first pass starts the fp32 sums in binaryAddBuf at +0.0, the later ones continue them; a
last VF casts them to T.

    inputQueue   (2 buffers)  n_ub_factor * k_ub_factor rows of h_ub_factor T
    outputQueue  (1 buffer)   n_ub_factor rows of h_ub_factor T
    binaryAddBuf (TBuf)       n_ub_factor rows of h_ub_factor fp32: the running sums

source: moe/moe_init_routing_v2_grad/op_kernel/arch35/moe_init_routing_v2_grad.h @ 25fb6b92890d.
"""
from __future__ import annotations

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import BLOCK_BYTES, aicore, global_aicore

from .base import F32_BYTES, VL_F32, copy_in, copy_out, load_t, sequence_reduce_sum, store_t, to_ub_end

BUFFERS = ("inputQueue", "outputQueue", "binaryAddBuf")
INPUT_QUEUE, OUTPUT_QUEUE, BINARY_ADD_BUF = asc.buffer_ids(BUFFERS, "inputQueue", "outputQueue", "binaryAddBuf")


@aicore
def _update_k(c, tmpl, T, tmp_buf, with_init, cur_n, cur_k, cur_h, cur_h_align, k_ub_factor):
    """UpdateKWithInit / UpdateK: SequenceReduceSum<T, float, withInit> of one pass of slots into binaryAddBuf."""
    input_ub = asc.de_que(c, INPUT_QUEUE, T)
    sequence_reduce_sum(c, tmpl, input_ub, tmp_buf, with_init, cur_n, cur_k, cur_h, cur_h_align, k_ub_factor)
    asc.free_tensor(c, INPUT_QUEUE, input_ub)


@aicore
def _compute(c, tmpl, T, tmp_buf, cur_n, cur_h_align):
    """Compute: the VF that casts cur_n * HAlign fp32 sums to T in the output buffer (UpdateMask tail)."""
    output_ub = asc.alloc_tensor(c, OUTPUT_QUEUE, T)
    update_num = (cur_n * cur_h_align) & 0xFFFFFFFF
    loops = ((update_num + VL_F32 - 1) // VL_F32) & 0xFFFF
    src = to_ub_end(c, tmp_buf)
    if asc.vec_scope_begin(c):
        x = asc.vreg_f32(c, 0)
        preg = asc.mreg(c, 1)
        sreg = update_num
        for d in range(loops):
            sreg = asc.update_mask(c, preg, F32_BYTES, sreg)
            load_t(c, tmpl, src, x, preg, d * VL_F32)
            store_t(c, tmpl, output_ub, x, preg, d * VL_F32)
        asc.vec_scope_end(c)
    asc.en_que(c, OUTPUT_QUEUE, output_ub)


@global_aicore
def arch35_process(c, td, gm, tmpl):
    """Init + Process of one core."""
    T = asc.ub_like(c, gm.grad_expanded_x)
    block_idx = c.block_idx
    single_n = td.n - td.n_block_factor * (td.num_blocks - 1) if block_idx == td.num_blocks - 1 else td.n_block_factor
    index_gm = asc.gm_at(gm.expanded_row_idx, td.n_block_factor * block_idx * td.k)
    output_gm = asc.gm_at(gm.grad_x, td.n_block_factor * block_idx * td.h)
    tmp_buf = asc.tbuf_get(c, BINARY_ADD_BUF, asc.ub_f32(c))
    n_quot = (single_n + td.n_ub_factor - 1) // td.n_ub_factor
    h_quot = (td.h + td.h_ub_factor - 1) // td.h_ub_factor
    k_quot = (td.k + td.k_ub_factor - 1) // td.k_ub_factor
    for n_loop in range(n_quot):
        cur_n = single_n - (n_quot - 1) * td.n_ub_factor if n_loop == n_quot - 1 else td.n_ub_factor
        n_index_offset = n_loop * td.n_ub_factor * td.k
        n_output_offset = n_loop * td.n_ub_factor * td.h
        for h_loop in range(h_quot):
            cur_h = td.h - (h_quot - 1) * td.h_ub_factor if h_loop == h_quot - 1 else td.h_ub_factor
            cur_h_align = (cur_h * T.itemsize + BLOCK_BYTES - 1) // BLOCK_BYTES * BLOCK_BYTES // T.itemsize
            input_offset = h_loop * td.h_ub_factor
            # ProcessUB: CopyInAndUpdateAllK, Compute, CopyOut
            for k_loop in range(k_quot):
                cur_k = td.k - (k_quot - 1) * td.k_ub_factor if k_loop == k_quot - 1 else td.k_ub_factor
                copy_in(c, td, tmpl, gm.grad_expanded_x, index_gm, INPUT_QUEUE,
                        n_index_offset + k_loop * td.k_ub_factor, cur_n, cur_k, td.k_ub_factor * cur_h_align,
                        input_offset, cur_h, cur_h_align)
                _update_k(c, tmpl, T, tmp_buf, k_loop == 0, cur_n, cur_k, cur_h, cur_h_align, td.k_ub_factor)
            _compute(c, tmpl, T, tmp_buf, cur_n, cur_h_align)
            copy_out(c, td, output_gm, OUTPUT_QUEUE, n_output_offset + input_offset, cur_n, cur_h)


