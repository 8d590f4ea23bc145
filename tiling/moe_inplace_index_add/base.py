"""What every MoeInplaceIndexAdd arch35 template shares (op_host/arch35/moe_inplace_index_add_base_tiling.cpp and
SelTemplateByInput): the shape parse and its checks (GetShapeAttrsInfo), the template selection, the tiling keys,
the dtype tables, the ids' sort type (GetCastTypeForSort) with AscendC's radix-sort scratch size, and the
shrink-until-it-fits search the SIMD templates size their windows and column pieces with.

source: moe/3rd/moe_inplace_index_add/op_host/arch35/moe_inplace_index_add_base_tiling.cpp,
moe_inplace_index_add_tiling.cpp @ 25fb6b92890d.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, NoReturn

import ml_dtypes
import numpy as np

from ..common import TensorDesc, align_up, tdiv
from ..status import TilingError

OP = "MoeInplaceIndexAdd"

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
INT32_MAX = 2 ** 31 - 1

# ge dtype codes and GetSizeByDataType of the var dtypes the op accepts
GE_CODE = {"float32": 0, "float16": 1, "int8": 2, "int32": 3, "uint8": 4, "int16": 6, "int64": 9, "bool": 12,
           "bfloat16": 27}
DTYPE_SIZE = {"float32": 4, "float16": 2, "int8": 1, "int32": 4, "uint8": 1, "int16": 2, "int64": 8, "bool": 1,
              "bfloat16": 2}
SIMD_DTYPES = ("float32", "float16", "bfloat16", "int32", "int16", "int8", "bool")
SIMT_SORT_DTYPES = ("float32", "float16", "bfloat16", "int64", "int32")
DETERMINISTIC_DTYPES = ("float32", "float16", "bfloat16")
INDEX_SIZE = {"int32": 4, "int64": 8}

HASH_BUCKET_BYTES = 128 * 4          # HASH_BUCKET_SIZE (the kernels' hashBuffer_ / maxScoreBuf_ of 128 floats)
SORT_PAD_BLOCKS = 2                  # SORT_PAD_NUM: two extra 32-byte blocks after the sorted ids and run counts
# indicesCastMode: the ids are sorted as the narrowest type that holds varInAxis (GetCastTypeForSort)
CAST_NONE, CAST_I32_I16, CAST_I64_I32, CAST_I64_I16, CAST_I32_U8, CAST_I64_U8 = range(6)
CAST_SIZE = {CAST_NONE: 0, CAST_I32_I16: 2, CAST_I64_I32: 4, CAST_I64_I16: 2, CAST_I32_U8: 1, CAST_I64_U8: 1}
UINT8_MAX, INT16_MAX = 255, 32767


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


def cast_mode(s: Shapes) -> int:
    """GetCastTypeForSort: the narrowest id type for varInAxis rows."""
    if s.index_dtype == "int32":
        return CAST_I32_U8 if s.var_in_axis < UINT8_MAX else (CAST_I32_I16 if s.var_in_axis < INT16_MAX
                                                                else CAST_NONE)
    if s.var_in_axis < UINT8_MAX:
        return CAST_I64_U8
    if s.var_in_axis < INT16_MAX:
        return CAST_I64_I16
    return CAST_I64_I32 if s.var_in_axis < INT32_MAX else CAST_NONE


def sort_value_size(s: Shapes, mode: int) -> int:
    """Bytes per id as the radix sort sees it: the cast type's, or the ids' own without a cast."""
    return CAST_SIZE[mode] if mode else s.index_size


def cast_size(dtype: str) -> int:
    """GetCastTypeSize: int32 accumulators for 8/16-bit ints, float16 for bool, none otherwise."""
    return 4 if dtype in ("int16", "int8", "uint8") else (2 if dtype == "bool" else 0)


def wide_offsets(s: Shapes) -> int:
    """1 where an offset into var or updates passes INT32_MAX (the kernels' COMP_T is uint64)."""
    return 1 if max(s.updates_axis, s.var_axis) > INT32_MAX else 0


def shrink_until_fits(start: int, step: int, left: Callable[[int], int]) -> int:
    """The tilings' `while (rest <= 0) { n -= step; rest = budget - bytes(n); }`: `start` counted down by `step`,
    at least once, to the first n with left(n) = budget - bytes(n) > 0."""
    n = start - step
    while left(n) <= 0:
        n -= step
    return n


def column_factor(for_updates: int, after_axis: int, align: int, rows_bytes: Callable[[int], int]) -> int:
    """afterAxisFactor of the SIMD and SIMD-sort id splits when one row does not fit: the columns, from afterAxis
    rounded up to `align` elements, shrunk by `align` until the window's rows (rows_bytes(columns) bytes) fit in
    for_updates bytes; 1 where that reaches 0."""
    return shrink_until_fits(align_up(after_axis, align), align, lambda cols: for_updates - rows_bytes(cols)) or 1


def fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def dtype_name(dtype) -> str:
    d = np.dtype(dtype)
    return "bfloat16" if d == np.dtype(ml_dtypes.bfloat16) else ("bool" if d == np.bool_ else d.name)


def parse_shapes(var, indices, updates, alpha, axis) -> tuple[Shapes, int]:
    """GetShapeAttrsInfo: the axis range, CheckInputDtype, CheckInputShape, CombineAxis. Returns (shapes, dim)."""
    v, i, u = (TensorDesc.of(t) for t in (var, indices, updates))
    for name, t in (("var", v), ("indices", i), ("updates", u)):
        if t is None:
            fail(f"{name} is required")
    rank = v.ndim
    dim_max, dim_min = max(-rank, rank - 1), min(-rank, rank - 1)
    if not dim_min <= axis <= dim_max:
        fail(f"attr axis must be in range of [{dim_min}, {dim_max}], but got [{axis}]")
    dim = axis + rank if axis < 0 else axis
    dtype = dtype_name(v.dtype)
    if dtype not in GE_CODE:
        fail(f"var dtype only supports float32, float16, uint8, int8, int32, int16, bool, int64, bfloat16, "
             f"but got [{dtype}]")
    index_dtype = dtype_name(i.dtype)
    if index_dtype not in INDEX_SIZE:
        fail(f"indices dtype only supports int32 and int64, but got [{index_dtype}]")
    if dtype_name(u.dtype) != dtype:
        fail(f"updates [{dtype_name(u.dtype)}] and var [{dtype}] must have the same dtype")
    var_axis, indices_axis, updates_axis = v.size, i.size, u.size
    with_alpha = 0
    if alpha is not None:
        with_alpha = 1
        a = TensorDesc.of(alpha)
        if a is None or a.size != 1:
            fail("the alpha size must be 1")
    if i.ndim > 1:
        fail(f"index is supposed to be a vector, but got dim: {i.ndim}")
    pre, var_in, upd_in, after = 1, 1, 1, 1
    if not (rank == 0 and updates_axis == 1 and indices_axis == 1):
        if u.ndim != rank:
            fail(f"updates must have the same number of dimensions as var (var {v.shape}, updates {u.shape})")
        expected = u.dim(dim)
        if indices_axis != expected:
            fail(f"number of indices [{indices_axis}] should be equal to update.size({dim}): [{expected}]")
        if any(u.dim(k) != v.dim(k) for k in range(rank) if k != dim):
            fail(f"updates shape must match var shape, excluding the specified dimension {dim}. Got var.shape = "
                 f"{v.shape} updates.shape = {u.shape}")
        pre = int(np.prod(v.shape[:dim], dtype=object)) if dim else 1
        var_in, upd_in = v.dim(dim), u.dim(dim)
        after = int(np.prod(v.shape[dim + 1:], dtype=object)) if dim + 1 < rank else 1
    return Shapes(dtype, index_dtype, pre, var_in, upd_in, after, var_axis, indices_axis, updates_axis,
                  DTYPE_SIZE[dtype], INDEX_SIZE[index_dtype], with_alpha), dim


def select(s: Shapes, cores: int, deterministic: bool) -> str:
    """SelTemplateByInput: the TEMPLATE_* name."""
    if s.var_in_axis == 0:
        # the real tiling divides by varInAxis here (a division by zero on the host); refused instead
        fail("var has no rows along the axis (varInAxis 0): the real tiling divides by it")
    use_sort = tdiv(s.updates_in_axis, s.var_in_axis) >= THRESHOLD_USE_SORT
    if deterministic and s.dtype in DETERMINISTIC_DTYPES:
        return TEMPLATE_DETERMINISTIC
    if use_sort:
        simd = s.after_axis * s.var_size >= MIN_SIZE_SIMD_HANDLE
    else:
        simd = s.after_axis >= cores * MIN_SIZE_SIMD_HANDLE
    if simd and s.dtype in SIMD_DTYPES:
        return TEMPLATE_SIMD_SORT if use_sort else TEMPLATE_SIMD
    if use_sort and s.after_axis <= SIMT_SORT_LASTDIM_LIMIT and s.dtype in SIMT_SORT_DTYPES:
        return TEMPLATE_SIMT_SORT
    return TEMPLATE_SIMT


def regbase_only(soc) -> None:
    if not soc.is_regbase:
        raise NotImplementedError(
            f"{OP} is registered for ascend950 only; on {soc.name} the aclnn chains launch InplaceIndexAdd from "
            "another CANN library (a host step in this simulator)")
