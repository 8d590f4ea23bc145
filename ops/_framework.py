"""Pieces every operator's aclnn layer shares: OpDef dtype-column matching, GM tensors for the
kernels, and the executor that carries phase one's work to phase two and launches the kernel.
Argument checks live in _validate.py.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ascend_sim import CoreReport, Kernel, OutOfBoundsError, RunReport, launch, stage_calls
from ascend_sim.check import resolve as resolve_check
from ascend_sim.datacopy import GlobalTensor
from ascend_sim.dtypes import dt_of, gm_view
from ascend_sim.estimate import LaunchSequence
from ascend_sim.host_cost import HostWork, modelled_estimate
from ascend_sim.launch import chip_cost
from tiling.common import TilingResult, dtype_name
from tiling.reference import reference
from tiling.status import ParamInvalidError, ParamNullptrError

from ._validate import byte_count, check_no_alias


def match_dtype_columns(op: str, named: Sequence[tuple[str, Any]], columns: Sequence[Sequence[Any]]) -> int:
    """The OpDef check of an auto-generated aclnn: the present tensors' dtypes must form one declared column.

    `named` lists (argument name, tensor or None) in OpDef order; each column lists one dtype per argument.
    Returns the matching column index or raises 161002.
    """
    present = [(i, name, np.dtype(t.dtype)) for i, (name, t) in enumerate(named) if t is not None]
    for k, col in enumerate(columns):
        if all(np.dtype(col[i]) == dt for i, _, dt in present):
            return k
    got = ", ".join(f"{name}={dtype_name(dt)}" for _, name, dt in present)
    supported = "; ".join("(" + ", ".join(dtype_name(d) for d in col) + ")" for col in columns)
    raise ParamInvalidError(f"{op}: dtype combination {got} is not supported; supported columns "
                            f"({', '.join(n for n, _ in named)}): {supported}")


def gm_tensor(array: np.ndarray | None, index: int, empty_dtype=np.uint16) -> GlobalTensor:
    """A kernel GlobalTensor over the array's bytes (no copy); an absent tensor is empty."""
    data = gm_view(array) if array is not None else np.zeros(0, dtype=empty_dtype)
    return GlobalTensor(data, index, 0)


def dtype_code(array, default: int) -> int:
    return default if array is None else dt_of(array.dtype)


@dataclass(frozen=True)
class IndexLink:
    """GM tensor `target` is addressed at element `index * scale + (0 .. scale-1)`, `index` read from the
    index tensor `source`: lets an out-of-bounds access be traced to the bad index value.

    Attributes:
        source: name of the index tensor (a key of Executor.tensors).
        target: name of the addressed GM tensor (as in the kernel's gm_names).
        scale: elements of `target` per index step (a row length, an expert count).
        rows: valid index values are [0, rows).
    """
    source: str
    target: str
    scale: int
    rows: int


def trace_index(error: OutOfBoundsError, links, tensors: dict) -> OutOfBoundsError:
    """`error` extended by the index element whose value produced its GM address, when one explains it."""
    if error.tensor is None or error.byte_range is None:
        return error
    for link in links:
        target, index = tensors.get(link.target), tensors.get(link.source)
        if link.target != error.tensor or target is None or index is None or link.scale <= 0 or not index.size:
            continue
        row = (error.byte_range[0] // target.itemsize) // link.scale
        flat = index.reshape(-1)
        hits = np.flatnonzero(flat == row)
        if not hits.size:     # an address past the row's end: any out-of-range value is the culprit
            hits = np.flatnonzero((flat < 0) | (flat >= link.rows))
        if hits.size:
            k = int(hits[0])
            return error.with_index_source(link.source, k, int(flat[k]), f"[0, {link.rows})")
    return error


def launches(block_dim: int, writes=()) -> bool:
    """The one rule for "nothing to launch", shared by every operator: a kernel runs only on at least one core
    and only when at least one of the arrays it writes (`writes`; unknown when empty) has an element. The real
    l0 wrappers skip the launch of an empty result (MoeInitRoutingV2Grad, MoeFinalizeRoutingV2) and a kernel
    cannot run on zero cores; a launch with nothing to write would move nothing anyway. The checks and the
    tiling an operator runs before its launch still run (and fail where the real ones fail)."""
    if block_dim <= 0:
        return False
    return not writes or any(w is not None and w.size for w in writes)


@dataclass
class Executor:
    """aclOpExecutor: what phase one prepared for phase two.

    Attributes:
        op: operator name.
        tiling: the TilingResult (`executor.tiling`).
        report: the RunReport of the last run (`executor.report`), None before the first run.
        api: the aclnn function that may run it (e.g. "aclnnMoeTokenPermuteV2"); run_executor checks it.
        ub_advice: what shrinks this operator's UB plan, appended to a UBOverflowError.
        tensors: the validated inputs and outputs by name (the workspace must not overlap them).
        ub_plan: the buffers of the TPipes the kernel builds, when it builds fewer than the tiling plans.
        index_links: IndexLinks that trace an out-of-bounds GM access to the index value behind it.
        bind_workspace: for kernels that keep data in the workspace, `(args, workspace, workspace_size) -> args`
            with the workspace's bytes bound into the kernel arguments.
        writes: the arrays the kernel fills (the op's outputs, or an l0 operator's own result tensors); with
            them the executor decides whether there is anything to launch (see `launches`).
    """
    op: str
    tiling: TilingResult
    kernel: Kernel | None
    args: tuple
    gm_names: tuple[str, ...]
    report: RunReport | None = None
    api: str = ""
    ub_advice: str = ""
    tensors: dict = field(default_factory=dict)
    ub_plan: tuple | None = None
    index_links: tuple = ()
    bind_workspace: Callable | None = None
    writes: tuple = ()
    _memo: dict = field(default_factory=dict, repr=False)   # laid-out plans, compiled flag: see launch()
    # one run at a time: a run writes the executor's outputs and report (see run_executor)
    _run_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self):
        if self.kernel is not None and not launches(self.tiling.block_dim, self.writes):
            self.kernel = None

    @property
    def workspace_size(self) -> int:
        return self.tiling.workspace_size

    def launch_args(self, workspace: np.ndarray | None) -> tuple:
        """The kernel's arguments with `workspace` (the caller's bytes) bound where the kernel keeps data."""
        if self.bind_workspace is None:
            return self.args
        if workspace is None:
            raise ParamNullptrError(f"{self.op} keeps data in its workspace: run it through the second aclnn "
                                    "phase with a workspace of the size the first phase returned")
        return self.bind_workspace(self.args, workspace, self.workspace_size)

    def stage_calls(self) -> list:
        """Every (stage, args) a run would make (a stand-in workspace bound): what to compile ahead of it."""
        if self.kernel is None:
            return []
        stand_in = np.empty(self.workspace_size, dtype=np.uint8) if self.bind_workspace is not None else None
        return stage_calls(self.kernel, self.launch_args(stand_in))

    def run(self, workspace: np.ndarray | None = None, threads: int | None = None,
            check: str | None = None) -> RunReport | None:
        if self.kernel is None:  # nothing to launch (see `launches`)
            return None
        args = self.launch_args(workspace)
        plan = self.tiling.ub_plan if self.ub_plan is None else self.ub_plan
        try:
            self.report = launch(self.kernel, block_dim=self.tiling.block_dim, plan=plan, args=args,
                                 chip=self.tiling.soc, gm_names=self.gm_names, tiling_key=self.tiling.tiling_key,
                                 threads=threads, ub_advice=self.ub_advice, on_compile=compile_listener(),
                                 memo=self._memo, check=check, reference=reference(),
                                 workspace=workspace if self.bind_workspace is not None else None)
        except OutOfBoundsError as e:
            raise trace_index(e, self.index_links, self.tensors) from None
        return self.report


@dataclass(frozen=True)
class HostStep:
    """One l0 operator of a composite aclnn that comes from another CANN library (Transpose, Cast, Sort,
    MaskedScatter, Mul, ZerosLike, ViewCopy, GatherV2 ...): run as NumPy on the host, in the aclnn's order.

    Attributes:
        name: the l0 call, e.g. "l0op::Sort".
        run: fills its output arrays in place (they were allocated in phase one).
        work: what the step moves and computes as the device kernel it is on the chip (ascend_sim.host_cost), for
            its modelled estimate; None for a step that is no chip kernel (nothing is estimated for it).
    """
    name: str
    run: Callable[[], None]
    work: HostWork | None = None


@dataclass(frozen=True)
class KernelStep:
    """One l0 operator of a composite aclnn whose kernel lives in ops-transformer: a simulated launch.

    Attributes:
        name: the l0 call, e.g. "l0op::MoeTokenUnpermuteWithRoutingMap".
        executor: the Executor of that launch (its inputs may be arrays earlier steps fill at run time).
    """
    name: str
    executor: "Executor"


@dataclass(frozen=True)
class StepReport:
    """What one step of a composite run did: `run` is the RunReport of a simulated kernel (None for a host
    step, or a kernel that had nothing to launch); `work` what a host step does on the chip (None: not estimated)."""
    name: str
    kind: str                   # "kernel" or "host"
    run: RunReport | None
    wall_time_s: float
    work: HostWork | None = None


@dataclass(frozen=True)
class CompositeReport:
    """`executor.report` of a composite aclnn: every step in order. The RunReport-like properties describe
    the simulated kernels together (the op's own kernel first), so front ends print either kind alike; `soc` is the
    chip profile the host steps' modelled estimates use (None: they are not estimated)."""
    op: str
    steps: tuple[StepReport, ...]
    soc: Any = None

    @property
    def reference(self) -> dict:
        """The upstream version whose chain and kernels the run follows (tiling.reference)."""
        return reference()

    @property
    def kernel_runs(self) -> list[RunReport]:
        return [s.run for s in self.steps if s.run is not None]

    @property
    def main(self) -> RunReport | None:
        """The first simulated kernel's RunReport (the operator's own l0 kernel)."""
        runs = self.kernel_runs
        return runs[0] if runs else None

    @property
    def total(self) -> CoreReport:
        return CoreReport.combined(run.total for run in self.kernel_runs)

    @property
    def wall_time_s(self) -> float:
        return sum(s.wall_time_s for s in self.steps)

    def step_estimates(self) -> list:
        """(step name, Estimate or ModelledEstimate) of every step that has one, in order: a simulated kernel's
        timeline estimate, or a host step's modelled estimate (ascend_sim.host_cost) on `soc`."""
        return [(s.name, e) for s in self.steps if (e := self.estimate_of(s)) is not None]

    def estimate_of(self, step: StepReport):
        """One step's estimate: a simulated kernel's timeline Estimate, a host step's ModelledEstimate on `soc`, or
        None (a kernel that had nothing to launch, a host step that is no chip kernel, or no chip to model it on)."""
        if step.run is not None:
            return step.run.estimate
        if step.work is not None and self.soc is not None:
            return modelled_estimate(step.work, self.soc.aiv_num, chip_cost(self.soc))
        return None

    @property
    def estimate(self) -> LaunchSequence:
        """The whole aclnn call's estimated chip time: its steps one after another on one stream (the sum of the
        simulated kernels' estimates and the host steps' modelled ones, no overlap between steps)."""
        return LaunchSequence(tuple(self.step_estimates()))

    def breakdown(self) -> list[tuple[str, str, float, str]]:
        """(step, "simulated" | "modelled", us, bound) per estimated step: what `ascend-sim profile` tabulates."""
        return [(name, "modelled" if getattr(e, "modelled", False) else "simulated", e.time_us, e.bound)
                for name, e in self.step_estimates()]

    def to_csv(self, path=None) -> str:
        """PipeUtilization.csv rows of every simulated kernel, with a leading `kernel` column."""
        return self.estimate.to_csv(path)

    @property
    def compile_time_s(self) -> float:
        return sum(r.compile_time_s for r in self.kernel_runs)

    def __getattr__(self, name):
        # block_dim, threads, cores, kernel, ub_plan_bytes ...: those of the op's own kernel
        if name.startswith("_"):
            raise AttributeError(name)
        main = self.main
        if main is None:
            raise AttributeError(f"{name}: no simulated kernel ran")
        return getattr(main, name)

    def __str__(self) -> str:
        lines = [f"{self.op}: {len(self.steps)} steps"]
        for k, s in enumerate(self.steps, 1):
            where = "simulated kernel" if s.kind == "kernel" else "host (NumPy)"
            lines.append(f"  {k}. {s.name} [{where}] {s.wall_time_s * 1e3:.2f} ms")
            if s.run is not None:
                lines += ["     " + line for line in str(s.run).splitlines()]
        est = self.estimate
        if len(est.launches) > 1:
            modelled = sum(1 for _, kind, _, _ in self.breakdown() if kind == "modelled")
            lines.append(f"  whole call: estimate {est.time_us:,.2f} us over {len(est.launches)} steps "
                         f"({modelled} modelled, not simulated)")
        return "\n".join(lines)


@dataclass
class Composite:
    """aclOpExecutor of a hand-written aclnn that chains several l0 operators.

    Attributes:
        op: operator name.
        tiling: the TilingResult of the operator's own l0 kernel (`executor.tiling`).
        steps: KernelSteps and HostSteps in the aclnn's order.
        api: the aclnn function that may run it.
        tensors: the validated inputs and outputs by name (the workspace must not overlap them).
        report: CompositeReport of the last run.
        workspace_size: bytes the first phase asks for (the kernels run one after another on it).
        soc: the chip profile, where neither `tiling` nor a kernel step has one (for the host steps' estimates).
    """
    op: str
    tiling: TilingResult | None
    steps: list
    api: str = ""
    tensors: dict = field(default_factory=dict)
    report: CompositeReport | None = None
    workspace_size: int = 0
    soc: Any = None
    # one run at a time: the chain's intermediates are arrays of this executor (see run_executor)
    _run_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def stage_calls(self) -> list:
        return [call for s in self.steps if isinstance(s, KernelStep) for call in s.executor.stage_calls()]

    def _soc(self):
        """The chip the call runs on: its own tiling's, else the first kernel step's (None if neither has one)."""
        if self.soc is not None:
            return self.soc
        tilings = [self.tiling] + [s.executor.tiling for s in self.steps if isinstance(s, KernelStep)]
        return next((t.soc for t in tilings if t is not None and getattr(t, "soc", None) is not None), None)

    def run(self, workspace: np.ndarray | None = None, threads: int | None = None,
            check: str | None = None) -> CompositeReport:
        done = []
        for step in self.steps:
            start = time.perf_counter()
            if isinstance(step, KernelStep):
                run = step.executor.run(workspace, threads, check)
                # a kernel's time is its cores' time: compiling it first is not part of the run
                wall = run.wall_time_s if run is not None else time.perf_counter() - start
                done.append(StepReport(step.name, "kernel", run, wall))
            else:
                step.run()
                done.append(StepReport(step.name, "host", None, time.perf_counter() - start, step.work))
        self.report = CompositeReport(self.op, tuple(done), self._soc())
        return self.report


_COMPILE_LISTENER = threading.local()


def compile_listener():
    """The function this thread's launches report compilation to (see `listening_to_compiles`)."""
    return getattr(_COMPILE_LISTENER, "fn", None)


@contextmanager
def listening_to_compiles(fn):
    """Within the block, every launch from this thread calls fn("start" | "done", stage, seconds) for each
    kernel stage it must compile first (front ends use it to say that a first run is compiling)."""
    before = compile_listener()
    _COMPILE_LISTENER.fn = fn
    try:
        yield
    finally:
        _COMPILE_LISTENER.fn = before


def launches_of(report) -> list:
    """The RunReport of every kernel launch behind an aclnn call's report: a composite call's kernel steps, a
    one-kernel call's own report, none for None."""
    if report is None:
        return []
    return list(report.kernel_runs) if hasattr(report, "kernel_runs") else [report]


def kernel_reports(runs) -> list:
    """The RunReport of every kernel launch of these RecordedRun rows (a composite call's steps included)."""
    return [launch for run in runs for launch in launches_of(run.executor.report)]


class RecordedRun(NamedTuple):
    """One aclnn run seen by `recorded_runs`: the aclnn name and its executor (`.tiling`, `.report`)."""
    api: str
    executor: object


_RUN_LOG: ContextVar[list | None] = ContextVar("ascend_sim_run_log", default=None)


@contextmanager
def recorded_runs():
    """Collect every aclnn run of this thread (friendly calls included) as RecordedRun rows, in order.

    The log is a context variable, so runs on other threads (or other asyncio tasks) are not mixed in:

        with recorded_runs() as runs:
            ops.moe_token_unpermute(...)
        runs[0].executor.report
    """
    log: list = []
    token = _RUN_LOG.set(log)
    try:
        yield log
    finally:
        _RUN_LOG.reset(token)


def run_friendly(run: Callable, workspace_size: int, executor, check=None) -> None:
    """Phase two of a friendly call: `run` (the operator's aclnn run) with a fresh workspace of the size phase one
    asked for, in checked mode `check` (validated by the friendly call before it allocated anything)."""
    run(np.empty(workspace_size, dtype=np.uint8), workspace_size, executor, check=check)


def validate_check(check) -> None:
    """A friendly call's check= (a name of ascend_sim.layout.MODES, "off" or None), refused with a ConfigError naming
    `check` before any argument is sized: the same rule as the aclnn run's check= (ascend_sim.check.resolve)."""
    resolve_check(check)


def run_executor(api: str, workspace, workspace_size: int, executor: Executor | None, stream=None,
                 check: str | None = None) -> None:
    """Phase two of the aclnn call `api`: check the executor and the workspace, launch the kernel, fill the
    outputs. `check` ("race" / "strict" / "all") runs the kernels in checked mode (ascend_sim.check)."""
    resolve_check(check)        # a bad value fails here, before a composite's host steps run
    if executor is None:
        raise ParamNullptrError("executor is required but is None")
    if not isinstance(executor, (Executor, Composite)):
        raise ParamInvalidError(f"executor must come from the matching {api}GetWorkspaceSize call, got "
                                f"{type(executor).__name__}")
    if executor.api != api:
        raise ParamInvalidError(f"this executor was made by {executor.api}GetWorkspaceSize; "
                                f"run it with {executor.api}, not {api}")
    workspace_size = byte_count("workspace_size", workspace_size)
    if workspace_size < executor.workspace_size:
        raise ParamInvalidError(f"workspace_size {workspace_size} is smaller than the {executor.workspace_size} "
                                "bytes the first phase asked for")
    if executor.workspace_size > 0:
        if workspace is None:
            raise ParamNullptrError(f"workspace is None but {executor.workspace_size} bytes are required")
        if not isinstance(workspace, np.ndarray) or workspace.nbytes < executor.workspace_size:
            raise ParamInvalidError(f"workspace must be an array of at least {executor.workspace_size} bytes")
        if not workspace.flags.writeable or not workspace.flags.c_contiguous:
            raise ParamInvalidError("workspace must be a writeable C-contiguous array (the kernel writes it)")
        check_no_alias(executor.tensors, {"workspace": workspace})
    # Runs of one executor from several threads take turns: a chain's intermediates, the outputs and `report` belong
    # to the executor, so two runs at once would mix their steps (each thread's own workspace does not separate
    # them). Serialised, every run sees its own complete chain and the outputs hold a whole run's result.
    with executor._run_lock:
        executor.run(workspace, check=check)
    log = _RUN_LOG.get()
    if log is not None:
        log.append(RecordedRun(api, executor))
