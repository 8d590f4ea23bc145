"""ops.calibrate.fit: bounded least squares recovers known parameters, keeps to its bounds and rounds whole numbers."""
from __future__ import annotations

import numpy as np
import pytest

from ops.calibrate.fit import fit_bounded

SIZES = np.array([1e2, 1e3, 1e4, 1e5, 1e6])


def _roofline(rate, latency):
    """A toy kernel time: latency + bytes / rate, on a max with a second, cheaper path (a kink as in the model)."""
    return np.maximum(latency + SIZES / rate, 0.5 * latency + SIZES / (4 * rate))


@pytest.mark.parametrize("true", [(32.0, 241.0), (900.0, 17.0), (5.5, 3000.0)], ids=["910b-like", "fast", "slow"])
def test_recovers_the_parameters_of_a_kinked_model(true):
    measured = _roofline(*true)
    fit = fit_bounded(lambda x: np.log(_roofline(*x) / measured), (100.0, 100.0), (1.0, 1.0), (1e4, 1e4))
    assert fit.x == pytest.approx(true, rel=1e-3)
    assert fit.cost < 1e-8 < fit.start_cost


def test_whole_numbers_stay_whole_and_are_found():
    measured = _roofline(64.0, 300.0)
    seen = []

    def residuals(x):
        seen.append(x)
        return np.log(_roofline(*x) / measured)

    fit = fit_bounded(residuals, (20.0, 50.0), (1.0, 1.0), (1e3, 1e4), integer=(False, True))
    assert all(float(x[1]).is_integer() for x in seen)
    assert fit.x[1] == 300.0 and fit.x[0] == pytest.approx(64.0, rel=1e-3)


def test_the_fit_keeps_to_its_bounds():
    measured = _roofline(500.0, 10.0)
    seen = []

    def residuals(x):
        seen.append(x)
        return np.log(_roofline(*x) / measured)

    fit = fit_bounded(residuals, (50.0, 10.0), (10.0, 10.0), (200.0, 10.0))
    assert fit.x[0] == pytest.approx(200.0) and fit.x[1] == 10.0
    assert all(10.0 <= a <= 200.0 and b == 10.0 for a, b in seen)


@pytest.mark.parametrize("lower, upper", [((0.0,), (1.0,)), ((2.0,), (1.0,)), ((), ())],
                         ids=["zero", "crossed", "none"])
def test_bad_bounds_are_refused(lower, upper):
    with pytest.raises(ValueError):
        fit_bounded(lambda x: np.zeros(1), (1.0,) * len(lower), lower, upper)
