"""TPipe plans, the TQue state machine and event protocol: legal sequences work, every misuse raises."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import ElementTypeError, QueueError, SyncError, UbBuffer, UBOverflowError, plan_pipe
from ascend_sim._jit import global_aicore

from .harness import que, run, tbuf


@global_aicore
def queue_script(c, script):
    """Run a queue script: rows (op, queue, arg); ops 1 alloc, 2 enque, 3 deque, 4 free (arg = slot of a
    tensor variable 0..3), 5 tbuf_get, 6 set_flag(queue = event, arg = id), 7 wait_flag, 8 pipe_barrier(arg)."""
    T = asc.ub_f32(c)
    slots = (asc.alloc_tensor(c, 0, T), T[0:0], T[0:0], T[0:0])
    asc.free_tensor(c, 0, slots[0])
    s0, s1, s2, s3 = slots
    for k in range(script.shape[0]):
        op, q, arg = script[k, 0], script[k, 1], script[k, 2]
        if op == 1:
            t = asc.alloc_tensor(c, q, T)
        elif op == 3:
            t = asc.de_que(c, q, T)
        elif op == 5:
            t = asc.tbuf_get(c, q, T)
        else:
            t = s0 if arg == 0 else s1 if arg == 1 else s2 if arg == 2 else s3
        if op == 1 or op == 3 or op == 5:
            if arg == 0:
                s0 = t
            elif arg == 1:
                s1 = t
            elif arg == 2:
                s2 = t
            else:
                s3 = t
        elif op == 2:
            asc.en_que(c, q, t)
        elif op == 4:
            asc.free_tensor(c, q, t)
        elif op == 6:
            asc.set_flag(c, q, arg)
        elif op == 7:
            asc.wait_flag(c, q, arg)
        elif op == 8:
            asc.pipe_barrier(c, arg)


ALLOC, ENQUE, DEQUE, FREE, TBUF, SET, WAIT, BARRIER = 1, 2, 3, 4, 5, 6, 7, 8
PLAN = [que("inQue", 256, num=2, position="VECIN", depth=1), que("deepQue", 256, num=2, position="VECOUT", depth=2),
        tbuf("tmpBuf", 128)]


def _run(rows, plan=PLAN):
    return run([queue_script], plan, np.array(rows, dtype=np.int64).reshape(-1, 3))


def test_double_buffered_pipeline_is_legal():
    rows = []
    for _ in range(3):  # copy-in / compute / copy-out ping-pong on both queues
        rows += [(ALLOC, 0, 0), (ENQUE, 0, 0), (DEQUE, 0, 1), (ALLOC, 1, 2), (ENQUE, 1, 2), (FREE, 0, 1),
                 (DEQUE, 1, 3), (ENQUE, 1, 3), (DEQUE, 1, 3), (FREE, 1, 3)]
    rows += [(TBUF, 2, 0), (SET, 1, 4), (WAIT, 1, 4), (BARRIER, 0, 1)]
    report = _run(rows)
    assert report.total.events > 0 and report.total.pipe_barriers == 1


def test_alloc_then_free_without_enque_is_legal():
    _run([(ALLOC, 0, 0), (FREE, 0, 0), (ALLOC, 0, 1), (FREE, 0, 1)])


def test_alloc_takes_buffers_round_robin():
    @global_aicore
    def offsets(c, out):
        T = asc.ub_f32(c)
        for i in range(4):
            t = asc.alloc_tensor(c, 0, T)
            out[i] = asc.ub_offset(c, t, 0)
            asc.free_tensor(c, 0, t)
    out = np.zeros(4, dtype=np.int64)
    run([offsets], PLAN, out)
    assert list(out) == [0, 256, 0, 256]


MISUSE = {
    # id: (script rows, error type, message fragment, call)
    "deque-on-empty-queue": ([(DEQUE, 0, 0)], QueueError, "nothing enqueued", "DeQue"),
    "enque-beyond-depth": ([(ALLOC, 0, 0), (ALLOC, 0, 1), (ENQUE, 0, 0), (ENQUE, 0, 1)], QueueError, "depth",
                           "EnQue"),
    "enque-twice-same-tensor": ([(ALLOC, 1, 0), (ENQUE, 1, 0), (ENQUE, 1, 0)], QueueError, "ENQUE", "EnQue"),
    "free-twice": ([(ALLOC, 0, 0), (FREE, 0, 0), (FREE, 0, 0)], QueueError, "FREE", "FreeTensor"),
    "alloc-with-no-free-buffer": ([(ALLOC, 0, 0), (ALLOC, 0, 1), (ALLOC, 0, 2)], QueueError, "in use",
                                  "AllocTensor"),
    "free-into-another-queue": ([(ALLOC, 0, 0), (FREE, 1, 0)], QueueError, "does not belong", "FreeTensor"),
    "tbuf-used-as-queue": ([(ALLOC, 2, 0)], QueueError, "TBuf", "AllocTensor"),
    "queue-used-as-tbuf": ([(TBUF, 0, 0)], QueueError, "TQue", "TBuf::Get"),
    "set-flag-twice": ([(SET, 0, 3), (SET, 0, 3)], SyncError, "already set", "SetFlag"),
    "wait-without-set": ([(WAIT, 2, 1)], SyncError, "would wait forever", "WaitFlag"),
    "event-id-out-of-range": ([(SET, 0, 8)], SyncError, "outside [0, 8)", "SetFlag"),
    "pipe-barrier-on-scalar-pipe": ([(BARRIER, 0, 0)], SyncError, "PIPE_S", "PipeBarrier"),
    # a queue id past the InitBuffer list must fault, not index beyond the queue table
    "alloc-on-queue-past-the-plan": ([(ALLOC, 3, 0)], QueueError, "not one of the 3 buffers", "AllocTensor"),
    "deque-on-negative-queue": ([(DEQUE, -1, 0)], QueueError, "not one of the 3 buffers", "DeQue"),
    "tbuf-past-the-plan": ([(TBUF, 40, 0)], QueueError, "index 40", "TBuf::Get"),
    "enque-on-queue-past-the-plan": ([(ALLOC, 0, 0), (ENQUE, 9, 0)], QueueError, "index 9", "EnQue"),
}


@pytest.mark.parametrize("case", MISUSE)
def test_misuse_raises_with_location(case):
    rows, err, fragment, call = MISUSE[case]
    with pytest.raises(err) as info:
        _run(rows)
    e = info.value
    assert fragment in str(e), str(e)
    assert e.core == 0 and e.op == "TestOp" and e.tiling_key == 7
    assert e.call.startswith(call)


def test_flag_left_set_at_kernel_end_is_an_error():
    with pytest.raises(SyncError, match="took it down by the end of the kernel") as info:
        _run([(SET, 5, 2)])
    assert info.value.call == "kernel end"


def test_ub_overflow_lists_the_whole_plan():
    plan = [UbBuffer("a", 100000, 1), UbBuffer("b", 60000, 1), UbBuffer("c", 50000, 2, "TQue", "VECIN", 1)]
    with pytest.raises(UBOverflowError) as info:
        plan_pipe(plan, 196608, op="TestOp", tiling_key=3)
    e = info.value
    assert [row[0] for row in e.table] == ["a", "b", "c"]
    assert e.table[1][3] == 60000 and e.table[2][2] == 2 and e.table[2][5] == 100000 + 60000 + 2 * 50016
    assert "exceeds UB" in e.detail and "'c' ends at byte" in str(e) and e.capacity_bytes == 196608


def test_initbuffer_lengths_round_up_to_32_bytes():
    plan = plan_pipe([UbBuffer("x", 33, 2), UbBuffer("y", 1)], 1024)
    assert plan.offsets == (0, 128) and plan.used_bytes == 160


def test_too_many_buffers_at_one_position():
    plan = [UbBuffer(f"q{i}", 32, 2, "TQue", "VECIN", 1) for i in range(5)]
    with pytest.raises(QueueError, match="event ids"):
        plan_pipe(plan, 196608)


def test_fetch_event_id_of_unknown_event_faults():
    @global_aicore
    def fetch(c, evt):
        asc.fetch_event_id(c, evt)
    with pytest.raises(SyncError, match="event 99") as info:
        run([fetch], PLAN, 99)
    assert info.value.call.startswith("TPipe::FetchEventID")


@global_aicore
def fetch_with_ids_taken(c, evt, taken, out):
    """Set the flags of ids 0 .. taken-1 of `evt`, fetch an id, then wait for every flag set."""
    for i in range(taken):
        asc.set_flag(c, evt, i)
    out[0] = asc.fetch_event_id(c, evt)
    for i in range(taken):
        asc.wait_flag(c, evt, i)


@pytest.mark.parametrize("taken", [0, 3, 7], ids=lambda t: f"{t}taken")
def test_fetch_event_id_gives_the_lowest_free_id(taken):
    out = np.full(1, -1, np.int64)
    run([fetch_with_ids_taken], PLAN, asc.S_V, taken, out)
    assert out[0] == taken


def test_fetch_event_id_with_every_id_taken_faults():
    """All eight flags of S_V are up: there is no id to hand out (id 0's SetFlag would set a set flag)."""
    out = np.full(1, -1, np.int64)
    with pytest.raises(SyncError, match="FetchEventID<S_V>: all 8 event ids") as info:
        run([fetch_with_ids_taken], PLAN, asc.S_V, 8, out)
    e = info.value
    assert e.core == 0 and e.op == "TestOp" and e.tiling_key == 7
    assert e.call.startswith("TPipe::FetchEventID")


def test_copy_between_different_element_types_faults_when_executed():
    """A LocalTensor<float> / GlobalTensor<half> pair compiles (it may sit in a branch AscendC drops with
    `if constexpr`) but faults the moment it runs."""
    @global_aicore
    def mixed(c, gm, execute):
        t = asc.alloc_tensor(c, 0, asc.ub_f32(c))
        if execute:
            asc.data_copy_pad(c, t, gm, asc.DataCopyExtParams(1, 64, 0, 0), asc.NO_PAD)
        asc.free_tensor(c, 0, t)
    g = asc.GlobalTensor(np.zeros(64, dtype=np.uint16), 0, 0)
    run([mixed], PLAN, g, False)
    with pytest.raises(ElementTypeError, match="different element types") as info:
        run([mixed], PLAN, g, True)
    assert info.value.call.startswith("DataCopyPad(GM->UB)")
