"""Reading msprof's CSV output: op_summary_*.csv (one row per task) and PipeUtilization.csv (one row per block).

op_summary columns used (names as msprof writes them; matched without regard to case or surrounding blanks):
"OP Type" (the l0 operator, e.g. MoeTokenPermute, Transpose), "Task Duration(us)", "Input Shapes" and
"Input Data Types" (one entry per input, separated by ';'; a shape's dimensions by ','), and where present
"Op Name", "Output Shapes", "Output Data Types". Every problem is one InputError naming the file and line.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ascend_sim.errors import ConfigError


class InputError(ConfigError):
    """A calibration input that cannot be used: a missing column, an unknown operator, a field that is not a
    number, a shape that does not fit the operator.

    Attributes:
        path: the file.
        line: its line (1-based; the header is line 1), or None for the file as a whole.
        column: the column at fault, or None.
        reason: what is wrong, without the place.
    """

    def __init__(self, path: str, line: int | None, reason: str, column: str | None = None):
        where = f"{path}" + (f" line {line}" if line is not None else "") + (f", column {column!r}" if column else "")
        super().__init__(f"{where}: {reason}", setting=column)
        self.path, self.line, self.column, self.reason = path, line, column, reason


_DTYPES = {
    "float": np.float32, "float32": np.float32, "fp32": np.float32, "float16": np.float16, "fp16": np.float16,
    "half": np.float16, "bf16": ml_dtypes.bfloat16, "bfloat16": ml_dtypes.bfloat16, "int8": np.int8,
    "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
    "int64": np.int64, "uint64": np.uint64, "bool": np.bool_, "double": np.float64, "float64": np.float64,
}
"""msprof's data type names (with or without the DT_ prefix, any case) -> NumPy dtypes."""

DURATION = "task duration(us)"
OP_TYPE = "op type"
OP_NAME = "op name"
INPUT_SHAPES = "input shapes"
INPUT_DTYPES = "input data types"
OUTPUT_SHAPES = "output shapes"
OUTPUT_DTYPES = "output data types"
REQUIRED = (OP_TYPE, DURATION, INPUT_SHAPES, INPUT_DTYPES)


@dataclass(frozen=True)
class OpRow:
    """One op_summary row: where it is, the operator, its measured time and its tensors.

    Attributes:
        path / line: the file and its line (for messages).
        op_name / op_type: msprof's "Op Name" and "OP Type".
        duration_us: "Task Duration(us)", microseconds.
        input_shapes / output_shapes: one tuple of dimensions per tensor (() for a scalar).
        input_dtypes / output_dtypes: one NumPy dtype per tensor (None where msprof gives none).
    """
    path: str
    line: int
    op_name: str
    op_type: str
    duration_us: float
    input_shapes: tuple
    input_dtypes: tuple
    output_shapes: tuple = ()
    output_dtypes: tuple = ()

    def error(self, reason: str, column: str | None = None) -> InputError:
        return InputError(self.path, self.line, reason, column)


def _open_rows(path: str):
    try:
        f = open(path, encoding="utf-8-sig", newline="")
    except OSError as e:
        raise InputError(path, None, f"cannot read it ({e.strerror or e})") from None
    return f


def _header(path: str, reader, required) -> dict[str, int]:
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(path, None, "the file is empty (expected a header line)") from None
    columns = {name.strip().lower(): k for k, name in enumerate(header)}
    missing = [name for name in required if name not in columns]
    if missing:
        raise InputError(path, 1, f"missing column(s) {', '.join(repr(m) for m in missing)} "
                                  f"(the header has: {', '.join(h.strip() for h in header)})")
    return columns


def _number(path: str, line: int, column: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise InputError(path, line, f"not a number: {text!r}", column) from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(path, line, f"must be a positive time, got {text!r}", column)
    return value


def _shapes(path: str, line: int, column: str, text: str) -> tuple:
    text = text.strip().strip('"')
    if not text:
        return ()
    shapes = []
    for part in text.split(";"):
        dims = [d.strip() for d in part.split(",") if d.strip()]
        try:
            shape = tuple(int(d) for d in dims)
        except ValueError:
            raise InputError(path, line, f"not a shape list (dimensions separated by ',', tensors by ';'): "
                                         f"{text!r}", column) from None
        if any(d < 0 for d in shape):
            raise InputError(path, line, f"negative dimension in {text!r}", column)
        shapes.append(shape)
    return tuple(shapes)


def _dtypes(path: str, line: int, column: str, text: str) -> tuple:
    text = text.strip().strip('"')
    if not text:
        return ()
    out: list = []
    for part in text.split(";"):
        name = part.strip().lower()
        if name.startswith("dt_"):
            name = name[3:]
        if not name:
            out.append(None)
            continue
        if name not in _DTYPES:
            raise InputError(path, line, f"unknown data type {part.strip()!r} (known: "
                                         f"{', '.join(sorted(_DTYPES))}, with or without DT_)", column)
        out.append(np.dtype(_DTYPES[name]))
    return tuple(out)


def read_op_summary(path: str) -> list[OpRow]:
    """Every row of an msprof op_summary CSV as an OpRow (InputError naming the line for a bad one)."""
    with _open_rows(path) as f:
        reader = csv.reader(f)
        cols = _header(path, reader, REQUIRED)
        names = {v: k for k, v in cols.items()}
        rows = []
        for record in reader:
            line = reader.line_num
            if not any(field.strip() for field in record):
                continue
            if len(record) < len(names):
                raise InputError(path, line, f"{len(record)} fields, the header has {len(names)}")

            def get(key, default="", record=record):
                return record[cols[key]] if key in cols else default

            op_type = get(OP_TYPE).strip()
            if not op_type:
                raise InputError(path, line, "empty operator type", names[cols[OP_TYPE]])
            shapes = _shapes(path, line, names[cols[INPUT_SHAPES]], get(INPUT_SHAPES))
            dtypes = _dtypes(path, line, names[cols[INPUT_DTYPES]], get(INPUT_DTYPES))
            if dtypes and len(dtypes) != len(shapes):
                raise InputError(path, line, f"{len(shapes)} input shapes but {len(dtypes)} input data types")
            rows.append(OpRow(
                path, line, get(OP_NAME).strip(), op_type,
                _number(path, line, names[cols[DURATION]], get(DURATION)), shapes, dtypes,
                _shapes(path, line, "Output Shapes", get(OUTPUT_SHAPES)),
                _dtypes(path, line, "Output Data Types", get(OUTPUT_DTYPES))))
    if not rows:
        raise InputError(path, None, "no data rows after the header")
    return rows


PIPE_TIME_COLUMNS = {"V": "aiv_vec_time(us)", "S": "aiv_scalar_time(us)", "MTE2": "aiv_mte2_time(us)",
                     "MTE3": "aiv_mte3_time(us)"}
"""The PipeUtilization.csv column of each pipe's busy time (microseconds, per block)."""


def read_pipe_utilization(path: str) -> dict[str, float]:
    """{pipe: mean busy microseconds over the blocks} of a PipeUtilization CSV (vector-core columns; the pipes
    whose columns it has), and {"total": mean aiv_time(us)}."""
    with _open_rows(path) as f:
        reader = csv.reader(f)
        cols = _header(path, reader, ("aiv_time(us)",))
        sums: dict[str, float] = {}
        blocks = 0
        wanted = {"total": "aiv_time(us)", **PIPE_TIME_COLUMNS}
        for record in reader:
            line = reader.line_num
            if not any(field.strip() for field in record):
                continue
            if len(record) < len(cols):
                raise InputError(path, line, f"{len(record)} fields, the header has {len(cols)}")
            blocks += 1
            for key, column in wanted.items():
                if column in cols:
                    text = record[cols[column]].strip()
                    try:
                        value = float(text)
                    except ValueError:
                        raise InputError(path, line, f"not a number: {text!r}", column) from None
                    if not math.isfinite(value) or value < 0:
                        raise InputError(path, line, f"must be a non-negative time, got {text!r}", column)
                    sums[key] = sums.get(key, 0.0) + value
    if not blocks:
        raise InputError(path, None, "no data rows after the header")
    return {k: v / blocks for k, v in sums.items()}
