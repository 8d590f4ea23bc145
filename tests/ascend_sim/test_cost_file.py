"""Cost override files: what calibrate writes, get_soc(cost=path) and --cost-file read, with every bad file one
ConfigError naming it."""
from __future__ import annotations

import json

import pytest

from ascend_sim import ConfigError
from ascend_sim.cost_file import cost_file_text, load_cost_file
from tiling import get_soc
from tiling.platform import ProfileError


def _write(tmp_path, text, name="cost.json"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("soc_name", ["ascend910b", "ascend950"])
def test_a_written_file_round_trips_through_get_soc(tmp_path, soc_name):
    figures = {"hbm_bytes_per_cycle": 612.5, "mte2_latency_cycles": 300, "vec_call_cycles_per_repeat": (("Cast", 3),)}
    path = _write(tmp_path, cost_file_text(figures, soc=soc_name, rows=3))
    soc = get_soc(soc_name, cost=str(path))
    assert soc.cost.hbm_bytes_per_cycle == 612.5 and soc.cost.mte2_latency_cycles == 300
    assert soc.cost.vec_call_cycles_per_repeat == (("Cast", 3),)
    assert soc.cost.mte3_latency_cycles == get_soc(soc_name).cost.mte3_latency_cycles
    assert get_soc(soc_name, cost=path).cost == soc.cost        # a Path works as well as a str


def test_a_bare_object_of_figures_is_read_too(tmp_path):
    path = _write(tmp_path, json.dumps({"scalar_call_cycles": 6}))
    assert load_cost_file(path) == {"scalar_call_cycles": 6}


@pytest.mark.parametrize("text, match", [
    ('{"cost": {"hbm_bytes_per_cycle": 900,\n "oops" }}', r"line 2: not JSON"),
    ('[1, 2]', "expected a JSON object"),
    ('{"cost": {"no_such_figure": 1}}', "unknown cost parameter 'no_such_figure'"),
    ('{"cost": {"mte2_latency_cycles": 240.5}}', "whole number of cycles"),
    ('{"cost": {"hbm_bytes_per_cycle": "fast"}}', "must be a finite number"),
    ('{"cost": {"enabled": 1}}', "true or false"),
    ('{"cost": 5}', "must be an object"),
], ids=["bad-json", "not-object", "unknown", "fractional-cycles", "string", "bool", "cost-not-object"])
def test_a_bad_file_is_one_error_naming_it(tmp_path, text, match):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=match) as info:
        load_cost_file(path)
    assert str(path) in str(info.value)
    with pytest.raises(ProfileError, match=match):
        get_soc("ascend910b", cost=str(path))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="cannot read it"):
        load_cost_file(tmp_path / "absent.json")


def test_out_of_range_figures_are_refused_by_the_cost_model(tmp_path):
    path = _write(tmp_path, json.dumps({"cost": {"hbm_bytes_per_cycle": -3}}))
    with pytest.raises(ProfileError, match="hbm_bytes_per_cycle"):
        get_soc("ascend910b", cost=str(path))
