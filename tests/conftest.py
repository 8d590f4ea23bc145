"""Shared fixtures: chip profiles, and a one-kernel harness for machine-model tests."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tiling import get_soc

PROFILE_NAMES = ("ascend910b", "ascend910_93", "ascend950")

# The suite tests the compiled kernels, so a cold launch compiles here rather than running in the interpreter, and
# no background compiler starts (tests/ascend_sim/test_interpret.py compares the interpreted tier with them).
# ASCEND_SIM_TIER=interpreted pytest ... runs the suite interpreted instead.
os.environ.setdefault("ASCEND_SIM_TIER", "compiled")
os.environ.setdefault("ASCEND_SIM_BACKGROUND_COMPILE", "0")


@pytest.fixture(params=PROFILE_NAMES)
def soc(request):
    return get_soc(request.param)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# The files whose cold run (mostly numba compiling their kernels) takes longest, longest first: pytest-xdist's
# --dist loadfile hands files to the workers in collection order, and in alphabetical order these came in the
# middle and at the end, so one worker was still compiling them while the other sat idle (a cold suite on two
# cores spent 470 s of test time in 338 s of wall time). Cold seconds per file, measured 2026-12-02: checked
# sweep 97, permute 76, routing-map unpermute grad 55, checked mode 36, routing-map family 36, CLI 33,
# register model 22, outlined calls 18, estimates 13. A file missing from this list only runs later.
HEAVY_FIRST = ("tests/ops/test_checked_sweep.py", "tests/ops/test_permute.py",
               "tests/ops/test_unpermute_with_routing_map_grad.py", "tests/ops/test_checked_mode.py",
               "tests/ops/test_routing_map_family.py", "tests/test_cli.py", "tests/ascend_sim/test_regbase.py",
               "tests/ascend_sim/test_outline.py", "tests/ops/test_estimates.py")


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    # a stable sort: tests keep their order inside a file, and the other files their alphabetical order
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(HEAVY_FIRST)))


# The smoke tests all live in one file (tests/test_smoke.py). A run selecting them alone (`pytest -m smoke`) would
# still import every test module to read its marks (half a minute of collection on a loaded 2-core machine, more
# with a worker per CPU); it collects that one file instead.
SMOKE_FILE = "test_smoke.py"


def pytest_ignore_collect(collection_path, config):
    if config.getoption("markexpr", "") == "smoke" and collection_path.is_file() and \
            collection_path.name.startswith("test_") and collection_path.name != SMOKE_FILE:
        return True
    return None
