"""TQue / TQueBind / TBuf calls on a core's queue table (numba).

Buffer states follow AscendC's TBufState machine:

    AllocTensor: FREE -> OCCUPIED          EnQue: OCCUPIED | DEQUE -> ENQUE (at most `depth` queued)
    DeQue:       ENQUE -> DEQUE (FIFO)     FreeTensor: anything but FREE -> FREE

AllocTensor takes the next FREE buffer starting at the queue's cursor (round robin).
Misuse raises QueueError where the NPU would hang or corrupt its event bookkeeping.
Each EnQue/DeQue/FreeTensor/AllocTensor also stands for the hardware event the
framework inserts (MTE2_V / V_MTE3 / MTE2_MTE3 and their reverse), which the report counts.

`T` arguments are typed views of the whole UB (asc.ub_f32(c), asc.ub_like(c, gm), ...) and
choose the element type of the returned LocalTensor, like AscendC's template argument.
The queue table row of queue q starts at state[QUE_BASE + q * QUE_COLS] (columns in layout.py).
"""
from __future__ import annotations

from . import timeline as tl
from ._jit import aicore
from ._memory import ub_view
from ._outline import outline, outline_int
from .faults import fault, issue
from .layout import (
    CALL_ALLOC_TENSOR,
    CALL_DEQUE,
    CALL_ENQUE,
    CALL_FREE_TENSOR,
    CALL_TBUF_GET,
    CNT_EVENTS,
    DEQUE,
    ENQUE,
    F_QUE_DEPTH,
    F_QUE_EMPTY,
    F_QUE_FOREIGN,
    F_QUE_INDEX,
    F_QUE_KIND,
    F_QUE_NO_FREE,
    F_QUE_STATE,
    F_UB_OOB,
    FREE,
    KIND_TBUF,
    OCCUPIED,
    PIPE_QUEUES,
    Q_BASE,
    Q_CURSOR,
    Q_DEPTH,
    Q_ENQ_SEQ,
    Q_KIND,
    Q_LEN,
    Q_NUM,
    Q_SEQ,
    Q_STATE,
    Q_USED,
    QUE_BASE,
    QUE_COLS,
)
from .local import ub_offset


@aicore
def _row(q):
    return QUE_BASE + q * QUE_COLS


@aicore
def _buffer_view(c, q, i, T):
    r = _row(q)
    size = T.itemsize
    start = (c.state[r + Q_BASE] + i * c.state[r + Q_LEN]) // size
    return ub_view(c.ub, T, start * size, c.state[r + Q_LEN] // size)


@aicore
def _exists(c, q, call):
    """q names one of the live TPipe's buffers (a kernel constant past the InitBuffer list would
    otherwise index outside the queue table)."""
    if q < 0 or q >= c.state[PIPE_QUEUES]:
        fault(c, F_QUE_INDEX, call, q, c.state[PIPE_QUEUES])
        return False
    return True


@aicore
def _is_queue(c, q, call):
    if not _exists(c, q, call):
        return False
    kind = c.state[_row(q) + Q_KIND]
    if kind == KIND_TBUF:
        fault(c, F_QUE_KIND, call, q, kind)
        return False
    return True


@aicore
def _buffer_index(c, q, t, call):
    """Index of the queue buffer t lies in, or -1 (fault recorded)."""
    r = _row(q)
    off = ub_offset(c, t, call)
    if off < 0:
        return -1
    start = c.state[r + Q_BASE]
    length = c.state[r + Q_LEN]
    for i in range(c.state[r + Q_NUM]):   # at most 8 buffers: cheaper than an integer division
        if start <= off < start + length:
            return i
        start += length
    fault(c, F_QUE_FOREIGN, call, q, off)
    return -1


@outline_int
def _alloc_index(c, q):
    """AllocTensor's state change; the buffer index its LocalTensor views, or -1 for an empty one."""
    if not issue(c, CALL_ALLOC_TENSOR) or not _is_queue(c, q, CALL_ALLOC_TENSOR):
        return -1
    r = _row(q)
    num = c.state[r + Q_NUM]
    for _ in range(num):
        i = c.state[r + Q_CURSOR]
        c.state[r + Q_CURSOR] = i + 1 if i + 1 < num else 0
        if c.state[r + Q_STATE + i] == FREE:
            c.state[r + Q_STATE + i] = OCCUPIED
            c.state[CNT_EVENTS] += 1  # waits for the free event of this buffer
            tl.alloc_tensor(c, q, r, i)
            return i
    fault(c, F_QUE_NO_FREE, CALL_ALLOC_TENSOR, q, num)
    return 0


@aicore
def _view_or_empty(c, q, i, T):
    return ub_view(c.ub, T, 0, 0) if i < 0 else _buffer_view(c, q, i, T)


@aicore
def alloc_tensor(c, q, T):
    """TQue::AllocTensor<T>(): the next FREE buffer as a LocalTensor (contents undefined)."""
    return _view_or_empty(c, q, _alloc_index(c, q), T)


@outline(as_bytes=("t",))
def en_que(c, q, t):
    """TQue::EnQue(t): hand the buffer to the consumer pipe (sets the forward event)."""
    if not issue(c, CALL_ENQUE) or not _is_queue(c, q, CALL_ENQUE):
        return
    r = _row(q)
    i = _buffer_index(c, q, t, CALL_ENQUE)
    if i < 0:
        return
    state = c.state[r + Q_STATE + i]
    if state != OCCUPIED and state != DEQUE:
        fault(c, F_QUE_STATE, CALL_ENQUE, q, i, state)
        return
    if c.state[r + Q_USED] >= c.state[r + Q_DEPTH]:
        fault(c, F_QUE_DEPTH, CALL_ENQUE, q, c.state[r + Q_USED], c.state[r + Q_DEPTH])
        return
    c.state[r + Q_STATE + i] = ENQUE
    c.state[r + Q_ENQ_SEQ + i] = c.state[r + Q_SEQ]
    c.state[r + Q_SEQ] += 1
    c.state[r + Q_USED] += 1
    c.state[CNT_EVENTS] += 1
    tl.en_que(c, q, r, i)


@outline_int
def _de_que_index(c, q):
    """DeQue's state change; the buffer index its LocalTensor views, or -1 for an empty one."""
    if not issue(c, CALL_DEQUE) or not _is_queue(c, q, CALL_DEQUE):
        return -1
    r = _row(q)
    best = -1
    for i in range(c.state[r + Q_NUM]):
        if c.state[r + Q_STATE + i] == ENQUE and (
                best < 0 or c.state[r + Q_ENQ_SEQ + i] < c.state[r + Q_ENQ_SEQ + best]):
            best = i
    if best < 0:
        fault(c, F_QUE_EMPTY, CALL_DEQUE, q)
        return 0
    c.state[r + Q_STATE + best] = DEQUE
    c.state[r + Q_USED] -= 1
    c.state[CNT_EVENTS] += 1
    tl.de_que(c, q, r, best)
    return best


@aicore
def de_que(c, q, T):
    """TQue::DeQue<T>(): the oldest enqueued buffer (waits on the forward event)."""
    return _view_or_empty(c, q, _de_que_index(c, q), T)


@outline(as_bytes=("t",))
def free_tensor(c, q, t):
    """TQue::FreeTensor(t): give the buffer back (sets the free event AllocTensor waits for)."""
    if not issue(c, CALL_FREE_TENSOR) or not _is_queue(c, q, CALL_FREE_TENSOR):
        return
    r = _row(q)
    i = _buffer_index(c, q, t, CALL_FREE_TENSOR)
    if i < 0:
        return
    state = c.state[r + Q_STATE + i]
    if state == FREE:
        fault(c, F_QUE_STATE, CALL_FREE_TENSOR, q, i, state)
        return
    if state == ENQUE:
        c.state[r + Q_USED] -= 1
    c.state[r + Q_STATE + i] = FREE
    c.state[CNT_EVENTS] += 1
    tl.free_tensor(c, q, r, i)


@outline_int
def _tbuf_index(c, q):
    """TBuf::Get's checks; 0 (the TBuf's one buffer) or -1 for an empty LocalTensor."""
    if not issue(c, CALL_TBUF_GET) or not _exists(c, q, CALL_TBUF_GET):
        return -1
    tl.scalar(c, CALL_TBUF_GET, 0, q)
    kind = c.state[_row(q) + Q_KIND]
    if kind != KIND_TBUF:
        fault(c, F_QUE_KIND, CALL_TBUF_GET, q, kind)
    return 0


@aicore
def tbuf_get(c, q, T):
    """TBuf::Get<T>(): the whole TBuf as a LocalTensor (no state, no events)."""
    return _view_or_empty(c, q, _tbuf_index(c, q), T)


@aicore
def tbuf_get_with_offset(c, q, T, count_elems, offset_bytes):
    """TBuf::GetWithOffset<T>(count, offset): count elements starting offset bytes into the TBuf."""
    if not issue(c, CALL_TBUF_GET) or not _exists(c, q, CALL_TBUF_GET):
        return T[0:0]
    tl.scalar(c, CALL_TBUF_GET, 0, q)
    r = _row(q)
    base = c.state[r + Q_BASE]
    size = T.itemsize
    if c.state[r + Q_KIND] != KIND_TBUF:
        fault(c, F_QUE_KIND, CALL_TBUF_GET, q, c.state[r + Q_KIND])
        return T[base // size: base // size]
    length = c.state[r + Q_LEN]
    if offset_bytes < 0 or count_elems < 0 or offset_bytes + count_elems * size > length:
        fault(c, F_UB_OOB, CALL_TBUF_GET, base + offset_bytes, count_elems * size, length)
        return T[base // size: base // size]
    start = (base + offset_bytes) // size
    return T[start: start + count_elems]
