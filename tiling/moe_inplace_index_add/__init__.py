"""Tiling of MoeInplaceIndexAdd on Ascend 950 (the op has no membase tiling in this library: 910B / 910_93 take
InplaceIndexAdd from another CANN library).

source: moe/3rd/moe_inplace_index_add/op_host/arch35/*.cpp, *.h @ 25fb6b92890d.

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

One module per template, as the real op_host/arch35/ files are: base (parse, checks, selection, keys, the sort
type and scratch size, the shrink search), simt, simd, simt_sort, simd_sort, deterministic. Workspace: the 16 MiB
library reserve, plus an int32 / fp16 copy of var (512-byte aligned) for the SIMT template on int8 / uint8 / int16
/ bool, and the deterministic id split's counts, scales and run sums (deterministic.deterministic_workspace).
"""
from __future__ import annotations

from ..common import TilingResult
from ..platform import get_soc
from .base import (
    CAST_I32_I16,
    CAST_I32_U8,
    CAST_I64_I16,
    CAST_I64_I32,
    CAST_I64_U8,
    CAST_NONE,
    DCACHE_SIZE_SIMT,
    KEY_DETERMINISTIC,
    KEY_SIMD,
    KEY_SIMD_SORT,
    KEY_SIMT,
    KEY_SIMT_SORT,
    OP,
    TEMPLATE_DETERMINISTIC,
    TEMPLATE_SIMD,
    TEMPLATE_SIMD_SORT,
    TEMPLATE_SIMT,
    TEMPLATE_SIMT_SORT,
    Shapes,
    cast_mode,
    parse_shapes,
    radix_sort_tmp_bytes,
    regbase_only,
    select,
)
from .deterministic import DETERMINISTIC_FIELDS, deterministic
from .simd import SIMD_FIELDS, simd, simd_ub_plan
from .simd_sort import SIMD_SORT_FIELDS, SIMD_SORT_VECTOR_QUE, simd_sort, simd_sort_ub_plan
from .simt import SIMT_FIELDS, simt, simt_tiling_key
from .simt_sort import SIMT_SORT_FIELDS, simt_sort

_TILINGS = {TEMPLATE_SIMT: simt, TEMPLATE_SIMD: simd, TEMPLATE_SIMT_SORT: simt_sort, TEMPLATE_SIMD_SORT: simd_sort,
            TEMPLATE_DETERMINISTIC: deterministic}


def select_template(var, indices, updates, alpha=None, axis=0, *, soc="ascend950", deterministic=False) -> str:
    """The template tiling.moe_inplace_index_add takes for these operands (TEMPLATE_* name); TilingError where
    the real tiling fails before choosing."""
    soc = get_soc(soc)
    regbase_only(soc)
    s, _ = parse_shapes(var, indices, updates, alpha, int(axis))
    return select(s, soc.aiv_num, bool(deterministic))


def moe_inplace_index_add(var, indices, updates, alpha=None, axis=0, *, var_out=None, soc="ascend950",
                          deterministic=False) -> TilingResult:
    """Host tiling of MoeInplaceIndexAdd (inputs var, indices, updates, alpha in OpDef order; attr axis; output
    var, the same tensor as the input var, so var_out is accepted and not read).

    Tensors: anything with .shape and .dtype (or TensorDesc); alpha None when absent. deterministic: the
    context's deterministic switch (GetDeterministic). Raises TilingError where the real tiling fails (and where
    it would divide by zero: var empty along the axis), NotImplementedError on chips other than ascend950.
    """
    soc = get_soc(soc)
    regbase_only(soc)
    s, _ = parse_shapes(var, indices, updates, alpha, int(axis))
    template = select(s, soc.aiv_num, bool(deterministic))
    return _TILINGS[template](s, soc, soc.ub_size_for_tiling - DCACHE_SIZE_SIMT)


def shapes(var, indices, updates, alpha=None, axis=0) -> Shapes:
    """The folded axes the tiling works on (for the kernel side)."""
    return parse_shapes(var, indices, updates, alpha, int(axis))[0]
