"""Checked mode: pipe races and tensor ownership (numba).

The simulator executes every call in program order, so a kernel that forgets a sync still
computes the right numbers here. Checked mode (`check="race"` on a launch or an aclnn call,
or ASCEND_SIM_CHECK=race) finds those kernels:

* Happens-before. Each pipe p keeps an epoch E[p], the number of its release points so far
  (SetFlag with p as source, EnQue / FreeTensor with p as producer / consumer, PipeBarrier<p>),
  and a vector K[p][r]: how many of pipe r's release points p is known to come after. An
  access by p is stamped with E[p]. A release stores K[p] (with its own epoch) in the flag or
  queue buffer; the matching acquire (WaitFlag, DeQue, AllocTensor) raises K of the waiting
  pipe to it. An earlier access (pipe q, stamp s) happens before a later one on pipe p iff
  K[p][q] > s. The scalar unit is ordered with itself, and a scalar read has completed before
  the scalar unit issues the next call (so no later write races with it); other pipes are ordered with themselves
  only by a PipeBarrier or a chain of events (a DMA engine may reorder its writes, and the
  vector pipe may start an instruction before the last one has written its result).
* UB shadow. Every 32-byte block of the UB remembers its last write (pipe, stamp, call) and
  each pipe's last read; blocks that share all of these form a run with one record, so an
  access costs a few steps per run it touches, not per block. A read that does not come after the block's last write (RAW), a
  write that does not come after the last write (WAW) or after every other pipe's last read
  (WAR) is a PipeRaceError naming both calls.
* Two modes. "strict" follows the AscendC documentation: a pipe is ordered with itself only by
  a PipeBarrier (a vector instruction reading an earlier one's result, two DMA writes to the
  same bytes), and the scalar unit only by the *_S events. "race" follows what the shipped
  production kernels rely on: consecutive vector instructions and a DMA pipe's own writes are
  in order, and a WaitFlag / DeQue / AllocTensor / PipeBarrier also holds the scalar unit
  (kernels read the index tiles they DeQue'd with GetValue, with no MTE2_S event, and read
  vector results with GetValue after a PipeBarrier<PIPE_V>).
* GM. The last GM writes of the core (MTE3 DataCopy, InitOutput, scalar SetValue) are kept in
  a ring; a read by another pipe of the same core (MTE2 DataCopy, scalar GetValue) of bytes
  such a write covered, without an edge between them, is a race. Cores are ordered by SyncAll.
* Ownership. A vector or DMA instruction on a TQue buffer that is free (before its AllocTensor
  or after its FreeTensor) or enqueued (after EnQue, before DeQue) is a QueueError.

The shadow lives in a host buffer the launcher allocates in checked mode only, reached through
its address in the core state (load_i64 / store_i64). The UB and GM-read checks are compiled once
as C functions (_check_entries) that kernels call by address; kernels inline only a test of the
mode, so the default mode pays one test per call and the checks add nothing to a stage's compile.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from ._jit import aicore
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from ._memory import call_by_address, data_address, load_i64, store_i64
from .core import (CHK_E, CHK_FLAG_V, CHK_FN, CHK_FN_GM_READ, CHK_FN_UB, CHK_FN_VECTOR, CHK_GM, CHK_GM_ENTRIES,
                   CHK_GM_N, CHK_K, CHK_MODE, CHK_OWN_WAIVE, CHK_SHADOW_ADDR, CHK_SHADOW_BLOCKS, CHK_WAIVE,
                   CHK_WAIVE_N, CHK_WAIVED, CHK_WAIVERS, CNT_CALLS, EVENT_IDS, N_PIPES, PIPE_ALL, PIPE_QUEUES, PIPE_S,
                   PIPE_V, QUE_BASE)
from .faults import F_PIPE_RACE, F_QUE_OWNER, fault
from .pipe import KIND_TBUF, Q_BASE, Q_FREE_CALL, Q_KIND, Q_LEN, Q_NUM, Q_STATE, QUE_COLS

MODE_OFF = 0
MODE_RACE = 1
MODE_STRICT = 2
MODES = {"race": MODE_RACE, "strict": MODE_STRICT}

RAW, WAR, WAW = 0, 1, 2
KIND_NAMES = ("RAW", "WAR", "WAW")
MEM_UB, MEM_GM = 0, 1

SHADOW_COLS = 11     # write pipe + 1, write stamp, write call, read stamp + 1 per pipe, read call per pipe
BLOCK = 32

# queue buffer ownership states (queue.py): FREE 0, OCCUPIED 1, ENQUE 2, DEQUE 3
_FREE = 0
_ENQUE = 2


CHECK_ENV = "ASCEND_SIM_CHECK"
_CHECKED: ContextVar[str | None] = ContextVar("ascend_sim_check", default=None)


@contextmanager
def checked(mode: str = "race"):
    """Run the launches inside the block (this thread) in checked mode `mode` ("race" or "strict")."""
    resolve(mode)
    token = _CHECKED.set(mode)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def resolve(check) -> int:
    """The checked mode of a launch: `check` if given ("race", "strict", "off" / None), else the enclosing
    `checked()` block, else $ASCEND_SIM_CHECK. ConfigError for anything else."""
    from .errors import ConfigError
    for source, value in (("check", check), ("checked()", _CHECKED.get()),
                          (CHECK_ENV, os.environ.get(CHECK_ENV, "").strip() or None)):
        if value is None:
            continue
        if value in ("off", ""):
            return MODE_OFF
        if value not in MODES:
            raise ConfigError(f"{source} must be 'race', 'strict' or 'off', got {value!r}")
        return MODES[value]
    return MODE_OFF


def attach(state: np.ndarray, mode: int, ub_size: int, waivers=()) -> np.ndarray:
    """Turn checked mode on for a core (host side) and return its UB shadow, which the caller keeps alive for
    the launch. `waivers`: RaceWaivers of the kernel, races between exactly those two calls on those two pipes
    that are let pass (and counted).

    The shadow is flat int64: SHADOW_COLS words per 32-byte block (a run's record lives in its first block),
    then the run-start bitmap, one bit per block and a sentinel bit. It starts as one run nothing has accessed."""
    if len(waivers) > CHK_WAIVERS:
        raise ValueError(f"a kernel may waive at most {CHK_WAIVERS} races, got {len(waivers)}")
    blocks = (ub_size + BLOCK - 1) // BLOCK
    shadow = np.zeros(blocks * SHADOW_COLS + blocks // 64 + 1, dtype=np.int64)
    bitmap = shadow[blocks * SHADOW_COLS:].view(np.uint64)
    bitmap[0] |= np.uint64(1)
    bitmap[blocks // 64] |= np.uint64(1) << np.uint64(blocks % 64)
    from ._check_entries import ENTRIES    # compiled, or loaded from the disk cache, on the first checked launch
    state[CHK_FN:CHK_FN + len(ENTRIES)] = ENTRIES
    state[CHK_MODE] = mode
    state[CHK_SHADOW_ADDR] = shadow.ctypes.data
    state[CHK_SHADOW_BLOCKS] = blocks
    state[CHK_WAIVE_N] = len(waivers)
    for k, w in enumerate(waivers):
        state[CHK_WAIVE + 4 * k: CHK_WAIVE + 4 * k + 4] = w.codes()
    return shadow


class RaceWaiver:
    """A race a shipped kernel has on purpose because the real kernel has it: the `first` call on `first_pipe`
    and the `second` call on `second_pipe` (AscendC call names as in faults.CALL_NAMES, pipes "S", "V", "MTE2",
    "MTE3"), with the reason. Checked mode lets exactly that pair pass and counts it
    (RunReport.extra["waived_races"]); the README lists every waiver."""

    def __init__(self, first_pipe: str, first: str, second_pipe: str, second: str, reason: str):
        from .core import PIPE_NAMES
        from .faults import CALL_NAMES
        ids = {name: k for k, name in CALL_NAMES.items()}
        for call in (first, second):
            if call not in ids:
                raise ValueError(f"unknown AscendC call {call!r}")
        self.first_pipe, self.first, self.second_pipe, self.second, self.reason = (
            first_pipe, first, second_pipe, second, reason)
        self._codes = (PIPE_NAMES.index(first_pipe), ids[first], PIPE_NAMES.index(second_pipe), ids[second])

    def codes(self) -> tuple:
        return self._codes

    def __repr__(self) -> str:
        return f"RaceWaiver({self.first_pipe} {self.first} -> {self.second_pipe} {self.second}: {self.reason})"


def barrier_all(s: np.ndarray) -> None:
    """Host side: every pipe of this core comes after everything before (a new TPipe, SyncAll)."""
    s[CHK_E:CHK_E + N_PIPES] += 1
    for p in range(N_PIPES):
        s[CHK_K + p * N_PIPES: CHK_K + (p + 1) * N_PIPES] = s[CHK_E:CHK_E + N_PIPES]


def sync_all(states) -> None:
    """SyncAll() in checked mode: every pipe of every core comes after everything before it, GM writes
    included (other cores may read them now)."""
    for s in states:
        if s[CHK_MODE] != MODE_OFF:
            barrier_all(s)
            s[CHK_GM_N] = 0


# --- happens-before ------------------------------------------------------------------------
@aicore
def _before(c, q, stamp, p):
    """Does an access by pipe q stamped `stamp` happen before what pipe p does now?"""
    if q == PIPE_S and p == PIPE_S:
        return True
    return c.state[CHK_K + p * N_PIPES + q] > stamp


@aicore
def release(c, src, slot):
    """A release point of pipe `src` (SetFlag, EnQue, FreeTensor): its vector goes to state[slot : slot + 4]."""
    c.state[CHK_E + src] += 1
    for r in range(N_PIPES):
        c.state[slot + r] = c.state[CHK_K + src * N_PIPES + r]
    c.state[slot + src] = c.state[CHK_E + src]


@aicore
def _raise_known(c, dst, slot):
    for r in range(N_PIPES):
        k = CHK_K + dst * N_PIPES + r
        if c.state[slot + r] > c.state[k]:
            c.state[k] = c.state[slot + r]


@aicore
def acquire(c, dst, slot):
    """Pipe `dst` waits for the release stored at state[slot : slot + 4] (WaitFlag, DeQue, AllocTensor). In mode
    "race" the scalar unit's later reads and writes come after it too (see the module docstring)."""
    _raise_known(c, dst, slot)
    if dst != PIPE_S and c.state[CHK_MODE] == MODE_RACE:
        _raise_known(c, PIPE_S, slot)


@aicore
def flag_slot(evt, event_id):
    return CHK_FLAG_V + (evt * EVENT_IDS + event_id) * N_PIPES


@aicore
def barrier(c, pipe):
    """PipeBarrier<pipe>: the pipe's later work comes after its earlier work; PIPE_ALL joins every pipe."""
    if pipe == PIPE_ALL:
        for p in range(N_PIPES):
            c.state[CHK_E + p] += 1
        for p in range(N_PIPES):
            for r in range(N_PIPES):
                c.state[CHK_K + p * N_PIPES + r] = c.state[CHK_E + r]
        return
    c.state[CHK_E + pipe] += 1
    c.state[CHK_K + pipe * N_PIPES + pipe] = c.state[CHK_E + pipe]
    if c.state[CHK_MODE] == MODE_RACE:      # the scalar unit issued the barrier and waits at it too
        c.state[CHK_K + PIPE_S * N_PIPES + pipe] = c.state[CHK_E + pipe]


# --- UB accesses ----------------------------------------------------------------------------
@aicore
def _race(c, call, kind, mem, other_pipe, other, pipe, start, end):
    """Record a PipeRaceError (`other` is the earlier access's call number * 64 + its call id), unless the
    kernel waives this pair of calls: then count it and return False (the access goes on)."""
    for k in range(c.state[CHK_WAIVE_N]):
        w = CHK_WAIVE + 4 * k
        if (c.state[w] == other_pipe and c.state[w + 1] == other % 64 and c.state[w + 2] == pipe
                and c.state[w + 3] == call):
            c.state[CHK_WAIVED] += 1
            return False
    fault(c, F_PIPE_RACE, call, other // 64, other % 64, other_pipe | (pipe << 4) | (kind << 8) | (mem << 12),
          start, end, 0)
    return True


@aicore
def _owned(c, call, off):
    """The UB byte `off` is not in a TQue buffer that is free or enqueued (QueueError otherwise)."""
    for q in range(c.state[PIPE_QUEUES]):
        r = QUE_BASE + q * QUE_COLS
        if c.state[r + Q_KIND] == KIND_TBUF:
            continue
        base = c.state[r + Q_BASE]
        length = c.state[r + Q_LEN]
        if off < base or off >= base + length * c.state[r + Q_NUM]:
            continue
        i = (off - base) // length
        state = c.state[r + Q_STATE + i]
        if (c.state[CHK_OWN_WAIVE] >> q) & 1:
            return True
        if state == _FREE or state == _ENQUE:
            fault(c, F_QUE_OWNER, call, q, i, state, c.state[r + Q_FREE_CALL + i])
            return False
        return True
    return True


# The shadow is kept in runs: consecutive blocks whose last accesses are the same share one record, kept in the
# run's first block, and a bitmap marks where runs start (bit `blocks` is a sentinel). A write makes its whole
# range one run; a read by V or a DMA pipe splits runs at its ends. A DataCopy of a whole tile then checks and
# records one run instead of every 32-byte block of it, which is what keeps checked mode within a few times the
# unchecked run time.
@aicore
def _run_start(addr, bits, b):
    """The first block of the run that holds block b."""
    w = b >> 6
    m = load_i64(addr, bits + w) & ((2 << (b & 63)) - 1)
    while m == 0:                       # bit 0 is always set
        w -= 1
        m = load_i64(addr, bits + w)
    return w * 64 + 63 - leading_zeros(m)


@aicore
def _run_end(addr, bits, b):
    """The first block after the run that holds block b (the next run's start or the sentinel)."""
    w = b >> 6
    m = load_i64(addr, bits + w) & ~((2 << (b & 63)) - 1)
    while m == 0:                       # the sentinel bit ends the search
        w += 1
        m = load_i64(addr, bits + w)
    return w * 64 + trailing_zeros(m)


@aicore
def _split(addr, bits, b):
    """Let a run start at block b, with the record of the run it was part of."""
    w = bits + (b >> 6)
    bit = 1 << (b & 63)
    word = load_i64(addr, w)
    if word & bit:
        return
    h = _run_start(addr, bits, b)
    for k in range(SHADOW_COLS):
        store_i64(addr, b * SHADOW_COLS + k, load_i64(addr, h * SHADOW_COLS + k))
    store_i64(addr, w, word | bit)


@aicore
def _join(addr, bits, b0, b1):
    """Make blocks [b0, b1) one run (b0 already starts one): clear the run starts inside."""
    lo = b0 + 1
    while lo < b1:
        r = lo & 63
        n = min(64 - r, b1 - lo)
        mask = -1 if n == 64 else ((1 << n) - 1) << r
        w = bits + (lo >> 6)
        store_i64(addr, w, load_i64(addr, w) & ~mask)
        lo += n


@aicore
def check_ub(c, call, pipe, off, nbytes, write):
    """Check an access of `nbytes` UB bytes from `off` by `pipe` for the current AscendC call `call`, and record it."""
    if nbytes <= 0 or off < 0:
        return
    if pipe != PIPE_S and not _owned(c, call, off):
        return
    addr = c.state[CHK_SHADOW_ADDR]
    blocks = c.state[CHK_SHADOW_BLOCKS]
    bits = blocks * SHADOW_COLS
    b0 = off // BLOCK
    b1 = min((off + nbytes + BLOCK - 1) // BLOCK, blocks)
    if b0 >= b1:
        return
    stamp = c.state[CHK_E + pipe]
    me = c.state[CNT_CALLS] * 64 + call
    strict = c.state[CHK_MODE] == MODE_STRICT
    # a scalar read has completed before the scalar unit issues anything after it, so it is never the earlier
    # access of a race and is not recorded (nor are runs split for it)
    record = write or pipe != PIPE_S
    if record:
        _split(addr, bits, b0)
        if b1 < blocks:
            _split(addr, bits, b1)
        h = b0
    else:
        h = _run_start(addr, bits, b0)
    while h < b1:
        e = _run_end(addr, bits, h)
        row = h * SHADOW_COLS
        lo = max(h, b0) * BLOCK
        hi = min(e, b1) * BLOCK
        if write:           # a reader of another pipe first: it names the call that still needs the bytes
            for r in range(N_PIPES):
                rs = load_i64(addr, row + 3 + r) - 1
                if rs >= 0 and r != pipe and r != PIPE_S and not _before(c, r, rs, pipe) and _race(
                        c, call, WAR, MEM_UB, r, load_i64(addr, row + 7 + r), pipe, lo, hi):
                    return
        wp = load_i64(addr, row) - 1
        if wp >= 0:
            # the scalar unit is ordered with itself; in mode "race" the vector pipe's writes and reads of its own
            # results, and a DMA pipe's writes, follow program order too
            ordered_same = wp == pipe and (pipe == PIPE_S or (not strict and (pipe == PIPE_V or write))
                                           or (pipe == PIPE_V and write))
            if not ordered_same and not _before(c, wp, load_i64(addr, row + 1), pipe) and _race(
                    c, call, WAW if write else RAW, MEM_UB, wp, load_i64(addr, row + 2), pipe, lo, hi):
                return
        if record and not write:
            store_i64(addr, row + 3 + pipe, stamp + 1)
            store_i64(addr, row + 7 + pipe, me)
        h = e
    if write:
        _join(addr, bits, b0, b1)
        row = b0 * SHADOW_COLS
        store_i64(addr, row, pipe + 1)
        store_i64(addr, row + 1, stamp)
        store_i64(addr, row + 2, me)
        for r in range(N_PIPES):
            store_i64(addr, row + 3 + r, 0)


# --- GM accesses ----------------------------------------------------------------------------
@aicore
def gm_write(c, call, pipe, address, nbytes):
    """Remember a GM write of this core (MTE3 or the scalar unit) in the ring (callers test the mode first)."""
    if nbytes <= 0:
        return
    n = c.state[CHK_GM_N]
    e = CHK_GM + (n % CHK_GM_ENTRIES) * 5
    c.state[e] = address
    c.state[e + 1] = address + nbytes
    c.state[e + 2] = pipe
    c.state[e + 3] = c.state[CHK_E + pipe]
    c.state[e + 4] = c.state[CNT_CALLS] * 64 + call
    c.state[CHK_GM_N] = n + 1


@aicore
def check_gm_read(c, call, pipe, address, nbytes):
    """A GM read by `pipe` must come after this core's overlapping writes by other pipes."""
    if nbytes <= 0:
        return
    kept = min(c.state[CHK_GM_N], CHK_GM_ENTRIES)
    end = address + nbytes
    for j in range(kept):
        e = CHK_GM + j * 5
        if c.state[e + 2] != pipe and c.state[e] < end and address < c.state[e + 1] \
                and not _before(c, c.state[e + 2], c.state[e + 3], pipe) \
                and _race(c, call, RAW, MEM_GM, c.state[e + 2], c.state[e + 4], pipe, max(address, c.state[e]),
                          min(end, c.state[e + 1])):
            return


@aicore
def check_vector_access(c, call, d, d_bytes, s0, s0_bytes, s1, s1_bytes):
    """A PIPE_V instruction reads [s0, s0 + s0_bytes) and [s1, s1 + s1_bytes) (s1 < 0: no second source), then
    writes [d, d + d_bytes): sources first, so an in-place instruction does not race with itself."""
    check_ub(c, call, PIPE_V, s0, s0_bytes, False)
    if s1 >= 0:
        check_ub(c, call, PIPE_V, s1, s1_bytes, False)
    check_ub(c, call, PIPE_V, d, d_bytes, True)


# --- what kernels call ----------------------------------------------------------------------
# The checks above are compiled once, as C functions (_check_entries), and kernels call them by the addresses
# attach() puts in the core state. Inlined, their code was optimised again inside every kernel stage that makes
# an AscendC call (about a tenth of the demo's cold compile); a call by address costs a few nanoseconds, and only
# in checked mode. Call sites test the mode before computing the arguments; the stubs test it again so that no
# call can jump to an address attach() has not set.
@aicore
def ub(c, call, pipe, off, nbytes, write):
    """check_ub, in checked mode only."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_UB], (data_address(c.state), c.state.size, call, pipe, off, nbytes, write))


@aicore
def vector_access(c, call, d, d_bytes, s0, s0_bytes, s1, s1_bytes):
    """check_vector_access, in checked mode only."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_VECTOR], (data_address(c.state), c.state.size, call, d, d_bytes, s0,
                                                  s0_bytes, s1, s1_bytes))


@aicore
def gm_read(c, call, pipe, address, nbytes):
    """check_gm_read, in checked mode only."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_GM_READ], (data_address(c.state), c.state.size, call, pipe, address, nbytes))
