"""Data movement between Global Memory and the Unified Buffer (numba).

* `data_copy_pad` is AscendC DataCopyPad in both directions, with the unit flip of
  DataCopyExtParams: GM->UB strides are bytes on GM and 32-byte blocks on UB; UB->GM
  strides are 32-byte blocks on UB and bytes on GM. `blockLen` is always bytes. Each block
  occupies AlignUp(blockLen + pads, 32) bytes in UB. An unaligned tail is filled with the
  block's first element (no pads), with paddingValue (isPad) or left undefined (poison).
* `data_copy` is DataCopy: contiguous (`count` elements) or strided (DataCopyParams, all
  in 32-byte blocks). It moves whole 32-byte blocks only; a length that is not a multiple
  of 32 bytes is an AlignmentError instead of the hardware's silent truncation.
* `init_output` is InitOutput / Fill of a GM range with one value.
* While SetAtomicAdd<T>() / SetAtomicMax<T>() is set (atomic.py), every UB->GM copy (DataCopy and
  DataCopyPad) adds its elements to GM as T (or keeps the larger of GM and UB) instead of overwriting them.

Every GM range is checked against its tensor, every UB range against its LocalTensor.
GM-side bytes are counted on MTE2 (in) and MTE3 (out).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import types
from numba.extending import overload
from numba.np.numpy_support import as_dtype

from . import check as chk
from ._jit import DEVICE_JIT_OPTIONS, aicore
from ._memory import STREAM_MIN_BYTES, data_address, memcpy_bytes, stream_bytes
from ._outline import outline
from .atomic import atomic_bytes, atomic_type_ok
from .dtypes import view_f32_as_u32
from .faults import fault, issue
from .gm_cost import device_address
from .layout import (
    ATOMIC_DT_MASK,
    ATOMIC_TYPE,
    CALL_DATA_COPY_IN,
    CALL_DATA_COPY_OUT,
    CALL_DATA_COPY_PAD_IN,
    CALL_DATA_COPY_PAD_OUT,
    CALL_DATA_COPY_UB,
    CALL_INIT_OUTPUT,
    CAP_MAX_BLOCK_COUNT,
    CHK_MODE,
    CNT_MTE2_BYTES,
    CNT_MTE3_BYTES,
    F_DATACOPY_TRUNC,
    F_ELEM_TYPE,
    F_GM_OOB,
    F_LEN_MULTIPLE,
    F_PARAM,
    F_UB_OOB,
    P_BLOCK_COUNT,
    P_BLOCK_LEN,
    P_COUNT,
    P_LEFT_PADDING,
    P_RIGHT_PADDING,
    P_STRIDE,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_V,
    POISON,
    align32,
)
from .local import note_ub_write, ub_aligned_offset
from .timeline import dma, dma_read, repeats_of, vector

GlobalTensor = namedtuple("GlobalTensor", ["data", "id", "offset"])
"""A GM tensor: flat array (bit-carrier dtype), index in the kernel's GM list (for messages),
and an element offset (GlobalTensor::operator[])."""

DataCopyExtParams = namedtuple("DataCopyExtParams", ["blockCount", "blockLen", "srcStride", "dstStride"])
"""blockCount blocks of blockLen bytes; strides end-to-start (GM side bytes, UB side 32 B blocks)."""

DataCopyPadExtParams = namedtuple("DataCopyPadExtParams", ["isPad", "leftPadding", "rightPadding", "paddingValue"])
"""Pads in elements (each at most 32 bytes); paddingValue used when isPad is true."""

DataCopyParams = namedtuple("DataCopyParams", ["blockCount", "blockLen", "srcStride", "dstStride"])
"""Strided DataCopy: blockLen and both strides in 32-byte blocks."""

MAX_BLOCK_LEN_BYTES = 2097151
MAX_STRIDE = 4294967295
NO_PAD = DataCopyPadExtParams(False, 0, 0, 0)

_POISON_EVEN = int(POISON[0])
_POISON_ODD = int(POISON[1])


@aicore
def gm_at(g, offset_elems):
    """`GlobalTensor::operator[](offset)`: the same tensor shifted by offset elements."""
    return GlobalTensor(g.data, g.id, g.offset + offset_elems)


@aicore
def gm_as_i32(g):
    """The same GM bytes as GlobalTensor<int32_t> (int64 data moves as pairs of int32, DataCopyB64)."""
    return GlobalTensor(g.data.view(np.int32), g.id, g.offset * (g.data.itemsize // 4))


@aicore
def _write_gm(gm, gm_off, ub, ub_off, nbytes):
    """One burst UB -> GM: long bursts bypass the CPU caches as the DMA bypasses the core's."""
    if nbytes >= STREAM_MIN_BYTES:
        stream_bytes(gm, gm_off, ub, ub_off, nbytes)
    else:
        memcpy_bytes(gm, gm_off, ub, ub_off, nbytes)


aicore(align32)     # layout.align32, callable from kernels as well


@aicore
def _gm_ok(c, call, g, first_byte, end_byte):
    if first_byte < 0 or end_byte > g.data.nbytes:
        fault(c, F_GM_OOB, call, g.id, first_byte, end_byte, g.data.nbytes)
        return False
    return True


@aicore
def _block_params_ok(c, call, block_count, block_len, itemsize, src_stride, dst_stride):
    if block_count < 0 or block_count > c.state[CAP_MAX_BLOCK_COUNT]:
        fault(c, F_PARAM, call, P_BLOCK_COUNT, block_count, 0, c.state[CAP_MAX_BLOCK_COUNT])
        return False
    if block_len < 0 or block_len > MAX_BLOCK_LEN_BYTES:
        fault(c, F_PARAM, call, P_BLOCK_LEN, block_len, 0, MAX_BLOCK_LEN_BYTES)
        return False
    if block_len % itemsize != 0:
        fault(c, F_LEN_MULTIPLE, call, block_len, itemsize)
        return False
    if src_stride < 0 or src_stride > MAX_STRIDE or dst_stride < 0 or dst_stride > MAX_STRIDE:
        fault(c, F_PARAM, call, P_STRIDE, min(src_stride, dst_stride), 0, MAX_STRIDE)
        return False
    return True


@aicore
def _poison(c, start, end):
    for b in range(start, end):
        c.ub[b] = _POISON_EVEN if b % 2 == 0 else _POISON_ODD


@outline
def _pad_gm_to_ub(c, dst, src, params, pad):
    call = CALL_DATA_COPY_PAD_IN
    if not issue(c, call):
        return
    isz = dst.itemsize
    n, blen, sstride, dstride = params.blockCount, params.blockLen, params.srcStride, params.dstStride
    left, right = pad.leftPadding, pad.rightPadding
    if not _block_params_ok(c, call, n, blen, isz, sstride, dstride):
        return
    if n == 0 or blen == 0:
        dma(c, call, PIPE_MTE2, n, blen)
        return
    if left < 0 or left * isz > 32:
        fault(c, F_PARAM, call, P_LEFT_PADDING, left, 0, 32 // isz)
        return
    if right < 0 or right * isz > 32:
        fault(c, F_PARAM, call, P_RIGHT_PADDING, right, 0, 32 // isz)
        return
    ub0 = ub_aligned_offset(c, dst, call)
    if ub0 < 0:
        return
    foot = align32(blen + (left + right) * isz)
    row_stride = foot + dstride * 32
    ub_need = (n - 1) * row_stride + foot
    if ub_need > dst.nbytes:
        fault(c, F_UB_OOB, call, ub0, ub_need, dst.nbytes)
        return
    gm0 = src.offset * isz
    if not _gm_ok(c, call, src, gm0, gm0 + (n - 1) * (blen + sstride) + blen):
        return
    # timed once the copy is known to be valid: its L2 hits need the GM addresses
    dma_read(c, call, n, blen, device_address(src, gm0), blen + sstride)
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_MTE2, ub0, ub_need, True)
        chk.gm_read_rows(c, call, PIPE_MTE2, data_address(src.data) + gm0, n, blen, sstride)
    lead = left * isz
    for r in range(n):
        row = ub0 + r * row_stride
        memcpy_bytes(c.ub, row + lead, src.data, gm0 + r * (blen + sstride), blen)
        tail_start = row + lead + blen
        if left == 0 and right == 0:
            if tail_start < row + foot:
                # the hardware pads an unaligned block with copies of its first element
                first = (row - ub0) // isz
                for k in range((tail_start - ub0) // isz, (row + foot - ub0) // isz):
                    dst[k] = dst[first]
        elif pad.isPad:
            base = (row - ub0) // isz
            for k in range(left):
                dst[base + k] = pad.paddingValue
            for k in range((tail_start - ub0) // isz, (row + foot - ub0) // isz):
                dst[k] = pad.paddingValue
        else:
            _poison(c, row, row + lead)
            _poison(c, tail_start, row + foot)
    note_ub_write(c, ub0 + ub_need)
    c.state[CNT_MTE2_BYTES] += n * blen


@outline
def _pad_ub_to_gm(c, dst, src, params):
    call = CALL_DATA_COPY_PAD_OUT
    if not issue(c, call):
        return
    isz = src.itemsize
    n, blen, sstride, dstride = params.blockCount, params.blockLen, params.srcStride, params.dstStride
    if not _block_params_ok(c, call, n, blen, isz, sstride, dstride):
        return
    dma(c, call, PIPE_MTE3, n, blen)
    if n == 0 or blen == 0:
        return
    ub0 = ub_aligned_offset(c, src, call)
    if ub0 < 0:
        return
    # each UB block is read as whole 32-byte blocks (only blockLen bytes reach GM): the last one too
    row_stride = align32(blen) + sstride * 32
    ub_need = (n - 1) * row_stride + align32(blen)
    if ub_need > src.nbytes:
        fault(c, F_UB_OOB, call, ub0, ub_need, src.nbytes)
        return
    gm0 = dst.offset * isz
    if not _gm_ok(c, call, dst, gm0, gm0 + (n - 1) * (blen + dstride) + blen):
        return
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_MTE3, ub0, ub_need, False)
        chk.gm_write_rows(c, call, PIPE_MTE3, data_address(dst.data) + gm0, n, blen, dstride)
    atomic = c.state[ATOMIC_TYPE]
    if atomic != 0:
        if not atomic_type_ok(c, call, dst.data, (atomic & ATOMIC_DT_MASK) - 1):
            return
        for r in range(n):
            atomic_bytes(c, dst.data, gm0 + r * (blen + dstride), ub0 + r * row_stride, blen, atomic)
    else:
        for r in range(n):
            _write_gm(dst.data, gm0 + r * (blen + dstride), c.ub, ub0 + r * row_stride, blen)
    c.state[CNT_MTE3_BYTES] += n * blen


def data_copy_pad(c, dst, src, params, pad=NO_PAD):
    """DataCopyPad(dst, src, DataCopyExtParams[, DataCopyPadExtParams]); direction from the operand types."""
    raise NotImplementedError("data_copy_pad is only callable from numba code")


def _element_types_differ(dst, src) -> bool:
    """AscendC's DataCopy / DataCopyPad take one T for both sides (offsets count elements of T)."""
    def elem(t):
        return t.dtype if isinstance(t, types.Array) else t[0].dtype
    return elem(dst) != elem(src)


@aicore
def _mismatch(c, call, dst_bytes, src_bytes):
    # reached only when a kernel executes a copy whose two sides have different element types; such
    # code stands for a branch AscendC would drop with `if constexpr`, so compiling it is fine
    if issue(c, call):
        fault(c, F_ELEM_TYPE, call, dst_bytes, src_bytes)


_WIDTH_CARRIERS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _width_carrier(dst, gm):
    """The unsigned type GM -> UB DataCopyPad moves dst's elements as (one variant per element width: it only moves
    bytes, and its padding value is converted to the element's bits at the call), or None for element types whose
    pad conversion is not an integer or float32 one (they keep a variant of their own)."""
    ok = (dst.ndim == 1 and dst.layout == "C" and gm.ndim == 1 and gm.layout == "C"
          and (isinstance(dst.dtype, types.Integer) or dst.dtype == types.float32))
    return _WIDTH_CARRIERS.get(dst.dtype.bitwidth) if ok else None


@aicore
def _f32_bits(value):
    """The bits of value as a float32 (a DataCopyPad padding value written into a float32 LocalTensor)."""
    return view_f32_as_u32(np.float32(value))


@overload(data_copy_pad, jit_options=DEVICE_JIT_OPTIONS)
def _data_copy_pad(c, dst, src, params, pad=NO_PAD):
    call = CALL_DATA_COPY_PAD_IN if isinstance(dst, types.Array) else CALL_DATA_COPY_PAD_OUT
    if _element_types_differ(dst, src):
        dst_size = dst.dtype.bitwidth // 8 if isinstance(dst, types.Array) else dst[0].dtype.bitwidth // 8
        src_size = src.dtype.bitwidth // 8 if isinstance(src, types.Array) else src[0].dtype.bitwidth // 8

        def mismatch(c, dst, src, params, pad=NO_PAD):
            _mismatch(c, call, dst_size, src_size)
        return mismatch
    if isinstance(dst, types.Array):
        width = _width_carrier(dst, src.types[0]) if isinstance(src, types.BaseTuple) else None
        if width is not None and dst.dtype == types.float32:
            def gm_to_ub_f32(c, dst, src, params, pad=NO_PAD):
                _pad_gm_to_ub(c, dst.view(width), GlobalTensor(src.data.view(width), src.id, src.offset), params,
                              DataCopyPadExtParams(pad.isPad, pad.leftPadding, pad.rightPadding,
                                                   _f32_bits(pad.paddingValue)))
            return gm_to_ub_f32
        if width is not None:
            elem = as_dtype(dst.dtype).type

            def gm_to_ub_int(c, dst, src, params, pad=NO_PAD):
                _pad_gm_to_ub(c, dst.view(width), GlobalTensor(src.data.view(width), src.id, src.offset), params,
                              DataCopyPadExtParams(pad.isPad, pad.leftPadding, pad.rightPadding,
                                                   elem(pad.paddingValue)))
            return gm_to_ub_int

        def gm_to_ub(c, dst, src, params, pad=NO_PAD):
            _pad_gm_to_ub(c, dst, src, params, pad)
        return gm_to_ub

    def ub_to_gm(c, dst, src, params, pad=NO_PAD):
        _pad_ub_to_gm(c, dst, src, params)
    return ub_to_gm


@aicore
def _strided_ok(c, call, n, blocks, sstride, dstride):
    """DataCopyParams ranges (blockLen and strides count 32-byte blocks)."""
    if n < 0 or n > c.state[CAP_MAX_BLOCK_COUNT]:
        fault(c, F_PARAM, call, P_BLOCK_COUNT, n, 0, c.state[CAP_MAX_BLOCK_COUNT])
        return False
    if blocks < 0 or blocks > 65535:
        fault(c, F_PARAM, call, P_BLOCK_LEN, blocks, 0, 65535)
        return False
    if sstride < 0 or dstride < 0 or sstride > 65535 or dstride > 65535:
        fault(c, F_PARAM, call, P_STRIDE, min(sstride, dstride), 0, 65535)
        return False
    return True


@outline(as_width=("dst", "src"))
def _copy_in(c, dst, src, n, blocks, sstride, dstride):
    call = CALL_DATA_COPY_IN
    if not issue(c, call) or not _strided_ok(c, call, n, blocks, sstride, dstride):
        return
    blen = blocks * 32
    if n == 0 or blen == 0:
        dma(c, call, PIPE_MTE2, n, blen)
        return
    ub0 = ub_aligned_offset(c, dst, call)
    if ub0 < 0:
        return
    ub_need = (n - 1) * (blen + dstride * 32) + blen
    if ub_need > dst.nbytes:
        fault(c, F_UB_OOB, call, ub0, ub_need, dst.nbytes)
        return
    gm0 = src.offset * dst.itemsize
    if not _gm_ok(c, call, src, gm0, gm0 + (n - 1) * (blen + sstride * 32) + blen):
        return
    dma_read(c, call, n, blen, device_address(src, gm0), blen + sstride * 32)   # timed once known valid
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_MTE2, ub0, ub_need, True)
        chk.gm_read_rows(c, call, PIPE_MTE2, data_address(src.data) + gm0, n, blen, sstride * 32)
    for r in range(n):
        memcpy_bytes(c.ub, ub0 + r * (blen + dstride * 32), src.data, gm0 + r * (blen + sstride * 32), blen)
    note_ub_write(c, ub0 + ub_need)
    c.state[CNT_MTE2_BYTES] += n * blen


@outline
def _copy_out(c, dst, src, n, blocks, sstride, dstride):
    call = CALL_DATA_COPY_OUT
    if not issue(c, call) or not _strided_ok(c, call, n, blocks, sstride, dstride):
        return
    blen = blocks * 32
    dma(c, call, PIPE_MTE3, n, blen)
    if n == 0 or blen == 0:
        return
    ub0 = ub_aligned_offset(c, src, call)
    if ub0 < 0:
        return
    ub_need = (n - 1) * (blen + sstride * 32) + blen
    if ub_need > src.nbytes:
        fault(c, F_UB_OOB, call, ub0, ub_need, src.nbytes)
        return
    gm0 = dst.offset * src.itemsize
    if not _gm_ok(c, call, dst, gm0, gm0 + (n - 1) * (blen + dstride * 32) + blen):
        return
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_MTE3, ub0, ub_need, False)
        chk.gm_write_rows(c, call, PIPE_MTE3, data_address(dst.data) + gm0, n, blen, dstride * 32)
    atomic = c.state[ATOMIC_TYPE]
    if atomic != 0:
        if not atomic_type_ok(c, call, dst.data, (atomic & ATOMIC_DT_MASK) - 1):
            return
        for r in range(n):
            atomic_bytes(c, dst.data, gm0 + r * (blen + dstride * 32), ub0 + r * (blen + sstride * 32), blen,
                          atomic)
    else:
        for r in range(n):
            _write_gm(dst.data, gm0 + r * (blen + dstride * 32), c.ub, ub0 + r * (blen + sstride * 32), blen)
    c.state[CNT_MTE3_BYTES] += n * blen


@outline(as_width=("dst", "src"))
def _copy_ub(c, dst, src, n, blocks, sstride, dstride):
    call = CALL_DATA_COPY_UB
    if not issue(c, call) or not _strided_ok(c, call, n, blocks, sstride, dstride):
        return
    blen = blocks * 32
    vector(c, call, repeats_of(n * blen, 1))     # a UB -> UB copy runs on PIPE_V
    if n == 0 or blen == 0:
        return
    d0 = ub_aligned_offset(c, dst, call)
    s0 = ub_aligned_offset(c, src, call)
    if d0 < 0 or s0 < 0:
        return
    d_need = (n - 1) * (blen + dstride * 32) + blen
    s_need = (n - 1) * (blen + sstride * 32) + blen
    if d_need > dst.nbytes:
        fault(c, F_UB_OOB, call, d0, d_need, dst.nbytes)
        return
    if s_need > src.nbytes:
        fault(c, F_UB_OOB, call, s0, s_need, src.nbytes)
        return
    if c.state[CHK_MODE] != 0:
        chk.ub(c, call, PIPE_V, s0, s_need, False)
        chk.ub(c, call, PIPE_V, d0, d_need, True)
    for r in range(n):
        memcpy_bytes(c.ub, d0 + r * (blen + dstride * 32), c.ub, s0 + r * (blen + sstride * 32), blen)
    note_ub_write(c, d0 + d_need)


@aicore
def _contiguous_blocks(c, call, count, isz):
    """32-byte blocks of a contiguous DataCopy of count elements, or -1 (fault recorded)."""
    nbytes = count * isz
    if count < 0:
        fault(c, F_PARAM, call, P_COUNT, count, 0, 2147483647)
        return -1
    if nbytes % 32 != 0:
        fault(c, F_DATACOPY_TRUNC, call, nbytes)
        return -1
    return nbytes // 32


def data_copy(c, dst, src, count_or_params):
    """DataCopy(dst, src, count) or DataCopy(dst, src, DataCopyParams); GM<->UB or UB->UB."""
    raise NotImplementedError("data_copy is only callable from numba code")


@overload(data_copy, jit_options=DEVICE_JIT_OPTIONS)
def _data_copy(c, dst, src, count_or_params):
    dst_ub = isinstance(dst, types.Array)
    src_ub = isinstance(src, types.Array)
    strided = isinstance(count_or_params, types.BaseTuple)
    if dst_ub and src_ub:
        mover, call = _copy_ub, CALL_DATA_COPY_UB
    elif dst_ub:
        mover, call = _copy_in, CALL_DATA_COPY_IN
    else:
        mover, call = _copy_out, CALL_DATA_COPY_OUT
    if _element_types_differ(dst, src):
        def mismatch(c, dst, src, count_or_params):
            _mismatch(c, call, 0, 0)
        return mismatch
    if strided:
        def impl(c, dst, src, count_or_params):
            p = count_or_params
            mover(c, dst, src, p.blockCount, p.blockLen, p.srcStride, p.dstStride)
        return impl

    def impl_contiguous(c, dst, src, count_or_params):
        isz = dst.itemsize if dst_ub else src.itemsize
        blocks = _contiguous_blocks(c, call, count_or_params, isz)
        if blocks > 0:
            mover(c, dst, src, 1, blocks, 0, 0)
    return impl_contiguous


@outline
def init_output(c, g, count, value):
    """InitOutput<T>(gm, count, value): fill count elements of GM from g's offset (through UB, on MTE3)."""
    if not issue(c, CALL_INIT_OUTPUT):
        return
    isz = g.data.itemsize
    if count < 0:
        fault(c, F_PARAM, CALL_INIT_OUTPUT, P_COUNT, count, 0, 2147483647)
        return
    if not _gm_ok(c, CALL_INIT_OUTPUT, g, g.offset * isz, (g.offset + count) * isz):
        return
    g.data[g.offset: g.offset + count] = value
    dma(c, CALL_INIT_OUTPUT, PIPE_MTE3, 1, count * isz)
    if c.state[CHK_MODE] != 0:
        chk.gm_write(c, CALL_INIT_OUTPUT, PIPE_MTE3, data_address(g.data) + g.offset * isz, count * isz)
    c.state[CNT_MTE3_BYTES] += count * isz
