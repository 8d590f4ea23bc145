"""Tiling of MoeInitRoutingV2, both branches.

source: moe/moe_init_routing_v2/op_host/moe_init_routing_v2_tiling.cpp, moe_init_routing_v2_tiling.h
@ 25fb6b92890d.

One host tiling serves every chip; it branches on the platform:

* regbase (Ascend 950, arch35 kernels): the UB handed to the kernels is GetCoreMemSize(UB) less the
  40960 bytes the SIMT stack reserves, a merge-sort list holds 2048 elements, expert_idx may be 1-D (k = 1)
  or 2-D and INT32 or INT64 (an INT64 key costs one more byte per sort element), active_num <= 0 counts from
  the end, the gather-out may use the batch-row scatter template (scatterMode 1), never the full-load key,
  and the workspace adds expertNum int32 slots.
* membase (A2 / A3): the whole UB, 2040-element merge lists, 2-D INT32 expert_idx only, active_num >= 0
  (0 keeps all rows), and the full-load key 20000 when the sort and the rows fit in one core's UB.

    tilingKey = 20000 (full load, membase only), else
                10000 + 1000 * (regbase and expertNum <= 256) + 10 * dropPadMode + (1 | 2 sort cores)

MoeTokenPermute V1 reaches it on 950 with activeNum = numOutTokens, capacity 0, expertNum 0, dropPad 0,
countFlag 0: keys 11001 (one-core sort) and 11002 (multi-core sort) only. The 310P branch is not modelled.
`ub_plan` lists core 0's InitBuffer calls of the arch35 kernel (regbase keys) for the sort TPipe
(MoeV2SortOneCore / MoeV2SortMultiCore) and the gather TPipe (MoeV2ScatterOutBatchRow when scatterMode is 1,
else MoeV2GatherOutSimt); the expert-token-count TPipe (count flag or drop-pad only) and the membase kernels'
buffers are not listed.
"""
from __future__ import annotations

import math
from typing import NoReturn

import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import (
    BLOCK_BYTES,
    TensorDesc,
    TilingResult,
    align_bytes,
    ceil_div,
    memoised_tiling,
    struct_fields,
    tdiv,
    tmod,
)
from .moe_sort import arch35_vbs_split
from .platform import get_soc
from .status import ParamInvalidError, TilingError

OP = "MoeInitRoutingV2"

VBS_FIELDS = ("need_core_num", "per_core_elements", "per_core_loops", "per_core_per_loop_elements",
              "per_core_last_loop_elements", "last_core_elements", "last_core_loops", "last_core_per_loop_elements",
              "last_core_last_loop_elements", "one_loop_max_elements")
ROWS_FIELDS = ("need_core_num", "activate_rows", "per_core_rows", "per_core_per_loop_rows",
               "per_core_last_loop_rows", "last_core_rows", "last_core_per_loop_rows", "last_core_last_loop_rows",
               "per_core_loops", "last_core_loops", "per_loop_cols", "last_loop_cols", "col_loops", "scatter_mode")
FIELDS = (("core_num", "n", "cols", "k", "expert_capacity", "expert_num", "drop_pad_mode",
           "expert_tokens_count_or_cumsum_flag", "expert_tokens_before_capacity_flag")
          + tuple(f"vbs_{f}" for f in VBS_FIELDS) + ("vms_middle_need_core_num", "sort_out_one_loop_max_elements")
          + tuple(f"src_to_dst_{f}" for f in ROWS_FIELDS)
          + tuple(f"src_to_dst_capacity_{f}" for f in ROWS_FIELDS)
          + tuple(f"gather_out_{f}" for f in ROWS_FIELDS))

KEY_DROPLESS = 10000
KEY_HIST_REGBASE = 1000
KEY_DROP_PAD = 10
KEY_FULL_LOAD = 20000
HIST_REGBASE_MAX_EXPERT_NUM = 256
SORT32_ALIGN_ELEMENT = 32
MRG_LIST_NUM = 4
MAX_COLS_ONE_LOOP = 16376
ASSIST_NUM = 256
ONE_CORE_SORT_BUFFER = 6
SCATTER_MODE_MAX_K = 6
EXPERT_TOKENS_COUNT = 2
LIB_API_WORKSPACE = 16 * 1024 * 1024


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def _per_or_last(x: int, y: int) -> int:
    """The last loop's share: x itself when it fits in one loop of y, else x mod y (0 for y == 0)."""
    if y == 0:
        return 0
    return x if x <= y else tmod(x, y)


def _ceil_log4(x: int) -> int:
    # the real helper goes through floating-point logarithms; math.log is the same IEEE double
    return int(math.ceil(math.log(x) / math.log(4)))


def _vbs(f: dict, total: int, loop_max: int, aiv: int) -> None:
    f["vbs_one_loop_max_elements"] = loop_max
    if total <= loop_max:
        f.update(vbs_need_core_num=0 if total <= 0 else 1, vbs_per_core_elements=total, vbs_per_core_loops=1,
                 vbs_per_core_per_loop_elements=total, vbs_per_core_last_loop_elements=total,
                 vbs_last_core_elements=total, vbs_last_core_loops=1, vbs_last_core_per_loop_elements=total,
                 vbs_last_core_last_loop_elements=total)
        return
    need = min(int(4 ** _ceil_log4(ceil_div(total, loop_max))), aiv)
    if need == 0:
        return
    arch35_vbs_split(f, total, need, loop_max)
    # the real tiling only logs a failed VBS split (lastCoreLastLoopElements <= 0) and goes on


def _src_to_dst(f: dict, total: int, aiv: int, ub: int) -> None:
    p = "src_to_dst_"
    loop_max = tdiv(tdiv(ub - ASSIST_NUM * 4 - aiv * SORT32_ALIGN_ELEMENT, SORT32_ALIGN_ELEMENT * 2), 2)
    per = ceil_div(total, aiv)
    if per <= 0:
        f[p + "need_core_num"] = 0
        return
    need = ceil_div(total, per)
    last = total - per * (need - 1)
    f.update({p + "need_core_num": need, p + "per_core_rows": per, p + "last_core_rows": last})
    for what, rows in (("per_core_", per), ("last_core_", last)):
        if loop_max >= rows:
            f[p + what + "per_loop_rows"] = f[p + what + "last_loop_rows"] = rows
        else:
            f[p + what + "per_loop_rows"] = loop_max
            f[p + what + "last_loop_rows"] = rows - (ceil_div(rows, loop_max) - 1) * loop_max


def _one_loop(f: dict, p: str, per: int, last: int, cols: int, loop_cols: int) -> None:
    f.update({p + "per_core_per_loop_rows": per, p + "per_core_last_loop_rows": per,
              p + "last_core_per_loop_rows": last, p + "last_core_last_loop_rows": last, p + "per_core_loops": 1,
              p + "last_core_loops": 1, p + "per_loop_cols": loop_cols, p + "last_loop_cols": loop_cols,
              p + "col_loops": 1})


def _split_loops(f: dict, p: str, per: int, last: int, cols: int, max_cols: int, max_rows: int) -> None:
    f.update({p + "per_loop_cols": min(max_cols, cols), p + "last_loop_cols": _per_or_last(cols, max_cols),
              p + "col_loops": ceil_div(cols, max_cols)})
    for what, rows in (("per_core_", per), ("last_core_", last)):
        f[p + what + "per_loop_rows"] = min(rows, max_rows)
        f[p + what + "last_loop_rows"] = _per_or_last(rows, max_rows)
        f[p + what + "loops"] = ceil_div(rows, max_rows)


def _src_to_dst_capacity(f: dict, total: int, cols: int, x_bytes: int, aiv: int, ub: int) -> None:
    p = "src_to_dst_capacity_"
    per = ceil_div(total, aiv)
    if per <= 0:
        f[p + "need_core_num"] = 0
        return
    need = ceil_div(total, per)
    last = total - per * (need - 1)
    f.update({p + "need_core_num": need, p + "per_core_rows": per, p + "last_core_rows": last})
    row_size = tdiv(per * 4 * 2 + BLOCK_BYTES + BLOCK_BYTES - 1, BLOCK_BYTES) * BLOCK_BYTES
    col_size = tdiv(cols * x_bytes + BLOCK_BYTES - 1, BLOCK_BYTES) * BLOCK_BYTES
    if row_size + col_size < ub:
        _one_loop(f, p, per, last, cols, cols)
        return
    max_cols = MAX_COLS_ONE_LOOP
    max_cols_size = tdiv(max_cols * x_bytes + BLOCK_BYTES - 1, BLOCK_BYTES) * BLOCK_BYTES
    max_rows = tdiv(tdiv(tdiv(ub - max_cols_size - BLOCK_BYTES, 4), 2), BLOCK_BYTES) * BLOCK_BYTES
    if cols < MAX_COLS_ONE_LOOP:
        max_rows = tdiv(tdiv(tdiv(ub - col_size - BLOCK_BYTES, 4), 2), BLOCK_BYTES) * BLOCK_BYTES
    elif per < max_rows:
        max_cols = tdiv(tdiv(ub - row_size, x_bytes), BLOCK_BYTES) * BLOCK_BYTES
    _split_loops(f, p, per, last, cols, max_cols, max_rows)


def _gather_out(f: dict, total: int, cols: int, k: int, x_bytes: int, aiv: int, ub: int, activate: int,
                drop_pad: int, regbase: bool) -> None:
    p = "gather_out_"
    f[p + "activate_rows"] = activate if drop_pad == 0 else total
    per = ceil_div(total, aiv)
    if per <= 0 or cols <= 0:
        f[p + "need_core_num"] = 0
        return
    need = ceil_div(total, per)
    last = total - per * (need - 1)
    f.update({p + "need_core_num": need, p + "per_core_rows": per, p + "last_core_rows": last})
    row_size = tdiv(per * 4 + BLOCK_BYTES - 1, BLOCK_BYTES) * BLOCK_BYTES
    col_size = tdiv(cols * x_bytes + BLOCK_BYTES - 1, BLOCK_BYTES) * BLOCK_BYTES
    half = tdiv(ub, 2)
    per_block = tdiv(BLOCK_BYTES, x_bytes)
    ub_rows = tdiv(tdiv(half, cols * x_bytes + 4), per_block) * per_block
    if (regbase and tmod(cols * x_bytes, BLOCK_BYTES) == 0 and ub_rows >= 2 and drop_pad != 1
            and k <= SCATTER_MODE_MAX_K):
        _scatter_rows(f, p, f[p + "activate_rows"], cols, x_bytes, aiv, half, ub_rows)
    elif row_size + col_size < half:
        _one_loop(f, p, per, last, cols, cols * 2 if regbase and row_size + col_size * 2 < half else cols)
    else:
        max_cols = MAX_COLS_ONE_LOOP
        max_cols_size = tdiv(max_cols * x_bytes + BLOCK_BYTES - 1, BLOCK_BYTES) * BLOCK_BYTES
        max_rows = tdiv(tdiv(half - max_cols_size, 4), BLOCK_BYTES) * BLOCK_BYTES
        if cols < MAX_COLS_ONE_LOOP:
            max_rows = tdiv(tdiv(half - col_size, 4), BLOCK_BYTES) * BLOCK_BYTES
        elif per < max_rows:
            max_cols = tdiv(tdiv(half - row_size, x_bytes), BLOCK_BYTES) * BLOCK_BYTES
        _split_loops(f, p, per, last, cols, max_cols, max_rows)


def _scatter_rows(f: dict, p: str, rows: int, cols: int, x_bytes: int, aiv: int, half: int, ub_rows: int) -> None:
    """The batch-row scatter template (regbase): the active rows over the cores, ub_rows token rows per batch."""
    f[p + "scatter_mode"] = 1
    if rows <= 0:
        f[p + "need_core_num"] = 0
        return
    per = ceil_div(rows, aiv)
    need = min(ceil_div(rows, per), aiv)
    per = ceil_div(rows, need)
    last = rows - per * (need - 1)
    f.update({p + "need_core_num": need, p + "per_core_rows": per, p + "last_core_rows": last})
    out_bytes = tdiv(ub_rows * cols * x_bytes + BLOCK_BYTES - 1, BLOCK_BYTES) * BLOCK_BYTES
    max_rows = tdiv(max(half - out_bytes, 0), 4)
    if max_rows <= 0 or out_bytes > half:
        max_rows = ub_rows
    min_rows = BLOCK_BYTES // 4
    per_loop = min(per, max_rows)
    if 0 < per_loop < min_rows:
        per_loop = min_rows
    lasts = []
    for r in (per, last):
        v = _per_or_last(r, max_rows)
        if 0 < v < min_rows:
            v = min_rows
        lasts.append(max_rows if v == 0 else v)
    f.update({p + "per_core_per_loop_rows": per_loop, p + "per_core_last_loop_rows": lasts[0],
              p + "last_core_per_loop_rows": per_loop, p + "last_core_last_loop_rows": lasts[1],
              p + "per_core_loops": ceil_div(per, per_loop), p + "last_core_loops": ceil_div(last, per_loop),
              p + "per_loop_cols": ub_rows, p + "last_loop_cols": ub_rows, p + "col_loops": 1})


def _full_load(n: int, cols: int, total: int, expert_num: int, x_bytes: int, aiv: int, ub: int, loop_max: int,
               drop_pad: int) -> bool:
    if total > loop_max or cols > MAX_COLS_ONE_LOOP or drop_pad == 1:
        return False
    sort_elems = ceil_div(total, SORT32_ALIGN_ELEMENT) * SORT32_ALIGN_ELEMENT
    expert_space = ceil_div(expert_num * 4, BLOCK_BYTES) * BLOCK_BYTES
    # a core's token rows may straddle one extra row at each end
    x_rows = tdiv(n, aiv) + (1 if tmod(n, aiv) <= 1 else 2)
    gather = ceil_div(cols * x_bytes, BLOCK_BYTES) * BLOCK_BYTES * x_rows
    return ub - sort_elems * 4 * ONE_CORE_SORT_BUFFER - sort_elems * 4 * 3 - expert_space - gather > 0


def regbase_ub_plan(f: dict, idx_is_int64: bool, x_bytes: int) -> tuple[UbBuffer, ...]:
    """Core 0's InitBuffer calls of the arch35 kernel: the sort TPipe, then the gather TPipe (run in turn)."""
    if f["vbs_one_loop_max_elements"] >= f["n"] * f["k"]:
        # Align(lastCorePerLoopElements, sizeof(int32)) elements, padded to whole 32-key sort repeats
        tile = tdiv(align_bytes(f["vbs_last_core_per_loop_elements"], 4), 4)
        sort_num = ceil_div(tile, 32) * 32
        kv = sort_num * 4 * 2
        sort: tuple[UbBuffer, ...]
        sort = (UbBuffer("sortDataCopyInQueue", kv + (sort_num * 4 if idx_is_int64 else 0), 1, "TQue", "VECIN", 1,
                         "sortPipe"),
                UbBuffer("sortDataCopyOutQueue", kv, 1, "TQue", "VECOUT", 1, "sortPipe"),
                UbBuffer("tempBuffer", kv, pipe="sortPipe"), UbBuffer("sortedBuffer", kv, pipe="sortPipe"))
    else:
        last = f["vbs_need_core_num"] <= 1
        loop = f["vbs_last_core_per_loop_elements"] if last else f["vbs_per_core_per_loop_elements"]
        kv = ceil_div(max(f["sort_out_one_loop_max_elements"] * MRG_LIST_NUM, loop), 32) * 32 * 4 * 2
        # no tempBuffer on arch 3510
        sort = (UbBuffer("sortDataCopyInQueue", tdiv(kv, 2) * 3 if idx_is_int64 else kv, 1, "TQue", "VECIN", 1,
                         "sortPipe"),
                UbBuffer("sortDataCopyOutQueue", kv, 1, "TQue", "VECOUT", 1, "sortPipe"),
                UbBuffer("sortedBuffer", kv, pipe="sortPipe"))
    g = "gather_out_"
    last = f[g + "need_core_num"] == 1
    if f[g + "scatter_mode"] == 1:
        gather = (UbBuffer("outputRowsQueue", align_bytes(f[g + "per_loop_cols"] * f["cols"], x_bytes), 2, "TQue",
                           "VECOUT", 2, "gatherPipe"),
                  UbBuffer("dstToSrcIndexQueue", align_bytes(f[g + "per_core_per_loop_rows"], 4), 2, "TQue",
                           "VECIN", 2, "gatherPipe"))
    else:
        rows = f[g + "last_core_per_loop_rows"] if last else f[g + "per_core_per_loop_rows"]
        # a loop of two rows' worth of cols means whole rows, four of them in flight
        doubled = f[g + "per_loop_cols"] > f["cols"]
        gather = (UbBuffer("inputActivationsCopyInQueue",
                           align_bytes(f["cols"] if doubled else f[g + "per_loop_cols"], x_bytes), 4 if doubled else 2,
                           "TQueBind", "VECIN->VECOUT", 2, "gatherPipe"),
                  UbBuffer("expandedRowIdxIndexCopyInQueue", align_bytes(rows, 4), 2, "TQue", "VECIN", 2,
                           "gatherPipe"))
    return sort + gather


def _check_count_out(name: str, t: TensorDesc | None, expert_num: int) -> None:
    if t is None:
        _fail(f"{name} is required (its flag is set) but was not given")
    if np.dtype(t.dtype) != np.dtype(np.int32):
        _fail(f"the data type of {name} should be int32, got {np.dtype(t.dtype)}")
    if t.ndim != 1:
        _fail(f"{name} should be 1-D, got shape {t.shape}")
    if t.dim(0) != expert_num:
        _fail(f"{name} dim 0 should be expert_num = {expert_num}, got {t.dim(0)}")


@memoised_tiling
def moe_init_routing_v2(x, expert_idx, *, active_num=0, expert_capacity=0, expert_num=0, drop_pad_mode=0,
                        expert_tokens_count_or_cumsum_flag=0, expert_tokens_before_capacity_flag=False,
                        expanded_x_out=None, expanded_row_idx_out=None, expert_tokens_count_or_cumsum_out=None,
                        expert_tokens_before_capacity_out=None, soc="ascend950") -> TilingResult:
    """Host tiling of MoeInitRoutingV2 for one chip profile.

    x (N, H) FP16 / BF16 / FP32 tokens; expert_idx (N, K) INT32 (regbase also (N,) and INT64): anything with
    .shape and .dtype, or TensorDesc. Attributes as the OpDef (all int64 but the last flag). The outputs'
    descriptions default to what InferShape gives (expanded_x (activeRows, H) or (E, C, H) with drop-pad,
    expanded_row_idx (N*K,) int32, the count outputs (E,) int32); give them to reproduce the output checks.
    Raises ParamInvalidError (161002) for a dtype outside the OpDef columns and TilingError (561002) exactly
    where the real tiling returns GRAPH_FAILED. Sizes are in elements, the workspace in bytes.
    """
    soc = get_soc(soc)
    regbase = soc.is_regbase
    xd, idx = TensorDesc.of(x), TensorDesc.of(expert_idx)
    if xd is None or idx is None:
        _fail("x and expert_idx are required")
    x_dt, idx_dt = np.dtype(xd.dtype), np.dtype(idx.dtype)
    if x_dt.name not in ("float16", "bfloat16", "float32"):
        raise ParamInvalidError(f"{OP}: x must be float16, bfloat16 or float32, got {x_dt}")
    if idx_dt != np.dtype(np.int32) and not (regbase and idx_dt == np.dtype(np.int64)):
        raise ParamInvalidError(f"{OP}: expert_idx must be int32{' or int64' if regbase else ''} on {soc.name}, "
                                f"got {idx_dt}")
    active, capacity, e_num = int(active_num), int(expert_capacity), int(expert_num)
    drop_pad, count_flag = int(drop_pad_mode), int(expert_tokens_count_or_cumsum_flag)
    before_flag = bool(expert_tokens_before_capacity_flag)

    if xd.ndim != 2:
        _fail(f"x should be 2-D (N, H), got shape {xd.shape}")
    if idx.ndim < 1 or xd.dim(0) != idx.dim(0):
        _fail(f"dim 0 of x ({xd.dim(0)}) and of expert_idx ({idx.shape}) should be equal")
    if capacity < 0:
        _fail(f"expert_capacity ({capacity}) cannot be less than 0")
    if e_num < 0:
        _fail(f"expert_num ({e_num}) cannot be less than 0")
    if drop_pad not in (0, 1):
        _fail(f"drop_pad_mode should be 0 or 1, got {drop_pad}")
    if drop_pad == 1 and (capacity < 1 or e_num < 1):
        _fail(f"expert_capacity ({capacity}) and expert_num ({e_num}) should be greater than 0 when "
              "drop_pad_mode is 1")
    if not 0 <= count_flag <= EXPERT_TOKENS_COUNT:
        _fail(f"expert_tokens_count_or_cumsum_flag should be 0, 1 or 2, got {count_flag}")
    if count_flag > 0 and e_num <= 0:
        _fail(f"expert_num ({e_num}) should be greater than 0 when expert_tokens_count_or_cumsum_flag is "
              f"{count_flag}")
    if drop_pad == 1 and capacity > xd.dim(0):
        _fail(f"expert_capacity ({capacity}) cannot exceed dim 0 of x ({xd.dim(0)})")
    if drop_pad == 1:
        count_flag = 0          # drop-pad writes no per-expert counts
    else:
        before_flag = False     # dropless writes no before-capacity counts
    if regbase:
        if idx.ndim not in (1, 2):
            _fail(f"expert_idx should be 1-D or 2-D, got shape {idx.shape}")
        k = idx.dim(1) if idx.ndim == 2 else 1
    else:
        if active < 0:
            _fail(f"active_num ({active}) cannot be less than 0")
        if idx.ndim != 2:
            _fail(f"expert_idx should be 2-D (N, K) on {soc.name}, got shape {idx.shape}")
        k = idx.dim(1)
    n, cols = idx.dim(0), xd.dim(1)
    total = n * k

    if not regbase:
        activate = total if active == 0 else min(total, active)
    else:
        activate = max(min(active + total if active <= 0 else active, total), 0)
    out_x = TensorDesc.of(expanded_x_out) or TensorDesc((e_num, capacity, cols) if drop_pad else (activate, cols),
                                                         x_dt)
    out_row = TensorDesc.of(expanded_row_idx_out) or TensorDesc((total,), np.int32)
    if drop_pad:
        if out_x.ndim != 3:
            _fail(f"expanded_x should be 3-D (expert_num, expert_capacity, H) with drop_pad_mode 1, got "
                  f"{out_x.shape}")
        for i, want in enumerate((e_num, capacity, cols)):
            if out_x.dim(i) != want:
                _fail(f"expanded_x dim {i} should be {want}, got shape {out_x.shape}")
    else:
        if out_x.ndim != 2:
            _fail(f"expanded_x should be 2-D (active rows, H), got {out_x.shape}")
        if out_x.dim(0) != activate:
            _fail(f"expanded_x dim 0 should be the active row count {activate}, got {out_x.dim(0)}")
        if out_x.dim(1) != cols:
            _fail(f"expanded_x dim 1 should be H = {cols}, got {out_x.dim(1)}")
    if out_row.ndim != 1:
        _fail(f"expanded_row_idx should be 1-D, got shape {out_row.shape}")
    if out_row.dim(0) != total:
        _fail(f"expanded_row_idx dim 0 should be N * K = {total}, got {out_row.dim(0)}")
    if drop_pad == 0 and count_flag != 0:
        _check_count_out("expert_tokens_count_or_cumsum",
                         TensorDesc.of(expert_tokens_count_or_cumsum_out) or TensorDesc((e_num,), np.int32), e_num)
    if drop_pad == 1 and before_flag:
        _check_count_out("expert_tokens_before_capacity",
                         TensorDesc.of(expert_tokens_before_capacity_out) or TensorDesc((e_num,), np.int32), e_num)

    aiv = soc.aiv_num
    x_bytes = x_dt.itemsize
    if regbase:
        ub = soc.ub_size_for_simt_tiling          # less SIMT_UB_SIZE_BYTE, the profile's SIMT reservation
        mrg_list_max = 2048
        # an INT64 key widens each sort element by one byte in the sort-loop budget
        loop_max = tdiv(tdiv(ub, 4 * 2 * 4 + (idx_dt == np.dtype(np.int64))), SORT32_ALIGN_ELEMENT) \
            * SORT32_ALIGN_ELEMENT
        full_load = False
    else:
        ub = soc.ub_size_for_tiling
        mrg_list_max = 2040
        loop_max = tdiv(tdiv(ub, 4 * 2 * 4), SORT32_ALIGN_ELEMENT) * SORT32_ALIGN_ELEMENT
        full_load = _full_load(n, cols, total, e_num, x_bytes, aiv, ub, loop_max, drop_pad)

    if loop_max <= 0 < total:
        # the real tiling would divide by a sort loop of no keys (and take the log of 0)
        _fail(f"a UB of {ub} bytes for the kernels holds no 32-key sort loop (each key needs "
              f"{4 * 2 * 4 + (idx_dt == np.dtype(np.int64))} bytes)")
    f = struct_fields(FIELDS)
    f.update(core_num=aiv, n=n, cols=cols, k=k, expert_capacity=capacity, expert_num=e_num, drop_pad_mode=drop_pad,
             expert_tokens_count_or_cumsum_flag=count_flag, expert_tokens_before_capacity_flag=int(before_flag))
    _vbs(f, total, loop_max, aiv)
    vbs_need = f["vbs_need_core_num"]
    f["vms_middle_need_core_num"] = 0 if vbs_need <= MRG_LIST_NUM else ceil_div(vbs_need, MRG_LIST_NUM)
    f["sort_out_one_loop_max_elements"] = mrg_list_max
    _src_to_dst(f, total, aiv, ub)
    _src_to_dst_capacity(f, total, cols, x_bytes, aiv, ub)
    _gather_out(f, total, cols, k, x_bytes, aiv, ub, activate, drop_pad, regbase)

    if full_load:
        key = KEY_FULL_LOAD
    else:
        key = (KEY_DROPLESS + (KEY_HIST_REGBASE if regbase and e_num <= HIST_REGBASE_MAX_EXPERT_NUM else 0)
               + KEY_DROP_PAD * drop_pad + (1 if total <= loop_max else 2))
    workspace = total * 4 * 2 * 3 + total * 4 * 2 + aiv * 2 * 4 + (e_num * 4 if regbase else 0) + LIB_API_WORKSPACE
    plan = regbase_ub_plan(f, idx_dt == np.dtype(np.int64), x_bytes) if regbase else ()
    return TilingResult(tiling_key=key, block_dim=aiv, workspace_size=workspace, fields=f, ub_plan=plan,
                        schedule_mode=0 if full_load else 1, soc=soc)
