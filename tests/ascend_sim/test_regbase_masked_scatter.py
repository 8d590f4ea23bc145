"""The register instructions added for MoeMaskedScatter's prefix-count VF (end of regbase.py): DataCopy
DIST_UNPACK4_B8, DataCopyGather, Duplicate from a register, Copy (zeroing / merging), each against hand-worked
lanes, and their faults."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, ElementTypeError, OutOfBoundsError
from ascend_sim._jit import global_aicore

from .harness import run_vf


@global_aicore
def masked_scatter_vf_kernel(c, p, src, dst):
    """p[0] picks the scenario, p[1..] its arguments; x = src (1024 bytes) in UB, y (1024 bytes) dumped to dst."""
    x = asc.tbuf_get(c, 0, asc.ub_i32(c))
    y = asc.tbuf_get(c, 1, asc.ub_i32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), x.size)
    asc.duplicate(c, y, np.int32(-1), y.size)
    xb = asc.view_as(c, x, asc.ub_u8(c))
    if asc.vec_scope_begin(c):
        full, m = asc.mreg(c, 1), asc.mreg(c, 0)
        asc.create_mask(c, full, 4, asc.PAT_ALL)
        asc.update_mask(c, m, 4, p[2])
        r, s, idx = asc.vreg_i32(c, 0), asc.vreg_i32(c, 1), asc.vreg_u32(c, 2)
        op = p[0]
        if op == 0:      # DIST_UNPACK4_B8 load of the bytes at p[1]; returns the post-updated offset in y[255]
            nxt = asc.reg_load_unpack4_b8(c, asc.vreg_u8(c, 0), xb, p[1])
            asc.reg_store(c, y, r, 0, full)
            asc.set_value(c, y, 255, np.int32(nxt))
        elif op == 1:    # gather x[lane * p[1] + 3] on the first p[2] lanes
            asc.varange(c, asc.vreg_i32(c, 2), 0)
            asc.vmuls(c, idx, idx, np.uint32(p[1]), full)
            asc.vadds(c, idx, idx, np.uint32(3), full)
            asc.vduplicate(c, r, np.int32(99), full)
            asc.reg_gather(c, r, x, idx, m)
            asc.reg_store(c, y, r, 0, full)
        elif op == 2:    # Duplicate lane 0 of a register (x's first 64 words) over the first p[2] lanes, mode p[1]
            asc.reg_load(c, s, x, 0, asc.LOAD_NORM)
            asc.vduplicate(c, r, np.int32(5), full)
            asc.vduplicate_reg(c, r, s, m, p[1])
            asc.reg_store(c, y, r, 0, full)
        elif op == 3:    # Copy x's first 64 words over the first p[2] lanes, mode p[1]
            asc.reg_load(c, s, x, 0, asc.LOAD_NORM)
            asc.vduplicate(c, r, np.int32(5), full)
            asc.vcopy(c, r, s, m, p[1])
            asc.reg_store(c, y, r, 0, full)
        elif op == 4:    # gather with an index past x (p[1] = that index on lane 0)
            asc.vduplicate(c, asc.vreg_i32(c, 2), np.int32(p[1]), full)
            asc.reg_gather(c, r, x, idx, m)
        elif op == 5:    # gather into a 16-bit register from the int32 x
            asc.reg_gather(c, asc.vreg_u16(c, 0), x, idx, m)
        asc.vec_scope_end(c)
    asc.data_copy(c, asc.gm_at(dst, 0), y, y.size)


WORDS = (np.arange(256, dtype=np.int64) * 7919 % 100003 - 50000).astype(np.int32)


def launch(p, src=WORDS):
    return run_vf(masked_scatter_vf_kernel, p, np.ascontiguousarray(src).astype(np.int32), np.zeros(256, np.int32))


@pytest.mark.parametrize("offset", [0, 32, 960], ids=["at-0", "at-32", "last-64-bytes"])
def test_unpack4_b8_puts_byte_i_in_the_low_byte_of_lane_i(offset):
    got = launch([0, offset, 64])
    want = WORDS.view(np.uint8)[offset: offset + 64].astype(np.int32)     # zero-extended, the upper bytes 0
    assert np.array_equal(got[:64], want)
    assert got[255] == offset + 64


def test_unpack4_b8_faults_off_32_byte_alignment():
    with pytest.raises(AlignmentError):
        launch([0, 16, 64])


@pytest.mark.parametrize("stride,lanes", [(1, 64), (3, 64), (4, 10)], ids=["stride-1", "stride-3", "stride-4-10-lanes"])
def test_gather_reads_index_lanes_and_zeroes_inactive_ones(stride, lanes):
    got = launch([1, stride, lanes])
    want = np.zeros(64, np.int32)
    want[:lanes] = WORDS[np.arange(lanes) * stride + 3]
    assert np.array_equal(got[:64], want)


def test_gather_faults_on_an_index_past_the_tensor():
    with pytest.raises(OutOfBoundsError):
        launch([4, 256, 1])


def test_gather_faults_on_mismatched_element_types():
    with pytest.raises(ElementTypeError):
        launch([5, 0, 1])


@pytest.mark.parametrize("mode,name", [(0, "zeroing"), (1, "merging")], ids=["zeroing", "merging"])
def test_duplicate_from_register_spreads_lane_0(mode, name):
    got = launch([2, mode, 20])[:64]
    rest = 0 if name == "zeroing" else 5
    assert np.array_equal(got, np.array([WORDS[0]] * 20 + [rest] * 44, np.int32))


@pytest.mark.parametrize("mode,name", [(0, "zeroing"), (1, "merging")], ids=["zeroing", "merging"])
def test_copy_takes_active_lanes(mode, name):
    got = launch([3, mode, 7])[:64]
    rest = 0 if name == "zeroing" else 5
    assert np.array_equal(got, np.concatenate([WORDS[:7], np.full(57, rest, np.int32)]))
