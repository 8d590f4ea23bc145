"""Faults detected inside kernels, and their translation to SimulatorError.

Kernel code never raises (see _jit.py). An AscendC call that detects a broken rule
records a fault (fault code, call id, six integers) in `Core.state` and returns at once;
every later call on that core sees the fault and does nothing, so no byte moves after the
first fault and the core runs out its loops quickly. When the stage returns, the launcher
turns the first fault into the structured SimulatorError, names filled in (tensor, queue,
event, dtype).
"""
from __future__ import annotations

import numpy as np

from . import errors
from ._jit import aicore
from .layout import (
    CALL_NAMES,
    CNT_CALLS,
    ERR_BASE,
    F_BARRIER_S,
    F_CAST_PAIR,
    F_COUNT_BYTES,
    F_DATACOPY_TRUNC,
    F_ELEM_TYPE,
    F_EVT_DOUBLE_SET,
    F_EVT_EXHAUSTED,
    F_EVT_ID,
    F_EVT_WAIT_UNSET,
    F_GM_OOB,
    F_LEN_MULTIPLE,
    F_OUTLINE,
    F_PARAM,
    F_PATTERN_TYPE,
    F_PIPE_RACE,
    F_QUE_DEPTH,
    F_QUE_EMPTY,
    F_QUE_FOREIGN,
    F_QUE_INDEX,
    F_QUE_KIND,
    F_QUE_NO_FREE,
    F_QUE_OWNER,
    F_QUE_STATE,
    F_SCALAR_OOB,
    F_SIMT_ARCH,
    F_SIMT_OOB,
    F_SIMT_RACE,
    F_SIMT_THREADS,
    F_UB_ALIGN,
    F_UB_NOT_IN_UB,
    F_UB_OOB,
    F_UNINIT_READ,
    F_UNSUPPORTED,
    FAULT_CALL_INDEX,
    PARAM_NAMES,
    STATE_NAMES,
)


@aicore
def fault(c, code, call, a0=0, a1=0, a2=0, a3=0, a4=0, a5=0):
    """Record a fault (the first one on this core wins); the caller must return at once."""
    if c.state[ERR_BASE] != 0:
        return
    c.state[ERR_BASE] = code
    c.state[ERR_BASE + 1] = call
    c.state[ERR_BASE + 2] = a0
    c.state[ERR_BASE + 3] = a1
    c.state[ERR_BASE + 4] = a2
    c.state[ERR_BASE + 5] = a3
    c.state[ERR_BASE + 6] = a4
    c.state[ERR_BASE + 7] = a5
    c.state[FAULT_CALL_INDEX] = c.state[CNT_CALLS]


@aicore
def issue(c, call):
    """Count one AscendC call; False once the core has faulted (the call must then do nothing)."""
    if c.state[ERR_BASE] != 0:
        return False
    c.state[CNT_CALLS] += 1
    return True


@aicore
def faulted(c):
    return c.state[ERR_BASE] != 0


def to_error(err: np.ndarray, *, core: int, op: str, tiling_key: int | None, call_index: int,
             gm_names, queue_names, event_names, dtype_names) -> errors.SimulatorError:
    """Build the SimulatorError a fault record describes."""
    code, call = int(err[0]), int(err[1])
    a = [int(v) for v in err[2:]]
    where = dict(core=core, op=op, tiling_key=tiling_key,
                 call=f"{CALL_NAMES.get(call, f'call {call}')} (call #{call_index})")

    def gm(i):
        return gm_names[i] if 0 <= i < len(gm_names) else f"GM tensor {i}"

    def que(i):
        return queue_names[i] if 0 <= i < len(queue_names) else f"queue {i}"

    def evt(i):
        return event_names[i] if 0 <= i < len(event_names) else f"event {i}"

    if code == F_GM_OOB:
        return errors.OutOfBoundsError(
            f"GM access to bytes [{a[1]}, {a[2]}) of '{gm(a[0])}' is outside the tensor's {a[3]} bytes",
            tensor=gm(a[0]), byte_range=(a[1], a[2]), **where)
    if code == F_UB_OOB:
        return errors.OutOfBoundsError(
            f"UB access of {a[1]} bytes from the LocalTensor at UB offset {a[0]} exceeds the tensor's "
            f"{a[2]} bytes", **where)
    if code == F_UB_NOT_IN_UB:
        return errors.OutOfBoundsError(
            f"LocalTensor at byte {a[0]} (+{a[1]} bytes) does not lie inside this core's Unified Buffer", **where)
    if code == F_UB_ALIGN:
        return errors.AlignmentError(f"UB address {a[0]} is not {a[1]}-byte aligned", **where)
    if code == F_PARAM:
        name = PARAM_NAMES.get(a[0], f"parameter {a[0]}")
        return errors.ParamRangeError(f"{name} = {a[1]} is outside [{a[2]}, {a[3]}]", **where)
    if code == F_LEN_MULTIPLE:
        return errors.AlignmentError(f"blockLen {a[0]} bytes is not a multiple of sizeof(T) = {a[1]}", **where)
    if code == F_DATACOPY_TRUNC:
        return errors.AlignmentError(
            f"DataCopy of {a[0]} bytes is not a multiple of 32 bytes; the hardware would silently move only "
            f"{a[0] - a[0] % 32} bytes (use DataCopyPad)", **where)
    if code == F_QUE_STATE:
        state = STATE_NAMES[a[2]] if 0 <= a[2] < 4 else str(a[2])
        return errors.QueueError(f"buffer {a[1]} of '{que(a[0])}' is {state}, which this call does not accept",
                                 **where)
    if code == F_QUE_DEPTH:
        return errors.QueueError(f"EnQue on '{que(a[0])}' with {a[1]} tensors already queued exceeds its depth {a[2]}",
                                 **where)
    if code == F_QUE_EMPTY:
        return errors.QueueError(f"DeQue on '{que(a[0])}' with nothing enqueued (would hang on the NPU)", **where)
    if code == F_QUE_FOREIGN:
        return errors.QueueError(f"the tensor at UB offset {a[1]} does not belong to '{que(a[0])}'", **where)
    if code == F_QUE_NO_FREE:
        return errors.QueueError(f"AllocTensor on '{que(a[0])}': all {a[1]} buffers are in use (would hang on the NPU)",
                                 **where)
    if code == F_QUE_KIND:
        kind = {0: "TQue", 1: "TQueBind", 2: "TBuf"}.get(a[1], str(a[1]))
        return errors.QueueError(f"'{que(a[0])}' is a {kind}, which this call does not accept", **where)
    if code == F_ELEM_TYPE:
        return errors.ElementTypeError(f"different element types, or ones this call does not take: {a[0]}-byte "
                                     f"destination and {a[1]}-byte source elements (DataCopy, DataCopyPad and Copy "
                                     f"take one T for both sides)", **where)
    if code == F_QUE_INDEX:
        return errors.QueueError(f"queue/TBuf index {a[0]} is not one of the {a[1]} buffers this TPipe's "
                                 f"InitBuffer calls created", **where)
    if code == F_EVT_ID:
        return errors.SyncError(f"event id {a[1]} of {evt(a[0])} is outside [0, 8)", **where)
    if code == F_EVT_DOUBLE_SET:
        return errors.SyncError(f"SetFlag<{evt(a[0])}>({a[1]}) while the flag is already set (undefined on the NPU)",
                                **where)
    if code == F_EVT_WAIT_UNSET:
        return _wait_unset_error(evt(a[0]), a, call_index, where)
    if code == F_EVT_EXHAUSTED:
        return errors.SyncError(f"FetchEventID<{evt(a[0])}>: all {a[1]} event ids have a SetFlag awaiting its "
                                f"WaitFlag, so no id is free (on the NPU a SetFlag on a reused id is undefined and "
                                f"can hang); wait for a flag before fetching another id", **where)
    if code == F_BARRIER_S:
        return errors.SyncError("PipeBarrier<PIPE_S> is not allowed", **where)
    if code == F_CAST_PAIR:
        return errors.ParamRangeError(
            f"Cast from {dtype_names(a[1])} to {dtype_names(a[0])} does not support round mode {a[2]}", **where)
    if code == F_SCALAR_OOB:
        return errors.OutOfBoundsError(f"index {a[1]} of a {a[2]}-element scalar array (#{a[0]}) is out of range",
                                       **where)
    if code == F_COUNT_BYTES:
        return errors.AlignmentError(
            f"count covers {a[0]} bytes, not a multiple of {a[1]}: the hardware would silently skip the elements "
            f"of the last {a[0] % a[1]} bytes (round the count up to whole {a[1]}-byte repeats)", **where)
    if code == F_UNSUPPORTED:
        return errors.ElementTypeError(f"{dtype_names(a[0])} data with mode {a[1]} is not supported by this "
                                       f"instruction on NPU arch {a[2]}", **where)
    if code == F_PATTERN_TYPE:
        return errors.ElementTypeError(f"the gather pattern has {a[0]}-byte elements but the data {a[1]}-byte ones; "
                                       "GatherMask takes a uint16 pattern for 2-byte data, uint32 for 4-byte data",
                                       **where)
    if code == F_PIPE_RACE:
        return _race_error(a, call, call_index, where)
    if code == F_QUE_OWNER:
        if a[2] == 2:
            how = "while it is enqueued (after EnQue, before DeQue): the consumer pipe may be reading it"
        elif a[3] > 0:
            how = f"after its FreeTensor (call #{a[3]}): the producer may already be refilling it"
        else:
            how = "before any AllocTensor handed it out"
        return errors.QueueError(f"buffer {a[1]} of '{que(a[0])}' is used {how}", **where)
    if code == F_SIMT_ARCH:
        chip = "Ascend 910B / 910_93" if a[0] == 2201 else f"NPU arch {a[0]}"
        return errors.SimulatorError(f"SIMT (asc_vf_call / Simt::VF_CALL) exists only on Ascend 950 (NPU arch 3510); "
                                     f"this chip is {chip} (NPU arch {a[0]})", **where)
    if code == F_SIMT_THREADS:
        return errors.ParamRangeError(f"threadNums dim3{{{a[0]}, {a[1]}, {a[2]}}}: every dimension must be >= 1 and "
                                      f"dimx * dimy * dimz at most {a[3]}", **where)
    if code == F_SIMT_RACE:
        return errors.PipeRaceError(
            f"WAW race on GM bytes at 0x{a[2]:x} (+{a[3]}): SIMT threads {a[0]} and {a[1]} of one asc_vf_call both "
            "store there without an atomic; on the chip the result depends on warp scheduling (give each thread its "
            "own elements or use Simt::AtomicAdd)", kind="WAW", memory="GM", byte_range=(a[2], a[2] + a[3]),
            first=dict(thread=a[0], call=CALL_NAMES.get(call, "")),
            second=dict(thread=a[1], call=CALL_NAMES.get(call, "")), **where)
    if code == F_SIMT_OOB:
        if a[0] == 1:
            return errors.OutOfBoundsError(
                f"SIMT thread {a[5]} accesses bytes [{a[2]}, {a[3]}) of '{gm(a[1])}', outside the tensor's {a[4]} "
                "bytes", tensor=gm(a[1]), byte_range=(a[2], a[3]), **where)
        return errors.OutOfBoundsError(
            f"SIMT thread {a[5]} accesses bytes [{a[2]}, {a[3]}) of the LocalTensor at UB offset {a[1]}, outside its "
            f"{a[4]} bytes", **where)
    if code == F_UNINIT_READ:
        return _uninit_error(a, que, where)
    if code == F_OUTLINE:
        return errors.SimulatorError("internal: the compiled machine-model code of this call could not be loaded "
                                     "(see the warnings above; clearing the __pycache__ directories recompiles it)",
                                     **where)
    return errors.SimulatorError(f"fault code {code} with arguments {a}", **where)


_PIPES = ("PIPE_S", "PIPE_V", "PIPE_MTE2", "PIPE_MTE3")
_RACE_VERBS = {0: ("wrote", "reads"), 1: ("read", "writes"), 2: ("wrote", "writes")}


def _race_error(a, call, call_index, where):
    other_pipe, pipe, kind, mem = a[2] & 15, (a[2] >> 4) & 15, (a[2] >> 8) & 15, (a[2] >> 12) & 15
    kind_name = ("RAW", "WAR", "WAW")[kind]
    memory = "UB" if mem == 0 else "GM"
    first = dict(call_index=a[0], call=CALL_NAMES.get(a[1], f"call {a[1]}"), pipe=_PIPES[other_pipe])
    second = dict(call_index=call_index, call=CALL_NAMES.get(call, f"call {call}"), pipe=_PIPES[pipe])
    did, does = _RACE_VERBS[kind]
    where_bytes = f"UB bytes [{a[3]}, {a[4]})" if mem == 0 else f"GM bytes at 0x{a[3]:x} (+{a[4] - a[3]})"
    same = other_pipe == pipe
    fix = ("a PipeBarrier<" + _PIPES[pipe] + "> between them" if same else
           f"SetFlag<{_PIPES[other_pipe][5:]}_{_PIPES[pipe][5:]}> / WaitFlag (or the queue's EnQue / DeQue) between "
           "them")
    return errors.PipeRaceError(
        f"{kind_name} race on {where_bytes}: {first['pipe']} {first['call']} (call #{a[0]}) {did} them and "
        f"{second['pipe']} {second['call']} (call #{call_index}) {does} them with nothing ordering the two "
        f"(add {fix})", kind=kind_name, memory=memory, byte_range=(a[3], a[4]), first=first, second=second,
        **where)


def flag_pipes(event: str) -> tuple[str, str]:
    """The (src, dst) pipes of a HardEvent name "SRC_DST": the dst pipe waits for the src pipe."""
    src, dst = event.split("_")
    return f"PIPE_{src}", f"PIPE_{dst}"


def _wait_unset_error(event: str, a, call_index, where):
    src, dst = flag_pipes(event)
    up = [i for i in range(8) if (a[2] >> i) & 1]
    hints = []
    if up:
        hints.append(f"SetFlag<{event}> is up for id(s) {', '.join(map(str, up))}: a WaitFlag on the wrong id?")
    if a[3] > 0:
        hints.append(f"WaitFlag<{event}>({a[1]}) at call #{a[3]} already took this flag down: one WaitFlag per SetFlag")
    hint = (" " + " ".join(hints)) if hints else ""
    return errors.UnpairedFlagError(
        f"WaitFlag<{event}>({a[1]}): {dst} waits for {src} but no SetFlag<{event}>({a[1]}) is up before it, so the "
        f"pipe would wait forever on the NPU (set the flag before waiting for it).{hint}",
        event=event, event_id=a[1], src_pipe=src, dst_pipe=dst, wait_call=call_index,
        last_wait_call=a[3] if a[3] > 0 else None, **where)


def _uninit_error(a, que, where):
    mem, lo, hi, q = a[0], a[1], a[2], a[3]
    if mem == 1:
        return errors.UninitializedReadError(
            f"read of workspace bytes [{lo}, {hi}) that no core wrote in this launch (the workspace comes "
            "uninitialised: write or zero it first, e.g. InitOutput, before reading it)", memory="GM",
            buffer="workspace", byte_range=(lo, hi), **where)
    name = que(q) if q >= 0 else None
    inside = f" of '{name}'" if name else " outside every buffer"
    return errors.UninitializedReadError(
        f"read of UB bytes [{lo}, {hi}){inside} that no call wrote since the TPipe was built (InitBuffer does not "
        "initialise the UB: copy in, Duplicate or compute them first)", memory="UB", buffer=name, byte_range=(lo, hi),
        **where)
