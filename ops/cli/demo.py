"""`ascend-sim demo`: a quick tour (one small case per operator, plus the Ascend 950 MX quantisation), or with
`--all` every operator's demo cases on built-in MoE shapes, checked, then a table.

A cold run compiles kernel stages; with more than one CPU a forked process compiles from the other end of the
list while this one compiles and runs from the front (the same tickets `ascend-sim warmup` uses).
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, replace
from typing import Any

from ascend_sim import SimulatorError, UBOverflowError, ensure_compiled, stage_signature
from ascend_sim import tier as tiers
from tiling import get_soc
from tiling.status import AclnnError

from .._framework import kernel_reports, listening_to_compiles, recorded_runs
from ..common.cli_spec import DemoCase
from ..common.routing import routing_name
from .common import (
    CompileProgress,
    add_chip_flags,
    add_routing_flag,
    announce_compile,
    announce_interpreting,
    cold_stages,
    prepare_op,
    print_json,
    print_run,
    run_op,
    soc_of,
    ub_plan_json,
)
from .jsonout import call_estimate_json, steps_json, verdict
from .operators import OPS

COMPILE_WORKER_TIMEOUT_S = 900


def add_parser(sub) -> None:
    demo = sub.add_parser("demo", help="a quick tour: one small case of every operator, checked against its golden "
                                       "(--all: every mode on built-in MoE shapes)")
    demo.add_argument("--all", action="store_true",
                      help="run every mode of every operator on built-in MoE shapes (a cold run compiles about "
                           "a minute and a half on 2 cores)")
    add_chip_flags(demo)
    demo.add_argument("--json", action="store_true",
                      help="print one JSON object (every case: its tiling, UB plan, work, steps, estimate, verdict) "
                           "instead of text")
    add_routing_flag(demo)


# The quick tour: small shapes that still run the real kernels, cases chosen to share kernel stages (kernel G
# serves four of them, the sort and index copy two, the masked select two), so a cold tour compiles few stages.
# (operator, what it shows, `ascend-sim run` flags; "--soc" among them pins the chip, else the demo's --soc)
TOUR_SHAPE = ["--tokens", "64", "--hidden", "256", "--experts", "16"]
TOUR = [
    ("moe_token_permute", "sorts the token x topK slots by expert id, copies each token to its rows",
     ["--topk", "4"]),
    ("moe_token_permute_with_routing_map", "selects the routed (token, expert) pairs of a bool map, sorts, copies",
     ["--topk", "4"]),
    ("moe_token_unpermute", "gathers each token's topK rows and sums them weighted by its probs",
     ["--topk", "4"]),
    ("moe_token_unpermute_with_routing_map",
     "picks each slot's prob through the routing map, then the same weighted sum",
     ["--topk", "4"]),
    ("moe_token_permute_grad", "sums each token's topK gradient rows back into one (no probs)",
     ["--topk", "4"]),
    ("moe_token_permute_with_routing_map_grad",
     "sums each token's gradient rows; MaskedScatter puts the probs' gradient back in the map",
     ["--topk", "4"]),
    ("moe_token_unpermute_grad", "scatters the output gradient to the permuted rows, probs gradient by row dots",
     ["--topk", "4"]),
    ("moe_token_unpermute_with_routing_map_grad", "scatters the output gradient to the permuted rows (no probs)",
     ["--topk", "4", "--no-probs"]),
    ("moe_token_permute", "Ascend 950 chain MoeInitRoutingV3: arch35 sort, then gather with MXFP8 E4M3FN quantisation",
     ["--topk", "4", "--soc", "ascend950", "--quant-mode", "3"]),
    ("moe_token_permute", "the same chain quantising to MXFP4 E2M1 (two codes a byte, E8M0 scales)",
     ["--topk", "4", "--soc", "ascend950", "--quant-mode", "9"]),
]


def demo_cases(soc, ub_size: int | None = None, aiv_num: int | None = None, values: bool = True,
               zipf: float | None = None) -> list[DemoCase]:
    """Every operator's demo cases with their inputs, in the operators' order (built-in shapes; the chip profile
    from the flags unless marked, and the custom UB size / core count applied to the marked profiles too).
    values=False: the large float tensors stay zero (enough to tile and compile the cases, at no cost). zipf: the
    routing skew (`--routing zipf:S`; None: uniform, the cases as always)."""
    if zipf is None:
        return [case for spec in OPS.values() for case in spec.demo_cases(soc, ub_size, aiv_num, values)]
    return [replace(case, shape=f"{case.shape}, routing {routing_name(zipf)}")
            for spec in OPS.values() for case in spec.demo_cases(soc, ub_size, aiv_num, values, zipf=zipf)]


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
    owner: dict = {}
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
    return _command_all(a) if a.all else _command_tour(a)


@dataclass(frozen=True)
class TourCase:
    """One stop of the quick tour: a DemoCase and the sentence that says what the operator did."""
    case: DemoCase
    what: str


def tour_cases(soc, ub_size: int | None = None, aiv_num: int | None = None,
               zipf: float | None = None) -> list[TourCase]:
    """The quick tour's cases with their inputs (small; drawn as `ascend-sim run` draws them). A case pinned to
    another chip gets that chip's profile with the custom UB size / core count applied."""
    from . import build_parser  # the `run` parser reads the flags; ops.cli imports this module
    parser = build_parser()
    out = []
    for op, what, flags in TOUR:
        routing = [] if zipf is None else ["--routing", routing_name(zipf)]
        a = parser.parse_args(["run", op, *TOUR_SHAPE, *flags, *routing])
        case_soc = soc if "--soc" not in flags else get_soc(a.soc, ub_size=ub_size, aiv_num=aiv_num)
        shape = f"{a.tokens}x{a.hidden}, {a.experts} experts, topK {a.topk}" + \
            (f", routing {routing_name(zipf)}" if zipf is not None else "")
        label = what.split(",")[0]
        out.append(TourCase(DemoCase(op, label, case_soc, OPS[op].make_inputs(a), shape), what))
    return out


def _estimate_us(rep) -> float | None:
    """The estimated chip time of a call: the sum of its steps for a composite aclnn, else its one launch's."""
    if rep is None:
        return None
    rows = rep.breakdown() if hasattr(rep, "breakdown") else []
    if rows:
        return sum(r[2] for r in rows)
    return rep.estimate.time_us if rep.estimate is not None else None


def _command_tour(a) -> int:
    soc = soc_of(a)
    start = time.perf_counter()
    stops = tour_cases(soc, a.ub_size, a.cores, a.routing)
    cases = [t.case for t in stops]
    executors = _prepared_executors(cases)
    cold = cold_stages(list(executors.values()))
    # tier "auto" runs the tour's small cold launches in the interpreter while a background process compiles them;
    # tier "compiled" compiles first, in two processes
    interpreting = bool(cold) and tiers.resolve() != "compiled"
    worker = _start_compile_worker(list(executors.values())) \
        if not interpreting and len(cold) > 2 and _usable_cpus() > 1 else None
    if interpreting:
        announce_interpreting(cold)
    else:
        announce_compile(cold, 2 if worker else 1)
    rows: list[dict] | None = [] if a.json else None
    if rows is None:
        print(f"ascend-sim quick tour: one small case of every operator on {soc.name}, then the Ascend 950 MX "
              "quantisation; each run through both aclnn phases and compared with its NumPy golden, bit for bit.")
    progress = CompileProgress()
    ok = True
    with listening_to_compiles(progress):
        if worker is not None:
            _take_tickets(worker[0], worker[1], True, progress)
            worker[2].join(timeout=COMPILE_WORKER_TIMEOUT_S)
            if worker[2].is_alive():    # never seen; its stages then compile here, on first use
                worker[2].terminate()
        with recorded_runs() as runs:
            for k, stop in enumerate(stops):
                ok &= _run_tour_case(k + 1, stop, rows)
    took = time.perf_counter() - start
    launched = kernel_reports(runs)
    if rows is not None:
        print_json(_demo_json("tour", soc, rows, took, progress))
        return 0 if ok else 1
    interpreted = sum(1 for rep in launched if rep.tier == "interpreted")
    print(f"\n{'every case matches its golden' if ok else 'some cases FAILED'} in {took:.1f} s"
          + (f" ({progress.seconds:.1f} s of it compiling)" if progress.count else "")
          + (f"; {interpreted} of {len(launched)} kernel launches ran in the interpreter while their kernels compile "
             "in the background for the next run" if interpreted else "")
          + ". `ascend-sim demo --all` runs every mode on MoE-sized shapes; `ascend-sim run OP --help` one case of "
          "your own.")
    return 0 if ok else 1


def _case_json(case: DemoCase, facts: dict | None, error: str | None) -> dict:
    """One demo case's row: what ran, its verdict (passed; status: the comparison in words, or the error), and
    for a case that ran its tiling key, block dim, UB plan, total work per pipe, steps and estimate."""
    row: dict[str, Any] = dict(op=case.op, label=case.label, shape=case.shape, soc=case.soc.name,
               passed=bool(facts is not None and facts.get("exact")),
               status=verdict(facts) if facts is not None else error, error=error, tiling_key=None, block_dim=None,
               ub_plan_bytes=None, ub_plan=[], total=None, steps=[], estimate=None)
    if facts is not None:
        t, rep = facts["tiling"], facts["report"]
        row.update(tiling_key=t.tiling_key, block_dim=t.block_dim, ub_plan_bytes=t.ub_plan_bytes,
                   ub_plan=ub_plan_json(t.ub_plan), steps=steps_json(rep), estimate=call_estimate_json(rep))
        if rep is not None:
            row["total"] = dataclasses.asdict(rep.total)
            row["total"].pop("block_idx")
    return row


def _demo_json(mode: str, soc, rows: list, seconds: float, progress) -> dict:
    passed = sum(1 for r in rows if r["passed"])
    return dict(mode=mode, soc=soc.name, cases=rows, passed=passed, total=len(rows), ok=passed == len(rows),
                seconds=seconds, compile_seconds=progress.seconds)


def _run_tour_case(number: int, stop: TourCase, rows: list | None = None) -> bool:
    """Run one stop of the tour; print it, or with `rows` (--json) append its row instead."""
    case = stop.case
    if rows is not None:
        try:
            facts, error = run_op(OPS[case.op], case.args, case.soc), None
        except (AclnnError, SimulatorError) as e:
            facts, error = None, _case_error(e)
        rows.append(dict(number=number, what=stop.what, **_case_json(case, facts, error)))
        return rows[-1]["passed"]
    print(f"\n{number:>2}. {case.op} on {case.soc.name}, {case.shape}")
    try:
        facts = run_op(OPS[case.op], case.args, case.soc)
    except (AclnnError, SimulatorError) as e:
        print(f"    {stop.what}\n    FAILED: {_case_error(e)}")
        return False
    t, rep = facts["tiling"], facts["report"]
    verdict = ("within the index-add bound of the golden" if facts.get("within_bound") else "bit-exact vs golden") \
        if facts["exact"] else "MISMATCH vs golden"
    est = _estimate_us(rep)
    steps = len(getattr(rep, "steps", ()) or ())
    print(f"    {stop.what}")
    print(f"    tilingKey {t.tiling_key}, block_dim {t.block_dim}" + (f", {steps} steps" if steps else "")
          + f"; {verdict}" + (f"; estimated {est:,.1f} us on the chip" if est is not None else ""))
    return bool(facts["exact"])


def _command_all(a) -> int:
    soc = soc_of(a)
    start = time.perf_counter()
    # shapes first: what to compile is known before the large inputs are drawn, so a cold run's second
    # compiling process starts at once
    shapes = list(_prepared_executors(demo_cases(soc, a.ub_size, a.cores, values=False, zipf=a.routing)).values())
    cold = cold_stages(shapes)
    worker = _start_compile_worker(shapes) if len(cold) > 2 and _usable_cpus() > 1 else None
    announce_compile(cold, 2 if worker else 1)
    cases = demo_cases(soc, a.ub_size, a.cores, zipf=a.routing)
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
            results[k] = _run_demo_case(case, soc, results, a.json)
        if worker is not None:
            worker[2].join(timeout=COMPILE_WORKER_TIMEOUT_S)
            if worker[2].is_alive():    # never seen; its stages then compile here, on first use
                worker[2].terminate()
        for k in deferred:
            results[k] = _run_demo_case(cases[k], soc, results, a.json)
    ordered = [results[k] for k in range(len(cases))]
    if a.json:
        print_json(_demo_json("all", soc, [r[4] for r in ordered], time.perf_counter() - start, progress))
        return 0 if all(r[1] for r in ordered) else 1
    _print_demo_table(ordered)
    ok = all(r[1] for r in ordered)
    passed = sum(1 for r in ordered if r[1])
    print(f"{'all cases match their goldens' if ok else f'{passed} of {len(ordered)} cases passed'} in "
          f"{time.perf_counter() - start:.1f} s" + (f" ({progress.seconds:.1f} s of it compiling)"
                                                     if progress.count else ""))
    return 0 if ok else 1


def _run_demo_case(case: DemoCase, soc, done: dict, quiet: bool = False):
    """Run one case: (case, passed, status in words, tiling key or None, its JSON row); printed unless quiet (the
    JSON row only when quiet, for --json)."""
    say = (lambda *_: None) if quiet else print
    if not any(r[0].op == case.op for r in done.values()):
        say(f"{chr(10) if done else ''}{demo_title(case.op, soc)}")
    try:
        facts = run_op(OPS[case.op], case.args, case.soc)
        if not quiet:
            print_run(facts, f"  {case.label:<44} {case.shape:<26} ")
        status = verdict(facts)
        row = _case_json(case, facts, None) if quiet else None
        return case, facts["exact"], status, facts["tiling"].tiling_key, row
    except (AclnnError, SimulatorError) as e:
        say(f"  {case.label:<44} {case.shape:<26} FAILED: {_case_error(e)}")
        return case, False, _case_error(e), None, _case_json(case, None, _case_error(e)) if quiet else None


def demo_title(op: str, soc) -> str:
    """The heading of an operator's demo group."""
    return OPS[op].demo_title(soc)


def _print_demo_table(results) -> None:
    print()
    print(f"{'operator':<42} {'case':<44} {'key':>4}  result")
    for case, ok, status, key, _ in results:
        print(f"{case.op:<42} {case.label:<44} {'-' if key is None else key:>4}  {'PASS' if ok else 'FAIL'}  "
              f"{status}")
