"""moe_layer's whole-number arguments: anything but a whole number in range is a ValueError naming it."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ops.moe_layer import LayerArgumentError, moe_layer

SMALL = dict(style="routing_map_pad", tokens=4, hidden=4, experts=2, topk=1, finite_differences=False)


NOT_WHOLE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan, "none": None, "2.5": 2.5, "2.0": 2.0, "str": "3",
             "bool": True}
CASES = [(name, label) for name in ("tokens", "hidden", "experts", "topk", "capacity", "seed") for label in NOT_WHOLE
         if (name, label) != ("capacity", "none")]      # capacity None is the default, ceil(N * K / E)


@pytest.mark.parametrize("name,label", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_a_whole_number_argument_refuses_anything_else(name, label):
    value = NOT_WHOLE[label]
    with pytest.raises(ValueError, match=rf"^{name} must be a .*whole number") as info:
        moe_layer(**{**SMALL, name: value})
    assert isinstance(info.value, LayerArgumentError) and info.value.argument == name


@pytest.mark.parametrize("kwargs,name,fragment", [
    (dict(capacity=5), "capacity", "must not exceed tokens (4)"),
    (dict(seed=-1), "seed", "whole number >= 0"),
    (dict(topk=3), "topk", "must not exceed experts (2)"),
], ids=["capacity-above-tokens", "negative-seed", "topk-above-experts"])
def test_out_of_range_arguments_name_themselves(kwargs, name, fragment):
    with pytest.raises(LayerArgumentError, match=re.escape(fragment)) as info:
        moe_layer(**{**SMALL, **kwargs})
    assert info.value.argument == name


def test_numpy_integers_are_whole_numbers():
    from ops.moe_layer import check_arguments
    assert check_arguments("routing_map_pad", "fp32", np.int64(4), np.int32(4), np.int64(2), np.int8(1),
                           np.int64(2), np.uint8(0)) == 2
