"""MoeInitRoutingV3 arch35 tiling: the tiling key and the workspace size.

source: moe/moe_init_routing_v3/op_host/moe_init_routing_v3_tiling_arch35.cpp @ 25fb6b92890d, GetTilingKey (lines
553-587), GetWorkspaceSize (lines 589-645), GetEmptyTensorWorkspaceSize (lines 647-655); the keys' kernels in
moe/moe_init_routing_v3/op_kernel/moe_init_routing_v3_apt.cpp

    empty tensor (n, k or cols == 0)        3000000
    full load (sort + gather in one UB)     200000 + (quantMode + 1) * 10000     (INT4 dynamic shares INT8's)
    sort templates                          10000000 + sortMode * 1000000 + factor * 10000
                                            + rowIdxType * 1000 + dropPadMode * 100

where factor is quantMode + 1 except that both E5M2 / E4M3FN variants of a quant family share the E5M2 code.
"""
from __future__ import annotations

from .base import (
    DROPPAD,
    DYNAMIC,
    DYNAMIC_QUANTS,
    FP8_GROUP_AMAX_E4M3FN,
    FP8_GROUP_AMAX_E5M2,
    FP8_GROUP_E4M3FN,
    FP8_GROUP_E5M2,
    FP8_PERBLOCK,
    FRAMEWORK_WORKSPACE,
    FULLLOAD_TILINGKEY_BASE,
    HIF8_CAST,
    HIF8_PERTENSOR,
    INT4_DYNAMIC,
    MXFP8_E4M3FN,
    MXFP8_E5M2,
    MXFP8_ROUNDSCALE_AMAX_E4M3FN,
    MXFP8_ROUNDSCALE_AMAX_E5M2,
    SORT32_ALIGN_ELEMENT,
    STATIC,
    TILINGKEY_BASE,
    UNQUANT,
    Ctx,
    align,
    mxfpx_no_quant,
)

_FAMILIES = ((MXFP8_E5M2, MXFP8_E4M3FN), (MXFP8_ROUNDSCALE_AMAX_E5M2, MXFP8_ROUNDSCALE_AMAX_E4M3FN), FP8_PERBLOCK,
             (FP8_GROUP_E5M2, FP8_GROUP_E4M3FN), (FP8_GROUP_AMAX_E5M2, FP8_GROUP_AMAX_E4M3FN))


def tiling_key(c: Ctx, full_load: bool, sort_mode: int) -> int:
    """GetTilingKey (lines 553-587) of a non-empty tiling."""
    factor = c.quant + 1
    # IsSupportFullloadQuantMode: unquantised x of no MX element type, static, INT8 / INT4 dynamic
    if full_load and ((c.quant == UNQUANT and not mxfpx_no_quant(c.quant, c.x_dtype)) or c.quant == STATIC
                      or c.quant in DYNAMIC_QUANTS):
        if c.quant == INT4_DYNAMIC:
            factor = DYNAMIC + 1
        return FULLLOAD_TILINGKEY_BASE + factor * 10000
    for family in _FAMILIES:
        if c.quant in family:
            factor = family[0] + 1
    return TILINGKEY_BASE + sort_mode * 1000000 + factor * 10000 + c.row_idx_type * 1000 + c.drop_pad * 100


def workspace(c: Ctx) -> int:
    """GetWorkspaceSize (lines 589-645): the sort's three (key, value) float pairs per slot, 64 bytes per core of
    sync flags, the scatter's int32 per slot, int32 expert counts (twice dropless: counts and the total), then for
    drop-pad each core's (last expert, its count) pair and the compact gather's output-to-source map, for every
    quant mode from 1 on but HIF8 cast / per-tensor one float row of cols per core (quantTempGm), and the
    framework's 16 MiB."""
    f = c.f
    counts = align(c.end - c.start, 4) * 4
    size = c.total * 4 * 2 * 3 + f["core_num"] * SORT32_ALIGN_ELEMENT * 2 + c.total * 4 + counts
    if c.drop_pad != DROPPAD:
        size += counts
    else:
        size += f["core_num"] * 2 * 4
        if f["gather_out_use_compact_gather_out_drop_pad"]:
            size += c.expert_num * c.capacity * 4
    if c.quant >= DYNAMIC and c.quant not in (HIF8_CAST, HIF8_PERTENSOR):
        size += c.aiv * c.cols * 4
    return size + FRAMEWORK_WORKSPACE


def empty_tensor_workspace() -> int:
    """GetEmptyTensorWorkspaceSize (lines 647-655): the framework's 16 MiB only."""
    return FRAMEWORK_WORKSPACE
