"""Tiling of MoeInitRoutingV3 on Ascend 950 (the arch35 / regbase template).

source: moe/moe_init_routing_v3/op_host/moe_init_routing_v3_tiling_arch35.cpp,
moe/moe_init_routing_v3/op_kernel/arch35/moe_init_routing_v3_arch35_tiling_def.h,
moe/moe_init_routing_v3/op_host/moe_init_routing_v3_def.cpp and moe/moe_init_routing_v3/op_kernel/
moe_init_routing_v3_apt.cpp (the keys' kernels) @ 25fb6b92890d

The op sorts the flat expert ids of x's rows (one core, or VBS cores + VMS merges + SortOut), counts tokens per
expert and gathers (optionally quantises) the rows into expanded_x. The tiling checks attributes, inputs and
outputs in the real order (checks.py), fills the sub-structs of MoeInitRoutingV3Arch35TilingData (68 int64 fields,
base.FIELDS; formulas.py), picks the template and the workspace (key_workspace.py) and lists the kernels' UB
buffers (buffers.py). Only the 950 (npu_arch 3510) runs this tiling; A2/A3 have another one.

Tensors are TensorDesc, arrays, or (shape, dtype-name) pairs; dtype names for the types numpy lacks:
"hifloat8", "float4_e2m1", "int4", "float8_e8m0" (ml_dtypes' float8_e8m0fnu / float4_e2m1fn / int4 also work).
An MXFP4 expanded_x may also be the project's packed uint8 array (last dim ceil(cols / 2) bytes).
"""
from __future__ import annotations

import numpy as np

from ..common import TilingResult, memoised_tiling, struct_fields, tdiv
from ..platform import get_soc
from .base import *  # noqa: F401,F403  (the constants and field tuples are this module's public names)
from .base import (
    DROPPAD,
    EMPTY_TENSOR_TILINGKEY,
    FIELDS,
    FP8_BLOCK_SIZE,
    FP8_GROUP,
    FP8_PERBLOCK,
    MX_QUANT,
    MX_QUANT_BLOCK_SIZE,
    SIMT_DCACHE_SIZE,
    SIZE,
    SORT32_ALIGN_ELEMENT,
    SORT_API_MAX_ELEM,
    Ctx,
    desc,
    fail,
    mxfp8_no_quant,
    mxfpx_no_quant,
)
from .buffers import empty_tensor_plan, ub_plan  # noqa: F401
from .checks import (
    check_outputs,
    check_set_attrs,
    check_set_empty_tensor,
    check_set_inputs,
    check_set_list_attrs,
)
from .formulas import (
    expert_tokens_count,
    fp8_max_indices,
    gather_out,
    gather_out_drop_pad,
    gather_out_mxfp8_no_quant,
    gather_out_quant,
    is_full_load,
    mx_max_indices,
    src_to_dst_drop_pad,
    vbs,
    vms_middle_and_sort_out,
)
from .key_workspace import empty_tensor_workspace, tiling_key, workspace


@memoised_tiling
def moe_init_routing_v3(x, expert_idx, scale=None, offset=None, *, active_num=-1, expert_capacity=-1, expert_num=-1,
                        drop_pad_mode=0, expert_tokens_num_type=0, expert_tokens_num_flag=False, quant_mode=-1,
                        active_expert_range=(), row_idx_type=0, expanded_x_out=None, expanded_row_idx_out=None,
                        expert_tokens_count_or_cumsum_out=None, expanded_scale_out=None,
                        soc="ascend950") -> TilingResult:
    """Host tiling of MoeInitRoutingV3 on the 950 (arch35) for one chip profile (DoOpTiling, lines 503-551, then
    GetTilingKey, GetWorkspaceSize, PostTiling).

    x (n, cols) and expert_idx (n, k) int32; scale / offset optional. Attributes and their defaults are the
    OpDef's (active_expert_range is a [start, end) pair of expert ids). The outputs default to the shapes and
    dtypes the tiling expects; give them to reproduce its output checks. Raises TilingError (561002) with the
    argument and rule wherever the real tiling returns GRAPH_FAILED, in the same order. `ub_plan` holds the
    phases buffers.ub_plan models (empty-tensor zeroing, sort, expert-token count, row-index gather, drop-pad
    gather, the unquantised and MX gathers) for core 0. block_dim is every vector core (1 for the empty
    tensor), schedule mode 1 (the kernels SyncAll).
    """
    soc = get_soc(soc)
    if not soc.is_regbase:
        fail(f"this function models the arch35 (Ascend 950, npu_arch 3510) tiling only; profile {soc.name} has "
             f"npu_arch {soc.npu_arch}, whose MoeInitRoutingV3 tiling is another one")
    c = Ctx()
    c.f = f = struct_fields(FIELDS)
    # CheckSetPlatformInfo (lines 464-490)
    c.aiv = soc.aiv_num
    f["core_num"] = c.aiv
    total_ub = soc.ub_size_for_tiling
    c.avail_ub = total_ub - SIMT_DCACHE_SIZE
    if total_ub <= 0 or c.avail_ub <= 0:
        fail(f"UB of {total_ub} bytes leaves nothing after the {SIMT_DCACHE_SIZE}-byte SIMT data cache")

    # DoGetShapeAttrsInfo (lines 688-761): the tensors, then the attributes
    xd, idxd = desc(x, "x"), desc(expert_idx, "expert_idx")
    if xd is None or idxd is None:
        fail("x and expert_idx are required")
    sd, od = desc(scale, "scale"), desc(offset, "offset")
    c.x_dtype = xd[1]
    c.x_size = SIZE[c.x_dtype]
    c.is_scale = int(sd is not None)
    c.scale_size = SIZE[sd[1]] if sd else 0
    f.update(is_input_scale=c.is_scale, is_input_offset=int(od is not None))
    attrs = dict(active_num=active_num, expert_capacity=expert_capacity, expert_num=expert_num,
                 drop_pad_mode=drop_pad_mode, expert_tokens_num_type=expert_tokens_num_type, quant_mode=quant_mode,
                 row_idx_type=row_idx_type)
    for name, v in attrs.items():
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            fail(f"attr {name} must be an int, got {v!r}")
    if not isinstance(expert_tokens_num_flag, (bool, np.bool_)):
        fail(f"attr expert_tokens_num_flag must be a bool, got {expert_tokens_num_flag!r}")
    rng = list(active_expert_range) if isinstance(active_expert_range, (list, tuple)) else None
    if rng is None or len(rng) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                                for v in rng):
        fail(f"attr active_expert_range must hold 2 ints [expert_start, expert_end], got {active_expert_range!r}")
    c.start, c.end = int(rng[0]), int(rng[1])
    c.expert_num, c.capacity, c.drop_pad = int(expert_num), int(expert_capacity), int(drop_pad_mode)
    c.tokens_type, c.quant, c.row_idx_type = int(expert_tokens_num_type), int(quant_mode), int(row_idx_type)

    check_set_attrs(c, bool(expert_tokens_num_flag))
    check_set_list_attrs(c)
    check_set_inputs(c, xd, idxd, sd, od)
    empty = check_set_empty_tensor(c, int(active_num))
    check_outputs(c, expanded_x_out, expanded_row_idx_out, expert_tokens_count_or_cumsum_out, expanded_scale_out)

    if empty:
        return TilingResult(EMPTY_TENSOR_TILINGKEY, 1, empty_tensor_workspace(), f, empty_tensor_plan(f), 1, soc)

    c.sort_loop_max = min(tdiv(c.avail_ub, 4 * 2 * 4) // SORT32_ALIGN_ELEMENT * SORT32_ALIGN_ELEMENT,
                          SORT_API_MAX_ELEM)
    sort_mode = vbs(c)
    vms_middle_and_sort_out(c)
    expert_tokens_count(c)
    full_load = is_full_load(c)
    if c.quant in MX_QUANT:
        gather_out_quant(c, MX_QUANT_BLOCK_SIZE, mx_max_indices)
    elif c.quant in FP8_PERBLOCK + FP8_GROUP:
        gather_out_quant(c, FP8_BLOCK_SIZE, fp8_max_indices)
    elif c.drop_pad == DROPPAD and not full_load:
        src_to_dst_drop_pad(c)
        gather_out_drop_pad(c)
    elif mxfp8_no_quant(c.quant, c.x_dtype):
        gather_out_mxfp8_no_quant(c)
    else:
        gather_out(c)
    key = tiling_key(c, full_load, sort_mode)
    plan = ub_plan(f, key, x_bytes=c.x_size, mx_no_quant=mxfpx_no_quant(c.quant, c.x_dtype))
    return TilingResult(key, c.aiv, workspace(c), f, plan, 1, soc)
