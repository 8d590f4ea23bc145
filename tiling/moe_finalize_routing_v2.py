"""Tiling of MoeFinalizeRoutingV2 on Ascend 950: the regbase template and its 28-field struct.

source: moe/moe_finalize_routing_v2/op_host/moe_finalize_routing_v2_tiling_arch35.cpp,
moe/moe_finalize_routing_v2/op_host/moe_finalize_routing_v2_tiling.cpp (workspace, block dim),
moe/moe_finalize_routing_v2/op_host/moe_finalize_routing_v2_def.cpp (inputs and attribute defaults),
moe/moe_finalize_routing_v2/op_kernel/arch35/moe_finalize_routing_v2_tiling_struct.h and the arch35 kernels'
InitBuffer calls (ub_plan) @ 25fb6b92890d.

    y[r] = x1[r] + x2[r] + sum_k scales[r, k] * (row_k + bias[expert_idx[r, k]])

where row_k is expanded_x[idx] for an ordinary expert; with x and expert_idx given, an expert in
zero_expert_range adds nothing, one in copy_expert_range takes x[r], one in constant_expert_range (with a1, a2 and
v given) takes a1[e'] * x[r] + a2[e'] * v[e'] (e' = expert - constant start).

Four templates, tried in this order (the first whose UB estimate holds wins):

* row-K-H full load (key 30000): the whole expanded_x (row*k*h elements dropless, e*c*h drop-pad) and the bias
  table sit in UB once; rows of y are produced rowFactor at a time.
* K-H full load (40000): k <= 4 sizes rowFactor with every token's k rows in UB (the kernel then batches 16 tokens
  when rowFactor >= 16); k > 4 keeps one token's k rows per loop.
* H full load (10000): kFactor expanded rows of one token per loop, kLoop loops per token.
* split H (20000): one token at a time in hFactor-element pieces.

    tilingKey = template + 10 * dropPadMode (0 dropless-column, 1 drop-pad-column, 2 dropless-row, 3 drop-pad-row)
                + (1 fp16 scales | 2 bf16 scales | 0 fp32 or no scales)

Workspace: the 16 MiB library reserve. Block dim: ceil(row / ceil(row / cores)).
MoeTokenUnpermute reaches it with drop_pad_mode 2, scales = probs (or none), k 1, no range attributes and none of
x1 / x2 / bias / expert_idx / x / a1 / a2 / v.
"""
from __future__ import annotations

from typing import NoReturn

import numpy as np

from ascend_sim.pipe import UbBuffer

from .common import BLOCK_BYTES, TensorDesc, TilingResult, align_up, ceil_div, memoised_tiling, struct_fields, tdiv
from .platform import get_soc
from .status import TilingError

OP = "MoeFinalizeRoutingV2"

# MoeFinalizeRoutingV2RegbaseTilingData, in its order
FIELDS = ("row", "e", "c", "h", "h_aligned", "k", "row_of_former_block", "row_of_tail_block",
          "row_loop_of_former_block", "row_loop_of_tail_block", "row_factor", "const_expert_range_factor",
          "tail_row_factor_of_former_block", "tail_row_factor_of_tail_block", "h_loop", "h_factor", "tail_h_factor",
          "k_loop", "k_factor", "tail_k_factor", "active_num", "zero_expert_start", "zero_expert_end",
          "copy_expert_start", "copy_expert_end", "constant_expert_start", "constant_expert_end",
          "const_expert_range_num")

DROPLESS_COL, DROP_PAD_COL, DROPLESS_ROW, DROP_PAD_ROW = 0, 1, 2, 3
KEY_H_FULL_LOAD, KEY_SPLIT_H, KEY_ROW_K_H_FULL_LOAD, KEY_K_H_FULL_LOAD = 10000, 20000, 30000, 40000
DOUBLE_BUFFER = 2
INPUT_BUFFER_NUM = 8            # expanded_x, bias, x1, x2, x, a1, a2, v
CONST_EXPERT_BUFFER_NUM = 3     # a1, a2, v
OUTPUT_BUFFER_NUM = 1           # y
BATCH_COPY_EXPERT_NUM = 4       # K-H full load sizes rowFactor for all k rows in UB up to this k
BATCH_COPY_SIZE = 16            # ... and its kernel then copies 16 tokens per batch (when rowFactor >= 16)
WORKSPACE_RESERVED = 16 * 1024 * 1024
NO_RANGE = (-1, -1)             # the OpDef default of the three expert-range attributes

_FLOATS = ("float32", "float16", "bfloat16")
_I32 = np.dtype(np.int32)
_INVALID_DIM = -(2 ** 63)       # gert::Shape::GetDim past the last dimension


def _fail(message: str) -> NoReturn:
    raise TilingError(f"{OP} tiling: {message}")


def _blk(nbytes: int) -> int:
    """Bytes rounded up to whole 32-byte UB blocks."""
    return align_up(nbytes, BLOCK_BYTES)


def _round_up(elems: int, nbytes: int) -> int:
    """RoundUp<T> of the kernels: elements rounded up to a whole block of T."""
    per = BLOCK_BYTES // nbytes
    return ceil_div(elems, per) * per


def _dim(t: TensorDesc, i: int) -> int:
    return t.dim(i) if i < t.ndim else _INVALID_DIM


def expert_range(value) -> tuple[int, int]:
    """DoGetZeroShapeAttrsInfo: a list of exactly two values gives (start, end); anything else (None, the nullptr
    MoeTokenUnpermute passes, or another length) leaves the default (-1, -1)."""
    if value is None or len(value) != 2:
        return NO_RANGE
    return int(value[0]), int(value[1])


class _Shape:
    """What DoGetShapeAttrsInfo reads (sizes in elements, dtype sizes in bytes)."""

    def __init__(self, mode, dt_bytes, scale_bytes, row, e, c, h, k, dim0, x1, x2, bias, scales, expert_idx, x,
                 const, const_num):
        self.mode, self.dt, self.st = mode, dt_bytes, scale_bytes
        self.row, self.e, self.c, self.h, self.k, self.dim0 = row, e, c, h, k, dim0
        self.x1, self.x2, self.bias, self.scales, self.expert_idx = x1, x2, bias, scales, expert_idx
        self.x, self.const, self.const_num = x, const, const_num
        self.h_aligned = tdiv(_blk(h * dt_bytes), dt_bytes)

    @property
    def rows_inputs(self) -> int:
        """x1, x2 and x: the inputs of one (row, h) tile each."""
        return self.x1 + self.x2 + self.x

    def rows_h(self, rf: int, scales_in_ub: bool) -> int:
        """RowsHSize: x1 / x2 / x, a1 / a2 / v rows, scales and the fp32 y of rf tokens."""
        return (self.rows_inputs * _blk(rf * self.h * self.dt)
                + self.const * CONST_EXPERT_BUFFER_NUM * _blk(self.h * self.dt)
                + (1 if scales_in_ub and self.scales else 0) * _blk(rf * self.k * self.st)
                + _blk(rf * self.h * 4))

    def rows_h_kh(self, rf: int) -> int:
        """RowsHSizeForKHFullLoad: RowsHSize (scales in UB, no a1 / a2 / v rows) plus the k expanded rows (and bias
        rows) of rf tokens hAligned apart, constExpertRangeNum rows of a1 / a2 / v, and two int32 index tiles."""
        kh = rf * self.k * self.h_aligned * self.dt
        return (self.rows_inputs * _blk(rf * self.h * self.dt)
                + (1 if self.scales else 0) * _blk(rf * self.k * self.st)
                + (kh if self.bias else 0)
                + (self.const_num * self.h_aligned * self.dt * CONST_EXPERT_BUFFER_NUM if self.const else 0)
                + kh + 2 * _blk(rf * self.k * 4) + _blk(rf * self.h * 4))

    @property
    def input_buffers(self) -> int:
        """actualInputNum of IsHFullLoad / DoOpTilingSplitH."""
        return (INPUT_BUFFER_NUM - (not self.x1) - (not self.x2) - (not self.bias) - (not self.x)
                - (not self.const) * CONST_EXPERT_BUFFER_NUM)


def _row_factor(size, remained: int) -> int:
    """CalcRowFactor(ForKHFullLoad): grow 1, 2, 8, 64, ... while it fits, then bisect between the last two."""
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
             + DOUBLE_BUFFER * ((_blk(s.k * s.st) if s.scales else 0)
                                + (s.rows_inputs + s.const * CONST_EXPERT_BUFFER_NUM) * h_bytes
                                + _blk(s.h * 4) * OUTPUT_BUFFER_NUM))
    return total <= ub


def _is_k_h_full_load(s: _Shape, ub: int) -> bool:
    kh = s.k * s.h_aligned * s.dt
    idx = _blk(s.k * 4)
    total = DOUBLE_BUFFER * (kh + (kh if s.bias else 0) + (_blk(s.k * s.st) if s.scales else 0)
                             + (idx if s.k == 1 else 0) + (idx if s.bias and s.k == 1 else 0)
                             + (s.rows_inputs + s.const * CONST_EXPERT_BUFFER_NUM) * _blk(s.h * s.dt)
                             + _blk(s.h * 4) * OUTPUT_BUFFER_NUM)
    return total <= ub


def _is_h_full_load(s: _Shape, ub: int) -> bool:
    total = DOUBLE_BUFFER * (_blk(s.h * s.dt) * s.input_buffers + (BLOCK_BYTES if s.scales else 0)
                             + _blk(s.h * 4) * OUTPUT_BUFFER_NUM)
    return total <= ub


def _set_full_load(f: dict, s: _Shape, former: int, tail: int, rf: int) -> None:
    """SetFullLoadTilingData: even out the row loops of the former cores; one k per loop, all of h."""
    loops = ceil_div(former, rf)
    rf = ceil_div(former, loops)
    tail_loops = ceil_div(tail, rf)
    f.update(row_loop_of_former_block=loops, row_loop_of_tail_block=tail_loops, row_factor=rf,
             const_expert_range_factor=min(s.const_num, rf),
             tail_row_factor_of_former_block=former - (loops - 1) * rf,
             tail_row_factor_of_tail_block=tail - (tail_loops - 1) * rf, h_loop=1, h_factor=s.h, tail_h_factor=s.h,
             k_loop=s.k, k_factor=1, tail_k_factor=1, active_num=s.dim0, const_expert_range_num=s.const_num)


def k_h_batched(f: dict) -> bool:
    """The K-H full load kernel's batched path: 2 <= k <= 4 with rowFactor >= 16 (16 tokens per copy batch)."""
    return 1 < f["k"] <= BATCH_COPY_EXPERT_NUM and f["row_factor"] >= BATCH_COPY_SIZE


def ub_plan(key: int, f: dict, s: _Shape) -> tuple[UbBuffer, ...]:
    """The InitBuffer calls of the arch35 kernel of `key`, in their order."""
    template = key // 10000 * 10000
    t, sb = s.dt, s.st
    rf, h, k, h_aligned = f["row_factor"], f["h"], f["k"], f["h_aligned"]
    def que(name, nbytes, depth=DOUBLE_BUFFER, pos="VECIN"):
        return UbBuffer(name, nbytes, depth, "TQue", pos, depth)

    def y(elems):
        return que("yQue", _round_up(elems, 4) * 4, pos="VECOUT")

    bias = s.bias and s.expert_idx               # hasBiasAndExpertIdx
    rows_t = _round_up(rf * h, t) * t
    const_names = ("constExpertAlpha1", "constExpertAlpha2", "v")
    rows = []
    if template == KEY_H_FULL_LOAD:
        rows += [que("expandedXQue", f["k_factor"] * h_aligned * t), y(rf * h)]
        if bias:
            rows.append(que("biasQue", f["k_factor"] * h_aligned * t))
        rows += [que(n, rows_t) for n, on in (("x1Que", s.x1), ("x2Que", s.x2)) if on]
        if s.scales:
            rows.append(que("scalesQue", _round_up(f["k_factor"], t) * sb))   # rounded in T, times sizeof(S)
        if s.x:
            rows.append(que("xQue", h_aligned * t))
        if s.const:
            rows += [que(n + "Que", h_aligned * t) for n in const_names]
    elif template == KEY_SPLIT_H:
        piece = _round_up(f["h_factor"], t) * t
        rows += [que("expandedXQue", piece), y(f["h_factor"])]
        if bias:
            rows.append(que("biasQue", piece))
        rows += [que(n, piece) for n, on in (("x1Que", s.x1), ("x2Que", s.x2)) if on]
        if s.const:
            rows += [que(n + "Que", piece) for n in const_names]
    elif template == KEY_K_H_FULL_LOAD:
        idx = _round_up(rf * k, 4) * 4
        if k == 1:
            kh = rf * h_aligned * t
        elif k_h_batched(f):
            kh = BATCH_COPY_SIZE * k * h_aligned * t
        else:
            kh = k * h_aligned * t
        rows.append(que("expandedXQue", kh))
        if k == 1:
            rows.append(que("expandedRowIdxQue", idx))
        rows.append(y(rf * h))
        if bias:
            rows.append(que("biasQue", kh))
            if k == 1:
                rows.append(que("expertIdxQue", idx))
        rows += [que(n, rows_t) for n, on in (("x1Que", s.x1), ("x2Que", s.x2)) if on]
        if s.scales:
            rows.append(que("scalesQue", _round_up(rf * k, t) * sb))
        if s.x:
            rows.append(UbBuffer("xBuf", h * t))
        if s.const:
            rows += [UbBuffer(n + "Buf", h * t) for n in const_names]
    else:
        whole = (f["row"] * k * h if s.mode in (DROPLESS_COL, DROPLESS_ROW) else f["e"] * f["c"] * h)
        rows += [que("expandedXQue", _round_up(whole, t) * t, 1), y(rf * h)]
        if s.x1:
            rows.append(que("x1Que", rows_t))
        if bias:
            rows.append(que("biasQue", _round_up(f["e"] * h, t) * t, 1))
        if s.x2:
            rows.append(que("x2Que", rows_t))
        if s.scales:
            rows.append(que("scalesQue", _round_up(rf * k, t) * sb))
        if s.x:
            rows.append(que("xQue", h * t))
        if s.const:
            rows += [que(n + "Que", h * t) for n in const_names]
    return tuple(rows)


def _desc(t):
    return TensorDesc.of(t)


def _check_dtype(name: str, t, dtype) -> None:
    """CheckOptionalInputDtype."""
    if t is not None and np.dtype(t.dtype) != dtype:
        _fail(f"{name} must have dtype {dtype}, got {np.dtype(t.dtype)}")


def _check_shape(name: str, t, shape: tuple, what: str) -> None:
    """CheckOptionalInputShape."""
    if t is not None and t.shape != shape:
        _fail(f"{name} must have shape {what} = {shape}, got {t.shape}")


@memoised_tiling
def moe_finalize_routing_v2(expanded_x, expanded_row_idx, x1=None, x2=None, bias=None, scales=None, expert_idx=None,
                            *, x=None, a1=None, a2=None, v=None, y_out=None, drop_pad_mode=0,
                            zero_expert_range=NO_RANGE, copy_expert_range=NO_RANGE, constant_expert_range=NO_RANGE,
                            k=1, soc="ascend950") -> TilingResult:
    """Host tiling of MoeFinalizeRoutingV2 (the arch35 / regbase template; Ascend 950 only).

    expanded_x (R, H) dropless (modes 0 / 2) or (E, C, H) drop-pad (1 / 3), fp32 / fp16 / bf16; expanded_row_idx
    (row*k,) int32; x1 / x2 / x (row, H) and bias (E, H) in expanded_x's dtype; scales (row, k) fp32 / fp16 /
    bf16; expert_idx (row, k) int32; a1 / a2 / v (constant experts, H) in expanded_x's dtype; y_out (row, H) in
    expanded_x's dtype (default: that shape). Anything with .shape and .dtype, or TensorDesc; None for an absent
    optional input. The three expert ranges are [start, end) pairs of expert ids ((-1, -1): none; None or a list of
    another length: ignored, as the real tiling does); k: the top-k attribute (only checked against scales' dim 1
    when above 1; without scales it is the k). Raises TilingError (561002) exactly where the real tiling returns
    GRAPH_FAILED; NotImplementedError on an A2 / A3 profile. Sizes in elements, the workspace in bytes.
    """
    soc = get_soc(soc)
    if not soc.is_regbase:
        # A2 / A3 run the membase template (another struct and keys), which is not modelled
        raise NotImplementedError(f"{OP}: only the arch35 (Ascend 950) tiling is modelled, not {soc.name}'s")
    xd, idx = _desc(expanded_x), _desc(expanded_row_idx)
    x1d, x2d, bd, sd, ed, xxd, a1d, a2d, vd = (_desc(t) for t in (x1, x2, bias, scales, expert_idx, x, a1, a2, v))
    if xd is None or idx is None:
        _fail("expanded_x and expanded_row_idx are required")
    # GetDropPadModeAndExpertRangeAttrs
    mode = int(drop_pad_mode)
    if mode not in (DROPLESS_COL, DROP_PAD_COL, DROPLESS_ROW, DROP_PAD_ROW):
        _fail(f"drop_pad_mode should be 0, 1, 2 or 3, got {mode}")
    zero, copy, const_range = (expert_range(r) for r in (zero_expert_range, copy_expert_range,
                                                          constant_expert_range))
    # GetRequiredInputInfo
    dtype = np.dtype(xd.dtype)
    if dtype.name not in _FLOATS:
        _fail(f"expanded_x must be float32, float16 or bfloat16, got {dtype}")
    dt = 4 if dtype.name == "float32" else 2
    e = c = 0
    if mode in (DROPLESS_COL, DROPLESS_ROW):                                    # GetECH
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
    k_attr = int(k)                                                             # GetK
    k = k_attr
    if sd is not None:
        if sd.ndim != 2:
            _fail(f"scales should be 2-D, got shape {sd.shape}")
        if k_attr > 1 and k_attr != sd.dim(1):
            _fail(f"k ({k_attr}) must equal dim 1 of scales ({sd.dim(1)})")
        k = sd.dim(1)
        if k <= 0:
            _fail(f"k ({k}) must be greater than 0")
    if idx.ndim != 1:                                                           # GetRow
        _fail(f"expanded_row_idx should be 1-D, got shape {idx.shape}")
    if k == 0:
        # without scales the real tiling divides by the k attribute unchecked (an integer division by zero)
        _fail("k must not be 0 without scales (the real tiling divides len(expanded_row_idx) by it)")
    row = tdiv(idx.dim(0), k)
    if row <= 0:
        _fail(f"row ({row} = len(expanded_row_idx) / k) must be greater than 0")
    if x2d is not None and x1d is None:                                         # GetOptionalInputFlags
        _fail("x1 must exist when x2 exists")
    has_const = a1d is not None and a2d is not None and vd is not None
    # CheckShapeAndDtypeIsValid
    bsk, bsh = (row, k), (row, h)
    if np.dtype(idx.dtype) != _I32:
        _fail(f"expanded_row_idx must be int32, got {np.dtype(idx.dtype)}")
    _check_shape("expanded_row_idx", idx, (row * k,), "(row * k,)")
    _check_dtype("x1", x1d, dtype)
    _check_shape("x1", x1d, bsh, "(row, h)")
    _check_dtype("x2", x2d, dtype)
    # CheckPartShapeAndDtypeIsValid
    _check_shape("x2", x2d, bsh, "(row, h)")
    _check_dtype("bias", bd, dtype)
    if bd is not None:
        if bd.ndim != 2:                                                        # CheckBiasShape
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
    const_num = const_range[1] - const_range[0]                                 # CheckConstExpertPart...
    for name, t in (("a1", a1d), ("a2", a2d), ("v", vd)):
        if t is None:
            continue
        if np.dtype(t.dtype) != dtype:
            _fail(f"{name} (a constant-expert input) must have expanded_x's dtype {dtype}, got {np.dtype(t.dtype)}")
        if _dim(t, 1) != h:
            _fail(f"dim 1 of {name} should be h = {h}, got shape {t.shape}")
        if _dim(t, 0) != const_num:
            _fail(f"dim 0 of {name} should be the constant-expert count {const_num} (constant_expert_range "
                  f"{list(const_range)}), got shape {t.shape}")
    # FinalCheckShapeAndDtypeIsValid
    _check_shape("scales", sd, bsk, "(row, k)")
    _check_dtype("expert_idx", ed, _I32)
    _check_shape("expert_idx", ed, bsk, "(row, k)")
    _check_dtype("x", xxd, dtype)
    _check_shape("x", xxd, bsh, "(row, h)")
    yd = _desc(y_out) or TensorDesc(bsh, dtype)
    if np.dtype(yd.dtype) != dtype:
        _fail(f"y must have expanded_x's dtype {dtype}, got {np.dtype(yd.dtype)}")
    if yd.shape != bsh:
        _fail(f"y must have shape (row, h) = {bsh}, got {yd.shape}")
    # CheckExpertRangeValidity: each range inside [0, E] (skipped while E is unknown: dropless without bias) ...
    names = ("zero expert", "copy expert", "constant expert")
    ranges = (zero, copy, const_range)
    for name, (start, end) in zip(names, ranges, strict=True):
        if (start, end) != NO_RANGE and e != 0 and not 0 <= start < end <= e:
            _fail(f"{name} range [{start}, {end}) must satisfy 0 <= start < end <= E = {e}")
    # ... and no two of them overlapping
    for i, j in ((0, 1), (0, 2), (1, 2)):
        (s1, e1), (s2, e2) = ranges[i], ranges[j]
        if s1 != -1 and s2 != -1 and not (e1 <= s2 or e2 <= s1):
            _fail(f"{names[i]} range [{s1}, {e1}) and {names[j]} range [{s2}, {e2}) must not overlap")

    s = _Shape(mode, dt, st, row, e, c, h, k, dim0, x1d is not None, x2d is not None, bd is not None,
               sd is not None, ed is not None, xxd is not None, has_const, const_num)
    ub, cores = soc.ub_size_for_tiling, soc.aiv_num
    if _is_row_k_h_full_load(s, ub):
        template = KEY_ROW_K_H_FULL_LOAD
    elif _is_k_h_full_load(s, ub):
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
    f.update(row=row, e=e, c=c, h=h, h_aligned=s.h_aligned, k=k, row_of_former_block=per_core,
             row_of_tail_block=tail, zero_expert_start=zero[0], zero_expert_end=zero[1], copy_expert_start=copy[0],
             copy_expert_end=copy[1], constant_expert_start=const_range[0], constant_expert_end=const_range[1])
    half = tdiv(ub, DOUBLE_BUFFER)
    if template == KEY_ROW_K_H_FULL_LOAD:
        remained = tdiv(ub - _expanded_x_bytes(s) - (_blk(e * h * dt) if s.bias else 0), DOUBLE_BUFFER)
        _set_full_load(f, s, per_core, tail, _row_factor(lambda r: s.rows_h(r, True), remained))
    elif template == KEY_K_H_FULL_LOAD:
        if k <= BATCH_COPY_EXPERT_NUM:
            rf = _row_factor(s.rows_h_kh, half)
        else:
            kh = k * s.h_aligned * dt
            rf = _row_factor(lambda r: s.rows_h(r, True), half - kh - (kh if s.bias else 0))
        _set_full_load(f, s, per_core, tail, rf)
    elif template == KEY_H_FULL_LOAD:
        x_and_bias = (1 + s.bias) * s.h_aligned * dt
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
        buffers = s.input_buffers + OUTPUT_BUFFER_NUM + (dtype.name != "float32")
        h_factor = tdiv(tdiv(half, dt), buffers)
        h_loop = ceil_div(h, h_factor)
        h_factor = ceil_div(h, h_loop)
        # kLoop / kFactor / tailKFactor and the two constant-expert counts stay 0: DoOpTilingSplitH does not set them
        f.update(row_loop_of_former_block=per_core, row_loop_of_tail_block=tail, row_factor=1,
                 tail_row_factor_of_former_block=per_core, tail_row_factor_of_tail_block=tail, h_loop=h_loop,
                 h_factor=h_factor, tail_h_factor=h - (h_loop - 1) * h_factor, active_num=dim0)
    key = template + 10 * mode + scale_key
    return TilingResult(tiling_key=key, block_dim=used, workspace_size=WORKSPACE_RESERVED, fields=f,
                        ub_plan=ub_plan(key, f, s), soc=soc)
