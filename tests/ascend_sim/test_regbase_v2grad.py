"""The register instructions MoeInitRoutingV2Grad's VFs add to regbase.py: the UNPACK_B16 load, the fp16 / bf16 ->
fp32 and fp32 -> bf16 casts with their RegLayout, the PACK_B32 store; each against hand-worked lanes."""
from __future__ import annotations

import numpy as np
import pytest

import ascend_sim.kernel_api as asc
from ascend_sim import AlignmentError, ElementTypeError
from ascend_sim._jit import global_aicore
from ascend_sim.dtypes import DT_BF16, DT_FLOAT16

from .harness import run_vf

F32 = 4


@global_aicore
def v2grad_vf_kernel(c, p, src, dst):
    """p[0] picks the scenario, p[1..3] its arguments; x = src (1024 bytes) in UB, y (zeroed) dumped to dst."""
    x = asc.tbuf_get(c, 0, asc.ub_f32(c))
    y = asc.tbuf_get(c, 1, asc.ub_f32(c))
    asc.data_copy(c, x, asc.gm_at(src, 0), x.size)
    asc.duplicate(c, y, 0.0, y.size)
    x16 = asc.view_as(c, x, asc.ub_u16(c))
    y16 = asc.view_as(c, y, asc.ub_u16(c))
    if asc.vec_scope_begin(c):
        h = asc.vreg_u16(c, 0)
        f = asc.vreg_f32(c, 1)
        m = asc.mreg(c, 0)
        all16 = asc.mreg(c, 1)
        asc.create_mask(c, all16, 2, asc.PAT_ALL)
        op = p[0]
        if op == 0:      # UNPACK_B16 load at element p[1], the register stored as it is (128 uint16 slots)
            nxt = asc.reg_load_unpack_b16(c, h, x16, p[1])
            asc.reg_store(c, y16, h, 0, all16)
            y16[511] = nxt
        elif op == 1:    # Cast 16-bit (dtype code p[1], layout p[2]) -> fp32 on the first p[3] lanes (ZEROING)
            asc.reg_load(c, h, x16, 0, asc.LOAD_NORM)
            asc.update_mask(c, m, F32, p[3])
            asc.vcast_half_to_f32(c, f, h, p[1], p[2], m)
            asc.reg_store(c, y, f, 0, all16)
        elif op == 2:    # Cast fp32 -> bf16, round mode p[1], layout p[2], every lane
            asc.create_mask(c, m, F32, asc.PAT_ALL)
            asc.reg_load(c, f, x, 0, asc.LOAD_NORM)
            asc.vcast_f32_to_bf16(c, h, f, p[1], p[2], m)
            asc.reg_store(c, y16, h, 0, all16)
        elif op == 3:    # PACK_B32 store of the first p[1] 32-bit lanes of x's uint16 slots at element p[2] of y
            asc.reg_load(c, h, x16, 0, asc.LOAD_NORM)
            asc.update_mask(c, m, F32, p[1])
            nxt = asc.reg_store_pack_b32(c, y16, h, p[2], m)
            y16[511] = nxt
        elif op == 4:    # UNPACK_B16 into an fp32 register (element type fault)
            asc.reg_load_unpack_b16(c, f, x16, 0)
        asc.vec_scope_end(c)
    asc.data_copy(c, asc.gm_at(dst, 0), y, y.size)


def launch(p, src):
    return run_vf(v2grad_vf_kernel, p, np.ascontiguousarray(src).view(np.float32).copy(), np.zeros(256, np.float32))


HALVES = (np.arange(512, dtype=np.uint32) * 977 % 65536).astype(np.uint16)


@pytest.mark.parametrize("at", [0, 16, 384], ids=lambda a: f"at{a}")
def test_unpack_b16_puts_element_i_in_the_low_half_of_lane_i(at):
    got = launch([0, at], HALVES).view(np.uint16)
    want = np.zeros(128, dtype=np.uint16)
    want[0::2] = HALVES[at: at + 64]
    assert np.array_equal(got[:128], want)
    assert got[511] == at + 64                       # post-update address: 64 elements on


def test_unpack_b16_needs_a_32_byte_address_and_a_16_bit_register():
    with pytest.raises(AlignmentError):
        launch([0, 1], HALVES)
    with pytest.raises(ElementTypeError):
        launch([4], HALVES)


# uint16 slot 2i (ZERO) or 2i + 1 (ONE) -> fp32 bits, worked by hand
F16_IN = [0x3C00, 0xC000, 0x0001, 0x7C00, 0xFE00, 0x8000]      # 1, -2, 2^-24 (subnormal), +inf, NaN, -0
F16_OUT = [0x3F800000, 0xC0000000, 0x33800000, 0x7F800000, 0xFFC00000, 0x80000000]
BF16_IN = [0x3F80, 0xC040, 0x0001, 0x7F80, 0x7FC1, 0x8000]      # 1, -3, smallest subnormal, +inf, NaN, -0
BF16_OUT = [0x3F800000, 0xC0400000, 0x00010000, 0x7F800000, 0x7FC10000, 0x80000000]


@pytest.mark.parametrize("layout", [asc.LAYOUT_ZERO, asc.LAYOUT_ONE], ids=["ZERO", "ONE"])
@pytest.mark.parametrize("dt,ins,outs", [(DT_FLOAT16, F16_IN, F16_OUT), (DT_BF16, BF16_IN, BF16_OUT)],
                         ids=["fp16", "bf16"])
def test_cast_16_bit_to_f32_is_exact_and_reads_the_layouts_slot(dt, ins, outs, layout):
    src = np.full(512, 0x4000, dtype=np.uint16)      # 2.0 (fp16) / 2.0 (bf16) in the slot the layout skips
    src[layout: 2 * len(ins): 2] = ins
    got = launch([1, dt, layout, 5], src).view(np.uint32)
    want = np.zeros(256, dtype=np.uint32)
    want[:5] = outs[:5]                              # lanes past the mask's 5 are zeroed
    assert [hex(v) for v in got[:64]] == [hex(v) for v in want[:64]]


BF16_CAST_IN = [0x3F800000, 0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7FC00001, 0xBFC00000, 0x00000001]
BF16_CAST_WANT = {
    asc.CAST_RINT: [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7FC0, 0xBFC0, 0x0000],
    asc.CAST_TRUNC: [0x3F80, 0x3F80, 0x3F81, 0x3F80, 0x7F7F, 0x7FC0, 0xBFC0, 0x0000],
    asc.CAST_ODD: [0x3F80, 0x3F81, 0x3F81, 0x3F81, 0x7F7F, 0x7FC0, 0xBFC0, 0x0001],
}


@pytest.mark.parametrize("layout", [asc.LAYOUT_ZERO, asc.LAYOUT_ONE], ids=["ZERO", "ONE"])
@pytest.mark.parametrize("rnd", list(BF16_CAST_WANT), ids=["RINT", "TRUNC", "ODD"])
def test_cast_f32_to_bf16_round_modes_and_layout(rnd, layout):
    src = np.zeros(256, dtype=np.uint32)
    src[: len(BF16_CAST_IN)] = BF16_CAST_IN
    got = launch([2, rnd, layout], src).view(np.uint16)[:128]
    want = np.zeros(128, dtype=np.uint16)
    want[layout: 2 * len(BF16_CAST_IN): 2] = BF16_CAST_WANT[rnd]
    assert [hex(v) for v in got] == [hex(v) for v in want]


@pytest.mark.parametrize("n,at", [(64, 0), (10, 48), (0, 64)], ids=["all-at0", "10-at48", "none"])
def test_pack_b32_stores_the_low_half_of_each_active_lane(n, at):
    got = launch([3, n, at], HALVES).view(np.uint16)
    want = np.zeros(512, dtype=np.uint16)
    want[at: at + n] = HALVES[0: 2 * n: 2]
    want[511] = at + 64
    assert np.array_equal(got, want)


def test_pack_b32_needs_a_32_byte_address():
    with pytest.raises(AlignmentError):
        launch([3, 4, 3], HALVES)
