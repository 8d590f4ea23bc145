"""The "former / tail" split of a gradient kernel's rows over cores (Base::Init of MoeTokenUnpermuteGrad and of
MoeTokenUnpermuteWithRoutingMapGrad): the first former_core_num cores take one token more than the others."""
from __future__ import annotations

from ascend_sim.kernel_api import aicore


@aicore
def former_tail_offsets(c, td):
    """(rowIdMapStartOffset, unpermutedOutputDStartOffset) of this core: its first slot and first token.

    td carries former_core_num, row_id_map_each_core / row_id_map_tail_core (slots per former / tail core) and
    token_num_each_core / token_num_tail_core (tokens per former / tail core)."""
    i = c.block_idx
    if i < td.former_core_num:
        return i * td.row_id_map_each_core, i * td.token_num_each_core
    return (td.former_core_num * td.row_id_map_each_core + (i - td.former_core_num) * td.row_id_map_tail_core,
            td.former_core_num * td.token_num_each_core + (i - td.former_core_num) * td.token_num_tail_core)
