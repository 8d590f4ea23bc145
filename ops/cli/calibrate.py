"""`ascend-sim calibrate CSV`: fit cost-model figures to msprof measurements and write them as a cost file.

    ascend-sim calibrate op_summary.csv --soc ascend910b --fit hbm_bytes_per_cycle,mte2_latency_cycles \\
        --pipe-csv 3:PipeUtilization.csv --out 910b_measured.json
    ascend-sim profile moe_token_permute ... --cost-file 910b_measured.json

Reads the op_summary rows (every row's OP Type must be one the simulator can estimate: ops.calibrate.kernels),
runs each row's kernel at its shapes under trial figures, fits the --fit figures (ops.calibrate), prints each
row's error before and after, and writes the fitted figures (with those of --cost-file, if given) to --out.
"""
from __future__ import annotations

import os

from ascend_sim.cost_file import load_cost_file
from tiling import get_soc

from ..calibrate import calibrate, parse_fit, read_op_summary, read_pipe_utilization
from .common import SOC_HELP, CliError, output_file, print_json

DEFAULT_FIT = "hbm_bytes_per_cycle,mte2_latency_cycles,scalar_call_cycles"


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="fit cost-model figures to msprof op_summary times (and PipeUtilization "
                                         "pipe times); write them as a cost file for --cost-file")
    p.add_argument("csv", metavar="CSV", help="msprof op_summary CSV (OP Type, Task Duration(us), Input Shapes, "
                                              "Input Data Types; Output Data Types where a Cast needs it)")
    p.add_argument("--pipe-csv", action="append", default=[], metavar="LINE:CSV",
                   help="msprof PipeUtilization CSV of the kernel on op_summary line LINE; repeatable")
    p.add_argument("--soc", default="ascend910b", help=SOC_HELP)
    p.add_argument("--cost-file", metavar="FILE.json", help="start from these figures (a cost file)")
    p.add_argument("--fit", default=DEFAULT_FIT, metavar="FIG[:LO:HI],...",
                   help=f"figures to fit, with optional bounds (default {DEFAULT_FIT}; bounds default to the "
                        "starting value / 8 .. x 8)")
    p.add_argument("--out", metavar="FILE.json", type=output_file, help="write the fitted figures here")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _pipe_files(items) -> dict:
    out = {}
    for item in items:
        line, sep, path = item.partition(":")
        try:
            line_no = int(line)
        except ValueError:
            line_no = 0
        if not sep or line_no < 2 or not path:
            raise CliError(f"--pipe-csv takes LINE:CSV with LINE the op_summary line of the kernel (2 or more), "
                           f"got {item!r}")
        if line_no in out:
            raise CliError(f"--pipe-csv gives line {line_no} twice")
        out[line_no] = read_pipe_utilization(path)
    return out


def command(a) -> int:
    if not os.path.isfile(a.csv):
        raise CliError(f"no file {a.csv}")
    start = load_cost_file(a.cost_file) if a.cost_file else {}
    soc = get_soc(a.soc, cost=start or None)
    figures = parse_fit(a.fit, soc.cost)
    rows = read_op_summary(a.csv)
    pipes = _pipe_files(a.pipe_csv)
    result = calibrate(rows, soc, figures, pipes)
    figures_out = {**start, **result.fitted}
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(result.cost_file(start, source=f"ascend-sim calibrate {a.csv}"))
    if a.json:
        print_json(dict(soc=result.soc_name, fitted=result.fitted, cost=figures_out, rows=[
            dict(line=r.row.line, op_type=r.row.op_type, measured_us=r.row.duration_us, before_us=r.before_us,
                 after_us=r.after_us, before_error=r.before_error, after_error=r.after_error)
            for r in result.rows], evaluations=result.result.evaluations,
            rms_log_error=dict(before=result.rms_log_error(False), after=result.rms_log_error(True)),
            figures=[dict(name=f.name, start=f.start, fitted=result.fitted[f.name], lower=f.lower, upper=f.upper)
                     for f in result.figures],
            out=a.out))
        return 0
    for line in result.lines():
        print(line)
    if a.out:
        print(f"wrote {a.out}: use it with `ascend-sim profile ... --cost-file {a.out}` or "
              f"tiling.get_soc({result.soc_name!r}, cost={a.out!r})")
    return 0
