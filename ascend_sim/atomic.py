"""GM atomics (numba): SetAtomicAdd<T> / SetAtomicMax<T> / SetAtomicNone, the element arithmetic of an atomic
UB->GM copy (datacopy.py calls atomic_bytes per row), and the stripe locks every atomic takes (atomic copies,
the scalar AtomicAdd / AtomicExch of scalar.py, SIMT's AtomicAdd of simt.py).
"""
from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ._jit import DEVICE_JIT_OPTIONS, aicore
from ._memory import data_address
from .dtypes import (
    CAST_RINT,
    DT_BF16,
    DT_FLOAT,
    DT_FLOAT16,
    DT_INT8,
    DT_INT16,
    DT_INT32,
    bf16_bits_to_f32_bits,
    f16_bits_to_f32_bits,
    f32_bits_to_bf16_bits,
    f32_bits_to_f16_bits,
    f32_from_bits,
    view_f32_as_u32,
)
from .faults import fault
from .layout import ATOMIC_DT_MASK, ATOMIC_LOCK_COUNT, ATOMIC_LOCK_TABLE, ATOMIC_OP_MAX, ATOMIC_TYPE, F_ELEM_TYPE

# --- Atomic add (SetAtomicAdd<T> / SetAtomicNone) ---------------------------------------------------------
# Arithmetic: each GM element becomes GM + UB as T. float: one IEEE fp32 add (round half to even). half /
# bfloat16: the exact sum rounded half to even to T; computed as an fp32 add then a CAST_RINT narrowing,
# which gives the same result because fp32 carries at least 2p + 2 bits of a p-bit T (24 >= 2 * 11 + 2;
# no double-rounding error). int8 / int16 / int32: two's-complement wrap-around. The AscendC documentation
# gives only the supported types, so the rounding and the integer overflow rule are the model's assumptions.
#
# Indivisibility: the cores of a launch run on parallel host threads, and two of them may add to the same
# GM bytes at once (the index-add kernels rely on this). Every atomic copy therefore takes, for each GM
# address stripe it touches, a spinlock from a process-wide table (core.ATOMIC_LOCKS; stripe -> lock by
# address, so any two copies that touch the same element hold the same lock while they add to it). An
# element is never split: it belongs to the stripe of its first byte. Only one lock is held at a time, so
# locks cannot deadlock. No update is lost and no element is torn; the ORDER in which cores' additions
# land is the threads' race, as it is the cores' race on the chip: fp sums that depend on the order can
# differ from run to run with more than one thread (one thread runs cores in index order).
# Plain (non-atomic) copies take no lock and cost one extra state check per copy.
#
# Atomic max (SetAtomicMax<T>, A2 / A3 / 950: float, half, bfloat16, int8, int16, int32): each GM element keeps
# the larger of GM and UB, compared as T; the winner's bits are stored unchanged (no rounding). A NaN on either
# side gives NaN (IEEE maximum, not maxNum): the documentation does not say, so this is the model's assumption.
# +0 and -0 compare equal and GM keeps its own.
ATOMIC_STRIPE_BYTES = 2048
_IS_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def spin_lock(typingctx, lock_addr):
    """Acquire the int32 lock word at address lock_addr (0 = free, 1 = held): compare-and-swap 0 -> 1 with
    acquire ordering; while held by another thread, spin on plain atomic loads (x86: with PAUSE)."""
    sig = types.void(types.int64)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        ptr = builder.inttoptr(args[0], i32.as_pointer())
        try_block = builder.append_basic_block("lock.try")
        wait_block = builder.append_basic_block("lock.wait")
        done_block = builder.append_basic_block("lock.done")
        builder.branch(try_block)
        builder.position_at_end(try_block)
        pair = builder.cmpxchg(ptr, ir.Constant(i32, 0), ir.Constant(i32, 1), "acquire", "monotonic")
        builder.cbranch(builder.extract_value(pair, 1), done_block, wait_block)
        builder.position_at_end(wait_block)
        if _IS_X86:
            pause = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                   "llvm.x86.sse2.pause")
            builder.call(pause, [])
        held = builder.load_atomic(ptr, "monotonic", 4)
        builder.cbranch(builder.icmp_unsigned("==", held, ir.Constant(i32, 0)), try_block, wait_block)
        builder.position_at_end(done_block)
        return context.get_dummy_value()

    return sig, codegen


@aicore
def stripe_lock(c, address):
    """The lock word of the GM stripe that host `address` lies in (every atomic on those bytes takes it)."""
    return c.state[ATOMIC_LOCK_TABLE] + ((address // ATOMIC_STRIPE_BYTES) % ATOMIC_LOCK_COUNT) * 4


@intrinsic
def unlock(typingctx, lock_addr):
    """Release the lock word at lock_addr (store 0 with release ordering)."""
    sig = types.void(types.int64)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        ptr = builder.inttoptr(args[0], i32.as_pointer())
        builder.store_atomic(ir.Constant(i32, 0), ptr, "release", 4)
        return context.get_dummy_value()

    return sig, codegen


@aicore
def set_atomic_add(c, dt):
    """SetAtomicAdd<T>(): UB->GM copies from now on add to GM as T (`dt`: ge dtype code of T; A2/A3/950
    support float, half, bfloat16, int8, int16, int32). GM is not zeroed for you."""
    c.state[ATOMIC_TYPE] = dt + 1


@aicore
def set_atomic_max(c, dt):
    """SetAtomicMax<T>(): UB->GM copies from now on keep the larger of GM and UB as T (`dt`: ge dtype code; float,
    half, bfloat16, int8, int16, int32)."""
    c.state[ATOMIC_TYPE] = ATOMIC_OP_MAX + dt + 1


@aicore
def set_atomic_none(c):
    """SetAtomicNone() / DisableDmaAtomic(): UB->GM copies overwrite GM again."""
    c.state[ATOMIC_TYPE] = 0


def _add_elems(c, g, g0, ub_off, n, dt, op):
    """g[g0 : g0 + n] += (op 0) or max= (op ATOMIC_OP_MAX) the n elements of type dt at UB byte ub_off (caller
    holds the lock)."""
    raise NotImplementedError("_add_elems is only callable from numba code")


@aicore
def _max_f32(a, b):
    """The larger of fp32 a (GM) and b (UB); NaN if either is (see "Atomic max")."""
    if a != a:
        return a
    if b != b or b > a:
        return b
    return a


@overload(_add_elems, jit_options=DEVICE_JIT_OPTIONS)
def _add_elems_impl(c, g, g0, ub_off, n, dt, op):
    carrier = g.dtype
    if carrier == types.float32:
        def add_f32(c, g, g0, ub_off, n, dt, op):
            u = c.ub[ub_off: ub_off + 4 * n].view(np.float32)
            if op == ATOMIC_OP_MAX:
                for k in range(n):
                    g[g0 + k] = _max_f32(g[g0 + k], u[k])
                return
            for k in range(n):
                g[g0 + k] = g[g0 + k] + u[k]
        return add_f32
    if carrier == types.uint16:
        def add_half(c, g, g0, ub_off, n, dt, op):
            u = c.ub[ub_off: ub_off + 2 * n].view(np.uint16)
            if op == ATOMIC_OP_MAX:
                for k in range(n):
                    if dt == DT_BF16:
                        a, b = (f32_from_bits(bf16_bits_to_f32_bits(g[g0 + k])),
                                f32_from_bits(bf16_bits_to_f32_bits(u[k])))
                    else:
                        a, b = f32_from_bits(f16_bits_to_f32_bits(g[g0 + k])), f32_from_bits(f16_bits_to_f32_bits(u[k]))
                    if a == a and (b != b or b > a):     # GM keeps a NaN; a NaN or larger UB value wins
                        g[g0 + k] = u[k]
                return
            if dt == DT_BF16:
                for k in range(n):
                    s = f32_from_bits(bf16_bits_to_f32_bits(g[g0 + k])) + f32_from_bits(bf16_bits_to_f32_bits(u[k]))
                    g[g0 + k] = f32_bits_to_bf16_bits(view_f32_as_u32(s), CAST_RINT)
            else:
                for k in range(n):
                    s = f32_from_bits(f16_bits_to_f32_bits(g[g0 + k])) + f32_from_bits(f16_bits_to_f32_bits(u[k]))
                    g[g0 + k] = f32_bits_to_f16_bits(view_f32_as_u32(s), CAST_RINT)
        return add_half
    if carrier in (types.int8, types.int16, types.int32):
        elem = {types.int8: np.int8, types.int16: np.int16, types.int32: np.int32}[carrier]
        size = carrier.bitwidth // 8

        def add_int(c, g, g0, ub_off, n, dt, op):
            u = c.ub[ub_off: ub_off + size * n].view(elem)
            if op == ATOMIC_OP_MAX:
                for k in range(n):
                    g[g0 + k] = max(g[g0 + k], u[k])
                return
            for k in range(n):
                g[g0 + k] = elem(g[g0 + k] + u[k])   # wraps around
        return add_int

    def unsupported(c, g, g0, ub_off, n, dt, op):   # never reached: _atomic_type_ok refuses the carrier first
        return
    return unsupported


def atomic_type_ok(c, call, g, dt):
    """SetAtomicAdd's T (`dt`) must be the element type of the copy to GM array g; records F_ELEM_TYPE
    (GM element bytes, T's bytes) otherwise. fp16 and bf16 share the uint16 GM carrier."""
    raise NotImplementedError("atomic_type_ok is only callable from numba code")


_ATOMIC_TYPES_BY_CARRIER = {types.float32: (DT_FLOAT,), types.uint16: (DT_FLOAT16, DT_BF16),
                            types.int16: (DT_INT16,), types.int32: (DT_INT32,), types.int8: (DT_INT8,)}


@overload(atomic_type_ok, jit_options=DEVICE_JIT_OPTIONS)
def _atomic_type_ok_impl(c, call, g, dt):
    allowed = _ATOMIC_TYPES_BY_CARRIER.get(g.dtype, ())
    first = allowed[0] if allowed else -1
    second = allowed[-1] if allowed else -1
    isz = g.dtype.bitwidth // 8

    def check(c, call, g, dt):
        if dt == first or dt == second:
            return True
        atomic_size = 4 if dt == DT_FLOAT or dt == DT_INT32 else (1 if dt == DT_INT8 else 2)
        fault(c, F_ELEM_TYPE, call, isz, atomic_size)
        return False
    return check


@aicore
def atomic_bytes(c, g, gm_off, ub_off, nbytes, atomic):
    """Add (or max, by the ATOMIC_TYPE word `atomic`) nbytes of UB (from ub_off) into GM array g (from byte
    gm_off), one address stripe at a time, each under its lock."""
    dt = (atomic & ATOMIC_DT_MASK) - 1
    op = atomic & ~ATOMIC_DT_MASK
    isz = g.itemsize
    base = data_address(g)
    done = 0
    while done < nbytes:
        addr = base + gm_off + done
        # elements whose first byte lies in this stripe
        span = min(nbytes - done, (addr // ATOMIC_STRIPE_BYTES + 1) * ATOMIC_STRIPE_BYTES - addr)
        span = (span + isz - 1) // isz * isz
        lock = stripe_lock(c, addr)
        spin_lock(lock)
        _add_elems(c, g, (gm_off + done) // isz, ub_off + done, span // isz, dt, op)
        unlock(lock)
        done += span
