"""Kernels of MoeTokenPermute (op_kernel/moe_token_permute.cpp and its headers).

source: moe/moe_token_permute/op_kernel/moe_token_permute.cpp, moe_sort_one_core.h, moe_sort_multi_core.h,
moe_mrgsort.h, moe_mrgsort_out.h, moe_index_copy.h, moe_index_copy_spilt_d.h, moe_common.h @ 25fb6b92890d.

Every tilingKey runs the same three-step chain, each step with its own TPipe:

1. Sort #1 (sortPipe): the flat expert ids, ascending and stable -> sortedIndices holds, for each
   output row, the flat slot it comes from (sortedIndices is used as scratch).
2. Sort #2 (sortPipe2): those slot numbers -> the inverse permutation, in place: sortedIndices[slot]
   is the output row of that slot (the op's second output).
3. Index copy (MoeindexCopyPipe): every core copies its source tokens, each to its topK output
   rows; rows at or beyond numOutTokens are skipped in keys 5..8.

Keys: 1/5 one-core sort + batched copy, 2/6 multi-core sort + batched copy, 3/7 one-core sort +
split-D copy, 4/8 multi-core sort + split-D copy (5..8: numOutTokens drops rows).

Stages take (c, td, gm, tmpl): the core, the tiling struct, the GM tensors (GmTensors) and the
template parameters (Template).
"""
from __future__ import annotations

from collections import namedtuple

from ascend_sim import Kernel, PipePhase
from ops.common import moe_sort

# the index copy (MoeindexCopyOp / MoeindexCopySpiltDOp) is shared with MoeTokenPermuteWithRoutingMap:
# ops/common/moe_index_copy.py
from ops.common.moe_index_copy import IndexCopyGm, IndexCopyTemplate, index_copy, index_copy_split_d, index_copy_td

OP = "MoeTokenPermute"

GmTensors = namedtuple("GmTensors", [
    "tokens",           # srcGm: (N, cols) tokens
    "indices",          # expert ids (N * topK), int32 or int64
    "permute_tokens",   # dstGm: (numOutTokens, cols) output
    "sorted_indices",   # (N * topK) int32 output, scratch for sort #1
    "workspace",        # user workspace as float32 (sort ping-pong areas)
])

Template = namedtuple("Template", ["token_t", "if_num_out_tokens"])
"""DTYPE_TOKENS (ge code) and the ifNumOutTokens template flag."""


# --- the kernel entry: TILING_KEY_IS dispatch ---------------------------------------------------------
def _sort1_args(td, gm, tmpl):
    """Sort #1: the expert ids, into sortedIndices."""
    return td, moe_sort.sort_gm(gm.indices, gm.sorted_indices, gm.workspace)


def _sort2_args(td, gm, tmpl):
    """Sort #2: sortedIndices in place (it inverts the first permutation)."""
    return td, moe_sort.sort_gm(gm.sorted_indices, gm.sorted_indices, gm.workspace)


def _copy_args(td, gm, tmpl):
    # the index copy's own types (shared with MoeTokenPermuteWithRoutingMap): the expert ids are left out so
    # their dtype does not recompile it
    return (index_copy_td(td),
            IndexCopyGm(gm.tokens, gm.sorted_indices, gm.permute_tokens),
            IndexCopyTemplate(tmpl.token_t, tmpl.if_num_out_tokens, 0))


def _kernel(key: int, with_index_copy: bool = True) -> Kernel:
    """The kernel of tilingKey `key`; without `with_index_copy` only the two sorts run (hidden size 0: the index
    copy would move no bytes, but sortedIndices is still the inverse permutation)."""
    base = (key - 1) % 4 + 1
    multi_core = base in (2, 4)
    split_d = base in (3, 4)
    copy_buffers = ("copyInQueue", "indicesQueue" if split_d else "indicesBuffer")
    copy_stage = index_copy_split_d if split_d else index_copy
    name = "MoeindexCopySpiltDOp" if split_d else "MoeindexCopyOp"
    sort_name = "MoeSortMultiCore" if multi_core else "MoeSortOneCore"
    sorts = (moe_sort.sort_phase("sortPipe", multi_core, _sort1_args),
             moe_sort.sort_phase("sortPipe2", multi_core, _sort2_args))
    waivers = moe_sort.sort_waivers(multi_core)
    if not with_index_copy:
        return Kernel(OP, f"{sort_name} x2", sorts, waivers)
    return Kernel(OP, f"{sort_name} x2 + {name}<{'true' if key > 4 else 'false'}>",
                  sorts + (PipePhase("MoeindexCopyPipe", copy_buffers, (copy_stage,), _copy_args),), waivers)


KERNELS = {key: _kernel(key) for key in range(1, 9)}
SORT_ONLY_KERNELS = {key: _kernel(key, with_index_copy=False) for key in range(1, 9)}
"""Hidden size 0: the two sorts of each key, no index copy."""
