"""Checked mode: pipe races, tensor ownership, uninitialised reads and flag pairing (numba).

The simulator executes every call in program order, so a kernel that forgets a sync still
computes the right numbers here. Checked mode (`check="race"` / "strict" / "all" on a launch or an aclnn
call, or ASCEND_SIM_CHECK=race) finds those kernels:

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
  access costs a few steps per run it touches, not per block. A read that does not come after the block's last write
  (RAW), a write that does not come after the last write (WAW) or after every other pipe's last read
  (WAR) is a PipeRaceError naming both calls.
* Modes. A launch's mode is a set of bits (layout.MODES): the pipe model, MODE_RACE or MODE_STRICT, which each
  core's state holds, and launch-wide checks the launcher runs (CHECK_OVERLAP). "all" is "race" plus every
  launch-wide check. The pipe models: "strict" follows the AscendC documentation: a pipe is ordered with itself only by
  a PipeBarrier (a vector instruction reading an earlier one's result, two DMA writes to the
  same bytes), and the scalar unit only by the *_S events. "race" follows what the shipped
  production kernels rely on: consecutive vector instructions and a DMA pipe's own writes are
  in order, and a WaitFlag / DeQue / AllocTensor / PipeBarrier also holds the scalar unit
  (kernels read the index tiles they DeQue'd with GetValue, with no MTE2_S event, and read
  vector results with GetValue after a PipeBarrier<PIPE_V>).
* GM, one core. The last GM writes of the core (MTE3 DataCopy, InitOutput, scalar SetValue) are kept in
  a ring; a read by another pipe of the same core (MTE2 DataCopy, scalar GetValue) of bytes
  such a write covered, without an edge between them, is a race.
* GM, across cores (crosscore.py). Only SyncAll orders two cores, so SyncAll cuts a launch into phases. Every
  GM access (DMA copies row by row, scalar GetValue / SetValue, AtomicAdd / AtomicExch, SIMT loads and stores)
  also goes into a log of the core's own: a flat int64 table the launcher allocates per checked launch (rows of
  first byte, end byte, call, pipe | kind; kind read, write or atomic update), appended to without a lock
  because no other core touches it, and an access that continues or repeats one of the last four rows of
  the same call widens that row instead of adding one. At each SyncAll and at the end of the launch the
  launcher folds each core's rows into sorted disjoint intervals (all it touched, its plain writes, its atomic
  updates, its reads) and counts, over the boundaries of all cores' intervals, how many cores cover each
  stretch of bytes: where two cores touch bytes and one writes them plainly, or one updates them atomically
  and another reads them plainly, the rows there are compared pairwise to name both cores and calls, and
  that is a PipeRaceError with .memory "GM" (atomic updates from several cores never race each other). The
  cost is one short append per GM access and O(n log n) numpy work per phase in the number of log rows; no
  per-byte shadow of GM and no lock between the cores' threads. Each phase's plain writes, folded per (core,
  call), are kept to the end of the launch: bytes two cores wrote plainly (a SyncAll between them or not) are
  overlapping writes, listed in RunReport.extra["overlapping_writes"] and an OverlapError in mode "all".
  Atomic updates are never overlaps: accumulating into one output from many cores is what they are for.
* Ownership. A vector or DMA instruction on a TQue buffer that is free (before its AllocTensor
  or after its FreeTensor) or enqueued (after EnQue, before DeQue) is a QueueError.
* Uninitialised reads (mode "init"). The UB shadow's "no write yet" state is a run too: a new
  TPipe resets the whole shadow to it (InitBuffer does not initialise, and the TPipe change orders
  every earlier access before every later one, so no race is lost), and a read of a run in that state
  is an UninitializedReadError naming the buffer (the queue table) and the bytes. The workspace gets a
  written-byte map all cores share (one byte per byte, so cores on other threads never lose each
  other's marks): GM writes into it mark bytes, GM reads of unmarked bytes are errors. InitWaivers
  declared with a kernel let the real kernels' reads pass (a UB buffer; workspace reads ending in a
  short unwritten tail).
* Flags (mode "sync"). Unpaired SetFlag / WaitFlag are errors in every mode (events.py, launch.py); mode
  "sync" remembers which call raised and lowered each flag so the error names them.

Modes are bits (layout.MODES): "race" / "strict" select the race rules, "init" and "sync" add their
checks, "all" is race + init + sync plus the overlapping-write check of the whole launch (CHECK_OVERLAP, which
only the launcher runs). The shadow records accesses in every checked mode; only the checks of the selected bits
report.

The shadow lives in a host buffer the launcher allocates in checked mode only, reached through
its address in the core state (load_i64 / store_i64). The UB and GM-read checks (shadow.py) are compiled
once as C functions (_check_entries) that kernels call by address; kernels inline only a test of the
mode, so the default mode pays one test per call and the checks add nothing to a stage's compile.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from ._jit import aicore
from ._memory import call_by_address, data_address
from .errors import ConfigError
from .layout import (
    CALL_NAMES,
    CHK_E,
    CHK_FLAG_SET_CALL,
    CHK_FLAG_V,
    CHK_FLAG_WAIT_CALL,
    CHK_FN,
    CHK_FN_GM_READ,
    CHK_FN_GM_WRITE,
    CHK_FN_UB,
    CHK_FN_VECTOR,
    CHK_GM_N,
    CHK_INIT_WAIVE,
    CHK_K,
    CHK_MODE,
    CHK_SHADOW_ADDR,
    CHK_SHADOW_BLOCKS,
    CHK_WAIVE,
    CHK_WAIVE_N,
    CHK_WAIVERS,
    CHK_WS_HI,
    CHK_WS_LO,
    CHK_WS_MAP,
    CHK_WS_TAIL,
    CNT_CALLS,
    CORE_MODE_MASK,
    EVENT_IDS,
    MODE_INIT,
    MODE_OFF,
    MODE_RACE,
    MODE_SYNC,
    MODES,
    N_PIPES,
    PIPE_ALL,
    PIPE_NAMES,
    PIPE_S,
    SHADOW_BLOCK,
    SHADOW_COLS,
)

CHECK_ENV = "ASCEND_SIM_CHECK"
_CHECKED: ContextVar[str | None] = ContextVar("ascend_sim_check", default=None)


@contextmanager
def checked(mode: str = "race"):
    """Run the launches inside the block (this thread) in checked mode `mode` (one of layout.MODES: "race",
    "strict", "init", "sync" or "all")."""
    _mode_code("mode", mode)
    token = _CHECKED.set(mode)
    try:
        yield
    finally:
        _CHECKED.reset(token)


def _mode_code(source: str, value) -> int:
    """The mode bits of `value` (a name of layout.MODES, "off" or ""); ConfigError naming `source` for anything
    else (a list such as ["race"] included: it is not one of the names, and would not hash)."""
    if isinstance(value, str):
        if value in ("off", ""):
            return MODE_OFF
        if value in MODES:
            return MODES[value]
    names = ", ".join(repr(name) for name in MODES)
    raise ConfigError(f"{source} must be {names} or 'off', got {value!r} ({type(value).__name__})",
                      setting=source)


def resolve(check) -> int:
    """The checked mode of a launch as mode bits (layout.MODES; 0 off): `check` if given (a name of layout.MODES,
    "off" / None), else the enclosing `checked()` block, else $ASCEND_SIM_CHECK. ConfigError for anything else. The
    bits the cores check (CORE_MODE_MASK) go into each core's state; the others are launch-wide checks."""
    for source, value in (("check", check), ("checked()", _CHECKED.get()),
                          (CHECK_ENV, os.environ.get(CHECK_ENV, "").strip() or None)):
        if value is not None:
            return _mode_code(source, value)
    return MODE_OFF


def attach(state: np.ndarray, mode: int, ub_size: int, waivers=()) -> np.ndarray:
    """Turn checked mode on for a core (host side) and return its UB shadow, which the caller keeps alive for
    the launch. `waivers`: the kernel's waivers; its RaceWaivers are races between exactly those two calls on those
    two pipes that are let pass (and counted).

    The shadow is flat int64: SHADOW_COLS words per 32-byte block (a run's record lives in its first block),
    then the run-start bitmap, one bit per block and a sentinel bit. It starts as one run nothing has accessed."""
    waivers = [w for w in waivers if isinstance(w, RaceWaiver) and not w.cross_core]
    if len(waivers) > CHK_WAIVERS:
        raise ConfigError(f"a kernel may waive at most {CHK_WAIVERS} races, got {len(waivers)}", setting="waivers")
    blocks = (ub_size + SHADOW_BLOCK - 1) // SHADOW_BLOCK
    shadow = np.zeros(blocks * SHADOW_COLS + blocks // 64 + 1, dtype=np.int64)
    bitmap = shadow[blocks * SHADOW_COLS:].view(np.uint64)
    bitmap[0] |= np.uint64(1)
    bitmap[blocks // 64] |= np.uint64(1) << np.uint64(blocks % 64)
    from ._check_entries import ENTRIES  # compiled, or loaded from the disk cache, on the first checked launch
    state[CHK_FN:CHK_FN + len(ENTRIES)] = ENTRIES
    state[CHK_MODE] = mode & CORE_MODE_MASK
    state[CHK_SHADOW_ADDR] = shadow.ctypes.data
    state[CHK_SHADOW_BLOCKS] = blocks
    state[CHK_WAIVE_N] = len(waivers)
    for k, w in enumerate(waivers):
        state[CHK_WAIVE + 4 * k: CHK_WAIVE + 4 * k + 4] = w.codes()
    return shadow


class RaceWaiver:
    """A race a shipped kernel has on purpose because the real kernel has it: the `first` call on `first_pipe`
    and the `second` call on `second_pipe` (AscendC call names as in layout.CALL_NAMES, pipes "S", "V", "MTE2",
    "MTE3"), with the reason. Checked mode lets exactly that pair pass and counts it
    (RunReport.extra["waived_races"]); docs/guides/checked-mode.md lists every waiver.

    cross_core=True waives a race between two cores on GM instead (the two calls on different cores, in
    either order, in one SyncAll phase): the real kernel hands data from one core to another by other means
    than SyncAll. Those are counted in RunReport.extra["waived_cross_core"]."""

    def __init__(self, first_pipe: str, first: str, second_pipe: str, second: str, reason: str, *,
                 cross_core: bool = False):
        ids = {name: k for k, name in CALL_NAMES.items()}
        for setting, call in (("first", first), ("second", second)):
            if call not in ids:
                raise ConfigError(f"RaceWaiver {setting}: unknown AscendC call {call!r} (the names of "
                                  f"layout.CALL_NAMES)", setting=setting)
        for setting, pipe in (("first_pipe", first_pipe), ("second_pipe", second_pipe)):
            if pipe not in PIPE_NAMES:
                raise ConfigError(f"RaceWaiver {setting}: unknown pipe {pipe!r}, not one of {', '.join(PIPE_NAMES)}",
                                  setting=setting)
        self.first_pipe, self.first, self.second_pipe, self.second, self.reason = (
            first_pipe, first, second_pipe, second, reason)
        self._codes = (PIPE_NAMES.index(first_pipe), ids[first], PIPE_NAMES.index(second_pipe), ids[second])
        self.cross_core = bool(cross_core)

    def codes(self) -> tuple:
        return self._codes

    def __repr__(self) -> str:
        where = ", across cores" if self.cross_core else ""
        return f"RaceWaiver({self.first_pipe} {self.first} -> {self.second_pipe} {self.second}{where}: {self.reason})"


class OverlapWaiver:
    """GM bytes a shipped kernel writes from two cores on purpose because the real kernel does (e.g. one core
    zero-fills an output that other cores then fill or accumulate into after a SyncAll): writes by the `first`
    call on one core and the `second` call on another (AscendC call names as in layout.CALL_NAMES; either order),
    with the reason. Checked mode "all" lets exactly that pair pass; RunReport.extra["overlapping_writes"] still
    lists it, marked waived. docs/guides/checked-mode.md lists every waiver."""

    def __init__(self, first: str, second: str, reason: str):
        ids = {name: k for k, name in CALL_NAMES.items()}
        for setting, call in (("first", first), ("second", second)):
            if call not in ids:
                raise ConfigError(f"OverlapWaiver {setting}: unknown AscendC call {call!r} (the names of "
                                  f"layout.CALL_NAMES)", setting=setting)
        self.first, self.second, self.reason = first, second, reason
        self.calls = frozenset((ids[first], ids[second]))

    def covers(self, call_a: int, call_b: int) -> bool:
        """Does this waiver let writes by call ids call_a and call_b on two cores pass?"""
        return frozenset((call_a, call_b)) == self.calls

    def __repr__(self) -> str:
        return f"OverlapWaiver({self.first} / {self.second}: {self.reason})"


WORKSPACE = "workspace"


class InitWaiver:
    """A read of never-written bytes a shipped kernel makes on purpose because the real kernel makes it (a whole
    register loaded past a buffer's valid data with those lanes masked off, a sort's end padding): reads of the UB
    buffer `buffer` (a queue / TBuf name of the kernel's PipePhases) that no call wrote since its TPipe was built;
    or, with buffer "workspace", reads of the workspace whose only unwritten bytes are their last `tail` bytes or
    fewer (an aligned DataCopy running past the data the cores wrote). `reason` names the master source line.
    Mode "init" lets exactly those reads pass and counts them (RunReport.extra["waived_uninit_reads"]);
    docs/guides/checked-mode.md lists every waiver."""

    def __init__(self, buffer: str, reason: str, tail: int = 0):
        if not isinstance(buffer, str) or not buffer:
            raise ConfigError(f"InitWaiver buffer must be a queue / TBuf name or 'workspace', got {buffer!r}",
                              setting="buffer")
        if (buffer == WORKSPACE) != (isinstance(tail, int) and not isinstance(tail, bool) and 0 < tail <= 1024):
            raise ConfigError("InitWaiver tail (bytes, 1..1024) is given for the workspace and only for it, got "
                              f"{tail!r} for {buffer!r}", setting="tail")
        self.buffer, self.reason, self.tail = buffer, reason, tail

    def __repr__(self) -> str:
        return f"InitWaiver({self.buffer}{f' tail {self.tail}' if self.tail else ''}: {self.reason})"


def init_waiver_bits(kernel_name: str, waivers, phases) -> list[int]:
    """Per PipePhase, the bits (queue index) of the buffers the kernel's InitWaivers name; ConfigError for a name
    no phase has (a waiver that waives nothing is a typo)."""
    names = {w.buffer for w in waivers if isinstance(w, InitWaiver) and w.buffer != WORKSPACE}
    unknown = names - {b for ph in phases for b in ph.buffers}
    if unknown:
        raise ConfigError(f"{kernel_name}: InitWaiver names {sorted(unknown)}, which no TPipe of the kernel "
                          "builds", setting="waivers")
    return [sum(1 << q for q, b in enumerate(ph.buffers) if b in names) for ph in phases]


def attach_workspace(states: np.ndarray, workspace, waivers=()) -> np.ndarray | None:
    """Mode "init": the launch's workspace (the array the aclnn second phase hands the kernel, or None) gets a
    written-byte map every core shares (one byte per workspace byte, all unwritten), and the kernel's workspace
    InitWaiver its tail; returns the map (the caller keeps it alive for the launch)."""
    if workspace is None or not workspace.nbytes:
        return None
    bytemap = np.zeros((workspace.nbytes + 7) // 8, dtype=np.int64)
    lo = workspace.ctypes.data
    tail = max((w.tail for w in waivers if isinstance(w, InitWaiver) and w.buffer == WORKSPACE), default=0)
    for s in states:
        if s[CHK_MODE] & MODE_INIT:
            s[CHK_WS_MAP], s[CHK_WS_LO], s[CHK_WS_HI], s[CHK_WS_TAIL] = (bytemap.ctypes.data, lo,
                                                                         lo + workspace.nbytes, tail)
    return bytemap


def pipe_built(s: np.ndarray, shadow: np.ndarray, init_waive: int, new_tpipe: bool = True) -> None:
    """A new PipePhase on this core (host side): every pipe comes after everything before it (TPipe::Destroy waits
    for the old one's work), and in mode "init", if the phase builds a new TPipe (`new_tpipe`: its pipe name differs
    from the last phase's; a kernel may model one TPipe's life as several phases), nothing of the UB is written yet
    (InitBuffer does not initialise). The barrier orders every earlier access before every later one, so forgetting
    them loses no race."""
    barrier_all(s)
    s[CHK_INIT_WAIVE] = init_waive
    if s[CHK_MODE] & MODE_INIT and new_tpipe:
        blocks = int(s[CHK_SHADOW_BLOCKS])
        shadow[:] = 0
        bitmap = shadow[blocks * SHADOW_COLS:].view(np.uint64)
        bitmap[0] |= np.uint64(1)
        bitmap[blocks // 64] |= np.uint64(1) << np.uint64(blocks % 64)


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
    if dst != PIPE_S and c.state[CHK_MODE] & MODE_RACE:
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
    if c.state[CHK_MODE] & MODE_RACE:       # the scalar unit issued the barrier and waits at it too
        c.state[CHK_K + PIPE_S * N_PIPES + pipe] = c.state[CHK_E + pipe]


# --- mode "sync": which calls raised and lowered each flag ----------------------------------------------------
@aicore
def flag_raised(c, evt, event_id):
    """SetFlag<evt>(event_id) (callers test the mode first): remember its call, named if nothing waits for it."""
    if c.state[CHK_MODE] & MODE_SYNC:
        c.state[CHK_FLAG_SET_CALL + evt * EVENT_IDS + event_id] = c.state[CNT_CALLS]


@aicore
def flag_lowered(c, evt, event_id):
    """WaitFlag<evt>(event_id) took the flag down: remember its call, named if another WaitFlag finds it down."""
    if c.state[CHK_MODE] & MODE_SYNC:
        c.state[CHK_FLAG_WAIT_CALL + evt * EVENT_IDS + event_id] = c.state[CNT_CALLS]


# --- what kernels call ----------------------------------------------------------------------
# The checks (shadow.py) are compiled once, as C functions (_check_entries), and kernels call them by the addresses
# attach() puts in the core state. Inlined, their code was optimised again inside every kernel stage that makes
# an AscendC call (about a tenth of the demo's cold compile); a call by address costs a few nanoseconds, and only
# in checked mode. Call sites test the mode before computing the arguments; the stubs test it again so that no
# call can jump to an address attach() has not set.
@aicore
def ub(c, call, pipe, off, nbytes, write):
    """shadow.check_ub, in checked mode only."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_UB], (data_address(c.state), c.state.size, call, pipe, off, nbytes, write))


@aicore
def vector_access(c, call, d, d_bytes, s0, s0_bytes, s1, s1_bytes):
    """shadow.check_vector_access, in checked mode only."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_VECTOR], (data_address(c.state), c.state.size, call, d, d_bytes, s0,
                                                  s0_bytes, s1, s1_bytes))


@aicore
def gm_read(c, call, pipe, address, nbytes):
    """shadow.check_gm_read of one run of `nbytes` GM bytes, in checked mode only."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_GM_READ], (data_address(c.state), c.state.size, call, pipe, address, 1,
                                                   nbytes, 0))


@aicore
def gm_read_rows(c, call, pipe, address, rows, row_bytes, gap):
    """shadow.check_gm_read of `rows` rows of `row_bytes` bytes, `gap` bytes apart (a strided DMA copy)."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_GM_READ], (data_address(c.state), c.state.size, call, pipe, address, rows,
                                                   row_bytes, gap))


@aicore
def gm_write(c, call, pipe, address, nbytes):
    """shadow.check_gm_write of one run of `nbytes` GM bytes (MTE3, the scalar unit, SIMT), in checked mode only."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_GM_WRITE], (data_address(c.state), c.state.size, call, pipe, address, 1,
                                                    nbytes, 0))


@aicore
def gm_write_rows(c, call, pipe, address, rows, row_bytes, gap):
    """shadow.check_gm_write of `rows` rows of `row_bytes` bytes, `gap` bytes apart (a strided DMA copy)."""
    if c.state[CHK_MODE] != MODE_OFF:
        call_by_address(c.state[CHK_FN_GM_WRITE], (data_address(c.state), c.state.size, call, pipe, address, rows,
                                                    row_bytes, gap))
