"""The register instructions added for MoeFinalizeRoutingV2's VFs (end of regbase.py): LoadAlign NORM /
DIST_UNPACK_B16 clipped at the tensor's end, UnPack (u16 -> u32, lower half), Cast fp16 / bf16 -> fp32 with a
RegLayout, each against hand-worked lanes."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, ElementTypeError, ParamRangeError
from ascend_sim._jit import global_aicore

from .harness import run_vf


@global_aicore
def finalize_vf_kernel(c, p, src, dst):
    """p[0] picks the scenario, p[1..] its arguments; x = src (1024 bytes) in UB, y (1024 bytes) dumped to dst."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), x.size)
    asc.duplicate(c, y, 0.0, y.size)
    xh = asc.view_as(c, x, asc.ub_u16(c))
    if asc.vec_scope_begin(c):
        full = asc.mreg(c, 1)
        m = asc.mreg(c, 0)
        asc.create_mask(c, full, 4, asc.PAT_ALL)
        r = asc.vreg_f32(c, 0)
        h = asc.vreg_u16(c, 5)
        w = asc.vreg_u32(c, 6)
        op = p[0]
        if op == 0:      # LoadAlign DIST_UNPACK_B16 at element p[1] of the first p[2] halves, stored as u16
            asc.reg_load_align(c, h, xh[: p[2]], p[1], True)
            asc.reg_store(c, asc.view_as(c, y, asc.ub_u16(c)), h, 0, full)
        elif op == 1:    # LoadAlign NORM at element p[1] of the first p[2] floats
            asc.reg_load_align(c, r, x[: p[2]], p[1], False)
            asc.reg_store(c, y, r, 0, full)
        elif op == 2:    # UnPack of the halves of x
            asc.reg_load(c, h, xh, 0, asc.LOAD_NORM)
            asc.vunpack_u16_to_u32(c, w, h)
            asc.reg_store(c, asc.view_as(c, y, asc.ub_u32(c)), w, 0, full)
        elif op == 3:    # Cast b16 (dtype p[1]) -> fp32, RegLayout p[2], first p[3] lanes, merge mode p[4]
            asc.reg_load(c, h, xh, 0, asc.LOAD_NORM)
            asc.vduplicate(c, r, np.float32(7.0), full)
            asc.update_mask(c, m, 4, p[3])
            asc.vcast_half_to_f32(c, r, h, p[1], p[2], m, p[4])
            asc.reg_store(c, y, r, 0, full)
        elif op == 4:    # unaligned load + UnPack + Cast: the LoadInputDataUnalign<b16> chain of p[2] halves at p[1]
            asc.reg_load_unalign(c, h, xh, p[1], p[2])
            asc.vunpack_u16_to_u32(c, w, h)
            asc.vcast_half_to_f32(c, r, asc.vreg_u16(c, 6), asc.DT_BF16, asc.LAYOUT_ZERO, full)
            asc.reg_store(c, y, r, 0, full)
        elif op == 5:    # a cast from an unsupported source type p[1]
            asc.vcast_half_to_f32(c, r, h, p[1], asc.LAYOUT_ZERO, full)
        elif op == 6:    # an unpacking load into a 32-bit register
            asc.reg_load_align(c, asc.vreg_u32(c, 7), asc.view_as(c, x, asc.ub_u32(c)), 0, True)
        asc.vec_scope_end(c)
    asc.data_copy(c, asc.gm_at(dst, 0), y, y.size)


def launch(p, src):
    return run_vf(finalize_vf_kernel, p, np.ascontiguousarray(src).view(np.float32).copy(), np.zeros(256, np.float32))


HALVES = (np.arange(512, dtype=np.uint32) * 977 % 65536).astype(np.uint16)


def test_unpack_load_puts_element_i_in_even_slot_2i():
    got = launch([0, 16, 512], HALVES).view(np.uint16)[:128]
    want = np.zeros(128, np.uint16)
    want[0::2] = HALVES[16:80]
    assert np.array_equal(got, want)


def test_unpack_load_past_the_tensor_end_zeroes_the_missing_lanes():
    # 40 halves remain from element 32 of a 72-half tensor: slots 0..78 (even) filled, the rest 0
    got = launch([0, 32, 72], HALVES).view(np.uint16)[:128]
    want = np.zeros(128, np.uint16)
    want[0:80:2] = HALVES[32:72]
    assert np.array_equal(got, want)


def test_norm_load_clipped_at_the_tensor_end():
    src = np.arange(256, dtype=np.float32) + 0.5
    got = launch([1, 40, 64], src)[:64]
    want = np.zeros(64, np.float32)
    want[:24] = src[40:64]
    assert np.array_equal(got, want)


def test_aligned_loads_fault_on_a_misaligned_start():
    with pytest.raises(AlignmentError):
        launch([0, 3, 512], HALVES)
    with pytest.raises(AlignmentError):
        launch([1, 2, 256], np.zeros(256, np.float32))


def test_unpack_zero_extends_the_lower_64_halves():
    got = launch([2], HALVES).view(np.uint32)[:64]
    assert np.array_equal(got, HALVES[:64].astype(np.uint32))


# bf16 / fp16 bit patterns and their fp32 values (hand-worked)
BF16_BITS = [0x3F80, 0xBFC0, 0x8000, 0x7FC1, 0xFF80, 0x0001]       # 1, -1.5, -0, NaN (payload), -inf, 2^-133
BF16_F32 = [0x3F800000, 0xBFC00000, 0x80000000, 0x7FC10000, 0xFF800000, 0x00010000]
F16_BITS = [0x3C00, 0xC200, 0x8000, 0x7E01, 0xFC00, 0x0001]        # 1, -3, -0, NaN (payload), -inf, 2^-24
F16_F32 = [0x3F800000, 0xC0400000, 0x80000000, 0x7FC02000, 0xFF800000, 0x33800000]


@pytest.mark.parametrize("dt,bits,want", [(asc.DT_BF16, BF16_BITS, BF16_F32), (asc.DT_FLOAT16, F16_BITS, F16_F32)],
                         ids=["bf16", "fp16"])
@pytest.mark.parametrize("layout", [asc.LAYOUT_ZERO, asc.LAYOUT_ONE], ids=["ZERO-even", "ONE-odd"])
def test_cast_b16_to_f32_exact_by_layout(dt, bits, want, layout):
    src = np.zeros(512, np.uint16)
    src[layout: 2 * len(bits): 2] = bits
    got = launch([3, dt, layout, 64, asc.ZEROING], src).view(np.uint32)[:64]
    expect = np.zeros(64, np.uint32)
    expect[: len(want)] = want
    assert [hex(v) for v in got] == [hex(v) for v in expect]


@pytest.mark.parametrize("mode,rest", [(asc.ZEROING, 0.0), (asc.MERGING, 7.0)], ids=["zeroing", "merging"])
def test_cast_b16_to_f32_inactive_lanes(mode, rest):
    src = np.zeros(512, np.uint16)
    src[0::2][:64] = 0x4000                       # bf16 2.0 in every even slot
    got = launch([3, asc.DT_BF16, asc.LAYOUT_ZERO, 5, mode], src)[:64]
    assert np.array_equal(got[:5], np.full(5, 2.0, np.float32)) and np.all(got[5:] == rest)


def test_unaligned_b16_load_unpack_cast_chain():
    src = np.zeros(512, np.uint16)
    src[3:13] = np.arange(10, dtype=np.uint16) * 0x80 + 0x3F80   # bf16 1.0, 1.0 + 2^-7 * k ...
    got = launch([4, 3, 10], src)[:64]
    want = np.zeros(64, np.float32)
    want[:10] = ((np.arange(10, dtype=np.uint32) * 0x80 + 0x3F80) << 16).view(np.float32)
    assert np.array_equal(got, want)


def test_faults_of_the_new_instructions():
    with pytest.raises(ParamRangeError):
        launch([5, asc.DT_FLOAT], np.zeros(256, np.float32))
    with pytest.raises(ElementTypeError):
        launch([6], np.zeros(256, np.float32))
