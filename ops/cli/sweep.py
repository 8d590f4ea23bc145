"""`ascend-sim sweep {profile|tiling|limits} OP`: one command at every point of a grid, as a CSV / Parquet table.

    ascend-sim sweep profile moe_token_permute --grid tokens=1024,4096 --grid hidden=4096,7168 --grid topk=8 \\
        --grid experts=256 --grid routing=uniform,zipf:1.2 --soc 910b,950 --jobs 2 --out permute.csv \\
        --plot permute.png --x tokens --line hidden
    ascend-sim sweep tiling moe_token_unpermute --grid-file grid.toml --out unpermute.parquet
    ascend-sim sweep limits moe_token_unpermute_with_routing_map_grad --vary hidden --grid tokens=4096,15000 \\
        --grid topk=2,8 --grid experts=64 --out limits.csv

Axes are named as `ascend-sim run`'s flags; the points are the product of the axes and the chips (--soc). A
sweep started again with the same --out skips the points already written. The library behind it is
ops.sweep (`ops.sweep.sweep(...)` from Python).
"""
from __future__ import annotations

import sys

from .common import CliError, output_file, positive
from .sweep_grid import COMMANDS, parse_grid_flag, sweep
from .sweep_plot import plot
from .sweep_table import SweepError


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run profile, tiling or limits of one operator over a grid of shapes and "
                                     "settings, locally or on a Dask cluster; a resumable CSV / Parquet table")
    p.add_argument("what", choices=COMMANDS, metavar="{" + ",".join(COMMANDS) + "}",
                   help="the command each point runs: profile, tiling or limits")
    p.add_argument("op", metavar="OP", help="operator (as `ascend-sim run`)")
    p.add_argument("--grid", action="append", default=[], metavar="AXIS=V1,V2,...",
                   help="an axis and its values, repeatable; axes are run's flags: tokens, hidden, experts, topk, "
                        "capacity, dtype, probs_dtype, routing_map_dtype, indices_dtype, num_out_tokens, quant_mode, "
                        "mx_scale_rule, drop_and_pad / no_probs / non_topk (true,false), ub_size, cores, seed, "
                        "routing (uniform,zipf:S; profile only). One value holds a flag fixed")
    p.add_argument("--grid-file", metavar="FILE.toml|FILE.yaml",
                   help="axes from a file: a [grid] table of axis = [values], optional soc = [chips], vary, from, to "
                        "(TOML needs Python 3.11 or tomli; YAML needs pyyaml); --grid / --soc add to / override it")
    p.add_argument("--soc", metavar="S1,S2", help="chip profiles, comma-separated (default ascend910b; limits: "
                                                  "all three stock profiles)")
    p.add_argument("--jobs", type=positive, default=1, metavar="N",
                   help="points in parallel: local processes (default 1, this process), or Dask workers with "
                        "--dask local")
    p.add_argument("--dask", metavar="ADDRESS|local",
                   help="run the points on a Dask cluster: a scheduler address (tcp://host:8786) or `local` for a "
                        "LocalCluster of --jobs processes (needs the [dask] extra)")
    p.add_argument("--out", required=True, type=output_file, metavar="FILE.csv|FILE.parquet",
                   help="the table (Parquet needs pyarrow, the [sweep] extra); an existing file of the "
                        "same sweep is resumed")
    p.add_argument("--vary", metavar="DIM", help="limits: the dimension each point explores (hidden, tokens, topk, "
                                                 "experts)")
    p.add_argument("--from", dest="low", type=positive, metavar="V", help="limits: smallest value (default 1)")
    p.add_argument("--to", dest="high", type=positive, metavar="V", help="limits: largest value")
    p.add_argument("--plot", metavar="OUT.png", type=output_file,
                   help="draw a column against one axis, one line per another (needs matplotlib)")
    p.add_argument("--x", metavar="AXIS", help="with --plot: the x axis (default: the first axis with several values)")
    p.add_argument("--line", metavar="AXIS", help="with --plot: one line per value of this axis")
    p.add_argument("--y", metavar="COLUMN", help="with --plot: the column drawn (default estimate_us for profile, "
                                                 "ub_plan_bytes for tiling, limit for limits)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _grid(a) -> tuple[dict, list[str] | None, dict]:
    """The grid, the chips and limits' options from the file and the flags (flags win)."""
    from .sweep_grid import load_grid_file
    grid: dict = {}
    socs = None
    limits: dict = {}
    if a.grid_file:
        data = load_grid_file(a.grid_file)
        grid.update(data.get("grid", {}))
        if "soc" in data:
            socs = [data["soc"]] if isinstance(data["soc"], str) else list(data["soc"])
        limits = {k: data[k] for k in ("vary", "from", "to") if k in data}
    given = set()
    for text in a.grid:
        axis, values = parse_grid_flag(text)
        if axis in given:
            raise SweepError(f"--grid {axis} given twice: put every value in one --grid {axis}=V1,V2,...")
        if axis == "soc":
            raise SweepError("the chip is not a --grid axis: give it as --soc S1,S2")
        given.add(axis)
        grid = {k: v for k, v in grid.items() if k.replace("-", "_").lower() != axis}
        grid[axis] = values
    if a.soc:
        socs = [s.strip() for s in a.soc.split(",") if s.strip()]
    return grid, socs, limits


def command(a) -> int:
    try:
        return _command(a)
    except SweepError as e:
        raise CliError(str(e)) from None


def _command(a) -> int:
    grid, socs, limits = _grid(a)
    if not grid:
        raise SweepError("give the axes: --grid AXIS=V1,V2,... (or --grid-file)")
    if (a.x or a.line or a.y) and not a.plot:
        raise SweepError("--x / --line / --y choose what --plot draws: add --plot OUT.png")
    vary = a.vary or limits.get("vary")
    low = a.low or limits.get("from")
    high = a.high or limits.get("to")
    if a.what != "limits" and (a.low or a.high):
        raise SweepError("--from / --to apply to `sweep limits` only")
    x = a.x
    if a.plot and x is None:
        several = [k.replace("-", "_").lower() for k, v in grid.items() if isinstance(v, list) and len(v) > 1]
        if not several:
            raise SweepError("--plot needs an axis with several values (or --x AXIS)")
        x = several[0]
    rows = sweep(a.what, a.op, grid, socs, jobs=a.jobs, dask=a.dask, out=a.out, vary=vary, low=low, high=high,
                 progress=not a.quiet)
    refused = sum(1 for r in rows if r.get("status") not in ("ok", "ub_overflow"))
    print(f"{a.what} of {a.op}: {len(rows)} points in {a.out}" + (f" ({refused} refused: see status / error)"
                                                                  if refused else ""))
    if a.plot:
        y = a.y or {"profile": "estimate_us", "tiling": "ub_plan_bytes", "limits": "limit"}[a.what]
        plot(rows, a.plot, x, a.line, y=y)
        print(f"wrote {a.plot}")
    sys.stdout.flush()
    return 0
