"""Launch a kernel on `block_dim` simulated vector cores.

A kernel is a sequence of TPipe phases (most kernels have one TPipe; the permute kernel
builds a new TPipe for each of its sorts and for the index copy). Each phase runs a
schedule: numba stage functions separated by `SYNC_ALL` markers. Between two markers every
core runs its stages back to back; at a marker every core finishes before any core goes
on, which is exactly SyncAll()'s guarantee. A schedule may depend on the tiling (the
multi-core sort has one merge stage per level), so a phase may give a function that
returns it. Each core keeps its UB, flags and member variables across stages; a new
TPipe replaces the queue table and leaves its buffers undefined.

A kernel's `if` on a value it computed earlier (read from GM into a member variable) is a
`Branch` between phase lists, decided by every core for itself when it gets there; so each
core runs its own program. Between two barriers the cores run on a thread pool (the stages
release the GIL); results do not depend on the thread count because cores write disjoint GM,
as the real kernels do (atomic adds excepted: their fp32 order follows core timing, as on the
chip). Cores that reach SyncAll() a different number of times (a deadlock on the chip) end the
launch with SyncError.

Each core keeps a timeline of its calls (timeline.py) under the chip's cost model (`chip.cost`);
at every SyncAll() all cores resume at the slowest core's time, and the report carries the
estimate (estimate.py). Inside `trace.tracing(...)` the selected cores also log every call.

Before any byte moves, every phase's buffer plan is laid out (UBOverflowError if one does
not fit). A fault inside a stage becomes the matching SimulatorError naming core, kernel
and call; after the last stage a flag left set is a SyncError.
"""
from __future__ import annotations

import functools
import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence, cast

import numpy as np
from numba._dispatcher import compute_fingerprint

from . import check as checking
from . import crosscore, errors, gm_cost, timeline
from . import tier as tiers
from ._jit import ensure_compiled, stage_signature
from .core import CORE_SETS, fault_record, flags, make_core, start_pipe
from .cost import CostModel
from .dtypes import dt_name
from .estimate import CoreTime, Estimate
from .events import HARD_EVENT_NAMES
from .faults import flag_pipes, to_error
from .layout import (
    CHK_FLAG_SET_CALL,
    CHK_INIT_WAIVED,
    CHK_OWN_WAIVE,
    CHK_WAIVED,
    CNT_CALLS,
    CNT_SYNC_ALL,
    ERR_BASE,
    EVENT_IDS,
    FAULT_CALL_INDEX,
    FLAG_BASE,
    MEMBER_BASE,
    MODE_INIT,
    MODE_RACES,
    N_COUNTERS,
    N_PIPES,
    QUE_BASE,
    TL_BUSY,
    TL_DONE,
    TL_END,
    TL_L2_HIT_BYTES,
    TL_SAME_N,
    TL_TRACE_N,
    TRACE_COLS,
    UB_DIRTY,
    UB_POISONED,
)
from .pipe import UbBuffer, plan_pipe
from .report import CoreReport, RunReport, deferred, gm_bytes_of
from .trace import CoreTrace, KernelTrace, current_request

SAME_ADDRESS_LOG_ENTRIES = 1 << 14     # per core: (region, time bucket) entries of the same-address log (consecutive
                                       # reads of one region and window share an entry; later ones are not logged)
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
    return max(1, min(_cpu_count(), MAX_THREADS))


@functools.lru_cache(maxsize=1)
def _cpu_count() -> int:
    # os.cpu_count() asks the OS each time (tens of microseconds): once per process is enough
    return os.cpu_count() or 1


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
        core_plan: optional `core_plan(block_idx, rows, *launch_args) -> rows`: the InitBuffer rows core
            `block_idx` builds, given the plan's rows for this TPipe (kernels whose Init sizes buffers from
            the core's own share, e.g. the last core of a sort). Default: every core builds the plan's rows.
        waived_queues: queues whose buffers the real kernel uses after FreeTensor on purpose; checked mode
            does not report that (docs/guides/checked-mode.md lists them).
    """
    pipe: str
    buffers: tuple[str, ...]
    schedule: Sequence | Callable[..., Sequence]
    stage_args: Callable[..., tuple] | None = None
    core_plan: Callable[..., Sequence[UbBuffer]] | None = None
    waived_queues: tuple[str, ...] = ()


@dataclass(frozen=True)
class Branch:
    """A data-dependent `if` between TPipes, decided by each core at run time.

    When a core reaches the branch it calls `choose(core, *launch_args)`, which returns the index of the
    arm to run next; it reads what earlier stages left in the core's member variables (asc.members), as
    the kernel's own `if` reads a value it computed from GM. Cores may take different arms; a SyncAll()
    is a barrier for every core whichever arm reached it, and cores that reach different numbers of
    barriers (a deadlock on the chip) end the launch with SyncError.

    Attributes:
        name: the condition, for messages (e.g. "actualOutTokens != n * topK").
        choose: see above; must return an int in [0, len(arms)).
        arms: each arm a tuple of PipePhases (and nested Branches) run in order.
    """
    name: str
    choose: Callable[..., int]
    arms: tuple[tuple, ...]


@dataclass(frozen=True)
class Kernel:
    """One kernel class of an operator: its TPipe phases in order (a Branch chooses among phase lists).

    Attributes:
        op: operator name, for messages (e.g. "MoeTokenUnpermuteWithRoutingMapGrad").
        name: kernel class name (e.g. "MoeTokenUnpermuteWithRoutingMapGradProbNoneDropPadFalse").
        phases: the TPipes the kernel builds one after another, and Branches between them.
        waivers: check.RaceWaivers: races the kernel has on purpose (the real kernel's), let pass in checked mode.
    """
    op: str
    name: str
    phases: tuple
    waivers: tuple = ()

    @classmethod
    def single_pipe(cls, op: str, name: str, stages: Sequence[Callable], buffers: Sequence[str],
                    waivers: tuple = ()) -> "Kernel":
        """A kernel with one TPipe whose stages are separated by SyncAll()."""
        schedule: list = []
        for k, stage in enumerate(stages):
            if k:
                schedule.append(SYNC_ALL)
            schedule.append(stage)
        return cls(op, name, (PipePhase("pipe", tuple(buffers), tuple(schedule)),), tuple(waivers))

    def all_phases(self) -> list[PipePhase]:
        """Every PipePhase of the kernel, those inside branch arms included, in order of appearance."""
        return _flat_phases(self.phases)


def member(core, slot: int) -> int:
    """Member variable `slot` of a core's kernel object (asc.members(c)[slot] inside a stage), read on the
    host: what a Branch's choose() reads."""
    return int(core.state[MEMBER_BASE + slot])


def _flat_phases(items) -> list[PipePhase]:
    out: list[PipePhase] = []
    for item in items:
        if isinstance(item, Branch):
            for arm in item.arms:
                out += _flat_phases(arm)
        else:
            out.append(item)
    return out


# Program items: what one core executes, in order. A branch item is replaced by its chosen arm's items
# when the core reaches it.
_STAGE, _SYNC, _BRANCH = 0, 1, 2


def _program(items, phase_ids: dict, args: tuple, cache: dict) -> list[tuple]:
    """Items of a phase sequence: (_STAGE, phase id, stage, stage args), (_SYNC,), (_BRANCH, Branch)."""
    program: list[tuple] = []
    for item in items:
        if isinstance(item, Branch):
            program.append((_BRANCH, item))
            continue
        p = phase_ids[id(item)]
        if p not in cache:
            schedule = item.schedule(*args) if callable(item.schedule) else item.schedule
            phase_args = tuple(item.stage_args(*args)) if item.stage_args is not None else tuple(args)
            steps: list[tuple] = []
            for entry in schedule:
                if isinstance(entry, str) and entry == SYNC_ALL:
                    steps.append((_SYNC,))
                elif isinstance(entry, tuple):
                    steps.append((_STAGE, p, entry[0], phase_args + tuple(entry[1:])))
                else:
                    steps.append((_STAGE, p, entry, phase_args))
            cache[p] = steps
        program += cache[p]
    return program


class _Programs:
    """The launch's program: the top-level items and each branch arm's items, built once per launch."""

    def __init__(self, kernel: Kernel, args: tuple):
        self.phases = kernel.all_phases()
        self.phase_ids = {id(ph): i for i, ph in enumerate(self.phases)}
        self._cache: dict = {}
        self.args = args
        self.top = _program(kernel.phases, self.phase_ids, args, self._cache)
        self._arms: dict = {}

    def arm(self, branch: Branch, index: int) -> list[tuple]:
        key = (id(branch), index)
        if key not in self._arms:
            self._arms[key] = _program(branch.arms[index], self.phase_ids, self.args, self._cache)
        return self._arms[key]

    def every_item(self) -> list[tuple]:
        """All stage and sync items of all arms (each once), for compiling ahead and the SyncAll check."""
        seen, out, todo = set(), [], [self.top]
        while todo:
            for item in todo.pop():
                if item[0] == _BRANCH:
                    for k in range(len(item[1].arms)):
                        if (id(item[1]), k) not in seen:
                            seen.add((id(item[1]), k))
                            todo.append(self.arm(item[1], k))
                else:
                    out.append(item)
        return out


def stage_calls(kernel: Kernel, args: tuple) -> list[tuple[Callable, tuple]]:
    """Every (stage, call arguments) a launch of `kernel` with `args` may make (all branch arms), with a
    stand-in core: what ensure_compiled needs to compile a kernel without running it (the types do not
    depend on the core)."""
    return _stage_calls(_Programs(kernel, args))


def _stage_calls(programs: _Programs) -> list[tuple[Callable, tuple]]:
    core = make_core(0, 1, 32, 1, 1, 0)
    return [(item[2], (core, *item[3])) for item in programs.every_item() if item[0] == _STAGE]


def _entry_point(stage, args: tuple):
    """The compiled function `stage(*args)` dispatches to (the stage itself if it is not compiled for them)."""
    compiled = stage.overloads.get(stage_signature(stage, args))
    return stage if compiled is None else compiled.entry_point


def _group_plan(kernel: Kernel, phases: list[PipePhase], plan: Sequence[UbBuffer]) -> list[list[UbBuffer]]:
    groups = []
    for phase in phases:
        rows = [b for b in plan if b.pipe == phase.pipe]
        names = tuple(b.name for b in rows)
        if names != phase.buffers:
            raise errors.BufferPlanError(f"{kernel.name}: buffer plan of {phase.pipe!r} {names} does not match the "
                                         f"kernel's buffers {phase.buffers}", kernel=kernel.name, pipe=phase.pipe,
                                         plan_buffers=names, kernel_buffers=phase.buffers)
        groups.append(rows)
    return groups


# --- compiled entry points -------------------------------------------------------------------------------
# Every launch calls each of its stages with arguments of the same types on every core, so the compiled
# function is looked up once per launch. The lookup is keyed as numba's own dispatcher keys a call (the
# type fingerprint of the arguments), plus the arguments' Python classes: a few microseconds, where typing
# the arguments (numba's typeof of a tiling struct and a dozen GM tensors) takes a few hundred.
_ENTRIES: dict = {}
_ENTRIES_LOCK = threading.Lock()
MAX_ENTRIES = 4096
"""Compiled entry points remembered (stage, argument types); beyond it the oldest are forgotten."""


def _entry_key(stage, call: tuple):
    """The key of a call `stage(*call)` in _ENTRIES, or None when numba cannot fingerprint an argument."""
    try:
        return stage, tuple(map(type, call)), compute_fingerprint(call)
    except Exception:  # noqa: BLE001 - an argument numba types the slow way (a string ...): no fast key
        return None


def _known_entries(items, core) -> tuple[dict, list]:
    """Entry points of the program's stage items already in _ENTRIES (by id of the item), and the
    (item, key, call) of the others."""
    entries, unknown = {}, []
    for item in items:
        if item[0] != _STAGE:
            continue
        call = (core, *item[3])
        key = _entry_key(item[2], call)
        entry = _ENTRIES.get(key) if key is not None else None
        if entry is None:
            unknown.append((item, key, call))
        else:
            entries[id(item)] = entry
    return entries, unknown


def _remember_entry(key, stage, call: tuple):
    entry = _entry_point(stage, call)
    if key is not None and entry is not stage:      # only compiled entries: a stage not compiled yet is its dispatcher
        with _ENTRIES_LOCK:
            if len(_ENTRIES) >= MAX_ENTRIES:
                del _ENTRIES[next(iter(_ENTRIES))]
            _ENTRIES[key] = entry
    return entry


# --- running the cores between two barriers -------------------------------------------------------------
class _Crew:
    """The pool helpers of one round: how many may still be started, how many are taking cores."""
    __slots__ = ("lock", "idle", "open", "active", "left", "take", "pool")

    def __init__(self, helpers: int, take: Callable, pool):
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.open, self.active, self.left = True, 0, helpers
        self.take, self.pool = take, pool


def _helper(crew: _Crew) -> None:
    """One pool helper of a round: takes cores until none is left (nothing if the round is already over). A module
    function, not a closure of the round: a helper that submits itself would make a reference cycle per round."""
    with crew.lock:
        if not crew.open:
            return
        crew.active += 1
        more = crew.left > 0
        crew.left -= more
    try:
        if more:
            crew.pool.submit(_helper, crew)
        crew.take()
    finally:
        with crew.lock:
            crew.active -= 1
            if not crew.active:
                crew.idle.notify_all()


_ROUND_SECONDS: dict = {}
"""Host seconds the cores of a round of a kernel took together, last time it ran: (op, kernel, block_dim, round)."""
INLINE_ROUND_S = 200e-6
"""A round whose cores took less than this (all together) last time starts on the calling thread alone: waking a
pool thread costs about as much. If it takes twice as long this time, helpers join after all."""


def _run_round(run_core: Callable, block_dim: int, threads: int, outcomes: list, key: tuple) -> None:
    """outcomes[i] = run_core(i) for every core, on at most `threads` threads; cores are taken in index order
    from a shared counter (next() on itertools.count is atomic).

    The calling thread takes cores itself, and up to threads - 1 pool helpers join it, each started by the one
    before. A helper that starts once the calling thread has taken the last core leaves at once, and only
    helpers already running are waited for. A round that was short last time (INLINE_ROUND_S) calls for helpers
    only if it turns out long this time: short rounds cost no thread wake-ups. Which thread runs a core never
    changes what it computes."""
    claim = itertools.count()
    if threads == 1:
        for i in claim:
            if i >= block_dim:
                return
            outcomes[i] = run_core(i)
    clock = time.perf_counter
    busy = [0.0]            # seconds inside run_core, all threads together (a hint: a lost update is harmless)

    def take() -> None:
        for i in claim:
            if i >= block_dim:
                return
            t = clock()
            outcomes[i] = run_core(i)
            busy[0] += clock() - t

    start = clock()
    last = _ROUND_SECONDS.get(key)
    patience = 2 * INLINE_ROUND_S if last is not None and last < INLINE_ROUND_S else 0.0
    crew = None
    for i in claim:
        if i >= block_dim:
            break
        if crew is None and clock() - start >= patience:
            crew = _Crew(threads - 2, take, _pool())
            crew.pool.submit(_helper, crew)
        t = clock()
        outcomes[i] = run_core(i)
        busy[0] += clock() - t
    if crew is not None:
        with crew.lock:
            crew.open = False
            while crew.active:
                crew.idle.wait()
    if len(_ROUND_SECONDS) >= 4096:
        _ROUND_SECONDS.clear()
    _ROUND_SECONDS[key] = busy[0]


@functools.lru_cache(maxsize=256)
def _state_template(width: int, max_block_count: int, npu_arch: int, cost: CostModel, cores_running: int):
    """The state words make_core gives a core (no UB yet) and timeline.load_costs loads; read-only."""
    core = make_core(0, 1, 32, width - QUE_BASE, max_block_count, npu_arch)
    timeline.load_costs(core.state, cost, cores_running)
    template = core.state.copy()
    template[UB_POISONED] = template[UB_DIRTY] = 0     # the set's own UBs say these
    template.flags.writeable = False
    return template


def launch(kernel: Kernel, *, block_dim: int, plan: Sequence[UbBuffer], args: tuple, chip,
           gm_names: Sequence[str] = (), tiling_key: int | None = None, threads: int | None = None,
           ub_advice: str = "", on_compile: Callable | None = None, memo: dict | None = None,
           check: str | None = None, reference: dict | None = None, workspace: np.ndarray | None = None) -> RunReport:
    """Run `kernel` on block_dim cores of `chip`; returns the RunReport or raises SimulatorError.

    `chip` is a chip profile (tiling.SocProfile): name, aiv_num, ub_size, npu_arch, max_block_count.
    `plan` lists every InitBuffer call of every TPipe (UbBuffer.pipe says which); `args` follow the
    core in every stage call. `threads` (default $ASCEND_SIM_THREADS or the CPU count) bounds how
    many cores run at once; results do not depend on it, except the order of fp32 atomic adds (SetAtomicAdd)
    from different cores to the same bytes, which follows core timing as on the chip. `ub_advice` is appended to a
    UBOverflowError (the operator's knobs that shrink the plan). `memo`: a dict the caller keeps between launches of the
    same kernel, tiling and argument types (an aclnn executor run again); the laid-out buffer plans and the
    fact that every stage is compiled are kept there, so a repeated launch skips that host work. Stages are
    compiled (or loaded from numba's disk cache) before the first core starts; `on_compile(event, stage_name,
    seconds)` hears of each stage that had to be compiled ("start" / "done"), and the report keeps compile
    time apart from run time. `check` (a name of layout.MODES: "race" / "strict" / "init" / "sync" / "all", or
    "off"; default the enclosing check.checked() block, else $ASCEND_SIM_CHECK) runs the launch in checked mode:
    pipe races raise PipeRaceError, a queue buffer used while free or enqueued raises QueueError, a read of UB or
    workspace bytes nothing wrote raises UninitializedReadError (see check.py). `reference` (the upstream version
    the kernel follows) is carried into the report as it is. `workspace`: the aclnn workspace the args' workspace
    tensors lie in (mode "init" tracks which of its bytes the cores wrote; every other GM tensor counts as written).
    """
    where: dict[str, Any] = dict(op=kernel.op, tiling_key=tiling_key)
    threads = resolve_threads(threads)
    check_mode = checking.resolve(check)
    block_dim = errors.whole_number("block_dim", block_dim, 1, 2 ** 31 - 1, "blocks",
                                    lambda message: errors.SimulatorError(message, **where))
    programs = _Programs(kernel, args)
    memo = {} if memo is None else memo
    key = (id(kernel), block_dim, chip, tuple(plan))
    if memo.get("plans_for") != key:
        memo["plans_for"], memo["plans"], memo["compiled"] = key, _lay_out(kernel, programs.phases, plan, block_dim,
                                                                           args, chip, ub_advice, where), False
    every_item = programs.every_item()
    if any(item[0] == _SYNC for item in every_item) and block_dim > chip.aiv_num:
        raise errors.SyncError(
            f"SyncAll() with {block_dim} blocks on a chip with {chip.aiv_num} vector cores: the blocks would run "
            "in several rounds and the barrier would deadlock", call="SyncAll", **where)
    run = _Run(kernel, programs, memo["plans"], block_dim, args, chip, tuple(gm_names), where, check_mode, workspace)
    compile_s = run.compile(every_item, memo, on_compile)
    # the interpreter holds the GIL: one thread, cores one after another (atomics' lock twins rely on it)
    threads = 1 if run.tier == "interpreted" else min(threads, block_dim)
    wall = run.run_rounds(threads)
    run.check_flags_down()
    report = run.report(threads, wall, compile_s, reference)
    if run.request is not None:
        run.request.took(report)
    return report


class _Run:
    """One launch in progress: the cores (a CoreSet from the pool) and where each one is in its program.

    launch() drives it through its steps: __init__ (take the cores, attach the cost model's tables, the trace and
    the checked mode's state), compile (every stage compiled or loaded), run_rounds (the cores run between
    SyncAll() barriers until all end), check_flags_down (no flag left up) and report (the RunReport; the cores go
    back to the pool). Between two barriers run_core runs on several threads at once, each on its own core: the
    per-core lists (live_phase, program, pc) are only ever written at a core's own index.
    """

    def __init__(self, kernel: Kernel, programs: _Programs, layout: _Layout, block_dim: int, args: tuple, chip,
                 gm_names: tuple, where: dict, check_mode: int, workspace):
        self.kernel, self.programs, self.layout, self.block_dim, self.args = kernel, programs, layout, block_dim, args
        self.chip, self.gm_names, self.where, self.check_mode = chip, gm_names, where, check_mode
        self.workspace = workspace
        self.phases = phases = programs.phases
        self.cost = cost = chip_cost(chip)
        self.request = request = current_request()
        self.trace_rows = request.rows_for(block_dim) if request is not None else {}
        self.crew = crew = CORE_SETS.take(block_dim, chip.ub_size, QUE_BASE + layout.slots)
        crew.reset(_state_template(crew.width, chip.max_block_count, chip.npu_arch, cost,
                                   min(block_dim, chip.aiv_num)))
        self.cores, self.states = cores, states = crew.cores, crew.states
        if cost.enabled:
            gm_cost.attach_l2(states, *crew.l2_tables(cost.l2_table(min(block_dim, chip.aiv_num))[0]))
            if cost.same_address_bytes_per_cycle > 0:
                gm_cost.attach_same_address_log(states, crew.same_address_log(SAME_ADDRESS_LOG_ENTRIES))
        self.traces = {i: np.zeros((rows, TRACE_COLS), dtype=np.int64) for i, rows in self.trace_rows.items()}
        for i, rows in self.traces.items():
            timeline.attach_trace(cores[i].state, rows)
        # the states hold the addresses of the shadows and of the workspace map: both live as long as the run does
        self.shadows = [checking.attach(core.state, check_mode, chip.ub_size, kernel.waivers)
                        for core in cores] if check_mode else []
        # GM accesses of different cores, checked at every SyncAll and at the end (crosscore.py), in the race modes
        self.cross = crosscore.CrossCore(states, check_mode, kernel.waivers, crosscore.gm_tensors(args, gm_names),
                                         where) if check_mode & MODE_RACES else None
        self.init_waivers = checking.init_waiver_bits(kernel.name, kernel.waivers, phases) if check_mode else []
        self.workspace_map = checking.attach_workspace(states, workspace, kernel.waivers) \
            if check_mode & MODE_INIT else None
        self.sync_marks: list = []
        self.tier = "compiled"
        self.live_phase = [-1] * block_dim      # the phase whose TPipe each core has built (-1: none yet)
        self.program = [programs.top] * block_dim     # each core's items; a branch splices its chosen arm in
        self.pc = [0] * block_dim
        self.entries: dict = {}

    def compile(self, every_item, memo: dict, on_compile) -> float:
        """Every stage's compiled entry, compiled (or loaded) now if this memo has not seen it; the seconds it
        took. Then the TPipe of the first stage is built on all cores."""
        self.entries, unknown = _known_entries(every_item, self.cores[0])
        compile_s = 0.0
        tier = tiers.resolve()
        if tier != "compiled" and (unknown or tier == "interpreted") and self._interpret(tier, unknown):
            if self.programs.top:
                self.start_all(self.programs.top[0])
            return compile_s
        if not memo["compiled"]:
            if unknown:
                compile_s = ensure_compiled(_stage_calls(self.programs), on_compile)
            memo["compiled"] = True
        for item, entry_key, call in unknown:
            self.entries[id(item)] = _remember_entry(entry_key, item[2], call)
        if self.programs.top:
            self.start_all(self.programs.top[0])
        return compile_s

    def _interpret(self, tier: str, unknown: list) -> bool:
        """Whether this launch runs in the interpreter (tier.runs_interpreted); if so, every stage entry is its
        Python twin."""
        calls = [(item[2], call) for item, _, call in unknown]
        if not tiers.runs_interpreted(calls, tiers.gm_bytes(self.args, self.workspace), tiers.interpret_max_bytes(),
                                      tier):
            return False
        from .interpret import stage_twin
        self.entries = {id(item): stage_twin(item[2]) for item in self.programs.every_item() if item[0] == _STAGE}
        self.tier = "interpreted"
        return True

    def start_all(self, item) -> None:
        """Where every core's next item is this stage of a TPipe none has live: build that TPipe on all cores at
        once, as each core's start_pipe would when it reached the stage."""
        p, live_phase, block_dim = item[1], self.live_phase, self.block_dim
        if item[0] != _STAGE or live_phase.count(live_phase[0]) != block_dim or live_phase[0] == p:
            return
        self.crew.start_pipes(self.layout.core_tables[p])
        if self.check_mode:
            new_tpipe = live_phase[0] < 0 or self.phases[live_phase[0]].pipe != self.phases[p].pipe
            for core, shadow in zip(self.cores, self.shadows, strict=True):
                checking.pipe_built(core.state, shadow, self.init_waivers[p], new_tpipe)
        live_phase[:] = [p] * block_dim
        self.states[:, CHK_OWN_WAIVE] = self.layout.queue_waivers[p]

    def fault_error(self, core) -> errors.SimulatorError:
        """The SimulatorError of the fault a core recorded, its queues named after its live TPipe's."""
        p = max(self.live_phase[core.block_idx], 0)
        return to_error(fault_record(core), core=core.block_idx, op=self.kernel.op, tiling_key=self.where["tiling_key"],
                        call_index=int(core.state[FAULT_CALL_INDEX]), gm_names=self.gm_names,
                        queue_names=self.phases[p].buffers, event_names=HARD_EVENT_NAMES, dtype_names=dt_name)

    def choose_arm(self, item, i: int) -> int:
        branch = item[1]
        arm = branch.choose(self.cores[i], *self.args)
        if isinstance(arm, bool) or not isinstance(arm, (int, np.integer)) or not 0 <= arm < len(branch.arms):
            raise errors.SimulatorError(f"branch {branch.name!r} chose arm {arm!r}; it has {len(branch.arms)}",
                                        core=i, call=f"if ({branch.name})", **self.where)
        return int(arm)

    def run_core(self, i: int):
        """Run core i up to its next SyncAll (returns True) or its end (False); an exception is returned."""
        core, pc, program, live_phase = self.cores[i], self.pc, self.program, self.live_phase
        try:
            items = program[i]
            while pc[i] < len(items):
                item = items[pc[i]]
                pc[i] += 1
                if item[0] == _SYNC:
                    return True
                if item[0] == _BRANCH:
                    items = program[i] = self.programs.arm(item[1], self.choose_arm(item, i)) + items[pc[i]:]
                    pc[i] = 0
                    continue
                _, p, stage, stage_args = item
                if live_phase[i] != p:
                    tables = self.layout.core_tables[p]
                    start_pipe(core, tables[i] if len(tables) > 1 else tables[0])
                    if self.check_mode:     # a new TPipe starts after the old one's work (TPipe::Destroy waits for it)
                        checking.pipe_built(core.state, self.shadows[i], self.init_waivers[p],
                                            live_phase[i] < 0 or self.phases[live_phase[i]].pipe != self.phases[p].pipe)
                    live_phase[i] = p
                    core.state[CHK_OWN_WAIVE] = self.layout.queue_waivers[p]
                self.entries[id(item)](core, *stage_args)
                if core.state[ERR_BASE] != 0:
                    return False
        except Exception as failure:  # noqa: BLE001 - kernels record faults; anything else is a simulator bug
            return failure
        return False

    def run_rounds(self, threads: int) -> float:
        """Run every core to its end, round by round between SyncAll() barriers (the first fault, exception or
        unmatched barrier raises); the host seconds it took."""
        kernel, block_dim, cores, where = self.kernel, self.block_dim, self.cores, self.where
        program, pc = self.program, self.pc
        start = time.perf_counter()
        barriers = 0
        while True:
            outcomes: list = [None] * block_dim
            _run_round(self.run_core, block_dim, threads, outcomes, (kernel.op, kernel.name, block_dim, barriers))
            for core, outcome in zip(cores, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    raise errors.SimulatorError(f"{type(outcome).__name__} inside the kernel: {outcome}",
                                                core=core.block_idx, call=f"after call #{int(core.state[CNT_CALLS])}",
                                                **where) from outcome
                if core.state[ERR_BASE] != 0:
                    raise self.fault_error(core)
            waiting = [i for i, o in enumerate(outcomes) if o is True]
            if not waiting:
                break
            if len(waiting) < block_dim:
                done = [i for i, o in enumerate(outcomes) if o is False]
                raise errors.SyncError(
                    f"core(s) {_core_list(waiting)} reached SyncAll() #{barriers + 1} but core(s) {_core_list(done)} "
                    f"ended the kernel after {barriers}: on the chip the waiting cores would hang (cores must reach "
                    "SyncAll() the same number of times)", core=waiting[0], call=f"SyncAll #{barriers + 1}", **where)
            barriers += 1
            self.sync_all()
            if all(items is program[0] for items in program) and pc.count(pc[0]) == block_dim \
                    and pc[0] < len(program[0]):
                self.start_all(program[0][pc[0]])
        return time.perf_counter() - start

    def sync_all(self) -> None:
        """A SyncAll() barrier every core has reached: counted, timed and (checked mode) ordered."""
        states = self.states
        states[:, CNT_SYNC_ALL] += 1
        if self.cost.enabled:
            self.sync_marks.append(_barrier(states, self.cost.sync_all_cycles))
        if self.check_mode:          # with checked mode off no core has a checker state to advance
            if self.cross is not None:
                self.cross.phase_end()
            checking.sync_all([core.state for core in self.cores])

    def check_flags_down(self) -> None:
        """A flag some core left up at the end of the kernel is an UnpairedFlagError."""
        states = self.states
        if states[:, FLAG_BASE:MEMBER_BASE].any():
            core = self.cores[int(np.flatnonzero(states[:, FLAG_BASE:MEMBER_BASE].any(axis=1))[0])]
            evt, event_id = (int(v) for v in np.argwhere(flags(core) != 0)[0])
            raise _leaked_flag(core, evt, event_id, self.where)

    def report(self, threads: int, wall: float, compile_s: float, reference) -> RunReport:
        """The RunReport; the cores go back to the pool, so what it needs of their states is copied out first and
        turned into CoreReport / CoreTime objects only when someone reads them."""
        states, cost, chip, cores, crew = self.states, self.cost, self.chip, self.cores, self.crew
        core_reports = deferred(functools.partial(_core_reports, states[:, :N_COUNTERS].copy()))
        l2_hit_bytes = int(states[:, TL_L2_HIT_BYTES].sum())
        same_address: int | deferred = 0
        if cost.enabled and cost.same_address_bytes_per_cycle > 0:
            used = states[:, TL_SAME_N].copy()
            same_address = deferred(functools.partial(gm_cost.same_address_bytes,
                                                      crew.same_address_logs[:, :2 * int(used.max(initial=0))].copy(),
                                                      used, chip.aiv_num))
        times = functools.partial(_core_times, states[:, TL_END:TL_DONE + N_PIPES].copy())
        trace = None
        if self.trace_rows:
            trace = KernelTrace(tuple(CoreTrace(i, rows[: int(min(cores[i].state[TL_TRACE_N], len(rows)))],
                                                int(cores[i].state[TL_TRACE_N])) for i, rows in self.traces.items()),
                                tuple(self.sync_marks))
        check_mode = self.check_mode
        extra = dict(checked=check_mode, waived_races=int(states[:, CHK_WAIVED].sum())) if check_mode else {}
        if self.cross is not None:
            extra.update(self.cross.finish())
        if check_mode & MODE_INIT:
            extra["waived_uninit_reads"] = int(states[:, CHK_INIT_WAIVED].sum())
        # the checked cores' shadows and the workspace map lived until here
        self.shadows = []
        self.workspace_map = None
        CORE_SETS.give(crew)
        kernel, layout = self.kernel, self.layout
        return RunReport(
            op=kernel.op, kernel=kernel.name, tiling_key=self.where["tiling_key"], block_dim=self.block_dim,
            soc=chip.name, ub_capacity_bytes=chip.ub_size, ub_plan=layout.ub_plan, ub_plan_bytes=layout.ub_plan_bytes,
            # cores and estimate are made on first read: RunReport's fields resolve a deferred (report._MaybeDeferred)
            cores=cast(tuple, core_reports), wall_time_s=wall, threads=threads, compile_time_s=compile_s,
            tier=self.tier, extra=extra,
            estimate=cast(Any, deferred(functools.partial(_estimate, cost, chip.aiv_num, times, core_reports,
                                                          len(self.sync_marks), l2_hit_bytes, same_address))),
            trace=trace, reference=reference)


def _leaked_flag(core, evt: int, event_id: int, where: dict) -> errors.UnpairedFlagError:
    """The UnpairedFlagError of a flag still up when the kernel ends; in checked mode "sync" it names the SetFlag."""
    event = HARD_EVENT_NAMES[evt]
    src, dst = flag_pipes(event)
    set_call = int(core.state[CHK_FLAG_SET_CALL + evt * EVENT_IDS + event_id]) or None
    at = f" (call #{set_call})" if set_call else ""
    return errors.UnpairedFlagError(
        f"SetFlag<{event}>({event_id}){at}: {src} raised the flag for {dst} but no WaitFlag<{event}>({event_id}) "
        "took it down by the end of the kernel: the flag leaks into the next operator on the NPU (add the WaitFlag, "
        "or drop the SetFlag)", event=event, event_id=event_id, src_pipe=src, dst_pipe=dst, set_call=set_call,
        core=core.block_idx, call="kernel end", **where)


def _barrier(states: np.ndarray, sync_all_cycles: int) -> int:
    """timeline.barrier on every row of `states` at once: all pipes of all cores resume together, after the
    last pipe of the slowest core is done (DMA landed). Returns the cycle they resume at."""
    resume = int(max(states[:, TL_END:TL_END + N_PIPES].max(), states[:, TL_DONE:TL_DONE + N_PIPES].max())) \
        + sync_all_cycles
    states[:, TL_END:TL_END + N_PIPES] = resume
    states[:, TL_DONE:TL_DONE + N_PIPES] = resume
    return resume


def _core_reports(counts: np.ndarray) -> tuple[CoreReport, ...]:
    """Every core's CoreReport from the counter words of its state (one row per core)."""
    return tuple(CoreReport.from_counters(i, row) for i, row in enumerate(counts.tolist()))


def _core_times(clocks: np.ndarray) -> tuple[CoreTime, ...]:
    """Every core's CoreTime from the state words [TL_END, TL_DONE + N_PIPES) (one row per core): its end cycle
    as timeline.end_cycle gives it, and its pipes' busy cycles."""
    ends = np.maximum(clocks[:, :N_PIPES].max(axis=1), clocks[:, TL_DONE - TL_END:].max(axis=1)).tolist()
    busy = clocks[:, TL_BUSY - TL_END:TL_BUSY - TL_END + N_PIPES].tolist()
    return tuple(CoreTime(i, end, tuple(b)) for i, (end, b) in enumerate(zip(ends, busy, strict=True)))


def _estimate(cost, aiv_num: int, times, core_reports, sync_alls: int, l2_hit_bytes: int, same_address) -> Estimate:
    same = same_address.value() if isinstance(same_address, deferred) else same_address
    return Estimate(cost, aiv_num, times(), gm_bytes_of(CoreReport.combined(core_reports.value())), sync_alls,
                    l2_hit_bytes, same)


def chip_cost(chip) -> CostModel:
    """The chip profile's cost model (a profile without one gets the default CostModel)."""
    cost = getattr(chip, "cost", None)
    return cost if isinstance(cost, CostModel) else CostModel()


@dataclass(frozen=True)
class _Layout:
    """A launch's buffer plans, laid out: what launch() needs of them, ready to use.

    Attributes:
        core_tables: per phase, the queue tables of its cores (one when every core builds the same TPipe).
        slots: state words the largest queue table takes.
        ub_plan: the report's rows (PipePlan.table) of every distinct first-core plan.
        ub_plan_bytes: the largest laid-out plan's bytes.
        queue_waivers: per phase, the bit mask of its waived queues (CHK_OWN_WAIVE).
    """
    core_tables: tuple
    slots: int
    ub_plan: tuple
    ub_plan_bytes: int
    queue_waivers: tuple


# Laid-out plans are kept for the process, so a fresh executor (every friendly call makes one) does not lay out
# the same plan again. A layout depends on the kernel's phases, the plan, the block count, the chip and the
# messages' op / tiling key / advice; a phase with a core_plan also depends on the launch arguments, so for those
# kernels only the laid-out plan of each distinct row tuple is kept.
_LAYOUTS: dict = {}
_PIPE_PLANS: dict = {}
_LAYOUT_LOCK = threading.Lock()
MAX_LAYOUTS = 512
"""Laid-out plans remembered (of each kind); beyond it the oldest are forgotten."""


def _remember(cache: dict, key, value) -> None:
    with _LAYOUT_LOCK:
        if len(cache) >= MAX_LAYOUTS:
            del cache[next(iter(cache))]
        cache[key] = value


def _lay_out(kernel, phases, plan, block_dim, args, chip, ub_advice, where) -> _Layout:
    """Every core's InitBuffer rows per TPipe, laid out; equal plans are laid out (and checked against the UB)
    once (UBOverflowError if one does not fit)."""
    per_args = any(phase.core_plan is not None for phase in phases)
    key = None
    if not per_args:
        try:
            key = (id(kernel), block_dim, chip, tuple(plan), ub_advice, where["tiling_key"])
            hit = _LAYOUTS.get(key)
        except TypeError:       # an unhashable plan or profile: laid out every time
            key = hit = None
        if hit is not None and hit[0] is kernel:
            return hit[1]
    groups = _group_plan(kernel, phases, plan)
    laid_out: dict = {}
    core_tables = []
    first_plans = []
    for phase, rows in zip(phases, groups, strict=True):
        per_core = []
        for i in range(block_dim if phase.core_plan is not None else 1):
            core_rows = tuple(phase.core_plan(i, tuple(rows), *args)) if phase.core_plan is not None else tuple(rows)
            if core_rows not in laid_out:
                laid_out[core_rows] = _plan_pipe(core_rows, chip.ub_size, ub_advice, phase.pipe, where)
            per_core.append(laid_out[core_rows])
        first_plans.append(per_core[0][0])
        core_tables.append(tuple(table for _, table in per_core))
    pipe_plans = list({id(p): p for p in first_plans}.values())
    layout = _Layout(tuple(core_tables), max((t.size for tables in core_tables for t in tables), default=0),
                     tuple(row for p in pipe_plans for row in p.table()),
                     max(p.used_bytes for p, _ in laid_out.values()),
                     tuple(sum(1 << k for k, name in enumerate(ph.buffers) if name in ph.waived_queues)
                           for ph in phases))
    if key is not None:
        _remember(_LAYOUTS, key, (kernel, layout))      # the kernel is kept alive with it: its id stays its own
    return layout


def _plan_pipe(rows: tuple, ub_size: int, advice: str, pipe: str, where: dict):
    """plan_pipe of `rows` and its (read-only) queue table, remembered for the process."""
    key: tuple | None = (rows, ub_size, advice, pipe, where["op"], where["tiling_key"])
    hit: tuple | None
    try:
        hit = _PIPE_PLANS.get(key)
    except TypeError:
        key = hit = None
    if hit is not None:
        return hit
    laid = plan_pipe(rows, ub_size, advice=advice, pipe=pipe, **where)
    table = laid.queue_table()
    table.flags.writeable = False
    if key is not None:
        _remember(_PIPE_PLANS, key, (laid, table))
    return laid, table


def _core_list(cores: list[int]) -> str:
    shown = ", ".join(str(i) for i in cores[:8])
    return shown + (f", ... ({len(cores)} cores)" if len(cores) > 8 else "")
