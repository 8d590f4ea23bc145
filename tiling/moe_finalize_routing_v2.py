"""Tiling of MoeFinalizeRoutingV2 on Ascend 950 (op_host/moe_finalize_routing_v2_tiling_arch35.cpp, the regbase
template, and the kernel-side struct op_kernel/arch35/moe_finalize_routing_v2_tiling_arch35.h).

The arch35 tiling file and its struct exist only in the cannmirror snapshot of Dec 2025 (hicann holds newer arch35
kernels with more inputs, but no newer tiling); this module follows the Dec 2025 text.

    y[r] = x1[r] + x2[r] + sum_k scales[r, k] * (expanded_x[row_of(r, k)] + bias[expert_idx[r, k]])

Four templates, tried in this order (the first whose UB budget holds wins):

* row-K-H full load (key 30000): the whole expanded_x (row*k*h elements dropless, e*c*h drop-pad) and the bias
  table sit in UB once; rows of y are produced rowFactor at a time.
* K-H full load (40000): the k expanded rows of rowFactor tokens (k == 1) or of one token (k > 1) per loop.
* H full load (10000): kFactor expanded rows of one token per loop, kLoop loops per token.
* split H (20000): one token at a time in hFactor-element pieces.

    tilingKey = template + 10 * dropPadMode (0 dropless-column, 1 drop-pad-column, 2 dropless-row, 3 drop-pad-row)
                + (1 fp16 scales | 2 bf16 scales | 0 fp32 or no scales)

Workspace: the 16 MiB library reserve. Block dim: ceil(row / ceil(row / cores)).
MoeTokenUnpermute reaches it with drop_pad_mode 2, scales = probs (or none) and no x1 / x2 / bias / expert_idx.
"""
from __future__ import annotations

import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import TensorDesc, TilingResult, ceil_div, memoised_tiling, struct_fields, tdiv
from .platform import get_soc
from .status import TilingError

OP = "MoeFinalizeRoutingV2"

FIELDS = ("row", "e", "c", "h", "h_aligned", "k", "row_of_former_block", "row_of_tail_block",
          "row_loop_of_former_block", "row_loop_of_tail_block", "row_factor", "tail_row_factor_of_former_block",
          "tail_row_factor_of_tail_block", "h_loop", "h_factor", "tail_h_factor", "k_loop", "k_factor",
          "tail_k_factor", "active_num")

DROPLESS_COL, DROP_PAD_COL, DROPLESS_ROW, DROP_PAD_ROW = 0, 1, 2, 3
KEY_H_FULL_LOAD, KEY_SPLIT_H, KEY_ROW_K_H_FULL_LOAD, KEY_K_H_FULL_LOAD = 10000, 20000, 30000, 40000
DOUBLE_BUFFER = 2
INPUT_BUFFER_NUM = 4            # expanded_x, bias, x1, x2
OUTPUT_BUFFER_NUM = 1           # y
BLOCK_BYTES = 32                # GetUbBlockSize
WORKSPACE_RESERVED = 16 * 1024 * 1024

_FLOATS = ("float32", "float16", "bfloat16")
_I32 = np.dtype(np.int32)


def _fail(message: str):
    raise TilingError(f"{OP} tiling: {message}")


def _blk(nbytes: int) -> int:
    """Bytes rounded up to whole 32-byte UB blocks."""
    return ceil_div(nbytes, BLOCK_BYTES) * BLOCK_BYTES


def _round_up(elems: int, nbytes: int) -> int:
    """RoundUp<T> of the kernels: elements rounded up to a whole block of T."""
    per = BLOCK_BYTES // nbytes
    return ceil_div(elems, per) * per


class _Shape:
    """What DoGetShapeAttrsInfo reads (sizes in elements, dtype sizes in bytes)."""

    def __init__(self, mode, dt_bytes, scale_bytes, row, e, c, h, k, dim0, x1, x2, bias, scales, expert_idx):
        self.mode, self.dt, self.st = mode, dt_bytes, scale_bytes
        self.row, self.e, self.c, self.h, self.k, self.dim0 = row, e, c, h, k, dim0
        self.x1, self.x2, self.bias, self.scales, self.expert_idx = x1, x2, bias, scales, expert_idx

    def rows_h(self, rf: int, scales_in_ub: bool) -> int:
        """RowsHSize: x1 / x2, scales and the fp32 y of rf tokens."""
        return ((self.x1 + self.x2) * _blk(rf * self.h * self.dt)
                + (1 if scales_in_ub and self.scales else 0) * _blk(rf * self.k * self.st)
                + _blk(rf * self.h * 4))

    def rows_h_kh(self, rf: int, scales_in_ub: bool) -> int:
        """RowsHSizeForKHFullLoad: RowsHSize plus the k expanded rows (and bias rows) with their indices."""
        kh, idx = _blk(rf * self.k * self.h * self.dt), _blk(rf * self.k * 4)
        return ((self.x1 + self.x2) * _blk(rf * self.h * self.dt)
                + (1 if scales_in_ub and self.scales else 0) * _blk(rf * self.k * self.st)
                + (kh + idx if self.bias else 0) + kh + idx + _blk(rf * self.h * 4))


def _row_factor(size, remained: int) -> int:
    """CalcRowFactor: grow 1, 2, 8, 64, ... while it fits, then bisect between the last two."""
    rf, factor = 1, 1
    while size(rf) <= remained:
        factor *= 2
        rf *= factor
    upper, lower = rf, tdiv(rf, factor)
    while upper - lower > 1:
        mid = tdiv(lower + upper, 2)
        if size(mid) <= remained:
            lower = mid
        else:
            upper = mid
    return lower


def _expanded_x_bytes(s: _Shape) -> int:
    if s.mode in (DROPLESS_COL, DROPLESS_ROW):
        return _blk(s.row * s.k * s.h * s.dt)
    return _blk(s.e * s.c * s.h * s.dt)


def _is_row_k_h_full_load(s: _Shape, ub: int) -> bool:
    h_bytes = _blk(s.h * s.dt)
    total = (_expanded_x_bytes(s) + (_blk(s.e * s.h * s.dt) if s.bias else 0)
             + DOUBLE_BUFFER * ((_blk(s.k * s.st) if s.scales else 0) + (s.x1 + s.x2) * h_bytes
                                + _blk(s.h * 4) * OUTPUT_BUFFER_NUM))
    return total <= ub


def _is_k_h_full_load(s: _Shape, ub: int, h_aligned: int) -> bool:
    kh = s.k * h_aligned * s.dt
    idx = _blk(s.k * 4)
    total = DOUBLE_BUFFER * (kh + (kh if s.bias else 0) + (_blk(s.k * s.st) if s.scales else 0)
                             + (idx if s.k == 1 else 0) + (idx if s.bias and s.k == 1 else 0)
                             + (s.x1 + s.x2) * _blk(s.h * s.dt) + _blk(s.h * 4) * OUTPUT_BUFFER_NUM)
    return total <= ub


def _is_h_full_load(s: _Shape, ub: int) -> bool:
    inputs = INPUT_BUFFER_NUM - (not s.x1) - (not s.x2) - (not s.bias)
    total = DOUBLE_BUFFER * (_blk(s.h * s.dt) * inputs + (BLOCK_BYTES if s.scales else 0)
                             + _blk(s.h * 4) * OUTPUT_BUFFER_NUM)
    return total <= ub


def _set_full_load(f: dict, s: _Shape, former: int, tail: int, rf: int) -> None:
    """SetFullLoadTilingData: even out the row loops of the former cores; one k per loop, all of h."""
    loops = ceil_div(former, rf)
    rf = ceil_div(former, loops)
    tail_loops = ceil_div(tail, rf)
    f.update(row_loop_of_former_block=loops, row_loop_of_tail_block=tail_loops, row_factor=rf,
             tail_row_factor_of_former_block=former - (loops - 1) * rf,
             tail_row_factor_of_tail_block=tail - (tail_loops - 1) * rf, h_loop=1, h_factor=s.h, tail_h_factor=s.h,
             k_loop=s.k, k_factor=1, tail_k_factor=1, active_num=s.dim0)


def ub_plan(key: int, f: dict, s: _Shape) -> tuple[UbBuffer, ...]:
    """The InitBuffer calls of the arch35 kernel of `key` (Dec 2025 kernels), in their order."""
    template = key // 10000 * 10000
    t, sb = s.dt, s.st
    rf, h, k = f["row_factor"], f["h"], f["k"]
    que = lambda name, nbytes, depth=DOUBLE_BUFFER, pos="VECIN": UbBuffer(name, nbytes, depth, "TQue", pos, depth)
    y = lambda elems: que("yQue", _round_up(elems, 4) * 4, pos="VECOUT")
    rows = []
    if template == KEY_H_FULL_LOAD:
        rows += [que("expandedXQue", f["k_factor"] * f["h_aligned"] * t), y(rf * h)]
        if s.bias and s.expert_idx:
            rows.append(que("biasQue", f["k_factor"] * f["h_aligned"] * t))
        x_bytes = _round_up(rf * h, t) * t
        scales_bytes = _round_up(f["k_factor"], t) * sb      # rounded in the tokens' dtype, as the kernel does
    elif template == KEY_SPLIT_H:
        piece = _round_up(f["h_factor"], t) * t
        rows += [que("expandedXQue", piece), y(f["h_factor"])]
        if s.bias and s.expert_idx:
            rows.append(que("biasQue", piece))
        x_bytes, scales_bytes = piece, 0
    elif template == KEY_K_H_FULL_LOAD:
        kh = _round_up(rf * k * h, t) * t
        idx = _round_up(rf * k, 4) * 4
        if k == 1:
            # Deviation: InitBuffer gives RoundUp<T>(rowFactor * h) elements, but ProcessYWithInputK1 puts the rows
            # hAligned apart and so writes up to rowFactor * (hAligned - h) elements past it (into the queue's other
            # buffer or the index queue, whose live part it does not reach); the simulated buffer holds what is
            # written.
            rows += [que("expandedXQue", max(kh, rf * f["h_aligned"] * t)), que("expandedRowIdxQue", idx)]
        else:
            rows.append(que("expandedXQue", k * f["h_aligned"] * t))
        rows.append(y(rf * h))
        if s.bias and s.expert_idx:
            rows += ([que("biasQue", kh), que("expertIdxQue", idx)] if k == 1
                     else [que("biasQue", k * f["h_aligned"] * t)])
        x_bytes = _round_up(rf * h, t) * t
        scales_bytes = _round_up(rf * k, t) * sb
    else:
        whole = (f["row"] * k * h if s.mode in (DROPLESS_COL, DROPLESS_ROW) else f["e"] * f["c"] * h)
        rows += [que("expandedXQue", _round_up(whole, t) * t, 1), y(rf * h)]
        if s.bias and s.expert_idx:
            rows.append(que("biasQue", _round_up(f["e"] * h, t) * t, 1))
        x_bytes = _round_up(rf * h, t) * t
        scales_bytes = _round_up(rf * k, t) * sb
    if s.x1:
        rows.append(que("x1Que", x_bytes))
    if s.x2:
        rows.append(que("x2Que", x_bytes))
    if s.scales and template != KEY_SPLIT_H:
        rows.append(que("scalesQue", scales_bytes))
    return tuple(rows)


def _desc(t):
    return TensorDesc.of(t)


@memoised_tiling
def moe_finalize_routing_v2(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None, expert_idx=None,
                            *, y_out=None, drop_pad_mode=0, soc="ascend950") -> TilingResult:
    """Host tiling of MoeFinalizeRoutingV2 (the arch35 / regbase template; Ascend 950 only).

    expanded_x (R, H) dropless (modes 0 / 2) or (E, C, H) drop-pad (1 / 3), fp32 / fp16 / bf16; expanded_row_idx
    (row*k,) int32; x1 / x2 (row, H) and bias (E, H) in expanded_x's dtype; scales (row, k) fp32 / fp16 / bf16;
    expert_idx (row, k) int32; y_out (row, H) in expanded_x's dtype (default: that shape). Anything with .shape
    and .dtype, or TensorDesc; None for an absent optional input. Raises TilingError (561002) exactly where the
    real tiling returns GRAPH_FAILED; NotImplementedError on an A2 / A3 profile. Sizes in elements, the workspace in
    bytes.
    """
    soc = get_soc(soc)
    if not soc.is_regbase:
        # A2 / A3 run the membase template (another struct and keys), which is not modelled
        raise NotImplementedError(f"{OP}: only the arch35 (Ascend 950) tiling is modelled, not {soc.name}'s")
    xd, idx = _desc(expanded_x), _desc(expanded_row_idx)
    x1d, x2d, bd, sd, ed = (_desc(t) for t in (x1, x2, bias, scales, expert_idx))
    if xd is None or idx is None:
        _fail("expanded_x and expanded_row_idx are required")
    mode = int(drop_pad_mode)
    if mode not in (DROPLESS_COL, DROP_PAD_COL, DROPLESS_ROW, DROP_PAD_ROW):
        _fail(f"drop_pad_mode should be 0, 1, 2 or 3, got {mode}")
    dtype = np.dtype(xd.dtype)
    if dtype.name not in _FLOATS:
        _fail(f"expanded_x must be float32, float16 or bfloat16, got {dtype}")
    dt = 4 if dtype.name == "float32" else 2
    # GetECH
    e = c = 0
    if mode in (DROPLESS_COL, DROPLESS_ROW):
        if xd.ndim != 2:
            _fail(f"expanded_x should be 2-D in dropless mode, got shape {xd.shape}")
        dim0, h = xd.dim(0), xd.dim(1)
        if h <= 0:
            _fail(f"h ({h}) must be greater than 0")
    else:
        if xd.ndim != 3:
            _fail(f"expanded_x should be 3-D in drop-pad mode, got shape {xd.shape}")
        e, c, h = xd.shape
        if e <= 0 or c <= 0 or h <= 0:
            _fail(f"e ({e}), c ({c}) and h ({h}) must be greater than 0")
        dim0 = e
    # GetK
    if sd is None:
        k = 1
    else:
        if sd.ndim != 2:
            _fail(f"scales should be 2-D, got shape {sd.shape}")
        k = sd.dim(1)
        if k <= 0:
            _fail(f"k ({k}) must be greater than 0")
    # GetRow
    if idx.ndim != 1:
        _fail(f"expanded_row_idx should be 1-D, got shape {idx.shape}")
    row = tdiv(idx.dim(0), k)
    if row <= 0:
        _fail(f"row ({row} = len(expanded_row_idx) / k) must be greater than 0")
    if x2d is not None and x1d is None:
        _fail("x2 is given but x1 is not")
    # CheckShapeAndDtypeIsValid
    bsk, bsh = (row, k), (row, h)
    if np.dtype(idx.dtype) != _I32:
        _fail(f"expanded_row_idx must be int32, got {np.dtype(idx.dtype)}")
    if idx.shape != (row * k,):
        _fail(f"expanded_row_idx must have shape (row * k,) = ({row * k},), got {idx.shape}")
    for name, t in (("x1", x1d), ("x2", x2d)):
        if t is not None:
            if np.dtype(t.dtype) != dtype:
                _fail(f"{name} must have expanded_x's dtype {dtype}, got {np.dtype(t.dtype)}")
            if t.shape != bsh:
                _fail(f"{name} must have shape (row, h) = {bsh}, got {t.shape}")
    if bd is not None:
        if np.dtype(bd.dtype) != dtype:
            _fail(f"bias must have expanded_x's dtype {dtype}, got {np.dtype(bd.dtype)}")
        if bd.ndim != 2:
            _fail(f"bias should be 2-D, got shape {bd.shape}")
        e = bd.dim(0)
        if mode in (DROP_PAD_ROW, DROP_PAD_COL) and dim0 != e:
            _fail(f"dim 0 of expanded_x ({dim0}) should equal dim 0 of bias ({e}) in drop-pad mode")
        if e < k:
            _fail(f"e ({e}) must be greater than or equal to k ({k})")
        if bd.dim(1) != h:
            _fail(f"dim 1 of bias should be h = {h}, got {bd.dim(1)}")
    st, scale_key = dt, 0
    if sd is not None:
        sdt = np.dtype(sd.dtype)
        if sdt.name not in _FLOATS:
            _fail(f"scales must be float32, float16 or bfloat16, got {sdt}")
        st = 4 if sdt.name == "float32" else 2
        scale_key = {"float16": 1, "bfloat16": 2}.get(sdt.name, 0)
        if sd.shape != bsk:
            _fail(f"scales must have shape (row, k) = {bsk}, got {sd.shape}")
    if ed is not None:
        if np.dtype(ed.dtype) != _I32:
            _fail(f"expert_idx must be int32, got {np.dtype(ed.dtype)}")
        if ed.shape != bsk:
            _fail(f"expert_idx must have shape (row, k) = {bsk}, got {ed.shape}")
    yd = _desc(y_out) or TensorDesc(bsh, dtype)
    if np.dtype(yd.dtype) != dtype:
        _fail(f"y must have expanded_x's dtype {dtype}, got {np.dtype(yd.dtype)}")
    if yd.shape != bsh:
        _fail(f"y must have shape (row, h) = {bsh}, got {yd.shape}")

    s = _Shape(mode, dt, st, row, e, c, h, k, dim0, x1d is not None, x2d is not None, bd is not None,
               sd is not None, ed is not None)
    ub, cores = soc.ub_size_for_tiling, soc.aiv_num
    # IsCapable: every probe computes hAligned the same way
    h_aligned = tdiv(_blk(h * dt), dt)
    if _is_row_k_h_full_load(s, ub):
        template = KEY_ROW_K_H_FULL_LOAD
    elif _is_k_h_full_load(s, ub, h_aligned):
        template = KEY_K_H_FULL_LOAD
    elif _is_h_full_load(s, ub):
        template = KEY_H_FULL_LOAD
    else:
        template = KEY_SPLIT_H

    # CalcOpTiling
    per_core = ceil_div(row, cores)
    used = min(ceil_div(row, per_core), cores)
    tail = row - (used - 1) * per_core
    f = struct_fields(FIELDS)
    f.update(row=row, e=e, c=c, h=h, h_aligned=h_aligned, k=k, row_of_former_block=per_core, row_of_tail_block=tail)
    half = tdiv(ub, DOUBLE_BUFFER)
    if template == KEY_ROW_K_H_FULL_LOAD:
        remained = tdiv(ub - _expanded_x_bytes(s) - (_blk(e * h * dt) if s.bias else 0), DOUBLE_BUFFER)
        _set_full_load(f, s, per_core, tail, _row_factor(lambda r: s.rows_h(r, True), remained))
    elif template == KEY_K_H_FULL_LOAD:
        if k == 1:
            rf = _row_factor(lambda r: s.rows_h_kh(r, True), half)
        else:
            kh = k * h_aligned * dt
            rf = _row_factor(lambda r: s.rows_h(r, True), half - kh - (kh if s.bias else 0))
        _set_full_load(f, s, per_core, tail, rf)
    elif template == KEY_H_FULL_LOAD:
        x_and_bias = (1 + s.bias) * h_aligned * dt
        upper, lower = tdiv(half, x_and_bias), 1
        while upper - lower > 1:
            mid = tdiv(lower + upper, 2)
            if mid * x_and_bias + _blk(mid * dt) + s.rows_h(1, False) > half:
                upper = mid
            else:
                lower = mid
        k_loop = ceil_div(k, lower)
        k_factor = ceil_div(k, k_loop)
        remained = half - k_factor * x_and_bias - _blk(k_factor * dt)
        _set_full_load(f, s, per_core, tail, _row_factor(lambda r: s.rows_h(r, False), remained))
        f.update(k_loop=k_loop, k_factor=k_factor, tail_k_factor=k - (k_loop - 1) * k_factor)
    else:
        inputs = INPUT_BUFFER_NUM - (not s.x1) - (not s.x2) - (not s.bias)
        buffers = inputs + OUTPUT_BUFFER_NUM + (dtype.name != "float32")
        h_factor = tdiv(tdiv(half, dt), buffers)
        h_loop = ceil_div(h, h_factor)
        h_factor = ceil_div(h, h_loop)
        # kLoop / kFactor / tailKFactor stay 0: the split-H kernel walks all k of a token itself
        f.update(row_loop_of_former_block=per_core, row_loop_of_tail_block=tail, row_factor=1,
                 tail_row_factor_of_former_block=per_core, tail_row_factor_of_tail_block=tail, h_loop=h_loop,
                 h_factor=h_factor, tail_h_factor=h - (h_loop - 1) * h_factor, active_num=dim0)
    key = template + 10 * mode + scale_key
    return TilingResult(tiling_key=key, block_dim=used, workspace_size=WORKSPACE_RESERVED, fields=f,
                        ub_plan=ub_plan(key, f, s), soc=soc)
