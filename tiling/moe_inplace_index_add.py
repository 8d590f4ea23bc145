"""Tiling of MoeInplaceIndexAdd on Ascend 950 (moe/3rd/moe_inplace_index_add/op_host/arch35/, [M26]: cannmirror
master 2026-07-24; the op has no membase tiling in this library: 910B / 910_93 take InplaceIndexAdd from another
CANN library).

    var[pre, indices[j], after] += alpha * updates[pre, j, after]      (axis = the op's dim attribute)

The shapes fold into (preAxis, varInAxis | updatesInAxis, afterAxis) around the axis. TilingParse takes the core
count (GetCoreNumAiv) and the UB (GetCoreMemSize); every template starts from that UB minus the 32 KiB SIMT data
cache. Template selection (SelTemplateByInput; the registered templates are tried in priority order, each one
IsCapable only for its flag):

* deterministic context switch and var float32 / float16 / bfloat16           -> deterministic (keys 300000 + 0/1/2)
* useSort = updatesInAxis div varInAxis >= 5 (ids repeat on average five times or more);
  SIMD if afterAxis * sizeof(var) >= 128 bytes (useSort) or afterAxis >= cores * 128 elements (no sort),
  and var is one of float32 / float16 / bfloat16 / int32 / int16 / int8 / bool:
      useSort -> SIMD sort (key 200000), else SIMD (key 400000)
* otherwise: useSort, afterAxis <= 1024 and var float32 / float16 / bfloat16 / int64 / int32 -> SIMT sort
  (keys 5000ab: a = 64-bit offsets, b = alpha), else SIMT (keys 10abdd: a = alpha, b = 64-bit offsets, dd = the
  var's ge dtype code).

The SIMT, SIMD, SIMT-sort and SIMD-sort templates are tiled here field for field (the sort templates with AscendC's
radix-sort scratch size, radix_sort_tmp_bytes; SIMD sort's three splits: columns, ids, pre rows). The deterministic
tiling is not reproduced yet: it raises NotImplementedError (select_template still names it). Workspace: the 16 MiB library reserve,
plus an int32 / fp16 copy of var (512-byte aligned) for the SIMT template on int8 / uint8 / int16 / bool.
"""
from __future__ import annotations

from typing import NamedTuple

import ml_dtypes
import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import TensorDesc, TilingResult, align_down, align_up, ceil_div, struct_fields, tdiv
from .platform import get_soc
from .status import TilingError

OP = "MoeInplaceIndexAdd"

SIMT_FIELDS = ("pre_axis", "var_in_axis", "updates_in_axis", "after_axis", "ub_factor", "col_ub_factor",
               "indices_stride", "indices_ub_factor")
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

SIMT_SORT_FIELDS = (
    "pre_axis", "var_in_axis", "updates_in_axis", "after_axis", "indices_ub_factor", "indices_loop_size",
    "indice_axis_tail_num", "tail_block_indices_loop_size", "each_core_index_count", "sort_share_buf_size",
    "normal_updates_pre_num", "tail_updates_pre_num", "updates_pre_loop", "used_core_num", "indices_stride",
    "indices_cast_mode",
)

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

TEMPLATE_SIMT = "simt"
TEMPLATE_SIMD = "simd"
TEMPLATE_SIMT_SORT = "simt_sort"
TEMPLATE_SIMD_SORT = "simd_sort"
TEMPLATE_DETERMINISTIC = "deterministic"

KEY_SIMT = 100000               # + ge dtype code + 100 (offsets past INT32_MAX) + 1000 (alpha)
KEY_SIMD_SORT = 200000
KEY_DETERMINISTIC = 300000      # + 0 float32, 1 float16, 2 bfloat16
KEY_SIMD = 400000
KEY_SIMT_SORT = 500000          # + 10 (64-bit offsets) + 1 (alpha)

DCACHE_SIZE_SIMT = 32 * 1024    # taken from the UB by every template
MIN_SIZE_SIMD_HANDLE = 128
THRESHOLD_USE_SORT = 5
SIMT_SORT_LASTDIM_LIMIT = 1024
LIB_WORKSPACE = 16 * 1024 * 1024
GM_ALIGN = 512
BLOCK_BYTES = 32                # GetUbBlockSize
INT32_MAX = 2 ** 31 - 1

SIMT_THREADS_PER_CORE = 1024    # MAX_THREAD_NUM of the SIMT tiling (the kernel launches 2048 threads per core)
SIMT_UB_MAX = 64 * 1024         # USE_UB_MAX_SIZE: the SIMT template's local memory

SIMD_DB_BUFFER = 2
SIMD_RESERVE_BYTES = 128
SIMD_AFTER_SPLIT_BYTES = 128    # AFTER_SPLIT_THRESHOLD: per core
SIMD_AFTER_HANDLE_BYTES = 1024  # AFTER_HANDLE_THRESHOLD
SIMD_INDICES_MIN_BLOCK = 8192   # INDICES_MIN_BLOCK_SIZE
SIMD_TRANS_BYTES = 4            # the int32 element the budget counts beside every var element

# ge dtype codes and GetSizeByDataType of the var dtypes the op accepts
_GE = {"float32": 0, "float16": 1, "int8": 2, "int32": 3, "uint8": 4, "int16": 6, "int64": 9, "bool": 12,
       "bfloat16": 27}
_SIZE = {"float32": 4, "float16": 2, "int8": 1, "int32": 4, "uint8": 1, "int16": 2, "int64": 8, "bool": 1,
         "bfloat16": 2}
_SIMD_DTYPES = ("float32", "float16", "bfloat16", "int32", "int16", "int8", "bool")
_SIMT_SORT_DTYPES = ("float32", "float16", "bfloat16", "int64", "int32")
_DETERMINISTIC_DTYPES = ("float32", "float16", "bfloat16")
_INDEX_SIZE = {"int32": 4, "int64": 8}

SIMT_SORT_SIMD_RESERVED = 8 * 1024   # SIMD_RESERVED_SIZE of the SIMT-sort tiling
HASH_BUCKET_BYTES = 128 * 4          # HASH_BUCKET_SIZE (the kernel's hashBuffer_ of 128 floats)
SORT_PAD_BLOCKS = 2                  # SORT_PAD_NUM: two extra 32-byte blocks after the sorted ids and run counts
# indicesCastMode: the ids are sorted as the narrowest type that holds varInAxis (GetCastTypeForSort)
CAST_NONE, CAST_I32_I16, CAST_I64_I32, CAST_I64_I16, CAST_I32_U8, CAST_I64_U8 = range(6)
_CAST_SIZE = {CAST_NONE: 0, CAST_I32_I16: 2, CAST_I64_I32: 4, CAST_I64_I16: 2, CAST_I32_U8: 1, CAST_I64_U8: 1}
UINT8_MAX, INT16_MAX = 255, 32767


def radix_sort_tmp_bytes(count: int, value_size: int) -> int:
    """AscendC GetSortMaxMinTmpSize for a RADIX_SORT of `count` values of `value_size` bytes with a uint32
    destination index and no source index, source not reused (asc-devkit impl/adv_api/tiling/sort/
    sort_tiling_impl.cpp, 2026-07-23): count rounded up to 32; 7 bytes per element (the u32 keys of two rounds, u16
    indices, u8 digits) + 512 bytes of buckets, plus 4 + value_size bytes per element (the index and a value copy),
    or 2 bytes per element fewer for 1-byte values. Max and min are the same figure. uint32 arithmetic."""
    n = align_up(count, 32)
    need = n * 7 + 512
    need = need + n * (4 + value_size) if value_size != 1 else need - 2 * n
    return need % 2 ** 32


def cast_mode(s: "Shapes") -> int:
    """GetCastTypeForSort: the narrowest id type for varInAxis rows."""
    if s.index_dtype == "int32":
        return CAST_I32_U8 if s.var_in_axis < UINT8_MAX else (CAST_I32_I16 if s.var_in_axis < INT16_MAX
                                                                else CAST_NONE)
    if s.var_in_axis < UINT8_MAX:
        return CAST_I64_U8
    if s.var_in_axis < INT16_MAX:
        return CAST_I64_I16
    return CAST_I64_I32 if s.var_in_axis < INT32_MAX else CAST_NONE


def _sort_value_size(s: "Shapes", mode: int) -> int:
    return _CAST_SIZE[mode] if mode else s.index_size


class Shapes(NamedTuple):
    """What GetShapeAttrsInfo leaves: folded axes, element counts, element sizes, dtype names."""
    dtype: str
    index_dtype: str
    pre_axis: int
    var_in_axis: int
    updates_in_axis: int
    after_axis: int
    var_axis: int           # var elements
    indices_axis: int       # index count
    updates_axis: int       # updates elements
    var_size: int           # bytes per var element
    index_size: int         # bytes per index
    with_alpha: int


def _fail(message: str):
    raise TilingError(f"{OP} tiling: {message}")


def _name(dtype) -> str:
    d = np.dtype(dtype)
    return "bfloat16" if d == np.dtype(ml_dtypes.bfloat16) else ("bool" if d == np.bool_ else d.name)


def _shapes(var, indices, updates, alpha, axis) -> tuple[Shapes, int]:
    """GetShapeAttrsInfo: the axis range, CheckInputDtype, CheckInputShape, CombineAxis. Returns (shapes, dim)."""
    v, i, u = (TensorDesc.of(t) for t in (var, indices, updates))
    for name, t in (("var", v), ("indices", i), ("updates", u)):
        if t is None:
            _fail(f"{name} is required")
    rank = v.ndim
    dim_max, dim_min = max(-rank, rank - 1), min(-rank, rank - 1)
    if not dim_min <= axis <= dim_max:
        _fail(f"attr axis must be in range of [{dim_min}, {dim_max}], but got [{axis}]")
    dim = axis + rank if axis < 0 else axis
    dtype = _name(v.dtype)
    if dtype not in _GE:
        _fail(f"var dtype only supports float32, float16, uint8, int8, int32, int16, bool, int64, bfloat16, "
              f"but got [{dtype}]")
    index_dtype = _name(i.dtype)
    if index_dtype not in _INDEX_SIZE:
        _fail(f"indices dtype only supports int32 and int64, but got [{index_dtype}]")
    if _name(u.dtype) != dtype:
        _fail(f"updates [{_name(u.dtype)}] and var [{dtype}] must have the same dtype")
    var_axis, indices_axis, updates_axis = v.size, i.size, u.size
    with_alpha = 0
    if alpha is not None:
        with_alpha = 1
        a = TensorDesc.of(alpha)
        if a is None or a.size != 1:
            _fail("the alpha size must be 1")
    if i.ndim > 1:
        _fail(f"index is supposed to be a vector, but got dim: {i.ndim}")
    pre, var_in, upd_in, after = 1, 1, 1, 1
    if not (rank == 0 and updates_axis == 1 and indices_axis == 1):
        if u.ndim != rank:
            _fail(f"updates must have the same number of dimensions as var (var {v.shape}, updates {u.shape})")
        expected = u.dim(dim)
        if indices_axis != expected:
            _fail(f"number of indices [{indices_axis}] should be equal to update.size({dim}): [{expected}]")
        if any(u.dim(k) != v.dim(k) for k in range(rank) if k != dim):
            _fail(f"updates shape must match var shape, excluding the specified dimension {dim}. Got var.shape = "
                  f"{v.shape} updates.shape = {u.shape}")
        pre = int(np.prod(v.shape[:dim], dtype=object)) if dim else 1
        var_in, upd_in = v.dim(dim), u.dim(dim)
        after = int(np.prod(v.shape[dim + 1:], dtype=object)) if dim + 1 < rank else 1
    return Shapes(dtype, index_dtype, pre, var_in, upd_in, after, var_axis, indices_axis, updates_axis,
                  _SIZE[dtype], _INDEX_SIZE[index_dtype], with_alpha), dim


def _select(s: Shapes, cores: int, deterministic: bool) -> str:
    """SelTemplateByInput."""
    if s.var_in_axis == 0:
        # the real tiling divides by varInAxis here (a division by zero on the host); refused instead
        _fail(f"var has no rows along the axis (varInAxis 0): the real tiling divides by it")
    use_sort = tdiv(s.updates_in_axis, s.var_in_axis) >= THRESHOLD_USE_SORT
    if deterministic and s.dtype in _DETERMINISTIC_DTYPES:
        return TEMPLATE_DETERMINISTIC
    if use_sort:
        simd = s.after_axis * s.var_size >= MIN_SIZE_SIMD_HANDLE
    else:
        simd = s.after_axis >= cores * MIN_SIZE_SIMD_HANDLE
    if simd and s.dtype in _SIMD_DTYPES:
        return TEMPLATE_SIMD_SORT if use_sort else TEMPLATE_SIMD
    if use_sort and s.after_axis <= SIMT_SORT_LASTDIM_LIMIT and s.dtype in _SIMT_SORT_DTYPES:
        return TEMPLATE_SIMT_SORT
    return TEMPLATE_SIMT


def select_template(var, indices, updates, alpha=None, axis=0, *, soc="ascend950", deterministic=False) -> str:
    """The template tiling.moe_inplace_index_add takes for these operands (TEMPLATE_* name); TilingError where
    the real tiling fails before choosing."""
    soc = get_soc(soc)
    _regbase_only(soc)
    s, _ = _shapes(var, indices, updates, alpha, int(axis))
    return _select(s, soc.aiv_num, bool(deterministic))


def _regbase_only(soc) -> None:
    if not soc.is_regbase:
        raise NotImplementedError(
            f"{OP} is registered for ascend950 only; on {soc.name} the aclnn chains launch InplaceIndexAdd from "
            "another CANN library (a host step in this simulator)")


def _cast_size(dtype: str) -> int:
    """GetCastTypeSize: int32 accumulators for 8/16-bit ints, float16 for bool, none otherwise."""
    return 4 if dtype in ("int16", "int8", "uint8") else (2 if dtype == "bool" else 0)


# --- SIMT (keys 10xxxx) -----------------------------------------------------------------------------------------
def simt_tiling_key(s: Shapes) -> int:
    wide = 1 if max(s.updates_axis, s.var_axis) > INT32_MAX else 0
    return KEY_SIMT + _GE[s.dtype] + 100 * wide + 1000 * s.with_alpha


def _simt(s: Shapes, soc, ub_size: int) -> TilingResult:
    used = min(ceil_div(s.updates_axis, SIMT_THREADS_PER_CORE), soc.aiv_num)
    local_ub = min(ub_size, SIMT_UB_MAX)
    cast = _cast_size(s.dtype)
    ub_factor = 0
    plan: tuple = ()
    if s.dtype in ("int16", "int8", "uint8", "bool"):
        length = tdiv(local_ub, cast + s.var_size)
        ub_factor = align_down(length, tdiv(BLOCK_BYTES, s.var_size))
        plan = (UbBuffer("varQue_", ub_factor * s.var_size, 1, "TQue", "VECIN", 1),
                UbBuffer("varCastQue_", ub_factor * cast, 1, "TQue", "VECIN", 1))
    f = struct_fields(SIMT_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, ub_factor=ub_factor, col_ub_factor=0, indices_stride=1, indices_ub_factor=1)
    workspace = LIB_WORKSPACE + (align_up(s.var_axis * cast, GM_ALIGN) if cast else 0)
    return TilingResult(tiling_key=simt_tiling_key(s), block_dim=used, workspace_size=workspace, fields=f,
                        ub_plan=plan, schedule_mode=1, soc=soc)


# --- SIMD (key 400000) ------------------------------------------------------------------------------------------
def _indices_block(s: Shapes, n: int) -> int:
    """GetIndicesAlignBlockSize: n ids in whole UB blocks."""
    return align_up(n * s.index_size, BLOCK_BYTES)


def _after_block(s: Shapes, n: int, after: int) -> int:
    """GetAfterAlignBlockSize: n rows of `after` var elements, each in whole UB blocks."""
    return n * align_up(s.var_size * after, BLOCK_BYTES)


def _simd_split_pre(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
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
        index_factor = tdiv(half_ub, one_block) + 1
        rest = -1
        while rest <= 0:
            index_factor -= 1
            rest = half_ub - (_indices_block(s, index_factor) + _after_block(s, index_factor, after_factor))
        index_factor = index_factor or 1
    loops = ceil_div(s.indices_axis, index_factor)
    col_loops = ceil_div(s.after_axis, after_factor)
    f.update(each_core_pre_axis_count=each, used_core_num_before=used, tail_core_pre_axis_count=s.pre_axis - each *
             (used - 1), ub_index_factor=index_factor, after_axis_factor=after_factor, indices_loop_size=loops,
             indice_axis_tail_num=s.indices_axis - (loops - 1) * index_factor, update_loop_size=col_loops,
             update_tail_num=s.after_axis - (col_loops - 1) * after_factor, is_split_pre_axis=1)


def _simd_split_indices(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
    align = tdiv(BLOCK_BYTES, s.var_size)
    each = ceil_div(s.indices_axis, cores)
    used = ceil_div(s.indices_axis, each)
    tail = s.indices_axis - each * (used - 1)
    index_factor = 0           # the member's initial value, used by the first size test
    if _indices_block(s, index_factor) + _after_block(s, index_factor, s.after_axis) > half_ub:
        index_ub = min(SIMD_INDICES_MIN_BLOCK, _indices_block(s, s.indices_axis))
        index_factor = min(tdiv(align_up(index_ub, BLOCK_BYTES), s.index_size), each)
        for_updates = half_ub - _indices_block(s, index_factor)
        after_factor = align_up(s.after_axis, align)
        rest = -1
        while rest <= 0:
            after_factor -= align
            rest = for_updates - _after_block(s, index_factor, after_factor)
        after_factor = after_factor or 1
    else:
        after_factor = align_up(min(tdiv(SIMD_AFTER_HANDLE_BYTES, s.var_size), s.after_axis), align)
        index_factor = tdiv(half_ub, _after_block(s, 1, after_factor)) + 1
        rest = -1
        while rest <= 0:
            index_factor -= 1
            rest = half_ub - (_indices_block(s, index_factor) + _after_block(s, index_factor, after_factor))
        index_factor = min(index_factor, each)
    col_loops = ceil_div(s.after_axis, after_factor)
    main_loops, tail_loops = ceil_div(each, index_factor), ceil_div(tail, index_factor)
    f.update(each_core_index_count=each, used_core_num_before=used, tail_core_index_count=tail,
             ub_index_factor=index_factor, after_axis_factor=after_factor, update_loop_size=col_loops,
             update_tail_num=s.after_axis - (col_loops - 1) * after_factor, main_core_indices_loop=main_loops,
             tail_core_indices_loop=tail_loops, main_core_tail_indices=each - (main_loops - 1) * index_factor,
             tail_core_tail_indices=tail - (tail_loops - 1) * index_factor, is_split_indices_axis=1)


def _simd_split_after(s: Shapes, cores: int, half_ub: int, f: dict) -> None:
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


def _simd(s: Shapes, soc, ub_size: int) -> TilingResult:
    cores = soc.aiv_num
    half_ub = tdiv(ub_size - SIMD_RESERVE_BYTES, SIMD_DB_BUFFER)
    f = struct_fields(SIMD_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, is_with_alpha=s.with_alpha, indices_stride=1)
    if s.after_axis * s.var_size >= SIMD_AFTER_SPLIT_BYTES * cores:
        _simd_split_after(s, cores, half_ub, f)
    elif s.indices_axis > s.pre_axis:
        _simd_split_indices(s, cores, half_ub, f)
    else:
        _simd_split_pre(s, cores, half_ub, f)
    return TilingResult(tiling_key=KEY_SIMD, block_dim=cores, workspace_size=LIB_WORKSPACE, fields=f,
                        ub_plan=simd_ub_plan(s, f), schedule_mode=1, soc=soc)


# --- SIMT sort (keys 5000ab) -------------------------------------------------------------------------------------
def _simt_sort_index_bytes(s: Shapes, mode: int, n: int) -> int:
    """UB of the id buffers for a window of n ids: ids in (x2 in the tiling's count), cast ids (x2), origin
    positions, and the run counts, each block-aligned, plus the sort pads."""
    blk = BLOCK_BYTES
    total = align_up(n * s.index_size, blk) * 2
    if mode:
        total += align_up(n * _CAST_SIZE[mode], blk) * 2
    return total + align_up(n * 4, blk) + blk * 2 + align_up(n * 4, blk) + blk * 2


def _simt_sort_window(s: Shapes, mode: int, ub_size: int) -> int:
    """computeIndicesUbFactor: the largest id window whose buffers, sort scratch and one pre row of updates fit
    (bisection over [1, indices + 1))."""
    start, end = 1, s.indices_axis + 1
    while end - start > 1:
        mid = (end + start) // 2
        total = (_simt_sort_index_bytes(s, mode, mid) + align_up(radix_sort_tmp_bytes(mid, _sort_value_size(s, mode)),
                                                                  BLOCK_BYTES)
                 + align_up(mid * s.after_axis * s.var_size, BLOCK_BYTES) + HASH_BUCKET_BYTES)
        if total <= ub_size:
            start = mid
        else:
            end = mid
    return start


def _simt_sort_split(s: Shapes, cores: int, window: int) -> tuple[int, int, int, int, int]:
    """(loops per core, used cores, tail core's loops, ids of the tail core's last loop, windows)."""
    total = ceil_div(s.indices_axis, window)
    loops = ceil_div(total, cores)
    used = ceil_div(total, loops)
    tail_loops = total - loops * (used - 1)
    tail_num = s.indices_axis - window * loops * (used - 1) - window * (tail_loops - 1)
    return loops, used, tail_loops, tail_num, total


def _simt_sort(s: Shapes, soc, ub_size: int) -> TilingResult:
    cores = soc.aiv_num
    mode = cast_mode(s)
    ub = ub_size - SIMT_SORT_SIMD_RESERVED
    window = _simt_sort_window(s, mode, ub)
    loops, used, tail_loops, tail_num, _ = _simt_sort_split(s, cores, window)
    while used < tdiv(cores, 2) and window > 1:       # halve the window until half the cores have work
        window = tdiv(window, 2)
        loops, used, tail_loops, tail_num, _ = _simt_sort_split(s, cores, window)
    share = radix_sort_tmp_bytes(window, _sort_value_size(s, mode))
    index_bytes = _simt_sort_index_bytes(s, mode, window)
    pre_num = s.pre_axis
    for n in range(2, s.pre_axis + 1):                # more pre rows of updates per id window while they fit
        if index_bytes + share + align_up(window * s.after_axis * s.var_size, BLOCK_BYTES) * n + HASH_BUCKET_BYTES \
                > ub:
            pre_num = n - 1
            break
    pre_loop = ceil_div(s.pre_axis, pre_num)
    f = struct_fields(SIMT_SORT_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, indices_ub_factor=window, indices_loop_size=loops, indice_axis_tail_num=tail_num,
             tail_block_indices_loop_size=tail_loops, each_core_index_count=window * loops, sort_share_buf_size=share,
             normal_updates_pre_num=pre_num, tail_updates_pre_num=s.pre_axis - pre_num * (pre_loop - 1),
             updates_pre_loop=pre_loop, used_core_num=used, indices_stride=1, indices_cast_mode=mode)
    wide = 1 if max(s.updates_axis, s.var_axis) > INT32_MAX else 0
    blk = BLOCK_BYTES
    sort_size = _CAST_SIZE[mode] if mode else s.index_size
    plan = (UbBuffer("indicesInQueue_", align_up(window * s.index_size, blk), 1, "TQue", "VECIN", 1),
            UbBuffer("updatesInQueue_", align_up(window * s.after_axis * s.var_size, blk) * pre_num, 1, "TQue",
                     "VECIN", 1),
            UbBuffer("updatesOriginIdexQue_", align_up(window * 4, blk)),
            UbBuffer("uniqueIdCountQue_", align_up(window * 4, blk) + SORT_PAD_BLOCKS * blk),
            UbBuffer("sharedTmpBuf_", align_up(share, blk)),
            UbBuffer("hashBuffer_", HASH_BUCKET_BYTES),
            UbBuffer("sortIndicesQue_", align_up(window * sort_size, blk) + SORT_PAD_BLOCKS * blk))
    if mode:
        plan += (UbBuffer("castIndicesQue_", align_up(window * sort_size, blk)),)
    return TilingResult(tiling_key=KEY_SIMT_SORT + 10 * wide + s.with_alpha, block_dim=used,
                        workspace_size=LIB_WORKSPACE, fields=f, ub_plan=plan, schedule_mode=1, soc=soc)


# --- SIMD sort (key 200000) --------------------------------------------------------------------------------------
SIMD_SORT_MAX_SCORE_BYTES = 128 * 4      # the kernel's maxScoreBuf_ (128 floats), taken from the column split's half
SIMD_SORT_SHIFT_PAD = 2 * BLOCK_BYTES    # sortIndicesQue_: two blocks of shift offset around the sorted ids
# The kernel declares updatesOriginIdexQue_, uniqueIdCountQue_ and indicesCastQue_ as TQue<VECIN>, ten VECIN buffers
# with indicesQue_ and updatesQue_, more than the 8 event ids the machine model gives one position. The three are
# filled and read by the vector and scalar units only (no MTE2 copy ever lands in them), so the plan puts them at
# VECCALC, where the model's EnQue / DeQue hand-off is the V -> V one they really make.
SIMD_SORT_VECTOR_QUE = "VECCALC"


class _SortSizes(NamedTuple):
    """Element sizes the SIMD-sort budget uses: ids, cast ids (0 without a cast), the sorted type."""
    index: int
    cast: int
    sort: int


def _sort_sizes(s: Shapes, mode: int) -> _SortSizes:
    return _SortSizes(s.index_size, _CAST_SIZE[mode], _sort_value_size(s, mode))


def _simd_sort_index_bytes(z: _SortSizes, n: int) -> int:
    """GetIndicesAlignBlockSize of the SIMD-sort tiling: the id buffers of a window of n ids (ids in, cast ids,
    sorted ids + shift pad, run counts + 1, run ids + 1, origin positions) and the radix-sort scratch."""
    blk = BLOCK_BYTES
    total = align_up(n * z.index, blk)
    if z.cast:
        total += align_up(n * z.cast, blk)
    total += (align_up(n * z.sort, blk) + SIMD_SORT_SHIFT_PAD) + (align_up(n * 4, blk) + blk) \
        + (align_up(n * z.index, blk) + blk) + align_up(n * 4, blk)
    return total + radix_sort_tmp_bytes(n, z.sort)


def _simd_sort_after_bytes(s: Shapes, n: int, after: int) -> int:
    """GetAfterAlignBlockSize: n rows of `after` columns of updates (var type) and of their fp32 sums."""
    return n * align_up(s.var_size * after, BLOCK_BYTES) + n * align_up(4 * after, BLOCK_BYTES)


def _simd_sort_one_id_bytes(z: _SortSizes) -> int:
    """indicesSize of the pre / after splits: the id buffers of one id, each block-aligned, with the scratch."""
    blk = BLOCK_BYTES
    total = align_up(z.index, blk)
    if z.cast:
        total += align_up(z.cast, blk)
    return (total + align_up(z.sort + SIMD_SORT_SHIFT_PAD, blk) + align_up(4, blk) + align_up(8, blk)
            + align_up(z.index, blk) + radix_sort_tmp_bytes(1, z.sort))


def _simd_sort_window_rest(s: Shapes, z: _SortSizes, half_ub: int, n: int, cols: int) -> int:
    """The budget left for a window of n ids in the pre / after splits' search (cols: eachCoreAfterAxisCount)."""
    blk = BLOCK_BYTES
    used = align_up(n * z.index, blk)
    if z.cast:
        used += align_up(n * z.cast, blk)
    used += (align_up(n * (z.sort + SIMD_SORT_SHIFT_PAD), blk) + align_up(n * 4, blk) + align_up(n * 8, blk)
             + align_up(n * z.index, blk) + n * align_up(4 * cols, blk) + n * align_up(s.var_size * cols, blk)
             + radix_sort_tmp_bytes(n, z.sort))
    return half_ub - used


def _simd_sort_big_rows(s: Shapes, z: _SortSizes, half_ub: int, one_id: int) -> tuple[int, int]:
    """(ubIndexFactor, afterAxisFactor) when one id and its row do not fit: an id window of at most 8 KiB, the
    columns from what is left."""
    index_ub = min(SIMD_INDICES_MIN_BLOCK, s.indices_axis * one_id)
    index_factor = tdiv(align_up(index_ub, BLOCK_BYTES), one_id)
    update_bytes = align_up(s.var_size * index_factor, BLOCK_BYTES) + align_up(4 * index_factor, BLOCK_BYTES)
    after_factor = tdiv(half_ub - index_factor * one_id, update_bytes)
    return index_factor, tdiv(align_down(after_factor, BLOCK_BYTES), s.var_size)


def _simd_sort_window_search(s: Shapes, z: _SortSizes, half_ub: int, start: int, cols: int) -> int:
    """The pre / after splits' descending search from `start`; it stops at indicesAxis when start is above it."""
    index_factor = start + 1
    rest = -1
    while rest <= 0:
        index_factor -= 1
        rest = _simd_sort_window_rest(s, z, half_ub, index_factor, cols)
        if index_factor > s.indices_axis:
            return s.indices_axis
    return index_factor


def _simd_sort_split_after(s: Shapes, z: _SortSizes, cores: int, ub_size: int, f: dict) -> None:
    half_ub = tdiv(ub_size - SIMD_RESERVE_BYTES, SIMD_DB_BUFFER) - SIMD_SORT_MAX_SCORE_BYTES
    align = tdiv(BLOCK_BYTES, s.var_size)
    each = ceil_div(s.after_axis, cores)
    used = ceil_div(s.after_axis, each)
    tail = s.after_axis - each * (used - 1)
    one_id = _simd_sort_one_id_bytes(z)
    if one_id + align_up(s.var_size * each, BLOCK_BYTES) + align_up(4 * each, BLOCK_BYTES) > half_ub:
        index_factor, after_factor = _simd_sort_big_rows(s, z, half_ub, one_id)
    else:
        after_factor = align_up(each, align)
        start = tdiv(half_ub, after_factor * (s.var_size + 4) + one_id)
        index_factor = _simd_sort_window_search(s, z, half_ub, start, each)
    loops = ceil_div(s.indices_axis, index_factor)
    col_loops, tail_col_loops = ceil_div(each, after_factor), ceil_div(tail, after_factor)
    f.update(each_core_after_axis_count=each, used_core_num_before=used, tail_core_after_axis_count=tail,
             ub_index_factor=index_factor, after_axis_factor=after_factor, indices_loop_size=loops,
             indice_axis_tail_num=s.indices_axis - (loops - 1) * index_factor, update_loop_size=col_loops,
             update_tail_num=each - (col_loops - 1) * after_factor, tail_update_loop_size=tail_col_loops,
             tail_update_axis_num=tail - (tail_col_loops - 1) * after_factor, is_split_after_axis=1)


def _simd_sort_split_indices(s: Shapes, z: _SortSizes, cores: int, ub_size: int, f: dict) -> None:
    align = tdiv(BLOCK_BYTES, s.var_size)
    half_ub = tdiv(ub_size - SIMD_RESERVE_BYTES, SIMD_DB_BUFFER)
    each = ceil_div(s.indices_axis, cores)
    used = ceil_div(s.indices_axis, each)
    tail = s.indices_axis - each * (used - 1)
    # per-id bytes, unaligned (the sorted ids' pad counted as two UB blocks)
    per_id = z.index + z.cast + (z.sort + 2 * BLOCK_BYTES) + 4 + 4 + z.index
    # the real code sizes the first test with the base class's indicesUbFactor_, which is 1 here
    if _simd_sort_index_bytes(z, 1) + _simd_sort_after_bytes(s, 1, s.after_axis) > half_ub:
        index_ub = min(SIMD_INDICES_MIN_BLOCK, _simd_sort_index_bytes(z, s.indices_axis))
        index_factor = tdiv(align_up(index_ub, BLOCK_BYTES), per_id)
        rest = -1
        while rest <= 0:
            index_factor -= 1
            rest = SIMD_INDICES_MIN_BLOCK - _simd_sort_index_bytes(z, index_factor)
        index_factor = min(index_factor, each)
        for_updates = half_ub - _simd_sort_index_bytes(z, index_factor)
        after_factor = align_up(s.after_axis, align)
        rest = -1
        while rest <= 0:
            after_factor -= align
            rest = for_updates - _simd_sort_after_bytes(s, index_factor, after_factor)
        after_factor = after_factor or 1
    else:
        after_factor = align_up(min(tdiv(SIMD_AFTER_HANDLE_BYTES, s.var_size), s.after_axis), align)
        index_factor = tdiv(half_ub, _simd_sort_after_bytes(s, 1, after_factor)) + 1
        rest = -1
        while rest <= 0:
            index_factor -= 1
            rest = half_ub - (_simd_sort_index_bytes(z, index_factor)
                              + _simd_sort_after_bytes(s, index_factor, after_factor))
        index_factor = min(index_factor, each)
    col_loops = ceil_div(s.after_axis, after_factor)
    main_loops, tail_loops = ceil_div(each, index_factor), ceil_div(tail, index_factor)
    f.update(each_core_index_count=each, used_core_num_before=used, tail_core_index_count=tail,
             ub_index_factor=index_factor, after_axis_factor=after_factor, update_loop_size=col_loops,
             update_tail_num=s.after_axis - (col_loops - 1) * after_factor, main_core_indices_loop=main_loops,
             tail_core_indices_loop=tail_loops, main_core_tail_indices=each - (main_loops - 1) * index_factor,
             tail_core_tail_indices=tail - (tail_loops - 1) * index_factor, is_split_indices_axis=1)


def _simd_sort_split_pre(s: Shapes, z: _SortSizes, cores: int, ub_size: int, f: dict) -> None:
    align = tdiv(BLOCK_BYTES, s.var_size)
    half_ub = tdiv(ub_size - SIMD_RESERVE_BYTES, SIMD_DB_BUFFER)
    each = ceil_div(s.pre_axis, cores)
    used = ceil_div(s.pre_axis, each)
    one_id = _simd_sort_one_id_bytes(z)
    if one_id + align_up(s.var_size * s.after_axis, BLOCK_BYTES) + align_up(4 * s.after_axis, BLOCK_BYTES) \
            > half_ub:
        index_factor, after_factor = _simd_sort_big_rows(s, z, half_ub, one_id)
    else:
        after_factor = align_up(s.after_axis, align)
        start = tdiv(half_ub, after_factor * (s.var_size + 4) + one_id)
        # the search counts the update rows with eachCoreAfterAxisCount, which this split leaves at 0
        index_factor = _simd_sort_window_search(s, z, half_ub, start, 0)
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
    sort_size = _CAST_SIZE[mode] if mode else s.index_size
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


def _simd_sort(s: Shapes, soc, ub_size: int) -> TilingResult:
    cores = soc.aiv_num
    mode = cast_mode(s)
    z = _sort_sizes(s, mode)
    f = struct_fields(SIMD_SORT_FIELDS)
    f.update(pre_axis=s.pre_axis, var_in_axis=s.var_in_axis, updates_in_axis=s.updates_in_axis,
             after_axis=s.after_axis, is_with_alpha=s.with_alpha, indices_stride=1, indices_cast_mode=mode)
    if s.after_axis * s.var_size >= SIMD_AFTER_HANDLE_BYTES * cores:
        _simd_sort_split_after(s, z, cores, ub_size, f)
    elif s.indices_axis > s.pre_axis:
        _simd_sort_split_indices(s, z, cores, ub_size, f)
    else:
        _simd_sort_split_pre(s, z, cores, ub_size, f)
    return TilingResult(tiling_key=KEY_SIMD_SORT, block_dim=cores, workspace_size=LIB_WORKSPACE, fields=f,
                        ub_plan=simd_sort_ub_plan(s, f), schedule_mode=1, soc=soc)


def moe_inplace_index_add(var, indices, updates, alpha=None, axis=0, *, var_out=None, soc="ascend950",
                          deterministic=False) -> TilingResult:
    """Host tiling of MoeInplaceIndexAdd (inputs var, indices, updates, alpha in OpDef order; attr axis; output
    var, the same tensor as the input var, so var_out is accepted and not read).

    Tensors: anything with .shape and .dtype (or TensorDesc); alpha None when absent. deterministic: the
    context's deterministic switch (GetDeterministic). Raises TilingError where the real tiling fails (and where
    it would divide by zero: var empty along the axis), NotImplementedError for the deterministic
    template (see the module docstring) and on chips other than ascend950.
    """
    soc = get_soc(soc)
    _regbase_only(soc)
    s, _ = _shapes(var, indices, updates, alpha, int(axis))
    template = _select(s, soc.aiv_num, bool(deterministic))
    ub_size = soc.ub_size_for_tiling - DCACHE_SIZE_SIMT
    if template == TEMPLATE_SIMT:
        return _simt(s, soc, ub_size)
    if template == TEMPLATE_SIMD:
        return _simd(s, soc, ub_size)
    if template == TEMPLATE_SIMT_SORT:
        return _simt_sort(s, soc, ub_size)
    if template == TEMPLATE_SIMD_SORT:
        return _simd_sort(s, soc, ub_size)
    raise NotImplementedError(
        f"{OP}: the {template} template's tiling (its UB sized with AscendC GetSortMaxMinTmpSize of the ids' radix "
        "sort) is not reproduced")


def shapes(var, indices, updates, alpha=None, axis=0) -> Shapes:
    """The folded axes the tiling works on (for the kernel side)."""
    return _shapes(var, indices, updates, alpha, int(axis))[0]
