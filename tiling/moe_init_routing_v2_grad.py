"""Tiling of MoeInitRoutingV2Grad on Ascend 950 (the arch35 templates).

source: moe/moe_init_routing_v2_grad/op_host/moe_init_routing_v2_grad_tiling_base.cpp (checks, workspace, TilingParse),
moe_init_routing_v2_grad_split_h_tiling_arch35.cpp, moe_init_routing_v2_grad_full_load_tiling_arch35.cpp,
moe_init_routing_v2_grad_tiling_arch35.cpp and the structs of moe_init_routing_v2_grad_tiling.h @ 25fb6b92890d
(the last struct member of each is numBlocks, here num_blocks).

The registry tries the templates by priority; the first whose IsCapable holds and whose DoOpTiling succeeds wins:

    20000 split-H    topK <= 64, N < cores and N < H / 512 / typeSize: the cores split H      keys 20000x
    30000 full-load  the cores split N; refused (next template) when (2 topK + 1) rows of H
                     do not fit the UB and topK > 10                                        keys 30000x
    40000 regbase    the cores split N, kUbFactor slots per pass summed into an fp32 buffer  keys 40000x

    x = 1 dropless (dropPadMode 0, activeNum 0), 2 drop-pad (dropPadMode 1), 3 active (activeNum > 0)

N = len(expanded_row_idx) // topK; H = dim 1 of grad_expanded_x (dim 2 with drop-pad); typeSize 2 for fp16 / bf16,
4 for fp32; the UB the templates size from is GetCoreMemSize(UB) (soc.ub_size_for_tiling), the block 32 bytes, a
vector register 64 fp32 lanes. The workspace is always 16 MiB (no template uses it). aclnnMoeTokenPermuteGrad on
950 calls this with dropPadMode 0 and activeNum = rows of the gradient: the active keys 200003 / 300003 / 400003.
"""
from __future__ import annotations

from typing import NoReturn

import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import BLOCK_BYTES, TensorDesc, TilingResult, align_up, ceil_div, memoised_tiling, struct_fields
from .platform import get_soc
from .status import TilingError

OP = "MoeInitRoutingV2Grad"

SPLIT_H_FIELDS = ("n", "k_ub_factor", "k", "active_num", "h", "h_block_factor", "h_ub_factor", "num_blocks")
FULL_LOAD_FIELDS = ("n", "n_block_factor", "n_ub_factor", "k", "active_num", "h", "h_ub_factor", "num_blocks")
REGBASE_FIELDS = ("n", "n_block_factor", "n_ub_factor", "k", "k_ub_factor", "active_num", "h", "h_ub_factor",
                  "num_blocks")
FIELDS_BY_TEMPLATE = {200000: SPLIT_H_FIELDS, 300000: FULL_LOAD_FIELDS, 400000: REGBASE_FIELDS}

KEY_SPLIT_H, KEY_FULL_LOAD, KEY_REGBASE = 200000, 300000, 400000
MODE_DROPLESS, MODE_DROP_PAD, MODE_ACTIVE = 1, 2, 3

WORKSPACE_BYTES = 16 * 1024 * 1024
REG_F32_LANES = 256 // 4         # GetVRegSize / sizeof(float)
DOUBLE_BUFFER = 2
FP32_SIZE = 4
UINT16_MAX = 65535
SPLIT_H_MAX_TOPK = 64            # MIN_SPLIT_H_TOPK_THRESHOLD
SPLIT_H_CACHE_LINE = 512         # MAX_CACHE_LINE_SIZE
FULL_LOAD_MAX_TOPK = 10          # MAX_FULL_LOAD_CNT

_FLOATS = ("float16", "bfloat16", "float32")


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def _floor_align(x: int, a: int) -> int:
    return x // a * a


def _shape_attrs(xd, rd, gd, top_k: int, drop_pad: int, active: int):
    """GetShapeAttrsInfo: dtype, attribute and shape checks in the source's order; returns (N, H)."""
    for name, t in (("grad_expanded_x", xd), ("expanded_row_idx", rd), ("grad_x", gd)):
        if t is None:
            _fail(f"{name} is required")
    in_dt, out_dt = np.dtype(xd.dtype), np.dtype(gd.dtype)
    if in_dt != out_dt:
        _fail(f"grad_x dtype ({out_dt}) must equal grad_expanded_x dtype ({in_dt})")
    if np.dtype(rd.dtype) != np.dtype(np.int32):
        _fail(f"expanded_row_idx must be int32, got {np.dtype(rd.dtype)}")
    if in_dt.name not in _FLOATS:
        _fail(f"grad_expanded_x must be float32, float16 or bfloat16, got {in_dt}")
    # CheckParamsValidity
    if drop_pad not in (0, 1):
        _fail(f"drop_pad_mode should be 0 or 1, got {drop_pad}")
    if top_k <= 0:
        _fail(f"top_k must be greater than 0, got {top_k}")
    if active < 0:
        _fail(f"active_num must be >= 0, got {active}")
    if xd.ndim not in (2, 3):
        _fail(f"grad_expanded_x should be 2-D or 3-D, got shape {xd.shape}")
    if drop_pad == 1 and xd.ndim != 3:
        _fail(f"grad_expanded_x should be 3-D (E, C, H) with drop_pad_mode 1, got shape {xd.shape}")
    if rd.ndim < 1:
        _fail(f"expanded_row_idx needs a dim 0, got shape {rd.shape}")
    bsk = rd.dim(0)
    if drop_pad == 0:
        if active == 0 and xd.dim(0) != bsk:
            _fail(f"dim 0 of grad_expanded_x ({xd.dim(0)}) and expanded_row_idx ({bsk}) should be equal in the "
                  "dropless mode")
        if active > 0 and xd.dim(0) != active:
            _fail(f"dim 0 of grad_expanded_x ({xd.dim(0)}) should equal active_num ({active})")
    if gd.ndim != 2:
        _fail(f"grad_x should be 2-D, got shape {gd.shape}")
    hidden = xd.dim(1) if drop_pad == 0 else xd.dim(2)
    if gd.dim(1) != hidden:
        _fail(f"dim 1 of grad_x ({gd.dim(1)}) should equal the hidden size {hidden}")
    if gd.dim(0) != int(bsk / top_k):       # C++ int64 division (truncates)
        _fail(f"dim 0 of grad_x ({gd.dim(0)}) should equal len(expanded_row_idx) // top_k = {int(bsk / top_k)}")
    # CheckShapeValidity
    for name, t in (("expanded_row_idx", rd), ("grad_x", gd)):
        if any(d <= 0 for d in t.shape):
            _fail(f"every dim of {name} must be positive, got shape {t.shape}")
    if drop_pad == 0 and active == 0:
        if any(d <= 0 for d in xd.shape):
            _fail(f"every dim of grad_expanded_x must be positive, got shape {xd.shape}")
    elif any(d < 0 for d in xd.shape):
        _fail(f"no dim of grad_expanded_x may be negative, got shape {xd.shape}")
    if bsk % top_k:
        _fail(f"len(expanded_row_idx) ({bsk}) must be a multiple of top_k ({top_k})")
    return bsk // top_k, hidden


def _split_h(n, h, k, ts, aiv, ub):
    """MoeInitRoutingV2GradRegbaseSplitH: None when not capable, else (fields, block_dim)."""
    if not (k <= SPLIT_H_MAX_TOPK and n < aiv and n < h // SPLIT_H_CACHE_LINE // ts):
        return None
    h_block = ceil_div(h, aiv)
    block_dim = ceil_div(h, h_block)
    rows_one_token = (k * DOUBLE_BUFFER + 1) * ts
    h_block_align = align_up(h_block * ts, BLOCK_BYTES) // ts
    if rows_one_token * h_block_align <= ub:
        k_ub, h_ub = ub // (rows_one_token * h_block_align), h_block
    else:
        k_ub, h_ub = 1, _floor_align(ub // rows_one_token * ts, BLOCK_BYTES) // ts
    return dict(k_ub_factor=k_ub, h_block_factor=h_block, h_ub_factor=h_ub), block_dim


def _full_load(n, h, k, ts, aiv, ub):
    """MoeInitRoutingV2GradRegbaseFullLoad: None when DoOpTiling refuses (GRAPH_PARAM_INVALID)."""
    n_block = ceil_div(n, aiv)
    block_dim = ceil_div(n, n_block)
    h_align = align_up(h * ts, BLOCK_BYTES) // ts
    rows_one_token = (k * DOUBLE_BUFFER + 1) * ts
    if rows_one_token * h_align <= ub:
        tokens = ub // (rows_one_token * h_align)
        n_ub, h_ub = min(tokens, UINT16_MAX), min(h_align, UINT16_MAX * REG_F32_LANES)
    else:
        if k > FULL_LOAD_MAX_TOPK:
            return None
        piece = _floor_align(ub // rows_one_token * ts, BLOCK_BYTES) // ts
        n_ub, h_ub = 1, min(piece, UINT16_MAX * REG_F32_LANES)
    return dict(n_block_factor=n_block, n_ub_factor=n_ub, h_ub_factor=h_ub), block_dim


def _regbase(n, h, k, ts, aiv, ub):
    """MoeInitRoutingV2GradRegbase: the catch-all template."""
    n_block = ceil_div(n, aiv)
    block_dim = ceil_div(n, n_block)
    h_align = align_up(h * ts, BLOCK_BYTES) // ts
    rows_one_k = DOUBLE_BUFFER * ts
    rows_one_token = ts + FP32_SIZE
    if (rows_one_k + rows_one_token) * h_align <= ub:
        k_in_ub = (ub - rows_one_token * h_align) // (rows_one_k * h_align)
        h_ub, k_ub = min(h_align, UINT16_MAX * REG_F32_LANES), min(k_in_ub, UINT16_MAX)
    else:
        piece = _floor_align(ub // (rows_one_k + rows_one_token) * ts, BLOCK_BYTES) // ts
        h_ub, k_ub = min(piece, UINT16_MAX * REG_F32_LANES), 1
    return dict(n_block_factor=n_block, n_ub_factor=1, k_ub_factor=k_ub, h_ub_factor=h_ub), block_dim


def ub_plan(template: int, f: dict, ts: int) -> tuple[UbBuffer, ...]:
    """The InitBuffer calls of the template's Init (bytes as the kernel computes them)."""
    if template == KEY_SPLIT_H:
        h_bytes = align_up(f["h_ub_factor"] * ts, BLOCK_BYTES)
        return (UbBuffer("inputQueue", f["k_ub_factor"] * f["k"] * h_bytes, 2, "TQue", "VECIN", 2),
                UbBuffer("outputQueue", f["k_ub_factor"] * h_bytes, 1, "TQue", "VECOUT", 1))
    if template == KEY_FULL_LOAD:
        row = f["n_ub_factor"] * f["h_ub_factor"] * ts
        return (UbBuffer("inputQueue", row * f["k"], 2, "TQue", "VECIN", 2),
                UbBuffer("outputQueue", row, 1, "TQue", "VECOUT", 1))
    row = f["n_ub_factor"] * f["h_ub_factor"]
    return (UbBuffer("inputQueue", row * f["k_ub_factor"] * ts, 2, "TQue", "VECIN", 2),
            UbBuffer("outputQueue", row * ts, 1, "TQue", "VECOUT", 1),
            UbBuffer("binaryAddBuf", row * FP32_SIZE))


@memoised_tiling
def moe_init_routing_v2_grad(grad_expanded_x, expanded_row_idx, top_k, drop_pad_mode=0, active_num=0, *,
                             grad_x_out=None, soc="ascend950") -> TilingResult:
    """Host tiling of MoeInitRoutingV2Grad (arch35; Ascend 950 profiles only).

    grad_expanded_x (R, H) or (E, C, H) with drop-pad, fp16 / bf16 / fp32; expanded_row_idx (N * topK,) int32;
    grad_x_out (N, H) in the gradient's dtype (default: that shape). Attributes in OpDef order. Raises TilingError
    (561002) exactly where the real tiling returns GRAPH_FAILED. Sizes in elements, the workspace in bytes."""
    soc = get_soc(soc)
    if not soc.is_regbase:
        _fail(f"only the Ascend 950 (arch35) templates are modelled, not {soc.name}'s")
    xd, rd = TensorDesc.of(grad_expanded_x), TensorDesc.of(expanded_row_idx)
    k, drop_pad, active = int(top_k), int(drop_pad_mode), int(active_num)
    gd = TensorDesc.of(grad_x_out)
    if gd is None and xd is not None and rd is not None and rd.ndim >= 1 and xd.ndim in (2, 3) and k > 0:
        gd = TensorDesc((rd.dim(0) // k, xd.dim(xd.ndim - 1)), xd.dtype)
    n, h = _shape_attrs(xd, rd, gd, k, drop_pad, active)
    ts = 4 if np.dtype(xd.dtype) == np.dtype(np.float32) else 2
    aiv, ub = soc.aiv_num, soc.ub_size_for_tiling
    for template, fn in ((KEY_SPLIT_H, _split_h), (KEY_FULL_LOAD, _full_load), (KEY_REGBASE, _regbase)):  # noqa: B007 - the template that fit is read after the loop
        got = fn(n, h, k, ts, aiv, ub)
        if got is not None:
            break
    parts, block_dim = got
    f = struct_fields(FIELDS_BY_TEMPLATE[template])
    f.update(n=n, k=k, active_num=active, h=h, num_blocks=block_dim, **parts)
    mode = MODE_DROP_PAD if drop_pad == 1 else (MODE_ACTIVE if active > 0 else MODE_DROPLESS)
    return TilingResult(tiling_key=template + mode, block_dim=block_dim, workspace_size=WORKSPACE_BYTES, fields=f,
                        ub_plan=ub_plan(template, f, ts), schedule_mode=0, soc=soc)
