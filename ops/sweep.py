"""`ascend-sim sweep` as a library: `sweep(command, op, grid, socs, jobs=..., dask=..., out=...)` runs `profile`,
`tiling` or `limits` of one operator at every point of a grid and returns (and writes) its table; `plot` draws a
column of it, `read_table` reads a written one. The code lives in ops.cli: sweep_grid (the grid and the runs,
beside the commands whose parsers and functions it calls per point), sweep_table (the columns and the files) and
sweep_plot.
"""
from __future__ import annotations

from .cli.sweep_grid import AXES, COMMANDS, inputs_hash, points, run_point, sweep
from .cli.sweep_plot import plot
from .cli.sweep_table import LIMITS_COLUMNS, RESULT_COLUMNS, SweepError, columns, read_table

__all__ = ["AXES", "COMMANDS", "LIMITS_COLUMNS", "RESULT_COLUMNS", "SweepError", "columns", "inputs_hash", "plot",
           "points", "read_table", "run_point", "sweep"]
