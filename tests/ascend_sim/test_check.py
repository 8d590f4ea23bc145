"""Checked mode: pipe races between the pipes of a core, tensor ownership of queue buffers, and the switch."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import ConfigError, PipeRaceError, QueueError, checked
from ascend_sim._jit import global_aicore

from .harness import que, run, tbuf

N = 1024                                     # fp32 elements of a test tile (4 KiB)


def gm(n=N):
    src = np.arange(n, dtype=np.float32)
    dst = np.zeros(n, dtype=np.float32)
    return asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0), src, dst


@global_aicore
def copy_then_compute(c, variant, src, dst):
    """MTE2 fills x, V scales it into y, MTE3 writes y; `variant` drops or keeps the syncs."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), N)
    if variant != 1:                                       # 1: no MTE2 -> V sync (RAW)
        asc.sync_pipes(c, asc.MTE2_V)
    asc.muls(c, y, x, 2.0, N)
    if variant == 2:                                       # 2: refill x while V may still read it (WAR)
        asc.data_copy(c, x, asc.gm_at(src, 0), N)
    else:
        asc.sync_pipes(c, asc.V_MTE2)
        asc.data_copy(c, x, asc.gm_at(src, 0), N)
    if variant != 3:                                       # 3: no V -> MTE3 sync (RAW on y)
        asc.sync_pipes(c, asc.V_MTE3)
    asc.data_copy(c, asc.gm_at(dst, 0), y, N)
    asc.pipe_barrier(c, asc.PIPE_ALL)


PLAN = [tbuf("x", 4 * N), tbuf("y", 4 * N)]


@pytest.mark.parametrize("variant,kind,first,second,tile", [
    (1, "RAW", ("PIPE_MTE2", "DataCopy(GM->UB)"), ("PIPE_V", "Muls"), 0),
    (2, "WAR", ("PIPE_V", "Muls"), ("PIPE_MTE2", "DataCopy(GM->UB)"), 0),
    (3, "RAW", ("PIPE_V", "Muls"), ("PIPE_MTE3", "DataCopy(UB->GM)"), 1),
], ids=["missing-MTE2_V", "missing-V_MTE2", "missing-V_MTE3"])
def test_a_missing_sync_is_a_pipe_race_naming_both_calls(variant, kind, first, second, tile):
    s, d, *_ = gm()
    with checked("race"), pytest.raises(PipeRaceError) as err:
        run([copy_then_compute], PLAN, variant, s, d)
    e = err.value
    assert e.kind == kind and e.memory == "UB" and e.core == 0
    assert (e.first["pipe"], e.first["call"]) == first and (e.second["pipe"], e.second["call"]) == second
    assert e.first["call_index"] < e.second["call_index"]
    assert f"call #{e.second['call_index']}" in e.call
    assert e.byte_range == (tile * 4 * N, (tile + 1) * 4 * N)         # the whole tile the two calls share
    assert kind in str(e) and "nothing ordering the two" in str(e)


def test_the_synced_kernel_is_clean_and_computes_the_same():
    s, d, src, dst = gm()
    run([copy_then_compute], PLAN, 0, s, d)
    plain = dst.copy()
    with checked("race"):
        run([copy_then_compute], PLAN, 0, s, d)
    assert np.array_equal(dst, plain) and np.array_equal(dst, 2 * src)
    # without checked mode the racy kernel runs and computes the same numbers: the race is invisible
    run([copy_then_compute], PLAN, 1, s, d)
    assert np.array_equal(dst, plain)


@global_aicore
def vector_chain(c, barrier, src, dst):
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.duplicate(c, x, 1.0, N)
    if barrier:
        asc.pipe_barrier(c, asc.PIPE_V)
    asc.muls(c, y, x, 3.0, N)                      # reads what the Duplicate wrote
    asc.sync_pipes(c, asc.V_MTE3)
    asc.data_copy(c, asc.gm_at(dst, 0), y, N)


@pytest.mark.parametrize("barrier", [True, False], ids=["PipeBarrier", "no-PipeBarrier"])
def test_strict_mode_asks_for_a_pipe_barrier_between_dependent_vector_instructions(barrier):
    s, d, *_ = gm()
    with checked("race"):
        run([vector_chain], PLAN, barrier, s, d)                 # "race" orders PIPE_V with itself
    if barrier:
        with checked("strict"):
            run([vector_chain], PLAN, barrier, s, d)
        return
    with checked("strict"), pytest.raises(PipeRaceError, match=r"RAW race .*PIPE_V Duplicate .*PIPE_V Muls"
                                                               r".*PipeBarrier<PIPE_V>"):
        run([vector_chain], PLAN, barrier, s, d)


@global_aicore
def gm_round_trip(c, sync, src, dst):
    """Write GM with MTE3, read it back with a scalar GetValue."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    asc.duplicate(c, x, 5.0, N)
    asc.sync_pipes(c, asc.V_MTE3)
    asc.data_copy(c, asc.gm_at(dst, 0), x, N)
    if sync:
        asc.sync_pipes(c, asc.MTE3_S)
    v = asc.get_value(c, dst, 7)
    asc.set_value(c, src, 0, v)


@pytest.mark.parametrize("sync", [True, False], ids=["MTE3_S", "no-sync"])
def test_a_gm_read_back_needs_the_writing_pipe_to_be_done(sync):
    s, d, src, _ = gm()
    if sync:
        with checked("race"):
            run([gm_round_trip], PLAN, sync, s, d)
        assert src[0] == 5.0
        return
    with checked("race"), pytest.raises(PipeRaceError) as err:
        run([gm_round_trip], PLAN, sync, s, d)
    e = err.value
    assert e.memory == "GM" and e.kind == "RAW"
    assert (e.first["pipe"], e.second["pipe"], e.second["call"]) == ("PIPE_MTE3", "PIPE_S", "GlobalTensor::GetValue")


@global_aicore
def queue_misuse(c, how, src, dst):
    """0: correct VECIN use; 1: Muls after FreeTensor; 2: Muls on an enqueued tensor; 3: a buffer never allocated."""
    F = asc.ub_f32(c)
    y = asc.tbuf_get(c, 1, F)
    x = asc.alloc_tensor(c, 0, F)
    asc.data_copy(c, x, asc.gm_at(src, 0), N)
    asc.en_que(c, 0, x)
    if how == 2:
        asc.muls(c, y, x, 2.0, N)
    x = asc.de_que(c, 0, F)
    if how == 1:
        asc.free_tensor(c, 0, x)
        asc.muls(c, y, x, 2.0, N)
        return
    if how == 3:
        other = F[N: 2 * N]                           # buffer 1 of the queue, handed out by no AllocTensor
        asc.muls(c, y, other, 2.0, N)
    asc.muls(c, y, x, 2.0, N)
    asc.free_tensor(c, 0, x)


@pytest.mark.parametrize("how,fragment", [(1, "after its FreeTensor (call #"), (2, "while it is enqueued"),
                                          (3, "before any AllocTensor")],
                         ids=["use-after-free", "use-while-enqueued", "use-before-alloc"])
def test_tensor_ownership_of_queue_buffers(how, fragment):
    s, d, *_ = gm()
    plan = [que("inQueue", 4 * N, num=2), tbuf("y", 4 * N)]
    with checked("race"):
        run([queue_misuse], plan, 0, s, d)
    with checked("race"), pytest.raises(QueueError, match="inQueue") as err:
        run([queue_misuse], plan, how, s, d)
    assert fragment in str(err.value) and "Muls" in err.value.call


def test_the_switch_env_and_argument(monkeypatch):
    s, d, *_ = gm()
    monkeypatch.setenv("ASCEND_SIM_CHECK", "race")
    with pytest.raises(PipeRaceError):
        run([copy_then_compute], PLAN, 1, s, d)
    with checked("off"):                                          # a block overrides the environment
        run([copy_then_compute], PLAN, 1, s, d)
    monkeypatch.setenv("ASCEND_SIM_CHECK", "sometimes")
    with pytest.raises(ConfigError, match="ASCEND_SIM_CHECK"):
        run([copy_then_compute], PLAN, 0, s, d)
    monkeypatch.delenv("ASCEND_SIM_CHECK")
    with pytest.raises(ConfigError, match="'race', 'strict', 'init', 'sync', 'all' or 'off'"):
        with checked("everything"):
            pass


def test_first_checked_launches_from_several_threads_at_once():
    """The checker's entries compile (or load) on the first checked launch of a process: threads that get there
    together must all run checked, each with a correct result. A fresh interpreter, so nothing is loaded yet."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import sys, threading, numpy as np
        from ops import example_add
        assert "ascend_sim._check_entries" not in sys.modules
        x = np.arange(70000, dtype=np.float32); y = np.ones_like(x)
        seen = []
        def one(k):
            z = example_add.add(x, y + k, check="race")
            seen.append(bool(np.array_equal(z, x + y + k)))
        threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
        [t.start() for t in threads]; [t.join() for t in threads]
        assert "ascend_sim._check_entries" in sys.modules
        print(seen)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[True, True, True, True]"
