"""AscendC's Sort<T, isReuseSource, SortConfig{RADIX_SORT, isDescend = false}> of arch35 (the advanced API, asc-devkit
impl/adv_api/detail/sort/sort): a key sort of `count` integers with a uint32 destination index.

    Sort<T, false | true, cfg>(dstValue, dstIndex, src, count)   dstValue ascending, dstIndex[k] = source position

(isReuseSource lets the library use src as scratch; the kernels that pass true never read src again, so the
model leaves it unchanged.)

The library runs digit passes of a least-significant-digit radix sort over the keys' bytes (signed keys with
their sign bit flipped), each pass a histogram and a stable scatter; so equal keys keep their source order.
The simulator computes the same permutation in one stable sort and counts the call as one vector function.
Its scratch (GetSortMaxMinTmpSize, tiling.moe_inplace_index_add.radix_sort_tmp_bytes) is UB the TPipe leaves
free: the overload without a shared temp buffer takes it from there, so no plan row holds it.
"""
from __future__ import annotations

import numpy as np

from ._jit import aicore
from .vf import vf_call, vf_operand


@aicore
def radix_sort_ascending(c, dst_value, dst_index, src, count):
    """Sort<T, false, {RADIX_SORT, false}>(dst_value, dst_index, src, count): the first `count` keys of src
    (int8 / uint8 / int16 / uint16 / int32 / uint32 / int64 LocalTensor) ascending into dst_value (same type),
    their source positions into dst_index (uint32); ties keep source order. src is not changed."""
    if not vf_call(c, count):
        return
    if not (vf_operand(c, src, count, False) and vf_operand(c, dst_value, count, True)
            and vf_operand(c, dst_index, count, True)):
        return
    keys = src[:count].copy()
    order = np.argsort(keys, kind="mergesort")      # stable, as the digit passes are
    for k in range(count):
        dst_value[k] = keys[order[k]]
        dst_index[k] = np.uint32(order[k])
