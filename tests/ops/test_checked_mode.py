"""Checked mode over the shipped kernels: every demo kernel runs clean, and test copies of shipped kernels
with one sync taken out (a WaitFlag, an EnQue / DeQue pair, a PipeBarrier<PIPE_V>, a FreeTensor moved
before the last use) are each caught with the right error."""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import os
import sys

import numpy as np
import pytest

from ascend_sim import PipeRaceError, QueueError, UninitializedReadError, checked
from ops.cli import OPS, demo_cases, prepare_op, run_op
from tests.ops.demo_labels import demo_params
from tiling import get_soc

SOCS = ("ascend910b", "ascend950")
CASES, CASE_IDS = demo_params(SOCS)


@functools.lru_cache(maxsize=None)
def _cases(soc: str):
    return demo_cases(get_soc(soc))


def _finding(case):
    """None if the case runs clean in checked mode "all", else (error, kind, first pipe and call, second pipe and call)
    (an uninitialised read: the memory, the buffer and the call)."""
    try:
        with checked("all"):        # races, uninitialised reads, unpaired flags
            facts = run_op(OPS[case.op], case.args, case.soc, check=True)
    except UninitializedReadError as e:
        return ("UninitializedReadError", e.memory, e.buffer, e.call.split(" (")[0])
    except PipeRaceError as e:
        return ("PipeRaceError", e.kind, e.first["pipe"], e.first["call"], e.second["pipe"], e.second["call"])
    except QueueError as e:
        return ("QueueError", str(e).split("] ", 1)[1].split(":")[0].split(" (call")[0], e.call.split(" (")[0])
    assert facts["exact"], f"{case.op} {case.label}: checked mode changed the result"
    return None


# Races checked mode reports in the shipped kernels: none. The ones the real kernels have are waived in the
# kernels (RaceWaiver, PipePhase.waived_queues) and listed in docs/guides/checked-mode.md; this table is where a
# new finding would go while it is traced against the original.
EXPECTED: dict = {}


def test_waived_races_of_the_real_kernel_are_counted():
    case = _case(UWRMG_OP, "key 1 ")
    with checked("race"):
        facts = run_op(OPS[case.op], case.args, case.soc, check=True)
    assert facts["exact"] and facts["report"].extra["waived_races"] > 0


@pytest.mark.parametrize("soc,k", CASES, ids=CASE_IDS)
def test_every_shipped_kernel_in_checked_mode(soc, k):
    case = _cases(soc)[k]
    found = _finding(case)
    if os.environ.get("ASCEND_SIM_FINDINGS"):                  # collects the table below: one line per case
        with open(os.environ["ASCEND_SIM_FINDINGS"], "a") as f:
            f.write(f"    ({soc!r}, {case.op!r}, {case.label!r}): {found!r},\n")
    assert found == EXPECTED.get((soc, case.op, case.label)), (soc, case.op, case.label, found)


# --- mutants ------------------------------------------------------------------------------------------------
def _mutant(module, old: str, new: str, tag: str, tmp_path):
    """A copy of `module` with the one occurrence of `old` replaced by `new`, imported under the same package
    (its kernels compile from the copy's file)."""
    source = inspect.getsource(module)
    assert source.count(old) == 1, f"the mutation site is not unique in {module.__name__}"
    name = f"{module.__name__}_mutant_{tag}"
    path = tmp_path / f"{name.rsplit('.', 1)[1]}.py"
    path.write_text(source.replace(old, new))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _run_with_kernel(case, kernel, check):
    adapter = OPS[case.op]
    _, _, size, executor = prepare_op(adapter, case.args, case.soc)
    target = executor
    if not hasattr(target, "kernel"):                 # a composite: the operator's own kernel step
        target = next(s.executor for s in executor.steps if hasattr(s, "executor"))
    target.kernel = kernel
    with checked(check):
        adapter.run(np.empty(size, dtype=np.uint8), size, executor)


UWRMG_OP = "moe_token_unpermute_with_routing_map_grad"


def _case(op: str, label_part: str, soc="ascend910b"):
    return next(c for c in _cases(soc) if c.op == op and label_part in c.label)


UWRMG = "moe_token_unpermute_with_routing_map_grad"


def test_mutant_without_a_wait_flag_is_a_pipe_race(tmp_path):
    from ops.unpermute_with_routing_map_grad import kernel
    old = ("                asc.set_flag(c, asc.MTE2_V, event_unpermute)\n"
           "                asc.wait_flag(c, asc.MTE2_V, event_unpermute)\n")
    new = ("                asc.set_flag(c, asc.MTE2_V, event_unpermute)\n"
           "                pass   # mutant: WaitFlag<MTE2_V> removed\n")
    mod = _mutant(kernel, old, new, "no_wait", tmp_path)
    case = _case(UWRMG, "key 1 ")
    with pytest.raises(PipeRaceError) as err:
        _run_with_kernel(case, mod.KERNELS[1], "race")
    e = err.value
    assert e.kind == "RAW" and e.first["pipe"] == "PIPE_MTE2" and e.second["pipe"] == "PIPE_V"
    assert e.first["call"] == "DataCopyPad(GM->UB)" and e.second["call"] == "Cast"


def test_mutant_without_enque_deque_is_a_pipe_race(tmp_path):
    from ops.unpermute_with_routing_map_grad import kernel
    old = ("            asc.en_que(c, PAD_FALSE_IN_OUT_QUE, in_out_local)\n"
           "            in_out_local = asc.de_que(c, PAD_FALSE_IN_OUT_QUE, T)\n")
    mod = _mutant(kernel, old, "            pass   # mutant: EnQue / DeQue removed\n", "no_queue", tmp_path)
    case = _case(UWRMG, "key 0 ")
    with pytest.raises(PipeRaceError) as err:
        _run_with_kernel(case, mod.KERNELS[0], "race")
    e = err.value
    assert e.kind == "RAW" and (e.first["pipe"], e.second["pipe"]) == ("PIPE_MTE2", "PIPE_MTE3")


def test_mutant_with_free_tensor_before_the_last_use_is_a_queue_error(tmp_path):
    from ops.unpermute_with_routing_map_grad import kernel
    old = ("            asc.data_copy_pad(c, asc.gm_at(gm.permuted_tokens_grad, "
           "permute_token_id * td.hidden_size + h_off),\n"
           "                              in_out_local, copy_params)\n"
           "            asc.free_tensor(c, PAD_FALSE_IN_OUT_QUE, in_out_local)\n")
    new = ("            asc.free_tensor(c, PAD_FALSE_IN_OUT_QUE, in_out_local)   # mutant: freed before its last use\n"
           "            asc.data_copy_pad(c, asc.gm_at(gm.permuted_tokens_grad, "
           "permute_token_id * td.hidden_size + h_off),\n"
           "                              in_out_local, copy_params)\n")
    mod = _mutant(kernel, old, new, "early_free", tmp_path)
    case = _case(UWRMG, "key 0 ")
    with pytest.raises(QueueError, match="padFalseInOutque.*after its FreeTensor") as err:
        _run_with_kernel(case, mod.KERNELS[0], "race")
    assert "DataCopyPad(UB->GM)" in err.value.call


def _swap_stage(kernel, old, new):
    """`kernel` with every schedule entry `old` (a stage function) replaced by `new`."""
    phases = []
    for ph in kernel.phases:
        schedule = tuple((new if e is old else e) if not isinstance(e, tuple) else
                         tuple(new if x is old else x for x in e) for e in ph.schedule)
        phases.append(dataclasses.replace(ph, schedule=schedule))
    return dataclasses.replace(kernel, phases=tuple(phases))


def test_mutant_without_a_pipe_barrier_is_a_pipe_race(tmp_path):
    """Kernel G casts the bf16 probs to fp32 and reads them with GetValue after a PipeBarrier<PIPE_V>: without the
    barrier the scalar unit may read before the vector pipe has written."""
    from ops.common import unpermute_gather
    old = ("            asc.free_tensor(c, probs_inque, temp_probs_tensor)\n"
           "            asc.pipe_barrier(c, asc.PIPE_V)\n")
    new = ("            asc.free_tensor(c, probs_inque, temp_probs_tensor)\n"
           "            pass   # mutant: PipeBarrier<PIPE_V> removed\n")
    mod = _mutant(unpermute_gather, old, new, "no_barrier", tmp_path)
    case = _case("moe_token_unpermute", "key 1 probs")
    original = _kernel_of(case)
    _run_with_kernel(case, original, "race")                      # the shipped kernel is clean
    with pytest.raises(PipeRaceError) as err:
        _run_with_kernel(case, _swap_stage(original, unpermute_gather.gather_process, mod.gather_process), "race")
    e = err.value
    assert e.kind == "RAW" and (e.first["pipe"], e.first["call"]) == ("PIPE_V", "Cast")
    assert (e.second["pipe"], e.second["call"]) == ("PIPE_S", "LocalTensor::GetValue")


def _kernel_of(case):
    _, _, _, executor = prepare_op(OPS[case.op], case.args, case.soc)
    target = executor if hasattr(executor, "kernel") else next(s.executor for s in executor.steps
                                                              if hasattr(s, "executor"))
    return target.kernel


def test_a_bad_check_value_on_an_aclnn_call_is_refused_before_anything_runs():
    """PermuteWithRoutingMapGrad is a composite whose host steps (ZerosLike) run before its first kernel: a bad
    `check` must stop the call before them, not at the kernel's launch."""
    from ascend_sim import ConfigError
    from ops._framework import HostStep
    case = _case("moe_token_permute_with_routing_map_grad", "key 1000 ")
    adapter = OPS[case.op]
    _, _, size, executor = prepare_op(adapter, case.args, case.soc)
    ran = []
    executor.steps[0] = HostStep("spy", lambda: ran.append(1))
    with pytest.raises(ConfigError,
                       match=r"check must be 'race', 'strict', 'init', 'sync', 'all' or 'off', got 'races'"):
        adapter.run(np.empty(size, dtype=np.uint8), size, executor, check="races")
    assert not ran
