"""Checked mode's checks of each access (numba): the UB shadow, the core's GM write ring and its GM access log.

check.py holds the model (its docstring) and what kernels inline; the functions here are the heavy part
that _check_entries compiles once as C functions and kernels reach by address. An access by pipe p is
checked against the last accesses the shadow or ring remembers, with the happens-before vectors that
check.release / acquire / barrier keep in the core state.
"""
from __future__ import annotations

import numpy as np
from numba import carray
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from ._jit import aicore
from ._memory import i64_pointer, load_i64, store_i64
from .faults import fault
from .layout import (
    ATOMIC_TYPE,
    CALL_GM_ATOMIC_ADD,
    CALL_GM_ATOMIC_EXCH,
    CALL_INIT_OUTPUT,
    CHK_E,
    CHK_GLOG,
    CHK_GLOG_CAP,
    CHK_GLOG_LOST,
    CHK_GLOG_N,
    CHK_GM,
    CHK_GM_ENTRIES,
    CHK_GM_N,
    CHK_INIT_WAIVE,
    CHK_INIT_WAIVED,
    CHK_K,
    CHK_MODE,
    CHK_OWN_WAIVE,
    CHK_SHADOW_ADDR,
    CHK_SHADOW_BLOCKS,
    CHK_WAIVE,
    CHK_WAIVE_N,
    CHK_WAIVED,
    CHK_WS_HI,
    CHK_WS_LO,
    CHK_WS_MAP,
    CHK_WS_TAIL,
    CNT_CALLS,
    ENQUE,
    ERR_BASE,
    F_PIPE_RACE,
    F_QUE_OWNER,
    F_UNINIT_READ,
    FREE,
    GLOG_ATOMIC,
    GLOG_COLS,
    GLOG_READ,
    GLOG_WRITE,
    KIND_TBUF,
    MEM_GM,
    MEM_UB,
    MODE_INIT,
    MODE_RACES,
    MODE_STRICT,
    N_PIPES,
    PIPE_MTE3,
    PIPE_QUEUES,
    PIPE_S,
    PIPE_V,
    Q_BASE,
    Q_FREE_CALL,
    Q_KIND,
    Q_LEN,
    Q_NUM,
    Q_STATE,
    QUE_BASE,
    QUE_COLS,
    RAW,
    SHADOW_BLOCK,
    SHADOW_COLS,
    WAR,
    WAW,
)


@aicore
def _before(c, q, stamp, p):
    """Does an access by pipe q stamped `stamp` happen before what pipe p does now?"""
    if q == PIPE_S and p == PIPE_S:
        return True
    return c.state[CHK_K + p * N_PIPES + q] > stamp


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
        if state == FREE or state == ENQUE:
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


# --- mode "init": reads of bytes nothing wrote ----------------------------------------------------------------
@aicore
def _queue_of(c, off):
    """The queue / TBuf of the live TPipe whose buffers hold UB byte `off`, or -1."""
    for q in range(c.state[PIPE_QUEUES]):
        r = QUE_BASE + q * QUE_COLS
        base = c.state[r + Q_BASE]
        if base <= off < base + c.state[r + Q_LEN] * c.state[r + Q_NUM]:
            return q
    return -1


@aicore
def _uninitialised(c, call, lo, hi):
    """A read of UB bytes [lo, hi) that no call wrote since the TPipe was built: an UninitializedReadError, unless
    the kernel declares that its buffer is read so on purpose (then counted; returns False)."""
    q = _queue_of(c, lo)
    if q >= 0 and (c.state[CHK_INIT_WAIVE] >> q) & 1:
        c.state[CHK_INIT_WAIVED] += 1
        return False
    fault(c, F_UNINIT_READ, call, MEM_UB, lo, hi, q)
    return True


@aicore
def check_ub(c, call, pipe, off, nbytes, write):
    """Check an access of `nbytes` UB bytes from `off` by `pipe` for the current AscendC call `call`, and record it.
    The race and ownership checks run in the race modes, the never-written check in mode "init"; the shadow records
    the access in every checked mode."""
    if nbytes <= 0 or off < 0:
        return
    races = (c.state[CHK_MODE] & MODE_RACES) != 0
    init = (c.state[CHK_MODE] & MODE_INIT) != 0
    if not races and not init:          # mode "sync" alone: nothing to check or record
        return
    if races and pipe != PIPE_S and not _owned(c, call, off):
        return
    addr = c.state[CHK_SHADOW_ADDR]
    blocks = c.state[CHK_SHADOW_BLOCKS]
    bits = blocks * SHADOW_COLS
    b0 = off // SHADOW_BLOCK
    b1 = min((off + nbytes + SHADOW_BLOCK - 1) // SHADOW_BLOCK, blocks)
    if b0 >= b1:
        return
    stamp = c.state[CHK_E + pipe]
    me = c.state[CNT_CALLS] * 64 + call
    strict = (c.state[CHK_MODE] & MODE_STRICT) != 0
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
        lo = max(h, b0) * SHADOW_BLOCK
        hi = min(e, b1) * SHADOW_BLOCK
        if races and write:     # a reader of another pipe first: it names the call that still needs the bytes
            for r in range(N_PIPES):
                rs = load_i64(addr, row + 3 + r) - 1
                if rs >= 0 and r != pipe and r != PIPE_S and not _before(c, r, rs, pipe) and _race(
                        c, call, WAR, MEM_UB, r, load_i64(addr, row + 7 + r), pipe, lo, hi):
                    return
        wp = load_i64(addr, row) - 1
        if wp < 0 and init and not write and _uninitialised(c, call, lo, hi):
            return
        if wp >= 0 and races:
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
def _ring_check(c, call, pipe, address, end):
    """A GM read by `pipe` must come after this core's overlapping writes by other pipes (the ring)."""
    kept = min(c.state[CHK_GM_N], CHK_GM_ENTRIES)
    for j in range(kept):
        e = CHK_GM + j * 5
        if c.state[e + 2] != pipe and c.state[e] < end and address < c.state[e + 1] \
                and not _before(c, c.state[e + 2], c.state[e + 3], pipe) \
                and _race(c, call, RAW, MEM_GM, c.state[e + 2], c.state[e + 4], pipe, max(address, c.state[e]),
                          min(end, c.state[e + 1])):
            return


@aicore
def _ring_write(c, call, pipe, address, end):
    """Remember a GM write of this core (MTE3, the scalar unit, SIMT) in the ring."""
    n = c.state[CHK_GM_N]
    e = CHK_GM + (n % CHK_GM_ENTRIES) * 5
    c.state[e] = address
    c.state[e + 1] = end
    c.state[e + 2] = pipe
    c.state[e + 3] = c.state[CHK_E + pipe]
    c.state[e + 4] = c.state[CNT_CALLS] * 64 + call
    c.state[CHK_GM_N] = n + 1


# The cross-core log (check.CrossCore reads it at every SyncAll): one row per access, but an access that continues
# or repeats one of the last GLOG_LOOKBACK rows of the same call id, pipe and kind widens that row instead (a
# kernel reading an index array with GetValue one element at a time, or copying rows out back to back, costs one
# row). The widened row keeps the call number of its first access.
GLOG_LOOKBACK = 4


@aicore
def _log(c, call, pipe, kind, address, end):
    base = c.state[CHK_GLOG]
    if base == 0:
        return
    n = c.state[CHK_GLOG_N]
    meta = pipe | (kind << 4)
    for back in range(1, min(n, GLOG_LOOKBACK) + 1):
        r = (n - back) * GLOG_COLS
        if load_i64(base, r + 3) == meta and load_i64(base, r + 2) % 64 == call \
                and address <= load_i64(base, r + 1) and end >= load_i64(base, r):
            if address < load_i64(base, r):
                store_i64(base, r, address)
            if end > load_i64(base, r + 1):
                store_i64(base, r + 1, end)
            return
    if n >= c.state[CHK_GLOG_CAP]:
        c.state[CHK_GLOG_LOST] += 1
        return
    r = n * GLOG_COLS
    store_i64(base, r, address)
    store_i64(base, r + 1, end)
    store_i64(base, r + 2, c.state[CNT_CALLS] * 64 + call)
    store_i64(base, r + 3, meta)
    c.state[CHK_GLOG_N] = n + 1


@aicore
def _log_rows(c, call, pipe, kind, address, rows, row_bytes, gap):
    if gap == 0 or rows == 1:
        _log(c, call, pipe, kind, address, address + rows * row_bytes + (rows - 1) * gap)
        return
    for r in range(rows):
        a = address + r * (row_bytes + gap)
        _log(c, call, pipe, kind, a, a + row_bytes)


@aicore
def check_gm_read(c, ws, call, pipe, address, rows, row_bytes, gap):
    """`rows` rows of `row_bytes` GM bytes from `address`, `gap` bytes apart, read by `pipe`. Mode "init": no row may
    read workspace bytes no core wrote in this launch (`ws`, the workspace's written-byte map; empty: no workspace).
    Race modes: the rows must come after this core's overlapping writes by other pipes (the ring; checked on the
    span), and go into the cross-core log."""
    if rows <= 0 or row_bytes <= 0:
        return
    if c.state[CHK_MODE] & MODE_INIT and ws.size > 0:
        for r in range(rows if gap != 0 else 1):
            nbytes = row_bytes if gap != 0 else rows * row_bytes
            if _workspace_unwritten(c, ws, call, address + r * (row_bytes + gap), nbytes):
                return
    if (c.state[CHK_MODE] & MODE_RACES) == 0:
        return
    _ring_check(c, call, pipe, address, address + rows * row_bytes + (rows - 1) * gap)
    if c.state[ERR_BASE] == 0:
        _log_rows(c, call, pipe, GLOG_READ, address, rows, row_bytes, gap)


@aicore
def check_gm_write(c, ws, call, pipe, address, rows, row_bytes, gap):
    """A GM write (rows as check_gm_read's): its workspace bytes marked written (`ws`, mode "init"), into the ring
    and the cross-core log. The scalar AtomicAdd / AtomicExch and DMA copies out under SetAtomicAdd / SetAtomicMax
    are atomic updates."""
    if rows <= 0 or row_bytes <= 0:
        return
    if ws.size > 0:
        for r in range(rows if gap != 0 else 1):
            note_gm_write(c, ws, address + r * (row_bytes + gap), row_bytes if gap != 0 else rows * row_bytes)
    _ring_write(c, call, pipe, address, address + rows * row_bytes + (rows - 1) * gap)
    atomic = call == CALL_GM_ATOMIC_ADD or call == CALL_GM_ATOMIC_EXCH or (
        pipe == PIPE_MTE3 and call != CALL_INIT_OUTPUT and c.state[ATOMIC_TYPE] != 0)
    _log_rows(c, call, pipe, GLOG_ATOMIC if atomic else GLOG_WRITE, address, rows, row_bytes, gap)


@aicore
def check_vector_access(c, call, d, d_bytes, s0, s0_bytes, s1, s1_bytes):
    """A PIPE_V instruction reads [s0, s0 + s0_bytes) and [s1, s1 + s1_bytes) (s1 < 0: no second source), then
    writes [d, d + d_bytes): sources first, so an in-place instruction does not race with itself."""
    check_ub(c, call, PIPE_V, s0, s0_bytes, False)
    if s1 >= 0:
        check_ub(c, call, PIPE_V, s1, s1_bytes, False)
    check_ub(c, call, PIPE_V, d, d_bytes, True)


# --- mode "init": the workspace ------------------------------------------------------------------------------
@aicore
def workspace_map(state):
    """The workspace's written-byte map (check.attach_workspace; empty when the launch has none)."""
    n = state[CHK_WS_HI] - state[CHK_WS_LO] if state[CHK_WS_MAP] != 0 else 0
    return carray(i64_pointer(state[CHK_WS_MAP]), (n + 7) // 8).view(np.uint8)


@aicore
def _workspace_unwritten(c, ws, call, address, nbytes):
    """UninitializedReadError (True) if the read [address, address + nbytes) covers workspace bytes no core wrote in
    this launch; the fault names the first unwritten span, in bytes from the workspace's start. A kernel's workspace
    waiver (CHK_WS_TAIL) lets a read pass whose only unwritten bytes are its last few (an aligned DataCopy past the
    end of written data)."""
    lo = c.state[CHK_WS_LO]
    a = max(address, lo) - lo
    b = min(address + nbytes, c.state[CHK_WS_HI]) - lo
    k = a
    while k < b and ws[k] != 0:
        k += 1
    if k >= b:
        return False
    e = k
    while e < b and ws[e] == 0:
        e += 1
    tail = c.state[CHK_WS_TAIL]
    if tail > 0 and e == b and b - k <= tail and address + nbytes - lo == b:
        c.state[CHK_INIT_WAIVED] += 1      # the kernel's waiver: a read that runs a few bytes past written data
        return False
    fault(c, F_UNINIT_READ, call, MEM_GM, k, e, -1)
    return True


@aicore
def note_gm_write(c, ws, address, nbytes):
    """Mark the workspace bytes a GM write covers as written (one byte store each: cores on other threads may mark
    neighbouring bytes at the same time)."""
    lo = c.state[CHK_WS_LO]
    a = max(address, lo) - lo
    b = min(address + nbytes, c.state[CHK_WS_HI]) - lo
    for k in range(a, b):
        ws[k] = 1
