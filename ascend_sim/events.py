"""Intra-core synchronisation: HardEvent flags, SetFlag / WaitFlag, PipeBarrier (numba).

Calls execute in program order, so the simulator checks the *protocol* the hardware
needs rather than timing: a WaitFlag must have a SetFlag in front of it (else the NPU
stalls forever), a flag may not be set twice before it is waited for, ids are 0..7, and
no flag may be left set when the kernel ends (the launcher checks that). These checks run in every mode and raise
UnpairedFlagError (a SyncError) naming the event, its pipes and the call; checked mode "sync" also names the
SetFlag a leaked flag came from and the WaitFlag that lowered a flag another WaitFlag then waits for.
"""
from __future__ import annotations

from ._jit import aicore
from ._outline import outline
from .faults import fault, issue
from .layout import (  # noqa: F401
    CALL_FETCH_EVENT_ID,
    CALL_PIPE_BARRIER,
    CALL_SET_FLAG,
    CALL_WAIT_FLAG,
    CHK_FLAG_WAIT_CALL,
    CNT_EVENTS,
    CNT_PIPE_BARRIERS,
    EVENT_IDS,
    F_BARRIER_S,
    F_EVT_DOUBLE_SET,
    F_EVT_EXHAUSTED,
    F_EVT_ID,
    F_EVT_WAIT_UNSET,
    FLAG_BASE,
    HARD_EVENT_NAMES,
    N_HARD_EVENTS,
    PIPE_ALL,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_S,
    PIPE_V,
)
from .timeline import pipe_barrier as tl_pipe_barrier
from .timeline import set_flag as tl_set_flag
from .timeline import wait_flag as tl_wait_flag

# HardEvent values used by vector kernels (SRC_DST: the DST pipe waits for the SRC pipe).
MTE2_V = 0
V_MTE2 = 1
MTE3_V = 2
V_MTE3 = 3
V_V = 4
MTE3_MTE2 = 5
MTE2_MTE3 = 6
S_V = 7
V_S = 8
S_MTE2 = 9
MTE2_S = 10
S_MTE3 = 11
MTE3_S = 12



@aicore
def _flag_slot(c, call, evt, event_id):
    """Index of flag (evt, id) in the core state, or -1 (fault recorded) for a bad event or id."""
    if evt < 0 or evt >= N_HARD_EVENTS or event_id < 0 or event_id >= EVENT_IDS:
        fault(c, F_EVT_ID, call, evt, event_id)
        return -1
    return FLAG_BASE + evt * EVENT_IDS + event_id


@outline
def set_flag(c, evt, event_id):
    """SetFlag<evt>(id): the SRC pipe raises the flag once its earlier work is done."""
    if not issue(c, CALL_SET_FLAG):
        return
    slot = _flag_slot(c, CALL_SET_FLAG, evt, event_id)
    if slot < 0:
        return
    if c.state[slot] != 0:
        fault(c, F_EVT_DOUBLE_SET, CALL_SET_FLAG, evt, event_id)
        return
    c.state[slot] = 1
    c.state[CNT_EVENTS] += 1
    tl_set_flag(c, evt, event_id)


@outline
def wait_flag(c, evt, event_id):
    """WaitFlag<evt>(id): the DST pipe stalls until the flag is up, then clears it."""
    if not issue(c, CALL_WAIT_FLAG):
        return
    slot = _flag_slot(c, CALL_WAIT_FLAG, evt, event_id)
    if slot < 0:
        return
    if c.state[slot] == 0:
        # for the message: the ids of this event that are up (a WaitFlag on the wrong id?) and, in checked mode
        # "sync", the WaitFlag that took this flag down last (a second WaitFlag for one SetFlag?)
        up = 0
        for i in range(EVENT_IDS):
            if c.state[FLAG_BASE + evt * EVENT_IDS + i] != 0:
                up |= 1 << i
        fault(c, F_EVT_WAIT_UNSET, CALL_WAIT_FLAG, evt, event_id, up,
              c.state[CHK_FLAG_WAIT_CALL + evt * EVENT_IDS + event_id])
        return
    c.state[slot] = 0
    c.state[CNT_EVENTS] += 1
    tl_wait_flag(c, evt, event_id)


@outline
def sync_pipes(c, evt):
    """FetchEventID(evt), SetFlag and WaitFlag on that id: the pipe named second waits for the first's work
    so far (the XToYSync helpers the kernels define)."""
    event_id = fetch_event_id(c, evt)
    set_flag(c, evt, event_id)
    wait_flag(c, evt, event_id)


@aicore
def fetch_event_id(c, evt):
    """TPipe::FetchEventID(evt): an id whose flag is currently down (the lowest one).

    With every id's flag up there is none to give: that is a fault (SyncError), not id 0, whose SetFlag
    would set a flag that is already set. After a fault it returns 0 (later calls do nothing anyway)."""
    if evt < 0 or evt >= N_HARD_EVENTS:
        fault(c, F_EVT_ID, CALL_FETCH_EVENT_ID, evt, 0)
        return 0
    for i in range(EVENT_IDS):
        if c.state[FLAG_BASE + evt * EVENT_IDS + i] == 0:
            return i
    fault(c, F_EVT_EXHAUSTED, CALL_FETCH_EVENT_ID, evt, EVENT_IDS)
    return 0


@outline
def pipe_barrier(c, pipe):
    """PipeBarrier<pipe>(): order a pipe with itself (not allowed for PIPE_S)."""
    if not issue(c, CALL_PIPE_BARRIER):
        return
    if pipe == PIPE_S:
        fault(c, F_BARRIER_S, CALL_PIPE_BARRIER)
        return
    c.state[CNT_PIPE_BARRIERS] += 1
    tl_pipe_barrier(c, pipe)
