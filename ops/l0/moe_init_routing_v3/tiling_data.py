"""The MoeInitRoutingV3Arch35TilingData struct as every stage of the l0 kernels takes it: one flat namedtuple of
tiling.moe_init_routing_v3.FIELDS (master's 68 fields, in order). One class for all phases, because numba compiles a
stage once per class, and importable under its own name, because numba's disk cache pickles the type by module and
name.

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_init_routing_v3_arch35_tiling_def.h @ 25fb6b92890d
"""
from __future__ import annotations

from collections import namedtuple

from tiling.moe_init_routing_v3 import FIELDS

MoeInitRoutingV3Arch35TilingData = namedtuple("MoeInitRoutingV3Arch35TilingData", FIELDS)


def kernel_tiling_data(result) -> MoeInitRoutingV3Arch35TilingData:
    """The kernels' tiling data of a TilingResult of tiling.moe_init_routing_v3 (or of its `fields` dict)."""
    fields = result if isinstance(result, dict) else result.fields
    return MoeInitRoutingV3Arch35TilingData(**fields)
