"""Tiling of MoeInitRoutingV3 on Ascend 950 (moe_init_routing_v3_tiling_arch35.cpp, the regbase template).

The op sorts the flat expert ids of x's rows (one core, or VBS cores + VMS merges + SortOut),
counts tokens per expert and gathers (optionally quantises) the rows into expanded_x. The tiling
checks attributes, inputs and outputs in the real order, then fills the sub-structs of
MoeInitRoutingV3Arch35TilingData and picks the template:

    empty tensor (n, k or cols == 0)        3000000
    full load (sort + gather in one UB)     200000 + (quantMode + 1) * 10000     (INT4 dynamic shares INT8's)
    counting sort, full load                400000 + 1 * 10000 + (quantMode + 1) * 10000 + rowIdxType * 1000
    sort templates                          10000000 + sortMode * 1000000 + factor * 10000
                                            + rowIdxType * 1000 + dropPadMode * 100

where factor is quantMode + 1 except that both E5M2 / E4M3FN variants of a quant family share the
E5M2 code. Only the 950 (npu_arch 3510) runs this tiling; A2/A3 have another one.

Tensors are TensorDesc, arrays, or (shape, dtype-name) pairs; dtype names for the types numpy lacks:
"hifloat8", "float4_e2m1", "int4", "float8_e8m0" (ml_dtypes' float8_e8m0fnu / float4_e2m1fn / int4 also work).
An MXFP4 expanded_x may also be the project's packed uint8 array (last dim ceil(cols / 2) bytes).
"""
from __future__ import annotations

import math

import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import TensorDesc, TilingResult, ceil_div, memoised_tiling, struct_fields, tdiv
from .moe_sort import arch35_vbs_split
from .platform import get_soc
from .status import TilingError

OP = "MoeInitRoutingV3"

BASE_FIELDS = (
    "core_num", "n", "cols", "k", "expert_start", "expert_end", "actual_expert_num", "quant_mode", "row_idx_type",
    "use_gather_copy", "is_input_scale", "is_input_offset", "expert_num", "expert_tokens_num_type",
    "expert_tokens_num_flag", "gather_first_fullload", "ep_fullload", "active_num", "drop_pad_mode", "smooth_type",
    "expert_capacity", "is_input_topk_weight",
)
VBS_FIELDS = (
    "need_core_num", "per_core_elements", "per_core_loops", "per_core_per_loop_elements",
    "per_core_last_loop_elements", "last_core_elements", "last_core_loops", "last_core_per_loop_elements",
    "last_core_last_loop_elements", "one_loop_max_elements",
)
EXPERT_TOKENS_COUNT_FIELDS = (
    "need_core_num", "per_core_elements", "last_core_elements", "per_core_loops", "per_core_per_loop_elements",
    "per_core_last_loop_elements", "last_core_loops", "last_core_per_loop_elements", "last_core_last_loop_elements",
)
GATHER_OUT_FIELDS = (
    "need_core_num", "per_core_indices_elements", "last_core_indices_elements", "per_core_indices_loops",
    "per_core_per_loop_indices_elements", "per_core_last_loop_indices_elements", "last_core_indices_loops",
    "last_core_per_loop_indices_elements", "last_core_last_loop_indices_elements", "cols_loops", "per_loop_cols",
    "last_loop_cols", "active_num", "x_copy_in_queue_buffer_num", "use_compact_gather_out_drop_pad",
)
SRC_TO_DST_FIELDS = (
    "need_core_num", "per_core_rows", "per_core_per_loop_rows", "per_core_last_loop_rows", "last_core_rows",
    "last_core_per_loop_rows", "last_core_last_loop_rows", "per_core_loops", "last_core_loops", "per_loop_cols",
    "last_loop_cols", "col_loops",
)
COUNTING_SORT_FIELDS = (
    "counting_sort_mode", "filter_need_core_num", "filter_per_core_tokens", "last_core_tokens", "core_entries",
    "expert_count_stride", "filter_chunk_size", "cs_per_loop_cols", "cs_cols_loops", "cs_last_loop_cols",
    "max_per_loop_entries", "pairs_ws_offset", "cs_aggr_enable", "cs_aggr_out_rows", "cs_aggr_out_buf_bytes",
)
FIELDS = (BASE_FIELDS + tuple(f"vbs_{f}" for f in VBS_FIELDS) + ("vms_middle_need_core_num",
                                                                   "sort_out_one_loop_max_elements")
          + tuple(f"expert_tokens_count_{f}" for f in EXPERT_TOKENS_COUNT_FIELDS)
          + tuple(f"gather_out_{f}" for f in GATHER_OUT_FIELDS)
          + tuple(f"src_to_dst_drop_pad_{f}" for f in SRC_TO_DST_FIELDS)
          + tuple(f"counting_sort_{f}" for f in COUNTING_SORT_FIELDS))

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
# modes whose kernels keep one float row per core in GM when cols do not fit the UB
NO_QUANT_TEMP = (HIF8_CAST, HIF8_PERTENSOR) + MXFP8_QUANT + FP8_GROUP

CUMSUM, COUNT, KEY_VALUE = 0, 1, 2
DROPLESS, DROPPAD = 0, 1
ROW_IDX_GATHER, ROW_IDX_SCATTER = 0, 1

SIMT_DCACHE_SIZE = 64 * 1024         # UB kept for the SIMT data cache (SetLocalMemorySize gets the rest)
SORT_API_MAX_ELEM = 32 * 255         # AscendC::Sort sorts at most 255 repeats of 32 in one call
MRG_SORT_API_MAX_ELEM = 1024
MX_QUANT_BLOCK_SIZE = 32
MXFPX_SCALE_BLOCK_SIZE = 64
SCALE_FACTOR_WITH_X = 32
FP8_BLOCK_SIZE = 128                 # per-block and per-group FP8 quantisation both use 128 columns
MAX_QUEUE_BUFFER_NUM = 6
SORT32_ALIGN_ELEMENT = 32
UB_BLOCK_SIZE = 32
ONE_CORE_SORT_BUFFER = 6
EXPERT_IDX_MAX = 10240
KV_MODE_EXPERT_IDX_MAX = EXPERT_IDX_MAX // 2
DYNAMIC_QUANT_COLS_BUFFER = 21
HIF8_QUANT_COLS_BUFFER = 5
STATIC_QUANT_FULLLOAD_COLS_BUFFER = 5
DYNAMIC_QUANT_FULLLOAD_COLS_BUFFER = 9
REG_SIZE = 256
FRAMEWORK_WORKSPACE = 16 * 1024 * 1024
EMPTY_TENSOR_TILINGKEY = 3000000

CS_ONE_BLOCK_ELEMENT = 8
CS_FULLLOAD_MAX_ACTUAL_EXPERT_NUM = 128
CS_MAX_ACTUAL_EXPERT_NUM = 256
CS_MAX_EXPERT_NUM = 1024
CS_FULLLOAD_MAX_EXPERTS = 32
AGGR_BUF_BYTES = 10 * 1024

# dtype names the tiling tells apart, with GetSizeByDataType (sub-byte types count as 1 byte, as the tiling
# maps ge's "1000 + bits" sizes to 1)
_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "hifloat8": 1, "float8_e5m2": 1,
         "float8_e4m3fn": 1, "float8_e8m0": 1, "float4_e2m1": 1, "int4": 1, "int32": 4, "int64": 8, "bool": 1,
         "int16": 2, "uint16": 2, "uint32": 4, "uint64": 8, "float64": 8}
_ALIASES = {"float": "float32", "fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
            "hif8": "hifloat8", "e8m0": "float8_e8m0", "float8_e8m0fnu": "float8_e8m0",
            "float4_e2m1fn": "float4_e2m1", "fp4": "float4_e2m1"}


def _fail(message: str):
    raise TilingError(f"{OP} tiling: {message}")


def _dtype_name(dtype, what: str) -> str:
    if isinstance(dtype, str):
        name = dtype.strip().lower()
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            _fail(f"{what} has dtype {dtype!r}, which is not a dtype")
    name = _ALIASES.get(name, name)
    if name not in _SIZE:
        _fail(f"{what} has dtype {dtype!r}, which the operator does not know")
    return name


def _desc(t, what: str):
    """(shape tuple, dtype name) of a TensorDesc / array / (shape, dtype) pair; None stays None."""
    if t is None:
        return None
    if isinstance(t, tuple) and not isinstance(t, TensorDesc) and len(t) == 2 and not hasattr(t, "shape"):
        shape, dtype = t
    else:
        try:
            shape, dtype = t.shape, t.dtype
        except AttributeError:
            _fail(f"{what} must be a tensor (TensorDesc, array or (shape, dtype)), got {type(t).__name__}")
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        _fail(f"{what} has shape {shape!r}; dimensions must be whole numbers")
    if any(d < 0 for d in dims):
        _fail(f"{what} has a negative dim (shape {dims})")
    return dims, _dtype_name(dtype, what)


def _align(elems: int, nbytes: int) -> int:
    """Align(): elements rounded up so that they fill whole 32-byte blocks."""
    return 0 if nbytes == 0 else tdiv(tdiv(elems * nbytes + UB_BLOCK_SIZE - 1, UB_BLOCK_SIZE) * UB_BLOCK_SIZE, nbytes)


def _align_bytes(elems: int, nbytes: int) -> int:
    """AlignBytes(): bytes of `elems` elements rounded up to 32."""
    return 0 if nbytes == 0 else tdiv(elems * nbytes + UB_BLOCK_SIZE - 1, UB_BLOCK_SIZE) * UB_BLOCK_SIZE


def _ceil_align(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def _dim(shape: tuple, i: int) -> int:
    # gert::Shape::GetDim past the rank reads 0 (the checks look at ranks first where it matters)
    return shape[i] if i < len(shape) else 0


def _expanded_x_dtype(quant_mode: int, x_dtype: str) -> str | None:
    if quant_mode == UNQUANT:
        return x_dtype
    if quant_mode in (STATIC, DYNAMIC):
        return "int8"
    if quant_mode in (MXFP8_E5M2, FP8_GROUP_E5M2, FP8_PERBLOCK_E5M2, FP8_GROUP_AMAX_E5M2, MXFP8_ROUNDSCALE_AMAX_E5M2):
        return "float8_e5m2"
    if quant_mode in (MXFP8_E4M3FN, FP8_GROUP_E4M3FN, FP8_PERBLOCK_E4M3FN, FP8_GROUP_AMAX_E4M3FN,
                      MXFP8_ROUNDSCALE_AMAX_E4M3FN):
        return "float8_e4m3fn"
    if quant_mode in (HIF8_CAST, HIF8_PERTENSOR, HIF8_PERTOKEN):
        return "hifloat8"
    if quant_mode == MXFP4_E2M1:
        return "float4_e2m1"
    if quant_mode == INT4_DYNAMIC:
        return "int4"
    return None


def _x_dtypes(quant_mode: int) -> tuple:
    if quant_mode in EIGHT_BIT_QUANT:
        return ("float16", "bfloat16")
    if quant_mode == UNQUANT:
        return ("float32", "float16", "bfloat16", "int8", "hifloat8", "float8_e5m2", "float8_e4m3fn", "float4_e2m1")
    if quant_mode == STATIC:
        return ("float32", "float16", "bfloat16")
    if quant_mode == MXFP4_E2M1:
        return ("float16", "bfloat16")
    if quant_mode == INT4_DYNAMIC:
        return ("float32", "bfloat16")
    # dynamic INT8: int8 x is let through for old callers (its expanded_x / expanded_scale mean nothing)
    return ("float32", "float16", "bfloat16", "int8")


def _mxfpx_no_quant(quant_mode: int, x_dtype: str) -> bool:
    return quant_mode == UNQUANT and x_dtype in ("float8_e5m2", "float8_e4m3fn", "float4_e2m1")


def _mxfp8_no_quant(quant_mode: int, x_dtype: str) -> bool:
    return quant_mode == UNQUANT and x_dtype in ("float8_e5m2", "float8_e4m3fn")


def _check_shape(name: str, shape: tuple, rank: int = -1, dims: tuple = ()) -> None:
    """Rank, then each expected dim (-1 = not checked), in the order the tiling checks them."""
    if rank != -1 and len(shape) != rank:
        _fail(f"{name} must have rank {rank}, got {len(shape)} (shape {shape})")
    for i, want in enumerate(dims):
        if want != -1 and _dim(shape, i) != want:
            _fail(f"{name} dim[{i}] must be {want}, got {_dim(shape, i)} (shape {shape})")


class _Ctx:
    """The tiling's working values (the C++ class members)."""
    __slots__ = ("aiv", "avail_ub", "n", "k", "cols", "total", "x_dtype", "x_size", "scale_size", "is_scale",
                 "quant", "drop_pad", "row_idx_type", "expert_num", "capacity", "start", "end", "tokens_type",
                 "expanded_x_dtype", "sort_loop_max", "f")


def _vbs(c: _Ctx) -> int:
    f, total, loop_max = c.f, c.total, c.sort_loop_max
    f["vbs_one_loop_max_elements"] = loop_max
    if total <= loop_max:
        for name in VBS_FIELDS[:-1]:
            f[f"vbs_{name}"] = total
        f["vbs_need_core_num"] = f["vbs_per_core_loops"] = f["vbs_last_core_loops"] = 1
        return 0
    need = ceil_div(total, loop_max)
    need = min(int(math.pow(4, int(math.ceil(math.log(need) / math.log(4))) if need > 0 else 0)), c.aiv)
    arch35_vbs_split(f, total, need, loop_max)
    return 1


def _expert_tokens_count(c: _Ctx) -> None:
    f, total = c.f, c.total
    per_core = ceil_div(total, c.aiv)
    need = ceil_div(total, per_core)
    last = total - (need - 1) * per_core
    actual = c.end - c.start
    experts = actual if c.tokens_type != KEY_VALUE else (actual + 1) * 2
    max_per_loop = tdiv(c.avail_ub - _ceil_align(experts, UB_BLOCK_SIZE) * (4 * 2 + 8) - UB_BLOCK_SIZE, 4)
    if max_per_loop <= 0 and total > 0:
        # the real tiling goes on with a negative loop (and negative buffers); no kernel could run it
        _fail(f"UB of {c.avail_ub} bytes (after the SIMT data cache) leaves no room for ExpertTokensCount's loop of "
              f"sorted ids after its {experts}-expert count buffers ({_ceil_align(experts, UB_BLOCK_SIZE) * 16} "
              "bytes): fewer active experts or a larger UB")
    values = dict(need_core_num=need, per_core_elements=per_core, last_core_elements=last)
    for who, elems in (("per_core", per_core), ("last_core", last)):
        loops = ceil_div(elems, max_per_loop)
        per_loop = ceil_div(elems, loops)
        values.update({f"{who}_loops": loops, f"{who}_per_loop_elements": per_loop,
                       f"{who}_last_loop_elements": elems - (loops - 1) * per_loop})
    for k, v in values.items():
        f[f"expert_tokens_count_{k}"] = v


def _is_full_load(c: _Ctx) -> bool:
    if c.drop_pad == DROPPAD:
        return False
    per_core_tokens = 1
    if c.start == 0 and c.end == c.expert_num:
        ep = 0
        if c.quant not in DYNAMIC_QUANTS:
            est, rem = tdiv(c.n, c.aiv), c.n % c.aiv
            per_core_tokens = est + 1 if rem <= 1 else est + 2
    else:
        ep = 1
    c.f["ep_fullload"] = ep
    if c.total > c.sort_loop_max:
        return False
    tile = _align(c.total, 4)
    sort_num = ceil_div(tile, SORT32_ALIGN_ELEMENT) * SORT32_ALIGN_ELEMENT
    remain = (c.avail_ub - sort_num * 4 * ONE_CORE_SORT_BUFFER - sort_num * 4 * 3
              - ceil_div(c.expert_num * 8, UB_BLOCK_SIZE) * UB_BLOCK_SIZE * 3 - 1024)
    gather = ceil_div(c.cols * c.x_size, UB_BLOCK_SIZE) * UB_BLOCK_SIZE * per_core_tokens
    if c.quant == UNQUANT:
        remain -= gather + UB_BLOCK_SIZE
    elif c.quant == STATIC:
        remain -= gather + _align(c.cols, 1) * STATIC_QUANT_FULLLOAD_COLS_BUFFER * per_core_tokens
    elif c.quant == INT4_DYNAMIC:
        x_in = _align_bytes(c.cols, 4) if c.x_size == 4 else 2 * _align_bytes(c.cols, c.x_size)
        remain -= (2 * x_in + _align_bytes(c.cols, 4) + _align_bytes(c.cols, 4)
                   + _align_bytes(ceil_div(c.cols, 2), 1) + UB_BLOCK_SIZE * 2)
    elif c.quant == DYNAMIC:
        remain -= _align(c.cols, UB_BLOCK_SIZE) * DYNAMIC_QUANT_FULLLOAD_COLS_BUFFER + UB_BLOCK_SIZE * 2
    return remain > 0


def _counting_sort(c: _Ctx) -> int:
    """countingSortMode: 1 when the counting-sort full-load template applies (mode 2 is never chosen)."""
    actual = c.end - c.start
    if c.expert_num > CS_MAX_EXPERT_NUM or c.quant not in (UNQUANT, STATIC):
        return 0
    if actual <= 0 or actual > CS_MAX_ACTUAL_EXPERT_NUM:
        return 0
    if c.drop_pad == DROPLESS:
        if actual != c.expert_num and actual * 2 > c.expert_num:
            return 0
    elif c.n < CS_MAX_EXPERT_NUM // 2:
        return 0
    per_core_tokens = ceil_div(c.n, c.aiv)
    est = _counting_sort_ub(c, per_core_tokens)
    expand_ok = c.expanded_x_dtype in ("int8", "float16", "bfloat16", "float32")
    if not (0 < est <= c.avail_ub - 1024 and c.quant == UNQUANT and c.drop_pad == DROPLESS
            and actual <= CS_FULLLOAD_MAX_EXPERTS and expand_ok):
        return 0
    need = ceil_div(c.n, per_core_tokens)
    cols_aligned = tdiv(_ceil_align(c.cols * c.x_size, UB_BLOCK_SIZE), c.x_size)
    aggr_rows = tdiv(AGGR_BUF_BYTES, cols_aligned * c.x_size)
    aggr = aggr_rows >= 2 and actual <= CS_FULLLOAD_MAX_ACTUAL_EXPERT_NUM and c.quant == UNQUANT
    values = dict(counting_sort_mode=1, filter_need_core_num=need, filter_per_core_tokens=per_core_tokens,
                  last_core_tokens=c.n - per_core_tokens * (need - 1), core_entries=per_core_tokens * c.k,
                  expert_count_stride=_ceil_align(actual, CS_ONE_BLOCK_ELEMENT), filter_chunk_size=0,
                  cs_per_loop_cols=c.cols, cs_cols_loops=1, cs_last_loop_cols=c.cols,
                  max_per_loop_entries=per_core_tokens * c.k, cs_aggr_enable=int(aggr),
                  cs_aggr_out_rows=aggr_rows if aggr else 0, cs_aggr_out_buf_bytes=AGGR_BUF_BYTES if aggr else 0)
    for k, v in values.items():
        c.f[f"counting_sort_{k}"] = v
    return 1


def _counting_sort_ub(c: _Ctx, per_core_tokens: int) -> int:
    """UB bytes of the counting-sort full-load kernel for `per_core_tokens` rows (the tiling's estimate)."""
    if per_core_tokens <= 0:
        return -1
    a32 = lambda b: _ceil_align(b, UB_BLOCK_SIZE)  # noqa: E731
    entries = per_core_tokens * c.k
    entries_aligned = ceil_div(entries, 64) * 64
    mask = a32(ceil_div(entries_aligned, 8))
    actual = c.end - c.start
    stride = _ceil_align(actual, CS_ONE_BLOCK_ELEMENT)
    cols_aligned = tdiv(a32(c.cols * c.x_size), c.x_size)
    total = a32(per_core_tokens * cols_aligned * c.x_size) + a32(entries * 4)
    if c.is_scale == 1 and c.quant != DYNAMIC:
        total += a32(per_core_tokens * 8 * 4)
    total += a32(stride * 4) + a32(c.aiv * stride * 4) + a32(actual * 8) + a32(stride * 4)
    total += a32(entries * 2 * 4) + a32(entries_aligned * 4) + mask * 3 + a32(entries_aligned * 4) * 3
    if c.quant != UNQUANT:
        total += a32(cols_aligned) + a32(CS_ONE_BLOCK_ELEMENT * 4)
        if c.quant == DYNAMIC and c.is_scale == 1:
            total += a32(cols_aligned * 4)
    aggr_rows = tdiv(AGGR_BUF_BYTES, cols_aligned * c.x_size)
    if aggr_rows >= 2 and actual <= CS_FULLLOAD_MAX_ACTUAL_EXPERT_NUM and c.quant == UNQUANT:
        total += a32(entries * 4) + a32(actual * 4) * 2 + a32(AGGR_BUF_BYTES)
    return total


def _x_buffer_num(additional: int) -> int:
    return min(additional + 2, MAX_QUEUE_BUFFER_NUM) if additional > 0 else 2


def _multiples(c: _Ctx) -> tuple[int, int]:
    """(colMultiple, rowMultiple): UB bytes per column and per index of the gather kernel."""
    if c.quant == STATIC:
        return 2 * c.x_size + 2 + 4 + 2, 2
    if c.quant in DYNAMIC_QUANTS:
        return DYNAMIC_QUANT_COLS_BUFFER, 4
    if c.quant == HIF8_CAST and c.x_dtype == "bfloat16":
        return 2 * (c.x_size + c.x_size * 2), 2    # bf16 goes through an fp32 copy before the cast
    if c.quant in (HIF8_PERTOKEN, HIF8_PERTENSOR):
        return HIF8_QUANT_COLS_BUFFER, 4
    return 2 * c.x_size, 2


def _per_loop_drop_pad(c: _Ctx, col_mult: int, row_mult: int, cols: int, per_core: int) -> tuple[int, int, int]:
    """SetPerLoopParams4NoQuantDropPad (also the quantised paths): (perLoopCols, maxIndices, xBufferNum)."""
    def max_idx(pc):
        return tdiv(tdiv(c.avail_ub - _align(pc, c.x_size) * col_mult - UB_BLOCK_SIZE * 2, row_mult), 4)
    m = max_idx(cols)
    while m <= 0 and cols > 1:
        cols = ceil_div(cols, 2)
        m = max_idx(cols)
    m = min(m, per_core)
    x_queue = _align_bytes(cols, c.x_size)
    base = (_align_bytes(m, 4) + x_queue + _align_bytes(1, 4)) * 2
    return cols, m, _x_buffer_num(tdiv(c.avail_ub - base, x_queue))


def _per_loop(c: _Ctx, col_mult: int, row_mult: int, per_core: int) -> tuple[int, int, int]:
    cols = c.cols
    if c.quant == HIF8_PERTENSOR:
        def max_idx(pc):
            return tdiv(tdiv(c.avail_ub - _align(pc, c.x_size) * col_mult, row_mult), 4)
        m = max_idx(cols)
        while m <= 0 and cols > 1:
            cols = ceil_div(cols, 2)
            m = max_idx(cols)
        return cols, min(m, per_core), 2
    if _mxfpx_no_quant(c.quant, c.x_dtype):
        def max_idx(pc):
            return tdiv(tdiv(c.avail_ub - _align(pc, c.x_size) * col_mult
                             - _align(tdiv(pc, SCALE_FACTOR_WITH_X), c.scale_size) * c.scale_size * 2, row_mult), 4)
        cols = _ceil_align(cols, MXFPX_SCALE_BLOCK_SIZE)
        m = max_idx(cols)
        while m <= 0:
            cols = _ceil_align(ceil_div(cols, 2), MXFPX_SCALE_BLOCK_SIZE)
            m = max_idx(cols)
        return cols, m, 2
    if c.quant == UNQUANT and c.drop_pad == DROPLESS:
        def max_idx(pc):
            return tdiv(tdiv(c.avail_ub, 2), _align_bytes(pc, c.x_size) + _align_bytes(1, 4) + 4)
        m = max_idx(cols)
        while m <= 0:
            cols = ceil_div(cols, 2)
            m = max_idx(cols)
        m = min(m, per_core)
        x_queue = m * _align_bytes(cols, c.x_size)
        base = (_align_bytes(m, 4) + x_queue + m * _align_bytes(1, 4)) * 2
        return cols, m, _x_buffer_num(tdiv(c.avail_ub - base, x_queue))
    return _per_loop_drop_pad(c, col_mult, row_mult, cols, per_core)


def _core_split(total: int, aiv: int) -> tuple[int, int, int]:
    per_core = ceil_div(total, aiv)
    need = ceil_div(total, per_core)
    return need, per_core, total - (need - 1) * per_core


def _set_loops(f: dict, prefix: str, who: str, elems: int, max_per_loop: int) -> None:
    per_loop = min(max_per_loop, elems)
    loops = ceil_div(elems, per_loop)
    f[f"{prefix}{who}_indices_loops"] = loops
    f[f"{prefix}{who}_per_loop_indices_elements"] = per_loop
    f[f"{prefix}{who}_last_loop_indices_elements"] = elems - (loops - 1) * per_loop


def _set_cols(f: dict, cols: int, per_loop_cols: int) -> None:
    loops = ceil_div(cols, per_loop_cols)
    f.update(gather_out_cols_loops=loops, gather_out_per_loop_cols=per_loop_cols,
             gather_out_last_loop_cols=cols - (loops - 1) * per_loop_cols)


def _gather_out(c: _Ctx) -> None:
    f, p = c.f, "gather_out_"
    if ceil_div(c.total, c.aiv) <= 0:
        f["gather_out_need_core_num"] = 0
        return
    need, per_core, last = _core_split(c.total, c.aiv)
    col_mult, row_mult = _multiples(c)
    cols, m, bufs = _per_loop(c, col_mult, row_mult, per_core)
    if c.quant == INT4_DYNAMIC and cols < c.cols and cols % 2:
        # two INT4 values share a byte: a column piece must be even
        cols, m, bufs = _per_loop_drop_pad(c, col_mult, row_mult, max(cols - 1, 2), per_core)
        if cols < c.cols and cols % 2:
            cols = max(cols - 1, 2)
    f.update(gather_out_need_core_num=need, gather_out_per_core_indices_elements=per_core,
             gather_out_last_core_indices_elements=last, gather_out_x_copy_in_queue_buffer_num=bufs)
    _set_cols(f, c.cols, cols)
    _set_loops(f, p, "per_core", per_core, m)
    _set_loops(f, p, "last_core", last, m)
    f["gather_out_active_num"] = f["active_num"]


def _gather_out_mxfp8_no_quant(c: _Ctx) -> None:
    f = c.f
    if ceil_div(c.total, c.aiv) <= 0:
        f["gather_out_need_core_num"] = 0
        return
    _, per_core, last = _core_split(c.total, c.aiv)

    def row_bytes(pc):
        return (_align(pc, c.x_size) * c.x_size * 2
                + _align(tdiv(pc, SCALE_FACTOR_WITH_X), c.scale_size) * c.scale_size * 2)
    cols = _ceil_align(c.cols, MXFPX_SCALE_BLOCK_SIZE)
    m = tdiv(tdiv(c.avail_ub - row_bytes(cols), 2), 4)
    bufs = 2
    if m > 0:
        # more x buffers only when a whole row fits
        bufs = min(MAX_QUEUE_BUFFER_NUM, tdiv(c.avail_ub - 2 * 4 * min(m, per_core), row_bytes(cols)) * 2)
    while m <= 0:
        cols = _ceil_align(ceil_div(cols, 2), MXFPX_SCALE_BLOCK_SIZE)
        m = tdiv(tdiv(c.avail_ub - row_bytes(cols), 2), 4)
    # this template leaves needCoreNum, per-core counts and the per-core loop figures at 0 (the kernel
    # works them out from the expert counts)
    _set_cols(f, c.cols, cols)
    f["gather_out_x_copy_in_queue_buffer_num"] = bufs
    f["gather_out_per_core_per_loop_indices_elements"] = min(m, per_core)
    _set_loops(f, "gather_out_", "last_core", last, m)
    f["gather_out_active_num"] = f["active_num"]


def _gather_out_quant(c: _Ctx, block: int, max_idx) -> None:
    """Tiling4GatherOutMxQuant / Tiling4GatherOutFP8Quant: columns in blocks of `block`."""
    f = c.f
    if ceil_div(c.total, c.aiv) <= 0:
        f["gather_out_need_core_num"] = 0
        return
    need, per_core, last = _core_split(c.total, c.aiv)
    cols = _ceil_align(c.cols, block)
    m = max_idx(cols)
    while m <= 0 and cols > block:
        cols = _ceil_align(ceil_div(cols, 2), block)
        m = max_idx(cols)
    if m <= 0:
        # the real tiling logs "UB space insufficient" and goes on with the gather fields unset
        return
    f.update(gather_out_need_core_num=need, gather_out_per_core_indices_elements=per_core,
             gather_out_last_core_indices_elements=last)
    _set_cols(f, c.cols, cols)
    _set_loops(f, "gather_out_", "per_core", per_core, m)
    _set_loops(f, "gather_out_", "last_core", last, m)
    f["gather_out_active_num"] = f["active_num"]


def _mx_max_idx(c: _Ctx):
    def max_idx(pc):
        x_in = _align_bytes(pc, c.x_size)
        blocks = tdiv(pc, MX_QUANT_BLOCK_SIZE)
        scale = 2 * _align_bytes(blocks, c.x_size) + _align_bytes(blocks, 1)
        x_out = _align(tdiv(pc, 4), 1) * 4
        return tdiv(tdiv(c.avail_ub, 2) - (x_in + scale + x_out), 4)
    return max_idx


def _fp8_max_idx(c: _Ctx, group: bool):
    def max_idx(pc):
        x_in, x_out = _align_bytes(pc, c.x_size), _align_bytes(pc, 1)
        scale = _align_bytes(ceil_div(pc, FP8_BLOCK_SIZE), 4)
        extra = scale + max(scale, REG_SIZE) * 2 if group else max(scale, REG_SIZE)
        return tdiv(tdiv(c.avail_ub, 2) - (x_in + x_out + extra), 4)
    return max_idx


def _src_to_dst_drop_pad(c: _Ctx) -> None:
    f, p = c.f, "src_to_dst_drop_pad_"
    per_core = ceil_div(c.total, c.aiv)
    if per_core <= 0:
        f[p + "need_core_num"] = 0
        return
    need = ceil_div(c.total, per_core)
    last = c.total - per_core * (need - 1)
    row_align = UB_BLOCK_SIZE // 4
    max_rows = max(tdiv(tdiv(c.avail_ub - UB_BLOCK_SIZE, 4), 2) // row_align * row_align, row_align)
    values = dict(need_core_num=need, per_core_rows=per_core, last_core_rows=last, per_loop_cols=c.cols,
                  last_loop_cols=c.cols, col_loops=1)
    for who, rows in (("per_core", per_core), ("last_core", last)):
        per_loop = min(rows, max_rows)
        loops = ceil_div(rows, per_loop)
        values.update({f"{who}_per_loop_rows": per_loop, f"{who}_loops": loops,
                       f"{who}_last_loop_rows": rows - (loops - 1) * per_loop})
    for k, v in values.items():
        f[p + k] = v


def _gather_out_drop_pad(c: _Ctx) -> None:
    f = c.f
    out_rows = c.expert_num * c.capacity
    compact = False
    if out_rows <= c.total:
        # scanning only the output rows saves index reads but copies rows beyond n at random
        row_copy = c.cols * c.x_size + (4 if c.is_scale == 1 else 0)
        compact = (c.total - out_rows) * 4 > max(out_rows - c.n, 0) * row_copy * 4
    f["gather_out_use_compact_gather_out_drop_pad"] = int(compact)
    split = out_rows if compact else c.total
    per_core = ceil_div(split, c.aiv)
    if per_core <= 0:
        f["gather_out_per_core_per_loop_indices_elements"] = f["gather_out_last_core_per_loop_indices_elements"] = 0
        return
    need = ceil_div(split, per_core)
    last = split - (need - 1) * per_core
    scale_q = 2 * _align_bytes(1, 4) if c.is_scale == 1 else 0
    cols, m = c.cols, 0
    while m <= 0 and cols > 0:
        m = tdiv(tdiv(tdiv(c.avail_ub - 2 * _align_bytes(cols, c.x_size) - scale_q, 2), 4), 8) * 8
        if m > 0 or cols <= 1:
            break
        cols = ceil_div(cols, 2)
    _set_cols(f, c.cols, cols)
    _set_loops(f, "gather_out_", "per_core", per_core, m)
    _set_loops(f, "gather_out_", "last_core", last, m)
    f.update(gather_out_x_copy_in_queue_buffer_num=2, gather_out_need_core_num=need,
             gather_out_per_core_indices_elements=per_core, gather_out_last_core_indices_elements=last)


def _tiling_key(c: _Ctx, full_load: bool, cs_mode: int, sort_mode: int) -> int:
    factor = c.quant + 1
    if full_load and ((c.quant == UNQUANT and not _mxfpx_no_quant(c.quant, c.x_dtype)) or c.quant == STATIC
                      or c.quant in DYNAMIC_QUANTS):
        if c.quant == INT4_DYNAMIC:
            factor = DYNAMIC + 1
        return 200000 + factor * 10000
    if cs_mode:
        return 400000 + cs_mode * 10000 + factor * 10000 + c.row_idx_type * 1000 + c.drop_pad * 100
    for family in ((MXFP8_E5M2, MXFP8_E4M3FN), (MXFP8_ROUNDSCALE_AMAX_E5M2, MXFP8_ROUNDSCALE_AMAX_E4M3FN),
                   FP8_PERBLOCK, (FP8_GROUP_E5M2, FP8_GROUP_E4M3FN), (FP8_GROUP_AMAX_E5M2, FP8_GROUP_AMAX_E4M3FN)):
        if c.quant in family:
            factor = family[0] + 1
    return 10000000 + sort_mode * 1000000 + factor * 10000 + c.row_idx_type * 1000 + c.drop_pad * 100


def _workspace(c: _Ctx, cs_mode: int) -> int:
    f = c.f
    if cs_mode == 1:
        entries = max(f["counting_sort_filter_per_core_tokens"], f["counting_sort_last_core_tokens"]) * c.k
        pairs = _ceil_align(entries, CS_ONE_BLOCK_ELEMENT) * 2
        need = f["counting_sort_filter_need_core_num"]
        size = need * f["counting_sort_expert_count_stride"] * 4 + need * pairs * 4 + FRAMEWORK_WORKSPACE
        return size % 2 ** 32        # the tiling keeps this figure in a uint32
    counts = _align(c.end - c.start, 4) * 4
    size = c.total * 4 * 2 * 3 + f["core_num"] * SORT32_ALIGN_ELEMENT * 2 + c.total * 4 + counts
    if c.drop_pad != DROPPAD:
        size += counts
    else:
        size += f["core_num"] * 2 * 4
        if f["gather_out_use_compact_gather_out_drop_pad"]:
            size += c.expert_num * c.capacity * 4
    if c.quant >= DYNAMIC and c.quant not in NO_QUANT_TEMP:
        size += c.aiv * c.cols * 4
    return size + FRAMEWORK_WORKSPACE


def _expanded_scale_expect(c: _Ctx) -> tuple[int, tuple]:
    q, total, cols = c.quant, c.total, c.cols
    if (q == UNQUANT and c.is_scale == 1) or q in DYNAMIC_QUANTS:
        if _mxfpx_no_quant(q, c.x_dtype):
            return 3, (total, ceil_div(cols, MXFPX_SCALE_BLOCK_SIZE), 2)
        return 1, (c.expert_num * c.capacity if c.drop_pad == DROPPAD else total,)
    if q in MXFP8_QUANT:
        return 2, (total, _ceil_align(ceil_div(cols, MX_QUANT_BLOCK_SIZE), 2))
    if q == HIF8_PERTOKEN:
        return 1, (total,)
    if q in FP8_GROUP:
        return 2, (total, ceil_div(cols, FP8_BLOCK_SIZE))
    if q == MXFP4_E2M1:
        return 3, (total, ceil_div(cols, UB_BLOCK_SIZE * 2), 2)
    if q in FP8_PERBLOCK:
        return 3, (total, ceil_div(cols, FP8_BLOCK_SIZE * 2), 2)
    return -1, ()


@memoised_tiling
def moe_init_routing_v3(x, expert_idx, scale=None, offset=None, *, active_num=-1, expert_capacity=-1, expert_num=-1,
                        drop_pad_mode=0, expert_tokens_num_type=0, expert_tokens_num_flag=False, quant_mode=-1,
                        active_expert_range=(), row_idx_type=0, expanded_x_out=None, expanded_row_idx_out=None,
                        expert_tokens_count_or_cumsum_out=None, expanded_scale_out=None,
                        soc="ascend950") -> TilingResult:
    """Host tiling of MoeInitRoutingV3 on the 950 (arch35) for one chip profile.

    x (n, cols) and expert_idx (n, k) int32; scale / offset optional. Attributes and their defaults are the
    OpDef's (active_expert_range is a [start, end) pair of expert ids). The outputs default to the shapes and
    dtypes the tiling expects; give them to reproduce its output checks. Raises TilingError (561002) with the
    argument and rule wherever the real tiling returns GRAPH_FAILED, in the same order. `ub_plan` holds the
    phases ub_plan() models (empty-tensor zeroing, sort, expert-token count, drop-pad gather, MX gathers) for
    core 0.
    """
    soc = get_soc(soc)
    if not soc.is_regbase:
        _fail(f"this function models the arch35 (Ascend 950, npu_arch 3510) tiling only; profile {soc.name} has "
              f"npu_arch {soc.npu_arch}, whose MoeInitRoutingV3 tiling is another one")
    c = _Ctx()
    c.f = f = struct_fields(FIELDS)
    c.aiv = soc.aiv_num
    f["core_num"] = c.aiv
    total_ub = soc.ub_size_for_tiling
    c.avail_ub = total_ub - SIMT_DCACHE_SIZE
    if total_ub <= 0 or c.avail_ub <= 0:
        _fail(f"UB of {total_ub} bytes leaves nothing after the {SIMT_DCACHE_SIZE}-byte SIMT data cache")

    xd, idxd = _desc(x, "x"), _desc(expert_idx, "expert_idx")
    if xd is None or idxd is None:
        _fail("x and expert_idx are required")
    sd, od = _desc(scale, "scale"), _desc(offset, "offset")
    c.x_dtype = xd[1]
    c.x_size = _SIZE[c.x_dtype]
    c.is_scale = int(sd is not None)
    c.scale_size = _SIZE[sd[1]] if sd else 0
    f.update(is_input_scale=c.is_scale, is_input_offset=int(od is not None))

    attrs = dict(active_num=active_num, expert_capacity=expert_capacity, expert_num=expert_num,
                 drop_pad_mode=drop_pad_mode, expert_tokens_num_type=expert_tokens_num_type, quant_mode=quant_mode,
                 row_idx_type=row_idx_type)
    for name, v in attrs.items():
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            _fail(f"attr {name} must be an int, got {v!r}")
    if not isinstance(expert_tokens_num_flag, (bool, np.bool_)):
        _fail(f"attr expert_tokens_num_flag must be a bool, got {expert_tokens_num_flag!r}")
    rng = list(active_expert_range) if isinstance(active_expert_range, (list, tuple)) else None
    if rng is None or len(rng) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                                for v in rng):
        _fail(f"attr active_expert_range must hold 2 ints [expert_start, expert_end], got {active_expert_range!r}")
    c.start, c.end = int(rng[0]), int(rng[1])
    c.expert_num, c.capacity, c.drop_pad = int(expert_num), int(expert_capacity), int(drop_pad_mode)
    c.tokens_type, c.quant, c.row_idx_type = int(expert_tokens_num_type), int(quant_mode), int(row_idx_type)

    # CheckSetAttrs
    if c.tokens_type not in (CUMSUM, COUNT, KEY_VALUE):
        _fail(f"attr expert_tokens_num_type is {c.tokens_type}; it must be 0 (cumsum), 1 (count) or 2 (key-value)")
    if c.drop_pad == DROPPAD and c.tokens_type != COUNT:
        _fail(f"attr expert_tokens_num_type is {c.tokens_type}; it must be 1 (count) when drop_pad_mode is 1")
    f["expert_tokens_num_type"] = c.tokens_type
    max_experts = KV_MODE_EXPERT_IDX_MAX if c.tokens_type == KEY_VALUE else EXPERT_IDX_MAX
    if not 0 < c.expert_num <= max_experts:
        _fail(f"attr expert_num is {c.expert_num}; it must be in [1, {max_experts}]")
    f["expert_num"] = c.expert_num
    if c.drop_pad not in (DROPLESS, DROPPAD):
        _fail(f"attr drop_pad_mode is {c.drop_pad}; it must be 0 or 1")
    f["drop_pad_mode"] = c.drop_pad
    if c.drop_pad == DROPPAD and c.capacity <= 0:
        _fail(f"attr expert_capacity is {c.capacity}; it must be greater than 0 when drop_pad_mode is 1")
    f["expert_capacity"] = c.capacity
    if not expert_tokens_num_flag:
        _fail("attr expert_tokens_num_flag is False; it must be True")
    f["expert_tokens_num_flag"] = 1
    if c.drop_pad == DROPPAD and c.quant != UNQUANT:
        _fail(f"attr quant_mode is {c.quant}; it must be -1 when drop_pad_mode is 1")
    if c.quant not in QUANT_MODES:
        _fail(f"attr quant_mode is {c.quant}; it must be one of {', '.join(map(str, QUANT_MODES))}")
    f["quant_mode"] = c.quant
    if c.drop_pad == DROPPAD and c.row_idx_type != ROW_IDX_GATHER:
        _fail(f"attr row_idx_type is {c.row_idx_type}; it must be 0 (gather) when drop_pad_mode is 1")
    if c.row_idx_type not in (ROW_IDX_GATHER, ROW_IDX_SCATTER):
        _fail(f"attr row_idx_type is {c.row_idx_type}; it must be 0 or 1")
    f["row_idx_type"] = c.row_idx_type

    # CheckSetListAttrs
    if c.start < 0:
        _fail(f"active_expert_range start is {c.start}; it must be >= 0")
    if c.start >= c.end:
        _fail(f"active_expert_range [{c.start}, {c.end}]: expert_start must be less than expert_end")
    if c.end > c.expert_num:
        _fail(f"active_expert_range end is {c.end}; it must be <= expert_num ({c.expert_num})")
    if c.drop_pad == DROPPAD and (c.start != 0 or c.end != c.expert_num):
        _fail(f"active_expert_range is [{c.start}, {c.end}]; it must be [0, {c.expert_num}] when drop_pad_mode is 1")
    f.update(expert_start=c.start, expert_end=c.end, actual_expert_num=c.end - c.start)

    _check_inputs(c, xd, idxd, sd, od)

    # CheckSetEmptyTensor
    empty = c.n == 0 or c.k == 0 or c.cols == 0
    if not empty and active_num != -1 and active_num != c.total:
        _fail(f"attr active_num is {active_num}; it must be -1 or n * k ({c.total})")
    f["active_num"] = c.total

    _check_outputs(c, expanded_x_out, expanded_row_idx_out, expert_tokens_count_or_cumsum_out, expanded_scale_out)

    if empty:
        # the empty-tensor branch zeroes expert_tokens_count_or_cumsum from one TBuf
        count = c.expert_num * 2 if c.tokens_type == KEY_VALUE else c.end - c.start
        plan = (UbBuffer("zeroBuf", _align_bytes(count, 8), pipe="pipe"),)
        return TilingResult(EMPTY_TENSOR_TILINGKEY, 1, FRAMEWORK_WORKSPACE, f, plan, 1, soc)

    c.sort_loop_max = min(tdiv(c.avail_ub, 4 * 2 * 4) // SORT32_ALIGN_ELEMENT * SORT32_ALIGN_ELEMENT,
                          SORT_API_MAX_ELEM)
    sort_mode = _vbs(c)
    f["vms_middle_need_core_num"] = 0 if f["vbs_need_core_num"] <= 4 else ceil_div(f["vbs_need_core_num"], 4)
    f["sort_out_one_loop_max_elements"] = MRG_SORT_API_MAX_ELEM
    _expert_tokens_count(c)
    full_load = _is_full_load(c)
    cs_mode = 0 if full_load else _counting_sort(c)
    if c.drop_pad != DROPPAD and (c.quant in MXFP8_QUANT + FP8_GROUP or _mxfp8_no_quant(c.quant, c.x_dtype)):
        # gathering pays off with many active (expert, k) pairs per expert; the op's threshold is 3
        f["use_gather_copy"] = int((c.end - c.start) * c.k > c.expert_num * 3)
    if c.quant in MX_QUANT:
        _gather_out_quant(c, MX_QUANT_BLOCK_SIZE, _mx_max_idx(c))
    elif c.quant in FP8_PERBLOCK + FP8_GROUP:
        _gather_out_quant(c, FP8_BLOCK_SIZE, _fp8_max_idx(c, c.quant in FP8_GROUP))
    elif c.drop_pad == DROPPAD and not full_load:
        _src_to_dst_drop_pad(c)
        _gather_out_drop_pad(c)
    elif _mxfp8_no_quant(c.quant, c.x_dtype):
        _gather_out_mxfp8_no_quant(c)
    else:
        _gather_out(c)
    key = _tiling_key(c, full_load, cs_mode, sort_mode)
    plan = ub_plan(f, key, x_bytes=c.x_size, mx_no_quant=_mxfpx_no_quant(c.quant, c.x_dtype))
    return TilingResult(key, c.aiv, _workspace(c, cs_mode), f, plan, 1, soc)


def ub_plan(f: dict, key: int, block_idx: int = 0, x_bytes: int = 0, mx_no_quant: bool = False
            ) -> tuple[UbBuffer, ...]:
    """InitBuffer calls of core `block_idx` for the phases modelled so far: the one-core or multi-core sort
    (sortPipe; the VMS and SortOut merges reuse its buffers) and the expert-token count (histogramPipe) of the
    sort templates, the drop-pad gather, the unquantised dropless gather MoeGatherOut and the MXFP8 / MXFP4
    quantising gathers of the dropless sort templates (gatherPipe; `x_bytes` is x's element size; `mx_no_quant`:
    x holds MX elements, whose gathers are other kernels). RowIdxGather builds no TPipe. The drop-pad row-index
    gather, the other quantising gathers, the full-load and counting-sort templates are not listed yet (their
    pipes are absent, not empty).

    The gathers size their row buffers from the expert total count the sort finds at run time
    (min(per-loop figure, the core's rows)); this plan assumes every slot is active (count n * k), the largest
    the buffers get."""
    if key >= 10000000 and (key // 1000000) % 10 == 0:
        # MoeSortOneCore::Init: keys and row ids side by side (two int32 per key) in each buffer
        tile = _align(f["vbs_last_core_per_loop_elements"], 4)
        nbytes = ceil_div(tile, SORT32_ALIGN_ELEMENT) * SORT32_ALIGN_ELEMENT * 4 * 2
        plan = (UbBuffer("sortDataCopyInQueue", nbytes, 1, "TQue", "VECIN", 1, "sortPipe"),
                UbBuffer("sortDataCopyOutQueue", nbytes, 1, "TQue", "VECOUT", 1, "sortPipe"),
                UbBuffer("tempBuffer", nbytes, pipe="sortPipe"), UbBuffer("sortedBuffer", nbytes, pipe="sortPipe"))
    elif key >= 10000000:
        # MoeSortMultiCore::Init: room for this core's loop of keys or the four SortOut windows, 2 int32 a key
        last = block_idx == f["vbs_need_core_num"] - 1
        loop = f["vbs_last_core_per_loop_elements"] if last else f["vbs_per_core_per_loop_elements"]
        nbytes = ceil_div(max(f["sort_out_one_loop_max_elements"] * 4, loop), SORT32_ALIGN_ELEMENT) \
            * SORT32_ALIGN_ELEMENT * 4 * 2
        plan = (UbBuffer("sortDataCopyInQueue", nbytes, 1, "TQue", "VECIN", 1, "sortPipe"),
                UbBuffer("sortDataCopyOutQueue", nbytes, 1, "TQue", "VECOUT", 1, "sortPipe"),
                UbBuffer("sortedBuffer", nbytes, pipe="sortPipe"), UbBuffer("tempBuffer", nbytes, pipe="sortPipe"))
    else:
        return ()
    p = "expert_tokens_count_"
    who = "last_core" if block_idx == f[p + "need_core_num"] - 1 else "per_core"
    in_len = max(f[f"{p}{who}_per_loop_elements"], f[f"{p}{who}_last_loop_elements"])
    actual = f["actual_expert_num"]
    if f["expert_tokens_num_type"] == KEY_VALUE:
        counts = (actual + 1) * 2 if actual + 1 < f["expert_num"] else f["expert_num"] * 2
    else:
        counts = actual
    pipe = "histogramPipe"
    plan += (UbBuffer("sortedExpertIdxInQueue", _align_bytes(in_len, 4), 1, "TQue", "VECIN", 1, pipe),
             UbBuffer("expertCountOutToTempQueue", _align_bytes(actual, 4), 1, "TQue", "VECOUT", 1, pipe),
             UbBuffer("expertCountTempInQueue", _align_bytes(actual, 4), 1, "TQue", "VECIN", 1, pipe),
             UbBuffer("expertIdxCountOutQueue", _align_bytes(counts, 8), 1, "TQue", "VECOUT", 1, pipe))
    if f["drop_pad_mode"] != DROPPAD:
        # only dropless runs hand the total count to the gather kernels
        plan += (UbBuffer("expertTotalCountQueue", _align_bytes(1, 4), 1, "TQue", "VECOUT", 1, pipe),)
    mx_factor = (key // 10000) % 100
    if key >= 10000000 and f["drop_pad_mode"] != DROPPAD and mx_factor in (MXFP8_E5M2 + 1, MXFP8_ROUNDSCALE_AMAX_E5M2 + 1,
                                                                          MXFP4_E2M1 + 1):
        plan += _mx_gather_plan(f, mx_factor == MXFP4_E2M1 + 1, x_bytes)
    if f["drop_pad_mode"] == DROPPAD:
        # MoeV3GatherOutDropPad::Init: indices (or, compact, output-row sources) and x rows double-buffered
        g = "gather_out_"
        who = "last_core" if block_idx == f[g + "need_core_num"] - 1 else "per_core"
        pipe = "gatherPipe"
        plan += (UbBuffer("expandedRowIdxCopyInQueue", _align_bytes(f[f"{g}{who}_per_loop_indices_elements"], 4), 2,
                          "TQue", "VECIN", 2, pipe),)
        if f["is_input_scale"] == 1:
            plan += (UbBuffer("scaleCopyInQueue", _align_bytes(1, 4), 2, "TQue", "VECIN", 2, pipe),)
        bufs = max(f[g + "x_copy_in_queue_buffer_num"], 2)
        plan += (UbBuffer("xCopyInQueue", _align_bytes(f[g + "per_loop_cols"], x_bytes), bufs, "TQue", "VECIN", bufs,
                          pipe),)
    elif (key // 10000) % 100 == 0 and not mx_no_quant:
        # MoeGatherOut::Init: the loop's sorted row ids, its x rows (TQueBind) and one float scale per row, each
        # double-buffered at least; a core's rows come from the total count: n * k here (all active)
        g = "gather_out_"
        total = f["n"] * f["k"]
        per_core = ceil_div(total, f["core_num"])
        need = ceil_div(total, per_core) if per_core else 0
        if block_idx == need - 1:
            per_loop = min(f[g + "last_core_per_loop_indices_elements"], total - (need - 1) * per_core)
        else:
            per_loop = min(f[g + "per_core_per_loop_indices_elements"], per_core)
        bufs = max(f[g + "x_copy_in_queue_buffer_num"], 2)
        pipe = "gatherPipe"
        plan += (UbBuffer("expandedRowIdxCopyInQueue", _align_bytes(per_loop, 4), 2, "TQue", "VECIN", 2, pipe),
                 UbBuffer("xCopyInQueue", per_loop * _align_bytes(f[g + "per_loop_cols"], x_bytes), bufs, "TQueBind",
                          "VECIN->VECOUT", 2, pipe),
                 UbBuffer("scaleCopyInQueue", per_loop * _align_bytes(1, 4), 2, "TQueBind", "VECIN->VECOUT", 2,
                          pipe))
    return plan


def _mx_gather_plan(f: dict, fp4: bool, x_bytes: int) -> tuple[UbBuffer, ...]:
    """MoeGatherOutMxfp8Quant::Init / MoeV3GatherMxfp4Quant::Init (gatherPipe): row indices, a token piece, its
    codes and scales (two buffers each for MXFP8, one for MXFP4), the block maxima and inverse scales. The row
    buffer is sized for perLoopRows, which the kernel takes as min(its rows, the tiling's per-loop count): the
    per-core per-loop count bounds it on every core."""
    g = "gather_out_"
    rows = max(f[g + "per_core_per_loop_indices_elements"], f[g + "last_core_per_loop_indices_elements"], 1)
    cols = f[g + "per_loop_cols"]
    scale_cols = cols // MX_QUANT_BLOCK_SIZE
    num = 1 if fp4 else 2
    pipe = "gatherPipe"
    return (UbBuffer("sortedRowIdxInQueue", _align_bytes(rows, 4), num, "TQue", "VECIN", num, pipe),
            UbBuffer("xInQueue", _align_bytes(cols, x_bytes), num, "TQue", "VECIN", num, pipe),
            UbBuffer("xQuantOutQueue", _align_bytes(cols // 4, 1) * 4, num, "TQue", "VECOUT", num, pipe),
            UbBuffer("mxScaleOutQueue", _align_bytes(scale_cols, 1), num, "TQue", "VECOUT", num, pipe),
            UbBuffer("maxExpBuffer", _align_bytes(scale_cols, x_bytes), pipe=pipe),
            UbBuffer("invScaleBuffer", _align_bytes(scale_cols, x_bytes), pipe=pipe))


def _check_inputs(c: _Ctx, xd, idxd, sd, od) -> None:
    (xs, xdt), es = xd, idxd[0]
    if len(xs) != 2:
        _fail(f"x must have rank 2, got {len(xs)} (shape {xs})")
    allowed = _x_dtypes(c.quant)
    if xdt not in allowed:
        _fail(f"dtype of x is {xdt}, unsupported under quant_mode {c.quant} (allowed: {', '.join(allowed)})")
    if len(es) != 2:
        _fail(f"expert_idx must have rank 2, got {len(es)} (shape {es})")
    if es[0] != xs[0]:
        _fail(f"expert_idx dim[0] is {es[0]}; it must equal x dim[0] ({xs[0]})")
    c.n, c.k = xs[0], es[1]
    if c.quant == STATIC:
        if sd is None:
            _fail("input scale is required when quant_mode is 0 (static)")
        _check_shape("scale", sd[0], 1, (1,))
        if sd[1] != "float32":
            _fail(f"scale must be float32 when quant_mode is 0, got {sd[1]}")
    elif sd is not None:
        ss, sdt = sd
        if c.quant == UNQUANT:
            if sdt == "float8_e8m0":
                _check_shape("scale", ss, 3, (c.n, ceil_div(xs[1], MXFPX_SCALE_BLOCK_SIZE), 2))
            else:
                _check_shape("scale", ss, 1, (c.n,))
        elif c.quant == DYNAMIC:
            _check_shape("scale", ss, 2, (c.end - c.start, xs[1]))
        elif c.quant == INT4_DYNAMIC:
            _check_shape("scale", ss, 2, (1, xs[1]))
        if _mxfpx_no_quant(c.quant, xdt):
            if sdt != "float8_e8m0":
                _fail(f"scale is {sdt}; with x of {xdt} and no quantisation it must be float8_e8m0")
        elif sdt != "float32":
            _fail(f"scale is {sdt}; it must be float32")
    if c.quant == STATIC:
        if od is None:
            _fail("input offset is required when quant_mode is 0 (static)")
        _check_shape("offset", od[0], 1, (1,))
        if od[1] != "float32":
            _fail(f"offset must be float32 when quant_mode is 0, got {od[1]}")
    c.cols = xs[1]
    c.total = c.n * c.k
    c.f.update(n=c.n, k=c.k, cols=c.cols)
    if c.quant == INT4_DYNAMIC and c.cols % 2:
        _fail(f"x has {c.cols} columns; INT4 dynamic quantisation (quant_mode 13) packs two per byte, so cols "
              "must be even")
    if c.drop_pad == DROPPAD and c.capacity > c.n:
        _fail(f"attr expert_capacity is {c.capacity}; it must be <= n ({c.n}) when drop_pad_mode is 1")


def _check_outputs(c: _Ctx, expanded_x, expanded_row_idx, tokens, expanded_scale) -> None:
    want_x_dtype = _expanded_x_dtype(c.quant, c.x_dtype)
    c.expanded_x_dtype = want_x_dtype
    ex = _desc(expanded_x, "expanded_x") or (
        ((c.expert_num, c.capacity, c.cols) if c.drop_pad == DROPPAD else (c.total, c.cols)), want_x_dtype)
    if want_x_dtype == "float4_e2m1" and ex[1] == "uint8":
        # the project's packed FP4 (two E2M1 codes a byte): the same tensor with its last dim in bytes
        _check_shape("expanded_x", ex[0], 2, (c.total, ceil_div(c.cols, 2)))
        ex = ((c.total, c.cols), want_x_dtype)
    elif c.drop_pad == DROPPAD:
        _check_shape("expanded_x", ex[0], 3, (c.expert_num, c.capacity, c.cols))
    else:
        _check_shape("expanded_x", ex[0], 2, (c.total, c.cols))
    if want_x_dtype is not None and ex[1] != want_x_dtype:
        _fail(f"expanded_x is {ex[1]}; quant_mode {c.quant} with x of {c.x_dtype} writes {want_x_dtype}")
    c.expanded_x_dtype = ex[1]
    ri = _desc(expanded_row_idx, "expanded_row_idx") or ((c.total,), "int32")
    _check_shape("expanded_row_idx", ri[0], 1, (c.total,))
    if c.tokens_type == KEY_VALUE:
        rank, dims = 2, (c.expert_num, 2)
    else:
        rank, dims = 1, (c.end - c.start,)
    tk = _desc(tokens, "expert_tokens_count_or_cumsum") or (dims, "int64")
    _check_shape("expert_tokens_count_or_cumsum", tk[0], rank, dims)
    rank, dims = _expanded_scale_expect(c)
    es = _desc(expanded_scale, "expanded_scale")
    if es is None:
        # the OpDef makes expanded_scale a required output: an unused one is a per-row float vector
        es = (dims if rank != -1 else (c.total,), "float32")
    if c.quant not in (STATIC, HIF8_CAST):
        _check_shape("expanded_scale", es[0], rank, dims)
