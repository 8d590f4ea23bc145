"""The timeline: every AscendC call gets a start and end cycle on its pipe (numba).

A vector core has four pipes that run in parallel, each in order: S (the scalar unit, which
also issues every call in program order), V, MTE2 (GM -> UB) and MTE3 (UB -> GM). A call
issued at scalar time t on pipe P starts at max(t, P's last end) and occupies P for its cost
(cost.py). Each pipe keeps two clocks: `end`, when it can start its next instruction, and
`done`, when its work so far is complete; they differ for DMA, whose data lands `latency`
cycles after the pipe moved on. Pipes wait for each other only where the hardware makes them:

* SetFlag<SRC_DST>(id) raises the flag `event_cycles` after SRC's work issued so far is done;
  WaitFlag<SRC_DST>(id) holds DST (the scalar unit itself for *_S events) until the flag is up.
* A queue's EnQue / DeQue and FreeTensor / AllocTensor are the same pair of flags between its
  producer pipe (MTE2 for VECIN, V for VECOUT / VECCALC) and its consumer pipe (V for VECIN /
  VECCALC, MTE3 for VECOUT); a TQueBind VECIN->VECOUT pairs MTE2 with MTE3.
* PipeBarrier<P> waits for P's work to be done, then costs `barrier_cycles` on P;
  PipeBarrier<PIPE_ALL> joins every pipe.
* SyncAll() joins every core (the launcher does it between stages, timeline_barrier).

Each call adds a few integer operations to the core's state. With a trace (attach_trace)
every call also writes one row: call number, call id, pipe, start, end, two arguments and the
call number of the flag-setting call it waited for, which the trace writer turns into Perfetto
slices and flow arrows. A flag-setting call (SetFlag, EnQue, FreeTensor) is a zero-length row at
the cycle its pipe signals; the flag rises `event_cycles` later. The per-core clocks are independent of host threads, so
estimates do not depend on the thread count.
"""
from __future__ import annotations

import functools

import numpy as np

from . import check as chk
from ._jit import aicore
from ._memory import store_i64
from .cost import CostModel
from .gm_cost import l2_hits, log_same_address
from .layout import (
    CALL_ALLOC_TENSOR,
    CALL_DEQUE,
    CALL_ENQUE,
    CALL_FREE_TENSOR,
    CALL_NAMES,
    CALL_PIPE_BARRIER,
    CALL_SET_FLAG,
    CALL_SIMT,
    CALL_WAIT_FLAG,
    CHK_MODE,
    CNT_CALLS,
    CNT_MTE2_INSTR,
    CNT_MTE3_INSTR,
    CNT_V_INSTR,
    DCACHE_MAX_LINES,
    EVENT_IDS,
    HARD_EVENT_NAMES,
    N_CALL_IDS,
    N_PIPES,
    PIPE_ALL,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_NAMES,
    PIPE_S,
    PIPE_V,
    POS_VECIN,
    POS_VECOUT,
    Q_DST_POS,
    Q_FREE_CALL,
    Q_FREE_T,
    Q_FREE_V,
    Q_READY_CALL,
    Q_READY_T,
    Q_READY_V,
    Q_SRC_POS,
    RATE_SCALE,
    SLOT_SIMT_GM_LATENCY,
    SLOT_SIMT_LAUNCH,
    TL_BARRIER,
    TL_BASE,
    TL_BURST,
    TL_BUSY,
    TL_CALL,
    TL_CPR,
    TL_DCACHE,
    TL_DCACHE_MASK,
    TL_DCACHE_SHIFT,
    TL_DMA_ISSUE,
    TL_DONE,
    TL_END,
    TL_EVENT,
    TL_FLAG_CALL,
    TL_FLAG_T,
    TL_GM_HIT,
    TL_GM_MISS,
    TL_GM_WRITE,
    TL_L2_HIT_BYTES,
    TL_L2_MASK,
    TL_L2_RATE,
    TL_L2_SHIFT,
    TL_LATENCY,
    TL_LAUNCH,
    TL_ON,
    TL_RATE,
    TL_SAME_WINDOW,
    TL_SCALAR_UB,
    TL_TRACE_ADDR,
    TL_TRACE_CAP,
    TL_TRACE_N,
    TL_VEC_ISSUE,
    TL_VEC_WIDTH,
    TRACE_COLS,
    TRACE_L2_SHIFT,
)

_PIPE_BY_NAME = {name: i for i, name in enumerate(PIPE_NAMES)}
# HardEvent SRC_DST: the pipe that sets the flag and the pipe that waits, read from the event's name
EVENT_SRC = np.array([_PIPE_BY_NAME[n.split("_")[0]] for n in HARD_EVENT_NAMES], dtype=np.int64)
EVENT_DST = np.array([_PIPE_BY_NAME[n.split("_")[1]] for n in HARD_EVENT_NAMES], dtype=np.int64)
NO_CALL = -1


# --- loading the cost model --------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def cost_words(cost: CostModel, cores_running: int) -> np.ndarray:
    """The state words [TL_BASE, TL_FLAG_T) of a core at launch: clocks zero, `cost` loaded. `cores_running`
    sets the core's share of the chip's HBM bandwidth. Read-only (shared by every launch with these costs)."""
    words = np.zeros(TL_FLAG_T - TL_BASE, dtype=np.int64)

    def put(slot, value):
        words[slot - TL_BASE] = value

    put(TL_ON, 1 if cost.enabled else 0)
    put(TL_RATE + PIPE_MTE2, cost.dma_rate_scaled(cost.mte2_bytes_per_cycle, cores_running))
    put(TL_RATE + PIPE_MTE3, cost.dma_rate_scaled(cost.mte3_bytes_per_cycle, cores_running))
    put(TL_LATENCY + PIPE_MTE2, cost.mte2_latency_cycles)
    put(TL_LATENCY + PIPE_MTE3, cost.mte3_latency_cycles)
    put(TL_BURST, int(round(cost.burst_cycles * RATE_SCALE)))
    lines, shift = cost.l2_table(cores_running)
    put(TL_L2_MASK, lines - 1)
    put(TL_L2_SHIFT, shift)
    put(TL_L2_RATE, cost.l2_rate_scaled(cores_running))
    put(TL_LAUNCH, cost.launch_cycles)
    put(TL_VEC_WIDTH, cost.vec_issue_width)
    put(TL_SAME_WINDOW, cost.same_address_window_cycles if cost.same_address_bytes_per_cycle > 0 else 0)
    put(TL_DMA_ISSUE, cost.dma_issue_cycles)
    put(TL_VEC_ISSUE, cost.vec_issue_cycles)
    put(TL_CALL, cost.scalar_call_cycles)
    put(TL_SCALAR_UB, cost.scalar_ub_cycles)
    put(TL_GM_HIT, cost.scalar_gm_hit_cycles)
    put(TL_GM_MISS, cost.scalar_gm_miss_cycles)
    put(TL_GM_WRITE, cost.scalar_gm_write_cycles)
    put(TL_EVENT, cost.event_cycles)
    put(TL_BARRIER, cost.barrier_cycles)
    put(TL_DCACHE_SHIFT, cost.dcache_line_bytes.bit_length() - 1)
    put(TL_DCACHE_MASK, min(cost.dcache_lines, DCACHE_MAX_LINES) - 1)
    for call in range(N_CALL_IDS):
        put(TL_CPR + call, cost.cycles_per_repeat(_call_key(CALL_NAMES.get(call, ""))))
    # the SIMT figures ride in the per-call table: a SIMT call has no repeats, and slot 55 is no call's
    put(TL_CPR + CALL_SIMT, cost.simt_cycles_per_warp_instr)
    put(TL_CPR + SLOT_SIMT_GM_LATENCY, cost.simt_gm_latency_cycles)
    put(TL_CPR + SLOT_SIMT_LAUNCH, cost.simt_launch_cycles)
    words.flags.writeable = False
    return words


def load_costs(state: np.ndarray, cost: CostModel, cores_running: int) -> None:
    """Start a core's timeline: clocks zero, `cost` loaded (host side, before its first stage)."""
    state[TL_BASE:TL_FLAG_T] = cost_words(cost, cores_running)


def attach_trace(state: np.ndarray, rows: np.ndarray) -> None:
    """Give a core a trace buffer (host side): `rows` is a C-contiguous int64 (n, TRACE_COLS) array the caller
    keeps alive until the launch has ended."""
    assert rows.dtype == np.int64 and rows.ndim == 2 and rows.shape[1] == TRACE_COLS and rows.flags.c_contiguous
    state[TL_TRACE_ADDR] = rows.ctypes.data
    state[TL_TRACE_CAP] = rows.shape[0]


def _call_key(name: str) -> str:
    """"Duplicate(mask)" -> "Duplicate": the cost table names calls without their variant."""
    return name.split("(")[0]


def barrier(states: list[np.ndarray], sync_all_cycles: int) -> int:
    """SyncAll() across `states` (every core of a launch): all pipes of all cores resume together, after
    the last pipe of the slowest core is done. Returns the cycle they resume at."""
    resume = max(end_cycle(s) for s in states) + sync_all_cycles
    for s in states:
        s[TL_END:TL_END + N_PIPES] = resume
        s[TL_DONE:TL_DONE + N_PIPES] = resume
    return resume


def end_cycle(state: np.ndarray) -> int:
    """The cycle a core's work is complete (its last pipe done, DMA landed)."""
    return int(max(state[TL_END:TL_END + N_PIPES].max(), state[TL_DONE:TL_DONE + N_PIPES].max()))


# --- inside the kernels ------------------------------------------------------------------
@aicore
def _log(c, call, pipe, start, end, a0, a1, waited_for):
    n = c.state[TL_TRACE_N]
    c.state[TL_TRACE_N] = n + 1
    if n < c.state[TL_TRACE_CAP]:
        addr = c.state[TL_TRACE_ADDR]
        k = n * TRACE_COLS
        store_i64(addr, k, c.state[CNT_CALLS])
        store_i64(addr, k + 1, call)
        store_i64(addr, k + 2, pipe)
        store_i64(addr, k + 3, start)
        store_i64(addr, k + 4, end)
        store_i64(addr, k + 5, a0)
        store_i64(addr, k + 6, a1)
        store_i64(addr, k + 7, waited_for)


@aicore
def _issue(c):
    """The scalar unit issues the current call; returns the cycle it does."""
    t = c.state[TL_END + PIPE_S] + c.state[TL_CALL]
    c.state[TL_END + PIPE_S] = t
    c.state[TL_BUSY + PIPE_S] += c.state[TL_CALL]
    return t


@aicore
def _occupy(c, call, pipe, cycles, latency, a0, a1):
    """Issue the call and run it for `cycles` on `pipe` after the pipe's earlier work; its result is there
    `latency` cycles after that."""
    t = _issue(c)
    start = max(t, c.state[TL_END + pipe])
    end = start + cycles
    c.state[TL_END + pipe] = end
    c.state[TL_DONE + pipe] = max(c.state[TL_DONE + pipe], end + latency)
    c.state[TL_BUSY + pipe] += cycles
    if c.state[TL_TRACE_CAP] > 0:
        _log(c, call, pipe, start, end, a0, a1, NO_CALL)


@aicore
def _hold(c, call, pipe, until, a0, a1, waited_for):
    """Issue a waiting call: `pipe` (or the scalar unit) does nothing new before cycle `until`. `waited_for` is the
    call number of the call that set the event (0: none, e.g. a buffer's first AllocTensor)."""
    t = _issue(c)
    before = t if pipe == PIPE_S else max(t, c.state[TL_END + pipe])
    after = max(before, until)
    c.state[TL_END + pipe] = after
    c.state[TL_DONE + pipe] = max(c.state[TL_DONE + pipe], after)
    if c.state[TL_TRACE_CAP] > 0:
        _log(c, call, pipe, before, after, a0, a1, waited_for if waited_for > 0 else NO_CALL)


@aicore
def _flag_time(c, src):
    """(cycle src signals, cycle the flag rises): after src's work issued so far is done (the scalar unit: now)."""
    t = _issue(c)
    ready = t if src == PIPE_S else max(t, c.state[TL_DONE + src])
    return ready, ready + c.state[TL_EVENT]


@aicore
def dma(c, call, pipe, rows, row_bytes):
    """One MTE2 / MTE3 instruction of `rows` rows of `row_bytes` GM bytes (each row moves whole 32-byte blocks);
    a copy of nothing is a NOP."""
    c.state[CNT_MTE2_INSTR if pipe == PIPE_MTE2 else CNT_MTE3_INSTR] += 1
    if c.state[TL_ON] == 0:
        return
    nbytes = rows * ((row_bytes + 31) // 32 * 32)
    if nbytes > 0:
        _occupy(c, call, pipe, _dma_cycles(c, pipe, rows, nbytes, 0), c.state[TL_LATENCY + pipe], nbytes, rows)
    else:
        _occupy(c, call, pipe, 0, 0, 0, rows)


@aicore
def _dma_cycles(c, pipe, rows, nbytes, hit_bytes):
    """Pipe cycles of a DMA of `nbytes` (whole blocks) in `rows` rows, `hit_bytes` of them read from L2."""
    rate = c.state[TL_RATE + pipe]
    hbm_part = (nbytes - hit_bytes) * RATE_SCALE
    cycles = c.state[TL_DMA_ISSUE] + (rows * c.state[TL_BURST] + RATE_SCALE - 1) // RATE_SCALE \
        + (hbm_part + rate - 1) // rate
    if hit_bytes > 0:
        l2_rate = c.state[TL_L2_RATE]
        cycles += (hit_bytes * RATE_SCALE + l2_rate - 1) // l2_rate
    return cycles


@aicore
def dma_read(c, call, rows, row_bytes, address, pitch):
    """One GM -> UB (MTE2) instruction of `rows` rows of `row_bytes` bytes, the first at device `address`
    (gm_cost.device_address), each `pitch` bytes after the one before; the bytes still in the core's L2 move at the L2
    rate (counted in TL_L2_HIT_BYTES and, in the trace, in the row's second argument above TRACE_L2_SHIFT)."""
    c.state[CNT_MTE2_INSTR] += 1
    if c.state[TL_ON] == 0:
        return
    nbytes = rows * ((row_bytes + 31) // 32 * 32)
    if nbytes <= 0:
        _occupy(c, call, PIPE_MTE2, 0, 0, 0, rows)
        return
    hits = min(l2_hits(c, address, rows, row_bytes, pitch), nbytes)
    c.state[TL_L2_HIT_BYTES] += hits
    cycles = _dma_cycles(c, PIPE_MTE2, rows, nbytes, hits)
    _occupy(c, call, PIPE_MTE2, cycles, c.state[TL_LATENCY + PIPE_MTE2], nbytes, rows | (hits << TRACE_L2_SHIFT))
    if c.state[TL_SAME_WINDOW] > 0 and nbytes > hits:
        log_same_address(c, address, nbytes - hits, c.state[TL_END + PIPE_MTE2] - cycles)


@aicore
def vector(c, call, repeats):
    """One PIPE_V instruction of `repeats` 256-byte repeats."""
    c.state[CNT_V_INSTR] += 1
    if c.state[TL_ON] == 0:
        return
    width = c.state[TL_VEC_WIDTH]
    _occupy(c, call, PIPE_V, c.state[TL_VEC_ISSUE] + (repeats * c.state[TL_CPR + call] + width - 1) // width, 0,
            repeats, 0)


@aicore
def simt(c, cycles, threads, ops):
    """One SIMT call (asc_vf_call) occupying PIPE_V for `cycles` (simt.py works them out per warp)."""
    c.state[CNT_V_INSTR] += 1
    if c.state[TL_ON] == 0:
        return
    _occupy(c, CALL_SIMT, PIPE_V, cycles, 0, threads, ops)


@aicore
def repeats_of(count, elem_bytes):
    """256-byte repeats a count-form instruction over `count` elements of `elem_bytes` takes."""
    return (count * elem_bytes + 255) // 256


@aicore
def scalar(c, call, extra_cycles, a0):
    """A call done by the scalar unit itself: its issue plus `extra_cycles`."""
    if c.state[TL_ON] == 0:
        return
    t0 = c.state[TL_END + PIPE_S]
    cycles = c.state[TL_CALL] + extra_cycles
    c.state[TL_END + PIPE_S] = t0 + cycles
    c.state[TL_BUSY + PIPE_S] += cycles
    if c.state[TL_TRACE_CAP] > 0:
        _log(c, call, PIPE_S, t0, t0 + cycles, a0, 0, NO_CALL)


@aicore
def scalar_ub(c, call, index):
    """LocalTensor::GetValue / SetValue."""
    if c.state[TL_ON] != 0:
        scalar(c, call, c.state[TL_SCALAR_UB], index)


@aicore
def scalar_gm_read(c, call, address):
    """GlobalTensor::GetValue of the byte at device `address` (gm_cost.device_address), through the direct-mapped
    data cache."""
    if c.state[TL_ON] == 0:
        return
    line = address >> c.state[TL_DCACHE_SHIFT]
    slot = TL_DCACHE + (line & c.state[TL_DCACHE_MASK])
    if c.state[slot] == line + 1:
        scalar(c, call, c.state[TL_GM_HIT], address & 0xFFFF)
    else:
        c.state[slot] = line + 1
        scalar(c, call, c.state[TL_GM_MISS], address & 0xFFFF)


@aicore
def scalar_gm_write(c, call, address):
    """GlobalTensor::SetValue (write-through; the line is dropped from the data cache)."""
    if c.state[TL_ON] == 0:
        return
    line = address >> c.state[TL_DCACHE_SHIFT]
    slot = TL_DCACHE + (line & c.state[TL_DCACHE_MASK])
    if c.state[slot] == line + 1:
        c.state[slot] = 0
    scalar(c, call, c.state[TL_GM_WRITE], address & 0xFFFF)


@aicore
def scalar_gm_atomic(c, call, address):
    """AtomicAdd / AtomicExch on the GM word at device `address`: a read-modify-write at GM that bypasses the data
    cache (a miss's round trip), leaving the cached line alone (the kernel cleans it with DataCacheCleanAndInvalid
    before it reads the word back)."""
    if c.state[TL_ON] == 0:
        return
    scalar(c, call, c.state[TL_GM_MISS], address & 0xFFFF)


@aicore
def set_flag(c, evt, event_id):
    """SetFlag<evt>(id): the flag rises once the source pipe's earlier work is done."""
    if c.state[CHK_MODE] != 0:
        chk.release(c, EVENT_SRC[evt], chk.flag_slot(evt, event_id))
        chk.flag_raised(c, evt, event_id)
    if c.state[TL_ON] == 0:
        return
    slot = evt * EVENT_IDS + event_id
    src = EVENT_SRC[evt]
    ready, up = _flag_time(c, src)
    c.state[TL_FLAG_T + slot] = up
    c.state[TL_FLAG_CALL + slot] = c.state[CNT_CALLS]
    if c.state[TL_TRACE_CAP] > 0:
        _log(c, CALL_SET_FLAG, src, ready, ready, evt, event_id, NO_CALL)


@aicore
def wait_flag(c, evt, event_id):
    """WaitFlag<evt>(id): the destination pipe holds until the flag is up."""
    if c.state[CHK_MODE] != 0:
        chk.acquire(c, EVENT_DST[evt], chk.flag_slot(evt, event_id))
        chk.flag_lowered(c, evt, event_id)
    if c.state[TL_ON] == 0:
        return
    slot = evt * EVENT_IDS + event_id
    _hold(c, CALL_WAIT_FLAG, EVENT_DST[evt], c.state[TL_FLAG_T + slot], evt, event_id, c.state[TL_FLAG_CALL + slot])


@aicore
def pipe_barrier(c, pipe):
    """PipeBarrier<pipe>: barrier_cycles on that pipe once its earlier work is done; PIPE_ALL joins every pipe
    (the scalar unit included)."""
    if c.state[CHK_MODE] != 0:
        chk.barrier(c, pipe)
    if c.state[TL_ON] == 0:
        return
    t = _issue(c)
    if pipe == PIPE_ALL:
        start = t
        for p in range(N_PIPES):
            start = max(start, c.state[TL_END + p], c.state[TL_DONE + p])
        end = start + c.state[TL_BARRIER]
        for p in range(N_PIPES):
            c.state[TL_END + p] = end
            c.state[TL_DONE + p] = end
        if c.state[TL_TRACE_CAP] > 0:
            _log(c, CALL_PIPE_BARRIER, PIPE_S, start, end, pipe, 0, NO_CALL)
        return
    start = max(t, c.state[TL_END + pipe], c.state[TL_DONE + pipe])
    end = start + c.state[TL_BARRIER]
    c.state[TL_END + pipe] = end
    c.state[TL_DONE + pipe] = end
    if c.state[TL_TRACE_CAP] > 0:
        _log(c, CALL_PIPE_BARRIER, pipe, start, end, pipe, 0, NO_CALL)


@aicore
def _producer(c, row):
    return PIPE_MTE2 if c.state[row + Q_SRC_POS] == POS_VECIN else PIPE_V


@aicore
def _consumer(c, row):
    return PIPE_MTE3 if c.state[row + Q_DST_POS] == POS_VECOUT else PIPE_V


@aicore
def _queue_signal(c, call, q, row, i, src, dst, t_col, call_col, v_col):
    """EnQue / FreeTensor of buffer i: its event (columns t_col, call_col, v_col of the queue row) rises once
    pipe `src`'s work so far is done; a queue whose two sides are one pipe (VECCALC) has no hardware event."""
    one_pipe = src == dst
    if c.state[CHK_MODE] != 0 and not one_pipe:
        chk.release(c, src, row + v_col + 4 * i)
    if c.state[TL_ON] == 0:
        return
    ready, up = _flag_time(c, src)
    c.state[row + t_col + i] = ready if one_pipe else up
    c.state[row + call_col + i] = c.state[CNT_CALLS]
    if c.state[TL_TRACE_CAP] > 0:
        _log(c, call, src, ready, ready, q, i, NO_CALL)


@aicore
def _queue_wait(c, call, q, row, i, src, dst, t_col, call_col, v_col):
    """DeQue / AllocTensor of buffer i: pipe `dst` waits for the event _queue_signal stored in those columns."""
    if c.state[CHK_MODE] != 0 and src != dst:
        chk.acquire(c, dst, row + v_col + 4 * i)
    if c.state[TL_ON] == 0:
        return
    _hold(c, call, dst, c.state[row + t_col + i], q, i, c.state[row + call_col + i])


@aicore
def alloc_tensor(c, q, row, i):
    """AllocTensor took buffer i of queue q: the producer pipe waits for the buffer's free event."""
    _queue_wait(c, CALL_ALLOC_TENSOR, q, row, i, _consumer(c, row), _producer(c, row), Q_FREE_T, Q_FREE_CALL, Q_FREE_V)


@aicore
def en_que(c, q, row, i):
    """EnQue of buffer i: its forward event rises once the producer's work so far is done."""
    _queue_signal(c, CALL_ENQUE, q, row, i, _producer(c, row), _consumer(c, row), Q_READY_T, Q_READY_CALL, Q_READY_V)


@aicore
def de_que(c, q, row, i):
    """DeQue of buffer i: the consumer pipe waits for its forward event."""
    _queue_wait(c, CALL_DEQUE, q, row, i, _producer(c, row), _consumer(c, row), Q_READY_T, Q_READY_CALL, Q_READY_V)


@aicore
def free_tensor(c, q, row, i):
    """FreeTensor of buffer i: its free event rises once the consumer's work so far is done."""
    _queue_signal(c, CALL_FREE_TENSOR, q, row, i, _consumer(c, row), _producer(c, row), Q_FREE_T, Q_FREE_CALL,
                  Q_FREE_V)


def call_name(call_id: int) -> str:
    return CALL_NAMES.get(int(call_id), f"call {call_id}")
