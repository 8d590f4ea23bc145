"""What the MoeFinalizeRoutingV2Grad arch35 templates share (op_kernel/arch35/moe_finalize_routing_v2_grad_base.h for
the without-scale classes, ..._regbase.h for the with-scale ones).

source: moe/moe_finalize_routing_v2_grad/op_kernel/arch35/moe_finalize_routing_v2_grad_base.h and
moe_finalize_routing_v2_grad_regbase.h @ 25fb6b92890d.

* the two core splits: `init_out_rows` (the dropPadMode 1 zeroing of grad_expanded_x, GetInitOutBatches /
  InitOutputGm) and `compute_rows` (the slots, GetSubProcessBatches / ComputeLoopParam): core b takes
  eachCoreBatchNum rows, one more when b < modCoreNum, none from needCoreNum on;
* `valid_row`: a slot writes (and reads) a row only when 0 <= expandedRowIdx < expandedXDim0;
* `load_t` / `store_t`: LoadOneTensorForDtypeT / StoreOneTensorForDtypeT of op_kernel/load_store_utils.h: fp32 as it
  is, 16-bit elements unpacked and widened (CAST_NONE, exact) / narrowed CAST_RINT and packed.

Tokens (T) arrive as carriers (uint16 for fp16 / bf16, float32), the scales (S) as both views of their bytes
(kernel.GmTensors); `x_t` / `s_t` in the template are the ge dtype codes.
"""
from __future__ import annotations

import numpy as np

import ascend_sim.kernel_api as asc
from ascend_sim.dtypes import CAST_RINT, DT_BF16, DT_FLOAT
from ascend_sim.kernel_api import aicore, global_aicore

from ..moe_finalize_routing_v2.base import copy_in, copy_out  # noqa: F401  (one-burst DataCopyPad in / out)
from ..moe_init_routing_v2_grad.base import to_ub_end  # noqa: F401  (the VF loads' UB reach)

VL_F32 = 64              # fp32 lanes of a vector register (GetVRegSize / sizeof(float))
F32_BYTES = 4
_HALF_REG = 30           # the 16-bit scratch register of load_t / store_t

reduce_sum = asc.vreduce_sum
"""MicroAPI::ReduceSum as the templates use it: the one place that fixes the in-register lane order, which is not
published. ascend_sim.regbase.vreduce_sum adds the active lanes as a pairwise tree of adjacent lanes, inactive lanes
+0; bind another register-level reduction here to try a different order (the tests' LANE_TREE is its golden)."""


@aicore
def _rows(block_idx, need, each, mod):
    """(first, end) of a core's share: `each` rows, one more for the first `mod` cores, none past `need`."""
    if block_idx < mod:
        first = block_idx * (each + 1)
        return first, first + each + 1
    if block_idx < need:
        first = block_idx * each + mod
        return first, first + each
    return 0, 0


@aicore
def init_out_rows(c, td):
    """GetInitOutBatches / InitOutputGm: the rows of grad_expanded_x this core zeroes (dropPadMode 1)."""
    return _rows(c.block_idx, td.init_out_need_core_num, td.init_out_each_core_batch_num, td.init_out_mod_core_num)


@aicore
def compute_rows(c, td):
    """GetSubProcessBatches / ComputeLoopParam: the slots (expanded_row_idx entries) this core processes."""
    return _rows(c.block_idx, td.compute_need_core_num, td.compute_each_core_batch_num, td.compute_mod_core_num)


@aicore
def valid_row(row, td):
    """The kernels' test of an expanded_row_idx value: a row of grad_expanded_x / expanded_x."""
    return row >= 0 and row < td.expanded_x_dim0


@global_aicore
def init_out_not_cut_h_stage(c, td, gm, tmpl):
    """Init with dropPadMode 1 (10001 InitOutNotCutH, 20011 InitOutputGm): InitOutput<T>(row, hidden, 0) for each
    grad_expanded_x row of this core, before SyncAll."""
    first, end = init_out_rows(c, td)
    for row in range(first, end):
        asc.init_output(c, asc.gm_at(gm.grad_expanded_x, np.int64(row) * td.hidden), td.hidden, 0)


@aicore
def load_t(c, t, src, dst, preg, offset):
    """LoadOneTensorForDtypeT<T>(src, dst, preg, offset): a whole-register DataCopy for fp32 (the mask is not
    applied), UNPACK_B16 + Cast CAST_NONE under preg (inactive lanes zeroed) for fp16 / bf16."""
    if src.itemsize == F32_BYTES:
        asc.reg_load(c, dst, src, offset, asc.LOAD_NORM)
    else:
        h = asc.vreg_u16(c, _HALF_REG)
        asc.reg_load_unpack_b16(c, h, src, offset)
        asc.vcast_half_to_f32(c, dst, h, t, asc.LAYOUT_ZERO, preg)


@aicore
def store_t(c, t, dst, src, preg, offset):
    """StoreOneTensorForDtypeT<T>(dst, src, preg, offset): fp32 lanes as they are, or Cast CAST_RINT to fp16 / bf16
    and a PACK_B32 store; inactive lanes leave UB as it was."""
    if t == DT_FLOAT:
        asc.reg_store(c, dst, src, offset, preg)
    else:
        h = asc.vreg_u16(c, _HALF_REG)
        if t == DT_BF16:
            asc.vcast_f32_to_bf16(c, h, src, CAST_RINT, asc.LAYOUT_ZERO, preg)
        else:
            asc.vcast_f32_to_f16(c, h, src, CAST_RINT, asc.LAYOUT_ZERO, preg)
        asc.reg_store_pack_b32(c, dst, h, offset, preg)
