"""Checked modes "init" (reads of UB / workspace bytes nothing wrote) and "sync" (unpaired SetFlag / WaitFlag), and
the mode set ("all" = race + init + sync)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import (
    SYNC_ALL,
    Kernel,
    PipePhase,
    PipeRaceError,
    SyncError,
    UbBuffer,
    UninitializedReadError,
    UnpairedFlagError,
    checked,
    launch,
)
from ascend_sim._jit import global_aicore
from ascend_sim.check import InitWaiver, resolve
from ascend_sim.errors import ConfigError
from ascend_sim.layout import CHECK_OVERLAP, MODE_INIT, MODE_RACE, MODE_STRICT, MODE_SYNC

from .harness import CHIP, run, tbuf

N = 256                                      # fp32 elements of a test tile (1 KiB)
PLAN = [tbuf("x", 4 * N), tbuf("y", 4 * N)]


def gm(n=N):
    src = np.arange(n, dtype=np.float32)
    dst = np.zeros(n, dtype=np.float32)
    return asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0), src, dst


@pytest.mark.parametrize("name,bits", [("race", MODE_RACE), ("strict", MODE_STRICT), ("init", MODE_INIT),
                                       ("sync", MODE_SYNC), ("all", MODE_RACE | MODE_INIT | MODE_SYNC | CHECK_OVERLAP),
                                       ("off", 0)])
def test_every_mode_name_resolves_to_its_bits(name, bits, monkeypatch):
    assert resolve(name) == bits
    with checked(name):
        assert resolve(None) == bits
    monkeypatch.setenv("ASCEND_SIM_CHECK", name)
    assert resolve(None) == bits


# --- "init": UB ----------------------------------------------------------------------------------------------
@global_aicore
def compute_then_copy(c, variant, src, dst):
    """Copy src into x, scale it into y, write y out; variant 1 scales x before the copy-in, variant 2 copies in only
    the first half of x and scales all of it."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    if variant == 1:                                   # reads x before anything wrote it
        asc.muls(c, y, x, 2.0, N)
        asc.sync_pipes(c, asc.V_MTE2)
    asc.data_copy(c, x, asc.gm_at(src, 0), N // 2 if variant == 2 else N)
    asc.sync_pipes(c, asc.MTE2_V)
    asc.muls(c, y, x, 2.0, N)                          # variant 2: the second half of x was never written
    asc.sync_pipes(c, asc.V_MTE3)
    asc.data_copy(c, asc.gm_at(dst, 0), y, N)
    asc.pipe_barrier(c, asc.PIPE_ALL)


@pytest.mark.parametrize("mode", ["init", "all"])
@pytest.mark.parametrize("variant,byte_range", [(1, (0, 4 * N)), (2, (2 * N, 4 * N))],
                         ids=["read-before-copy-in", "read-past-the-copied-half"])
def test_a_ub_read_before_its_copy_in_is_an_uninitialized_read(mode, variant, byte_range):
    s, d, *_ = gm()
    with checked(mode), pytest.raises(UninitializedReadError) as err:
        run([compute_then_copy], PLAN, variant, s, d)
    e = err.value
    assert e.memory == "UB" and e.buffer == "x" and e.byte_range == byte_range and e.core == 0
    assert e.call.startswith("Muls (call #") and "InitBuffer does not initialise" in str(e)


@pytest.mark.parametrize("mode", ["race", "strict", "sync", "off"])
def test_other_modes_do_not_look_for_uninitialized_reads(mode):
    s, d, *_ = gm()
    with checked(mode):
        run([compute_then_copy], PLAN, 1, s, d)


def test_the_clean_kernel_passes_init_and_a_new_tpipe_forgets_what_was_written():
    s, d, src, dst = gm()
    with checked("all"):
        run([compute_then_copy], PLAN, 0, s, d)
    assert np.array_equal(dst, 2 * src)
    # the same stages in two TPipes: the second TPipe's x holds the first one's bytes, but InitBuffer does not
    # initialise, so reading them before its own copy-in is an uninitialised read
    kernel = Kernel("TestOp", "TwoPipes", (PipePhase("one", ("x", "y"), (compute_then_copy,)),
                                           PipePhase("two", ("x", "y"), ((compute_then_copy_at, 1),))))
    plan = [UbBuffer("x", 4 * N, pipe="one"), UbBuffer("y", 4 * N, pipe="one"),
            UbBuffer("x", 4 * N, pipe="two"), UbBuffer("y", 4 * N, pipe="two")]
    launch(kernel, block_dim=1, plan=plan, args=(0, s, d), chip=CHIP, check="race")     # no init: clean
    with pytest.raises(UninitializedReadError, match="'x'"):
        launch(kernel, block_dim=1, plan=plan, args=(0, s, d), chip=CHIP, check="init")


@global_aicore
def compute_then_copy_at(c, variant, src, dst, second_variant):
    """compute_then_copy with the variant the schedule entry gives (the second TPipe's)."""
    compute_then_copy(c, second_variant, src, dst)


def test_an_init_waiver_lets_exactly_its_buffer_pass():
    s, d, *_ = gm()
    waived = Kernel.single_pipe("TestOp", "Waived", (compute_then_copy,), ("x", "y"),
                                waivers=(InitWaiver("x", "test: x's tail is masked off"),))
    report = launch(waived, block_dim=1, plan=PLAN, args=(2, s, d), chip=CHIP, check="all")
    assert report.extra["waived_uninit_reads"] == 1 and report.extra["waived_races"] == 0
    other = Kernel.single_pipe("TestOp", "WaivesY", (compute_then_copy,), ("x", "y"),
                               waivers=(InitWaiver("y", "test: waives the wrong buffer"),))
    with pytest.raises(UninitializedReadError, match="'x'"):
        launch(other, block_dim=1, plan=PLAN, args=(2, s, d), chip=CHIP, check="init")
    typo = Kernel.single_pipe("TestOp", "Typo", (compute_then_copy,), ("x", "y"),
                              waivers=(InitWaiver("z", "no such buffer"),))
    with pytest.raises(ConfigError, match=r"InitWaiver names \['z'\]"):
        launch(typo, block_dim=1, plan=PLAN, args=(0, s, d), chip=CHIP, check="init")


# --- "init": the workspace -----------------------------------------------------------------------------------
@global_aicore
def write_workspace(c, variant, inp, ws, out):
    """Core b writes its N elements of the workspace (variant 1: only the first half; 3: all but the last 8)."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    b = c.block_idx
    asc.data_copy(c, x, asc.gm_at(inp, b * N), N)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.data_copy(c, asc.gm_at(ws, b * N), x, N // 2 if variant == 1 else N - 8 if variant == 3 else N)
    asc.pipe_barrier(c, asc.PIPE_ALL)


@global_aicore
def read_workspace(c, variant, inp, ws, out):
    """After SyncAll, core b reads the other core's share of the workspace (variant 2: before writing its own)."""
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    b = c.block_idx
    asc.data_copy(c, y, asc.gm_at(ws, (1 - b) * N), N)
    asc.sync_pipes(c, asc.MTE2_MTE3)
    asc.data_copy(c, asc.gm_at(out, b * N), y, N)
    asc.pipe_barrier(c, asc.PIPE_ALL)


def _workspace_launch(variant, check, waivers=()):
    inp = np.arange(2 * N, dtype=np.float32)
    workspace = np.empty(2 * N * 4 + 64, dtype=np.uint8)                 # 64 bytes of it nobody uses
    ws = workspace[: 2 * N * 4].view(np.float32)
    out = np.zeros(2 * N, dtype=np.float32)
    stages = (read_workspace,) if variant == 2 else (write_workspace, SYNC_ALL, read_workspace)
    kernel = Kernel("TestOp", "Workspace", (PipePhase("pipe", ("x", "y"), stages),), waivers)
    report = launch(kernel, block_dim=2, plan=PLAN, args=(variant, asc.GlobalTensor(inp, 0, 0),
                                                          asc.GlobalTensor(ws, 1, 0),
                                                 asc.GlobalTensor(out, 2, 0)), chip=CHIP, check=check,
           gm_names=("inp", "workspace", "out"), workspace=workspace, threads=1)
    return inp, out, report


def test_workspace_bytes_another_core_wrote_before_sync_all_are_initialised_and_inputs_always_are():
    inp, out, _ = _workspace_launch(0, "all")
    assert np.array_equal(out, np.concatenate([inp[N:], inp[:N]]))


@pytest.mark.parametrize("variant,core,byte_range", [(1, 0, (3 * 2 * N, 4 * 2 * N)), (2, 0, (4 * N, 8 * N))],
                         ids=["half-written", "never-written"])
def test_a_workspace_read_before_any_core_wrote_it_is_an_uninitialized_read(variant, core, byte_range):
    with pytest.raises(UninitializedReadError) as err:
        _workspace_launch(variant, "init")
    e = err.value
    assert e.memory == "GM" and e.buffer == "workspace" and e.byte_range == byte_range and e.core == core
    assert e.call.startswith("DataCopy(GM->UB)") and "no core wrote in this launch" in str(e)
    _workspace_launch(variant, "race")                   # not a race: only "init" reports it


def test_a_workspace_waiver_lets_only_reads_ending_in_a_short_unwritten_tail_pass():
    """A sort's merge reads each list window rounded up to 32 bytes, past the last list: InitWaiver("workspace",
    tail=32) lets a read pass whose only unwritten bytes are its last 32 or fewer, and nothing else."""
    tail = (InitWaiver("workspace", "test: an aligned read past the data", tail=32),)
    *_, report = _workspace_launch(3, "init", tail)                  # 8 fp32 = 32 unwritten bytes at each end
    assert report.extra["waived_uninit_reads"] == 2                  # one read per core
    with pytest.raises(UninitializedReadError):
        _workspace_launch(3, "init", (InitWaiver("workspace", "test: too short", tail=31),))
    with pytest.raises(UninitializedReadError):
        _workspace_launch(1, "init", tail)                            # 512 unwritten bytes
    with pytest.raises(ConfigError, match="tail"):
        InitWaiver("x", "a UB buffer takes no tail", tail=32)
    with pytest.raises(ConfigError, match="tail"):
        InitWaiver("workspace", "the workspace needs one")


# --- "sync" --------------------------------------------------------------------------------------------------
@global_aicore
def flags(c, variant, src, dst):
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), N)
    asc.set_flag(c, asc.MTE2_MTE3, 3)
    if variant != 1:                                   # 1: the WaitFlag is deleted
        asc.wait_flag(c, asc.MTE2_MTE3, 3 if variant != 2 else 2)      # 2: waits on the wrong id
    asc.data_copy(c, asc.gm_at(dst, 0), x, N)
    if variant == 3:                                   # 3: a second WaitFlag for the one SetFlag
        asc.wait_flag(c, asc.MTE2_MTE3, 3)
    asc.pipe_barrier(c, asc.PIPE_ALL)


@pytest.mark.parametrize("mode", ["sync", "off"])     # ("all" finds the MTE2 -> MTE3 race first)
def test_a_set_flag_whose_wait_flag_is_deleted_is_an_unpaired_flag(mode):
    s, d, *_ = gm()
    with checked(mode), pytest.raises(UnpairedFlagError) as err:
        run([flags], PLAN, 1, s, d)
    e = err.value
    assert isinstance(e, SyncError)
    assert (e.event, e.event_id, e.src_pipe, e.dst_pipe) == ("MTE2_MTE3", 3, "PIPE_MTE2", "PIPE_MTE3")
    assert e.call == "kernel end" and "leaks into the next operator" in str(e)
    if mode == "off":
        assert e.set_call is None                     # the call is known in checked mode "sync" only
    else:
        assert e.set_call == 3 and "SetFlag<MTE2_MTE3>(3) (call #3)" in str(e)      # after TBuf::Get, DataCopy


@pytest.mark.parametrize("mode", ["sync", "off"])
@pytest.mark.parametrize("variant,hint", [(2, r"up for id\(s\) 3: a WaitFlag on the wrong id"),
                                          (3, r"at call #4 already took this flag down")],
                         ids=["wrong-id", "second-wait"])
def test_a_wait_flag_with_no_set_flag_is_an_unpaired_flag(mode, variant, hint):
    s, d, *_ = gm()
    with checked(mode), pytest.raises(UnpairedFlagError) as err:
        run([flags], PLAN, variant, s, d)
    e = err.value
    assert (e.event, e.src_pipe, e.dst_pipe) == ("MTE2_MTE3", "PIPE_MTE2", "PIPE_MTE3")
    assert e.call.startswith("WaitFlag (call #") and "would wait forever" in str(e)
    if variant == 3 and mode == "off":
        assert e.last_wait_call is None               # which WaitFlag lowered it: checked mode "sync" only
        return
    assert re.search(hint, str(e))


@global_aicore
def racy(c, variant, src, dst):
    """No MTE2 -> V sync between the copy-in and the Muls."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), N)
    asc.muls(c, y, x, 2.0, N)
    asc.sync_pipes(c, asc.V_MTE3)
    asc.data_copy(c, asc.gm_at(dst, 0), y, N)
    asc.pipe_barrier(c, asc.PIPE_ALL)


@pytest.mark.parametrize("mode,error", [("all", PipeRaceError), ("race", PipeRaceError), ("init", None),
                                        ("sync", None)])
def test_all_still_finds_races_and_init_or_sync_alone_do_not(mode, error):
    s, d, *_ = gm()
    with checked(mode):
        if error is None:
            run([racy], PLAN, 0, s, d)
            return
        with pytest.raises(error):
            run([racy], PLAN, 0, s, d)
