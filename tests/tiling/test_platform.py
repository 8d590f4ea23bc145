"""Chip profiles: the documented numbers, aliases and custom overrides."""
from __future__ import annotations

import dataclasses

import numpy as np
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


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(ub_size=65536.7), "whole number"),
    (dict(ub_size=65536.0), "whole number"),
    (dict(aiv_num=2.9), "whole number"),
    (dict(aiv_num=True), "whole number"),
    (dict(ub_size="65536"), "whole number"),
    (dict(ub_size=-1), "between"),
    (dict(ub_size=287), "between"),
    (dict(ub_size=2 ** 40), "between"),
    (dict(aiv_num=-3), "between"),
    (dict(aiv_num=10 ** 9), "between"),
    (dict(ub_size=16 * 1024 * 1024, aiv_num=4096), "host memory"),
], ids=lambda v: repr(v) if not isinstance(v, str) else v)
def test_custom_profile_values_are_checked(kwargs, fragment):
    from tiling.platform import ProfileError
    with pytest.raises(ProfileError, match=fragment):
        get_soc("910b", **kwargs)


def test_profile_limits_are_inclusive():
    from tiling.platform import HOST_UB_BUDGET_BYTES, MAX_AIV_NUM, MAX_UB_BYTES, MIN_UB_BYTES
    assert get_soc("910b", ub_size=MIN_UB_BYTES).ub_size_for_tiling == 32
    assert get_soc("910b", ub_size=MAX_UB_BYTES, aiv_num=HOST_UB_BUDGET_BYTES // MAX_UB_BYTES).ub_size == MAX_UB_BYTES
    assert get_soc("910b", aiv_num=MAX_AIV_NUM).aiv_num == MAX_AIV_NUM
    assert get_soc("910b", ub_size=np.int64(65536), aiv_num=np.int32(8)).ub_size == 65536


def test_hand_built_profiles_are_checked_too():
    from tiling.platform import ProfileError
    bad = dataclasses.replace(get_soc("910b"), ub_size=1.5)
    with pytest.raises(ProfileError, match="ub_size"):
        get_soc(bad)
    with pytest.raises(ProfileError, match="profile name or a SocProfile"):
        get_soc(910)
