"""`ascend-sim run OP ...`: one case through both aclnn phases, checked against the golden, with the work per pipe."""
from __future__ import annotations

from ascend_sim import default_threads

from .._framework import listening_to_compiles
from .common import (
    CompileProgress,
    add_case_parser,
    add_routing_flag,
    announce_compile,
    check_flags_apply,
    check_inputs_fit_memory,
    cold_stages,
    prepare_op,
    print_json,
    print_per_core,
    print_run,
    run_op,
    soc_of,
)
from .jsonout import run_json
from .operators import op_spec


def add_parser(sub) -> None:
    p = add_case_parser(sub, "run", "run one case, check it against the golden, report the per-pipe work")
    p.add_argument("--no-check", action="store_true", help="skip the golden comparison")
    p.add_argument("--per-core", action="store_true", help="also show every core's counters")
    add_routing_flag(p)


def command(a) -> int:
    spec = op_spec(a.op)
    soc = soc_of(a)
    check_flags_apply(a, spec, soc)
    check_inputs_fit_memory(a, spec)
    args = spec.make_inputs(a)
    _, _, _, executor = prepare_op(spec, args, soc)
    default_threads()       # a bad ASCEND_SIM_THREADS is the one error line, before any compile notice
    cold = cold_stages([executor])
    if not a.json:
        announce_compile(cold)
    with listening_to_compiles(CompileProgress() if not a.json else None):
        facts = run_op(spec, args, soc, check=not a.no_check)
    if a.json:
        print_json(dict(op=a.op, **run_json(a.op, facts, a.per_core)))
    else:
        print(f"{a.op} on {soc.name}")
        print_run(facts, "  ")
        if a.per_core:
            print_per_core(facts["report"])
    return 0 if facts.get("exact", True) else 1
