"""MoeInitRoutingV3 arch35 tiling: the struct's fields, the constants and the small helpers every part shares.

source: moe/moe_init_routing_v3/op_kernel/arch35/moe_init_routing_v3_arch35_tiling_def.h (the struct, 68 int64
fields in this order) and moe/moe_init_routing_v3/op_host/moe_init_routing_v3_tiling_arch35.cpp lines 31-146
(constants, Align / AlignBytes) @ 25fb6b92890d
"""
from __future__ import annotations

from typing import NoReturn

import numpy as np

from ..common import BLOCK_BYTES, TensorDesc, tdiv
from ..status import TilingError

OP = "MoeInitRoutingV3"

# MoeInitRoutingV3Arch35TilingData: 20 scalars, then the sub-structs in declaration order
BASE_FIELDS = (
    "core_num", "n", "cols", "k", "expert_start", "expert_end", "actual_expert_num", "quant_mode", "row_idx_type",
    "is_input_scale", "is_input_offset", "expert_num", "expert_tokens_num_type", "expert_tokens_num_flag",
    "gather_first_fullload", "ep_fullload", "active_num", "drop_pad_mode", "smooth_type", "expert_capacity",
)
VBS_FIELDS = (       # MoeV3Arch35VBSComputeTilingData vbsComputeParamsOp
    "need_core_num", "per_core_elements", "per_core_loops", "per_core_per_loop_elements",
    "per_core_last_loop_elements", "last_core_elements", "last_core_loops", "last_core_per_loop_elements",
    "last_core_last_loop_elements", "one_loop_max_elements",
)
EXPERT_TOKENS_COUNT_FIELDS = (       # MoeV3Arch35ExpertTokensCountTilingData expertTokensCountTilingDataOp
    "need_core_num", "per_core_elements", "last_core_elements", "per_core_loops", "per_core_per_loop_elements",
    "per_core_last_loop_elements", "last_core_loops", "last_core_per_loop_elements", "last_core_last_loop_elements",
)
GATHER_OUT_FIELDS = (        # MoeV3Arch35GatherOutComputeTilingData gatherOutComputeParamsOp
    "need_core_num", "per_core_indices_elements", "last_core_indices_elements", "per_core_indices_loops",
    "per_core_per_loop_indices_elements", "per_core_last_loop_indices_elements", "last_core_indices_loops",
    "last_core_per_loop_indices_elements", "last_core_last_loop_indices_elements", "cols_loops", "per_loop_cols",
    "last_loop_cols", "active_num", "x_copy_in_queue_buffer_num", "use_compact_gather_out_drop_pad",
)
SRC_TO_DST_FIELDS = (        # MoeV3Arch35SrcToDstCapacityComputeTilingData srcToDstDropPadParamsOp
    "need_core_num", "per_core_rows", "per_core_per_loop_rows", "per_core_last_loop_rows", "last_core_rows",
    "last_core_per_loop_rows", "last_core_last_loop_rows", "per_core_loops", "last_core_loops", "per_loop_cols",
    "last_loop_cols", "col_loops",
)
FIELDS = (BASE_FIELDS + tuple(f"vbs_{f}" for f in VBS_FIELDS)
          + ("vms_middle_need_core_num",          # MoeV3Arch35VMSMiddleComputeTilingData.needCoreNum
             "sort_out_one_loop_max_elements")    # MoeV3Arch35SortOutComputeTilingData.oneLoopMaxElements
          + tuple(f"expert_tokens_count_{f}" for f in EXPERT_TOKENS_COUNT_FIELDS)
          + tuple(f"gather_out_{f}" for f in GATHER_OUT_FIELDS)
          + tuple(f"src_to_dst_drop_pad_{f}" for f in SRC_TO_DST_FIELDS))
assert len(FIELDS) == 68

# quant modes (attr quant_mode)
UNQUANT, STATIC, DYNAMIC = -1, 0, 1
MXFP8_E5M2, MXFP8_E4M3FN, FP8_GROUP_E5M2, FP8_GROUP_E4M3FN = 2, 3, 4, 5
HIF8_CAST, HIF8_PERTENSOR, HIF8_PERTOKEN, MXFP4_E2M1 = 6, 7, 8, 9
FP8_PERBLOCK_E5M2, FP8_PERBLOCK_E4M3FN, INT4_DYNAMIC = 11, 12, 13
FP8_GROUP_AMAX_E5M2, FP8_GROUP_AMAX_E4M3FN = 14, 15
MXFP8_ROUNDSCALE_AMAX_E5M2, MXFP8_ROUNDSCALE_AMAX_E4M3FN = 16, 17
QUANT_MODES = (-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17)
MX_QUANT = (MXFP8_E5M2, MXFP8_E4M3FN, MXFP8_ROUNDSCALE_AMAX_E5M2, MXFP8_ROUNDSCALE_AMAX_E4M3FN, MXFP4_E2M1)
MXFP8_QUANT = (MXFP8_E5M2, MXFP8_E4M3FN, MXFP8_ROUNDSCALE_AMAX_E5M2, MXFP8_ROUNDSCALE_AMAX_E4M3FN)
FP8_GROUP = (FP8_GROUP_E5M2, FP8_GROUP_E4M3FN, FP8_GROUP_AMAX_E5M2, FP8_GROUP_AMAX_E4M3FN)
FP8_PERBLOCK = (FP8_PERBLOCK_E5M2, FP8_PERBLOCK_E4M3FN)
EIGHT_BIT_QUANT = MXFP8_QUANT + (HIF8_CAST, HIF8_PERTENSOR, HIF8_PERTOKEN) + FP8_PERBLOCK + FP8_GROUP
DYNAMIC_QUANTS = (DYNAMIC, INT4_DYNAMIC)

CUMSUM, COUNT, KEY_VALUE = 0, 1, 2
DROPLESS, DROPPAD = 0, 1
ROW_IDX_GATHER, ROW_IDX_SCATTER = 0, 1

SIMT_DCACHE_SIZE = 64 * 1024         # UB kept for the SIMT data cache (SetLocalMemorySize gets the rest)
SORT_API_MAX_ELEM = 32 * 255         # AscendC::Sort sorts at most 255 repeats of 32 in one call
MRG_SORT_API_MAX_ELEM = 1024
MRG_LIST_NUM = 4
MX_QUANT_BLOCK_SIZE = 32
MXFPX_SCALE_BLOCK_SIZE = 64
SCALE_FACTOR_WITH_X = 32
FP8_BLOCK_SIZE = 128                 # FP8_PERBLOCK_BLOCK_SIZE and FP8_GROUP_SIZE: both 128 columns
MAX_QUEUE_BUFFER_NUM = 6
SORT32_ALIGN_ELEMENT = 32
ONE_CORE_SORT_BUFFER = 6
EXPERT_IDX_MAX = 10240
KV_MODE_EXPERT_IDX_MAX = EXPERT_IDX_MAX // 2
DYNAMIC_QUANT_COLS_BUFFER = 21
HIF8_QUANT_COLS_BUFFER = 5           # HIF8_PERTENSOR_ / HIF8_PERTOKEN_QUANT_COLS_BUFFER
STATIC_QUANT_FULLLOAD_COLS_BUFFER = 5
DYNAMIC_QUANT_FULLLOAD_COLS_BUFFER = 9
REG_SIZE = 256
FRAMEWORK_WORKSPACE = 16 * 1024 * 1024
EMPTY_TENSOR_TILINGKEY = 3000000
TILINGKEY_BASE = 10000000
FULLLOAD_TILINGKEY_BASE = 200000

# dtype names the tiling tells apart, with GetSizeByDataType (sub-byte types count as 1 byte, as the tiling
# maps ge's "1000 + bits" sizes to 1)
SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "hifloat8": 1, "float8_e5m2": 1,
        "float8_e4m3fn": 1, "float8_e8m0": 1, "float4_e2m1": 1, "int4": 1, "int32": 4, "int64": 8, "bool": 1,
        "int16": 2, "uint16": 2, "uint32": 4, "uint64": 8, "float64": 8}
_ALIASES = {"float": "float32", "fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
            "hif8": "hifloat8", "e8m0": "float8_e8m0", "float8_e8m0fnu": "float8_e8m0",
            "float4_e2m1fn": "float4_e2m1", "fp4": "float4_e2m1"}


def fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def dtype_name(dtype, what: str) -> str:
    if isinstance(dtype, str):
        name = dtype.strip().lower()
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            fail(f"{what} has dtype {dtype!r}, which is not a dtype")
    name = _ALIASES.get(name, name)
    if name not in SIZE:
        fail(f"{what} has dtype {dtype!r}, which the operator does not know")
    return name


def desc(t, what: str):
    """(shape tuple, dtype name) of a TensorDesc / array / (shape, dtype) pair; None stays None."""
    if t is None:
        return None
    if isinstance(t, tuple) and not isinstance(t, TensorDesc) and len(t) == 2 and not hasattr(t, "shape"):
        shape, dtype = t
    else:
        try:
            shape, dtype = t.shape, t.dtype
        except AttributeError:
            fail(f"{what} must be a tensor (TensorDesc, array or (shape, dtype)), got {type(t).__name__}")
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        fail(f"{what} has shape {shape!r}; dimensions must be whole numbers")
    if any(d < 0 for d in dims):
        fail(f"{what} has a negative dim (shape {dims})")
    return dims, dtype_name(dtype, what)


def align(elems: int, nbytes: int) -> int:
    """Align(): elements rounded up so that they fill whole 32-byte blocks."""
    return 0 if nbytes == 0 else tdiv(tdiv(elems * nbytes + BLOCK_BYTES - 1, BLOCK_BYTES) * BLOCK_BYTES, nbytes)


def dim(shape: tuple, i: int) -> int:
    # gert::Shape::GetDim past the rank reads 0 (the checks look at ranks first where it matters)
    return shape[i] if i < len(shape) else 0


def mxfpx_no_quant(quant_mode: int, x_dtype: str) -> bool:
    """isMXFPXNoQuantCase: no quantisation of x that already holds MX elements (fp8 or fp4)."""
    return quant_mode == UNQUANT and x_dtype in ("float8_e5m2", "float8_e4m3fn", "float4_e2m1")


def mxfp8_no_quant(quant_mode: int, x_dtype: str) -> bool:
    """isMXFP8NoQuantCase."""
    return quant_mode == UNQUANT and x_dtype in ("float8_e5m2", "float8_e4m3fn")


class Ctx:
    """The tiling's working values (the C++ class members)."""
    __slots__ = ("aiv", "avail_ub", "n", "k", "cols", "total", "x_dtype", "x_size", "scale_size", "is_scale",
                 "quant", "drop_pad", "row_idx_type", "expert_num", "capacity", "start", "end", "tokens_type",
                 "sort_loop_max", "f")
    # declarations only (no class values, which __slots__ forbids): what mypy checks the tiling's reads against
    aiv: int
    avail_ub: int
    n: int                  # rows of x
    k: int                  # experts per row
    cols: int               # elements per row of x
    total: int              # n * k
    x_dtype: str            # the dtype name of x ("bfloat16", "float8_e4m3fn", ...)
    x_size: int             # bytes per element of x
    scale_size: int
    is_scale: int
    quant: int
    drop_pad: int
    row_idx_type: int
    expert_num: int
    capacity: int
    start: int
    end: int
    tokens_type: int
    sort_loop_max: int
    f: dict                 # the tiling struct's fields, by name
