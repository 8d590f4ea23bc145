"""SIMT functions on Ascend 950: `asc_vf_call<fn>(dim3{x, y, z}, args...)` / `Simt::VF_CALL` (numba).

An arch35 kernel can start a `__simt_vf__` function as a block of up to 2048 threads (dimx * dimy * dimz,
asc_vf_call documentation), each running scalar code over raw `__gm__` / `__ubuf__` pointers. A kernel here
writes the launch as a loop the host can compile:

    sc = asc.simt_vf_call(c, threads, 1, 1)               # Simt::VF_CALL<ComputeSimt>(Dim3{threads, 1, 1}, ...)
    for t in range(sc.threads):
        compute_simt(c, asc.simt_thread(c, sc, t), ...)  # the __simt_vf__ body, an @aicore function
    asc.simt_end(c, sc)

and the body reads and writes through `simt_load` / `simt_store` / `simt_atomic_add`, which check every index
against its GlobalTensor or LocalTensor (a fault names the thread) and count the access.

Order: threads run one after another in linear id order (x fastest, then y, then z), each to its end. The
real ops' SIMT functions give every thread its own output elements (or use atomics), so their results do not
depend on the order; a function whose result does is racy on the chip too.

Time (assumed figures, cost.CostModel simt_*): a thread block is split into warps of 32 threads, which issue in
lockstep, so a warp costs its busiest thread's instructions; four warp schedulers take warp w % 4 each
(SIMT thread-architecture documentation). Counted instructions are the thread's start and each access;
arithmetic between accesses is taken as free. The call occupies PIPE_V for
    simt_launch_cycles + max(busiest scheduler's warp instructions * simt_cycles_per_warp_instr,
                             max over warps of (GM loads * simt_gm_latency_cycles + instructions * cpi)),
i.e. many warps hide each other's GM latency, one warp's chain of loads cannot. GM loads / stores / atomics
count as scalar GM reads / writes, UB accesses as scalar UB ops, each access as one vector element op.

On the chip the SIMT data cache takes part of the UB (SIMT_RESERVED_UB_BYTES, tiling.platform); a kernel that
makes SIMT calls lays its TPipe out in `simt_ub_capacity(soc)` bytes (plan_simt_pipe).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import types
from numba.extending import overload

from . import check as chk
from . import timeline as tl
from ._jit import DEVICE_JIT_OPTIONS, aicore
from ._memory import data_address
from .atomic import spin_lock, stripe_lock, unlock
from .dtypes import (
    CAST_RINT,
    DT_BF16,
    DT_FLOAT,
    DT_FLOAT16,
    DT_INT32,
    bf16_bits_to_f32_bits,
    f16_bits_to_f32_bits,
    f32_bits_to_bf16_bits,
    f32_bits_to_f16_bits,
    f32_from_bits,
    view_f32_as_u32,
)
from .faults import fault, faulted, issue
from .layout import (
    CALL_SIMT,
    CAP_NPU_ARCH,
    CHK_MODE,
    CNT_S_GM_READS,
    CNT_S_GM_WRITES,
    CNT_S_UB_OPS,
    CNT_V_ELEMS,
    F_ELEM_TYPE,
    F_SIMT_ARCH,
    F_SIMT_OOB,
    F_SIMT_RACE,
    F_SIMT_THREADS,
    PIPE_V,
    SLOT_SIMT_GM_LATENCY,
    SLOT_SIMT_LAUNCH,
    TL_CPR,
)
from .local import note_ub_write, ub_offset
from .vector import as_elem

SIMT_MAX_THREADS = 2048     # asc_vf_call: dimx * dimy * dimz <= 2048 (GetSimtMaxThreadNum() also returns 2048)
SIMT_WARP_THREADS = 32
SIMT_WARP_SCHEDULERS = 4
SIMT_NPU_ARCH = 3510

# words of a call's scratch array (SimtCall.acc)
A_CUR, A_OPS, A_LOADS, A_WARP, A_WOPS, A_WLOADS, A_CHAIN, A_TOTAL = range(8)
A_SCHED = 8                 # A_SCHED + s: warp instructions scheduler s issued
A_OWNED = A_SCHED + SIMT_WARP_SCHEDULERS   # checked mode: addresses in the WAW table
ACC_WORDS = A_OWNED + 1
OWN_SLOTS = 1 << 16          # checked mode: GM store addresses one SIMT call's WAW check remembers (half of them)

SimtCall = namedtuple("SimtCall", ["dim_x", "dim_y", "dim_z", "threads", "acc", "own"])
"""One SIMT call: its dim3, its thread count (0 if it must not run: a fault) and its cost scratch words."""

SimtThread = namedtuple("SimtThread", ["idx", "x", "y", "z", "dim_x", "dim_y", "dim_z", "acc", "own"])
"""A thread of a SIMT call: linear id, threadIdx.{x,y,z} (Simt::GetThreadIdx<0/1/2>()) and blockDim.{x,y,z}
(Simt::GetThreadNum<0/1/2>())."""


@aicore
def simt_vf_call(c, dim_x, dim_y, dim_z):
    """asc_vf_call<fn>(dim3{dim_x, dim_y, dim_z}) / Simt::VF_CALL: start a SIMT call. Faults (and the call runs no
    thread) on a chip that is not NPU arch 3510 or a dim3 outside 1..2048 threads."""
    acc = np.zeros(ACC_WORDS, dtype=np.int64)
    acc[A_CUR] = -1
    acc[A_WARP] = -1
    n = 0
    if issue(c, CALL_SIMT):
        if c.state[CAP_NPU_ARCH] != SIMT_NPU_ARCH:
            fault(c, F_SIMT_ARCH, CALL_SIMT, c.state[CAP_NPU_ARCH])
        elif dim_x < 1 or dim_y < 1 or dim_z < 1 or dim_x > SIMT_MAX_THREADS or dim_y > SIMT_MAX_THREADS \
                or dim_z > SIMT_MAX_THREADS or dim_x * dim_y * dim_z > SIMT_MAX_THREADS:
            fault(c, F_SIMT_THREADS, CALL_SIMT, dim_x, dim_y, dim_z, SIMT_MAX_THREADS)
        else:
            n = dim_x * dim_y * dim_z
    # checked mode: which thread stored each GM address (open addressing: address + 1, thread), see _owner
    own = np.zeros((OWN_SLOTS if c.state[CHK_MODE] != 0 else 1, 2), dtype=np.int64)
    return SimtCall(dim_x, dim_y, dim_z, n, acc, own)


@aicore
def _close_warp(c, acc):
    if acc[A_WARP] < 0:
        return
    cpi = c.state[TL_CPR + CALL_SIMT]
    acc[A_SCHED + acc[A_WARP] % SIMT_WARP_SCHEDULERS] += acc[A_WOPS]
    chain = acc[A_WLOADS] * c.state[TL_CPR + SLOT_SIMT_GM_LATENCY] + acc[A_WOPS] * cpi
    if chain > acc[A_CHAIN]:
        acc[A_CHAIN] = chain
    acc[A_TOTAL] += acc[A_WOPS]
    acc[A_WOPS] = 0
    acc[A_WLOADS] = 0


@aicore
def _close_thread(c, acc):
    """Fold the running thread's counts into its warp (a warp costs its busiest thread)."""
    if acc[A_CUR] < 0:
        return
    warp = acc[A_CUR] // SIMT_WARP_THREADS
    if warp != acc[A_WARP]:
        _close_warp(c, acc)
        acc[A_WARP] = warp
    acc[A_WOPS] = max(acc[A_WOPS], acc[A_OPS])
    acc[A_WLOADS] = max(acc[A_WLOADS], acc[A_LOADS])
    acc[A_OPS] = 0
    acc[A_LOADS] = 0


@aicore
def simt_thread(c, sc, t):
    """Thread t (0 <= t < sc.threads, in order) of the SIMT call: what its body sees as threadIdx / blockDim."""
    acc = sc.acc
    if acc[A_CUR] != t:
        _close_thread(c, acc)
        acc[A_CUR] = t
        acc[A_OPS] = 1          # the thread's start
    x = t % sc.dim_x
    y = (t // sc.dim_x) % sc.dim_y
    z = t // (sc.dim_x * sc.dim_y)
    return SimtThread(t, x, y, z, sc.dim_x, sc.dim_y, sc.dim_z, acc, sc.own)


@aicore
def simt_end(c, sc):
    """The SIMT call's last thread has finished: time the call on PIPE_V (see the module docstring)."""
    if sc.threads == 0:
        return
    acc = sc.acc
    _close_thread(c, acc)
    _close_warp(c, acc)
    busiest = 0
    for s in range(SIMT_WARP_SCHEDULERS):
        busiest = max(busiest, acc[A_SCHED + s])
    cycles = c.state[TL_CPR + SLOT_SIMT_LAUNCH] + max(busiest * c.state[TL_CPR + CALL_SIMT], acc[A_CHAIN])
    c.state[CNT_V_ELEMS] += acc[A_TOTAL]
    tl.simt(c, cycles, sc.threads, acc[A_TOTAL])


@aicore
def thread_idx(th, dim):
    """Simt::GetThreadIdx<dim>() (threadIdx.x / .y / .z)."""
    return th.x if dim == 0 else (th.y if dim == 1 else th.z)


@aicore
def thread_num(th, dim):
    """Simt::GetThreadNum<dim>() (blockDim.x / .y / .z)."""
    return th.dim_x if dim == 0 else (th.dim_y if dim == 1 else th.dim_z)


@aicore
def _owner(c, th, address, nbytes):
    """Checked mode: a plain GM store by thread th; WAW race if another thread of this call stored there. The table
    keeps the first OWN_SLOTS / 2 addresses; later ones go unchecked (a bound on the checker's memory)."""
    own = th.own
    mask = own.shape[0] - 1
    h = (address * 0x9E3779B1) & mask
    for _ in range(own.shape[0] // 2):
        if own[h, 0] == 0:
            if th.acc[A_OWNED] * 2 < own.shape[0]:
                own[h, 0] = address + 1
                own[h, 1] = th.idx
                th.acc[A_OWNED] += 1
            return
        if own[h, 0] == address + 1:
            if own[h, 1] != th.idx:
                fault(c, F_SIMT_RACE, CALL_SIMT, own[h, 1], th.idx, address, nbytes)
            return
        h = (h + 1) & mask


# --- accesses -------------------------------------------------------------------------------------------------
@aicore
def _gm_index(c, th, g, i):
    """Element index of g[i] in g.data, or -1 (fault naming the thread)."""
    if faulted(c):
        return -1
    k = g.offset + i
    if k < 0 or k >= g.data.size:
        isz = g.data.itemsize
        fault(c, F_SIMT_OOB, CALL_SIMT, 1, g.id, k * isz, (k + 1) * isz, g.data.nbytes, th.idx)
        return -1
    th.acc[A_OPS] += 1
    return k


@aicore
def _ub_index_ok(c, th, t, i, write):
    if faulted(c):
        return False
    off = ub_offset(c, t, CALL_SIMT)
    if off < 0:
        return False
    if i < 0 or i >= t.size:
        fault(c, F_SIMT_OOB, CALL_SIMT, 0, off, i * t.itemsize, (i + 1) * t.itemsize, t.nbytes, th.idx)
        return False
    th.acc[A_OPS] += 1
    c.state[CNT_S_UB_OPS] += 1
    if c.state[CHK_MODE] != 0:      # a SIMT call's UB accesses are the vector pipe's
        chk.ub(c, CALL_SIMT, PIPE_V, off + i * t.itemsize, t.itemsize, write)
    return True


def simt_load(c, th, t, i):
    """ptr[i] in a SIMT thread: t a GlobalTensor (`__gm__ T*`) or a LocalTensor (`__ubuf__ T*`); 0 after a fault."""
    raise NotImplementedError("simt_load is only callable from numba code")


def simt_store(c, th, t, i, value):
    """ptr[i] = value in a SIMT thread (GlobalTensor or LocalTensor)."""
    raise NotImplementedError("simt_store is only callable from numba code")


@overload(simt_load, jit_options=DEVICE_JIT_OPTIONS)
def _simt_load(c, th, t, i):
    if isinstance(t, types.Array):
        def ub_load(c, th, t, i):
            if not _ub_index_ok(c, th, t, i, False):
                return as_elem(t, 0)
            return t[i]
        return ub_load

    def gm_load(c, th, t, i):
        k = _gm_index(c, th, t, i)
        if k < 0:
            return as_elem(t.data, 0)
        th.acc[A_LOADS] += 1
        c.state[CNT_S_GM_READS] += 1
        if c.state[CHK_MODE] != 0:
            chk.gm_read(c, CALL_SIMT, PIPE_V, data_address(t.data) + k * t.data.itemsize, t.data.itemsize)
        return t.data[k]
    return gm_load


@overload(simt_store, jit_options=DEVICE_JIT_OPTIONS)
def _simt_store(c, th, t, i, value):
    if isinstance(t, types.Array):
        def ub_store(c, th, t, i, value):
            if _ub_index_ok(c, th, t, i, True):
                t[i] = value
                note_ub_write(c, ub_offset(c, t, CALL_SIMT) + (i + 1) * t.itemsize)
        return ub_store

    def gm_store(c, th, t, i, value):
        k = _gm_index(c, th, t, i)
        if k >= 0:
            c.state[CNT_S_GM_WRITES] += 1
            if c.state[CHK_MODE] != 0:
                _owner(c, th, data_address(t.data) + k * t.data.itemsize, t.data.itemsize)
                chk.gm_write(c, CALL_SIMT, PIPE_V, data_address(t.data) + k * t.data.itemsize, t.data.itemsize)
            t.data[k] = value
    return gm_store


def simt_atomic_add(c, th, g, i, value, dt):
    """Simt::AtomicAdd(&g[i], value) / asc_atomic_add: g[i] += value as type `dt` (ge dtype code) indivisibly,
    returning the old value. float32 and int32 take and return values; float16 / bfloat16 (uint16 GM carrier)
    take and return the bit patterns. Arithmetic as SetAtomicAdd's (atomic.py): fp32 add rounded half to
    even, halves rounded once to T, int32 wraps. Cores on parallel host threads take the same GM stripe locks as
    atomic DMA copies, so no update is lost; the order of fp additions from different cores is their race."""
    raise NotImplementedError("simt_atomic_add is only callable from numba code")


@overload(simt_atomic_add, jit_options=DEVICE_JIT_OPTIONS)
def _simt_atomic_add(c, th, g, i, value, dt):
    carrier = g[0].dtype
    if carrier == types.float32:
        want, want2, size = DT_FLOAT, DT_FLOAT, 4
    elif carrier == types.int32:
        want, want2, size = DT_INT32, DT_INT32, 4
    elif carrier == types.uint16:
        want, want2, size = DT_FLOAT16, DT_BF16, 2
    else:
        want, want2, size = -1, -1, carrier.bitwidth // 8

    def atomic(c, th, g, i, value, dt):
        k = _gm_index(c, th, g, i)
        if k < 0:
            return as_elem(g.data, 0)
        if dt != want and dt != want2:
            atomic_size = 4 if dt == DT_FLOAT or dt == DT_INT32 else 2
            fault(c, F_ELEM_TYPE, CALL_SIMT, size, atomic_size)
            return as_elem(g.data, 0)
        th.acc[A_LOADS] += 1
        c.state[CNT_S_GM_READS] += 1
        c.state[CNT_S_GM_WRITES] += 1
        lock = stripe_lock(c, data_address(g.data) + k * g.data.itemsize)
        spin_lock(lock)
        old = g.data[k]
        g.data[k] = _added(old, value, dt)
        unlock(lock)
        return old
    return atomic


def _added(old, value, dt):
    raise NotImplementedError("_added is only callable from numba code")


@overload(_added, jit_options=DEVICE_JIT_OPTIONS)
def _added_impl(old, value, dt):
    if old == types.float32:
        return lambda old, value, dt: np.float32(old + np.float32(value))
    if old == types.int32:
        return lambda old, value, dt: np.int32(np.int64(old) + np.int64(value))   # wraps around

    def half(old, value, dt):
        if dt == DT_BF16:
            s = f32_from_bits(bf16_bits_to_f32_bits(old)) + f32_from_bits(bf16_bits_to_f32_bits(np.uint16(value)))
            return np.uint16(f32_bits_to_bf16_bits(view_f32_as_u32(s), CAST_RINT))
        s = f32_from_bits(f16_bits_to_f32_bits(old)) + f32_from_bits(f16_bits_to_f32_bits(np.uint16(value)))
        return np.uint16(f32_bits_to_f16_bits(view_f32_as_u32(s), CAST_RINT))
    return half


# --- the UB the SIMT data cache takes (host side) ---------------------------------------------------------------
def simt_ub_capacity(soc) -> int:
    """UB bytes a TPipe of a kernel that makes SIMT calls may lay out on `soc`: ub_size minus the SIMT reservation."""
    return max(0, soc.ub_size - getattr(soc, "simt_reserved_ub_bytes", 0))


def plan_simt_pipe(buffers, soc, **where):
    """pipe.plan_pipe for a kernel with SIMT calls: UBOverflowError if its buffers and the SIMT reservation do not
    fit in the UB together (on the chip the kernel's local memory is set to the UB minus the SIMT data cache)."""
    from .pipe import plan_pipe
    reserved = getattr(soc, "simt_reserved_ub_bytes", 0)
    advice = where.pop("advice", "")
    note = (f"{reserved} bytes of the {soc.ub_size}-byte UB are the SIMT data cache on {soc.name} "
            "(SIMT_UB_SIZE_BYTE of the arch35 tilings)")
    return plan_pipe(buffers, simt_ub_capacity(soc), advice=(advice + "\n" if advice else "") + note, **where)
