"""Bounded least squares over a few parameters, in numpy: what `ascend-sim calibrate` fits cost figures with.

`fit_bounded(residuals, start, lower, upper, integer=...)` minimises `sum(residuals(x) ** 2)` for x inside the
box [lower, upper]. The residual function is a black box (here: a simulation per evaluation, piecewise linear
in the figures, with flat steps where a figure is a whole number of cycles), so:

1. Levenberg-Marquardt in log space (every parameter is a positive scale figure, so a relative step means the
   same for a rate of 768 bytes per cycle and a latency of 16 cycles): a forward-difference Jacobian, the
   damped Gauss-Newton step, clipped to the box; the damping grows when a step does not lower the cost.
2. A coordinate search that polishes the result: each parameter in turn is moved by shrinking relative steps
   (whole numbers: by +-1, +-2, ...) while that lowers the cost; where Gauss-Newton stalled on a flat step of
   an integer figure, this still moves it.

Every evaluated point is rounded where the parameter is a whole number, so no point is ever evaluated that
the cost model could not hold.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

FD_STEP = 0.04
"""Forward-difference step of the Jacobian, relative (in log space)."""


@dataclass(frozen=True)
class FitResult:
    """What fit_bounded found: `x` (the parameters), `cost` = sum of squared residuals at x, `start_cost` at the
    start, `evaluations` of the residual function, `iterations` of Levenberg-Marquardt."""
    x: tuple[float, ...]
    cost: float
    start_cost: float
    evaluations: int
    iterations: int


def fit_bounded(residuals: Callable[[Sequence[float]], np.ndarray], start: Sequence[float], lower: Sequence[float],
                upper: Sequence[float], *, integer: Sequence[bool] | None = None, max_iterations: int = 40,
                tolerance: float = 1e-10) -> FitResult:
    """Minimise sum(residuals(x)**2) over lower <= x <= upper (all positive); `integer[j]` marks parameters that
    are whole numbers. `residuals` takes the parameters as a tuple of floats (whole numbers already rounded)
    and returns a 1-D array of the same length every time."""
    lo = np.asarray(lower, dtype=float)
    hi = np.asarray(upper, dtype=float)
    ints = np.zeros(lo.size, dtype=bool) if integer is None else np.asarray(integer, dtype=bool)
    if lo.size == 0:
        raise ValueError("nothing to fit: no parameters")
    if np.any(lo <= 0) or np.any(hi < lo):
        raise ValueError("bounds must be positive and lower <= upper")
    calls = [0]
    seen: dict[tuple, np.ndarray] = {}

    def snap(x):
        x = np.clip(np.asarray(x, dtype=float), lo, hi)
        return np.where(ints, np.clip(np.round(x), np.ceil(lo), np.floor(hi)), x)

    def evaluate(x):
        key = tuple(float(v) for v in snap(x))
        if key not in seen:
            calls[0] += 1
            seen[key] = np.asarray(residuals(key), dtype=float)
        return seen[key]

    def cost_of(x):
        r = evaluate(x)
        return float(r @ r)

    x = snap(start)
    start_cost = cost = cost_of(x)
    damping, iterations = 1e-3, 0
    for iterations in range(1, max_iterations + 1):  # noqa: B007 - the count reached is read after the loop
        if cost <= tolerance:
            break
        r = evaluate(x)
        u = np.log(x)
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            step = FD_STEP if not ints[j] else max(FD_STEP, np.log((x[j] + 1) / x[j]))
            direction = 1.0 if np.exp(u[j] + step) <= hi[j] else -1.0
            probe = x.copy()
            probe[j] = np.exp(u[j] + direction * step)
            probe = snap(probe)
            du = np.log(probe[j]) - u[j]
            jac[:, j] = (evaluate(probe) - r) / du if du else 0.0
        normal = jac.T @ jac
        gradient = jac.T @ r
        improved = False
        while damping < 1e8:
            lhs = normal + damping * np.diag(np.diag(normal) + 1e-12)
            try:
                delta = np.linalg.solve(lhs, -gradient)
            except np.linalg.LinAlgError:
                delta = -gradient / (np.diag(lhs) + 1e-12)
            trial = snap(np.exp(u + delta))
            trial_cost = cost_of(trial)
            if trial_cost < cost and not np.array_equal(trial, x):
                x, cost, improved = trial, trial_cost, True
                damping = max(damping / 10, 1e-9)
                break
            damping *= 10
        if not improved:
            break
    x, cost = _coordinate_search(x, cost, cost_of, lo, hi, ints, snap)
    return FitResult(tuple(float(v) for v in x), cost, start_cost, calls[0], iterations)


def _coordinate_search(x, cost, cost_of, lo, hi, ints, snap, rounds: int = 4):
    """Move one parameter at a time while that lowers the cost: relative steps of 8 %, 2 %, 0.5 % for real
    parameters, 1 and 2 for whole numbers."""
    for _ in range(rounds):
        moved = False
        for j in range(x.size):
            steps = (2.0, 1.0) if ints[j] else (0.08, 0.02, 0.005)
            for step in steps:
                while True:
                    best = None
                    for sign in (1.0, -1.0):
                        trial = x.copy()
                        trial[j] = x[j] + sign * step if ints[j] else x[j] * (1 + sign * step)
                        trial = snap(trial)
                        if np.array_equal(trial, x):
                            continue
                        c = cost_of(trial)
                        if c < cost and (best is None or c < best[1]):
                            best = (trial, c)
                    if best is None:
                        break
                    x, cost = best
                    moved = True
        if not moved:
            break
    return x, cost
