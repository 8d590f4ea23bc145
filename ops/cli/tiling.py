"""`ascend-sim tiling OP ...`: the real tiling's figures and the kernel's UB plan, from shapes only (nothing runs)."""
from __future__ import annotations

import sys

from .common import add_case_parser, check_flags_apply, print_json, soc_of, tiling_json
from .operators import op_spec


def add_parser(sub) -> None:
    add_case_parser(sub, "tiling", "print the tiling and UB plan (no run); exit 1 if the plan does not fit")


def command(a) -> int:
    spec = op_spec(a.op)
    soc = soc_of(a)
    check_flags_apply(a, spec, soc)
    result = spec.tiling(spec.descs(a), soc)
    if a.json:
        print_json(tiling_json(a.op, result))
    else:
        print(f"{a.op} on {soc.name} ({soc.aiv_num} AIV, UB {soc.ub_size} B, tiling sees {soc.ub_size_for_tiling} B)")
        print(result)
    if not result.ub_fits:
        print(f"ascend-sim: the UB plan needs {result.ub_plan_bytes} bytes but {soc.name} has {soc.ub_size}: "
              "the kernel would fail in TPipe::InitBuffer (UBOverflowError)", file=sys.stderr)
        return 1
    return 0
