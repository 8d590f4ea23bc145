"""Chip profiles: the documented numbers, aliases and custom overrides."""
from __future__ import annotations

import dataclasses

import pytest

from tiling import SocProfile, get_soc


@pytest.mark.parametrize("name,aiv,ub,arch", [("ascend910b", 48, 196608, 2201), ("ascend910_93", 48, 196608, 2201),
                                              ("ascend950", 64, 253952, 3510)])
def test_profiles(name, aiv, ub, arch):
    soc = get_soc(name)
    assert (soc.name, soc.aiv_num, soc.ub_size, soc.npu_arch) == (name, aiv, ub, arch)
    assert soc.ub_size_for_tiling == ub - 256
    assert soc.is_regbase == (arch == 3510)


@pytest.mark.parametrize("alias,name", [("910b", "ascend910b"), ("ASCEND910_93", "ascend910_93"),
                                        ("950", "ascend950"), ("Ascend950", "ascend950")])
def test_aliases(alias, name):
    assert get_soc(alias).name == name


def test_overrides_make_a_custom_profile():
    soc = get_soc("910b", ub_size=65536, aiv_num=64)
    assert (soc.ub_size, soc.ub_size_for_tiling, soc.aiv_num, soc.npu_arch) == (65536, 65280, 64, 2201)
    assert soc.name != "ascend910b"
    assert get_soc(soc) is soc
    with pytest.raises(dataclasses.FrozenInstanceError):
        soc.ub_size = 1  # type: ignore[misc]
    assert isinstance(soc, SocProfile)


@pytest.mark.parametrize("kwargs", [dict(name="910c"), dict(name="910b", ub_size=256), dict(name="910b", aiv_num=0)])
def test_bad_profiles_are_rejected(kwargs):
    with pytest.raises(ValueError):
        get_soc(**kwargs)
