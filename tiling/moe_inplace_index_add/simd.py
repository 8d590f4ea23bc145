"""The SIMD template of MoeInplaceIndexAdd (key 400000; op_host/arch35/moe_inplace_index_add_simd_tiling.cpp):
windows of ids and pieces of columns, double-buffered, split over the cores by columns (afterAxis * sizeof >= 128
bytes per core), else by ids (more ids than pre rows), else by pre rows. The selection only lets the column split
through (see ops/l0/moe_inplace_index_add/simd.py); the other two are tiled all the same.

source: moe/3rd/moe_inplace_index_add/op_host/arch35/moe_inplace_index_add_simd_tiling.cpp @ 25fb6b92890d.
"""
from __future__ import annotations

from ascend_sim.pipe import UbBuffer

from ..common import BLOCK_BYTES, TilingResult, align_down, align_up, ceil_div, struct_fields, tdiv
from .base import KEY_SIMD, LIB_WORKSPACE, Shapes, column_factor, shrink_until_fits

SIMD_FIELDS = (
    "pre_axis", "var_in_axis", "updates_in_axis", "after_axis", "ub_factor", "used_core_num_before",
    "ub_index_factor", "after_axis_factor",
    "each_core_index_count", "tail_core_index_count", "main_core_indices_loop", "tail_core_indices_loop",
    "main_core_tail_indices", "tail_core_tail_indices",
    "each_core_pre_axis_count", "tail_core_pre_axis_count", "update_loop_size", "update_tail_num",
    "indices_loop_size", "indice_axis_tail_num", "is_split_pre_axis",
    "each_core_after_axis_count", "tail_core_after_axis_count", "tail_update_loop_size", "tail_update_axis_num",
    "is_split_after_axis", "is_split_indices_axis", "is_with_alpha", "indices_stride",
)

SIMD_DB_BUFFER = 2
SIMD_RESERVE_BYTES = 128
SIMD_AFTER_SPLIT_BYTES = 128    # AFTER_SPLIT_THRESHOLD: per core
SIMD_AFTER_HANDLE_BYTES = 1024  # AFTER_HANDLE_THRESHOLD
SIMD_INDICES_MIN_BLOCK = 8192   # INDICES_MIN_BLOCK_SIZE
SIMD_TRANS_BYTES = 4            # the int32 element the budget counts beside every var element


def _indices_block(s: Shapes, n: int) -> int:
    """GetIndicesAlignBlockSize: n ids in whole UB blocks."""
    return align_up(n * s.index_size, BLOCK_BYTES)


def _after_block(s: Shapes, n: int, after: int) -> int:
    """GetAfterAlignBlockSize: n rows of `after` var elements, each in whole UB blocks."""
    return n * align_up(s.var_size * after, BLOCK_BYTES)


def _window_left(s: Shapes, half_ub: int, cols: int):
    """What a window of n ids and their rows of `cols` columns leave of half_ub (bytes), as a function of n."""
    return lambda n: half_ub - (_indices_block(s, n) + _after_block(s, n, cols))


def _split_pre(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
    align = tdiv(BLOCK_BYTES, s.var_size)
    after_align = align_up(s.after_axis, align)
    each = ceil_div(s.pre_axis, cores)
    used = ceil_div(s.pre_axis, each)
    one_block = s.index_size + (s.var_size + SIMD_TRANS_BYTES) * after_align
    if half_ub < one_block:
        index_factor = 1
        after_factor = align_up(tdiv(half_ub - s.index_size, SIMD_TRANS_BYTES + s.var_size), align)
    else:
        after_factor = after_align
        index_factor = shrink_until_fits(tdiv(half_ub, one_block) + 1, 1, _window_left(s, half_ub, after_factor)) or 1
    loops = ceil_div(s.indices_axis, index_factor)
    col_loops = ceil_div(s.after_axis, after_factor)
    f.update(each_core_pre_axis_count=each, used_core_num_before=used, tail_core_pre_axis_count=s.pre_axis - each *
             (used - 1), ub_index_factor=index_factor, after_axis_factor=after_factor, indices_loop_size=loops,
             indice_axis_tail_num=s.indices_axis - (loops - 1) * index_factor, update_loop_size=col_loops,
             update_tail_num=s.after_axis - (col_loops - 1) * after_factor, is_split_pre_axis=1)


def _split_indices(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
    align = tdiv(BLOCK_BYTES, s.var_size)
    each = ceil_div(s.indices_axis, cores)
    used = ceil_div(s.indices_axis, each)
    tail = s.indices_axis - each * (used - 1)
    index_factor = 0           # the member's initial value, used by the first size test
    if _indices_block(s, index_factor) + _after_block(s, index_factor, s.after_axis) > half_ub:
        index_ub = min(SIMD_INDICES_MIN_BLOCK, _indices_block(s, s.indices_axis))
        index_factor = min(tdiv(align_up(index_ub, BLOCK_BYTES), s.index_size), each)
        for_updates = half_ub - _indices_block(s, index_factor)
        after_factor = column_factor(for_updates, s.after_axis, align,
                                     lambda cols: _after_block(s, index_factor, cols))
    else:
        after_factor = align_up(min(tdiv(SIMD_AFTER_HANDLE_BYTES, s.var_size), s.after_axis), align)
        index_factor = min(shrink_until_fits(tdiv(half_ub, _after_block(s, 1, after_factor)) + 1, 1,
                                             _window_left(s, half_ub, after_factor)), each)
    col_loops = ceil_div(s.after_axis, after_factor)
    main_loops, tail_loops = ceil_div(each, index_factor), ceil_div(tail, index_factor)
    f.update(each_core_index_count=each, used_core_num_before=used, tail_core_index_count=tail,
             ub_index_factor=index_factor, after_axis_factor=after_factor, update_loop_size=col_loops,
             update_tail_num=s.after_axis - (col_loops - 1) * after_factor, main_core_indices_loop=main_loops,
             tail_core_indices_loop=tail_loops, main_core_tail_indices=each - (main_loops - 1) * index_factor,
             tail_core_tail_indices=tail - (tail_loops - 1) * index_factor, is_split_indices_axis=1)


def _split_after(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
    align = tdiv(BLOCK_BYTES, s.var_size)
    each = ceil_div(s.after_axis, cores)
    used = ceil_div(s.after_axis, each)
    tail = s.after_axis - each * (used - 1)
    if each * (s.var_size + SIMD_TRANS_BYTES) > half_ub - SIMD_INDICES_MIN_BLOCK:
        index_ub = min(SIMD_INDICES_MIN_BLOCK, s.indices_axis * s.index_size)
        index_factor = tdiv(align_up(index_ub, BLOCK_BYTES), s.index_size)
        after_factor = align_down(tdiv(half_ub - index_factor * s.index_size,
                                       index_factor * (s.var_size + SIMD_TRANS_BYTES)), align)
    else:
        after_factor = align_up(each, align)
        index_factor = max(tdiv(half_ub, after_factor * (s.var_size + SIMD_TRANS_BYTES) + s.index_size), 1)
    loops = ceil_div(s.indices_axis, index_factor)
    col_loops = ceil_div(each, after_factor)
    tail_col_loops = ceil_div(tail, after_factor)
    f.update(each_core_pre_axis_count=s.pre_axis, tail_core_pre_axis_count=s.pre_axis, each_core_after_axis_count=each,
             used_core_num_before=used, tail_core_after_axis_count=tail, ub_index_factor=index_factor,
             after_axis_factor=after_factor, indices_loop_size=loops,
             indice_axis_tail_num=s.indices_axis - (loops - 1) * index_factor, update_loop_size=col_loops,
             update_tail_num=each - (col_loops - 1) * after_factor, tail_update_loop_size=tail_col_loops,
             tail_update_axis_num=tail - (tail_col_loops - 1) * after_factor, is_split_after_axis=1)


def simd_ub_plan(s: Shapes, f: dict) -> tuple[UbBuffer, ...]:
    """InitBuffer calls of the SIMD kernel, in its order: ProcessAfter allocates updates first, the other two
    branches indices first (double-buffered queues)."""
    updates = UbBuffer("updatesQue_", f["ub_index_factor"] * f["after_axis_factor"] * s.var_size, 2, "TQue",
                       "VECIN", 2)
    indices = UbBuffer("indicesQue_", f["ub_index_factor"] * s.index_size, 2, "TQue", "VECIN", 2)
    return (updates, indices) if f["is_split_after_axis"] else (indices, updates)


def simd(s: Shapes, soc, ub_size: int) -> TilingResult:
    """The SIMD tiling; ub_size: the UB left after the SIMT data cache, bytes."""
    cores = soc.aiv_num
    half_ub = tdiv(ub_size - SIMD_RESERVE_BYTES, SIMD_DB_BUFFER)
    f = struct_fields(SIMD_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, is_with_alpha=s.with_alpha, indices_stride=1)
    if s.after_axis * s.var_size >= SIMD_AFTER_SPLIT_BYTES * cores:
        _split_after(s, cores, half_ub, f)
    elif s.indices_axis > s.pre_axis:
        _split_indices(s, cores, half_ub, f)
    else:
        _split_pre(s, cores, half_ub, f)
    return TilingResult(tiling_key=KEY_SIMD, block_dim=cores, workspace_size=LIB_WORKSPACE, fields=f,
                        ub_plan=simd_ub_plan(s, f), schedule_mode=1, soc=soc)
