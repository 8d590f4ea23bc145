"""Launch a kernel on `block_dim` simulated vector cores.

A kernel is a sequence of TPipe phases (most kernels have one TPipe; the permute kernel
builds a new TPipe for each of its sorts and for the index copy). Each phase runs a
schedule: numba stage functions separated by `SYNC_ALL` markers. Between two markers every
core runs its stages back to back; at a marker every core finishes before any core goes
on, which is exactly SyncAll()'s guarantee. A schedule may depend on the tiling (the
multi-core sort has one merge stage per level), so a phase may give a function that
returns it. Each core keeps its UB, flags and member variables across stages; a new
TPipe replaces the queue table and leaves its buffers undefined.

Cores of one segment run on a thread pool (the stages release the GIL); results do not
depend on the thread count because cores write disjoint GM, as the real kernels do.
Before any byte moves, every phase's buffer plan is laid out (UBOverflowError if one does
not fit). A fault inside a stage becomes the matching SimulatorError naming core, kernel
and call; after the last stage a flag left set is a SyncError.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from . import errors
from .core import (CNT_CALLS, CNT_SYNC_ALL, ERR_BASE, FAULT_CALL_INDEX, counters, fault_record, flags,
                   make_core, start_pipe)
from .dtypes import dt_name
from .events import HARD_EVENT_NAMES
from ._jit import ensure_compiled
from .faults import to_error
from .pipe import UbBuffer, plan_pipe
from .report import CoreReport, RunReport

SYNC_ALL = "SyncAll"
"""Schedule marker: AscendC::SyncAll() between the stages before and after it."""

THREADS_ENV = "ASCEND_SIM_THREADS"
MAX_THREADS = 256
"""Upper bound of worker threads one launch may ask for (more would only queue behind each other)."""

# One process-wide pool, created once and never shut down, so launches from several Python threads
# can share it safely. A launch with `threads=t` submits t workers that take cores from a shared
# counter; threads are started lazily, so the pool only grows to what launches really use.
_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="aiv")
        return _POOL


def default_threads() -> int:
    """Worker threads for simulated cores: $ASCEND_SIM_THREADS, else the machine's CPU count.

    Raises ConfigError when the variable is set to anything but a whole number in [1, MAX_THREADS].
    """
    env = os.environ.get(THREADS_ENV, "").strip()
    if env:
        try:
            value = int(env)
        except ValueError:
            raise errors.ConfigError(f"{THREADS_ENV} must be a whole number of worker threads, got {env!r}") \
                from None
        return errors.whole_number(THREADS_ENV, value, 1, MAX_THREADS, "worker threads")
    return max(1, min(os.cpu_count() or 1, MAX_THREADS))


def resolve_threads(threads) -> int:
    """The worker-thread count of a launch: `threads` if given (validated), else default_threads()."""
    return default_threads() if threads is None else errors.whole_number("threads", threads, 1, MAX_THREADS,
                                                                          "worker threads")


@dataclass(frozen=True)
class PipePhase:
    """One TPipe's life inside a kernel.

    Attributes:
        pipe: the TPipe's name; the buffer plan rows with this `pipe` belong to it.
        buffers: names of the queues / TBufs its InitBuffer calls create, in order; kernels address
            them by index, so the plan must list exactly these names.
        schedule: stage functions `stage(core, *args)` and SYNC_ALL markers; an entry may also be a
            tuple (stage, *extra) called as stage(core, *args, *extra); or a function of the launch
            args returning such a sequence (for schedules that depend on the tiling).
        stage_args: optional function of the launch args returning the args this phase's stages take
            (default: the launch args). Handing a stage only the tensors it uses keeps numba from
            compiling it again for every dtype of the tensors it never touches.
    """
    pipe: str
    buffers: tuple[str, ...]
    schedule: Sequence | Callable[..., Sequence]
    stage_args: Callable[..., tuple] | None = None


@dataclass(frozen=True)
class Kernel:
    """One kernel class of an operator: its TPipe phases in order.

    Attributes:
        op: operator name, for messages (e.g. "MoeTokenUnpermuteWithRoutingMapGrad").
        name: kernel class name (e.g. "MoeTokenUnpermuteWithRoutingMapGradProbNoneDropPadFalse").
        phases: the TPipes the kernel builds one after another.
    """
    op: str
    name: str
    phases: tuple[PipePhase, ...]

    @classmethod
    def single_pipe(cls, op: str, name: str, stages: Sequence[Callable], buffers: Sequence[str]) -> "Kernel":
        """A kernel with one TPipe whose stages are separated by SyncAll()."""
        schedule: list = []
        for k, stage in enumerate(stages):
            if k:
                schedule.append(SYNC_ALL)
            schedule.append(stage)
        return cls(op, name, (PipePhase("pipe", tuple(buffers), tuple(schedule)),))


def _segments(kernel: Kernel, args: tuple) -> list[list[tuple[int, Callable, tuple]]]:
    """The launch as segments of (phase, stage, stage args), split at every SyncAll."""
    segments: list[list] = [[]]
    for p, phase in enumerate(kernel.phases):
        schedule = phase.schedule(*args) if callable(phase.schedule) else phase.schedule
        phase_args = tuple(phase.stage_args(*args)) if phase.stage_args is not None else tuple(args)
        for item in schedule:
            if isinstance(item, str) and item == SYNC_ALL:
                segments.append([])
            elif isinstance(item, tuple):
                segments[-1].append((p, item[0], phase_args + tuple(item[1:])))
            else:
                segments[-1].append((p, item, phase_args))
    return segments


def stage_calls(kernel: Kernel, args: tuple) -> list[tuple[Callable, tuple]]:
    """Every (stage, call arguments) a launch of `kernel` with `args` makes, with a stand-in core: what
    ensure_compiled needs to compile a kernel without running it (the types do not depend on the core)."""
    return _stage_calls(_segments(kernel, args))


def _stage_calls(segments) -> list[tuple[Callable, tuple]]:
    core = make_core(0, 1, 32, 1, 1, 0)
    return [(stage, (core, *stage_args)) for segment in segments for _, stage, stage_args in segment]


def _group_plan(kernel: Kernel, plan: Sequence[UbBuffer]) -> list[list[UbBuffer]]:
    groups = []
    for phase in kernel.phases:
        rows = [b for b in plan if b.pipe == phase.pipe]
        names = tuple(b.name for b in rows)
        if names != phase.buffers:
            raise ValueError(f"{kernel.name}: buffer plan of {phase.pipe!r} {names} does not match the kernel's "
                             f"buffers {phase.buffers}")
        groups.append(rows)
    return groups


def launch(kernel: Kernel, *, block_dim: int, plan: Sequence[UbBuffer], args: tuple, chip,
           gm_names: Sequence[str] = (), tiling_key: int | None = None, threads: int | None = None,
           ub_advice: str = "", on_compile: Callable | None = None) -> RunReport:
    """Run `kernel` on block_dim cores of `chip`; returns the RunReport or raises SimulatorError.

    `chip` is a chip profile (tiling.SocProfile): name, aiv_num, ub_size, npu_arch, max_block_count.
    `plan` lists every InitBuffer call of every TPipe (UbBuffer.pipe says which); `args` follow the
    core in every stage call. `threads` (default $ASCEND_SIM_THREADS or the CPU count) bounds how
    many cores run at once; results do not depend on it. `ub_advice` is appended to a UBOverflowError
    (the operator's knobs that shrink the plan). Stages are compiled (or loaded from numba's disk
    cache) before the first core starts; `on_compile(event, stage_name, seconds)` hears of each stage
    that had to be compiled ("start" / "done"), and the report keeps compile time apart from run time.
    """
    where = dict(op=kernel.op, tiling_key=tiling_key)
    threads = resolve_threads(threads)
    block_dim = errors.whole_number("block_dim", block_dim, 1, 2 ** 31 - 1, "blocks",
                                    lambda message: errors.SimulatorError(message, **where))
    pipe_plans = [plan_pipe(rows, chip.ub_size, advice=ub_advice, pipe=phase.pipe, **where)
                  for phase, rows in zip(kernel.phases, _group_plan(kernel, plan))]
    tables = [p.queue_table() for p in pipe_plans]
    segments = _segments(kernel, args)
    if len(segments) > 1 and block_dim > chip.aiv_num:
        raise errors.SyncError(
            f"SyncAll() with {block_dim} blocks on a chip with {chip.aiv_num} vector cores: the blocks would run "
            "in several rounds and the barrier would deadlock", call="SyncAll", **where)
    slots = max(t.size for t in tables)
    cores = [make_core(i, block_dim, chip.ub_size, slots, chip.max_block_count, chip.npu_arch)
             for i in range(block_dim)]
    live_phase = [-1] * block_dim
    threads = min(threads, block_dim)
    compile_s = ensure_compiled(_stage_calls(segments), on_compile)

    def fault_error(core) -> errors.SimulatorError:
        p = max(live_phase[core.block_idx], 0)
        return to_error(fault_record(core), core=core.block_idx, op=kernel.op, tiling_key=tiling_key,
                        call_index=int(core.state[FAULT_CALL_INDEX]), gm_names=tuple(gm_names),
                        queue_names=kernel.phases[p].buffers, event_names=HARD_EVENT_NAMES, dtype_names=dt_name)

    def run_core(segment, i: int):
        try:
            for p, stage, stage_args in segment:
                if live_phase[i] != p:
                    start_pipe(cores[i], tables[p])
                    live_phase[i] = p
                stage(cores[i], *stage_args)
                if cores[i].state[ERR_BASE] != 0:
                    break
        except Exception as failure:  # noqa: BLE001 - kernels record faults; anything else is a simulator bug
            return failure
        return None

    def worker(segment, next_core, outcomes) -> None:
        # cores are taken in index order from a shared counter (next() on itertools.count is atomic)
        for i in next_core:
            if i >= block_dim:
                return
            outcomes[i] = run_core(segment, i)

    start = time.perf_counter()
    for s, segment in enumerate(segments):
        if s > 0:
            for core in cores:
                core.state[CNT_SYNC_ALL] += 1
        if not segment:
            continue
        outcomes: list = [None] * block_dim
        if threads == 1:
            worker(segment, itertools.count(), outcomes)
        else:
            next_core = itertools.count()
            futures = [_pool().submit(worker, segment, next_core, outcomes) for _ in range(threads)]
            for f in futures:
                f.result()
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

    table = [row for p in pipe_plans for row in p.table()]
    return RunReport(
        op=kernel.op, kernel=kernel.name, tiling_key=tiling_key, block_dim=block_dim, soc=chip.name,
        ub_capacity_bytes=chip.ub_size, ub_plan=tuple(table), ub_plan_bytes=max(p.used_bytes for p in pipe_plans),
        cores=tuple(CoreReport.from_counters(c.block_idx, counters(c)) for c in cores), wall_time_s=wall,
        threads=threads, compile_time_s=compile_s)
