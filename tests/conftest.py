"""Shared fixtures: chip profiles, and a one-kernel harness for machine-model tests."""
from __future__ import annotations

import numpy as np
import pytest

from tiling import get_soc

PROFILE_NAMES = ("ascend910b", "ascend910_93", "ascend950")


@pytest.fixture(params=PROFILE_NAMES)
def soc(request):
    return get_soc(request.param)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
