"""`ascend-sim profile`: the estimated chip time of one operator call, its trace, CSV and what-if.

The command runs the operator as `ascend-sim run` does (same shape flags, no golden check) and
prints the timeline's estimate per kernel: time, bounding pipe, pipe use and roofline. With
`--trace` it writes a Chrome / Perfetto JSON of every call of the selected cores, with `--csv`
msprof's PipeUtilization.csv, with `--plot` a PNG of pipe occupancy. When the chip is changed
(`--ub-size`, `--cores`, `--cost`, `--cost-file`), the same call also runs on the stock profile and both
estimates are printed side by side, so the gain of a UB size or a tiling change is visible.

A composite aclnn (several l0 operators) gets a per-step breakdown: each step's time, whether it was
simulated (an ops-transformer kernel) or modelled (an l0 operator of another CANN library, estimated from its
bytes by ascend_sim.host_cost), and what bounds it; the call's estimate is their sum.
"""
from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from ascend_sim import default_threads
from ascend_sim.cost import parse_override
from ascend_sim.cost_file import load_cost_file
from ascend_sim.errors import ConfigError
from ascend_sim.trace import DEFAULT_MAX_EVENTS, plot_occupancy, tracing, write_json
from tiling import get_soc

from .._framework import listening_to_compiles
from .common import (
    CliError,
    CompileProgress,
    add_case_parser,
    add_routing_flag,
    announce_compile,
    check_flags_apply,
    check_inputs_fit_memory,
    cold_stages,
    output_file,
    positive,
    prepare_op,
    print_json,
    ub_plan_json,
)
from .jsonout import call_estimate_json, estimate_json, steps_json
from .operators import op_spec


def add_parser(sub) -> None:
    p = add_case_parser(sub, "profile", "run one case and estimate its chip time per pipe; write a Perfetto trace, "
                                        "msprof's PipeUtilization.csv, a what-if against the stock chip")
    p.add_argument("--trace", metavar="OUT.json", type=output_file,
                   help="write a Chrome / Perfetto trace (open in ui.perfetto.dev)")
    p.add_argument("--csv", metavar="OUT.csv", type=output_file,
                   help="write msprof's PipeUtilization.csv (one row per block)")
    p.add_argument("--plot", metavar="OUT.png", type=output_file,
                   help="draw pipe occupancy per traced core (needs matplotlib)")
    p.add_argument("--trace-cores", metavar="LIST", type=_core_list,
                   help="blocks to trace, e.g. 0,1,5-7 (default: all); with --trace / --plot")
    p.add_argument("--max-events", type=positive, default=DEFAULT_MAX_EVENTS, metavar="N",
                   help=f"calls the trace keeps over all kernels (default {DEFAULT_MAX_EVENTS:,}); the rest are "
                        "counted and the trace says how many were left out")
    p.add_argument("--cost", action="append", default=[], metavar="NAME=VALUE",
                   help="what-if: replace one cost-model figure (e.g. hbm_bytes_per_cycle=1536); repeatable")
    p.add_argument("--cost-file", metavar="FILE.json",
                   help="what-if: cost-model figures from a JSON file (as `ascend-sim calibrate --out` writes); "
                        "--cost figures apply on top")
    add_routing_flag(p)


def _core_list(text: str) -> tuple[int, ...]:
    cores: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, sep, hi = part.partition("-")
            first, last = int(lo), int(hi) if sep else int(lo)
            if first < 0 or last < first:
                raise ValueError
            cores += range(first, last + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected block indices like 0,1,5-7, got {text!r}") from None
    if not cores:
        raise argparse.ArgumentTypeError("give at least one block index")
    return tuple(dict.fromkeys(cores))


def _overrides(a) -> dict:
    out = {}
    if getattr(a, "cost_file", None):
        try:
            out.update(load_cost_file(a.cost_file))
        except ConfigError as e:
            raise CliError(str(e)) from None
    for text in a.cost:
        try:
            name, value = parse_override(text)
        except ConfigError as e:
            raise CliError(str(e)) from None
        out[name] = value
    return out


def _profile_soc(a, custom: bool):
    try:
        if custom:
            return get_soc(a.soc, ub_size=a.ub_size, aiv_num=a.cores, cost=_overrides(a) or None)
        return get_soc(a.soc)
    except ConfigError as e:
        raise CliError(str(e)) from None


def _run(spec, a, soc, *, trace: bool):
    """Both aclnn phases of the operator on `soc`; (tiling, report, trace request or None)."""
    check_flags_apply(a, spec, soc)
    check_inputs_fit_memory(a, spec)
    args = spec.make_inputs(a)
    tiling_result, _, size, executor = prepare_op(spec, args, soc)
    default_threads()       # a bad ASCEND_SIM_THREADS is the one error line, before any compile notice
    announce_compile(cold_stages([executor]))
    with listening_to_compiles(CompileProgress()):
        if trace:
            with tracing(cores=a.trace_cores, max_events=a.max_events) as request:
                spec.run(np.empty(size, dtype=np.uint8), size, executor)
        else:
            request = None
            spec.run(np.empty(size, dtype=np.uint8), size, executor)
    return tiling_result, executor.report, request


def _summary(t, rep) -> dict:
    est = rep.estimate if rep is not None else None
    return dict(ub=t.soc.ub_size, cores=t.soc.aiv_num, key=t.tiling_key, block_dim=t.block_dim,
                plan=t.ub_plan_bytes, us=est.time_us if est is not None else 0.0,
                bound=est.bound if est is not None else "-")


def command(a) -> int:
    spec = op_spec(a.op)
    custom = a.ub_size is not None or a.cores is not None or bool(a.cost) or bool(a.cost_file)
    soc = _profile_soc(a, custom)
    wants_trace = bool(a.trace or a.plot)
    if a.trace_cores and not wants_trace:
        raise CliError("--trace-cores selects the cores of a trace: add --trace OUT.json or --plot OUT.png")
    tiling_result, rep, request = _run(spec, a, soc, trace=wants_trace)
    stock_summary = None
    if custom and rep is not None:
        stock = get_soc(a.soc)
        stock_t, stock_rep, _ = _run(spec, a, stock, trace=False)
        stock_summary = (stock.name, _summary(stock_t, stock_rep))
    if a.json:
        files = _write_files(a, soc, rep, request, quiet=True)
        print_json(_json(a, soc, tiling_result, rep, stock_summary, files))
        return 0
    print(f"{a.op} on {soc.name}: tilingKey {tiling_result.tiling_key}, block_dim {tiling_result.block_dim}, "
          f"UB plan {tiling_result.ub_plan_bytes} of {soc.ub_size} B")
    if rep is None:
        print("  no kernel ran (empty tensors): nothing to estimate")
        return 0
    for line in rep.estimate.lines():
        print("  " + line)
    for line in breakdown_lines(rep):
        print("  " + line)
    if stock_summary is not None:
        _print_what_if(stock_summary[1], _summary(tiling_result, rep), stock_summary[0], soc.name)
    _write_files(a, soc, rep, request, quiet=False)
    return 0


def breakdown_lines(rep) -> list[str]:
    """The per-step table of a composite aclnn's estimate (step, simulated / modelled, us, bound) and its total;
    nothing for a single kernel."""
    rows = rep.breakdown() if hasattr(rep, "breakdown") else []
    if not rows:
        return []
    width = max(len("step"), *(len(name) for name, *_ in rows))
    out = ["per-step breakdown (steps run one after another: the call's estimate is their sum)",
           f"  {'step':<{width}}  {'how':<9}  {'us':>10}  bound"]
    out += [f"  {name:<{width}}  {how:<9}  {us:>10,.2f}  {bound}" for name, how, us, bound in rows]
    out.append(f"  {'whole call':<{width}}  {'':<9}  {sum(r[2] for r in rows):>10,.2f}")
    return out


def _write_files(a, soc, rep, request, *, quiet: bool) -> dict:
    """Write the --csv / --trace / --plot files; returns what was written ({"csv", "trace", "plot"}: the path or
    null, the trace with its slice, arrow and left-out call counts)."""
    say = (lambda *_: None) if quiet else print
    written: dict = dict(csv=None, trace=None, plot=None)
    if rep is None:
        return written
    if a.csv:
        rep.to_csv(a.csv)
        written["csv"] = a.csv
        say(f"  wrote {a.csv} (msprof PipeUtilization columns, one row per block)")
    if a.trace:
        summary = write_json(request.runs, a.trace, note=f"ascend-sim profile {a.op} on {soc.name}")
        written["trace"] = dict(path=a.trace, events=int(summary["events"]), flows=int(summary["flows"]),
                                kernels=int(summary["kernels"]), dropped_calls=int(summary["dropped_calls"]))
        left = f"; {summary['dropped_calls']:,d} calls left out (raise --max-events or pick --trace-cores)" \
            if summary["dropped_calls"] else ""
        say(f"  wrote {a.trace}: {summary['events']:,d} slices, {summary['flows']:,d} flow arrows over "
            f"{summary['kernels']} kernel(s){left}; open it in ui.perfetto.dev")
    if a.plot:
        plot_occupancy(request.runs, a.plot)
        written["plot"] = a.plot
        say(f"  wrote {a.plot}")
    return written


def _json(a, soc, t, rep, stock_summary, files: dict) -> dict:
    """The profile's document: the tiling and UB plan, the call's estimate with one entry per estimated launch
    (`kernels`), the steps, the stock chip beside a custom one, the files written."""
    out: dict[str, Any] = dict(op=a.op, soc=soc.name, tiling_key=t.tiling_key, block_dim=t.block_dim,
                               ub_size=soc.ub_size, ub_plan_bytes=t.ub_plan_bytes,
               ub_plan=ub_plan_json(t.ub_plan),
               estimate=None, steps=steps_json(rep), files=files)
    summary = call_estimate_json(rep)
    if summary is not None:
        est = rep.estimate
        launches = est.launches if hasattr(est, "launches") else ((rep.kernel, est),)
        out["estimate"] = dict(summary, kernels=[estimate_json(label, e) for label, e in launches])
    if stock_summary is not None:
        stock = stock_summary[1]
        here = _summary(t, rep)
        out["stock"] = dict(soc=stock_summary[0], **stock,
                            speedup=stock["us"] / here["us"] if stock["us"] and here["us"] else None)
    return out


def _print_what_if(stock: dict, custom: dict, stock_name: str, custom_name: str) -> None:
    print(f"  what-if: {custom_name} beside the stock {stock_name}")
    print(f"    {'':<14} {'stock':>14} {'this chip':>14}")
    for label, key, fmt in (("UB bytes", "ub", "{:,d}"), ("vector cores", "cores", "{:,d}"),
                            ("tilingKey", "key", "{}"), ("block_dim", "block_dim", "{:,d}"),
                            ("UB plan bytes", "plan", "{:,d}"), ("estimate us", "us", "{:,.2f}"),
                            ("bound by", "bound", "{}")):
        print(f"    {label:<14} {fmt.format(stock[key]):>14} {fmt.format(custom[key]):>14}")
    if stock["us"] and custom["us"]:
        ratio = stock["us"] / custom["us"]
        print(f"    this chip is {ratio:.2f}x {'faster' if ratio >= 1 else 'slower'} on this call")

