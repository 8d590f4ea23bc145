"""The example operator of docs/guides/write-your-own-kernel.md: results, tiling, checked mode, profile."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ascend_sim import PipeRaceError
from ascend_sim.trace import tracing, write_json
from ops import example_add
from tests.bits import assert_bits_equal
from tiling import get_soc


@pytest.mark.parametrize("n", [1, 8, 9, 1000, 8192, 8193, 48 * 8192 + 5, 3_000_000],
                         ids=lambda n: f"n{n}")
@pytest.mark.parametrize("soc", ["ascend910b", "ascend950"])
def test_add_matches_the_golden_bit_for_bit(n, soc):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    z = example_add.add(x, y, soc=soc, check="race")
    assert_bits_equal(z, example_add.golden(x, y))


@pytest.mark.parametrize("n,block_dim,tile", [(8, 1, 8), (1000, 42, 24), (3_000_000, 48, 8192)])
def test_the_tiling_splits_over_cores_and_fills_the_ub(n, block_dim, tile):
    t = example_add.tiling(n, "ascend910b")
    assert t.block_dim == block_dim and t.data.tile_length == tile
    assert t.block_dim * t.data.block_length >= n > (t.block_dim - 1) * t.data.block_length
    assert t.ub_plan_bytes <= get_soc("ascend910b").ub_size


def test_the_broken_variant_is_caught_by_the_race_checker_only():
    x = np.ones(4096, dtype=np.float32)
    y = np.full(4096, 2.0, dtype=np.float32)
    z = np.zeros_like(x)
    size, ex = example_add.get_workspace_size(x, y, z, broken=True)
    example_add.run(None, size, ex)                      # unchecked: the numbers come out right anyway
    assert (z == 3.0).all()
    with pytest.raises(PipeRaceError) as err:
        example_add.run(None, size, ex, check="race")
    e = err.value
    assert e.kind == "RAW" and (e.first["pipe"], e.second["pipe"]) == ("PIPE_MTE2", "PIPE_V")
    assert e.first["call"] == "DataCopyPad(GM->UB)" and e.second["call"] == "Add"


def test_its_profile_shows_double_buffering_and_a_trace(tmp_path):
    x = np.ones(48 * 8 * 8192, dtype=np.float32)
    z = np.zeros_like(x)
    size, ex = example_add.get_workspace_size(x, x.copy(), z)
    with tracing(cores=(0,)) as request:
        report = example_add.run(None, size, ex)
    est = report.estimate
    core = est.cores[0]
    # copy-in, add and copy-out of different tiles overlap: the core takes about as long as its busiest pipe
    # (MTE2: two inputs per output), not the sum of the three
    assert core.cycles <= 1.15 * max(core.busy_of("MTE2"), core.busy_of("V"), core.busy_of("MTE3"))
    assert core.cycles < 0.75 * (core.busy_of("MTE2") + core.busy_of("V") + core.busy_of("MTE3"))
    assert est.bound in ("MTE2", "HBM")
    summary = write_json(request.runs, tmp_path / "add.json")
    doc = json.loads((tmp_path / "add.json").read_text())
    assert summary["flows"] > 0 and len([e for e in doc["traceEvents"] if e["ph"] == "X"]) == summary["events"]


def test_bad_inputs_are_refused():
    with pytest.raises(TypeError, match="float32"):
        example_add.add(np.ones(8, np.float64), np.ones(8, np.float64))
    with pytest.raises(ValueError, match="one shape"):
        example_add.get_workspace_size(np.ones(8, np.float32), np.ones(9, np.float32), np.ones(8, np.float32))
