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

The launcher's cores are rows of a CoreSet (one UB slab, one state array), pooled between launches in CORE_SETS.
"""
from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np

from ._jit import host_jit
from ._outline import RESOLVER_ADDRESS, TABLE_ADDRESS
from .layout import (
    ATOMIC_LOCK_COUNT,
    ATOMIC_LOCK_TABLE,
    CAP_MAX_BLOCK_COUNT,
    CAP_NPU_ARCH,
    CNT_UB_HWM,
    ERR_BASE,
    ERR_COLS,
    EVENT_IDS,
    FLAG_BASE,
    MEMBER_BASE,
    N_COUNTERS,
    N_HARD_EVENTS,
    OUTLINE_RESOLVER,
    OUTLINE_TABLE,
    PIPE_QUEUES,
    POISON_EVEN,
    POISON_PAIR,
    Q_NUM,
    QUE_BASE,
    UB_DIRTY,
    UB_POISONED,
)

Core = namedtuple("Core", ["ub", "state", "block_idx", "block_num"])   # state layout: layout.py
"""One simulated vector core, the `c` every kernel call takes first: `ub` its Unified Buffer (uint8, ub_size bytes),
`state` its int64 state array (layout.py), `block_idx` / `block_num` GetBlockIdx() / GetBlockNum()."""


@host_jit
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


@host_jit
def _poison_rows(flat_ubs: np.ndarray, ub_size: int, extents: np.ndarray) -> None:
    """poison_fill of the first extents[i] bytes of every core's UB (row i of the flat UB slab)."""
    for i in range(extents.size):
        poison_fill(flat_ubs[i * ub_size: i * ub_size + extents[i]])


class CoreSet:
    """The Cores of one launch of block_dim blocks: their UBs (rows of one slab) and states (rows of one array).

    Pooled between launches: a fresh np.empty of a UB is a new mapping whose pages the OS faults in and zeroes on
    first touch (about a millisecond for 48 cores of 192 KiB). `dirty[i]` is how far the last launch may have
    written core i's UB, `poisoned[i]` whether the rest still holds the poison, so the next launch re-poisons
    only that much and a kernel sees exactly what a fresh UB would show it."""

    def __init__(self, block_dim: int, ub_size: int):
        self.block_dim, self.ub_size = block_dim, ub_size
        self.ubs = np.empty((block_dim, ub_size), dtype=np.uint8)
        self.dirty = np.zeros(block_dim, dtype=np.int64)
        self.poisoned = np.zeros(block_dim, dtype=np.int64)
        self.width = -1
        self.states = np.zeros((block_dim, 0), dtype=np.int64)
        self.cores: list[Core] = []
        self.l2 = np.zeros((block_dim, 0), dtype=np.int64)
        self.l2_epoch = 0
        self.same_address_logs = np.zeros((block_dim, 0), dtype=np.int64)

    def same_address_log(self, entries: int) -> np.ndarray:
        """Every core's same-address log of `entries` (key, bytes) pairs (np.zeros: pages untouched until used)."""
        if self.same_address_logs.shape[1] != 2 * entries:
            self.same_address_logs = np.zeros((self.block_dim, 2 * entries), dtype=np.int64)
        return self.same_address_logs

    def l2_tables(self, lines: int) -> tuple[np.ndarray, int]:
        """Every core's L2 table of `lines` lines (two words each: tag, blocks read) and a fresh launch epoch: tags of
        earlier launches carry an older epoch, so the tables need no clearing between launches (a new table or a wrapped
        epoch starts zeroed)."""
        self.l2_epoch += 1
        if self.l2.shape[1] != 2 * max(lines, 1) or self.l2_epoch >= 1 << 22:
            self.l2 = np.zeros((self.block_dim, 2 * max(lines, 1)), dtype=np.int64)
            self.l2_epoch = 1
        return self.l2, self.l2_epoch

    @property
    def nbytes(self) -> int:
        return self.ubs.nbytes + self.states.nbytes + self.l2.nbytes + self.same_address_logs.nbytes

    def fit(self, width: int) -> None:
        """States of `width` int64 words (QUE_BASE + the queue slots of the launch's largest TPipe)."""
        if width != self.width:
            self.states = np.zeros((self.block_dim, width), dtype=np.int64)
            self.cores = [Core(self.ubs[i], self.states[i], i, self.block_dim) for i in range(self.block_dim)]
            self.width = width

    def reset(self, template: np.ndarray) -> None:
        """Every core as make_core leaves it and timeline.load_costs loads it (`template`), on this set's UBs."""
        self.states[:] = template
        self.states[:, UB_POISONED] = self.poisoned
        self.states[:, UB_DIRTY] = self.dirty

    def start_pipes(self, tables: list[np.ndarray]) -> None:
        """core.start_pipe on every core at once (one queue table for all, or one each)."""
        states = self.states
        states[:, QUE_BASE:] = 0
        for i, table in enumerate(tables):
            rows = states if len(tables) == 1 else states[i]
            rows[..., PIPE_QUEUES] = int(np.count_nonzero(table[:, Q_NUM])) if table.ndim == 2 else 0
            rows[..., QUE_BASE:QUE_BASE + table.size] = table.reshape(-1)
        poisoned = states[:, UB_POISONED] != 0
        extents = np.where(poisoned, np.maximum(states[:, CNT_UB_HWM], states[:, UB_DIRTY]), self.ub_size)
        _poison_rows(self.ubs.reshape(-1), self.ub_size, extents)
        states[poisoned, UB_DIRTY] = 0
        states[:, UB_POISONED] = 1

    def finish(self) -> None:
        """Remember what this launch may have written (the high-water mark, or a pooled UB's dirty extent) before the
        set is pooled."""
        self.poisoned = (self.states[:, UB_POISONED] != 0).astype(np.int64)
        self.dirty = np.where(self.poisoned != 0, np.maximum(self.states[:, CNT_UB_HWM], self.states[:, UB_DIRTY]), 0)


class _CoreSets:
    """Idle CoreSets by (block_dim, ub_size), at most `max_bytes` of them; thread-safe. A set belongs to one
    launch from take() until give(); failed launches do not give theirs back."""

    def __init__(self, max_bytes: int = 512 << 20):
        self._free: dict[tuple, list] = {}
        self._bytes = 0
        self._max_bytes = max_bytes
        self._lock = threading.Lock()

    def take(self, block_dim: int, ub_size: int, width: int) -> CoreSet:
        with self._lock:
            free = self._free.get((block_dim, ub_size))
            crew = free.pop() if free else None
            if crew is not None:
                self._bytes -= crew.nbytes
        if crew is None:
            crew = CoreSet(block_dim, ub_size)
        crew.fit(width)
        return crew

    def give(self, crew: CoreSet) -> None:
        crew.finish()
        with self._lock:
            if self._bytes + crew.nbytes > self._max_bytes:
                return
            self._free.setdefault((crew.block_dim, crew.ub_size), []).append(crew)
            self._bytes += crew.nbytes

    def idle_sets(self, block_dim: int, ub_size: int) -> int:
        """How many sets of this shape wait in the pool (for tests)."""
        with self._lock:
            return len(self._free.get((block_dim, ub_size), ()))


CORE_SETS = _CoreSets()


def make_core(block_idx: int, block_num: int, ub_size: int, queue_slots: int, max_block_count: int,
              npu_arch: int) -> Core:
    """A fresh core: no TPipe yet (the UB is poisoned by start_pipe, before any stage can run), no flags
    set, counters and clocks zero, atomic add off, the cost model off and no trace until
    timeline.load_costs / timeline.attach_trace. (The launcher builds its cores as rows of a pooled CoreSet.)"""
    state = np.zeros(QUE_BASE + queue_slots, dtype=np.int64)
    ub = np.empty(ub_size, dtype=np.uint8)
    state[CAP_MAX_BLOCK_COUNT] = max_block_count
    state[CAP_NPU_ARCH] = npu_arch
    state[ATOMIC_LOCK_TABLE] = ATOMIC_LOCKS.ctypes.data
    state[OUTLINE_TABLE] = TABLE_ADDRESS
    state[OUTLINE_RESOLVER] = RESOLVER_ADDRESS
    return Core(ub, state, block_idx, block_num)


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

