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

from collections import namedtuple

import threading

import numpy as np
from numba import njit

from .pipe import Q_NUM

Core = namedtuple("Core", ["ub", "state", "block_idx", "block_num"])

# Pipes of a vector core (PipeBarrier<PIPE_X> and the timeline's lanes).
PIPE_S = 0
PIPE_V = 1
PIPE_MTE2 = 2
PIPE_MTE3 = 3
PIPE_ALL = 4
N_PIPES = 4
PIPE_NAMES = ("S", "V", "MTE2", "MTE3")   # timeline lanes, in pipe order

# Per-core counters, state[0:N_COUNTERS]. Bytes are GM-side bytes moved by the DMA pipes.
CNT_MTE2_BYTES = 0      # GM -> UB bytes (DataCopy / DataCopyPad in)
CNT_MTE2_INSTR = 1
CNT_MTE3_BYTES = 2      # UB -> GM bytes (DataCopy / DataCopyPad out, InitOutput)
CNT_MTE3_INSTR = 3
CNT_V_ELEMS = 4         # vector element-operations (elements each vector instruction processes)
CNT_V_INSTR = 5
CNT_S_GM_READS = 6      # scalar GlobalTensor::GetValue
CNT_S_GM_WRITES = 7     # scalar GlobalTensor::SetValue
CNT_S_UB_OPS = 8        # scalar LocalTensor::GetValue / SetValue
CNT_EVENTS = 9          # SetFlag + WaitFlag, explicit and the ones TQue inserts
CNT_PIPE_BARRIERS = 10
CNT_SYNC_ALL = 11
CNT_UB_HWM = 12         # one past the highest UB byte written
CNT_CALLS = 13          # AscendC calls issued; locates a fault ("call #n")
N_COUNTERS = 14

COUNTER_NAMES = (
    "mte2_bytes", "mte2_instr", "mte3_bytes", "mte3_instr", "vec_elem_ops", "vec_instr",
    "scalar_gm_reads", "scalar_gm_writes", "scalar_ub_ops", "events", "pipe_barriers",
    "sync_all", "ub_hwm_bytes", "calls",
)

FAULT_CALL_INDEX = 14   # CNT_CALLS when the first fault happened
PIPE_QUEUES = 15        # rows of the live TPipe's queue table (queue ids a kernel may use)
ERR_BASE = 16           # state[ERR_BASE:ERR_BASE + ERR_COLS]: fault code (0 = none), call id, six arguments
ERR_COLS = 8
CAP_BASE = 24           # chip limits
CAP_MAX_BLOCK_COUNT = CAP_BASE + 0   # DataCopy(Pad) blockCount upper bound
CAP_NPU_ARCH = CAP_BASE + 1          # 2201 (910B / 910_93) or 3510 (950)
ATOMIC_TYPE = CAP_BASE + 2           # 0 after SetAtomicNone(), else 1 + the ge dtype code of SetAtomicAdd<T>()
ATOMIC_LOCK_TABLE = CAP_BASE + 3     # address of ATOMIC_LOCKS (shared by every core of every launch)
UB_POISONED = CAP_BASE + 4           # 1 once start_pipe has poisoned the whole UB
UB_DIRTY = CAP_BASE + 5              # bytes a pooled UB's previous launch may have written (see UbPool)
EVENT_IDS = 8
N_HARD_EVENTS = 13
# HardEvent values (events.py): SRC_DST, the DST pipe waits for the SRC pipe
HARD_EVENT_NAMES = ("MTE2_V", "V_MTE2", "MTE3_V", "V_MTE3", "V_V", "MTE3_MTE2", "MTE2_MTE3",
                    "S_V", "V_S", "S_MTE2", "MTE2_S", "S_MTE3", "MTE3_S")
FLAG_BASE = 32          # state[FLAG_BASE + event * EVENT_IDS + id] is 1 while a SetFlag awaits its WaitFlag
MEMBER_BASE = FLAG_BASE + N_HARD_EVENTS * EVENT_IDS   # kernel member variables that live across SyncAll()
N_MEMBERS = 64
# The timeline (timeline.py): per-pipe clocks, the cost model's figures, flag times and the scalar data cache.
TL_BASE = MEMBER_BASE + N_MEMBERS
TL_END = TL_BASE                 # TL_END + pipe: cycle the pipe can start its next instruction (PIPE_S: the scalar
                                 # unit's time)
TL_BUSY = TL_BASE + 4            # TL_BUSY + pipe: cycles the pipe was busy
TL_ON = TL_BASE + 8              # 1 while the cost model runs
TL_TRACE_N = TL_BASE + 9         # calls offered to the trace (rows past its end are dropped and counted)
TL_RATE = TL_BASE + 10           # TL_RATE + pipe: DMA bytes per RATE_SCALE cycles (MTE2, MTE3 slots used)
TL_LATENCY = TL_BASE + 14        # TL_LATENCY + pipe: fixed cycles of one DMA instruction
TL_BURST = TL_BASE + 18
TL_VEC_ISSUE = TL_BASE + 19
TL_CALL = TL_BASE + 20           # scalar cycles to issue a call
TL_SCALAR_UB = TL_BASE + 21
TL_GM_HIT = TL_BASE + 22
TL_GM_MISS = TL_BASE + 23
TL_GM_WRITE = TL_BASE + 24
TL_EVENT = TL_BASE + 25
TL_BARRIER = TL_BASE + 26
TL_DCACHE_SHIFT = TL_BASE + 27   # log2 of the data cache's line bytes
TL_DCACHE_MASK = TL_BASE + 28    # lines - 1
TL_DMA_ISSUE = TL_BASE + 29      # fixed pipe cycles of one DMA instruction
TL_DONE = TL_BASE + 30           # TL_DONE + pipe: cycle the pipe's work so far is complete (DMA: landed in memory)
TL_TRACE_ADDR = TL_BASE + 34     # address of the core's trace rows (int64, TRACE_COLS each)
TL_TRACE_CAP = TL_BASE + 35      # rows the trace holds (0: no trace)
N_CALL_IDS = 64
TL_CPR = TL_BASE + 36            # TL_CPR + call id: vector cycles per 256-byte repeat
TL_FLAG_T = TL_CPR + N_CALL_IDS  # TL_FLAG_T + event * EVENT_IDS + id: cycle the flag rises
TL_FLAG_CALL = TL_FLAG_T + N_HARD_EVENTS * EVENT_IDS   # call number of the SetFlag that raised it (trace flows)
DCACHE_MAX_LINES = 256
TL_DCACHE = TL_FLAG_CALL + N_HARD_EVENTS * EVENT_IDS   # tags of the scalar data cache (line address + 1; 0 = empty)
TL_SIZE = TL_DCACHE + DCACHE_MAX_LINES - TL_BASE
# Checked mode (check.py): pipe epochs and known-epoch vectors, flag vectors, the GM write ring, the shadow's address.
CHK_BASE = TL_BASE + TL_SIZE
CHK_MODE = CHK_BASE              # 0 off, 1 race, 2 strict
CHK_SHADOW_ADDR = CHK_BASE + 1
CHK_SHADOW_BLOCKS = CHK_BASE + 2
CHK_GM_N = CHK_BASE + 3          # GM writes recorded so far (the ring keeps the last CHK_GM_ENTRIES)
CHK_E = CHK_BASE + 4             # CHK_E + pipe: the pipe's release epoch
CHK_K = CHK_BASE + 8             # CHK_K + pipe * 4 + other: epochs of `other` the pipe is known to come after
CHK_FLAG_V = CHK_BASE + 24       # CHK_FLAG_V + (event * EVENT_IDS + id) * 4: the vector a SetFlag released
CHK_GM_ENTRIES = 32
CHK_GM = CHK_FLAG_V + N_HARD_EVENTS * EVENT_IDS * 4    # ring rows: start, end, pipe, stamp, call number * 64 + call
CHK_WAIVERS = 8
CHK_WAIVE_N = CHK_GM + CHK_GM_ENTRIES * 5          # waivers in use
CHK_WAIVED = CHK_WAIVE_N + 1                        # races a waiver let pass
CHK_WAIVE = CHK_WAIVE_N + 2                         # rows: first pipe, first call id, second pipe, second call id
CHK_OWN_WAIVE = CHK_WAIVE + CHK_WAIVERS * 4          # bit q: the live TPipe's queue q may be used after FreeTensor
CHK_FN = CHK_OWN_WAIVE + 1                          # addresses of the checker's compiled entries (_check_entries)
CHK_FN_UB, CHK_FN_VECTOR, CHK_FN_GM_READ = range(CHK_FN, CHK_FN + 3)
CHK_SIZE = CHK_FN + 3 - CHK_BASE
QUE_BASE = CHK_BASE + CHK_SIZE                        # queue table rows of the live TPipe (pipe.py), QUE_COLS each

# Trace rows: call number, AscendC call id, pipe, start cycle, end cycle, two arguments, and the call number of
# the SetFlag / EnQue / FreeTensor whose event this call waited for (-1: none).
TRACE_COLS = 8

# Two-byte poison pattern for memory nobody wrote: reads as NaN in fp32, fp16 and bf16,
# and as a huge positive int32, so a kernel that consumes it fails loudly.
POISON = np.array([0xBF, 0x7F], dtype=np.uint8)
POISON_EVEN = 0xBF
POISON_ODD = 0x7F
POISON_PAIR = np.uint16(POISON_ODD << 8 | POISON_EVEN)    # the two bytes as one little-endian uint16


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
ATOMIC_LOCK_COUNT = 4096
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
    return Core(ub, state, block_idx, block_num)


def release_core(core: Core) -> None:
    """Hand a finished core's UB back to UB_POOL with the extent this launch may have written."""
    UB_POOL.give(core.ub, int(max(core.state[CNT_UB_HWM], core.state[UB_DIRTY])))


def start_pipe(core: Core, queue_table: np.ndarray) -> None:
    """A new TPipe on this core: its queue table (one row per InitBuffer) replaces the old one; its
    buffers start undefined."""
    table = queue_table.reshape(-1)
    core.state[PIPE_QUEUES] = int(np.count_nonzero(queue_table[:, Q_NUM])) if queue_table.ndim == 2 else 0
    core.state[QUE_BASE:] = 0
    core.state[QUE_BASE:QUE_BASE + table.size] = table
    if core.state[CHK_MODE]:
        from .check import barrier_all
        barrier_all(core.state)      # a new TPipe starts after the old one's work (TPipe::Destroy waits for it)
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

