"""Vector-unit instructions on LocalTensors (numba).

Count form (`add`, `mul`, `muls`, `adds`, `duplicate`, `cast`) works on the first `count`
elements; operands must be 32-byte aligned and `count` may not exceed any operand.
Repeat form (`copy`, `block_reduce_sum`, `whole_reduce_sum`) follows AscendC's
(mask, repeatTime, strides) layout: a repeat covers 256 bytes in eight 32-byte blocks,
`mask` is the number of leading elements of each repeat that take part, block strides
count 32-byte blocks. count 0 / mask 0 / repeatTime 0 is a no-op, as on A2/A3.

Reductions add in the hardware's binary-tree order: BlockReduceSum sums each 32-byte
block pairwise ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)); WholeReduceSum sums a repeat's 64
fp32 lanes (masked-off lanes contribute +0) as a pairwise tree, which is the tree of the
eight block trees. Arithmetic is IEEE fp32 with round-half-even, so results are bit-exact
with a device that adds in the same order.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import types
from numba.extending import overload
from numba.np.numpy_support import as_dtype

from . import check as chk
from ._jit import DEVICE_JIT_OPTIONS, aicore
from ._outline import outline
from .dtypes import (
    CAST_CEIL,
    CAST_FLOOR,
    CAST_NONE,
    CAST_ODD,
    CAST_RINT,
    CAST_ROUND,
    CAST_TRUNC,
    DT_BF16,
    DT_FLOAT16,
    bf16_bits_to_f32_bits,
    f16_bits_to_f32_bits,
    f32_bits_to_bf16_bits,
    f32_bits_to_bf16_bits_rint,
    f32_bits_to_f16_bits,
    f32_from_bits,
    i64_to_f32_bits,
    view_f32_as_u32,
)
from .faults import fault, issue
from .layout import (
    CALL_ADD,
    CALL_ADDS,
    CALL_BLOCK_REDUCE_SUM,
    CALL_CAST,
    CALL_COPY,
    CALL_DUPLICATE,
    CALL_MUL,
    CALL_MULS,
    CALL_WHOLE_REDUCE_SUM,
    CHK_MODE,
    CNT_V_ELEMS,
    F_CAST_PAIR,
    F_ELEM_TYPE,
    F_PARAM,
    F_UB_ALIGN,
    F_UB_OOB,
    P_BLK_STRIDE,
    P_COUNT,
    P_MASK,
    P_REPEAT,
    PIPE_V,
)
from .local import check_count, note_ub_write, ub_aligned_offset, ub_offset, vector_operands
from .timeline import repeats_of, vector

CopyRepeatParams = namedtuple("CopyRepeatParams", ["dstStride", "srcStride", "dstRepeatSize", "srcRepeatSize"])
"""Copy strides in 32-byte blocks: between blocks of a repeat, and between repeats."""

REPEAT_BYTES = 256
MAX_REPEAT = 255


def as_elem(t, value):
    """value converted to t's element type (the scalar operand type must equal the tensor's)."""
    raise NotImplementedError("as_elem is only callable from numba code")


@overload(as_elem, jit_options=DEVICE_JIT_OPTIONS)
def _as_elem(t, value):
    elem = as_dtype(t.dtype).type

    def impl(t, value):
        return elem(value)
    return impl


@aicore
def _operand(c, call, t, count):
    """UB offset of a count-form operand (32-byte aligned, holding `count` elements), or -1."""
    off = ub_aligned_offset(c, t, call)
    if off < 0 or not check_count(c, t, count, call):
        return -1
    return off


@aicore
def _begin(c, call, count, elem_bytes):
    """Start a count-form instruction over `count` elements whose widest operand has `elem_bytes` bytes each:
    False if it must do nothing (fault, or count 0)."""
    if not issue(c, call):
        return False
    if count < 0:
        fault(c, F_PARAM, call, P_COUNT, count, 0, 2147483647)
        return False
    vector(c, call, repeats_of(count, elem_bytes))
    c.state[CNT_V_ELEMS] += count
    return count > 0


@aicore
def _binary_begin(c, call, dst, src0, src1, count):
    """Start a count-form dst = f(src0, src1): the three UB offsets, dst's -1 if the call must do nothing."""
    if not _begin(c, call, count, dst.itemsize):
        return -1, -1, -1
    d = _operand(c, call, dst, count)
    s0 = _operand(c, call, src0, count)
    s1 = _operand(c, call, src1, count)
    if d < 0 or s0 < 0 or s1 < 0:
        return -1, -1, -1
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, call, d, count * dst.itemsize, s0, count * src0.itemsize, s1, count * src1.itemsize)
    return d, s0, s1


@aicore
def _scalar_begin(c, call, dst, src, count):
    """Start a count-form dst = f(src, scalar): the two UB offsets, dst's -1 if the call must do nothing."""
    if not _begin(c, call, count, dst.itemsize):
        return -1, -1
    d = _operand(c, call, dst, count)
    o = _operand(c, call, src, count)
    if d < 0 or o < 0:
        return -1, -1
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, call, d, count * dst.itemsize, o, count * src.itemsize, -1, 0)
    return d, o


@outline
def add(c, dst, src0, src1, count):
    """Add(dst, src0, src1, count): dst[i] = src0[i] + src1[i]."""
    d, s0, s1 = _binary_begin(c, CALL_ADD, dst, src0, src1, count)
    if d < 0:
        return
    # an in-place form indexes the shared operand through one array: with two names for the same bytes
    # LLVM's overlap check fails at run time and the loop would run unvectorised
    if d == s0:
        for i in range(count):
            dst[i] = dst[i] + src1[i]
    elif d == s1:
        for i in range(count):
            dst[i] = src0[i] + dst[i]
    else:
        for i in range(count):
            dst[i] = src0[i] + src1[i]
    note_ub_write(c, d + count * dst.itemsize)


@outline
def mul(c, dst, src0, src1, count):
    """Mul(dst, src0, src1, count): dst[i] = src0[i] * src1[i]."""
    d, s0, s1 = _binary_begin(c, CALL_MUL, dst, src0, src1, count)
    if d < 0:
        return
    if d == s0:        # in place: see add
        for i in range(count):
            dst[i] = dst[i] * src1[i]
    elif d == s1:
        for i in range(count):
            dst[i] = src0[i] * dst[i]
    else:
        for i in range(count):
            dst[i] = src0[i] * src1[i]
    note_ub_write(c, d + count * dst.itemsize)


@outline
def muls(c, dst, src, scalar, count):
    """Muls(dst, src, scalar, count): dst[i] = src[i] * scalar (scalar in the tensor's type)."""
    d, o = _scalar_begin(c, CALL_MULS, dst, src, count)
    if d < 0:
        return
    s = as_elem(dst, scalar)
    if d == o:         # in place: see add
        for i in range(count):
            dst[i] = dst[i] * s
    else:
        for i in range(count):
            dst[i] = src[i] * s
    note_ub_write(c, d + count * dst.itemsize)


@outline
def muls_half(c, dst, src, scalar, dt, count):
    """Muls(dst, src, scalar, count) on half / bfloat16_t (`dt`) tensors held as uint16 bits: the fp32 product
    (exact: both significands fit twice in fp32's) rounded once to T half to even; `scalar` as float32, taken
    as T first (the scalar argument's type is T)."""
    d, o = _scalar_begin(c, CALL_MULS, dst, src, count)
    if d < 0:
        return
    bits = view_f32_as_u32(np.float32(scalar))
    if dt == DT_BF16:
        s = f32_from_bits(bf16_bits_to_f32_bits(f32_bits_to_bf16_bits_rint(bits)))
    else:
        s = f32_from_bits(f16_bits_to_f32_bits(f32_bits_to_f16_bits(bits, CAST_RINT)))
    for i in range(count):     # in place is safe: element i reads only src[i]
        if dt == DT_BF16:
            p = np.float32(f32_from_bits(bf16_bits_to_f32_bits(src[i])) * s)
            dst[i] = f32_bits_to_bf16_bits_rint(view_f32_as_u32(p))
        else:
            p = np.float32(f32_from_bits(f16_bits_to_f32_bits(src[i])) * s)
            dst[i] = f32_bits_to_f16_bits(view_f32_as_u32(p), CAST_RINT)
    note_ub_write(c, d + count * dst.itemsize)


@outline
def adds(c, dst, src, scalar, count):
    """Adds(dst, src, scalar, count): dst[i] = src[i] + scalar."""
    d, o = _scalar_begin(c, CALL_ADDS, dst, src, count)
    if d < 0:
        return
    s = as_elem(dst, scalar)
    if d == o:         # in place: see add
        for i in range(count):
            dst[i] = dst[i] + s
    else:
        for i in range(count):
            dst[i] = src[i] + s
    note_ub_write(c, d + count * dst.itemsize)


@outline
def duplicate(c, dst, scalar, count):
    """Duplicate(dst, scalar, count): fill the first count elements with scalar."""
    if not _begin(c, CALL_DUPLICATE, count, dst.itemsize):
        return
    d = _operand(c, CALL_DUPLICATE, dst, count)
    if d < 0:
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, CALL_DUPLICATE, d, count * dst.itemsize, -1, 0, -1, 0)
    s = as_elem(dst, scalar)
    for i in range(count):
        dst[i] = s
    note_ub_write(c, d + count * dst.itemsize)


# --- Cast -------------------------------------------------------------------------------
def cast(c, dst, dst_dt, src, src_dt, round_mode, count):
    """Cast(dst, src, RoundMode, count) with explicit ge dtype codes (fp16 and bf16 share uint16 storage)."""
    raise NotImplementedError("cast is only callable from numba code")


@aicore
def _cast_begin(c, supported, dst_dt, src_dt, mode, count, elem_bytes):
    """Start a Cast: False after recording F_CAST_PAIR when the (dtypes, round mode) pair is unsupported,
    or when the instruction must do nothing."""
    if not supported:
        if issue(c, CALL_CAST):
            fault(c, F_CAST_PAIR, CALL_CAST, dst_dt, src_dt, mode)
        return False
    return _begin(c, CALL_CAST, count, elem_bytes)


@outline
def _cast_half_to_f32(c, dst, dst_dt, src, src_dt, mode, count):
    supported = mode == CAST_NONE and (src_dt == DT_BF16 or src_dt == DT_FLOAT16)
    if not _cast_begin(c, supported, dst_dt, src_dt, mode, count, 4):
        return
    d = _operand(c, CALL_CAST, dst, count)
    s = _operand(c, CALL_CAST, src, count)
    if d < 0 or s < 0:
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, CALL_CAST, d, count * 4, s, count * src.itemsize, -1, 0)
    out = c.ub[d: d + 4 * count].view(np.uint32)   # dst seen as fp32 bit patterns
    if src_dt == DT_BF16:
        for i in range(count):
            out[i] = bf16_bits_to_f32_bits(src[i])
    else:
        for i in range(count):
            out[i] = f16_bits_to_f32_bits(src[i])
    note_ub_write(c, d + count * 4)


@outline
def _cast_f32_to_half(c, dst, dst_dt, src, src_dt, mode, count):
    bf16_ok = dst_dt == DT_BF16 and (mode == CAST_RINT or mode == CAST_FLOOR or mode == CAST_CEIL
                                     or mode == CAST_ROUND or mode == CAST_TRUNC)
    f16_ok = dst_dt == DT_FLOAT16 and CAST_NONE <= mode <= CAST_ODD
    if not _cast_begin(c, bf16_ok or f16_ok, dst_dt, src_dt, mode, count, 4):
        return
    d = _operand(c, CALL_CAST, dst, count)
    s = _operand(c, CALL_CAST, src, count)
    if d < 0 or s < 0:
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, CALL_CAST, d, count * 2, s, count * 4, -1, 0)
    bits = c.ub[s: s + 4 * count].view(np.uint32)
    if dst_dt == DT_BF16 and mode == CAST_RINT:     # the common case, branch-free so that it vectorises
        for i in range(count):
            dst[i] = f32_bits_to_bf16_bits_rint(bits[i])
    elif dst_dt == DT_BF16:
        for i in range(count):
            dst[i] = f32_bits_to_bf16_bits(bits[i], mode)
    else:
        for i in range(count):
            dst[i] = f32_bits_to_f16_bits(bits[i], mode)
    note_ub_write(c, d + count * 2)


@outline
def _cast_int_to_f32(c, dst, dst_dt, src, src_dt, mode, count):
    if not _cast_begin(c, CAST_NONE <= mode <= CAST_TRUNC, dst_dt, src_dt, mode, count, max(4, src.itemsize)):
        return
    d = _operand(c, CALL_CAST, dst, count)
    s = _operand(c, CALL_CAST, src, count)
    if d < 0 or s < 0:
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, CALL_CAST, d, count * 4, s, count * src.itemsize, -1, 0)
    out = c.ub[d: d + 4 * count].view(np.uint32)
    # in place is allowed (the sorts widen keys where they lie): element i is read before any write reaches it
    for i in range(count):
        out[i] = i64_to_f32_bits(src[i], mode)
    note_ub_write(c, d + count * 4)


@outline
def _cast_i32_to_i64(c, dst, dst_dt, src, src_dt, mode, count):
    """Cast<int64_t, int32_t>(dst, src, CAST_NONE, count): sign extension (MoeInitRoutingV3's expert counts)."""
    if not _cast_begin(c, mode == CAST_NONE, dst_dt, src_dt, mode, count, 8):
        return
    d = _operand(c, CALL_CAST, dst, count)
    s = _operand(c, CALL_CAST, src, count)
    if d < 0 or s < 0:
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, CALL_CAST, d, count * 8, s, count * 4, -1, 0)
    for i in range(count):
        dst[i] = np.int64(src[i])
    note_ub_write(c, d + count * 8)


@overload(cast, jit_options=DEVICE_JIT_OPTIONS)
def _cast(c, dst, dst_dt, src, src_dt, round_mode, count):
    if dst.dtype == types.int64 and src.dtype == types.int32:
        def widen_int(c, dst, dst_dt, src, src_dt, round_mode, count):
            _cast_i32_to_i64(c, dst, dst_dt, src, src_dt, round_mode, count)
        return widen_int
    if dst.dtype == types.float32 and src.dtype in (types.int32, types.int64):
        def from_int(c, dst, dst_dt, src, src_dt, round_mode, count):
            _cast_int_to_f32(c, dst, dst_dt, src, src_dt, round_mode, count)
        return from_int
    if dst.dtype == types.float32 and src.dtype == types.uint16:
        def widen(c, dst, dst_dt, src, src_dt, round_mode, count):
            _cast_half_to_f32(c, dst, dst_dt, src, src_dt, round_mode, count)
        return widen
    if dst.dtype == types.uint16 and src.dtype == types.float32:
        def narrow(c, dst, dst_dt, src, src_dt, round_mode, count):
            _cast_f32_to_half(c, dst, dst_dt, src, src_dt, round_mode, count)
        return narrow

    def unsupported(c, dst, dst_dt, src, src_dt, round_mode, count):
        if issue(c, CALL_CAST):
            fault(c, F_CAST_PAIR, CALL_CAST, dst_dt, src_dt, round_mode)
    return unsupported


# --- repeat form ---------------------------------------------------------------------------
@aicore
def _repeat_ok(c, call, t_itemsize, mask, repeat):
    if repeat < 0 or repeat > MAX_REPEAT:
        fault(c, F_PARAM, call, P_REPEAT, repeat, 0, MAX_REPEAT)
        return False
    lanes = REPEAT_BYTES // t_itemsize
    if mask < 0 or mask > lanes:
        fault(c, F_PARAM, call, P_MASK, mask, 0, lanes)
        return False
    return True


@aicore
def _repeat_span_elems(t, mask, repeat, rep_stride, blk_stride):
    """Elements from t's start that a repeat-form operand touches (strides >= 0)."""
    per_block = 32 // t.itemsize
    end = 0
    for b in range((mask + per_block - 1) // per_block):
        lanes = min(per_block, mask - b * per_block)
        end = max(end, ((repeat - 1) * rep_stride + b * blk_stride) * per_block + lanes)
    return end


@aicore
def _repeat_extent(c, call, t, mask, repeat, rep_stride, blk_stride):
    """Elements of t a repeat-form operand touches (strides >= 0), or -1 if beyond t (fault recorded)."""
    end = _repeat_span_elems(t, mask, repeat, rep_stride, blk_stride)
    if end > t.size:
        fault(c, F_UB_OOB, call, ub_offset(c, t, call), end * t.itemsize, t.nbytes)
        return -1
    return end


@aicore
def _copy_operands(c, dst, src, dst_elems, src_elems):
    """The operand checks of both Copy forms: dst and src 32-byte aligned, holding the dst_elems / src_elems
    elements from their starts that the instruction touches; in checked mode the accesses are recorded. dst's UB
    offset, or -1 after a fault."""
    if dst.itemsize != src.itemsize:
        # Copy<T> takes one T (fp16 and bf16 share their storage: the element width is what a view tells apart)
        fault(c, F_ELEM_TYPE, CALL_COPY, dst.itemsize, src.itemsize)
        return -1
    return vector_operands(c, CALL_COPY, dst, dst_elems, src, src_elems)


@outline(as_width=("dst", "src"))
def copy_count(c, dst, src, count):
    """Copy(dst, src, count), the count form of the UB -> UB Copy (Ascend 950): dst[i] = src[i] for i < count,
    both operands 32-byte aligned and of one element type."""
    if not _begin(c, CALL_COPY, count, dst.itemsize):
        return
    d = _copy_operands(c, dst, src, count, count)
    if d < 0:
        return
    for i in range(count):
        dst[i] = src[i]
    note_ub_write(c, d + count * dst.itemsize)


@outline(as_width=("dst", "src"))
def copy(c, dst, src, mask, repeat, params):
    """Copy(dst, src, mask, repeatTime, CopyRepeatParams): UB -> UB, repeat by repeat."""
    if not issue(c, CALL_COPY) or not _repeat_ok(c, CALL_COPY, dst.itemsize, mask, repeat):
        return
    vector(c, CALL_COPY, repeat)
    if mask == 0 or repeat == 0:
        return
    if min(params.dstStride, params.srcStride, params.dstRepeatSize, params.srcRepeatSize) < 0:
        fault(c, F_PARAM, CALL_COPY, P_BLK_STRIDE, min(params.dstStride, params.srcStride), 0, 65535)
        return
    d_end = _repeat_span_elems(dst, mask, repeat, params.dstRepeatSize, params.dstStride)
    s_end = _repeat_span_elems(src, mask, repeat, params.srcRepeatSize, params.srcStride)
    d = _copy_operands(c, dst, src, d_end, s_end)
    if d < 0:
        return
    per_block = 32 // dst.itemsize
    for r in range(repeat):
        for lane in range(mask):
            blk = lane // per_block
            k = lane % per_block
            dst[(r * params.dstRepeatSize + blk * params.dstStride) * per_block + k] = \
                src[(r * params.srcRepeatSize + blk * params.srcStride) * per_block + k]
    c.state[CNT_V_ELEMS] += mask * repeat
    note_ub_write(c, d + d_end * dst.itemsize)


@aicore
def _tree8(a0, a1, a2, a3, a4, a5, a6, a7):
    return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))


@aicore
def _block_sum(src, base, lanes):
    """Pairwise tree of one 32-byte block (8 fp32 lanes; lanes >= `lanes` count as +0)."""
    if lanes >= 8:
        return _tree8(src[base], src[base + 1], src[base + 2], src[base + 3],
                      src[base + 4], src[base + 5], src[base + 6], src[base + 7])
    z = np.float32(0.0)
    return _tree8(src[base] if lanes > 0 else z, src[base + 1] if lanes > 1 else z,
                  src[base + 2] if lanes > 2 else z, src[base + 3] if lanes > 3 else z,
                  src[base + 4] if lanes > 4 else z, src[base + 5] if lanes > 5 else z,
                  src[base + 6] if lanes > 6 else z, z)


@aicore
def _repeat_tree(src, base, block_step, mask):
    """Pairwise tree over one repeat's 64 lanes (first `mask` taken, the rest +0): the tree of the block trees."""
    z = np.float32(0.0)
    b0 = _block_sum(src, base, mask) if mask > 0 else z
    b1 = _block_sum(src, base + block_step, mask - 8) if mask > 8 else z
    b2 = _block_sum(src, base + 2 * block_step, mask - 16) if mask > 16 else z
    b3 = _block_sum(src, base + 3 * block_step, mask - 24) if mask > 24 else z
    b4 = _block_sum(src, base + 4 * block_step, mask - 32) if mask > 32 else z
    b5 = _block_sum(src, base + 5 * block_step, mask - 40) if mask > 40 else z
    b6 = _block_sum(src, base + 6 * block_step, mask - 48) if mask > 48 else z
    b7 = _block_sum(src, base + 7 * block_step, mask - 56) if mask > 56 else z
    return _tree8(b0, b1, b2, b3, b4, b5, b6, b7)


@aicore
def _reduce_begin(c, call, dst, src, mask, repeat, dst_rep_stride, src_blk_stride, src_rep_stride):
    """Shared checks of the fp32 reductions; dst UB offset, or -1 if the instruction must do nothing."""
    if not issue(c, call) or not _repeat_ok(c, call, src.itemsize, mask, repeat):
        return -1
    vector(c, call, repeat)
    if mask == 0 or repeat == 0:
        return -1
    if min(dst_rep_stride, src_blk_stride, src_rep_stride) < 0:
        fault(c, F_PARAM, call, P_BLK_STRIDE, min(dst_rep_stride, src_blk_stride, src_rep_stride), 0, 65535)
        return -1
    d = ub_offset(c, dst, call)
    if d < 0:
        return -1
    if d % 4 != 0:
        fault(c, F_UB_ALIGN, call, d, 4)
        return -1
    s = ub_aligned_offset(c, src, call)
    if s < 0:
        return -1
    s_end = _repeat_extent(c, call, src, mask, repeat, src_rep_stride, src_blk_stride)
    if s_end < 0:
        return -1
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_V, s, s_end * src.itemsize, False)
    c.state[CNT_V_ELEMS] += mask * repeat
    return d


@outline
def block_reduce_sum(c, dst, src, repeat, mask, dst_rep_stride, src_blk_stride, src_rep_stride):
    """BlockReduceSum(dst, src, repeatTime, mask, dstRepStride, srcBlkStride, srcRepStride) for fp32.

    Each 32-byte block of a repeat (8 lanes; lanes past `mask` count as +0) becomes one sum;
    repeat r writes its sums at dst[r * dstRepStride * 8 ...]. In-place use is allowed: a repeat
    reads all its lanes before writing.
    """
    call = CALL_BLOCK_REDUCE_SUM
    d = _reduce_begin(c, call, dst, src, mask, repeat, dst_rep_stride, src_blk_stride, src_rep_stride)
    if d < 0:
        return
    blocks = (mask + 7) // 8
    dst_end = (repeat - 1) * dst_rep_stride * 8 + blocks
    if dst_end > dst.size:
        fault(c, F_UB_OOB, call, d, dst_end * 4, dst.nbytes)
        return
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_V, d, dst_end * 4, True)
    for r in range(repeat):
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = np.float32(0.0)
        for b in range(blocks):
            v = _block_sum(src, (r * src_rep_stride + b * src_blk_stride) * 8, mask - b * 8)
            if b == 0:
                s0 = v
            elif b == 1:
                s1 = v
            elif b == 2:
                s2 = v
            elif b == 3:
                s3 = v
            elif b == 4:
                s4 = v
            elif b == 5:
                s5 = v
            elif b == 6:
                s6 = v
            else:
                s7 = v
        out = r * dst_rep_stride * 8
        sums = (s0, s1, s2, s3, s4, s5, s6, s7)
        for b in range(blocks):
            dst[out + b] = sums[b]
    note_ub_write(c, d + dst_end * 4)


@outline
def whole_reduce_sum(c, dst, src, mask, repeat, dst_rep_stride, src_blk_stride, src_rep_stride):
    """WholeReduceSum(dst, src, mask, repeatTime, dstRepStride, srcBlkStride, srcRepStride) for fp32.

    Each repeat's first `mask` lanes (of 64) are summed as a pairwise tree over all 64 lanes
    (the rest +0) and written to dst[r * dstRepStride]; dst needs only 4-byte alignment.
    """
    call = CALL_WHOLE_REDUCE_SUM
    d = _reduce_begin(c, call, dst, src, mask, repeat, dst_rep_stride, src_blk_stride, src_rep_stride)
    if d < 0:
        return
    dst_end = (repeat - 1) * dst_rep_stride + 1
    if dst_end > dst.size:
        fault(c, F_UB_OOB, call, d, dst_end * 4, dst.nbytes)
        return
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_V, d, dst_end * 4, True)
    for r in range(repeat):
        dst[r * dst_rep_stride] = _repeat_tree(src, r * src_rep_stride * 8, src_blk_stride * 8, mask)
    note_ub_write(c, d + dst_end * 4)
