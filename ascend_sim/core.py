"""The state one simulated vector core (AIV) carries through a kernel.

A kernel stage is a numba function called once per core with a `Core` as its first
argument. A Core is deliberately small (two arrays and two ints) because every AscendC
call receives it:

* `ub`: the core's Unified Buffer, a uint8 array; a LocalTensor is a typed view of a slice of it,
* `state`: one int64 array holding, at fixed offsets, the per-pipe counters, the fault record,
  the chip limits, the atomic-add mode (SetAtomicAdd), the hardware event flags, the kernel's
  member variables (values a kernel object keeps across SyncAll()) and the queue table of the
  live TPipe,
* `block_idx` / `block_num`: GetBlockIdx() / GetBlockNum().

Anything else a core needs (the timeline's trace buffer) is reached through an address in `state`:
a fifth array in Core makes every AscendC call several times slower.
"""
from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np
from numba import njit

from .layout import (ATOMIC_LOCK_COUNT, ATOMIC_LOCK_TABLE, CAP_MAX_BLOCK_COUNT, CAP_NPU_ARCH, CNT_UB_HWM, ERR_BASE,
                     ERR_COLS, EVENT_IDS, FLAG_BASE, MEMBER_BASE, N_COUNTERS, N_HARD_EVENTS, OUTLINE_RESOLVER,
                     OUTLINE_TABLE, PIPE_QUEUES, POISON_EVEN, POISON_PAIR, QUE_BASE, Q_NUM, UB_DIRTY, UB_POISONED)
from ._outline import RESOLVER_ADDRESS, TABLE_ADDRESS

Core = namedtuple("Core", ["ub", "state", "block_idx", "block_num"])   # state layout: layout.py


@njit(cache=True, nogil=True)
def poison_fill(buf: np.ndarray) -> None:
    """Fill a uint8 buffer with the poison pattern (byte i gets POISON[i % 2]); releases the GIL, so the
    cores of a launch re-poison their UBs in parallel."""
    pairs = buf[: buf.size - buf.size % 2].view(np.uint16)
    pairs[:] = POISON_PAIR
    if buf.size % 2:
        buf[buf.size - 1] = POISON_EVEN


# Atomic-add copies to GM (SetAtomicAdd) from cores on different host threads are made indivisible with
# spinlocks over GM address stripes (datacopy.py). The lock words live here, one table for the process:
# every core's state carries its address, so two launches that share GM (or run at once) share the locks.
ATOMIC_LOCKS = np.zeros(ATOMIC_LOCK_COUNT, dtype=np.int32)


class UbPool:
    """UB arrays of finished launches, handed to the next launch's cores.

    A fresh np.empty of a UB is a new mapping whose pages the OS faults in and zeroes on first touch: for
    48 cores of 192 KiB that is about a millisecond per launch, a tenth of a small kernel's run. A pooled UB
    comes back with the extent its last launch may have written (`dirty`), and start_pipe re-poisons just
    that much, so a kernel sees exactly what a fresh UB would show it. Thread-safe: a UB belongs to one core
    of one launch from `take` until `give`; failed launches do not return theirs.
    """

    def __init__(self, max_bytes: int = 256 << 20):
        self._free: dict[int, list] = {}
        self._bytes = 0
        self._max_bytes = max_bytes
        self._lock = threading.Lock()

    def take(self, ub_size: int):
        """(ub, dirty bytes) of an idle UB of ub_size bytes, or None."""
        with self._lock:
            free = self._free.get(ub_size)
            if not free:
                return None
            self._bytes -= ub_size
            return free.pop()

    def give(self, ub: np.ndarray, dirty: int) -> None:
        with self._lock:
            if self._bytes + ub.size > self._max_bytes:
                return
            self._free.setdefault(ub.size, []).append((ub, dirty))
            self._bytes += ub.size


UB_POOL = UbPool()


def make_core(block_idx: int, block_num: int, ub_size: int, queue_slots: int, max_block_count: int,
              npu_arch: int) -> Core:
    """A fresh core: no TPipe yet (the UB is poisoned by start_pipe, before any stage can run), no flags
    set, counters and clocks zero, atomic add off, the cost model off and no trace until
    timeline.load_costs / timeline.attach_trace. Its UB comes from UB_POOL when one is idle."""
    state = np.zeros(QUE_BASE + queue_slots, dtype=np.int64)
    pooled = UB_POOL.take(ub_size)
    if pooled is None:
        ub = np.empty(ub_size, dtype=np.uint8)
    else:
        ub, state[UB_DIRTY] = pooled
        state[UB_POISONED] = 1     # all of it but the first `dirty` bytes still holds the poison
    state[CAP_MAX_BLOCK_COUNT] = max_block_count
    state[CAP_NPU_ARCH] = npu_arch
    state[ATOMIC_LOCK_TABLE] = ATOMIC_LOCKS.ctypes.data
    state[OUTLINE_TABLE] = TABLE_ADDRESS
    state[OUTLINE_RESOLVER] = RESOLVER_ADDRESS
    return Core(ub, state, block_idx, block_num)


def release_core(core: Core) -> None:
    """Hand a finished core's UB back to UB_POOL with the extent this launch may have written."""
    UB_POOL.give(core.ub, int(max(core.state[CNT_UB_HWM], core.state[UB_DIRTY])))


def start_pipe(core: Core, queue_table: np.ndarray) -> None:
    """A new TPipe on this core: its queue table (one row per InitBuffer) replaces the old one; its
    buffers start undefined. (In checked mode the launcher also orders the new TPipe after the old one's work:
    check.barrier_all.)"""
    table = queue_table.reshape(-1)
    core.state[PIPE_QUEUES] = int(np.count_nonzero(queue_table[:, Q_NUM])) if queue_table.ndim == 2 else 0
    core.state[QUE_BASE:] = 0
    core.state[QUE_BASE:QUE_BASE + table.size] = table
    if core.state[UB_POISONED]:
        # bytes past the high-water mark (and a pooled UB's dirty extent) were never written since the whole
        # UB was poisoned
        poison_fill(core.ub[: int(max(core.state[CNT_UB_HWM], core.state[UB_DIRTY]))])
        core.state[UB_DIRTY] = 0
    else:
        poison_fill(core.ub)
        core.state[UB_POISONED] = 1


def counters(core: Core) -> np.ndarray:
    return core.state[:N_COUNTERS]


def fault_record(core: Core) -> np.ndarray:
    return core.state[ERR_BASE:ERR_BASE + ERR_COLS]


def flags(core: Core) -> np.ndarray:
    return core.state[FLAG_BASE:MEMBER_BASE].reshape(N_HARD_EVENTS, EVENT_IDS)

