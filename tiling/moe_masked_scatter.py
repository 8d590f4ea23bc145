"""Tiling of MoeMaskedScatter on Ascend 950.

source: moe/3rd/moe_masked_scatter/op_host/arch35/moe_masked_scatter_tiling.cpp and moe_masked_scatter_tiling.h
@ 25fb6b92890d.

    y = x; the k-th True of mask (row-major) takes updates[k]

The kernel runs in two phases over the flat x / mask / y of n elements, split into blocks of normalCoreData
(at least 1024) elements, the last block taking tailCoreData:
* each core turns its mask, ubFactor bytes at a time, into an exclusive prefix count (int32, or int64 past
  INT32_MAX elements) in the workspace, and its own count of ones into a per-core slot; SyncAll;
* each core adds the counts of the cores before it and scatters: 4- and 8-byte values straight in GM from a
  SIMT grid; 1- and 2-byte values through UB, bufferSize elements at a time (a second buffer plan).

    tilingKey = 10 * sizeof(x) + (1 when n > INT32_MAX)
    workspace = 16 MiB + (usedCoreNum + n) * sizeof(prefix count)

UB: the tiling plans with GetCoreMemSize(UB) - 32 KiB (its DCACHE_SIZE, the SIMT data cache) and hands that to
SetLocalMemorySize. No tiling unit test of the op exists upstream (moe/3rd/moe_masked_scatter has no tests/ folder
at 25fb6b92890d); tests/tiling/test_moe_masked_scatter_tiling.py works its cases by hand from this file.
"""
from __future__ import annotations

from typing import NoReturn

import ml_dtypes
import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import (
    BLOCK_BYTES,
    TensorDesc,
    TilingResult,
    align_down,
    align_up,
    ceil_div,
    memoised_tiling,
    struct_fields,
    tdiv,
)
from .platform import get_soc
from .status import TilingError

OP = "MoeMaskedScatter"

FIELDS = ("normal_core_data", "tail_core_data", "ub_factor", "block_factor", "tail_block_factor", "tail_ub_factor",
          "tail_core_tail_ub_factor", "update_ele_nums", "buffer_size", "prefix_sum_ub_size")
"""MoeMaskedScatterTilingData (all int64), snake_case, in order."""

WORKSPACE_RESERVED = 16 * 1024 * 1024      # ASCENDC_TOOLS_WORKSPACE
DCACHE_BYTES = 32768                       # DCACHE_SIZE: UB the tiling leaves to the SIMT data cache
DOUBLE_BUFFER = 2
MIN_CORE_ELEMS = 1024                      # MIN_DATA_SIZE: the smallest block of a core
VREG_BYTES = 256                           # GetVRegSize
INT32_MAX = 2 ** 31 - 1

SUPPORTED_DTYPES = tuple(np.dtype(d) for d in (np.float32, np.float16, np.float64, np.uint8, np.int8, np.int16,
                                               np.int32, np.int64, np.bool_, ml_dtypes.bfloat16))
"""SUPPORT_DTYPE of the OpDef and the tiling (x, updates, y); the mask is bool."""


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def prefix_count_bytes(elems: int) -> int:
    """Bytes of one prefix count: int64 when the flat mask has more than INT32_MAX elements (isInt64Mask_)."""
    return 8 if elems > INT32_MAX else 4


def ub_plan(f: dict, value_bytes: int, count_bytes: int) -> tuple[UbBuffer, ...]:
    """The InitBuffer calls of the kernel: Init's (the prefix-count phase), then, for 1- and 2-byte values,
    ProcessLowBit's after pipe.Reset() (the scatter phase, pipe "low_bit")."""
    ub_factor = f["ub_factor"]
    rows = [UbBuffer("maskQueue", ub_factor, DOUBLE_BUFFER, "TQue", "VECIN", DOUBLE_BUFFER),
            UbBuffer("tmpBuf", ub_factor * count_bytes),
            UbBuffer("prefixSumQueue", ub_factor * count_bytes, 1, "TQue", "VECOUT", 1)]
    if value_bytes <= 2:
        buf = f["buffer_size"]
        rows += [UbBuffer("maskQueue", buf, DOUBLE_BUFFER, "TQue", "VECIN", DOUBLE_BUFFER, "low_bit"),
                 UbBuffer("xQueue", buf * value_bytes, DOUBLE_BUFFER, "TQue", "VECIN", DOUBLE_BUFFER, "low_bit"),
                 UbBuffer("tmpBuf", f["prefix_sum_ub_size"], 1, "TBuf", "VECCALC", 0, "low_bit"),
                 UbBuffer("yQueue", buf * value_bytes, 1, "TQue", "VECOUT", 1, "low_bit")]
    return tuple(rows)


def kernel_ub_bytes(soc) -> int:
    """UB the kernel may use (SetLocalMemorySize): GetCoreMemSize(UB) - DCACHE_SIZE (negative on a UB below it)."""
    return get_soc(soc).ub_size_for_tiling - DCACHE_BYTES


@memoised_tiling
def moe_masked_scatter(x, mask, updates, *, y_out=None, soc="ascend950") -> TilingResult:
    """Host tiling of MoeMaskedScatter (arch35; Ascend 950 only: elsewhere the l0 op launches CANN's MaskedScatter).

    x: any shape, one of SUPPORTED_DTYPES; mask: x's shape, bool; updates: any shape, x's dtype (its element count
    is update_ele_nums, the bound the kernel asserts the count of ones against); y_out: x's shape and dtype
    (default: that). Anything with .shape and .dtype, or TensorDesc. Element counts in elements, workspace and
    buffer sizes in bytes. Raises TilingError (561002) where the real tiling returns GRAPH_FAILED, and where it
    would divide by zero (a UB too small for one vector of prefix counts: ub_factor 0); NotImplementedError on
    an A2 / A3 profile.
    """
    soc = get_soc(soc)
    if not soc.is_regbase:
        raise NotImplementedError(f"{OP}: only the arch35 (Ascend 950) tiling is modelled, not {soc.name}'s; "
                                  "there the l0 op launches CANN's MaskedScatter")
    xd, md, ud = TensorDesc.of(x), TensorDesc.of(mask), TensorDesc.of(updates)
    if xd is None or md is None or ud is None:
        _fail("x, mask and updates are required")
    yd = TensorDesc.of(y_out) or TensorDesc(xd.shape, xd.dtype)
    # CheckDataType, in its order
    dtype = np.dtype(xd.dtype)
    if np.dtype(md.dtype) != np.bool_:
        _fail(f"mask must be bool, got {np.dtype(md.dtype)}")
    if np.dtype(ud.dtype) != dtype or np.dtype(yd.dtype) != dtype:
        _fail(f"x, updates and y must have one dtype, got {dtype}, {np.dtype(ud.dtype)} and {np.dtype(yd.dtype)}")
    if dtype not in SUPPORTED_DTYPES:
        _fail(f"x dtype must be one of {', '.join(d.name for d in SUPPORTED_DTYPES)}, got {dtype}")
    # CheckOutputShape: storage shapes compared as they are
    if md.shape != xd.shape or yd.shape != xd.shape:
        _fail(f"x, mask and y must have one shape, got {xd.shape}, {md.shape} and {yd.shape}")

    # DoOpTiling
    value_bytes = dtype.itemsize
    elems = xd.size
    count_bytes = prefix_count_bytes(elems)
    ub = kernel_ub_bytes(soc)
    cores = soc.aiv_num
    normal = max(ceil_div(elems, cores), MIN_CORE_ELEMS)
    used = ceil_div(elems, normal)
    tail = elems - (used - 1) * normal
    lanes = VREG_BYTES // count_bytes
    ub_factor = tdiv(tdiv(ub, DOUBLE_BUFFER + 2 * count_bytes), lanes) * lanes
    if ub_factor <= 0:
        _fail(f"UB of {ub} bytes after the {DCACHE_BYTES}-byte data cache holds no {lanes}-element piece of mask "
              f"(ub_factor {ub_factor}); the real tiling would divide by it")
    f = struct_fields(FIELDS)
    f.update(normal_core_data=normal, tail_core_data=tail, ub_factor=ub_factor,
             block_factor=ceil_div(normal, ub_factor), tail_block_factor=ceil_div(tail, ub_factor),
             tail_ub_factor=normal % ub_factor or ub_factor, tail_core_tail_ub_factor=tail % ub_factor or ub_factor,
             update_ele_nums=ud.size)
    if value_bytes <= 2:
        prefix_ub = align_up(cores * count_bytes, BLOCK_BYTES)
        buffer = align_down(tdiv(ub - prefix_ub, DOUBLE_BUFFER + DOUBLE_BUFFER * value_bytes + value_bytes),
                            BLOCK_BYTES)
        if buffer <= 0:
            _fail(f"UB of {ub} bytes holds no 32-byte piece of the low-bit scatter (buffer_size {buffer}); the "
                  "kernel would loop forever")
        f.update(buffer_size=buffer, prefix_sum_ub_size=prefix_ub)
    key = 10 * value_bytes + (count_bytes == 8)
    workspace = WORKSPACE_RESERVED + (used + elems) * count_bytes
    return TilingResult(tiling_key=key, block_dim=used, workspace_size=workspace, fields=f,
                        ub_plan=ub_plan(f, value_bytes, count_bytes), schedule_mode=1, soc=soc)
