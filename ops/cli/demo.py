"""`ascend-sim demo`: every operator's demo cases on built-in MoE shapes, checked, then a table.

A cold run compiles many kernel stages; with more than one CPU a forked process compiles from the
other end of the list while this one compiles and runs from the front.
"""
from __future__ import annotations

import os
import time

from ascend_sim import SimulatorError, UBOverflowError, stage_signature
from ascend_sim._jit import ensure_compiled
from tiling.status import AclnnError

from .._framework import listening_to_compiles
from ..common.cli_spec import DemoCase
from .common import CompileProgress, add_chip_flags, announce_compile, cold_stages, prepare_op, print_run, run_op, \
    soc_of
from .operators import OPS

COMPILE_WORKER_TIMEOUT_S = 900


def add_parser(sub) -> None:
    demo = sub.add_parser("demo", help="run every mode of every operator on built-in MoE shapes and check them")
    add_chip_flags(demo)


def demo_cases(soc, ub_size: int | None = None, aiv_num: int | None = None, values: bool = True) -> list[DemoCase]:
    """Every operator's demo cases with their inputs, in the operators' order (built-in shapes; the chip profile
    from the flags unless marked, and the custom UB size / core count applied to the marked profiles too).
    values=False: the large float tensors stay zero (enough to tile and compile the cases, at no cost)."""
    return [case for spec in OPS.values() for case in spec.demo_cases(soc, ub_size, aiv_num, values)]


def _case_error(e: Exception) -> str:
    if isinstance(e, UBOverflowError):
        return f"UB: plan needs {e.needed_bytes} B of {e.capacity_bytes} B"
    if isinstance(e, AclnnError):
        return f"{type(e).__name__} [{e.status}]: {e.message.splitlines()[0]}"
    if isinstance(e, SimulatorError):
        return f"{type(e).__name__}: {e.summary}"
    return f"{type(e).__name__}: {e}"


def _prepared_executors(cases: list[DemoCase]) -> dict:
    """{case index: aclnn executor} of the cases whose first phase succeeds (the others fail when run)."""
    executors = {}
    for k, case in enumerate(cases):
        try:
            executors[k] = prepare_op(OPS[case.op], case.args, case.soc)[3]
        except (AclnnError, SimulatorError):
            continue        # reported when the case runs
    return executors


def _compile_tickets(executors) -> list[list]:
    """The demo's stages as tickets for two compiling processes: one ticket per stage function (all its
    signatures: two processes saving entries of one function into numba's cache index could drop one), the
    operator with the most tickets first, the other operators after it in reverse. One process takes tickets
    from the front, the other from the back, so each starts on its own operator, shares that operator's
    device functions, and only the last tickets are taken from the other end."""
    per_op: dict = {}
    for ex in executors:
        tickets = per_op.setdefault(ex.op, {})
        for stage, args in ex.stage_calls():
            tickets.setdefault(stage, {}).setdefault(stage_signature(stage, args), (stage, args))
    ops_by_size = sorted(per_op, key=lambda op: (-len(per_op[op]), op))
    merged: dict = {}       # a stage shared by several operators (kernel G, the sorts) is one ticket
    for op in ops_by_size:
        for stage, signatures in per_op[op].items():
            merged.setdefault(stage, {}).update(signatures)
    owner = {}
    for op in ops_by_size:
        for stage in per_op[op]:
            owner.setdefault(stage, op)
    ordered = [list(merged[st].values()) for st in merged if owner[st] == ops_by_size[0]]
    rest = [list(merged[st].values()) for st in merged if owner[st] != ops_by_size[0]]
    return ordered + rest[::-1]


def _take_tickets(tickets, bounds, from_front: bool, on_compile=None) -> None:
    """Compile tickets until none is left; `bounds` is a shared [front, back] array with a lock."""
    while True:
        with bounds.get_lock():
            if bounds[0] > bounds[1]:
                return
            k = bounds[0] if from_front else bounds[1]
            bounds[0 if from_front else 1] += 1 if from_front else -1
        ensure_compiled(tickets[k], on_compile)


def _compile_worker(tickets, bounds) -> None:
    try:
        _take_tickets(tickets, bounds, from_front=False)
    except BaseException:       # noqa: BLE001 - the parent compiles whatever is left; never a traceback here
        os._exit(1)


def _compiled_here(executor) -> bool:
    """Whether every stage of this executor is compiled in this process already."""
    return executor is not None and all(stage_signature(s, a) in s.overloads for s, a in executor.stage_calls())


def _start_compile_worker(executors):
    """A forked process that compiles tickets from the back while this one compiles from the front (cold cache,
    more than one CPU); numba's disk cache hands its stages to this process. None where fork is unavailable."""
    import multiprocessing
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        return None
    tickets = _compile_tickets(executors)
    bounds = ctx.Array("i", [0, len(tickets) - 1])
    process = ctx.Process(target=_compile_worker, args=(tickets, bounds), daemon=True)
    process.start()
    return tickets, bounds, process


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # not on every platform
        return os.cpu_count() or 1


def command(a) -> int:
    soc = soc_of(a)
    start = time.perf_counter()
    # shapes first: what to compile is known before the large inputs are drawn, so a cold run's second
    # compiling process starts at once
    shapes = list(_prepared_executors(demo_cases(soc, a.ub_size, a.cores, values=False)).values())
    cold = cold_stages(shapes)
    worker = _start_compile_worker(shapes) if len(cold) > 2 and _usable_cpus() > 1 else None
    announce_compile(cold, 2 if worker else 1)
    cases = demo_cases(soc, a.ub_size, a.cores)
    executors = _prepared_executors(cases)
    progress = CompileProgress()
    if worker is not None:
        tickets, bounds, process = worker
        with listening_to_compiles(progress):
            _take_tickets(tickets, bounds, True, progress)
    results: dict = {}
    deferred = []
    with listening_to_compiles(progress):
        for k, case in enumerate(cases):
            if worker is not None and worker[2].is_alive() and not _compiled_here(executors.get(k)):
                deferred.append(k)      # its stages are still being compiled by the other process
                continue
            results[k] = _run_demo_case(case, soc, results)
        if worker is not None:
            worker[2].join(timeout=COMPILE_WORKER_TIMEOUT_S)
            if worker[2].is_alive():    # never seen; its stages then compile here, on first use
                worker[2].terminate()
        for k in deferred:
            results[k] = _run_demo_case(cases[k], soc, results)
    results = [results[k] for k in range(len(cases))]
    _print_demo_table(results)
    ok = all(r[1] for r in results)
    passed = sum(1 for r in results if r[1])
    print(f"{'all cases match their goldens' if ok else f'{passed} of {len(results)} cases passed'} in "
          f"{time.perf_counter() - start:.1f} s" + (f" ({progress.seconds:.1f} s of it compiling)"
                                                     if progress.count else ""))
    return 0 if ok else 1


def _run_demo_case(case: DemoCase, soc, done: dict):
    if not any(r[0].op == case.op for r in done.values()):
        print(f"{chr(10) if done else ''}{demo_title(case.op, soc)}")
    try:
        facts = run_op(OPS[case.op], case.args, case.soc)
        print_run(facts, f"  {case.label:<44} {case.shape:<26} ")
        status = ("within the index-add bound" if facts.get("within_bound") else "bit-exact") if facts["exact"] \
            else "MISMATCH vs golden"
        return case, facts["exact"], status, facts["tiling"].tiling_key
    except (AclnnError, SimulatorError) as e:
        print(f"  {case.label:<44} {case.shape:<26} FAILED: {_case_error(e)}")
        return case, False, _case_error(e), None


def demo_title(op: str, soc) -> str:
    """The heading of an operator's demo group."""
    return OPS[op].demo_title(soc)


def _print_demo_table(results) -> None:
    print()
    print(f"{'operator':<42} {'case':<44} {'key':>4}  result")
    for case, ok, status, key in results:
        print(f"{case.op:<42} {case.label:<44} {'-' if key is None else key:>4}  {'PASS' if ok else 'FAIL'}  "
              f"{status}")
