"""The SIMT template of MoeInplaceIndexAdd (keys 10abdd; op_host/arch35/moe_inplace_index_add_simt_tiling.cpp): one
thread per updates element, no id window. Only the 8/16-bit int and bool var take UB (a var piece and its int32 /
fp16 accumulator copy) and a workspace copy of var.

source: moe/3rd/moe_inplace_index_add/op_host/arch35/moe_inplace_index_add_simt_tiling.cpp @ 25fb6b92890d.
"""
from __future__ import annotations

from ascend_sim.pipe import UbBuffer

from ..common import BLOCK_BYTES, TilingResult, align_down, align_up, ceil_div, struct_fields, tdiv
from .base import GE_CODE, GM_ALIGN, KEY_SIMT, LIB_WORKSPACE, Shapes, cast_size, wide_offsets

SIMT_FIELDS = ("pre_axis", "var_in_axis", "updates_in_axis", "after_axis", "ub_factor", "col_ub_factor",
               "indices_stride", "indices_ub_factor")

SIMT_THREADS_PER_CORE = 1024    # MAX_THREAD_NUM of the SIMT tiling (the kernel launches 2048 threads per core)
SIMT_UB_MAX = 64 * 1024         # USE_UB_MAX_SIZE: the SIMT template's local memory


def simt_tiling_key(s: Shapes) -> int:
    return KEY_SIMT + GE_CODE[s.dtype] + 100 * wide_offsets(s) + 1000 * s.with_alpha


def simt(s: Shapes, soc, ub_size: int) -> TilingResult:
    """The SIMT tiling; ub_size: the UB left after the SIMT data cache, bytes."""
    used = min(ceil_div(s.updates_axis, SIMT_THREADS_PER_CORE), soc.aiv_num)
    local_ub = min(ub_size, SIMT_UB_MAX)
    cast = cast_size(s.dtype)
    ub_factor = 0
    plan: tuple = ()
    if s.dtype in ("int16", "int8", "uint8", "bool"):
        length = tdiv(local_ub, cast + s.var_size)
        ub_factor = align_down(length, tdiv(BLOCK_BYTES, s.var_size))
        plan = (UbBuffer("varQue_", ub_factor * s.var_size, 1, "TQue", "VECIN", 1),
                UbBuffer("varCastQue_", ub_factor * cast, 1, "TQue", "VECIN", 1))
    f = struct_fields(SIMT_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, ub_factor=ub_factor, col_ub_factor=0, indices_stride=1, indices_ub_factor=1)
    workspace = LIB_WORKSPACE + (align_up(s.var_axis * cast, GM_ALIGN) if cast else 0)
    return TilingResult(tiling_key=simt_tiling_key(s), block_dim=used, workspace_size=workspace, fields=f,
                        ub_plan=plan, schedule_mode=1, soc=soc)
