"""Tiling of the drop-and-pad (tilingKey 9) pieces of MoeTokenPermuteWithRoutingMap, @ 25fb6b92890d:
Tiling4VBSComputeLastdim / Tinlig4VBSMultiCoreComputeLastdim of moe_token_permute_with_routing_map_tiling.cpp.

In pad mode every expert row of the transposed routing map (N token bytes) is one sort task. The E
tasks are dealt to the cores front/tail style: the first `frontCoreNum` cores take ceil(E / C) rows
each, the others floor(E / C) (no tail cores when E <= C). Each core sorts its rows one after another
in loops of `sortLoopMaxElement` keys, as the multi-core sort's VBS step does for a single slice
(perCoreElements = N for every core), merges the loop lists in UB-sized rounds and keeps the first
`capacity` indices of each row. No VMS-middle stage exists in this mode (its needCoreNum stays 0);
SortOut's oneLoopMaxElements is 1024 as in the other keys.

Quirks kept from the source: lastCoreElements = N - (needCoreNum - 1) * N (negative as soon as two cores
are used; the kernel never reads it) and lastCoreWSindex = 0.

The same module plans the UB of the two kernel pieces (MoeSortMultiLastDimCore<uint8_t>, MoePermuteProb).
"""
from __future__ import annotations

from typing import NamedTuple

from ascend_sim.pipe import UbBuffer

from .common import ceil_div, tdiv, tmod
from .moe_sort import SORT_OUT_ONE_LOOP_MAX, VBS_FIELDS, multi_core_index_num, multi_core_ub_plan

PWRM_VBS_FIELDS = VBS_FIELDS + ("frontcore_task", "tailcore_task", "front_core_num", "tail_core_num")
"""PermuteVBSComputeRMTilingData in declaration order (snake_case): the V1 VBS fields and the four task
fields the pad key adds. In the PWRM struct they appear with the prefix `vbs_`."""

PAD_KEY = 9
FLOAT_BYTES = 4
SORT_WORK_SPACE_NUM = 2          # ping-pong areas
PAIR_FLOATS = 2                  # a (score, index) pair is two floats

# MoePermuteProb (moe_permute_prob.h)
PROB_BUFFER_LEN_ELEMS = 1024     # BUFFER_LEN: window of probs, of indices, and of outputs
PROB_BUFFER_LEN_DB_ELEMS = 2048  # BUFFER_LEN_DB: "no window loaded yet" sentinel distance
PERMUTE_PROB_BUFFERS = ("inQue", "indiceQue", "outQue")
INDEX_BYTES = 4


class LastDimSortTiling(NamedTuple):
    """Result of the pad-mode sort tiling.

    block_dim: cores that hold tasks (frontCoreNum + tailCoreNum): the op's aivNum and block dim.
    vbs: the 15 PWRM_VBS_FIELDS.
    vms_middle_need_core_num: always 0 in pad mode (Tiling4VMSMiddleCompute is not called).
    sort_out_one_loop_max_elements: 1024 pairs per list and merge round.
    """
    block_dim: int
    vbs: dict
    vms_middle_need_core_num: int
    sort_out_one_loop_max_elements: int


def last_dim_sort_tiling(*, num_tokens: int, num_experts: int, sort_loop_max: int,
                         core_num: int) -> LastDimSortTiling:
    """The pad-mode sort tiling.

    Args:
        num_tokens: N (elements per expert row, the sort length of one task).
        num_experts: E (expert rows = tasks).
        sort_loop_max: sortLoopMaxElement in keys (tiling.moe_sort.sort_loop_max_element of the floored UB with
            aivNum 0; on the 950 the UB has already lost its 40960 SIMT bytes).
        core_num: realCoreNumAiv (the compile-info vector-core count).

    Every division is the tiling's safe one (a zero divisor gives 0). Never fails: the real code has no
    check here (a UB too small for the sort's buffers fails when the kernel's UB plan is laid out).
    """
    f = dict.fromkeys(PWRM_VBS_FIELDS, 0)
    rem = tmod(num_experts, core_num)
    front = rem if rem != 0 else core_num
    tail = 0 if num_experts <= core_num else core_num - front
    blocks = front + tail
    per_core = num_tokens
    loops = ceil_div(per_core, sort_loop_max)
    per_loop = min(per_core, sort_loop_max)
    last_core = num_tokens - (blocks - 1) * per_core          # (sic) only right for one core
    last_loops = ceil_div(last_core, sort_loop_max)
    last_per_loop = min(last_core, sort_loop_max)
    f.update(need_core_num=blocks, per_core_elements=per_core, per_core_loops=loops,
             per_core_per_loop_elements=per_loop, per_core_last_loop_elements=per_core - (loops - 1) * per_loop,
             last_core_elements=last_core, last_core_loops=last_loops, last_core_per_loop_elements=last_per_loop,
             last_core_last_loop_elements=last_core - (last_loops - 1) * last_per_loop,
             one_loop_max_elements=sort_loop_max, last_core_ws_index=0,
             frontcore_task=ceil_div(num_experts, core_num),
             tailcore_task=tdiv(num_experts, core_num),
             front_core_num=front, tail_core_num=tail)
    return LastDimSortTiling(blocks, f, 0, SORT_OUT_ONE_LOOP_MAX)


def last_dim_sort_workspace_bytes(block_dim: int, num_tokens: int) -> int:
    """The sort share of the pad-mode workspace: aivNum * N * sizeof(float) * 2 * 2 bytes (two ping-pong
    areas of (score, index) pairs per core). The op adds aivNum * 32 * 2 (SyncAll) and 16 MiB."""
    return block_dim * num_tokens * FLOAT_BYTES * PAIR_FLOATS * SORT_WORK_SPACE_NUM


def last_dim_sort_ub_plan(pipe: str, per_core_per_loop_elements: int,
                          sort_out_one_loop_max: int = SORT_OUT_ONE_LOOP_MAX) -> tuple[UbBuffer, ...]:
    """InitBuffer rows of MoeSortMultiLastDimCore::Init (sortDataCopyInQueue, sortDataCopyOutQueue,
    indexConcatBuffer, sortedBuffer), each indexNum * 8 bytes, where indexNum = AlignUp(max(4 * 1024,
    keys per loop), 32). Every core sizes them from the same perCorePerLoopElements."""
    return multi_core_ub_plan(pipe, multi_core_index_num(per_core_per_loop_elements, sort_out_one_loop_max))


def permute_prob_ub_plan(pipe: str, prob_bytes: int) -> tuple[UbBuffer, ...]:
    """InitBuffer rows of MoePermuteProb::Init: three TBufs of BUFFER_LEN (1024) elements: inQue (a window
    of one expert's probs), indiceQue (int32 sorted indices), outQue (the gathered probs)."""
    return (UbBuffer("inQue", PROB_BUFFER_LEN_ELEMS * prob_bytes, pipe=pipe),
            UbBuffer("indiceQue", PROB_BUFFER_LEN_ELEMS * INDEX_BYTES, pipe=pipe),
            UbBuffer("outQue", PROB_BUFFER_LEN_ELEMS * prob_bytes, pipe=pipe))
