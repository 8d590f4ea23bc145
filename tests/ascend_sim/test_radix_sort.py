"""ascend_sim.radix_sort: AscendC's arch35 Sort<T, false, {RADIX_SORT}> (ascending keys, uint32 source positions,
equal keys in source order) on uint8 / int16 / int32 keys, against NumPy's stable argsort of the same keys; an
operand outside UB faults."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import OutOfBoundsError
from ascend_sim._jit import aicore, global_aicore
from ascend_sim.radix_sort import radix_sort_ascending
from tiling import get_soc

from .harness import run, tbuf

CHIP950 = get_soc("ascend950")
PLAN = [tbuf("src", 4096), tbuf("dst", 4096), tbuf("index", 8192)]


@aicore
def _sort_body(c, src, dst, keys, count, out_values, out_index):
    index = asc.tbuf_get(c, 2, asc.ub_u32(c))
    for i in range(keys.size):
        src[i] = keys[i]
    radix_sort_ascending(c, dst, index, src, count)
    for i in range(count):
        out_values[i] = dst[i]
        out_index[i] = index[i]


@global_aicore
def sort_u8(c, keys, count, out_values, out_index):
    _sort_body(c, asc.tbuf_get(c, 0, asc.ub_u8(c)), asc.tbuf_get(c, 1, asc.ub_u8(c)), keys, count, out_values,
               out_index)


@global_aicore
def sort_i16(c, keys, count, out_values, out_index):
    _sort_body(c, asc.tbuf_get(c, 0, asc.ub_i16(c)), asc.tbuf_get(c, 1, asc.ub_i16(c)), keys, count, out_values,
               out_index)


@global_aicore
def sort_i32(c, keys, count, out_values, out_index):
    _sort_body(c, asc.tbuf_get(c, 0, asc.ub_i32(c)), asc.tbuf_get(c, 1, asc.ub_i32(c)), keys, count, out_values,
               out_index)


KERNELS = {1: sort_u8, 2: sort_i16, 4: sort_i32}


def _sort(keys, count=None):
    count = keys.size if count is None else count
    values, index = np.zeros(max(count, 1), keys.dtype), np.zeros(max(count, 1), np.uint32)
    run([KERNELS[keys.itemsize]], PLAN, keys, count, values, index, chip=CHIP950)
    return values[:count], index[:count]


@pytest.mark.parametrize("dtype,n", [(np.uint8, 300), (np.int16, 1000), (np.int32, 900), (np.int32, 1)],
                         ids=["u8-300", "i16-1000-signed", "i32-900-signed", "i32-one"])
def test_ascending_and_stable(dtype, n):
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype)
    keys = rng.integers(max(info.min, -50), min(info.max, 50), n, endpoint=True).astype(dtype)   # many ties
    values, index = _sort(keys)
    order = np.argsort(keys, kind="stable")
    assert np.array_equal(index, order.astype(np.uint32))
    assert np.array_equal(values, keys[order])
    assert np.all(np.diff(values.astype(np.int64)) >= 0)


def test_only_count_keys_are_sorted():
    keys = np.array([9, 3, 7, 1, 0, 0], np.int32)
    values, index = _sort(keys, 4)
    assert values.tolist() == [1, 3, 7, 9] and index.tolist() == [3, 1, 2, 0]


def test_more_keys_than_the_buffer_fault():
    keys = np.zeros(1024, np.int32)
    with pytest.raises(OutOfBoundsError):
        _sort(keys, 1025)
