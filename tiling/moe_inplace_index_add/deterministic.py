"""The deterministic template of MoeInplaceIndexAdd (keys 300000 + 0 float32 / 1 float16 / 2 bfloat16;
op_host/arch35/moe_inplace_index_add_determinstic_tiling.cpp): taken for float var when the context's
deterministic switch is on (GetDeterministic, set by aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC)).

source: moe/3rd/moe_inplace_index_add/op_host/arch35/moe_inplace_index_add_determinstic_tiling.cpp @ 25fb6b92890d.

Every core is launched (blockDim = the core count). The split:

* pre > cores / 2, after > cores / 2 or ids <= cores / 2: split the columns over the cores (afterAxis >= preAxis)
  or the pre rows, windows of ids and pieces of columns through double-buffered halves of the UB (an update row
  and its copy per id). These run MoeInplaceIndexAddDeterminsticNotQuant: every element gets its adds from one
  core in slot order.
* otherwise split the ids over the cores (MoeInplaceIndexAddDeterminstic, the quantising kernel): three window
  sizes, for the sort-and-sum step (ubIndexFactor), the quantise step (ubQuantaIndxFactor) and the var step
  (ubVarFactor, or ubVarOptiFactor with isOpti when ids / varInAxis < 0.1), and a workspace for the per-row
  counts and scales, the quantised sums and every core's run sums and run ids.

Quirk kept: the two var-step searches test the quantise step's window (ubQuantaIndxFactor), not their own, so
each stops after one step down from its start.
"""
from __future__ import annotations

import numpy as np

from ascend_sim.pipe import UbBuffer

from ..common import BLOCK_BYTES, TilingResult, align_down, align_up, ceil_div, struct_fields, tdiv
from .base import KEY_DETERMINISTIC, LIB_WORKSPACE, Shapes, radix_sort_tmp_bytes, shrink_until_fits

DETERMINISTIC_FIELDS = (
    "pre_axis", "var_in_axis", "updates_in_axis", "after_axis",
    "used_core_num_before", "used_core_num_after", "ub_index_factor", "after_axis_factor", "ub_var_opti_factor",
    "each_core_pre_axis_count", "tail_core_pre_axis_count", "update_loop_size", "update_tail_num",
    "indices_loop_size", "indice_axis_tail_num", "is_split_pre_axis",
    "each_core_after_axis_count", "tail_core_after_axis_count", "tail_update_loop_size", "tail_update_axis_num",
    "is_split_after_axis",
    "ub_quanta_indx_factor", "ub_var_factor", "each_core_index_count", "tail_core_index_count",
    "each_core_var_count", "tail_core_var_count", "is_with_alpha", "is_determinstic", "is_opti",
)

DET_KEY_OFFSET = {"float32": 0, "float16": 1, "bfloat16": 2}
DET_RESERVE_BYTES = 192         # RESERVE_SIZE
DET_DB_BUFFER = 2
DET_MIN_BLOCK = 1024            # MIN_BLOCK_SIZE: the id window's share in the column split
DET_ALIGN = 32                  # ALIGN_SIZE
DET_THRESHOLD_FACTOR = np.float32(0.1)
INT32_BYTES = FP32_BYTES = 4
MAX_SCORE_BYTES = 128 * 4       # the kernels' maxScoreBuf_ (128 floats)


def _half_ub(ub_size: int) -> int:
    return tdiv(ub_size - DET_RESERVE_BYTES, DET_DB_BUFFER)


def _split_pre(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
    """DoOpTilingForDeterminsticSplitPre: the pre rows over the cores; an update row and its copy per id."""
    align = tdiv(DET_ALIGN, s.var_size)
    after_align = align_up(s.after_axis, align)
    each = ceil_div(s.pre_axis, cores)
    used = ceil_div(s.pre_axis, each)
    one_block = s.index_size + s.var_size * after_align * 2
    if half_ub < one_block:
        index_factor = 1
        after_factor = align_up(tdiv(half_ub - s.index_size, 2 * s.var_size), align)
    else:
        after_factor = after_align
        index_factor = tdiv(align_down(tdiv(half_ub, one_block) * s.index_size, DET_ALIGN), s.index_size)
    col_loops = ceil_div(s.after_axis, after_factor)
    loops = ceil_div(s.indices_axis, index_factor)
    f.update(each_core_pre_axis_count=each, used_core_num_before=used, tail_core_pre_axis_count=s.pre_axis - each *
             (used - 1), ub_index_factor=index_factor, after_axis_factor=after_factor, update_loop_size=col_loops,
             update_tail_num=s.after_axis - (col_loops - 1) * after_factor, indices_loop_size=loops,
             indice_axis_tail_num=s.indices_axis - (loops - 1) * index_factor, is_split_pre_axis=1)


def _split_after(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
    """DoOpTilingForDeterminsticSplitAfter: the columns over the cores, every core all pre rows."""
    align = tdiv(DET_ALIGN, s.var_size)
    each = ceil_div(s.after_axis, cores)
    used = ceil_div(s.after_axis, each)
    tail = s.after_axis - each * (used - 1)
    if each * s.var_size > half_ub - DET_MIN_BLOCK:
        index_ub = min(DET_MIN_BLOCK, s.indices_axis * s.index_size)
        index_factor = tdiv(align_up(index_ub, DET_ALIGN), s.index_size)
        after_factor = align_down(tdiv(half_ub - index_factor * s.index_size, index_factor * s.var_size * 2), align)
    else:
        after_factor = align_up(each, align)
        index_factor = tdiv(half_ub, after_factor * s.var_size * 2 + s.index_size)
    loops = ceil_div(s.indices_axis, index_factor)
    col_loops, tail_col_loops = ceil_div(each, after_factor), ceil_div(tail, after_factor)
    f.update(each_core_pre_axis_count=s.pre_axis, tail_core_pre_axis_count=s.pre_axis, each_core_after_axis_count=each,
             used_core_num_before=used, tail_core_after_axis_count=tail, ub_index_factor=index_factor,
             after_axis_factor=after_factor, indices_loop_size=loops,
             indice_axis_tail_num=s.indices_axis - (loops - 1) * index_factor, update_loop_size=col_loops,
             update_tail_num=each - (col_loops - 1) * after_factor, tail_update_loop_size=tail_col_loops,
             tail_update_axis_num=tail - (tail_col_loops - 1) * after_factor, is_split_after_axis=1)


def _sort_window_bytes(s: Shapes, n: int) -> int:
    """GetRestAvailableSize's occupancy for a window of n ids: ids in, sorted ids + two blocks each (counted per
    id), origin positions, run counts (8 bytes each), run ids, and per id an update row, its fp32 copy and its fp32
    sum, with the ids' radix-sort scratch."""
    blk, after = BLOCK_BYTES, s.after_axis
    return (align_up(n * s.index_size, blk) + align_up(n * (s.index_size + 2 * DET_ALIGN), blk)
            + align_up(n * INT32_BYTES, blk) + align_up(n * INT32_BYTES * 2, blk) + align_up(n * s.index_size, blk)
            + n * align_up(s.var_size * after, blk) + 2 * n * align_up(FP32_BYTES * after, blk)
            + radix_sort_tmp_bytes(n, s.index_size))


def _quanta_rows_bytes(s: Shapes, n: int, with_ids: bool) -> int:
    """n rows of an int32 and two fp32 row buffers (the quantise / var steps), with their ids if asked."""
    blk, after = BLOCK_BYTES, s.after_axis
    rows = n * (align_up(INT32_BYTES * after, blk) + 2 * align_up(FP32_BYTES * after, blk))
    return rows + (align_up(n * s.index_size, blk) if with_ids else 0)


def _split_indices(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
    """The ids over the cores and the var rows over the cores (for the final step); the four window sizes."""
    each = ceil_div(s.indices_axis, cores)
    used = ceil_div(s.indices_axis, each)
    var_rows = s.pre_axis * s.var_in_axis
    each_var = ceil_div(var_rows, cores)
    used_after = ceil_div(var_rows, each_var)
    after_fp32 = tdiv(align_up(s.after_axis * FP32_BYTES, DET_ALIGN), FP32_BYTES)
    # step 1: as many update rows as ids, every sort buffer beside them
    per_id = s.index_size + (s.index_size + 2 * DET_ALIGN) + INT32_BYTES + 2 * INT32_BYTES + s.index_size
    start = tdiv(half_ub, per_id + (s.var_size + 2 * FP32_BYTES) * s.after_axis)
    index_factor = min(shrink_until_fits(start, 1, lambda n: half_ub - _sort_window_bytes(s, n)), s.indices_axis)
    # step 2: the run sums' ids, the fp32 sums, the scales and the quantised int32 sums
    start = tdiv(half_ub, s.index_size + (2 * FP32_BYTES + INT32_BYTES) * s.after_axis)
    quanta = min(shrink_until_fits(start, 1, lambda n: half_ub - _quanta_rows_bytes(s, n, True)), s.indices_axis)
    # step 3 and its optimised form: the searches test `quanta` rows (see the module docstring)
    start = tdiv(half_ub, (INT32_BYTES + 2 * FP32_BYTES) * after_fp32)
    var_factor = min(shrink_until_fits(start, 1, lambda _: half_ub - _quanta_rows_bytes(s, quanta, False)), each_var)
    start = tdiv(half_ub, s.index_size + (INT32_BYTES + 2 * FP32_BYTES) * after_fp32)
    var_opti = min(shrink_until_fits(start, 1, lambda _: half_ub - _quanta_rows_bytes(s, quanta, True)), each_var)
    opti = 1 if np.float32(s.indices_axis) / np.float32(s.var_in_axis) < DET_THRESHOLD_FACTOR else 0
    f.update(each_core_index_count=each, used_core_num_before=used, tail_core_index_count=s.indices_axis - each *
             (used - 1), each_core_var_count=each_var, used_core_num_after=used_after,
             tail_core_var_count=var_rows - each_var * (used_after - 1), ub_index_factor=index_factor,
             ub_quanta_indx_factor=quanta, ub_var_factor=var_factor, ub_var_opti_factor=var_opti, is_opti=opti)


def deterministic_workspace(s: Shapes, cores: int, f: dict) -> int:
    """GetWorkspaceSize: the 16 MiB reserve; the id split adds per-row counts (int32 per var row), the rows' scales
    (fp32 per var element), the quantised sums (int32 per var element), and per core eachCoreIndexCount run sums
    (fp32 rows) and run ids."""
    if f["is_split_pre_axis"] or f["is_split_after_axis"]:
        return LIB_WORKSPACE
    slots = cores * f["each_core_index_count"]
    return (LIB_WORKSPACE + s.pre_axis * s.var_in_axis * INT32_BYTES + s.var_axis * FP32_BYTES
            + s.var_axis * INT32_BYTES + slots * s.after_axis * FP32_BYTES + slots * s.index_size)


def not_quant_ub_plan(s: Shapes, f: dict, vector_que: str) -> tuple[UbBuffer, ...]:
    """InitBuffer calls of MoeInplaceIndexAddDeterminsticNotQuant in order: its maxScoreBuf_, the base class's
    buffers (InitBaseBuffer, ids unnarrowed), then the split's three queues (the column split's id queue
    block-aligned). vector_que: the position of the base class's vector-only queues (SIMD_SORT_VECTOR_QUE)."""
    n, cols = f["ub_index_factor"], f["after_axis_factor"]
    blk = BLOCK_BYTES
    index_que = align_up(n * s.index_size, DET_ALIGN) if f["is_split_after_axis"] else n * s.index_size
    return (UbBuffer("maxScoreBuf_", MAX_SCORE_BYTES),
            UbBuffer("baseMaxScoreBuf_", MAX_SCORE_BYTES),
            UbBuffer("sortIndicesBuf_", align_up(n * s.index_size + 2 * blk, blk)),
            UbBuffer("updatesOriginIdexQue_", n * 4, 2, "TQue", vector_que, 2),
            UbBuffer("uniqueIdCountQue_", align_up((n + 1) * 4, blk), 2, "TQue", vector_que, 2),
            UbBuffer("updateSumIdxQue_", align_up((n + 1) * s.index_size, blk), 2, "TQue", "VECOUT", 2),
            UbBuffer("indicesCastQue_", n * s.index_size, 2, "TQue", vector_que, 2),
            UbBuffer("indicesQue_", index_que, 1, "TQue", "VECIN", 1),
            UbBuffer("updatesQue_", n * cols * s.var_size, 1, "TQue", "VECIN", 1),
            UbBuffer("updatesCastQue_", n * cols * s.var_size, 1, "TQue", "VECOUT", 1))


def quant_ub_plan(s: Shapes, f: dict) -> tuple[UbBuffer, ...]:
    """InitBuffer calls of MoeInplaceIndexAddDeterminstic (the id split), one TPipe per step (pipe_.Reset()
    between them): "step1" sums every window's runs (ubIndexFactor ids), "step2" quantises the sums
    (ubQuantaIndxFactor), "step3" turns them back and adds them to var (ubVarFactor rows, or with isOpti
    ubVarOptiFactor with their ids). Double-buffered queues; rows padded to 32 bytes in T (var) or in fp32."""
    blk = BLOCK_BYTES
    after_t = tdiv(align_up(s.after_axis * s.var_size, blk), s.var_size)
    after_f = tdiv(align_up(s.after_axis * FP32_BYTES, blk), FP32_BYTES)
    n, q = f["ub_index_factor"], f["ub_quanta_indx_factor"]

    def que(name, nbytes, position, pipe):
        return UbBuffer(name, nbytes, 2, "TQue", position, 2, pipe)

    step1 = (que("indicesQue_", n * s.index_size, "VECIN", "step1"),
             UbBuffer("sortIndicesQue_", align_up(n * s.index_size + 2 * blk, blk), pipe="step1"),
             que("updatesOriginIdexQue_", n * 4, "VECIN", "step1"),
             que("uniqueIdCountQue_", align_up((n + 1) * 4, blk), "VECIN", "step1"),
             que("updateSumIdxQue_", align_up((n + 1) * s.index_size, blk), "VECOUT", "step1"),
             que("updatesQue_", n * after_t * s.var_size, "VECIN", "step1"),
             que("updatesCastQue_", n * after_t * FP32_BYTES, "VECOUT", "step1"),
             que("updateSumQue_", n * after_f * FP32_BYTES, "VECOUT", "step1"))
    step2 = (que("sumIdxQue_", q * s.index_size, "VECIN", "step2"),
             que("sumQue_", q * after_f * FP32_BYTES, "VECIN", "step2"),
             que("quantaSumQue_", q * after_f * INT32_BYTES, "VECOUT", "step2"),
             que("rValueQue_", q * after_f * FP32_BYTES, "VECIN", "step2"))
    v = f["ub_var_opti_factor"] if f["is_opti"] else f["ub_var_factor"]
    step3: tuple[UbBuffer, ...] = (que("sumQuanToIntQue_", v * after_f * INT32_BYTES, "VECIN", "step3"),
             que("rValueQue_", v * after_f * FP32_BYTES, "VECIN", "step3"),
             que("invQuanDataQue_", v * after_t * s.var_size, "VECOUT", "step3"))
    if f["is_opti"]:
        step3 += (que("sumIdxQue_", v * s.index_size, "VECIN", "step3"),)
    return step1 + step2 + step3


def deterministic(s: Shapes, soc, ub_size: int) -> TilingResult:
    """The deterministic tiling; ub_size: the UB left after the SIMT data cache, bytes."""
    from .simd_sort import SIMD_SORT_VECTOR_QUE
    cores = soc.aiv_num
    half_ub = _half_ub(ub_size)
    f = struct_fields(DETERMINISTIC_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, is_with_alpha=s.with_alpha, is_determinstic=1)
    thresh = tdiv(cores, 2)
    if s.pre_axis > thresh or s.after_axis > thresh or s.indices_axis <= thresh:
        if s.after_axis >= s.pre_axis:
            _split_after(s, cores, half_ub, f)
        else:
            _split_pre(s, cores, half_ub, f)
        plan = not_quant_ub_plan(s, f, SIMD_SORT_VECTOR_QUE)
    else:
        _split_indices(s, cores, half_ub, f)
        plan = quant_ub_plan(s, f)
    return TilingResult(tiling_key=KEY_DETERMINISTIC + DET_KEY_OFFSET[s.dtype], block_dim=cores,
                        workspace_size=deterministic_workspace(s, cores, f), fields=f, ub_plan=plan,
                        schedule_mode=1, soc=soc)
