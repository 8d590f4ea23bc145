"""StoreDist::DIST_FIRST_ELEMENT_B32 (ascend_sim.regbase.first_element): lane 0 to any float address, nothing else
written, a 32-bit element type, the address inside the LocalTensor."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import ElementTypeError, OutOfBoundsError
from ascend_sim import regbase as rb
from ascend_sim._jit import global_aicore

from .harness import run_vf


@global_aicore
def first_element_kernel(c, p, src, dst):
    """x = src (1024 bytes) into a register (lanes 0..63), stored by DIST_FIRST_ELEMENT_B32 into y (pre-set to -1)
    at float p[1] with lane 0 kept when p[2] (p[0] 1: into an int16 view instead, p[0] 2: into the first p[3]
    floats of y)."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), x.size)
    asc.duplicate(c, y, -1.0, y.size)
    if asc.vec_scope_begin(c):
        r = asc.vreg_f32(c, 0)
        m = asc.mreg(c, 0)
        asc.reg_load(c, r, x, 0, asc.LOAD_NORM)
        asc.update_mask(c, m, 4, p[2])
        if p[0] == 0:
            rb.reg_store_first_element(c, y, r, p[1], m)
        elif p[0] == 1:
            rb.reg_store_first_element(c, asc.view_as(c, y, asc.ub_i16(c)), r, p[1], m)
        else:
            rb.reg_store_first_element(c, y[: p[3]], r, p[1], m)
        asc.vec_scope_end(c)
    asc.data_copy(c, asc.gm_at(dst, 0), y, y.size)


SRC = np.arange(256, dtype=np.float32) * np.float32(1.5) + np.float32(3.0)


def launch(p):
    return run_vf(first_element_kernel, p, SRC.copy(), np.zeros(256, np.float32))


@pytest.mark.parametrize("offset", [0, 1, 7, 13, 255])
def test_lane_zero_lands_at_any_float_and_nothing_else(offset):
    got = launch([0, offset, 1, 0])
    want = np.full(256, -1.0, np.float32)
    want[offset] = SRC[0]
    assert np.array_equal(got, want)


def test_a_mask_without_lane_zero_writes_nothing():
    assert np.array_equal(launch([0, 5, 0, 0]), np.full(256, -1.0, np.float32))


def test_a_whole_mask_still_writes_one_float():
    got = launch([0, 3, 64, 0])
    assert got[3] == SRC[0] and np.count_nonzero(got != -1.0) == 1


def test_a_16_bit_tensor_is_an_element_type_error():
    with pytest.raises(ElementTypeError):
        launch([1, 0, 1, 0])


def test_past_the_tensor_is_out_of_bounds():
    with pytest.raises(OutOfBoundsError):
        launch([2, 8, 1, 8])
