"""Settings of checked mode and tracing: a value of the wrong kind is a ConfigError naming the argument, raised
before anything runs, and the trace budget `max_events` bounds the calls kept over all launches and cores."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import ConfigError, Kernel, checked, launch
from ascend_sim.trace import TraceRequest, tracing

from .harness import CHIP, que
from .test_timeline import TILE_ELEMS, copy_kernel, copy_launch


def _copy_kernel_launch(check):
    src = np.arange(TILE_ELEMS, dtype=np.float32)
    dst = np.zeros_like(src)
    plan = (que("bind", TILE_ELEMS * 4, num=1, position="VECIN->VECOUT", kind="TQueBind"),)
    kernel = Kernel.single_pipe("TestOp", "TestKernel", (copy_kernel,), ("bind",))
    launch(kernel, block_dim=1, plan=plan, args=(1, asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0)),
           chip=CHIP, check=check)
    return dst


@pytest.mark.parametrize("value", [["race"], ("race",), {"race"}, 1, b"race", True],
                         ids=["list", "tuple", "set", "int", "bytes", "bool"])
def test_a_check_value_of_the_wrong_kind_is_a_config_error_naming_check(value):
    with pytest.raises(ConfigError, match=r"^check must be 'race', 'strict', 'init', 'sync', 'all' or 'off'") as err:
        _copy_kernel_launch(value)
    assert err.value.setting == "check"


@pytest.mark.parametrize("value", [["race"], 2, "sometimes"], ids=["list", "int", "unknown-name"])
def test_a_checked_block_of_a_bad_mode_is_a_config_error_naming_mode(value):
    with pytest.raises(ConfigError, match=r"^mode must be 'race', 'strict', 'init', 'sync', 'all' or 'off'") as err:
        with checked(value):
            pass
    assert err.value.setting == "mode"


@pytest.mark.parametrize("mode", ["race", "strict", "all", "off", None])
def test_the_check_values_that_are_names_still_run(mode):
    assert np.array_equal(_copy_kernel_launch(mode), np.arange(TILE_ELEMS, dtype=np.float32))


@pytest.mark.parametrize("cores", [5, 2.0, "0,1", np.int64(3), np.array(1)],
                         ids=["int", "float", "string", "numpy-int", "numpy-0d"])
def test_tracing_cores_that_are_not_a_sequence_are_a_config_error_naming_cores(cores):
    with pytest.raises(ConfigError, match=r"^cores must be a sequence of block indices") as err:
        with tracing(cores=cores):
            pass
    assert err.value.setting == "cores"


@pytest.mark.parametrize("cores, bad", [((0, -1), "-1"), ((0, 1.5), "1.5"), ((), "at least one")],
                         ids=["negative", "float-index", "empty"])
def test_tracing_cores_with_a_bad_index_are_a_config_error_naming_cores(cores, bad):
    with pytest.raises(ConfigError, match="cores") as err:
        with tracing(cores=cores):
            pass
    assert bad in str(err.value) and err.value.setting == "cores"


@pytest.mark.parametrize("max_events, cores, block_dim, expected", [
    (2, None, 5, {0: 1, 1: 1}),
    (7, None, 3, {0: 3, 1: 2, 2: 2}),
    (9, (1, 3), 4, {1: 5, 3: 4}),
    (4, (2, 9), 4, {2: 4}),
    (1, None, 48, {0: 1}),
], ids=["fewer-than-cores", "remainder-to-the-first", "chosen-cores", "core-past-block-dim", "one-event-48-cores"])
def test_rows_for_never_hands_out_more_than_is_left(max_events, cores, block_dim, expected):
    request = TraceRequest(cores, max_events, max_events)
    rows = request.rows_for(block_dim)
    assert rows == expected
    assert sum(rows.values()) <= max_events


@pytest.mark.parametrize("max_events, block_dim", [(1, 4), (3, 4), (5, 2), (10, 3)],
                         ids=["1-event-4-cores", "3-events-4-cores", "5-events-2-cores", "10-events-3-cores"])
def test_max_events_bounds_the_trace_in_total(max_events, block_dim):
    """Every core makes far more calls than the budget: the traces together keep exactly max_events, over every
    launch of the block (the second launch finds nothing left)."""
    with tracing(max_events=max_events) as request:
        first = copy_launch(tiles=3, buffers=2, block_dim=block_dim)
        second = copy_launch(tiles=3, buffers=2, block_dim=block_dim)
    kept = sum(len(c.rows) for c in first.trace.cores)
    assert kept == max_events
    assert all(c.offered > max_events for c in first.trace.cores)
    assert second.trace is None and len(request.runs) == 1 and request.runs[0] is first
