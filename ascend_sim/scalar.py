"""Scalar-unit access: GetValue / SetValue on GM and UB, and checked scalar arrays (numba).

Scalar GM reads go through the core's data cache on the device; the simulator reads GM
directly (the cache exists only in the timeline's cost, timeline.scalar_gm_read), which is
equivalent for kernels that only read GM data no other core writes during the kernel. An out-of-range access records a
fault and reads 0.
"""
from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from . import check as chk
from . import timeline as tl
from ._jit import DEVICE_JIT_OPTIONS, aicore
from ._memory import data_address
from .atomic import spin_lock, stripe_lock, unlock
from .dtypes import DT_BF16, DT_FLOAT16, bf16_bits_to_f32_bits, f16_bits_to_f32_bits, f32_from_bits
from .faults import fault, faulted, issue
from .gm_cost import device_address
from .layout import (
    CALL_GM_ATOMIC_ADD,
    CALL_GM_ATOMIC_EXCH,
    CALL_GM_GET_VALUE,
    CALL_GM_SET_VALUE,
    CALL_SCALAR_ARRAY,
    CALL_UB_GET_VALUE,
    CALL_UB_SET_VALUE,
    CHK_MODE,
    CNT_S_GM_READS,
    CNT_S_GM_WRITES,
    CNT_S_UB_OPS,
    F_GM_OOB,
    F_SCALAR_OOB,
    F_UB_OOB,
    MEMBER_BASE,
    N_MEMBERS,
    PIPE_S,
)
from .local import note_ub_write, ub_offset
from .vector import as_elem


def get_value(c, t, index):
    """t.GetValue(index) for a GlobalTensor (scalar GM read) or a LocalTensor (scalar UB read)."""
    raise NotImplementedError("get_value is only callable from numba code")


def set_value(c, t, index, value):
    """t.SetValue(index, value) for a GlobalTensor or a LocalTensor."""
    raise NotImplementedError("set_value is only callable from numba code")


@aicore
def _gm_index(c, call, g, index):
    """Element index of g[index] in g.data, or -1 (fault recorded)."""
    if not issue(c, call):
        return -1
    i = g.offset + index
    if i < 0 or i >= g.data.size:
        isz = g.data.itemsize
        fault(c, F_GM_OOB, call, g.id, i * isz, (i + 1) * isz, g.data.nbytes)
        return -1
    return i


@aicore
def _ub_index_ok(c, call, t, index):
    if not issue(c, call):
        return False
    if index < 0 or index >= t.size:
        fault(c, F_UB_OOB, call, ub_offset(c, t, call), (index + 1) * t.itemsize, t.nbytes)
        return False
    return True


@overload(get_value, jit_options=DEVICE_JIT_OPTIONS)
def _get_value(c, t, index):
    if isinstance(t, types.Array):
        def ub_get(c, t, index):
            if not _ub_index_ok(c, CALL_UB_GET_VALUE, t, index):
                return as_elem(t, 0)
            c.state[CNT_S_UB_OPS] += 1
            tl.scalar_ub(c, CALL_UB_GET_VALUE, index)
            if c.state[CHK_MODE] != 0:
                chk.ub(c, CALL_UB_GET_VALUE, PIPE_S, ub_offset(c, t, CALL_UB_GET_VALUE) + index * t.itemsize,
                       t.itemsize,
                       False)
            return t[index]
        return ub_get

    def gm_get(c, t, index):
        i = _gm_index(c, CALL_GM_GET_VALUE, t, index)
        if i < 0:
            return as_elem(t.data, 0)
        c.state[CNT_S_GM_READS] += 1
        tl.scalar_gm_read(c, CALL_GM_GET_VALUE, device_address(t, i * t.data.itemsize))
        if c.state[CHK_MODE] != 0:
            chk.gm_read(c, CALL_GM_GET_VALUE, PIPE_S, data_address(t.data) + i * t.data.itemsize, t.data.itemsize)
        return t.data[i]
    return gm_get


@overload(set_value, jit_options=DEVICE_JIT_OPTIONS)
def _set_value(c, t, index, value):
    if isinstance(t, types.Array):
        def ub_set(c, t, index, value):
            if not _ub_index_ok(c, CALL_UB_SET_VALUE, t, index):
                return
            c.state[CNT_S_UB_OPS] += 1
            tl.scalar_ub(c, CALL_UB_SET_VALUE, index)
            if c.state[CHK_MODE] != 0:
                chk.ub(c, CALL_UB_SET_VALUE, PIPE_S, ub_offset(c, t, CALL_UB_SET_VALUE) + index * t.itemsize,
                       t.itemsize,
                       True)
            t[index] = value
            note_ub_write(c, ub_offset(c, t, CALL_UB_SET_VALUE) + (index + 1) * t.itemsize)
        return ub_set

    def gm_set(c, t, index, value):
        i = _gm_index(c, CALL_GM_SET_VALUE, t, index)
        if i < 0:
            return
        c.state[CNT_S_GM_WRITES] += 1
        tl.scalar_gm_write(c, CALL_GM_SET_VALUE, device_address(t, i * t.data.itemsize))
        if c.state[CHK_MODE] != 0:
            chk.gm_write(c, CALL_GM_SET_VALUE, PIPE_S, data_address(t.data) + i * t.data.itemsize, t.data.itemsize)
        t.data[i] = value
    return gm_set


# --- scalar GM atomics (AtomicAdd / AtomicExch) ---------------------------------------------------------------
# The word is read and written under the stripe lock an atomic DataCopy to the same bytes takes (atomic.py), so a scalar
# atomic and an atomic copy from cores on other host threads never interleave. AtomicAdd wraps integers and adds floats
# in IEEE fp32 / fp64; both return the word's value before.
@aicore
def _gm_atomic(c, g, value, call, exchange):
    i = _gm_index(c, call, g, 0)
    if i < 0:
        return as_elem(g.data, 0)
    c.state[CNT_S_GM_READS] += 1
    c.state[CNT_S_GM_WRITES] += 1
    address = data_address(g.data) + i * g.data.itemsize
    tl.scalar_gm_atomic(c, call, device_address(g, i * g.data.itemsize))
    if c.state[CHK_MODE] != 0:
        chk.gm_write(c, call, PIPE_S, address, g.data.itemsize)
    lock = stripe_lock(c, address)
    spin_lock(lock)
    old = g.data[i]
    g.data[i] = as_elem(g.data, value) if exchange else as_elem(g.data, old + value)
    unlock(lock)
    return old


@aicore
def atomic_add(c, g, value):
    """AscendC::AtomicAdd(g.GetPhyAddr(), value): GM element g[0] += value indivisibly; returns the old value.
    g: a GlobalTensor of int32 / uint32 / float32 / int64 / uint64 (gm_at(tensor, index) for element index)."""
    return _gm_atomic(c, g, value, CALL_GM_ATOMIC_ADD, False)


@aicore
def atomic_exch(c, g, value):
    """AscendC::AtomicExch(g.GetPhyAddr(), value): GM element g[0] = value indivisibly; returns the old value."""
    return _gm_atomic(c, g, value, CALL_GM_ATOMIC_EXCH, True)


@aicore
def to_float(bits_or_value, dt):
    """A scalar of dtype `dt` (fp16/bf16 as uint16 bits, or fp32) as float32: ToFloat / static_cast<float>."""
    if dt == DT_BF16:
        return f32_from_bits(bf16_bits_to_f32_bits(np.uint16(bits_or_value)))
    if dt == DT_FLOAT16:
        return f32_from_bits(f16_bits_to_f32_bits(np.uint16(bits_or_value)))
    return np.float32(bits_or_value)


@aicore
def scalar_store(c, arr, index, value, array_id):
    """arr[index] = value for a kernel's scalar (stack) array, e.g. indicesArray[512]."""
    if faulted(c):
        return
    if index < 0 or index >= arr.size:
        fault(c, F_SCALAR_OOB, CALL_SCALAR_ARRAY, array_id, index, arr.size)
        return
    arr[index] = value


@aicore
def scalar_load(c, arr, index, array_id):
    """arr[index] for a kernel's scalar (stack) array (0 after a fault)."""
    if index < 0 or index >= arr.size:
        fault(c, F_SCALAR_OOB, CALL_SCALAR_ARRAY, array_id, index, arr.size)
        return as_elem(arr, 0)
    return arr[index]


@aicore
def members(c):
    """The kernel object's member variables that must survive SyncAll() (a kernel split into stages keeps
    them here, e.g. the sort's srcWsIndex): N_MEMBERS int64 slots, zero at launch."""
    return c.state[MEMBER_BASE: MEMBER_BASE + N_MEMBERS]
