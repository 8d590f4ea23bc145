"""The MoeInitRoutingV3Arch35TilingData struct as every stage of the l0 kernels takes it: one flat namedtuple of
tiling.moe_init_routing_v3.FIELDS (master's 68 fields, in order) plus the glue fields below. One class for all
phases, because numba compiles a stage once per class, and importable under its own name, because numba's disk
cache pickles the type by module and name.

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_init_routing_v3_arch35_tiling_def.h,
moe/moe_init_routing_v3/op_kernel/arch35/moe_v3_gather_mxfp8_quant.h (Process) and moe_v3_row_idx_gather.h
(Process) @ 25fb6b92890d
"""
from __future__ import annotations

from collections import namedtuple

from tiling.moe_init_routing_v3 import FIELDS, ROW_IDX_GATHER

GLUE_FIELDS = ("use_gather_copy",)
"""Fields the kernels read that master's struct does not carry, derived from it here:

use_gather_copy: 1 when the row indices are GATHER type. Master's MoeGatherOutMxfp8Quant::Process copies by
source slot (GatherCopyExpandedXandMXQuant over the n * k slots of expanded_row_idx) for GATHER row indices and by
sorted position (ScatterCopyExpandedXandMXQuant over the expert total count) for SCATTER; RowIdxGather, which only
GATHER keys run, ends with SyncAll. The kernels' flag selects exactly these (gather_mxfp8_quant.py,
row_idx_gather.py)."""

MoeInitRoutingV3Arch35TilingData = namedtuple("MoeInitRoutingV3Arch35TilingData", FIELDS + GLUE_FIELDS)


def kernel_tiling_data(result) -> MoeInitRoutingV3Arch35TilingData:
    """The kernels' tiling data of a TilingResult of tiling.moe_init_routing_v3 (or of its `fields` dict)."""
    fields = result if isinstance(result, dict) else result.fields
    return MoeInitRoutingV3Arch35TilingData(**fields,
                                            use_gather_copy=int(fields["row_idx_type"] == ROW_IDX_GATHER))
