"""The errors a user of the simulator sees before anything runs (a dtype no operator takes, a race waiver that names
no call or pipe, too many waivers, a UB plan that is not the kernel's) are the project's error classes with fields;
each is still a ValueError, which the argument checks of ops/ and tiling/ catch."""
from __future__ import annotations

import numpy as np
import pytest

from ascend_sim import BufferPlanError, ConfigError, Kernel, UbBuffer, UnsupportedDtypeError, launch
from ascend_sim._jit import global_aicore
from ascend_sim.check import RaceWaiver, attach
from ascend_sim.dtypes import dt_of
from ascend_sim.layout import CHK_WAIVERS, MODE_RACE
from tiling import get_soc


@pytest.mark.parametrize("dtype", [np.complex64, "no-such-dtype", np.dtype("datetime64[s]")],
                         ids=["complex64", "not-a-dtype", "datetime64"])
def test_a_dtype_no_operator_takes(dtype):
    with pytest.raises(UnsupportedDtypeError) as exc:
        dt_of(dtype)
    assert isinstance(exc.value, ValueError)
    assert exc.value.dtype is dtype and repr(dtype) in str(exc.value)


@pytest.mark.parametrize("args, setting, fragment", [
    (("MTE2", "DataCopy(GM->UB)", "S", "NoSuchCall"), "second", "'NoSuchCall'"),
    (("MTE2", "NoSuchCall", "S", "LocalTensor::GetValue"), "first", "'NoSuchCall'"),
    (("MTE9", "DataCopy(GM->UB)", "S", "LocalTensor::GetValue"), "first_pipe", "'MTE9'"),
    (("MTE2", "DataCopy(GM->UB)", "Q", "LocalTensor::GetValue"), "second_pipe", "'Q'"),
], ids=["unknown-second-call", "unknown-first-call", "unknown-first-pipe", "unknown-second-pipe"])
def test_a_race_waiver_names_known_calls_and_pipes(args, setting, fragment):
    with pytest.raises(ConfigError) as exc:
        RaceWaiver(*args, reason="test")
    assert isinstance(exc.value, ValueError)
    assert exc.value.setting == setting and fragment in str(exc.value) and setting in str(exc.value)


def test_a_kernel_waives_a_bounded_number_of_races():
    waiver = RaceWaiver("MTE2", "DataCopy(GM->UB)", "S", "LocalTensor::GetValue", reason="test")
    with pytest.raises(ConfigError) as exc:
        attach(np.zeros(8, np.int64), MODE_RACE, 1024, [waiver] * (CHK_WAIVERS + 1))
    assert exc.value.setting == "waivers" and f"at most {CHK_WAIVERS}" in str(exc.value)


@global_aicore
def never_runs(c):
    """A stage the plan check refuses before it is compiled."""
    return


@pytest.mark.parametrize("plan", [("x",), ("y", "x"), ("x", "y", "z")], ids=["missing", "swapped", "extra"])
def test_a_plan_that_is_not_the_kernels_buffers(plan):
    kernel = Kernel.single_pipe("TestOp", "TestKernel", (never_runs,), ("x", "y"))
    with pytest.raises(BufferPlanError) as exc:
        launch(kernel, block_dim=1, plan=tuple(UbBuffer(n, 1024) for n in plan), args=(), chip=get_soc("ascend950"))
    err = exc.value
    assert isinstance(err, ConfigError) and isinstance(err, ValueError) and err.setting == "plan"
    assert err.kernel == "TestKernel" and err.plan_buffers == plan and err.kernel_buffers == ("x", "y")
    assert err.pipe == kernel.phases[0].pipe and str(plan) in str(err)
