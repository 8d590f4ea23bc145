"""MoeInplaceIndexAddSimt (op_kernel/arch35/moe_inplace_index_add_simt.h): keys 100000 + dtype, no alpha, float32 /
float16 / bfloat16 var (the dtypes the routing-map chains pass).

source: moe/3rd/moe_inplace_index_add/op_kernel/arch35/moe_inplace_index_add_simt.h @ 25fb6b92890d.

One SIMT call per core of USED_THREAD (2048) threads walks the updates elements in a grid-stride loop (element
i = blockIdx * 2048 + threadIdx, step blockNum * 2048). Element i is (pre d0, index row d1, column d2); it is added
to var[d0, indices[d1], d2] with one atomic add in var's own type (asc_atomic_add: fp32 rounded half to even,
fp16 / bf16 rounded to the half type after every add). Several threads and cores may add to one element, so
float results depend on the order the adds land in (checked against a bound, not bit for bit).

Offsets are COMP_T: uint32 for keys 1000xx (every offset below INT32_MAX), uint64 for 1001xx; the index is
cast to COMP_T unchecked, so a negative or too large index makes an offset outside var: the simulator faults
there (OutOfBoundsError naming the thread) where the chip would write outside the tensor. The int8 / uint8 /
int16 / bool variants (an int32 copy of var in the workspace, SyncAll before and after) are not modelled.
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.kernel_api import global_aicore

USED_THREAD = 2048
U32_MASK = 0xFFFFFFFF

BUFFERS = ()          # the float variants build no UB buffer


@global_aicore
def simt_process(c, td, gm, tmpl):
    """Process: the SimtCompute call (GetUintDivMagicAndShift's divisions are plain divisions here)."""
    after = np.int64(td.after_axis)
    updates_stride0 = td.updates_in_axis * after
    updates_axis = td.pre_axis * updates_stride0
    var_stride0 = td.var_in_axis * after
    narrow = tmpl.wide_offsets == 0
    sc = asc.simt_vf_call(c, USED_THREAD, 1, 1)
    for t in range(sc.threads):
        th = asc.simt_thread(c, sc, t)
        step = np.int64(c.block_num) * asc.thread_num(th, 0)
        i = np.int64(c.block_idx) * asc.thread_num(th, 0) + asc.thread_idx(th, 0)
        while i < updates_axis:
            d0 = i // updates_stride0
            rem = i - d0 * updates_stride0
            d1 = rem // after
            d2 = rem - d1 * after
            index = np.int64(asc.simt_load(c, th, gm.indices, d1))
            if narrow:      # uint32 arithmetic: the index reinterpreted, every product and sum wrapped
                offset = (d0 * var_stride0 + ((index & U32_MASK) * after & U32_MASK) + d2) & U32_MASK
            else:
                offset = d0 * var_stride0 + index * after + d2
            asc.simt_atomic_add(c, th, gm.var, offset, asc.simt_load(c, th, gm.updates, i), tmpl.var_t)
            i += step
    asc.simt_end(c, sc)
