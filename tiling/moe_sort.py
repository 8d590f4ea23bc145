"""Tiling of the multi-stage sort shared by MoeTokenPermute and MoeTokenPermuteWithRoutingMap.

One core sorts everything when the keys fit its UB (one-core mode); otherwise VBS cores sort
slices in loops of `oneLoopMaxElements`, a power-of-four number of slices is merged four at a
time by the VMS stages, and one core merges the last four lists and writes the indices
(SortOut). Field names are the sub-structs' (PermuteVBSComputeTilingData, ...) in snake_case.
"""
from __future__ import annotations

import math

from ascend_sim.pipe import UbBuffer

from .common import ceil_div, tdiv
from .status import TilingError

VBS_FIELDS = (
    "need_core_num", "per_core_elements", "per_core_loops", "per_core_per_loop_elements",
    "per_core_last_loop_elements", "last_core_elements", "last_core_loops", "last_core_per_loop_elements",
    "last_core_last_loop_elements", "one_loop_max_elements", "last_core_ws_index",
)
ONE_CORE_MODE = 1
MULTI_CORE_MODE = 2
SORT32_ALIGN_ELEMENT = 32
MRG_LIST_NUM = 4
SORT_OUT_ONE_LOOP_MAX = 1024     # mrgSortListMaxElement: pairs taken from each list per MrgSort
UB_BYTES_PER_ELEMENT = 32        # 8 (in queue) + 4 (index) + 8 (out queue) + 8 (sorted buffer), rounded up


def sort_loop_max_element(ub_bytes: int, aiv_num: int) -> int:
    """Keys one VBS loop sorts: AlignDown((UB - aivNum * 32) / 32, 32)."""
    return tdiv(tdiv(ub_bytes - aiv_num * 32, UB_BYTES_PER_ELEMENT), SORT32_ALIGN_ELEMENT) * SORT32_ALIGN_ELEMENT


def checked_sort_loop_max_element(op: str, ub_bytes: int, aiv_num: int, total_length: int) -> int:
    """sort_loop_max_element, or TilingError when the keys need more than one loop and a loop holds no key.

    The real tiling goes on with a loop of 0 (or fewer) keys: it takes log(0) for the core count and gives
    the kernel zero sort loops, so the keys would never be sorted. A UB that small fails here instead."""
    loop_max = sort_loop_max_element(ub_bytes, aiv_num)
    if total_length > loop_max and loop_max <= 0:
        reserved = aiv_num * 32
        raise TilingError(
            f"{op} tiling: UB of {ub_bytes} bytes has no room for one sort loop: after the per-core blocks "
            f"({aiv_num} x 32 = {reserved} bytes) {max(ub_bytes - reserved, 0)} bytes are left, and a loop of "
            f"{SORT32_ALIGN_ELEMENT} keys needs {SORT32_ALIGN_ELEMENT * UB_BYTES_PER_ELEMENT} "
            f"({UB_BYTES_PER_ELEMENT} bytes per key); {total_length} keys are to be sorted")
    return loop_max


def vms_ws_parity(loops: int) -> int:
    """Which ping-pong workspace holds a core's result after merging `loops` sorted loops (VmsLoops)."""
    index, x = 0, loops
    while x >= 1:
        x = ceil_div(x, MRG_LIST_NUM)
        index = (index + 1) % 2
        if x == 1:
            break
    return index


def _ceil_log4(x: int) -> int:
    # the tiling computes ceil(log(x) / log(4)) in double precision; same libm, same result
    return int(math.ceil(math.log(x) / math.log(4)))


def vbs_tiling(total_length: int, sort_loop_max: int, core_clamp: int) -> tuple[int, dict]:
    """(sort mode, VBS fields): one core if the keys fit one loop, else a power-of-four core split."""
    f = dict.fromkeys(VBS_FIELDS, 0)
    f["one_loop_max_elements"] = sort_loop_max
    if total_length <= sort_loop_max:
        f.update(need_core_num=1, per_core_elements=total_length, per_core_loops=1,
                 per_core_per_loop_elements=total_length, per_core_last_loop_elements=total_length,
                 last_core_elements=total_length, last_core_loops=1, last_core_per_loop_elements=total_length,
                 last_core_last_loop_elements=total_length)
        return ONE_CORE_MODE, f
    if sort_loop_max <= 0:
        # callers check the UB first (checked_sort_loop_max_element); never split keys into empty loops
        raise TilingError(f"sort tiling: a sort loop holds {sort_loop_max} keys but {total_length} keys need "
                          "more than one loop")
    need = ceil_div(total_length, sort_loop_max)
    need = min(int(math.pow(4, _ceil_log4(need))), core_clamp)
    per_core = tdiv(total_length, need)
    floor_aligned = per_core - per_core % SORT32_ALIGN_ELEMENT
    last_core = total_length - (need - 1) * floor_aligned
    ceil_aligned = per_core + SORT32_ALIGN_ELEMENT - per_core % SORT32_ALIGN_ELEMENT
    if last_core > ceil_aligned:
        per_core = ceil_aligned
        need = ceil_div(total_length, per_core)
    else:
        per_core = floor_aligned
    loops = ceil_div(per_core, sort_loop_max)
    per_loop = min(per_core, sort_loop_max)
    last_elems = total_length - (need - 1) * per_core
    last_loops = ceil_div(last_elems, sort_loop_max)
    last_per_loop = min(last_elems, sort_loop_max)
    f.update(need_core_num=need, per_core_elements=per_core, per_core_loops=loops, per_core_per_loop_elements=per_loop,
             per_core_last_loop_elements=per_core - (loops - 1) * per_loop, last_core_elements=last_elems,
             last_core_loops=last_loops, last_core_per_loop_elements=last_per_loop,
             last_core_last_loop_elements=last_elems - (last_loops - 1) * last_per_loop,
             last_core_ws_index=abs(vms_ws_parity(last_loops) - vms_ws_parity(loops)))
    return MULTI_CORE_MODE, f


def vms_middle_need_core_num(vbs_need_core_num: int) -> int:
    """Cores of the first VMS-middle merge level: 0 when SortOut alone can merge the VBS lists."""
    return 0 if vbs_need_core_num <= MRG_LIST_NUM else ceil_div(vbs_need_core_num, MRG_LIST_NUM)


# --- UB of MoeSortMultiCore::Init -------------------------------------------------------------------------
MULTI_CORE_BUFFERS = ("sortDataCopyInQueue", "sortDataCopyOutQueue", "indexConcatBuffer", "sortedBuffer")


def core_loop_elements(block_idx: int, need_core_num: int, per_core_per_loop_elements: int,
                       last_core_per_loop_elements: int) -> int:
    """Keys per VBS loop of core `block_idx` (its Init's sortCoreLoopElements): the last VBS core
    (block_idx == needCoreNum - 1) sorts its own, smaller or larger share; every other core (idle VBS cores
    included) takes the per-core figure."""
    return last_core_per_loop_elements if block_idx == need_core_num - 1 else per_core_per_loop_elements


def multi_core_index_num(loop_elements: int, sort_out_one_loop_max: int = SORT_OUT_ONE_LOOP_MAX) -> int:
    """indexNum of MoeSortMultiCore::Init, in elements: room for the core's loop of keys or for the four
    SortOut windows of oneLoopMaxElements pairs, whichever is larger, rounded up to 32 keys."""
    return ceil_div(max(sort_out_one_loop_max * MRG_LIST_NUM, loop_elements), SORT32_ALIGN_ELEMENT) \
        * SORT32_ALIGN_ELEMENT


def multi_core_ub_plan(pipe: str, index_num: int) -> tuple[UbBuffer, ...]:
    """The four InitBuffer calls of MoeSortMultiCore::Init for `index_num` keys: every one holds index_num
    8-byte elements (the in-queue int64 keys; the out-queue, indexConcat and sorted buffers 2 x int32)."""
    nbytes = index_num * 8
    return (UbBuffer("sortDataCopyInQueue", nbytes, 1, "TQue", "VECIN", 1, pipe),
            UbBuffer("sortDataCopyOutQueue", nbytes, 1, "TQue", "VECOUT", 1, pipe),
            UbBuffer("indexConcatBuffer", nbytes, pipe=pipe),
            UbBuffer("sortedBuffer", nbytes, pipe=pipe))


def arch35_vbs_split(f: dict, total: int, need: int, loop_max: int) -> None:
    """The arch35 VBS split of MoeInitRoutingV2 / V3 (both tilings run the same code): `total` keys over `need`
    cores (need >= 1) with one sort loop holding `loop_max` keys; writes the vbs_* fields of f from
    vbs_need_core_num on. Unlike the membase split (vbs_tiling) the per-core share shrinks by 32 keys until
    the last core's last loop holds a key or no share is left; the real tilings only log a split that fails."""
    per = tdiv(total, need)
    floor_per = per - per % SORT32_ALIGN_ELEMENT
    ceil_per = per + SORT32_ALIGN_ELEMENT - per % SORT32_ALIGN_ELEMENT
    if total - (need - 1) * floor_per > ceil_per:
        per = ceil_per
        need = ceil_div(total, per)
    else:
        per = floor_per
    f["vbs_need_core_num"] = need
    while True:
        loops = ceil_div(per, loop_max)
        per_loop = min(per, loop_max)
        last = total - (need - 1) * per
        last_per_loop = ceil_div(ceil_div(last, loops), SORT32_ALIGN_ELEMENT) * SORT32_ALIGN_ELEMENT
        last_last = last - (loops - 1) * last_per_loop
        f.update(vbs_per_core_elements=per, vbs_per_core_loops=loops, vbs_per_core_per_loop_elements=per_loop,
                 vbs_per_core_last_loop_elements=per - (loops - 1) * per_loop, vbs_last_core_elements=last,
                 vbs_last_core_loops=loops, vbs_last_core_per_loop_elements=last_per_loop,
                 vbs_last_core_last_loop_elements=last_last)
        per -= SORT32_ALIGN_ELEMENT
        if not (last_last <= 0 and per > 0):
            break
