"""Shared fixtures: chip profiles, and a one-kernel harness for machine-model tests."""
from __future__ import annotations

import os
from collections import Counter

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


# The order pytest-xdist hands the test files to its workers (--dist loadfile; pyproject's addopts turn off xdist's
# own reordering by test count, --no-loadscope-reorder, which ran the files with the most tests first and left the
# files with few tests but minutes of kernel compilation, the warmup and sort-chain tests, for the end, one worker
# compiling while the other sat idle). A cold run spends most of its time compiling kernels, and the workers share
# numba's disk cache: a kernel one worker is compiling, the other waits for (ascend_sim/_cache_lock.py). So:
# * COLD_FIRST: the files that compile the most, longest first, neighbours on different operators (files go to the
#   two workers about alternately), so the workers compile different kernels at the same time;
# * SUPERSETS: the files that run every operator (checked mode over every key, the CLI's demo, the estimates); by
#   their turn the files above have compiled most of their kernels, so they mostly load them;
# * then every other file, the most tests first (what xdist's reordering did), the many short files filling the
#   end evenly.
# Cold seconds of a file's first tests (2026-12-06, 2 workers at load 3.5): checked sweep 221, permute 168, sort
# chains 69, unpermute grad 69, routing-map unpermute grad 43, checked mode 40, routing-map unpermute 36, CLI 33,
# finalize routing 31, outlined calls 21, register model 21, routing v2 grad 21. A file missing here only moves
# among the rest.
COLD_FIRST = ("tests/ops/test_permute.py", "tests/ops/test_moe_token_unpermute_grad.py",
              "tests/ops/test_moe_inplace_index_add_chains.py", "tests/ops/test_unpermute_with_routing_map_grad.py",
              "tests/ops/test_moe_token_unpermute_with_routing_map.py", "tests/ops/l0/test_moe_finalize_routing_v2.py",
              "tests/ops/test_routing_map_family.py", "tests/ops/l0/test_moe_init_routing_v2_grad.py",
              "tests/ascend_sim/test_regbase.py", "tests/ops/test_permute_with_routing_map_grad.py",
              "tests/ascend_sim/test_outline.py", "tests/ops/test_moe_token_permute_grad.py",
              "tests/ascend_sim/test_regbase_mx.py", "tests/ops/l0/test_moe_masked_scatter.py",
              "tests/ops/test_moe_token_unpermute.py", "tests/ascend_sim/test_jit_stamp.py",
              "tests/ops/test_friendly_calls.py", "tests/ascend_sim/test_cache_lock.py",
              "tests/ascend_sim/test_mask.py")
SUPERSETS = ("tests/ops/test_checked_sweep.py", "tests/ops/test_checked_mode.py", "tests/test_cli.py",
             "tests/ops/test_estimates.py", "tests/test_cli_json_schema.py", "tests/test_sweep.py")
FILE_ORDER = COLD_FIRST + SUPERSETS


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(FILE_ORDER)}
    per_file = Counter(item.nodeid.split("::", 1)[0] for item in items)

    def key(item):
        path = item.nodeid.split("::", 1)[0]
        return (rank.get(path, len(FILE_ORDER)), -per_file[path], path)

    # a stable sort: tests keep their order inside a file
    items.sort(key=key)


# The smoke tests all live in one file (tests/test_smoke.py). A run selecting them alone (`pytest -m smoke`) would
# still import every test module to read its marks (half a minute of collection on a loaded 2-core machine, more
# with a worker per CPU); it collects that one file instead.
SMOKE_FILE = "test_smoke.py"


def pytest_ignore_collect(collection_path, config):
    if config.getoption("markexpr", "") == "smoke" and collection_path.is_file() and \
            collection_path.name.startswith("test_") and collection_path.name != SMOKE_FILE:
        return True
    return None
