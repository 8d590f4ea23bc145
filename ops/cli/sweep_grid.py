"""Performance tables over many shapes: `profile`, `tiling` or `limits` of one operator at every point of a grid
(the library behind `ascend-sim sweep`; import it as ops.sweep).

    from ops.sweep import sweep
    rows = sweep("tiling", "moe_token_permute", {"tokens": [1024, 4096], "hidden": [4096, 7168], "topk": [8],
                 "experts": [256]}, socs=["ascend910b", "ascend950"], jobs=2, out="permute.csv")

The points are the product of the axes' values and the chips. An axis is named as the flag of `ascend-sim run`
(tokens, hidden, experts, topk, capacity, dtype, probs_dtype, routing_map_dtype, indices_dtype, num_out_tokens,
quant_mode, mx_scale_rule, drop_and_pad, no_probs, non_topk, ub_size, cores, seed, routing), and every point is
parsed by that command's own parser and checked by its flag rules before anything runs, so a bad axis or value is
one error line, not a failure an hour in. Each point runs in-process through the functions the command uses
(spec.descs / spec.tiling for `tiling`, the same two aclnn phases as `profile`, ops.limits.explore for `limits`),
in a local process pool (`jobs`) or on a Dask cluster (`dask`: a scheduler address, or "local" for a
dask.distributed LocalCluster of `jobs` processes); the scheduling is concurrent.futures' or Dask's.

A point the operator or the simulator refuses is a row too (its status and error), not the end of the sweep.
Rows carry no wall times, only what the model and the tiling compute, so the same grid gives the same rows
wherever it runs; `inputs_hash` is a digest of the point's generated inputs (profile) or of its tensor
descriptions and seed (tiling, limits): the same seed gives the same hash, which makes that checkable.

The table is written as it grows (CSV rows appended and flushed, or a `.partial.csv` journal beside a Parquet
file): a sweep that was interrupted and is started again with the same output skips the points already written.
At the end the file is rewritten in grid order, so its content does not depend on which point finished first.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .sweep_table import (
    RESULT_COLUMNS,
    Journal,
    SweepError,
    columns,
    key_of,
    pyarrow_module,
    read_done,
    write_table,
)

COMMANDS = ("profile", "tiling", "limits")

INT_AXES = ("tokens", "hidden", "experts", "topk", "capacity", "num_out_tokens", "quant_mode", "ub_size", "cores",
            "seed")
CHOICE_AXES = ("dtype", "probs_dtype", "routing_map_dtype", "indices_dtype", "mx_scale_rule")
BOOL_AXES = ("drop_and_pad", "no_probs", "non_topk")
AXES = (*INT_AXES, *CHOICE_AXES, *BOOL_AXES, "routing")
"""The axes a grid may vary, named as `ascend-sim run`'s flags (argparse dests); the chip is `socs`."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


# --- the grid --------------------------------------------------------------------------------------------------
def axis_name(text: str) -> str:
    name = str(text).strip().lower().replace("-", "_")
    if name in ("soc", "chip"):
        return "soc"
    if name not in AXES:
        raise SweepError(f"unknown axis {text!r}; axes: {', '.join(AXES)} (the chip: --soc)")
    return name


def axis_value(name: str, value):
    """One axis value in its canonical type: int, bool, or str (routing: 'uniform' / 'zipf:S')."""
    text = str(value).strip()
    if name in INT_AXES:
        if isinstance(value, bool):
            raise SweepError(f"axis {name}: expected a whole number, got {value!r}")
        try:
            return int(text)
        except ValueError:
            raise SweepError(f"axis {name}: expected a whole number, got {text!r}") from None
    if name in BOOL_AXES:
        if isinstance(value, bool):
            return value
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise SweepError(f"axis {name}: expected true or false, got {text!r}")
    if name == "routing":
        from ..common.routing import parse_routing, routing_name
        try:
            return routing_name(parse_routing(text))
        except ValueError as e:
            raise SweepError(f"axis routing: {e}") from None
    if not text:
        raise SweepError(f"axis {name}: empty value")
    return text.lower()


def parse_grid_flag(text: str) -> tuple[str, list]:
    """`AXIS=V1,V2,...` -> (axis, [values])."""
    name, sep, values = str(text).partition("=")
    if not sep or not values.strip():
        raise SweepError(f"--grid takes AXIS=V1,V2,... (e.g. tokens=1024,4096), got {text!r}")
    axis = axis_name(name)
    return axis, [v for v in (p.strip() for p in values.split(",")) if v]


def load_grid_file(path: str) -> dict:
    """A grid from a TOML (stdlib tomllib, Python >= 3.11, or the tomli package) or YAML (pyyaml) file:
    a `grid` table of axis = value or [values], and optionally `soc` = [chips], `vary`, `from`, `to`."""
    ext = os.path.splitext(path)[1].lower()
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SweepError(f"cannot read {path}: {e.strerror}") from None
    if ext == ".toml":
        try:
            import tomllib
        except ImportError:         # Python 3.10
            try:
                import tomli as tomllib
            except ImportError:
                raise SweepError("a TOML grid needs Python >= 3.11 or `pip install tomli`") from None
        try:
            data = tomllib.loads(raw.decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise SweepError(f"{path}: {str(e).splitlines()[0]}") from None
    elif ext in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise SweepError("a YAML grid needs pyyaml: pip install 'ascend-sim[sweep]'") from None
        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise SweepError(f"{path}: {str(e).splitlines()[0]}") from None
    else:
        raise SweepError(f"{path}: a grid file is .toml, .yaml or .yml")
    if not isinstance(data, dict):
        raise SweepError(f"{path}: expected a table with a `grid` table")
    unknown = set(data) - {"grid", "soc", "vary", "from", "to"}
    if unknown:
        raise SweepError(f"{path}: unknown key(s) {', '.join(sorted(unknown))} (keys: grid, soc, vary, from, to)")
    if not isinstance(data.get("grid", {}), dict):
        raise SweepError(f"{path}: `grid` must be a table of axis = [values]")
    return data


def normalise_grid(grid: Mapping[str, Any]) -> dict[str, list]:
    """{axis: values} with canonical names and values; a scalar is a one-value axis. Raises SweepError."""
    out: dict[str, list] = {}
    for name, values in grid.items():
        axis = axis_name(name)
        if axis == "soc":
            raise SweepError("the chip is not a --grid axis: give it as --soc S1,S2 (or `soc` in a grid file)")
        if axis in out:
            raise SweepError(f"axis {axis} given twice")
        if isinstance(values, (str, int, float, bool)):
            values = [values]
        vals = [axis_value(axis, v) for v in values]
        if not vals:
            raise SweepError(f"axis {axis}: no values")
        if len(set(map(str, vals))) != len(vals):
            raise SweepError(f"axis {axis}: a value is repeated ({', '.join(map(str, vals))})")
        out[axis] = vals
    return out


def points(grid: Mapping[str, list], socs: Sequence[str]) -> list[dict]:
    """Every point of the grid: the product of the axes' values (first axis slowest) and the chips (fastest)."""
    names = list(grid)
    return [{**dict(zip(names, combo, strict=True)), "soc": soc}
            for combo in itertools.product(*(grid[n] for n in names)) for soc in socs]


def point_argv(op: str, command: str, point: Mapping[str, object]) -> list[str]:
    """The command line of one point for `command`'s own parser (`ascend-sim <command> OP ...`)."""
    argv = [command, op]
    for name, value in point.items():
        flag = "--" + name.replace("_", "-")
        if name in BOOL_AXES:
            if value:
                argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


# --- one point ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _parser():
    """The command line's parser, built once per process (argparse parsers can parse any number of times)."""
    from . import build_parser
    return build_parser()


def _namespace(command: str, op: str, point: Mapping[str, object], extra: Sequence[str] = ()) -> argparse.Namespace:
    from .common import CliError
    try:
        return _parser().parse_args(point_argv(op, command, point) + list(extra))
    except CliError as e:
        given = ", ".join(f"{k}={v}" for k, v in point.items())
        raise SweepError(f"{given}: {str(e).replace(' (see `ascend-sim ' + command + ' --help`)', '')}") from None


def _digest(*parts) -> str:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        if hasattr(part, "dtype") and hasattr(part, "tobytes"):
            h.update(f"{part.dtype.str}{part.shape}".encode())
            h.update(part.tobytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()


def inputs_hash(args: Mapping[str, object]) -> str:
    """Digest (16 hex digits) of an aclnn argument dict: names, dtypes, shapes and bytes of its arrays."""
    import numpy as np
    parts: list[object] = []
    for name, value in args.items():
        parts.append(name)
        parts.append(np.ascontiguousarray(value) if isinstance(value, np.ndarray) else value)
    return _digest(*parts)


def _descs_hash(descs: Mapping[str, object], seed: int) -> str:
    return _digest(seed, *(f"{k}={v!r}" for k, v in descs.items()))


def _empty_result() -> dict:
    return dict.fromkeys(RESULT_COLUMNS, None)


def _refused(row: dict, e: Exception) -> dict:
    """The row of a point the operator, the command line or the simulator refused."""
    from ascend_sim import SimulatorError, UBOverflowError
    from tiling.status import AclnnError

    from ..common.cli_spec import CliError
    if isinstance(e, AclnnError):
        row.update(status=str(e.status), error=f"{type(e).__name__}: {str(e).splitlines()[0]}", fits=False)
    elif isinstance(e, UBOverflowError):
        row.update(status="ub_overflow", error=f"UB plan needs {e.needed_bytes} B of {e.capacity_bytes} B",
                   fits=False, ub_plan_bytes=e.needed_bytes)
    elif isinstance(e, (CliError, ValueError)):
        row.update(status="invalid", error=str(e).splitlines()[0], fits=False)
    elif isinstance(e, SimulatorError):
        row.update(status="simulator", error=f"{type(e).__name__}: {e.summary}", fits=False)
    elif isinstance(e, MemoryError):        # outputs beyond the inputs the memory check counts
        row.update(status="memory", error="out of memory while allocating the case's tensors", fits=False)
    else:
        raise e
    return row


def _soc_name(text: str) -> str:
    """A chip's canonical name (ascend910b for 910b): the soc column reads the same however it was given."""
    from ascend_sim import ConfigError
    from tiling import get_soc
    try:
        return get_soc(str(text).strip()).name
    except ConfigError as e:
        raise SweepError(str(e).splitlines()[0]) from None


def _soc(a):
    from .common import soc_of
    return soc_of(a)


def run_point(command: str, op: str, point: dict, options: dict) -> dict:
    """One row: the point's axes and what `command` gives for it. Runs in a pool or Dask worker (picklable
    arguments; every import inside). options: limits' vary / low / high."""
    from .common import check_flags_apply
    from .operators import op_spec

    extra = ["--vary", options["vary"]] if command == "limits" else []
    a = _namespace(command, op, point, extra)
    spec = op_spec(op)
    soc = _soc(a)
    check_flags_apply(a, spec, soc)
    row = {**point, **_empty_result()}
    try:
        if command == "tiling":
            _tiling_row(row, spec, a, soc)
        elif command == "profile":
            _profile_row(row, spec, a, soc)
        else:
            _limits_row(row, spec, a, soc, options)
    except Exception as e:  # noqa: BLE001 - every refusal is a row; _refused re-raises what is not one
        _refused(row, e)
    return row


def _tiling_row(row: dict, spec, a, soc) -> None:
    descs = spec.descs(a)
    row["inputs_hash"] = _descs_hash(descs, a.seed)
    t = spec.tiling(descs, soc)
    row.update(tiling_key=t.tiling_key, block_dim=t.block_dim, fits=bool(t.ub_fits), ub_plan_bytes=t.ub_plan_bytes,
               workspace_bytes=t.workspace_size, status="ok" if t.ub_fits else "ub_overflow")


def _profile_row(row: dict, spec, a, soc) -> None:
    import numpy as np

    from .common import check_inputs_fit_memory, prepare_op
    check_inputs_fit_memory(a, spec)
    args = spec.make_inputs(a)
    row["inputs_hash"] = inputs_hash(args)
    t, _, size, executor = prepare_op(spec, args, soc)
    row.update(tiling_key=t.tiling_key, block_dim=t.block_dim, fits=bool(t.ub_fits), ub_plan_bytes=t.ub_plan_bytes,
               workspace_bytes=size)
    spec.run(np.empty(size, dtype=np.uint8), size, executor)
    rep = executor.report
    row["status"] = "ok"
    if rep is not None:
        total = rep.total
        row.update(estimate_us=float(rep.estimate.time_us), bound=rep.estimate.bound,
                   gm_bytes=int(total.mte2_bytes + total.mte3_bytes))


def _limits_row(row: dict, spec, a, soc, options: dict) -> None:
    from ..limits import DEFAULT_MAX, DEFAULT_SHAPE, explore, outcome_of, tiler
    from .limits import _shape_rules_as_outcomes
    vary = options["vary"]
    base = argparse.Namespace(**vars(a))
    for name, value in DEFAULT_SHAPE.items():
        if getattr(base, name, None) is None and not (name == "topk" and getattr(base, "capacity", None)):
            setattr(base, name, value)
    low, high = options.get("low") or 1, options.get("high") or DEFAULT_MAX[vary]
    row["inputs_hash"] = _descs_hash({n: getattr(base, n, None) for n in (*DEFAULT_SHAPE, "capacity")}, a.seed)
    segments = explore(_shape_rules_as_outcomes(tiler(spec, base, vary, soc)), low, high)
    row.update(vary=vary, limit=None, next_outcome=None)
    fitting = None
    for s in segments:
        if s.outcome.status is None and s.outcome.fits:
            fitting = s
            continue
        row["next_outcome"] = s.outcome.label
        row["status"] = "ub_overflow" if s.outcome.status is None else str(s.outcome.status)
        row["error"] = s.outcome.error or None
        break
    else:
        row["status"] = "ok"
        row["next_outcome"] = f"fits up to {high} (--to)"
    if fitting is not None:     # the plan at the limit itself (a segment's outcome is the one at its first value)
        o = outcome_of(_shape_rules_as_outcomes(tiler(spec, base, vary, soc)), fitting.last)
        row.update(limit=fitting.last, tiling_key=o.key, fits=True, ub_plan_bytes=o.plan_bytes)
    else:
        row["fits"] = False


class Progress:
    """A progress bar with an ETA on stderr: redrawn in place on a terminal, a line per tenth otherwise."""

    def __init__(self, total: int, skipped: int, stream=None, enabled: bool = True):
        self.total, self.done, self.skipped = total, 0, skipped
        self.stream = stream or sys.stderr
        self.enabled = enabled and total > 0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.monotonic()
        self._last_tenth = -1

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        eta_text = "--" if math.isnan(eta) else _duration(eta)
        skipped = f", {self.skipped} already written" if self.skipped else ""
        return (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} points{skipped}, "
                f"{_duration(elapsed)} elapsed, ETA {eta_text}")

    def step(self) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.tty:
            print("\r" + self.line(), end="", file=self.stream, flush=True)
            if self.done == self.total:
                print(file=self.stream)
        elif self.done * 10 // self.total != self._last_tenth:
            self._last_tenth = self.done * 10 // self.total
            print(self.line(), file=self.stream, flush=True)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


# --- running -------------------------------------------------------------------------------------------------
def _pool_initializer(threads: int) -> None:
    """Each pool process simulates cores on its share of the CPUs, unless the user chose ASCEND_SIM_THREADS."""
    os.environ.setdefault("ASCEND_SIM_THREADS", str(threads))


def _share_of_cpus(jobs: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(jobs, 1))


def _run_local(tasks: list[tuple], jobs: int) -> Iterable[dict]:
    if jobs <= 1:
        for task in tasks:
            yield run_point(*task)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    # spawn, not fork: a forked child would inherit the parent's simulator threads and numba state mid-flight
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_pool_initializer, initargs=(_share_of_cpus(jobs),)) as pool:
        futures = [pool.submit(run_point, *task) for task in tasks]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def _run_dask(tasks: list[tuple], address: str, jobs: int) -> Iterable[dict]:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise SweepError("--dask needs dask.distributed: pip install 'ascend-sim[dask]'") from None
    cluster = None
    if address == "local":
        cluster = LocalCluster(n_workers=max(jobs, 1), threads_per_worker=1, processes=True,
                               dashboard_address=None, env={"ASCEND_SIM_THREADS": str(_share_of_cpus(jobs))})
        client = Client(cluster)
    else:
        try:
            client = Client(address, timeout="20s")
        except (OSError, TimeoutError, ValueError) as e:
            raise SweepError(f"cannot reach the Dask scheduler at {address}: {str(e).splitlines()[0]}") from None
    try:
        futures = [client.submit(run_point, *task, pure=False) for task in tasks]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            client.cancel(futures)
            raise
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def sweep(command: str, op: str, grid: Mapping[str, object], socs: Sequence[str] | None = None, *,
          jobs: int = 1, dask: str | None = None, out: str | None = None, vary: str | None = None,
          low: int | None = None, high: int | None = None, progress: bool = False,
          on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Run `command` ("profile", "tiling" or "limits") of operator `op` at every point of `grid` x `socs`.

    grid: {axis: [values]} (a scalar is one value), axes named as `ascend-sim run`'s flags (AXES). socs: chip
    profiles (default ascend910b; for limits every stock profile). jobs: local processes (1: this process), or
    the Dask cluster's worker processes with dask="local"; dask: a scheduler address or "local". out: a .csv or
    .parquet file, resumed when it exists (points already written are skipped). vary / low / high: limits'
    dimension and range. Returns every point's row (dicts of `columns(axes, command)`), in grid order; a
    resumed point's row comes back as read from the file (text).
    Raises SweepError for a bad grid, axis, value or output before any point runs."""
    from .common import CliError
    if command not in COMMANDS:
        raise SweepError(f"unknown sweep command {command!r}; one of {', '.join(COMMANDS)}")
    axes_grid = normalise_grid(grid)
    if command != "profile" and "routing" in axes_grid:
        raise SweepError(f"the routing changes a case's inputs, not its tiling: `sweep {command}` does not take "
                         "the routing axis (`sweep profile` does)")
    if command == "limits":
        from ..limits import VARY
        if vary not in VARY:
            raise SweepError(f"sweep limits needs --vary, one of {', '.join(VARY)}")
        if vary in axes_grid:
            raise SweepError(f"--vary {vary} and the grid axis {vary} exclude each other")
    elif vary is not None:
        raise SweepError("--vary applies to `sweep limits` only")
    socs = list(socs) if socs else (["ascend910b", "ascend910_93", "ascend950"] if command == "limits"
                                    else ["ascend910b"])
    socs = [_soc_name(s) for s in socs]
    if len(set(socs)) != len(socs):
        raise SweepError(f"a chip is repeated in --soc ({', '.join(socs)})")
    if jobs < 1:
        raise SweepError(f"jobs must be at least 1, got {jobs}")
    if out is not None and not out.lower().endswith((".csv", ".parquet")):
        raise SweepError(f"--out {out}: the table is a .csv or .parquet file")
    if out is not None and out.lower().endswith(".parquet"):
        pyarrow_module("write Parquet")
    from .operators import op_spec
    try:
        spec = op_spec(op)
    except CliError as e:
        raise SweepError(str(e)) from None
    op = spec.name
    axes = list(axes_grid)
    all_points = points(axes_grid, socs)
    # every point through the command's parser and flag rules first: a bad value is an error now, not later
    options = dict(vary=vary, low=low, high=high)
    for point in all_points:
        _check_point(command, op, spec, point, options)
    cols = columns(axes, command)
    done = read_done(out, cols) if out else []
    done_keys = {key_of(r, [*axes, "soc"]) for r in done if r.get("op") == op}
    todo = [p for p in all_points if key_of(p, [*axes, "soc"]) not in done_keys]
    bar = Progress(len(todo), len(all_points) - len(todo), enabled=progress)
    tasks = [(command, op, p, options) for p in todo]
    new_rows: list[dict] = []
    writer = Journal(out, cols) if out else None
    try:
        results = _run_dask(tasks, dask, jobs) if dask else _run_local(tasks, jobs)
        for row in results:
            row = {"op": op, **row}
            new_rows.append(row)
            if writer is not None:
                writer.add(row)
            if on_row is not None:
                on_row(row)
            bar.step()
    finally:
        if writer is not None:
            writer.close()
    order = {key_of(p, [*axes, "soc"]): i for i, p in enumerate(all_points)}
    rows = sorted([*done, *new_rows], key=lambda r: order.get(key_of(r, [*axes, "soc"]), len(order)))
    if out:
        write_table(out, cols, rows)
    return rows


def _check_point(command: str, op: str, spec, point: dict, options: dict) -> None:
    from .common import CliError, check_flags_apply
    extra = ["--vary", options["vary"]] if command == "limits" else []
    a = _namespace(command, op, point, extra)
    try:
        check_flags_apply(a, spec, _soc(a))
    except CliError as e:
        given = ", ".join(f"{k}={v}" for k, v in point.items())
        raise SweepError(f"{given}: {e}") from None


