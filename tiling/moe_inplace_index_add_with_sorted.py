"""Tiling of MoeInplaceIndexAddWithSorted (moe/3rd/moe_inplace_index_add_with_sorted/op_host, @ 25fb6b92890d).

The l0 op adds rows of `value` into rows of `var`: var[sorted_indices[i]] += alpha * value[pos[i]]
(dim 0 only). The sorted ids are split evenly over the cores (the last core takes the remainder);
each core walks its ids in windows of 1536 (ids and positions share one 12 KiB UB buffer), and a row
is cut into pieces of `max_size` elements when it does not fit.

tilingKey by var dtype: float 1 (atomic adds; 6 when the deterministic switch is on), float16 2,
bfloat16 3, int16 4, int32 5. Keys 1, 4, 5 run the "Avg" kernel (per-core partial sums, atomic add
to GM); keys 2, 3, 6 the "Fix" kernel (each output row owned by one core, deterministic).
UB budget: GetCoreMemSize(UB) - 12288 (index window) - 1024 (reserve), divided by the key's count
of row-sized buffers (2 Avg, 7 fp16/bf16 Fix, 3 fp32 Fix).
"""
from __future__ import annotations

from typing import NoReturn

import ml_dtypes
import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import TensorDesc, TilingResult, as_dtype, struct_fields, tdiv
from .platform import get_soc
from .status import TilingError

OP = "MoeInplaceIndexAddWithSorted"

FIELDS = (
    "used_core_num", "enable_alpha", "each_index_count", "last_index_count", "batch_count", "each_batch_num",
    "last_batch_num", "input_count", "indices_count", "updates_count", "updates_one_time", "max_size", "each_num",
    "each_loop", "each_tail", "var_dim_num", "each_ub_index_round", "each_ub_index_count", "each_ub_index_tail",
    "last_ub_index_round", "last_ub_index_count", "last_ub_index_tail",
)

KEY_FLOAT32 = 1
KEY_FLOAT16 = 2
KEY_BF16 = 3
KEY_INT16 = 4
KEY_INT32 = 5
KEY_FLOAT32_FIX = 6
AVG_KEYS = (KEY_FLOAT32, KEY_INT16, KEY_INT32)
"""Keys of MoeInplaceIndexAddWithSortedAvg (atomic add); the others run MoeInplaceIndexAddWithSortedFix."""

UB_INDEX_NUM = 1536                              # ids per UB window
INDEX_BUFFER_BYTES = UB_INDEX_NUM * 2 * 4        # ids + positions, int32
RESERVED_BUFFER_BYTES = 1024
BLOCK_SIZE = 32
# row-sized UB buffers per key: Avg value + out; Fix self + value + out (+ two fp32 casts = 4 more halves)
BUFFER_COUNT = {KEY_FLOAT32: 2, KEY_FLOAT16: 7, KEY_BF16: 7, KEY_INT16: 2, KEY_INT32: 2, KEY_FLOAT32_FIX: 3}

_KEY_BY_DTYPE = {np.dtype(np.float32): KEY_FLOAT32, np.dtype(np.float16): KEY_FLOAT16,
                 np.dtype(ml_dtypes.bfloat16): KEY_BF16, np.dtype(np.int16): KEY_INT16, np.dtype(np.int32): KEY_INT32}
# GetSizeByDataType of the supported var dtypes
_SIZE = {KEY_FLOAT32: 4, KEY_FLOAT16: 2, KEY_BF16: 2, KEY_INT16: 2, KEY_INT32: 4, KEY_FLOAT32_FIX: 4}


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def _index_windows(count: int) -> tuple[int, int, int]:
    """(rounds, ids per round, ids in the last round) of a core's `count` ids in windows of UB_INDEX_NUM."""
    if count > UB_INDEX_NUM:
        rounds = tdiv(count + UB_INDEX_NUM - 1, UB_INDEX_NUM)
        return rounds, UB_INDEX_NUM, count - (rounds - 1) * UB_INDEX_NUM
    return 1, count, count


def ub_plan(tiling_key: int, max_size: int) -> tuple[UbBuffer, ...]:
    """The InitBuffer calls of the key's kernel class, in its Init() order.

    Row buffers are reserved as max_size elements by the real kernel, but its vector instructions run
    over the row length rounded up to 32 elements (CeilAlignA2B(n, 32)), which passes max_size when
    max_size is not a multiple of 32 (fp16/bf16 and fp32 Fix keys on 910B): the chip then reads and
    writes a few lanes of the next buffer (lanes never copied to GM). The simulator checks every
    operand against its buffer, so it reserves that rounded length instead (at most 31 elements more
    per buffer; all three chips' plans still fit). A non-positive max_size is kept as the uint32 length
    InitBuffer would see, so such a plan fails as UBOverflowError as the chip's InitBuffer would.
    """
    size = _SIZE[tiling_key]
    elems = (max_size + 31) // 32 * 32 if max_size > 0 else max_size
    row = (elems * size) % 2 ** 32
    index = UbBuffer("inQueueIndex", INDEX_BUFFER_BYTES, 1, "TQue", "VECIN", 1)
    if tiling_key in AVG_KEYS:
        return (UbBuffer("inQueueValueAvg", row, 1, "TQue", "VECIN", 1), index,
                UbBuffer("outQueueOutAvg", row, 1, "TQue", "VECOUT", 1))
    plan: tuple[UbBuffer, ...] = (UbBuffer("inQueueSelfFix", row, 1, "TQue", "VECIN", 1),
            UbBuffer("inQueueValueFix", row, 1, "TQue", "VECIN", 1), index,
            UbBuffer("outQueueOutFix", row, 1, "TQue", "VECOUT", 1))
    if tiling_key in (KEY_FLOAT16, KEY_BF16):
        row_f32 = (elems * 4) % 2 ** 32
        plan += (UbBuffer("calcSelfBuf", row_f32), UbBuffer("calcValueBuf", row_f32))
    return plan


def moe_inplace_index_add_with_sorted(var, value, sorted_indices, pos, alpha=None, axis=0, *, soc="ascend910b",
                                      deterministic=False) -> TilingResult:
    """Host tiling of MoeInplaceIndexAddWithSorted for one chip profile.

    Tensors: anything with .shape and .dtype (or TensorDesc); `alpha` None when absent (its presence sets
    enable_alpha). `axis` is the op's dim attribute (negative counts from the end; only 0 is supported).
    `deterministic` is the context's deterministic switch (aclrtCtxSetSysParamOpt), which moves float32
    from key 1 (atomic adds) to key 6.
    Raises TilingError exactly where the real tiling returns GRAPH_FAILED.
    """
    soc = get_soc(soc)
    v, u, s, p = (TensorDesc.of(t) for t in (var, value, sorted_indices, pos))
    for name, t in (("var", v), ("value", u), ("sorted_indices", s), ("pos", p)):
        if t is None:
            _fail(f"{name} has no shape")
    if v.dtype != u.dtype:
        _fail(f"value dtype ({u.dtype}) must be the same as var dtype ({v.dtype})")
    if s.dtype != np.dtype(np.int32) or p.dtype != np.dtype(np.int32):
        _fail(f"sorted_indices and pos only support int32, got {s.dtype} and {p.dtype}")
    if v.ndim != u.ndim:
        _fail(f"the number of dims of var ({v.ndim}, shape {v.shape}) must equal that of value ({u.ndim}, "
              f"shape {u.shape})")
    dim = axis + v.ndim if axis < 0 else axis
    if dim != 0:
        _fail(f"dim only supports 0 in this version, but got {dim} (axis {axis})")
    for i in range(1, v.ndim):
        if v.dim(i) != u.dim(i):
            _fail(f"the size of var must match the size of value at dimension {i}: var shape {v.shape}, value "
                  f"shape {u.shape}")
    if s.ndim < 1:
        _fail(f"sorted_indices must have at least one dimension (its dim 0 is the id count), got shape {s.shape}")

    key = _KEY_BY_DTYPE.get(as_dtype(v.dtype))
    if key is None:
        _fail(f"var dtype {v.dtype} is not supported (float32, float16, bfloat16, int16, int32)")
    if key == KEY_FLOAT32 and deterministic:
        key = KEY_FLOAT32_FIX

    f = struct_fields(FIELDS)
    input_count = int(np.prod(v.shape, dtype=object)) if v.ndim else 1
    updates_count = int(np.prod(u.shape, dtype=object)) if u.ndim else 1
    one_time = int(np.prod(u.shape[1:], dtype=object)) if u.ndim > 1 else 1
    indices_count = s.dim(0)
    if input_count == 0 or updates_count == 0 or indices_count == 0:
        _fail(f"shape size cannot equal 0 (var {v.shape}, value {u.shape}, sorted_indices {s.shape})")

    ub_size = soc.ub_size_for_tiling - INDEX_BUFFER_BYTES - RESERVED_BUFFER_BYTES
    max_size = tdiv(tdiv(tdiv(ub_size, BUFFER_COUNT[key]), BLOCK_SIZE) * BLOCK_SIZE, _SIZE[key])
    core_num = soc.aiv_num
    used = min(indices_count, core_num)
    each_index = tdiv(indices_count + used - 1, used)
    used = tdiv(indices_count + each_index - 1, each_index)
    last_index = indices_count - each_index * (used - 1)
    each_num, each_loop, each_tail = one_time, 1, one_time
    if each_num > max_size:
        if max_size == 0:
            _fail(f"a row piece would hold 0 elements (UB {soc.ub_size_for_tiling} bytes leaves "
                  f"{ub_size} after the index window): the real tiling divides by zero here")
        each_loop = tdiv(each_num + max_size - 1, max_size)
        each_num = max_size
        each_tail = one_time - (each_loop - 1) * each_num
    each_round, each_count, each_ub_tail = _index_windows(each_index)
    last_round, last_count, last_ub_tail = _index_windows(last_index)
    f.update(used_core_num=used, enable_alpha=0 if alpha is None else 1, each_index_count=each_index,
             last_index_count=last_index, batch_count=1, each_batch_num=1, last_batch_num=1,
             input_count=input_count, indices_count=indices_count, updates_count=updates_count,
             updates_one_time=one_time, max_size=max_size, each_num=each_num, each_loop=each_loop,
             each_tail=each_tail, var_dim_num=v.dim(0) if v.ndim else 1, each_ub_index_round=each_round,
             each_ub_index_count=each_count, each_ub_index_tail=each_ub_tail, last_ub_index_round=last_round,
             last_ub_index_count=last_count, last_ub_index_tail=last_ub_tail)
    return TilingResult(tiling_key=key, block_dim=used, workspace_size=soc.lib_api_workspace, fields=f,
                        ub_plan=ub_plan(key, max_size), soc=soc)
