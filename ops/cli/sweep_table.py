"""The table of `ascend-sim sweep` (and the sweep's error class): its columns, a point's key and cells as the CSV
holds them, the journal a sweep appends to as points finish (and resumes from), the CSV / Parquet file written at
the end and read back."""
from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence


class SweepError(ValueError):
    """A bad grid, axis or output: one line (the command line prints it and exits with status 2)."""


RESULT_COLUMNS = ("tiling_key", "block_dim", "fits", "status", "error", "estimate_us", "bound", "ub_plan_bytes",
                  "gm_bytes", "workspace_bytes", "inputs_hash")
"""Columns after the axes, in every table (empty where the command does not produce them): gm_bytes is the
MTE2 + MTE3 traffic of the simulated kernels (profile), ub_plan_bytes the kernel's UB plan, estimate_us the
estimated chip time in microseconds and bound what bounds it (profile)."""

LIMITS_COLUMNS = ("vary", "limit", "next_outcome")
"""Extra columns of a limits sweep: the varied dimension, the largest value v such that every value from --from
to v tiles and fits the UB (empty if the first does not), and what happens just past it. In a limits row,
tiling_key and ub_plan_bytes are those at the limit, fits says whether the range starts fitting, and status /
error describe the outcome past the limit ("ok" when the whole range fits)."""


def key_of(point: Mapping[str, object], axes: Sequence[str]) -> tuple[str, ...]:
    """A point's identity in the table: its axis values as text (as the CSV holds them)."""
    return tuple(cell(point[a]) for a in axes)


def cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):        # numpy floats too: repr(np.float64) would spell the type
        return repr(float(value))
    return str(value)


def columns(axes: Sequence[str], command: str) -> list[str]:
    return ["op", *axes, "soc", *RESULT_COLUMNS, *(LIMITS_COLUMNS if command == "limits" else ())]


def _journal_path(out: str) -> str:
    return out if out.lower().endswith(".csv") else out + ".partial.csv"


def _read_csv(path: str) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def read_done(out: str, cols: list[str]) -> list[dict]:
    """Rows already written for this sweep (the output file, the Parquet file's journal): as text, as in CSV."""
    sources = []
    if out.lower().endswith(".parquet") and os.path.exists(out):
        _, pq = pyarrow_module("resume from a Parquet table")
        table = pq.read_table(out)
        sources.append((list(table.column_names), read_table(out), out))
    journal = _journal_path(out)
    _drop_torn_line(journal)
    if os.path.exists(journal) and os.path.getsize(journal) > 0:
        header, found = _read_csv(journal)
        sources.append((header, found, journal))
    rows: list[dict] = []
    for header, found, path in sources:
        if header != cols:
            raise SweepError(f"{path} holds another sweep's table (columns {', '.join(header)}); choose another "
                             "--out or remove it")
        rows += found
    return rows


def pyarrow_module(why: str):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SweepError(f"to {why} install pyarrow: pip install 'ascend-sim[sweep]'") from None
    return pa, pq


def _drop_torn_line(path: str) -> None:
    """A sweep killed while writing a row leaves a line without its newline: cut it off, so the next row starts
    on a line of its own (the point is run again)."""
    if not os.path.exists(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


class Journal:
    """Rows appended to a CSV as they come (flushed each), so an interrupted sweep keeps what it finished."""

    def __init__(self, out: str, cols: list[str]):
        self.path = _journal_path(out)
        _drop_torn_line(self.path)
        new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        self.file = open(self.path, "a", newline="")  # noqa: SIM115 - closed in close()
        self.writer = csv.DictWriter(self.file, fieldnames=cols, extrasaction="ignore")
        if new:
            self.writer.writeheader()
            self.file.flush()

    def add(self, row: dict) -> None:
        self.writer.writerow({k: cell(v) for k, v in row.items()})
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def write_table(out: str, cols: list[str], rows: list[dict]) -> None:
    """The whole table in grid order (atomically replacing the file); a Parquet file's journal is removed."""
    tmp = out + ".tmp"
    if out.lower().endswith(".csv"):
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            for row in rows:
                w.writerow({k: cell(row.get(k)) for k in cols})
        os.replace(tmp, out)
        return
    pa, pq = pyarrow_module("write Parquet")
    text = {k: [cell(row.get(k)) for row in rows] for k in cols}
    table = pa.table({k: _typed(pa, values, _KINDS.get(k)) for k, values in text.items()})
    pq.write_table(table, tmp)
    os.replace(tmp, out)
    journal = _journal_path(out)
    if os.path.exists(journal):
        os.remove(journal)


_KINDS = {"op": "string", "soc": "string", "status": "string", "error": "string", "bound": "string",
          "inputs_hash": "string", "vary": "string", "next_outcome": "string", "estimate_us": "float64",
          "fits": "bool", "routing": "string"}
"""Parquet types of the columns whose type does not follow from their values (an empty column, a hash of digits)."""


def _typed(pa, values: list[str], kind: str | None = None):
    """A Parquet column from the table's text: `kind` when given, else bool, int64 or float64 where every present
    value is one (an empty cell is a missing value), else string."""
    if kind == "string":
        return pa.array([None if v == "" else v for v in values], pa.string())
    if kind == "float64":
        return pa.array([None if v == "" else float(v) for v in values], pa.float64())
    present = [v for v in values if v != ""]
    if present and set(present) <= {"True", "False"}:
        return pa.array([None if v == "" else v == "True" for v in values], pa.bool_())
    for kind, convert in ((pa.int64(), int), (pa.float64(), float)):
        try:
            return pa.array([None if v == "" else convert(v) for v in values], kind)
        except ValueError:
            continue
    return pa.array([None if v == "" else v for v in values], pa.string())


def read_table(path: str) -> list[dict]:
    """A sweep's table as rows of text (as the CSV holds them), from its .csv or .parquet file."""
    if path.lower().endswith(".parquet"):
        _, pq = pyarrow_module("read Parquet")
        return [{k: cell(v) for k, v in r.items()} for r in pq.read_table(path).to_pylist()]
    return _read_csv(path)[1]
