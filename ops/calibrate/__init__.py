"""Fitting cost-model figures to times measured on the chip (`ascend-sim calibrate`).

Input: msprof op_summary rows (msprof.read_op_summary) of kernels the simulator can estimate
(kernels.CALIBRATION_OPS), and optionally PipeUtilization pipe times of some of them. For the chosen
CostModel figures the fit minimises

    sum over rows of log(estimate_us / measured_us) ** 2
  + sum over the rows' measured pipes of log((simulated busy_us + 1e-3) / (measured busy_us + 1e-3)) ** 2

(the log-ratio weighs a 10 % miss on a 2 us kernel like one on a 2 ms kernel), each figure kept inside its
bounds, with ops.calibrate.fit's bounded Levenberg-Marquardt and coordinate search. Every evaluation runs the
rows' kernels under the trial figures (a cost figure changes no kernel, so nothing recompiles).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from ascend_sim.cost import CostModel
from ascend_sim.cost_file import cost_file_text
from ascend_sim.errors import ConfigError, SimulatorError
from tiling import get_soc
from tiling.status import AclnnError

from .fit import FitResult, fit_bounded
from .kernels import CALIBRATION_OPS, builder_for, register_op
from .msprof import InputError, OpRow, read_op_summary, read_pipe_utilization

__all__ = ["CALIBRATION_OPS", "Calibration", "Figure", "InputError", "OpRow", "RowFit", "calibrate", "parse_fit",
           "read_op_summary", "read_pipe_utilization", "register_op"]

PIPE_EPS_US = 1e-3
"""Added to both sides of a pipe-time ratio, so an idle pipe (0 us) stays a finite residual."""

DEFAULT_SPAN = 8.0
"""A figure's default bounds: its starting value divided and multiplied by this."""


@dataclass(frozen=True)
class Figure:
    """One cost figure to fit: its CostModel field, starting value and bounds; `integer` for cycle counts."""
    name: str
    start: float
    lower: float
    upper: float
    integer: bool


def fittable_figures(cost: CostModel) -> list[str]:
    """The CostModel fields a fit can move: the positive numeric ones (not flags, not tables)."""
    return [f.name for f in fields(cost) if isinstance(getattr(cost, f.name), (int, float))
            and not isinstance(getattr(cost, f.name), bool)]


def parse_fit(text: str, cost: CostModel) -> list[Figure]:
    """`name[:lower:upper],...` (e.g. "hbm_bytes_per_cycle:300:3000,mte2_latency_cycles") as Figures starting at
    `cost`'s values; ConfigError naming a figure that is unknown, not numeric, or whose bounds are not numbers
    with 0 < lower <= start-clamped <= upper."""
    known = fittable_figures(cost)
    figures = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, *bounds = (p.strip() for p in item.split(":"))
        if name not in known:
            raise ConfigError(f"--fit {name!r}: not a figure the fit can move; fittable: {', '.join(known)}",
                              setting="fit")
        value = getattr(cost, name)
        integer = isinstance(value, int)
        start = float(value) if value > 0 else 1.0
        if bounds:
            if len(bounds) != 2:
                raise ConfigError(f"--fit {item!r}: bounds are given as name:lower:upper", setting="fit")
            try:
                lower, upper = float(bounds[0]), float(bounds[1])
            except ValueError:
                raise ConfigError(f"--fit {item!r}: bounds must be numbers", setting="fit") from None
            if not (math.isfinite(lower) and math.isfinite(upper) and 0 < lower <= upper):
                raise ConfigError(f"--fit {item!r}: bounds must satisfy 0 < lower <= upper", setting="fit")
        else:
            lower, upper = start / DEFAULT_SPAN, start * DEFAULT_SPAN
        if integer:
            lower, upper = max(1.0, math.ceil(lower)), max(1.0, math.floor(upper))
            if lower > upper:
                raise ConfigError(f"--fit {item!r}: no whole number of cycles lies within the bounds", setting="fit")
        figures.append(Figure(name, min(max(start, lower), upper), lower, upper, integer))
    if not figures:
        raise ConfigError("--fit names no figure", setting="fit")
    if len({f.name for f in figures}) != len(figures):
        raise ConfigError("--fit names a figure twice", setting="fit")
    return figures


@dataclass(frozen=True)
class RowFit:
    """One row's measured time and its estimates before and after the fit (microseconds)."""
    row: OpRow
    before_us: float
    after_us: float

    @staticmethod
    def error(estimate_us: float, measured_us: float) -> float:
        """Relative error of an estimate: estimate / measured - 1."""
        return estimate_us / measured_us - 1.0

    @property
    def before_error(self) -> float:
        return self.error(self.before_us, self.row.duration_us)

    @property
    def after_error(self) -> float:
        return self.error(self.after_us, self.row.duration_us)


@dataclass(frozen=True)
class Calibration:
    """A fit's outcome: the chip, the figures before and after, every row's error, the optimiser's record."""
    soc_name: str
    figures: tuple[Figure, ...]
    fitted: dict
    rows: tuple[RowFit, ...]
    result: FitResult

    def rms_log_error(self, after: bool) -> float:
        """Root mean square of log(estimate / measured) over the rows."""
        logs = [math.log((r.after_us if after else r.before_us) / r.row.duration_us) for r in self.rows]
        return math.sqrt(sum(v * v for v in logs) / len(logs))

    def lines(self) -> list[str]:
        width = max(8, *(len(r.row.op_type) for r in self.rows))
        out = [f"calibration on {self.soc_name}: {len(self.rows)} row(s), {len(self.figures)} figure(s), "
               f"{self.result.evaluations} evaluations",
               f"  {'line':>5}  {'op':<{width}}  {'measured us':>12}  {'before us':>10} {'error':>8}  "
               f"{'after us':>10} {'error':>8}"]
        for r in self.rows:
            out.append(f"  {r.row.line:>5}  {r.row.op_type:<{width}}  {r.row.duration_us:>12,.2f}  "
                       f"{r.before_us:>10,.2f} {r.before_error:>+8.1%}  {r.after_us:>10,.2f} {r.after_error:>+8.1%}")
        out.append(f"  rms log-error {self.rms_log_error(False):.4f} -> {self.rms_log_error(True):.4f}")
        for f in self.figures:
            out.append(f"  {f.name}: {f.start:g} -> {self.fitted[f.name]:g}  (bounds {f.lower:g} .. {f.upper:g})")
        return out

    def cost_file(self, start: dict | None = None, source: str = "ascend-sim calibrate") -> str:
        """The fitted figures, over the `start` figures the fit began from ({field: value}, e.g. a cost file's),
        as a cost file (ascend_sim.cost_file) for --cost-file and get_soc(cost=...)."""
        return cost_file_text({**(start or {}), **self.fitted}, soc=self.soc_name, source=source,
                              rows=len(self.rows), rms_log_error=round(self.rms_log_error(True), 6))


def _value(figure: Figure, x: float):
    return int(round(x)) if figure.integer else float(x)


def calibrate(rows: list[OpRow], soc, figures: list[Figure], pipes: dict | None = None) -> Calibration:
    """Fit `figures` of `soc` (a profile name or SocProfile) to `rows`; `pipes` maps an op_summary line to the
    {pipe: mean busy us} of its kernel's PipeUtilization (msprof.read_pipe_utilization). InputError names the
    first row the simulator cannot estimate."""
    base = get_soc(soc)
    pipes = dict(pipes or {})
    lines = {r.line for r in rows}
    for line in pipes:
        if line not in lines:
            raise ConfigError(f"--pipe-csv names line {line}, which holds no op_summary row", setting="pipe-csv")
    estimators = [(row, builder_for(row)(row)) for row in rows]

    def chip(x):
        return get_soc(base, cost={f.name: _value(f, v) for f, v in zip(figures, x, strict=True)})

    def estimates(x):
        s = chip(x)
        out = []
        for row, estimator in estimators:
            try:
                est = estimator(s)
            except (AclnnError, SimulatorError) as e:
                raise row.error(f"the simulator refused {row.op_type} at these shapes: "
                                f"{type(e).__name__} {str(e).splitlines()[0]}") from None
            if not est.time_us > 0:
                raise row.error(f"{row.op_type} estimates at 0 us (cost model disabled?)")
            out.append(est)
        return out

    def residuals(x):
        res = []
        for (row, _), est in zip(estimators, estimates(x), strict=True):
            res.append(math.log(est.time_us / row.duration_us))
            for pipe, measured in pipes.get(row.line, {}).items():
                if pipe == "total":
                    continue
                if getattr(est, "modelled", False) or not est.cores:
                    raise row.error(f"--pipe-csv: {row.op_type} is modelled, not simulated: it has no pipe times")
                simulated = float(np.mean([est.cost.us(t.busy_of(pipe)) for t in est.cores]))
                res.append(math.log((simulated + PIPE_EPS_US) / (measured + PIPE_EPS_US)))
        return np.array(res)

    start = [f.start for f in figures]
    before = [e.time_us for e in estimates(start)]
    result = fit_bounded(residuals, start, [f.lower for f in figures], [f.upper for f in figures],
                         integer=[f.integer for f in figures])
    after = [e.time_us for e in estimates(result.x)]
    fitted = {f.name: _value(f, v) for f, v in zip(figures, result.x, strict=True)}
    return Calibration(base.name, tuple(figures), fitted,
                       tuple(RowFit(row, b, a)
                             for (row, _), b, a in zip(estimators, before, after, strict=True)), result)
