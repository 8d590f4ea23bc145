"""MoeInitRoutingV3 arch35 tiling: the argument checks, in the real order, each failing with TilingError (561002,
GRAPH_FAILED) naming the argument and the rule; they fill the struct's scalar fields as they go.

source: moe/moe_init_routing_v3/op_host/moe_init_routing_v3_tiling_arch35.cpp @ 25fb6b92890d, DoOpTiling (lines
503-516): CheckSetAttrs (763-881), CheckSetListAttrs (883-918), CheckSetInputs (920-1188), CheckSetEmptyTensor
(1190-1216), CheckOutputs (1218-1478)
"""
from __future__ import annotations

from ..common import align_up, ceil_div
from .base import (
    BLOCK_BYTES,
    COUNT,
    CUMSUM,
    DROPLESS,
    DROPPAD,
    DYNAMIC,
    DYNAMIC_QUANTS,
    EIGHT_BIT_QUANT,
    EXPERT_IDX_MAX,
    FP8_BLOCK_SIZE,
    FP8_GROUP,
    FP8_PERBLOCK,
    HIF8_CAST,
    HIF8_PERTOKEN,
    INT4_DYNAMIC,
    KEY_VALUE,
    KV_MODE_EXPERT_IDX_MAX,
    MX_QUANT_BLOCK_SIZE,
    MXFP4_E2M1,
    MXFP8_QUANT,
    MXFPX_SCALE_BLOCK_SIZE,
    QUANT_MODES,
    ROW_IDX_GATHER,
    ROW_IDX_SCATTER,
    STATIC,
    UNQUANT,
    Ctx,
    desc,
    dim,
    fail,
    mxfpx_no_quant,
)


def check_shape(name: str, shape: tuple, rank: int = -1, dims: tuple = ()) -> None:
    """Rank, then each expected dim (-1 = not checked), in the order the tiling checks them."""
    if rank != -1 and len(shape) != rank:
        fail(f"{name} must have rank {rank}, got {len(shape)} (shape {shape})")
    for i, want in enumerate(dims):
        if want != -1 and dim(shape, i) != want:
            fail(f"{name} dim[{i}] must be {want}, got {dim(shape, i)} (shape {shape})")


def check_set_attrs(c: Ctx, expert_tokens_num_flag: bool) -> None:
    """CheckSetAttrs (lines 862-881): ValidateExpertTokensNumType, ValidateExpertNum, ValidateDropPadMode,
    ValidateExpertCapacity, the flag, ValidateQuantMode, ValidateRowIdxType."""
    f = c.f
    if c.tokens_type not in (CUMSUM, COUNT, KEY_VALUE):
        fail(f"attr expert_tokens_num_type is {c.tokens_type}; it must be 0 (cumsum), 1 (count) or 2 (key-value)")
    if c.drop_pad == DROPPAD and c.tokens_type != COUNT:
        fail(f"attr expert_tokens_num_type is {c.tokens_type}; it must be 1 (count) when drop_pad_mode is 1")
    f["expert_tokens_num_type"] = c.tokens_type
    max_experts = KV_MODE_EXPERT_IDX_MAX if c.tokens_type == KEY_VALUE else EXPERT_IDX_MAX
    if not 0 < c.expert_num <= max_experts:
        fail(f"attr expert_num is {c.expert_num}; it must be in [1, {max_experts}]")
    f["expert_num"] = c.expert_num
    if c.drop_pad not in (DROPLESS, DROPPAD):
        fail(f"attr drop_pad_mode is {c.drop_pad}; it must be 0 or 1")
    f["drop_pad_mode"] = c.drop_pad
    if c.drop_pad == DROPPAD and c.capacity <= 0:
        fail(f"attr expert_capacity is {c.capacity}; it must be greater than 0 when drop_pad_mode is 1")
    f["expert_capacity"] = c.capacity
    if not expert_tokens_num_flag:
        fail("attr expert_tokens_num_flag is False; it must be True")
    f["expert_tokens_num_flag"] = 1
    if c.drop_pad == DROPPAD and c.quant != UNQUANT:
        fail(f"attr quant_mode is {c.quant}; it must be -1 when drop_pad_mode is 1")
    if c.quant not in QUANT_MODES:
        fail(f"attr quant_mode is {c.quant}; it must be one of {', '.join(map(str, QUANT_MODES))}")
    f["quant_mode"] = c.quant
    if c.drop_pad == DROPPAD and c.row_idx_type != ROW_IDX_GATHER:
        fail(f"attr row_idx_type is {c.row_idx_type}; it must be 0 (gather) when drop_pad_mode is 1")
    if c.row_idx_type not in (ROW_IDX_GATHER, ROW_IDX_SCATTER):
        fail(f"attr row_idx_type is {c.row_idx_type}; it must be 0 or 1")
    f["row_idx_type"] = c.row_idx_type


def check_set_list_attrs(c: Ctx) -> None:
    """CheckSetListAttrs (lines 883-918): the active expert range."""
    if c.start < 0:
        fail(f"active_expert_range start is {c.start}; it must be >= 0")
    if c.start >= c.end:
        fail(f"active_expert_range [{c.start}, {c.end}]: expert_start must be less than expert_end")
    if c.end > c.expert_num:
        fail(f"active_expert_range end is {c.end}; it must be <= expert_num ({c.expert_num})")
    if c.drop_pad == DROPPAD and (c.start != 0 or c.end != c.expert_num):
        fail(f"active_expert_range is [{c.start}, {c.end}]; it must be [0, {c.expert_num}] when drop_pad_mode is 1")
    c.f.update(expert_start=c.start, expert_end=c.end, actual_expert_num=c.end - c.start)


def x_dtypes(quant_mode: int) -> tuple:
    """CheckInputX's supported dtypes of x under a quant mode (lines 933-966)."""
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


def check_set_inputs(c: Ctx, xd, idxd, sd, od) -> None:
    """CheckSetInputs (lines 1149-1188): CheckInputX, CheckInputExpertIdx, CheckInputScale, CheckInputOffset, then
    n / k / cols, INT4's even cols and the drop-pad capacity."""
    (xs, xdt), es = xd, idxd[0]
    if len(xs) != 2:
        fail(f"x must have rank 2, got {len(xs)} (shape {xs})")
    allowed = x_dtypes(c.quant)
    if xdt not in allowed:
        fail(f"dtype of x is {xdt}, unsupported under quant_mode {c.quant} (allowed: {', '.join(allowed)})")
    if len(es) != 2:
        fail(f"expert_idx must have rank 2, got {len(es)} (shape {es})")
    if es[0] != xs[0]:
        fail(f"expert_idx dim[0] is {es[0]}; it must equal x dim[0] ({xs[0]})")
    n = xs[0]
    if c.quant == STATIC:                # CheckStaticQuantScale
        if sd is None:
            fail("input scale is required when quant_mode is 0 (static)")
        check_shape("scale", sd[0], 1, (1,))
        if sd[1] != "float32":
            fail(f"scale must be float32 when quant_mode is 0, got {sd[1]}")
    elif sd is not None:
        ss, sdt = sd
        # GetExpectedInputScaleShape, CheckInputScaleShape
        if c.quant == UNQUANT:
            if sdt == "float8_e8m0":
                check_shape("scale", ss, 3, (n, ceil_div(xs[1], MXFPX_SCALE_BLOCK_SIZE), 2))
            else:
                check_shape("scale", ss, 1, (n,))
        elif c.quant == DYNAMIC:
            check_shape("scale", ss, 2, (c.end - c.start, xs[1]))
        elif c.quant == INT4_DYNAMIC:
            check_shape("scale", ss, 2, (1, xs[1]))
        # CheckInputScaleDtype
        if mxfpx_no_quant(c.quant, xdt):
            if sdt != "float8_e8m0":
                fail(f"scale is {sdt}; with x of {xdt} and no quantisation it must be float8_e8m0")
        elif sdt != "float32":
            fail(f"scale is {sdt}; it must be float32")
    if c.quant == STATIC:                # CheckInputOffset
        if od is None:
            fail("input offset is required when quant_mode is 0 (static)")
        check_shape("offset", od[0], 1, (1,))
        if od[1] != "float32":
            fail(f"offset must be float32 when quant_mode is 0, got {od[1]}")
    c.n, c.k, c.cols = n, es[1], xs[1]
    c.total = c.n * c.k
    c.f.update(n=c.n, k=c.k, cols=c.cols)
    if c.quant == INT4_DYNAMIC and c.cols % 2:
        fail(f"x has {c.cols} columns; INT4 dynamic quantisation (quant_mode 13) packs two per byte, so cols "
             "must be even")
    if c.drop_pad == DROPPAD and c.capacity > c.n:
        fail(f"attr expert_capacity is {c.capacity}; it must be <= n ({c.n}) when drop_pad_mode is 1")


def check_set_empty_tensor(c: Ctx, active_num: int) -> bool:
    """CheckSetEmptyTensor (lines 1190-1216): whether n, k or cols is 0; active_num (when not -1) must be n * k
    outside the empty case; activeNum = n * k always."""
    empty = c.n == 0 or c.k == 0 or c.cols == 0
    if not empty and active_num != -1 and active_num != c.total:
        fail(f"attr active_num is {active_num}; it must be -1 or n * k ({c.total})")
    c.f["active_num"] = c.total
    return empty


def expanded_x_dtype(quant_mode: int, x_dtype: str) -> str | None:
    """The dtype expanded_x has under a quant mode (the OpDef's pairs; the default output dtype here)."""
    if quant_mode == UNQUANT:
        return x_dtype
    if quant_mode in (STATIC, DYNAMIC):
        return "int8"
    if quant_mode in (2, 4, 11, 14, 16):
        return "float8_e5m2"
    if quant_mode in (3, 5, 12, 15, 17):
        return "float8_e4m3fn"
    if quant_mode in (HIF8_CAST, 7, HIF8_PERTOKEN):
        return "hifloat8"
    if quant_mode == MXFP4_E2M1:
        return "float4_e2m1"
    if quant_mode == INT4_DYNAMIC:
        return "int4"
    return None


def expanded_scale_expect(c: Ctx) -> tuple[int, tuple]:
    """CalculateExpectedScaleShape (lines 1377-1415): (rank, dims) of expanded_scale, rank -1 = not checked."""
    q, total, cols = c.quant, c.total, c.cols
    if (q == UNQUANT and c.is_scale == 1) or q in DYNAMIC_QUANTS:
        if mxfpx_no_quant(q, c.x_dtype):
            return 3, (total, ceil_div(cols, MXFPX_SCALE_BLOCK_SIZE), 2)
        return 1, (c.expert_num * c.capacity if c.drop_pad == DROPPAD else total,)
    if q in MXFP8_QUANT:
        return 2, (total, align_up(ceil_div(cols, MX_QUANT_BLOCK_SIZE), 2))
    if q == HIF8_PERTOKEN:
        return 1, (total,)
    if q in FP8_GROUP:
        return 2, (total, ceil_div(cols, FP8_BLOCK_SIZE))
    if q == MXFP4_E2M1:
        return 3, (total, ceil_div(cols, BLOCK_BYTES * 2), 2)
    if q in FP8_PERBLOCK:
        return 3, (total, ceil_div(cols, FP8_BLOCK_SIZE * 2), 2)
    return -1, ()


def check_outputs(c: Ctx, expanded_x, expanded_row_idx, tokens, expanded_scale) -> None:
    """CheckOutputs (lines 1468-1478): expanded_x's shape then ValidateExpandedXDtype, expanded_row_idx,
    expert_tokens_count_or_cumsum, expanded_scale. Outputs not given take the shapes and dtypes the tiling
    expects. An MXFP4 expanded_x may be the project's packed uint8 array (last dim ceil(cols / 2) bytes)."""
    want_x_dtype = expanded_x_dtype(c.quant, c.x_dtype)
    ex = desc(expanded_x, "expanded_x") or (
        ((c.expert_num, c.capacity, c.cols) if c.drop_pad == DROPPAD else (c.total, c.cols)), want_x_dtype)
    if want_x_dtype == "float4_e2m1" and ex[1] == "uint8":
        # the project's packed FP4 (two E2M1 codes a byte): the same tensor with its last dim in bytes
        check_shape("expanded_x", ex[0], 2, (c.total, ceil_div(c.cols, 2)))
    elif c.drop_pad == DROPPAD:
        check_shape("expanded_x", ex[0], 3, (c.expert_num, c.capacity, c.cols))
    else:
        check_shape("expanded_x", ex[0], 2, (c.total, c.cols))
    # ValidateExpandedXDtype (lines 1268-1302): only the int8 / int4 quantisations look at expanded_x's dtype
    if c.quant in (STATIC, DYNAMIC) and ex[1] != "int8":
        fail(f"expanded_x is {ex[1]}; quant_mode {c.quant} writes int8")
    if c.quant == INT4_DYNAMIC:
        if ex[1] != "int4":
            fail(f"expanded_x is {ex[1]}; INT4 dynamic quantisation (quant_mode 13) writes int4")
        if c.x_dtype not in ("float32", "bfloat16"):
            fail(f"x is {c.x_dtype}; INT4 dynamic quantisation (quant_mode 13) takes float32 or bfloat16 x")
    ri = desc(expanded_row_idx, "expanded_row_idx") or ((c.total,), "int32")
    check_shape("expanded_row_idx", ri[0], 1, (c.total,))
    dims: tuple[int, ...]
    if c.tokens_type == KEY_VALUE:
        rank, dims = 2, (c.expert_num, 2)
    else:
        rank, dims = 1, (c.end - c.start,)
    tk = desc(tokens, "expert_tokens_count_or_cumsum") or (dims, "int64")
    check_shape("expert_tokens_count_or_cumsum", tk[0], rank, dims)
    rank, dims = expanded_scale_expect(c)
    es = desc(expanded_scale, "expanded_scale")
    if es is None:
        # the OpDef makes expanded_scale a required output: an unused one is a per-row float vector
        es = (dims if rank != -1 else (c.total,), "float32")
    if c.quant not in (STATIC, HIF8_CAST):
        check_shape("expanded_scale", es[0], rank, dims)
