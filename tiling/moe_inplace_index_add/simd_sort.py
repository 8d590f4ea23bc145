"""The SIMD-sort template of MoeInplaceIndexAdd (key 200000; op_host/arch35/moe_inplace_index_add_simd_sort_tiling.cpp):
the SIMD template's three splits (columns, ids, pre rows) with every id window's buffers for the sort (cast ids,
sorted ids with their pads, run counts, run ids, origin positions) and AscendC's radix-sort scratch in the budget,
and an fp32 sum row beside every update row.

source: moe/3rd/moe_inplace_index_add/op_host/arch35/moe_inplace_index_add_simd_sort_tiling.cpp @ 25fb6b92890d.
"""
from __future__ import annotations

from typing import NamedTuple

from ascend_sim.pipe import UbBuffer

from ..common import BLOCK_BYTES, TilingResult, align_down, align_up, ceil_div, struct_fields, tdiv
from .base import (
    CAST_SIZE,
    HASH_BUCKET_BYTES,
    KEY_SIMD_SORT,
    LIB_WORKSPACE,
    SORT_PAD_BLOCKS,
    Shapes,
    cast_mode,
    column_factor,
    fail,
    radix_sort_tmp_bytes,
    shrink_until_fits,
    sort_value_size,
)
from .simd import SIMD_AFTER_HANDLE_BYTES, SIMD_DB_BUFFER, SIMD_INDICES_MIN_BLOCK, SIMD_RESERVE_BYTES

SIMD_SORT_FIELDS = (
    "pre_axis", "var_in_axis", "updates_in_axis", "after_axis", "used_core_num_before", "ub_index_factor",
    "after_axis_factor",
    "each_core_index_count", "tail_core_index_count", "main_core_indices_loop", "tail_core_indices_loop",
    "main_core_tail_indices", "tail_core_tail_indices",
    "each_core_pre_axis_count", "tail_core_pre_axis_count", "update_loop_size", "update_tail_num",
    "indices_loop_size", "indice_axis_tail_num",
    "each_core_after_axis_count", "tail_core_after_axis_count", "tail_update_loop_size", "tail_update_axis_num",
    "is_split_pre_axis", "is_split_after_axis", "is_split_indices_axis", "is_with_alpha", "indices_stride",
    "indices_cast_mode",
)

SIMD_SORT_MAX_SCORE_BYTES = 128 * 4      # the kernel's maxScoreBuf_ (128 floats), taken from the column split's half
SIMD_SORT_SHIFT_PAD = 2 * BLOCK_BYTES    # sortIndicesQue_: two blocks of shift offset around the sorted ids
# The kernel declares updatesOriginIdexQue_, uniqueIdCountQue_ and indicesCastQue_ as TQue<VECIN>, ten VECIN buffers
# with indicesQue_ and updatesQue_, more than the 8 event ids the machine model gives one position. The three are
# filled and read by the vector and scalar units only (no MTE2 copy ever lands in them), so the plan puts them at
# VECCALC, where the model's EnQue / DeQue hand-off is the V -> V one they really make.
SIMD_SORT_VECTOR_QUE = "VECCALC"


class _SortSizes(NamedTuple):
    """Element sizes the SIMD-sort budget uses: ids, cast ids (0 without a cast), the sorted type."""
    # the field shadows tuple.index on purpose (it is read as .index); mypy reports any field named so
    index: int  # type: ignore[assignment]
    cast: int
    sort: int


def _sort_sizes(s: Shapes, mode: int) -> _SortSizes:
    return _SortSizes(s.index_size, CAST_SIZE[mode], sort_value_size(s, mode))


def _index_bytes(z: _SortSizes, n: int) -> int:
    """GetIndicesAlignBlockSize of the SIMD-sort tiling: the id buffers of a window of n ids (ids in, cast ids,
    sorted ids + shift pad, run counts + 1, run ids + 1, origin positions) and the radix-sort scratch."""
    blk = BLOCK_BYTES
    total = align_up(n * z.index, blk)
    if z.cast:
        total += align_up(n * z.cast, blk)
    total += (align_up(n * z.sort, blk) + SIMD_SORT_SHIFT_PAD) + (align_up(n * 4, blk) + blk) \
        + (align_up(n * z.index, blk) + blk) + align_up(n * 4, blk)
    return total + radix_sort_tmp_bytes(n, z.sort)


def _after_bytes(s: Shapes, n: int, after: int) -> int:
    """GetAfterAlignBlockSize: n rows of `after` columns of updates (var type) and of their fp32 sums."""
    return n * align_up(s.var_size * after, BLOCK_BYTES) + n * align_up(4 * after, BLOCK_BYTES)


def _one_id_bytes(z: _SortSizes) -> int:
    """indicesSize of the pre / after splits: the id buffers of one id, each block-aligned, with the scratch."""
    blk = BLOCK_BYTES
    total = align_up(z.index, blk)
    if z.cast:
        total += align_up(z.cast, blk)
    return (total + align_up(z.sort + SIMD_SORT_SHIFT_PAD, blk) + align_up(4, blk) + align_up(8, blk)
            + align_up(z.index, blk) + radix_sort_tmp_bytes(1, z.sort))


def _window_rest(s: Shapes, z: _SortSizes, half_ub: int, n: int, cols: int) -> int:
    """The budget left for a window of n ids in the pre / after splits' search (cols: eachCoreAfterAxisCount)."""
    blk = BLOCK_BYTES
    used = align_up(n * z.index, blk)
    if z.cast:
        used += align_up(n * z.cast, blk)
    used += (align_up(n * (z.sort + SIMD_SORT_SHIFT_PAD), blk) + align_up(n * 4, blk) + align_up(n * 8, blk)
             + align_up(n * z.index, blk) + n * align_up(4 * cols, blk) + n * align_up(s.var_size * cols, blk)
             + radix_sort_tmp_bytes(n, z.sort))
    return half_ub - used


def _big_rows(s: Shapes, z: _SortSizes, half_ub: int, one_id: int) -> tuple[int, int]:
    """(ubIndexFactor, afterAxisFactor) when one id and its row do not fit: an id window of at most 8 KiB, the
    columns from what is left."""
    index_ub = min(SIMD_INDICES_MIN_BLOCK, s.indices_axis * one_id)
    index_factor = tdiv(align_up(index_ub, BLOCK_BYTES), one_id)
    update_bytes = align_up(s.var_size * index_factor, BLOCK_BYTES) + align_up(4 * index_factor, BLOCK_BYTES)
    after_factor = tdiv(half_ub - index_factor * one_id, update_bytes)
    return index_factor, tdiv(align_down(after_factor, BLOCK_BYTES), s.var_size)


def _window_search(s: Shapes, z: _SortSizes, half_ub: int, start: int, cols: int) -> int:
    """The pre / after splits' descending search from `start`; it stops at indicesAxis when start is above it."""
    index_factor = start + 1
    rest = -1
    while rest <= 0:
        index_factor -= 1
        rest = _window_rest(s, z, half_ub, index_factor, cols)
        if index_factor > s.indices_axis:
            return s.indices_axis
    return index_factor


def _split_after(s: Shapes, z: _SortSizes, cores: int, ub_size: int, f: dict) -> None:
    half_ub = tdiv(ub_size - SIMD_RESERVE_BYTES, SIMD_DB_BUFFER) - SIMD_SORT_MAX_SCORE_BYTES
    align = tdiv(BLOCK_BYTES, s.var_size)
    each = ceil_div(s.after_axis, cores)
    used = ceil_div(s.after_axis, each)
    tail = s.after_axis - each * (used - 1)
    one_id = _one_id_bytes(z)
    if one_id + align_up(s.var_size * each, BLOCK_BYTES) + align_up(4 * each, BLOCK_BYTES) > half_ub:
        index_factor, after_factor = _big_rows(s, z, half_ub, one_id)
        if after_factor <= 0:
            # the real tiling carries on with a column piece of <= 0 elements: its kernel's column loops never
            # run and var comes back unchanged, without an error. Refused here, as a UB-limit error a user can act on.
            fail(f"SIMD sort, column split: a UB of {ub_size} bytes left after the SIMT data cache holds an id "
                 f"window of {index_factor} ids but no column of {s.var_size}-byte elements beside it "
                 f"(afterAxisFactor {after_factor}); the real kernel would add nothing. Use a larger ub_size")
    else:
        after_factor = align_up(each, align)
        start = tdiv(half_ub, after_factor * (s.var_size + 4) + one_id)
        index_factor = _window_search(s, z, half_ub, start, each)
    loops = ceil_div(s.indices_axis, index_factor)
    col_loops, tail_col_loops = ceil_div(each, after_factor), ceil_div(tail, after_factor)
    f.update(each_core_after_axis_count=each, used_core_num_before=used, tail_core_after_axis_count=tail,
             ub_index_factor=index_factor, after_axis_factor=after_factor, indices_loop_size=loops,
             indice_axis_tail_num=s.indices_axis - (loops - 1) * index_factor, update_loop_size=col_loops,
             update_tail_num=each - (col_loops - 1) * after_factor, tail_update_loop_size=tail_col_loops,
             tail_update_axis_num=tail - (tail_col_loops - 1) * after_factor, is_split_after_axis=1)


def _split_indices(s: Shapes, z: _SortSizes, cores: int, ub_size: int, f: dict) -> None:
    align = tdiv(BLOCK_BYTES, s.var_size)
    half_ub = tdiv(ub_size - SIMD_RESERVE_BYTES, SIMD_DB_BUFFER)
    each = ceil_div(s.indices_axis, cores)
    used = ceil_div(s.indices_axis, each)
    tail = s.indices_axis - each * (used - 1)
    # per-id bytes, unaligned (the sorted ids' pad counted as two UB blocks)
    per_id = z.index + z.cast + (z.sort + 2 * BLOCK_BYTES) + 4 + 4 + z.index
    # the real code sizes the first test with the base class's indicesUbFactor_, which is 1 here
    if _index_bytes(z, 1) + _after_bytes(s, 1, s.after_axis) > half_ub:
        index_ub = min(SIMD_INDICES_MIN_BLOCK, _index_bytes(z, s.indices_axis))
        index_factor = min(shrink_until_fits(tdiv(align_up(index_ub, BLOCK_BYTES), per_id), 1,
                                             lambda n: SIMD_INDICES_MIN_BLOCK - _index_bytes(z, n)), each)
        for_updates = half_ub - _index_bytes(z, index_factor)
        after_factor = column_factor(for_updates, s.after_axis, align,
                                     lambda cols: _after_bytes(s, index_factor, cols))
    else:
        after_factor = align_up(min(tdiv(SIMD_AFTER_HANDLE_BYTES, s.var_size), s.after_axis), align)
        index_factor = min(shrink_until_fits(
            tdiv(half_ub, _after_bytes(s, 1, after_factor)) + 1, 1,
            lambda n: half_ub - (_index_bytes(z, n) + _after_bytes(s, n, after_factor))), each)
    col_loops = ceil_div(s.after_axis, after_factor)
    main_loops, tail_loops = ceil_div(each, index_factor), ceil_div(tail, index_factor)
    f.update(each_core_index_count=each, used_core_num_before=used, tail_core_index_count=tail,
             ub_index_factor=index_factor, after_axis_factor=after_factor, update_loop_size=col_loops,
             update_tail_num=s.after_axis - (col_loops - 1) * after_factor, main_core_indices_loop=main_loops,
             tail_core_indices_loop=tail_loops, main_core_tail_indices=each - (main_loops - 1) * index_factor,
             tail_core_tail_indices=tail - (tail_loops - 1) * index_factor, is_split_indices_axis=1)


def _split_pre(s: Shapes, z: _SortSizes, cores: int, ub_size: int, f: dict) -> None:
    align = tdiv(BLOCK_BYTES, s.var_size)
    half_ub = tdiv(ub_size - SIMD_RESERVE_BYTES, SIMD_DB_BUFFER)
    each = ceil_div(s.pre_axis, cores)
    used = ceil_div(s.pre_axis, each)
    one_id = _one_id_bytes(z)
    if one_id + align_up(s.var_size * s.after_axis, BLOCK_BYTES) + align_up(4 * s.after_axis, BLOCK_BYTES) \
            > half_ub:
        index_factor, after_factor = _big_rows(s, z, half_ub, one_id)
    else:
        after_factor = align_up(s.after_axis, align)
        start = tdiv(half_ub, after_factor * (s.var_size + 4) + one_id)
        # the search counts the update rows with eachCoreAfterAxisCount, which this split leaves at 0
        index_factor = _window_search(s, z, half_ub, start, 0)
    col_loops = ceil_div(s.after_axis, after_factor)
    loops = ceil_div(s.indices_axis, index_factor)
    f.update(each_core_pre_axis_count=each, used_core_num_before=used, tail_core_pre_axis_count=s.pre_axis - each *
             (used - 1), ub_index_factor=index_factor, after_axis_factor=after_factor, update_loop_size=col_loops,
             update_tail_num=s.after_axis - (col_loops - 1) * after_factor, indices_loop_size=loops,
             indice_axis_tail_num=s.indices_axis - (loops - 1) * index_factor, is_split_pre_axis=1)


def simd_sort_ub_plan(s: Shapes, f: dict) -> tuple[UbBuffer, ...]:
    """InitBuffer calls of MoeInplaceIndexAddSimdSort, in order: its own maxScoreBuf_, the base class's buffers
    (InitBaseBuffer), then the branch's three queues. Sizes in bytes per buffer."""
    n, cols = f["ub_index_factor"], f["after_axis_factor"]
    mode = f["indices_cast_mode"]
    sort_size = sort_value_size(s, mode)
    blk = BLOCK_BYTES
    plan = (UbBuffer("maxScoreBuf_", HASH_BUCKET_BYTES),
            UbBuffer("baseMaxScoreBuf_", HASH_BUCKET_BYTES),
            UbBuffer("sortIndicesBuf_", align_up(n * sort_size + SORT_PAD_BLOCKS * blk, blk)),
            UbBuffer("updatesOriginIdexQue_", n * 4, 2, "TQue", SIMD_SORT_VECTOR_QUE, 2),
            UbBuffer("uniqueIdCountQue_", align_up((n + 1) * 4, blk), 2, "TQue", SIMD_SORT_VECTOR_QUE, 2),
            UbBuffer("updateSumIdxQue_", align_up((n + 1) * s.index_size, blk), 2, "TQue", "VECOUT", 2),
            UbBuffer("indicesCastQue_", n * sort_size, 2, "TQue", SIMD_SORT_VECTOR_QUE, 2))
    sum_size = s.var_size if f["is_split_pre_axis"] else 4
    return plan + (UbBuffer("indicesQue_", n * s.index_size, 2, "TQue", "VECIN", 2),
                   UbBuffer("updatesQue_", n * cols * s.var_size, 2, "TQue", "VECIN", 2),
                   UbBuffer("updatesCastQue_", n * cols * sum_size, 2, "TQue", "VECOUT", 2))


def simd_sort(s: Shapes, soc, ub_size: int) -> TilingResult:
    """The SIMD-sort tiling; ub_size: the UB left after the SIMT data cache, bytes."""
    cores = soc.aiv_num
    mode = cast_mode(s)
    z = _sort_sizes(s, mode)
    f = struct_fields(SIMD_SORT_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, is_with_alpha=s.with_alpha, indices_stride=1, indices_cast_mode=mode)
    if s.after_axis * s.var_size >= SIMD_AFTER_HANDLE_BYTES * cores:
        _split_after(s, z, cores, ub_size, f)
    elif s.indices_axis > s.pre_axis:
        _split_indices(s, z, cores, ub_size, f)
    else:
        _split_pre(s, z, cores, ub_size, f)
    return TilingResult(tiling_key=KEY_SIMD_SORT, block_dim=cores, workspace_size=LIB_WORKSPACE, fields=f,
                        ub_plan=simd_sort_ub_plan(s, f), schedule_mode=1, soc=soc)
