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
from .core import CNT_CALLS, ERR_BASE, FAULT_CALL_INDEX

# --- AscendC calls (fault record word 1) ---------------------------------------------------
CALL_DATA_COPY_PAD_IN = 1
CALL_DATA_COPY_PAD_OUT = 2
CALL_DATA_COPY_IN = 3
CALL_DATA_COPY_OUT = 4
CALL_ALLOC_TENSOR = 5
CALL_ENQUE = 6
CALL_DEQUE = 7
CALL_FREE_TENSOR = 8
CALL_TBUF_GET = 9
CALL_SET_FLAG = 10
CALL_WAIT_FLAG = 11
CALL_PIPE_BARRIER = 12
CALL_CAST = 13
CALL_MULS = 14
CALL_MUL = 15
CALL_ADD = 16
CALL_DUPLICATE = 17
CALL_COPY = 18
CALL_BLOCK_REDUCE_SUM = 19
CALL_WHOLE_REDUCE_SUM = 20
CALL_GM_GET_VALUE = 21
CALL_GM_SET_VALUE = 22
CALL_UB_GET_VALUE = 23
CALL_UB_SET_VALUE = 24
CALL_INIT_OUTPUT = 25
CALL_REINTERPRET_CAST = 26
CALL_SCALAR_ARRAY = 27
CALL_ADDS = 28
CALL_DATA_COPY_UB = 29
CALL_ARITH_PROGRESSION = 40
CALL_SORT = 41
CALL_EXTRACT = 42
CALL_MRG_SORT = 43
CALL_CONCAT = 44
CALL_DUPLICATE_MASK = 45
CALL_VF = 46
CALL_FETCH_EVENT_ID = 47
CALL_COMPARE_SCALAR = 60   # masked-select instructions (mask.py)
CALL_GATHER_MASK = 61

CALL_NAMES = {
    CALL_DATA_COPY_PAD_IN: "DataCopyPad(GM->UB)",
    CALL_DATA_COPY_PAD_OUT: "DataCopyPad(UB->GM)",
    CALL_DATA_COPY_IN: "DataCopy(GM->UB)",
    CALL_DATA_COPY_OUT: "DataCopy(UB->GM)",
    CALL_DATA_COPY_UB: "DataCopy(UB->UB)",
    CALL_ALLOC_TENSOR: "AllocTensor",
    CALL_ENQUE: "EnQue",
    CALL_DEQUE: "DeQue",
    CALL_FREE_TENSOR: "FreeTensor",
    CALL_TBUF_GET: "TBuf::Get",
    CALL_SET_FLAG: "SetFlag",
    CALL_WAIT_FLAG: "WaitFlag",
    CALL_PIPE_BARRIER: "PipeBarrier",
    CALL_CAST: "Cast",
    CALL_MULS: "Muls",
    CALL_MUL: "Mul",
    CALL_ADD: "Add",
    CALL_ADDS: "Adds",
    CALL_DUPLICATE: "Duplicate",
    CALL_COPY: "Copy",
    CALL_BLOCK_REDUCE_SUM: "BlockReduceSum",
    CALL_WHOLE_REDUCE_SUM: "WholeReduceSum",
    CALL_GM_GET_VALUE: "GlobalTensor::GetValue",
    CALL_GM_SET_VALUE: "GlobalTensor::SetValue",
    CALL_UB_GET_VALUE: "LocalTensor::GetValue",
    CALL_UB_SET_VALUE: "LocalTensor::SetValue",
    CALL_INIT_OUTPUT: "InitOutput",
    CALL_REINTERPRET_CAST: "ReinterpretCast",
    CALL_SCALAR_ARRAY: "scalar array access",
    CALL_ARITH_PROGRESSION: "ArithProgression",
    CALL_SORT: "Sort",
    CALL_EXTRACT: "Extract",
    CALL_MRG_SORT: "MrgSort",
    CALL_CONCAT: "Concat",
    CALL_DUPLICATE_MASK: "Duplicate(mask)",
    CALL_VF: "vector function (__VEC_SCOPE__)",
    CALL_FETCH_EVENT_ID: "TPipe::FetchEventID",
    CALL_COMPARE_SCALAR: "CompareScalar",
    CALL_GATHER_MASK: "GatherMask",
}

# --- fault codes (fault record word 0) and their arguments -----------------------------------
F_GM_OOB = 1          # tensor id, first byte, end byte, tensor bytes
F_UB_OOB = 2          # UB offset of the tensor, bytes accessed, tensor bytes
F_UB_NOT_IN_UB = 3    # byte offset relative to UB start, bytes
F_UB_ALIGN = 4        # UB offset, required alignment
F_PARAM = 5           # parameter id, value, low, high
F_LEN_MULTIPLE = 6    # blockLen bytes, sizeof(T)
F_DATACOPY_TRUNC = 7  # bytes requested (not a multiple of 32)
F_QUE_STATE = 8       # queue, buffer index, state found
F_QUE_DEPTH = 9       # queue, used count, depth
F_QUE_EMPTY = 10      # queue
F_QUE_FOREIGN = 11    # queue, UB offset of the tensor
F_QUE_NO_FREE = 12    # queue, buffers
F_EVT_ID = 13         # event, id
F_EVT_DOUBLE_SET = 14  # event, id
F_EVT_WAIT_UNSET = 15  # event, id
F_BARRIER_S = 16
F_CAST_PAIR = 17      # dst dtype, src dtype, round mode
F_SCALAR_OOB = 18     # array id (kernel defined), index, size
F_QUE_KIND = 20       # queue, kind
F_QUE_INDEX = 21      # queue, buffers of the live TPipe
F_ELEM_TYPE = 22      # destination element bytes, source element bytes
F_EVT_EXHAUSTED = 23  # event, ids the event has
F_COUNT_BYTES = 40    # bytes the count covers, the multiple they must be (mask.py)
F_UNSUPPORTED = 41    # dtype code, mode, NPU arch: a dtype / mode this chip's instruction lacks
F_PATTERN_TYPE = 42   # pattern element bytes, data element bytes (GatherMask)
F_PIPE_RACE = 43      # earlier call number, earlier call id, pipes / kind / memory packed, first byte, end byte
F_QUE_OWNER = 44      # queue, buffer, its state, call number of its last FreeTensor (0: never freed)

P_BLOCK_COUNT = 1
P_BLOCK_LEN = 2
P_STRIDE = 3
P_LEFT_PADDING = 4
P_RIGHT_PADDING = 5
P_REPEAT = 6
P_MASK = 7
P_COUNT = 8
P_BLK_STRIDE = 10
PARAM_NAMES = {
    P_BLOCK_COUNT: "blockCount", P_BLOCK_LEN: "blockLen", P_STRIDE: "stride",
    P_LEFT_PADDING: "leftPadding", P_RIGHT_PADDING: "rightPadding", P_REPEAT: "repeatTime",
    P_MASK: "mask", P_COUNT: "count", P_BLK_STRIDE: "blkStride",
}


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


_STATE_NAMES = ("FREE", "OCCUPIED", "ENQUE", "DEQUE")


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
        state = _STATE_NAMES[a[2]] if 0 <= a[2] < 4 else str(a[2])
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
        return errors.ElementTypeError(f"the two sides of the copy have different element types ({a[0]}-byte and "
                                     f"{a[1]}-byte elements); AscendC's DataCopy/DataCopyPad take one T", **where)
    if code == F_QUE_INDEX:
        return errors.QueueError(f"queue/TBuf index {a[0]} is not one of the {a[1]} buffers this TPipe's "
                                 f"InitBuffer calls created", **where)
    if code == F_EVT_ID:
        return errors.SyncError(f"event id {a[1]} of {evt(a[0])} is outside [0, 8)", **where)
    if code == F_EVT_DOUBLE_SET:
        return errors.SyncError(f"SetFlag<{evt(a[0])}>({a[1]}) while the flag is already set (undefined on the NPU)",
                                **where)
    if code == F_EVT_WAIT_UNSET:
        return errors.SyncError(f"WaitFlag<{evt(a[0])}>({a[1]}) with no matching SetFlag (would hang on the NPU)",
                                **where)
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
