"""`ascend-sim sweep` as a library: `sweep(command, op, grid, socs, jobs=..., dask=..., out=...)` runs `profile`,
`tiling` or `limits` of one operator at every point of a grid and returns (and writes) its table; `plot` draws a
column of it, `read_table` reads a written one. The code lives in ops.cli.sweep_grid, beside the commands whose
parsers and functions it calls per point; see its docstring for the table's columns.
"""
from __future__ import annotations

from .cli.sweep_grid import (
                             AXES,
                             COMMANDS,
                             LIMITS_COLUMNS,
                             RESULT_COLUMNS,
                             SweepError,
                             columns,
                             inputs_hash,
                             plot,
                             points,
                             read_table,
                             run_point,
                             sweep,
)

__all__ = ["AXES", "COMMANDS", "LIMITS_COLUMNS", "RESULT_COLUMNS", "SweepError", "columns", "inputs_hash", "plot",
           "points", "read_table", "run_point", "sweep"]
