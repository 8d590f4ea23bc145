"""Compare-and-select instructions of the vector unit (numba): CompareScalar, GatherMask, and the two
Casts the masked select needs that vector.cast lacks (uint8 -> half, float -> int32).

* `compare_scalar` is CompareScalar / Compares, count form: one bit per element, written little-endian
  (bit k of the result is element k: byte k // 8, bit k % 8). The count must cover whole 256-byte
  repeats: AscendC documents that the elements of a partial repeat take no part, so a count that is
  not a multiple is an AlignmentError here instead of a silently short bit mask.
* `gather_mask` is GatherMask with a user pattern (a uint16 tensor for 2-byte data, uint32 for
  4-byte data): the elements whose pattern bit is 1 are packed to the front of dst in order, and
  the count kept (rsvdCnt) is returned. Normal mode (reduceMode false): each repeat covers 256 bytes
  and `mask` is ignored; counter mode (true, the A2/A3/950 "configuration 1"): each repeat covers
  `mask` elements. Within a repeat pattern bits are consumed contiguously; repeat r starts at
  pattern block r * src1RepeatStride (32-byte blocks) and source block r * src0RepeatStride.

Operands must be 32-byte aligned and stay inside their LocalTensors; counters count one
instruction and the elements it examines, as vector.py does.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import types
from numba.extending import overload

from . import check as chk
from ._jit import DEVICE_JIT_OPTIONS, aicore
from ._outline import outline, outline_int
from .dtypes import (
    CAST_CEIL,
    CAST_FLOOR,
    CAST_NONE,
    CAST_RINT,
    CAST_ROUND,
    CAST_TRUNC,
    DT_BF16,
    DT_FLOAT,
    DT_FLOAT16,
    DT_INT32,
    DT_UINT8,
    bf16_bits_to_f32_bits,
    f16_bits_to_f32_bits,
    f32_bits_to_bf16_bits,
    f32_bits_to_f16_bits,
    f32_from_bits,
    i64_to_f32_bits,
    view_f32_as_u32,
)
from .faults import fault, issue
from .layout import (
    CALL_CAST,
    CALL_COMPARE_SCALAR,
    CALL_GATHER_MASK,
    CAP_NPU_ARCH,
    CHK_MODE,
    CNT_V_ELEMS,
    F_CAST_PAIR,
    F_COUNT_BYTES,
    F_PARAM,
    F_PATTERN_TYPE,
    F_UB_OOB,
    F_UNSUPPORTED,
    P_BLK_STRIDE,
    P_COUNT,
    P_MASK,
    P_REPEAT,
    PIPE_V,
)
from .local import check_count, note_ub_write, ub_aligned_offset, ub_offset, vector_operands
from .timeline import repeats_of, vector

# AscendC CMPMODE
CMP_LT = 0
CMP_GT = 1
CMP_EQ = 2
CMP_LE = 3
CMP_GE = 4
CMP_NE = 5

REPEAT_BYTES = 256
MAX_REPEAT = 255
MAX_COUNTER_MASK = 4294967295
NPU_ARCH_950 = 3510

GatherMaskParams = namedtuple("GatherMaskParams",
                              ["src0BlockStride", "repeatTimes", "src0RepeatStride", "src1RepeatStride"])
"""Strides in 32-byte blocks: between blocks of a repeat (src0), and between repeats (src0, pattern)."""


# --- CompareScalar -----------------------------------------------------------------------------
@aicore
def _as_f32(bits_or_value, dt):
    """An element of a compared tensor as float32 (fp16 / bf16 arrive as uint16 bits; widening is exact)."""
    if dt == DT_FLOAT16:
        return f32_from_bits(f16_bits_to_f32_bits(np.uint16(bits_or_value)))
    if dt == DT_BF16:
        return f32_from_bits(bf16_bits_to_f32_bits(np.uint16(bits_or_value)))
    return np.float32(bits_or_value)


@aicore
def _scalar_in(dt, scalar):
    """The scalar operand in the tensor's type (static_cast<T>): fp16 rounds half-even, then widened back."""
    if dt == DT_FLOAT16:
        return f32_from_bits(f16_bits_to_f32_bits(f32_bits_to_f16_bits(view_f32_as_u32(np.float32(scalar)),
                                                                       CAST_RINT)))
    return np.float32(scalar)


@aicore
def _holds(a, b, mode):
    if mode == CMP_LT:
        return a < b
    if mode == CMP_GT:
        return a > b
    if mode == CMP_EQ:
        return a == b
    if mode == CMP_LE:
        return a <= b
    if mode == CMP_GE:
        return a >= b
    return a != b


@aicore
def _compare_supported(c, src_dt, mode):
    """A2/A3 take half and float in every mode and int32 with EQ only; the 950 also bf16 and int32 in
    every mode (the dtypes the masked-select ops can meet)."""
    arch950 = c.state[CAP_NPU_ARCH] == NPU_ARCH_950
    if mode < CMP_LT or mode > CMP_NE:
        return False
    if src_dt == DT_FLOAT16 or src_dt == DT_FLOAT:
        return True
    if src_dt == DT_BF16:
        return arch950
    if src_dt == DT_INT32:
        return arch950 or mode == CMP_EQ
    return False


@outline
def compare_scalar(c, dst, src, src_dt, scalar, cmp_mode, count):
    """CompareScalar(dst, src, scalar, CMPMODE, count): bit k of dst (uint8) = (src[k] <cmp_mode> scalar).

    `src_dt` is the ge code of src (fp16 / bf16 come as uint16 bits); `count` elements must fill whole
    256-byte repeats; dst needs count / 8 bytes. int32 is compared exactly, the float types in fp32
    after an exact widening (NaN is unequal to everything).
    """
    call = CALL_COMPARE_SCALAR
    if not issue(c, call):
        return
    if not _compare_supported(c, src_dt, cmp_mode):
        fault(c, F_UNSUPPORTED, call, src_dt, cmp_mode, c.state[CAP_NPU_ARCH])
        return
    if count < 0:
        fault(c, F_PARAM, call, P_COUNT, count, 0, 2147483647)
        return
    if (count * src.itemsize) % REPEAT_BYTES != 0:
        fault(c, F_COUNT_BYTES, call, count * src.itemsize, REPEAT_BYTES)
        return
    vector(c, call, repeats_of(count, src.itemsize))
    c.state[CNT_V_ELEMS] += count
    if count == 0:
        return
    d = ub_aligned_offset(c, dst, call)
    s = ub_aligned_offset(c, src, call)
    if d < 0 or s < 0:
        return
    if not check_count(c, src, count, call) or not check_count(c, dst, count // 8, call):
        return
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, call, d, count // 8, s, count * src.itemsize, -1, 0)
    if src_dt == DT_INT32:
        s_int = np.int32(scalar)
        for byte in range(count // 8):
            bits = 0
            for k in range(8):
                if _holds(src[8 * byte + k], s_int, cmp_mode):
                    bits |= 1 << k
            dst[byte] = bits
    elif (src_dt == DT_FLOAT16 or src_dt == DT_BF16) and (cmp_mode == CMP_EQ or cmp_mode == CMP_NE):
        # (in)equality of 16-bit floats widened exactly to fp32 is a test of the bit pattern: the scalar's own
        # encoding, both zeros for 0, nothing for NaN or a scalar the type cannot hold
        s = _scalar_in(src_dt, scalar)
        s_bits = view_f32_as_u32(s)
        enc = f32_bits_to_f16_bits(s_bits, CAST_RINT) if src_dt == DT_FLOAT16 else \
            f32_bits_to_bf16_bits(s_bits, CAST_RINT)
        exact = s == s and _as_f32(enc, src_dt) == s
        keep = np.uint16(0x7FFF) if s == 0 else np.uint16(0xFFFF)
        target = np.uint16(0) if s == 0 else np.uint16(enc)
        want_equal = cmp_mode == CMP_EQ
        for byte in range(count // 8):
            bits = 0
            for k in range(8):
                equal = exact and (np.uint16(src[8 * byte + k]) & keep) == target
                if equal == want_equal:
                    bits |= 1 << k
            dst[byte] = bits
    else:
        s = _scalar_in(src_dt, scalar)
        for byte in range(count // 8):
            bits = 0
            for k in range(8):
                if _holds(_as_f32(src[8 * byte + k], src_dt), s, cmp_mode):
                    bits |= 1 << k
            dst[byte] = bits
    note_ub_write(c, d + count // 8)


# --- GatherMask (user pattern) ---------------------------------------------------------------------
def gather_mask(c, dst, src0, src1_pattern, reduce_mode, mask, params):
    """GatherMask(dst, src0, src1Pattern, reduceMode, mask, GatherMaskParams, rsvdCnt) -> rsvdCnt."""
    raise NotImplementedError("gather_mask is only callable from numba code")


@aicore
def _element_index(r, j, per_block, params):
    """Index into src0 of element j of repeat r."""
    return (r * params.src0RepeatStride + (j // per_block) * params.src0BlockStride) * per_block + j % per_block


@aicore
def _popcount8(byte):
    x = np.uint32(byte)
    x = x - ((x >> np.uint32(1)) & np.uint32(0x55))
    x = (x & np.uint32(0x33)) + ((x >> np.uint32(2)) & np.uint32(0x33))
    return np.int64((x + (x >> np.uint32(4))) & np.uint32(0x0F))


@aicore
def _bit(pattern_bytes, bit_index):
    return (pattern_bytes[bit_index >> 3] >> (bit_index & 7)) & 1


@outline_int
def _gather_mask(c, dst, src0, src1_pattern, reduce_mode, mask, params):
    call = CALL_GATHER_MASK
    if not issue(c, call):
        return 0
    isz = src0.itemsize
    if src1_pattern.itemsize != isz:
        fault(c, F_PATTERN_TYPE, call, src1_pattern.itemsize, isz)
        return 0
    if isz != 2 and isz != 4 and not (isz == 1 and c.state[CAP_NPU_ARCH] == NPU_ARCH_950):
        fault(c, F_UNSUPPORTED, call, DT_UINT8 if isz == 1 else DT_INT32, 0, c.state[CAP_NPU_ARCH])
        return 0
    repeat = params.repeatTimes
    if repeat < 0 or repeat > MAX_REPEAT:
        fault(c, F_PARAM, call, P_REPEAT, repeat, 0, MAX_REPEAT)
        return 0
    if reduce_mode and (mask < 1 or mask > MAX_COUNTER_MASK):
        fault(c, F_PARAM, call, P_MASK, mask, 1, MAX_COUNTER_MASK)
        return 0
    if min(params.src0BlockStride, params.src0RepeatStride, params.src1RepeatStride) < 0:
        fault(c, F_PARAM, call, P_BLK_STRIDE,
              min(params.src0BlockStride, params.src0RepeatStride, params.src1RepeatStride), 0, 65535)
        return 0
    vector(c, call, repeat)
    lanes = mask if reduce_mode else REPEAT_BYTES // isz
    if repeat == 0:
        return 0
    d = ub_aligned_offset(c, dst, call)
    p = ub_aligned_offset(c, src1_pattern, call)
    if d < 0 or p < 0 or ub_aligned_offset(c, src0, call) < 0:
        return 0
    per_block = 32 // isz
    src_end = _element_index(repeat - 1, lanes - 1, per_block, params) + 1
    if src_end > src0.size:
        fault(c, F_UB_OOB, call, ub_offset(c, src0, call), src_end * isz, src0.nbytes)
        return 0
    bit_stride = params.src1RepeatStride * 256          # a 32-byte pattern block holds 256 bits
    pattern_end = ((repeat - 1) * bit_stride + lanes + 7) // 8
    if pattern_end > src1_pattern.nbytes:
        fault(c, F_UB_OOB, call, p, pattern_end, src1_pattern.nbytes)
        return 0
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_V, ub_offset(c, src0, call), src_end * isz, False)
        chk.ub(c, call, PIPE_V, p, pattern_end, False)
    pattern_bytes = c.ub[p: p + pattern_end]
    # one repeat over contiguous elements (how the masked select calls it): element j is bit j, so whole
    # pattern bytes are counted and skipped at once (a routing map's pattern is mostly zero bytes)
    contiguous = repeat == 1 and params.src0BlockStride == 1
    kept = 0
    if contiguous:
        for b in range(lanes >> 3):
            kept += _popcount8(pattern_bytes[b])
        for j in range(lanes & ~7, lanes):
            kept += _bit(pattern_bytes, j)
    else:
        for r in range(repeat):
            for j in range(lanes):
                kept += _bit(pattern_bytes, r * bit_stride + j)
    if kept > dst.size:
        fault(c, F_UB_OOB, call, d, kept * isz, dst.nbytes)
        return 0
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_V, d, kept * isz, True)
    c.state[CNT_V_ELEMS] += lanes * repeat
    # packing forward never overtakes the reads, so dst may be src0 itself (the documented in-place use)
    out = 0
    if contiguous:
        for b in range(lanes >> 3):
            bits = pattern_bytes[b]
            if bits == 0:
                continue
            for k in range(8):
                if (bits >> k) & 1:
                    dst[out] = src0[8 * b + k]
                    out += 1
        for j in range(lanes & ~7, lanes):
            if _bit(pattern_bytes, j):
                dst[out] = src0[j]
                out += 1
    else:
        for r in range(repeat):
            for j in range(lanes):
                if _bit(pattern_bytes, r * bit_stride + j):
                    dst[out] = src0[_element_index(r, j, per_block, params)]
                    out += 1
    note_ub_write(c, d + kept * isz)
    return kept


@overload(gather_mask, jit_options=DEVICE_JIT_OPTIONS)
def _gather_mask_typed(c, dst, src0, src1_pattern, reduce_mode, mask, params):
    if isinstance(src1_pattern, types.Array) and src1_pattern.dtype not in (types.uint8, types.uint16, types.uint32):
        raise TypeError(f"GatherMask pattern must be an unsigned LocalTensor, got {src1_pattern.dtype}")

    carrier = _move_carrier(dst, src0)
    if carrier is not None:
        # GatherMask only moves elements: int32 / float32 / uint32 tensors share the uint32 variant (one compiled
        # variant per element width instead of per type); faults read itemsize, nbytes and addresses, all the same
        def impl_width(c, dst, src0, src1_pattern, reduce_mode, mask, params):
            return _gather_mask(c, dst.view(carrier), src0.view(carrier), src1_pattern, reduce_mode, mask, params)
        return impl_width

    def impl(c, dst, src0, src1_pattern, reduce_mode, mask, params):
        return _gather_mask(c, dst, src0, src1_pattern, reduce_mode, mask, params)
    return impl


_MOVE_CARRIERS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _move_carrier(dst, src0):
    """The unsigned type of the same width GatherMask moves dst / src0 elements as, or None (the two differ in
    type, or are not 1-D C-contiguous arrays of integers / floats: compiled as they are)."""
    ok = (isinstance(dst, types.Array) and isinstance(src0, types.Array) and dst.dtype == src0.dtype
          and dst.ndim == 1 and src0.ndim == 1 and dst.layout == "C" and src0.layout == "C"
          and isinstance(dst.dtype, (types.Integer, types.Float)))
    return _MOVE_CARRIERS.get(dst.dtype.bitwidth) if ok else None


# --- the two Casts vector.cast does not have -------------------------------------------------------
@aicore
def _cast_checks(c, supported, dst_dt, src_dt, mode, dst, src, count):
    """Shared Cast prologue: dst UB offset, or -1 when the Cast must do nothing (fault, or count 0)."""
    if not issue(c, CALL_CAST):
        return -1
    if not supported:
        fault(c, F_CAST_PAIR, CALL_CAST, dst_dt, src_dt, mode)
        return -1
    if count < 0:
        fault(c, F_PARAM, CALL_CAST, P_COUNT, count, 0, 2147483647)
        return -1
    vector(c, CALL_CAST, repeats_of(count, max(dst.itemsize, src.itemsize)))
    c.state[CNT_V_ELEMS] += count
    if count == 0:
        return -1
    return vector_operands(c, CALL_CAST, dst, count, src, count)


@outline
def cast_u8_to_half(c, dst, src, round_mode, count):
    """Cast<half, uint8_t>(dst, src, CAST_NONE, count): dst (uint16 fp16 bits) = src exactly (0..255)."""
    d = _cast_checks(c, round_mode == CAST_NONE, DT_FLOAT16, DT_UINT8, round_mode, dst, src, count)
    if d < 0:
        return
    # read all first: the kernels widen in place only across buffers, but a same-buffer call stays correct
    values = src[:count].copy()
    for i in range(count):
        dst[i] = f32_bits_to_f16_bits(i64_to_f32_bits(values[i], CAST_NONE), CAST_RINT)
    note_ub_write(c, d + 2 * count)


@aicore
def _round_to_int(x, mode):
    """float32 -> integral float64 under a round mode (CAST_RINT half-even, CAST_ROUND half away from 0)."""
    v = np.float64(x)
    if mode == CAST_FLOOR:
        return np.floor(v)
    if mode == CAST_CEIL:
        return np.ceil(v)
    if mode == CAST_TRUNC:
        return np.trunc(v)
    if mode == CAST_ROUND:
        return np.floor(v + 0.5) if v >= 0 else -np.floor(-v + 0.5)
    return np.rint(v)


@outline
def cast_f32_to_i32(c, dst, src, round_mode, count):
    """Cast<int32_t, float>(dst, src, RoundMode, count) for CAST_RINT / FLOOR / CEIL / ROUND / TRUNC.

    Out-of-range values saturate to the int32 limits and NaN becomes 0 (the vector unit saturates;
    the masked select only converts small whole counts).
    """
    supported = (round_mode == CAST_RINT or round_mode == CAST_FLOOR or round_mode == CAST_CEIL
                 or round_mode == CAST_ROUND or round_mode == CAST_TRUNC)
    d = _cast_checks(c, supported, DT_INT32, DT_FLOAT, round_mode, dst, src, count)
    if d < 0:
        return
    for i in range(count):
        x = src[i]
        if x != x:
            dst[i] = 0
            continue
        v = _round_to_int(x, round_mode)
        if v >= 2147483647.0:
            dst[i] = 2147483647
        elif v <= -2147483648.0:
            dst[i] = -2147483648
        else:
            dst[i] = np.int32(v)
    note_ub_write(c, d + 4 * count)
