"""Launch configuration: thread counts, concurrent launches from several Python threads, compile apart
from run time."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import ConfigError, default_threads, resolve_threads
from ascend_sim._jit import global_aicore
from tiling import get_soc

from .harness import run, tbuf

ROW_ELEMS = 24


@global_aicore
def scatter_rows(c, src, dst, order):
    """Row r of src goes to row order[r] of dst; cores take rows round-robin."""
    T = asc.ub_like(c, src)
    buf = asc.tbuf_get(c, 0, T)
    nbytes = ROW_ELEMS * 2
    for row in range(c.block_idx, order.size, c.block_num):
        asc.data_copy_pad(c, buf, asc.gm_at(src, row * ROW_ELEMS), asc.DataCopyExtParams(1, nbytes, 0, 0), asc.NO_PAD)
        asc.data_copy_pad(c, asc.gm_at(dst, order[row] * ROW_ELEMS), buf, asc.DataCopyExtParams(1, nbytes, 0, 0))


def _scatter(rows: int, block_dim: int, threads, chip, seed: int):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 60000, ROW_ELEMS * rows).astype(np.uint16)
    order = rng.permutation(rows).astype(np.int32)
    dst = np.zeros_like(src)
    report = run([scatter_rows], [tbuf("buf", 64)], asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0), order,
                 block_dim=block_dim, threads=threads, chip=chip)
    expected = np.zeros_like(src).reshape(rows, ROW_ELEMS)
    expected[order] = src.reshape(rows, ROW_ELEMS)
    return dst.reshape(rows, ROW_ELEMS), expected, report


def test_concurrent_launches_with_mixed_settings_all_succeed():
    """Eight Python threads launch at once with different block dims, thread counts and profiles (the pool
    is shared and never replaced under a running launch)."""
    _scatter(16, 2, 1, get_soc("910b"), 0)       # compile once before the race
    settings = [(7, 1, "910b"), (48, 2, "910_93"), (3, 5, "950"), (64, 3, "950"), (1, 2, "910b"),
                (20, 8, "910b"), (33, None, "910_93"), (5, 4, "950")]
    failures, results = [], {}

    def launch_one(k, block_dim, threads, soc):
        try:
            for rep in range(3):
                got, want, report = _scatter(300 + k, block_dim, threads, get_soc(soc), seed=k * 10 + rep)
                results[(k, rep)] = (np.array_equal(got, want), report.threads, report.block_dim)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            failures.append((k, repr(e)))

    workers = [threading.Thread(target=launch_one, args=(k, *s)) for k, s in enumerate(settings)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []
    assert len(results) == 3 * len(settings)
    for (k, _), (exact, threads, block_dim) in results.items():
        want_threads = min(settings[k][1] or default_threads(), settings[k][0])
        assert exact and threads == want_threads and block_dim == settings[k][0], (k, settings[k])


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "100000"], ids=lambda v: f"env={v}")
def test_bad_thread_environment_is_a_config_error(monkeypatch, value):
    monkeypatch.setenv("ASCEND_SIM_THREADS", value)
    with pytest.raises(ConfigError, match="ASCEND_SIM_THREADS"):
        default_threads()


def test_thread_environment_sets_the_default(monkeypatch):
    monkeypatch.setenv("ASCEND_SIM_THREADS", " 3 ")
    assert default_threads() == 3
    _, _, report = _scatter(40, 8, None, get_soc("910b"), 1)
    assert report.threads == 3


@pytest.mark.parametrize("value", [0, -1, 2.0, "2", True, 10 ** 6], ids=repr)
def test_bad_threads_argument_is_a_config_error(value):
    with pytest.raises(ConfigError, match="threads"):
        resolve_threads(value)


def test_threads_beyond_block_dim_use_block_dim():
    got, want, report = _scatter(50, 3, 16, get_soc("910b"), 2)
    assert np.array_equal(got, want) and report.threads == 3


def test_stages_are_compiled_before_the_cores_start():
    from ascend_sim import cache_state, stage_calls, stage_signature

    _scatter(10, 2, 1, get_soc("910b"), 3)
    src, dst, order = np.zeros(ROW_ELEMS, np.uint16), np.zeros(ROW_ELEMS, np.uint16), np.zeros(1, np.int32)
    from ascend_sim import Kernel
    kernel = Kernel.single_pipe("TestOp", "TestKernel", (scatter_rows,), ("buf",))
    calls = stage_calls(kernel, (asc.GlobalTensor(src, 0, 0), asc.GlobalTensor(dst, 1, 0), order))
    assert [stage for stage, _ in calls] == [scatter_rows]
    stage, args = calls[0]
    assert cache_state(stage, stage_signature(stage, args)) == "memory"
    events = []
    from ascend_sim import launch
    launch(kernel, block_dim=1, plan=(tbuf("buf", 64),), args=(asc.GlobalTensor(src, 0, 0),
           asc.GlobalTensor(dst, 1, 0), order), chip=get_soc("910b"), on_compile=lambda *e: events.append(e))
    assert events == []     # nothing left to compile: no "compiling" message for a warm kernel


def test_kernel_cache_stamp_covers_every_inlined_module():
    """numba stamps a cached stage with its own file only; ours adds every module it can inline."""
    import ops.permute.kernel  # noqa: F401 - defines the kernels (`import ops` alone loads no operator)
    import ops.unpermute_with_routing_map_grad.kernel  # noqa: F401
    from ascend_sim._jit import source_stamp, stamped_modules
    closure = stamped_modules("ops.permute.kernel")
    for name in ("ops.permute.kernel", "ops.common.moe_sort", "ops.common.moe_index_copy", "ascend_sim.datacopy",
                 "ascend_sim.queue", "ascend_sim.vector", "ascend_sim.sort", "ascend_sim.vf", "ascend_sim.dtypes"):
        assert name in closure, name
    assert not any(n.startswith(("ops.cli", "ops.permute.golden", "tiling")) for n in closure)
    assert len(source_stamp("ops.permute.kernel")) == 16
    assert source_stamp("ops.permute.kernel") != source_stamp("ops.unpermute_with_routing_map_grad.kernel")


@global_aicore
def write_then_dump(c, out, write_bytes):
    """Fill the first `write_bytes` of the UB with 0x11 (write_bytes > 0), or copy the untouched UB out."""
    buf = asc.tbuf_get(c, 0, asc.ub_u8(c))
    if write_bytes > 0:
        asc.duplicate(c, asc.view_as(c, buf, asc.ub_u16(c)), np.uint16(0x1111), write_bytes // 2)
    else:
        asc.data_copy(c, asc.gm_at(out, c.block_idx * 4096), buf, 4096)


def test_a_reused_ub_shows_poison_where_its_last_launch_wrote():
    """UBs of finished launches are pooled; the next kernel must still find poison, never the last one's data."""
    from ascend_sim.core import CORE_SETS
    from ascend_sim.layout import POISON
    out = np.zeros(4 * 4096, dtype=np.uint8)
    for _ in range(2):
        run([write_then_dump], [tbuf("buf", 4096)], asc.GlobalTensor(out, 0, 0), 4096, block_dim=4)
        assert CORE_SETS.idle_sets(4, get_soc("910b").ub_size) >= 1     # the cores' UBs went back to the pool
        run([write_then_dump], [tbuf("buf", 4096)], asc.GlobalTensor(out, 0, 0), 4096, block_dim=4)
        run([write_then_dump], [tbuf("buf", 4096)], asc.GlobalTensor(out, 0, 0), 0, block_dim=4)
        assert np.array_equal(out, np.resize(POISON, out.size)), "a pooled UB leaked the previous kernel's bytes"
