"""Launch a kernel on `block_dim` simulated vector cores.

A kernel is a tuple of numba stages; consecutive stages are separated by SyncAll():
every core finishes stage k before any core starts stage k + 1, which is exactly the
all-core barrier's guarantee. Each core keeps its own UB, queue table and flags across
stages. Cores of one stage run on a thread pool (the stages release the GIL); results do
not depend on the thread count because cores write disjoint GM, as the real kernels do.

Before any byte moves, the buffer plan is laid out (UBOverflowError if it does not fit).
A fault inside a stage becomes the matching SimulatorError naming core, kernel and call;
after the last stage a flag left set is a SyncError.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

import numpy as np

from . import errors
from .core import (CNT_CALLS, CNT_SYNC_ALL, ERR_BASE, FAULT_CALL_INDEX, counters, fault_record, flags,
                   make_core)
from .dtypes import dt_name
from .events import HARD_EVENT_NAMES
from .faults import to_error
from .pipe import UbBuffer, plan_pipe
from .report import CoreReport, RunReport

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0


def default_threads() -> int:
    """Worker threads for simulated cores: $ASCEND_SIM_THREADS, else the machine's CPU count."""
    env = os.environ.get("ASCEND_SIM_THREADS")
    if env:
        return max(1, int(env))
    return max(1, os.cpu_count() or 1)


def _pool(threads: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    if _POOL is None or _POOL_SIZE != threads:
        if _POOL is not None:
            _POOL.shutdown(wait=True)
        _POOL = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="aiv")
        _POOL_SIZE = threads
    return _POOL


@dataclass(frozen=True)
class Kernel:
    """One kernel class of an operator, as the launcher sees it.

    Attributes:
        op: operator name, for messages (e.g. "MoeTokenUnpermuteWithRoutingMapGrad").
        name: kernel class name (e.g. "MoeTokenUnpermuteWithRoutingMapGradProbNoneDropPadFalse").
        stages: numba functions `stage(core, *args)`; SyncAll() separates consecutive stages.
        buffers: names of the queues / TBufs the kernel's Init() creates, in InitBuffer order;
            the kernel addresses them by index, so the plan must list exactly these names.
    """
    op: str
    name: str
    stages: tuple[Callable, ...]
    buffers: tuple[str, ...]


def launch(kernel: Kernel, *, block_dim: int, plan: Sequence[UbBuffer], args: tuple, chip,
           gm_names: Sequence[str] = (), tiling_key: int | None = None, threads: int | None = None) -> RunReport:
    """Run `kernel` on block_dim cores of `chip`; returns the RunReport or raises SimulatorError.

    `chip` is a chip profile (tiling.SocProfile): name, aiv_num, ub_size, npu_arch, max_block_count.
    `plan` lists the kernel's InitBuffer calls; `args` follow the core in every stage call.
    """
    where = dict(op=kernel.op, tiling_key=tiling_key)
    pipe_plan = plan_pipe(plan, chip.ub_size, **where)
    names = tuple(b.name for b in plan)
    if names != kernel.buffers:
        raise ValueError(f"{kernel.name}: buffer plan {names} does not match the kernel's buffers {kernel.buffers}")
    if block_dim < 1:
        raise errors.SimulatorError(f"block_dim {block_dim} must be at least 1", **where)
    if len(kernel.stages) > 1 and block_dim > chip.aiv_num:
        raise errors.SyncError(
            f"SyncAll() with {block_dim} blocks on a chip with {chip.aiv_num} vector cores: the blocks would run "
            "in several rounds and the barrier would deadlock", call="SyncAll", **where)
    table = pipe_plan.queue_table()
    cores = [make_core(i, block_dim, chip.ub_size, table, chip.max_block_count, chip.npu_arch)
             for i in range(block_dim)]
    threads = min(threads or default_threads(), block_dim)

    def fault_error(core) -> errors.SimulatorError:
        return to_error(fault_record(core), core=core.block_idx, op=kernel.op, tiling_key=tiling_key,
                        call_index=int(core.state[FAULT_CALL_INDEX]), gm_names=tuple(gm_names),
                        queue_names=names, event_names=HARD_EVENT_NAMES, dtype_names=dt_name)

    def run_core(stage, i: int):
        try:
            stage(cores[i], *args)
        except Exception as failure:  # noqa: BLE001 - kernels record faults; anything else is a simulator bug
            return failure
        return None

    start = time.perf_counter()
    for s, stage in enumerate(kernel.stages):
        if s > 0:
            for core in cores:
                core.state[CNT_SYNC_ALL] += 1
        if threads == 1:
            outcomes = [run_core(stage, i) for i in range(block_dim)]
        else:
            outcomes = list(_pool(threads).map(partial(run_core, stage), range(block_dim)))
        for core, failure in zip(cores, outcomes, strict=True):
            if failure is not None:
                raise errors.SimulatorError(f"{type(failure).__name__} inside the kernel: {failure}",
                                            core=core.block_idx, call=f"after call #{int(core.state[CNT_CALLS])}",
                                            **where) from failure
            if core.state[ERR_BASE] != 0:
                raise fault_error(core)
    wall = time.perf_counter() - start

    for core in cores:
        left = np.argwhere(flags(core) != 0)
        if left.size:
            evt, event_id = (int(v) for v in left[0])
            raise errors.SyncError(
                f"SetFlag<{HARD_EVENT_NAMES[evt]}>({event_id}) was never waited for: the flag leaks into the next "
                "kernel on the NPU", core=core.block_idx, call="kernel end", **where)

    return RunReport(
        op=kernel.op, kernel=kernel.name, tiling_key=tiling_key, block_dim=block_dim, soc=chip.name,
        ub_capacity_bytes=chip.ub_size, ub_plan=tuple(pipe_plan.table()), ub_plan_bytes=pipe_plan.used_bytes,
        cores=tuple(CoreReport.from_counters(c.block_idx, counters(c)) for c in cores), wall_time_s=wall,
        threads=threads)
