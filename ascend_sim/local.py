"""LocalTensor helpers: a LocalTensor is a typed numpy view of the core's Unified Buffer.

`t[k:]` is AscendC's `operator[]` (a view k elements further on). The UB byte address of
a view is recovered from its data pointer, so every call can check alignment and
ranges in bytes, as the hardware does. Checks return -1 / False after recording a fault.
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from . import check as chk
from ._jit import DEVICE_JIT_OPTIONS, aicore
from ._memory import data_address, ub_view
from .faults import fault
from .layout import CALL_REINTERPRET_CAST, CHK_MODE, CNT_UB_HWM, F_UB_ALIGN, F_UB_NOT_IN_UB, F_UB_OOB


@aicore
def ub_offset(c, t, call):
    """UB byte address of LocalTensor t, or -1 (fault recorded) if t is not a view of this core's UB."""
    off = data_address(t) - data_address(c.ub)
    if off < 0 or off + t.nbytes > c.ub.size:
        fault(c, F_UB_NOT_IN_UB, call, off, t.nbytes)
        return -1
    return off


@aicore
def ub_aligned_offset(c, t, call):
    """UB byte address of t, which must be 32-byte aligned (vector and DMA operands); -1 on a fault."""
    off = ub_offset(c, t, call)
    if off >= 0 and off % 32 != 0:
        fault(c, F_UB_ALIGN, call, off, 32)
        return -1
    return off


@aicore
def note_ub_write(c, end_byte):
    if end_byte > c.state[CNT_UB_HWM]:
        c.state[CNT_UB_HWM] = end_byte


@aicore
def view_as(c, t, like):
    """ReinterpretCast: the bytes of t seen through the UB view `like` (another element type)."""
    off = ub_offset(c, t, CALL_REINTERPRET_CAST)
    size = like.itemsize
    if off < 0:
        return ub_view(c.ub, like, 0, 0)
    return ub_view(c.ub, like, off // size * size, (off + t.nbytes) // size - off // size)


@aicore
def ub_i8(c):
    """The whole UB as int8: the `T` of LocalTensor<int8_t>."""
    return ub_view(c.ub, np.int8, 0, c.ub.size // 1)


@aicore
def ub_u8(c):
    """The whole UB as uint8: the `T` of LocalTensor<uint8_t>."""
    return c.ub


@aicore
def ub_u16(c):
    """The whole UB as uint16: the `T` of LocalTensor<uint16_t, or the bits of half / bfloat16_t>."""
    return ub_view(c.ub, np.uint16, 0, c.ub.size // 2)


@aicore
def ub_i16(c):
    """The whole UB as int16: the `T` of LocalTensor<int16_t>."""
    return ub_view(c.ub, np.int16, 0, c.ub.size // 2)


@aicore
def ub_i32(c):
    """The whole UB as int32: the `T` of LocalTensor<int32_t>."""
    return ub_view(c.ub, np.int32, 0, c.ub.size // 4)


@aicore
def ub_u32(c):
    """The whole UB as uint32: the `T` of LocalTensor<uint32_t>."""
    return ub_view(c.ub, np.uint32, 0, c.ub.size // 4)


@aicore
def ub_f32(c):
    """The whole UB as float32: the `T` of LocalTensor<float>."""
    return ub_view(c.ub, np.float32, 0, c.ub.size // 4)


@aicore
def ub_i64(c):
    """The whole UB as int64: the `T` of LocalTensor<int64_t>."""
    return ub_view(c.ub, np.int64, 0, c.ub.size // 8)


def ub_like(c, g):
    """The whole UB seen with the element type of GlobalTensor (or array) g: `T` of LocalTensor<T>."""
    raise NotImplementedError("ub_like is only callable from numba code")


@overload(ub_like, jit_options=DEVICE_JIT_OPTIONS)
def _ub_like(c, g):
    dtype = g[0].dtype if isinstance(g, types.BaseTuple) else g.dtype   # GlobalTensor.data or an array
    views = {types.int8: ub_i8, types.uint16: ub_u16, types.int16: ub_i16, types.int32: ub_i32,
             types.uint32: ub_u32, types.float32: ub_f32, types.int64: ub_i64}
    if dtype == types.uint8:
        return lambda c, g: c.ub
    if dtype not in views:
        raise TypeError(f"no UB view for element type {dtype}")
    view = views[dtype]
    return lambda c, g: view(c)


@aicore
def check_count(c, t, count, call):
    """True if the first `count` elements of t exist; records F_UB_OOB otherwise."""
    if count > t.size:
        fault(c, F_UB_OOB, call, data_address(t) - data_address(c.ub), count * t.itemsize, t.nbytes)
        return False
    return True


@aicore
def vector_operands(c, call, dst, dst_elems, src, src_elems):
    """The operand checks of a one-source vector instruction: dst and src 32-byte aligned, holding the dst_elems /
    src_elems elements from their starts that it touches (both alignments are checked before either span); in
    checked mode the two accesses are recorded. dst's UB byte offset, or -1 after a fault."""
    d = ub_aligned_offset(c, dst, call)
    s = ub_aligned_offset(c, src, call)
    if d < 0 or s < 0:
        return -1
    if not check_count(c, dst, dst_elems, call) or not check_count(c, src, src_elems, call):
        return -1
    if c.state[CHK_MODE] != 0:
        chk.vector_access(c, call, d, dst_elems * dst.itemsize, s, src_elems * src.itemsize, -1, 0)
    return d
